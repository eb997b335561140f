"""The ``preparer`` logger every library module logs to. It never prints by itself: without a handler of the
caller's, records go nowhere (the command installs its own, :mod:`preparer.log`).

Every record carries the id of the run that logged it (``record.run_id``), so that a service running many builds
at once can tell their lines apart: the run's own threads run in a copy of its context, where the id is set.
"""

from __future__ import annotations

import contextvars
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

logger = logging.getLogger("preparer")
logger.addHandler(logging.NullHandler())


class CallerFailed(BaseException):
    """Code of the caller's raised ``error`` inside a run: a logging handler or filter, a ``progress`` callback, a
    SIGINT handler. It leaves the run as the caller's own exception, never as one of the package's: on its way it is
    a :class:`BaseException`, so that no ``except Exception`` converts it, and the entry points
    (:func:`preparer.pipeline.typed`) raise ``error`` itself."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class _Log:
    """The ``preparer`` logger as the library's modules call it: what a handler or filter of the caller's raises
    from a call is :class:`CallerFailed` (records are made and located as by the logger itself)."""

    def __init__(self, target: logging.Logger) -> None:
        self.target = target

    def _say(self, level: int, msg: object, args: tuple[object, ...], kwargs: dict[str, Any]) -> None:
        if not self.target.isEnabledFor(level):
            return
        kwargs.setdefault("stacklevel", 3)  # the line that called debug/info/..., not this module
        try:
            self.target.log(level, msg, *args, **kwargs)
        except Exception as err:
            raise CallerFailed(err) from err

    def debug(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._say(logging.DEBUG, msg, args, kwargs)

    def info(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._say(logging.INFO, msg, args, kwargs)

    def warning(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._say(logging.WARNING, msg, args, kwargs)

    def error(self, msg: object, *args: object, **kwargs: Any) -> None:
        self._say(logging.ERROR, msg, args, kwargs)


#: What the library's modules log with (the ``preparer`` logger, :class:`_Log`).
log = _Log(logger)

_run_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("preparer_run_id", default=None)
#: When the current run began (seconds since the epoch), set with its id.
_started: contextvars.ContextVar[float | None] = contextvars.ContextVar("preparer_run_started", default=None)


class _RunId(logging.Filter):
    """Sets ``record.run_id``: the id of the run that logs it (``None`` outside a run)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.run_id = _run_id.get()
        return True


logger.addFilter(_RunId())


@contextmanager
def named_run(run_id: str | None) -> Iterator[str]:
    """The id of the run the block is (``run_id``, or a new one); within a run, the run's own (``prepare`` calls
    ``plan_run`` and ``run_plan``)."""
    current = _run_id.get()
    if current is not None and run_id in (None, current):
        yield current
        return
    token = _run_id.set(run_id or os.urandom(6).hex())
    started = _started.set(time.time())
    try:
        yield _run_id.get() or ""
    finally:
        _started.reset(started)
        _run_id.reset(token)


def outside_run() -> None:
    """In the current context, no run: what a callback of the caller's is called in (its own builds name
    themselves)."""
    _run_id.set(None)
    _started.set(None)


def current_run() -> tuple[str | None, float | None]:
    """The id of the run the caller is in and when it began (``(None, None)`` outside a run)."""
    return _run_id.get(), _started.get()
