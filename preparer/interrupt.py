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
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import socket
    from types import FrameType

#: ``socket.SHUT_RDWR``, without importing socket (a run that downloads nothing never needs it).
_SHUT_RDWR = 2

__all__ = [
    "Interrupted",
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
    """Raise :class:`Interrupted` when the runs were asked to stop; cheap enough to call per file."""
    if _stop.is_set():
        raise Interrupted(_signum)


def sleep(seconds: float) -> None:
    """Sleep, unless and until the runs are asked to stop.

    :raises Interrupted: when they are, at once.
    """
    if _stop.wait(seconds):
        raise Interrupted(_signum)


def watch(sock: socket.socket | None) -> None:
    """Shut ``sock`` down if the runs are asked to stop while it is open (only within :func:`run`)."""
    if sock is None:
        return
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
