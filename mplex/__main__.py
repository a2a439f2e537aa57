"""``python -m mplex``: the same as the ``mplex`` command."""

import sys

from ._cli import main

sys.exit(main())
