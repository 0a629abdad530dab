"""``python -m framework.config schema``: print the JSON Schema of test_env.yaml."""

import sys

from framework.config.document import main

sys.exit(main())
