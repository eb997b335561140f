"""How the command shows the ``preparer`` logger: the lifecycle's line format, streams and colours.

Info and debug lines go to stdout without a prefix; warnings to stderr as ``Warning: …`` and errors as
``ERROR: …``. Colour only on a terminal, and never with ``-no-color`` or ``NO_COLOR``.
"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING, "error": logging.ERROR}
_YELLOW, _RED, _CYAN, _RESET = "\033[1;33m", "\033[1;31m", "\033[0;36m", "\033[0m"


class LifecycleHandler(logging.Handler):
    """Writes records the way lifecycle phases do, each stream coloured only when it is a terminal.

    Without explicit streams, ``sys.stdout`` and ``sys.stderr`` are looked up at every record, so a progress
    display that redirects them (rich) keeps log lines above its bars.
    """

    def __init__(
        self, stdout: TextIO | None = None, stderr: TextIO | None = None, color: bool = True
    ) -> None:
        super().__init__()
        self._stdout, self._stderr, self.color = stdout, stderr, color

    def _stream(self, error: bool) -> TextIO:
        if error:
            return self._stderr or sys.stderr
        return self._stdout or sys.stdout

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = printable(record.getMessage())
            error = record.levelno >= logging.WARNING
            stream = self._stream(error)
            paint = self.color and _isatty(stream)
            if getattr(record, "continued", False):  # one more line of the record before it
                line = "  " + message
            elif record.levelno >= logging.ERROR:
                line = _paint("ERROR: ", _RED, paint) + message
            elif record.levelno >= logging.WARNING:
                line = _paint("Warning: ", _YELLOW, paint) + message
            else:
                line = _paint(message, _CYAN, paint) if message.startswith("===> ") else message
            if record.exc_info and record.levelno <= logging.DEBUG:
                line += "\n" + logging.Formatter().formatException(record.exc_info)
            stream.write(line + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 (a logging handler never raises)
            self.handleError(record)

    def handleError(self, record: logging.LogRecord) -> None:
        """Drop the line: a reader that went away (a closed pipe) must not stop the build or print a traceback."""


#: Characters never written as they are: a newline in an id from an archive would forge an ``ERROR:`` line in a CI
#: log, an escape byte would drive the terminal.
_UNPRINTABLE = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))} | {
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def printable(text: str) -> str:
    """``text`` with control characters written as escapes (``\\n`` becomes ``\\x0a``): one line, no terminal
    control, whatever strings from project.toml, archives or servers it quotes.

    >>> printable("id\\nERROR: forged\\x1b[2J")
    'id\\\\x0aERROR: forged\\\\x1b[2J'
    """
    return text.translate(_UNPRINTABLE)


def _paint(text: str, color: str, on: bool) -> str:
    return f"{color}{text}{_RESET}" if on else text


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream is no terminal
        return False


def configure(
    level: str, color: bool, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> logging.Logger:
    """Route the ``preparer`` logger to the lifecycle-style handler at ``level``.

    :param color: allow colour; it is used only on a stream that is a terminal.
    :param stdout: info and debug lines (default: the current ``sys.stdout`` at each record).
    :param stderr: warnings and errors (default: the current ``sys.stderr`` at each record).
    """
    logger = logging.getLogger("preparer")
    for handler in list(logger.handlers):
        if isinstance(handler, LifecycleHandler):
            logger.removeHandler(handler)
    logger.addHandler(LifecycleHandler(stdout, stderr, color))
    logger.setLevel(LEVELS.get(level, logging.INFO))
    logger.propagate = False
    return logger
