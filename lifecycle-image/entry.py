"""Entry point of /cnb/lifecycle/preparer in the lifecycle image (a PyInstaller one-directory bundle)."""

import os
import sys


def _restore_environment() -> None:
    """The launcher restarts itself once with ``LD_LIBRARY_PATH`` pointing into preparer.d and ``_PYI_*`` markers
    added; the programs the preparer starts (credential helpers) get the environment the platform gave instead."""
    for name in [n for n in os.environ if n.startswith("_PYI_")]:
        del os.environ[name]
    original = os.environ.pop("LD_LIBRARY_PATH_ORIG", None)
    if original is None:
        os.environ.pop("LD_LIBRARY_PATH", None)
    else:
        os.environ["LD_LIBRARY_PATH"] = original


if __name__ == "__main__":
    if getattr(sys, "frozen", False):
        _restore_environment()
    from preparer.__main__ import main

    main()
