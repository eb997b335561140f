"""How the command shows the ``preparer`` logger: the lifecycle's line format, streams and colours.

Info and debug lines go to stdout without a prefix; warnings to stderr as ``Warning: …`` and errors as
``ERROR: …`` (contract §5). Colour only on a terminal, and never with ``-no-color`` or ``NO_COLOR``.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
_YELLOW, _RED, _CYAN, _RESET = "\033[1;33m", "\033[1;31m", "\033[0;36m", "\033[0m"


class LifecycleHandler(logging.Handler):
    """Writes records the way lifecycle phases do."""

    def __init__(self, stdout: TextIO, stderr: TextIO, color: bool) -> None:
        super().__init__()
        self.stdout, self.stderr, self.color = stdout, stderr, color

    def paint(self, text: str, color: str) -> str:
        return f"{color}{text}{_RESET}" if self.color else text

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.levelno >= logging.ERROR:
                stream, line = self.stderr, self.paint("ERROR: ", _RED) + message
            elif record.levelno >= logging.WARNING:
                stream, line = self.stderr, self.paint("Warning: ", _YELLOW) + message
            else:
                stream = self.stdout
                line = self.paint(message, _CYAN) if message.startswith("===> ") else message
            stream.write(line + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 (a logging handler never raises)
            self.handleError(record)


def configure(
    level: str, color: bool, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> logging.Logger:
    """Route the ``preparer`` logger to the lifecycle-style handler at ``level``."""
    logger = logging.getLogger("preparer")
    for handler in list(logger.handlers):
        if isinstance(handler, LifecycleHandler):
            logger.removeHandler(handler)
    logger.addHandler(LifecycleHandler(stdout or sys.stdout, stderr or sys.stderr, color))
    logger.setLevel(LEVELS.get(level, logging.INFO))
    logger.propagate = False
    return logger
