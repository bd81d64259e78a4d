"""``python -m wsealloc.cli ...``: the same as the ``wsealloc`` command."""

import sys

from wsealloc.cli.app import main

sys.exit(main())
