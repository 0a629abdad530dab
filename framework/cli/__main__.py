"""``python -m framework.cli``: the ``camit`` console script."""

import sys

from framework.cli import main

if __name__ == "__main__":
    sys.exit(main())
