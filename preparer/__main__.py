"""``python -m preparer``."""

import sys

from preparer.cli import main

sys.exit(main())
