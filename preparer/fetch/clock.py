"""The run's time: its limit (``CNB_PREPARER_RUN_TIMEOUT``), which every download and repository read of the run
shares, and the deadlines within it (a download's, a record's).

A :class:`RunClock` is the run's; a :class:`Deadline` says when one thing must be over and what to say when it is
not. When the run's time is up, every socket its requests opened is shut down, so that a thread blocked on one
wakes at once (:meth:`RunClock.watch`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

from preparer.errors import FetchError, RunLimitReached


class Deadline:
    """When something must be over (``time.monotonic()``), and what to say when it is not."""

    __slots__ = ("at", "cause", "whole_run")

    def __init__(self, at: float, cause: str, whole_run: bool = False) -> None:
        self.at = at
        #: ``it took longer than 1800 s in all (CNB_PREPARER_DOWNLOAD_TIMEOUT)``.
        self.cause = cause
        #: Whether it is the run's own end (then every fetch of the run is over, and it is said once).
        self.whole_run = whole_run

    def passed(self) -> bool:
        return time.monotonic() > self.at

    def error(self, action: str, what: str = "") -> FetchError:
        """The error of ``action`` for a deadline that passed (``what``: the part of it that was not over)."""
        kind = RunLimitReached if self.whole_run else FetchError
        return kind(action, f"{what}: {self.cause}" if what else self.cause)


class RunClock:
    """One run's time limit (``CNB_PREPARER_RUN_TIMEOUT``): every download and repository read of the run shares
    it. When it passes, every socket the run's requests opened is shut down, so that a thread blocked reading one
    wakes at once, and every fetch ends as a failed fetch (exit 1, nothing installed): many slow servers together
    cannot hold a build for longer than this, whatever each of them is allowed alone."""

    def __init__(self, seconds: float | None = None) -> None:
        import weakref  # deferred with the rest of the fetching machinery

        self.seconds = seconds
        self.ends = None if seconds is None else time.monotonic() + seconds
        self._sockets: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._over = False

    @property
    def cause(self) -> str:
        return f"the run took longer than {self.seconds:g} s in all (CNB_PREPARER_RUN_TIMEOUT)"

    def stop(self) -> None:
        """The run is over: no watchdog is needed any more."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()

    def watch(self, sock: Any) -> None:
        """Shut ``sock`` down when the run's time is up (the watchdog that does it starts with the first socket:
        a run that opens none, a warm one, starts no thread)."""
        if sock is None or self.ends is None:
            return
        with self._lock:
            self._sockets.add(sock)
            over = self._over
            if self._timer is None and not over:
                self._timer = threading.Timer(max(0.0, self.ends - time.monotonic()), self._expire)
                self._timer.daemon = True
                self._timer.start()
        if over:
            _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self._over = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def check(self, action: str) -> None:
        """:raises RunLimitReached: the run's time is up."""
        if self.ends is not None and time.monotonic() >= self.ends:
            raise RunLimitReached(action, self.cause)

    def left(self) -> float | None:
        """Seconds left, or ``None`` without a limit."""
        return None if self.ends is None else max(0.0, self.ends - time.monotonic())

    def deadline(self, within: float | None, cause: str) -> Deadline | None:
        """The earlier of ``within`` seconds from now (said as ``cause``) and the run's end."""
        candidates = [] if within is None else [Deadline(time.monotonic() + within, cause)]
        if self.ends is not None:
            candidates.append(Deadline(self.ends, self.cause, whole_run=True))
        return min(candidates, key=lambda deadline: deadline.at, default=None)


def _shut(sock: Any) -> None:
    with contextlib.suppress(OSError):  # closed already
        sock.shutdown(2)  # socket.SHUT_RDWR, without importing socket
