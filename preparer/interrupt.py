"""Stopping runs when the process is asked to stop (SIGINT, SIGTERM), quickly and leaving nothing behind.

A signal is for the whole process, so stopping is too: :func:`stop` sets one flag that every run's fetch threads
check between pieces of work (each piece of a body, each archive entry, each file copied, each retry), and shuts
down the sockets they are blocked on, so a thread waiting for a slow server wakes at once. The run's main thread
gets :class:`Interrupted`, raised by the handler of :func:`handle_signals` (the command installs it) and by
:func:`check`; its ``finally`` blocks remove what the run staged.

The commit's last steps cannot be undone half-way (renames into place, deleting moved-aside files), so a signal
that arrives during them is held (:func:`deferred`) and raised when they are done: the run is then reported as
interrupted, and its outputs are complete. Library callers stop runs from another thread with :func:`stop`.
"""

from __future__ import annotations

import contextlib
import contextvars
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import socket
    from types import FrameType

#: ``socket.SHUT_RDWR``, without importing socket (a run that downloads nothing never needs it).
_SHUT_RDWR = 2

T = TypeVar("T")

__all__ = [
    "CalledOff",
    "Interrupted",
    "Scope",
    "armed",
    "check",
    "deferred",
    "handle_signals",
    "run",
    "sleep",
    "stop",
    "stopping",
    "watch",
]

_stop = threading.Event()
_state_lock = threading.RLock()  # re-entered by a signal handler in the main thread
_signum = 0
_live_runs = 0
#: Sockets of the runs' requests: shut down by :func:`stop`, which wakes a thread blocked reading one; forgotten
#: when the last run ends.
_sockets: set[socket.socket] = set()
#: Main-thread state of :func:`deferred`: how deep, and the signal held meanwhile (0: none).
_deferring = 0
_held = 0
#: Whether the main thread was sent :class:`Interrupted` during the runs in progress.
_raised = False
#: How deep the main thread is in :func:`armed` blocks, where a signal raises at once.
_armed = 0


class Interrupted(KeyboardInterrupt):
    """The run was asked to stop. Like :class:`KeyboardInterrupt`, it is no :class:`Exception`, so that no
    ``except Exception`` turns it into another error on its way out."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        self.signum = signum
        #: The exit code of a process ended by this signal, as shells report it: 130 for SIGINT, 143 for SIGTERM.
        self.exit_code = 128 + signum
        super().__init__(self.message)

    @property
    def message(self) -> str:
        """``failed to prepare: interrupted (SIGTERM)``."""
        return f"failed to prepare: interrupted ({signal.Signals(self.signum).name})"


class CalledOff(BaseException):
    """The work of a :class:`Scope` was called off (another fetch of the group failed). Like
    :class:`Interrupted`, no :class:`Exception`, so that nothing on its way out turns it into an error of its own;
    it never leaves the scope's owner."""


class Scope:
    """Work of one run that can be called off on its own, as when one fetch of a group fails and the others are
    doomed: its threads stop at their next :func:`check` (or :func:`sleep`) with :class:`CalledOff`, and every
    socket they opened is shut down, so that a thread blocked on a slow server wakes at once. Work runs in the
    scope through :meth:`run`, in a copy of the caller's context; the scope and its sockets die with its owner."""

    def __init__(self) -> None:
        self._called_off = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()

    @property
    def called_off(self) -> bool:
        return self._called_off.is_set()

    def run(self, work: Callable[[], T]) -> Callable[[], T]:
        """``work`` to run in this scope (in another thread), in a copy of the current context."""
        context = contextvars.copy_context()

        def scoped() -> T:
            return context.run(self._enter, work)

        return scoped

    def _enter(self, work: Callable[[], T]) -> T:
        _scope.set(self)
        return work()

    def call_off(self) -> None:
        """Stop the scope's work: threads at their next check, blocked reads at once."""
        with self._lock:
            self._called_off.set()
            sockets, self._sockets = list(self._sockets), set()
        for sock in sockets:
            with contextlib.suppress(OSError):  # already closed
                sock.shutdown(_SHUT_RDWR)

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            if not self._called_off.is_set():
                self._sockets.add(sock)
                return
        with contextlib.suppress(OSError):
            sock.shutdown(_SHUT_RDWR)


#: The scope the current thread's work belongs to (:meth:`Scope.run`), if any.
_scope: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("preparer_scope", default=None)


def stop(signum: int = signal.SIGINT) -> None:
    """Ask every run of this process to stop: fetch threads end at their next check, blocked reads wake."""
    global _signum
    with _state_lock:
        if not _stop.is_set():
            _signum = signum
        _stop.set()
        sockets = list(_sockets)
    for sock in sockets:
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(_SHUT_RDWR)


def stopping() -> bool:
    """Whether :func:`stop` was called since the runs in progress began."""
    return _stop.is_set()


def check() -> None:
    """Raise :class:`Interrupted` when the runs were asked to stop, :class:`CalledOff` when the current thread's
    scope was called off; cheap enough to call per file."""
    if _stop.is_set():
        raise Interrupted(_signum)
    scope = _scope.get()
    if scope is not None and scope.called_off:
        raise CalledOff


def sleep(seconds: float) -> None:
    """Sleep, unless and until the runs are asked to stop (or the current scope is called off).

    :raises Interrupted: when they are, at once (:class:`CalledOff` within a tenth of a second).
    """
    ends = time.monotonic() + seconds
    while (left := ends - time.monotonic()) > 0:
        if _stop.wait(min(left, 0.1)):
            raise Interrupted(_signum)
        check()


def watch(sock: socket.socket | None) -> None:
    """Shut ``sock`` down if the runs are asked to stop while it is open (only within :func:`run`), or the current
    thread's scope is called off."""
    if sock is None:
        return
    scope = _scope.get()
    if scope is not None:
        scope.watch(sock)
    with _state_lock:
        if _live_runs:
            _sockets.add(sock)
    if _stop.is_set():
        stop(_signum)


@contextmanager
def run() -> Iterator[None]:
    """The extent of one run. A request to stop lasts until no run is left, so a process that goes on (a library
    caller that caught :class:`Interrupted`) starts its next run afresh."""
    global _live_runs, _raised
    with _state_lock:
        if _live_runs == 0:
            _stop.clear()
        _live_runs += 1
    try:
        yield
    finally:
        with _state_lock:
            _live_runs -= 1
            if _live_runs == 0:
                _raised = False
                _sockets.clear()


@contextmanager
def deferred() -> Iterator[None]:
    """In the main thread, hold a signal that arrives during the block and raise it when the block is done.

    Fetch threads still stop at once, and :func:`check` still raises in the block: it is how the block chooses
    the points where stopping is safe. Elsewhere than the main thread (which is the only one signals reach), the
    block is run as it is.
    """
    global _deferring, _held
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        held = _held if _deferring == 0 else 0
        if held:
            _held = 0
    if held:  # not reached when the block raised: that error goes on
        raise Interrupted(held)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _held, _raised
    stop(signum)
    if _deferring:
        _held = _held or signum
    elif _armed and not _raised:  # a second signal would break into the clean-up the first one started
        _raised = True
        raise Interrupted(signum)


@contextmanager
def armed() -> Iterator[None]:
    """The block where a signal raises :class:`Interrupted` in the main thread at once (the command's phase).
    Elsewhere it is only recorded (:func:`stop`): a signal before the block makes the block raise as it starts;
    one after it leaves work that is done as it is.

    :raises Interrupted: the runs were asked to stop before the block.
    """
    global _armed
    check()
    _armed += 1
    try:
        yield
    finally:
        _armed -= 1


def handle_signals() -> None:
    """Make SIGINT and SIGTERM stop the runs of this process (:func:`stop`) and, within :func:`armed`, raise
    :class:`Interrupted` in the main thread. Call it from the main thread (the command does, inside a
    :func:`run` that spans the whole command, so that a signal at any point of it counts)."""
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
