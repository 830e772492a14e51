"""``python -m state_reader``: the ``state-reader`` command line."""

import sys

from state_reader.fronts.cli import main

sys.exit(main())
