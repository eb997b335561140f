"""``python -m preparer``."""

from preparer.cli import entry

entry()
