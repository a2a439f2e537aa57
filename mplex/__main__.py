"""``python -m mplex``: the same as the ``mplex`` command."""

import sys

from mplex._cli import main

sys.exit(main())
