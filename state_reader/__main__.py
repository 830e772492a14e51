"""``python -m state_reader``: the ``state-reader`` command line."""

import sys

from .cli import main

sys.exit(main())
