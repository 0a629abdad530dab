"""Fake ``msnpureport`` of an emulated Ascend host: export the devices' logs into the current directory.

NOT a capture: no real msnpureport run was recorded (ascend-hosts.md §8 says only that device-side logs
are exported to the host). Run without options it creates ``./<yyyymmddHHMMSS>/<host>/device-<id>/`` for
every device (empty: an emulated device writes no device-side log) and prints where; ``-h`` prints the
usage; anything else fails. Stdlib only (copied into the emulated host's tree).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .common import Host, err, out

USAGE = "Usage: msnpureport [-h]  (export the device logs of every device into ./<timestamp>/)"


def main(argv: Sequence[str], emu: Path) -> int:
    host = Host(emu)
    if list(argv) in (["-h"], ["--help"]):
        out(USAGE)
        return 0
    if argv:
        err(f"Error: invalid parameter: {argv[0]}")
        err(USAGE)
        return 1
    root = Path.cwd() / time.strftime("%Y%m%d%H%M%S") / str(host.info["host"])
    for dev in range(host.count):
        (root / f"device-{dev}").mkdir(parents=True, exist_ok=True)
    out(f"export device logs of {host.count} devices to {root}: done")
    return 0


if __name__ == "__main__":  # pragma: no cover - the tree's launcher calls main
    sys.exit(main(sys.argv[1:], Path(__file__).resolve().parents[2]))
