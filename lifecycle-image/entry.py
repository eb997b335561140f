"""Entry point of the self-contained /cnb/lifecycle/preparer executable."""

from preparer.cli import entry

if __name__ == "__main__":
    entry()
