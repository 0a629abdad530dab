"""A torchrun target that prints when it ran: ``START <epoch>``, sleeps ``argv[1]`` seconds, ``END <epoch>``."""

import sys
import time

print(f"START {time.time():.3f}", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 10.0)
print(f"END {time.time():.3f}", flush=True)
