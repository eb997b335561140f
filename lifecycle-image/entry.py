"""Entry point of the self-contained /cnb/lifecycle/preparer executable."""

import sys

from preparer.cli import main

if __name__ == "__main__":
    sys.exit(main())
