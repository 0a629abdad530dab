"""``python -m framework.artifacts build``: the documented entry point of :mod:`framework.lab.artifacts`.

The lab's artifacts belong to the lab package; this module only keeps the documented command working.
"""

import sys

from framework.lab.artifacts import main

if __name__ == "__main__":
    sys.exit(main())
