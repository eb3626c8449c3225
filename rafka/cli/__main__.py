"""``python -m rafka.cli``: the ``rafka`` command line."""

import sys

from rafka.cli import main

if __name__ == "__main__":
    sys.exit(main())
