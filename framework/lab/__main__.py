"""``python -m framework.lab up|down|status|fault``: the network-namespace lab (see :mod:`framework.lab.manage`)."""

import sys

from framework.lab.manage import main

sys.exit(main())
