"""``python -m framework.cli``: the ``camit`` console script."""

import sys

from framework.cli import main

sys.exit(main())
