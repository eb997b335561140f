"""Stopping runs, one at a time or all of them, quickly and leaving nothing behind.

Each run has a :class:`Scope` (:func:`run`): the threads of the run check it between pieces of work (each piece of
a body, each archive entry, each file copied, each retry), and the sockets they open are shut down when it is
called off, so a thread waiting for a slow server wakes at once. A run is called off by its own :class:`Cancel`
handle or deadline (that run alone), or by :func:`stop` (every run of the process: SIGINT and SIGTERM, which the
command's handlers turn into it). The fetches of one group have a scope of their own inside the run's, called off
when one of them fails. Everything a run holds (its flag, its sockets, its threads) lives with it.

Inside a run, stopping is raised as a :class:`BaseException` (:class:`Interrupted`, :class:`Stopped`,
:class:`CalledOff`), so that no ``except Exception`` on its way out turns it into another error; the public entry
points turn it into :class:`~preparer.errors.Cancelled`, an ordinary error with its exit code.

The commit's last steps cannot be undone half-way (renames into place, deleting moved-aside files), so a signal
that arrives during them is held (:func:`deferred`) and raised when they are done: the run is then reported as
interrupted, and its outputs are complete. A library caller's own SIGINT handler is set aside the same way, from
the commit's start until the entry point has its result (:func:`until_returned`), and then given the signal.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import socket
    import subprocess
    from types import FrameType

    from preparer.errors import Cancelled

#: ``socket.SHUT_RDWR``, without importing socket (a run that downloads nothing never needs it).
_SHUT_RDWR = 2

T = TypeVar("T")

__all__ = [
    "CalledOff",
    "Cancel",
    "Interrupted",
    "Scope",
    "Stopped",
    "current",
    "deadline_passed",
    "in_context",
    "outside",
    "armed",
    "called_off",
    "check",
    "deferred",
    "handle_signals",
    "until_returned",
    "run",
    "sleep",
    "stop",
    "stopping",
    "watch",
]

_stop = threading.Event()
_state_lock = threading.RLock()  # re-entered by a signal handler in the main thread
_signum = 0
#: The scopes of the runs in progress (:func:`run`): what :func:`stop` calls off.
_live: set[Scope] = set()
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
    :class:`Interrupted`, no :class:`Exception`; it never leaves the scope's owner."""


class Stopped(BaseException):
    """The run was cancelled by its handle, or its deadline passed: ``error`` (a
    :class:`~preparer.errors.Cancelled`) is what the entry point raises."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class Scope:
    """Work that can be called off as a whole: a run, or the fetches of one group inside it. Its threads stop at
    their next :func:`check` (or :func:`sleep`), and every socket they opened is shut down, so that a thread blocked
    on a slow server wakes at once. A scope inside another is called off with it. Work runs in a scope through
    :meth:`run` (another thread) or :func:`run` (a run, in the calling thread)."""

    def __init__(self, parent: Scope | None = None) -> None:
        self.parent = parent
        self._called_off = threading.Event()
        self._why: Callable[[], BaseException] = CalledOff
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._children: set[Scope] = set()
        if parent is not None:
            parent._adopt(self)

    @property
    def called_off(self) -> bool:
        return self._called_off.is_set() or (self.parent is not None and self.parent.called_off)

    def stopped(self) -> BaseException:
        """What stops the work: the outermost scope's reason that was called off."""
        outer = self.parent.stopped() if self.parent is not None and self.parent.called_off else None
        return outer if outer is not None else self._why()

    def run(self, work: Callable[[], T]) -> Callable[[], T]:
        """``work`` to run in this scope (in another thread), in a copy of the current context."""
        context = contextvars.copy_context()

        def scoped() -> T:
            return context.run(self._enter, work)

        return scoped

    def _enter(self, work: Callable[[], T]) -> T:
        _scope.set(self)
        return work()

    def _adopt(self, child: Scope) -> None:
        with self._lock:
            self._children.add(child)
            over = self._called_off.is_set()
        if over:
            child._shut()

    def close(self) -> None:
        """The work is over: the scope lets go of its sockets and leaves its parent."""
        with self._lock:
            self._sockets.clear()
        if self.parent is not None:
            with self.parent._lock:
                self.parent._children.discard(self)

    def call_off(self, why: Callable[[], BaseException] = CalledOff) -> None:
        """Stop the scope's work (and that of the scopes inside it): threads at their next check, blocked reads at
        once. ``why`` makes what :func:`check` raises."""
        with self._lock:
            if not self._called_off.is_set():
                self._why = why
            self._called_off.set()
        self._shut()

    def _shut(self) -> None:
        with self._lock:
            sockets, self._sockets = list(self._sockets), set()
            children = list(self._children)
        for sock in sockets:
            with contextlib.suppress(OSError):  # already closed
                sock.shutdown(_SHUT_RDWR)
        for child in children:
            child._shut()

    def watch(self, sock: socket.socket) -> None:
        """Shut ``sock`` down when the scope is called off (at once if it is already)."""
        with self._lock:
            if not self.called_off:
                self._sockets.add(sock)
                return
        with contextlib.suppress(OSError):
            sock.shutdown(_SHUT_RDWR)


class Cancel:
    """A handle that cancels the run it is given to (``prepare(inputs, cancel=handle)``): :meth:`set`, from any
    thread, stops that run alone within a second, at any point from its first line, leaving nothing behind (the run
    raises :class:`~preparer.errors.Cancelled`). Like :class:`threading.Event`, it stays set; a run given a handle
    already set stops as it starts."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._scopes: set[Scope] = set()
        _handles.add(self)

    def _in_child(self) -> None:
        """In a forked child: its locks free, whichever thread of the parent held them, and no run of the
        parent's attached (a handle already set stays set)."""
        self._lock._at_fork_reinit()  # type: ignore[attr-defined]  # CPython's own, as logging's handlers use it
        self._event._at_fork_reinit()  # type: ignore[attr-defined]
        self._scopes = set()

    def set(self) -> None:
        with self._lock:
            self._event.set()
            scopes = list(self._scopes)
        for scope in scopes:
            scope.call_off(_cancelled)

    def is_set(self) -> bool:
        return self._event.is_set()

    def _attach(self, scope: Scope) -> None:
        with self._lock:
            self._scopes.add(scope)
            now = self._event.is_set()
        if now:
            scope.call_off(_cancelled)

    def _detach(self, scope: Scope) -> None:
        with self._lock:
            self._scopes.discard(scope)


#: Every live handle, for a forked child (:func:`_in_child`).
_handles: weakref.WeakSet[Cancel] = weakref.WeakSet()


def _cancelled() -> BaseException:
    from preparer.errors import (
        Cancelled,  # deferred: errors imports nothing of this module, but keep it light
    )

    return Stopped(Cancelled("cancelled"))


def current() -> Scope | None:
    """The scope the current thread works in (its run, or its group of fetches), if any."""
    return _scope.get()


def in_context(work: Callable[[], T]) -> Callable[[], T]:
    """``work`` to run in another thread as part of the current run (in a copy of the current context): it sees
    the run's scope, so it stops with the run and its sockets are the run's."""
    context = contextvars.copy_context()
    return lambda: context.run(work)


#: The scope the current thread's work belongs to (:meth:`Scope.run`), if any.
_scope: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("preparer_scope", default=None)


def outside() -> None:
    """In the current context, no run: a run begun in it is a run of its own, not part of the one this context
    was copied from (a caller's callback, :func:`preparer.entrypoints.callers`)."""
    _scope.set(None)


def stop(signum: int = signal.SIGINT) -> None:
    """Ask every run of this process to stop: fetch threads end at their next check, blocked reads wake."""
    global _signum
    with _state_lock:
        if not _stop.is_set():
            _signum = signum
        _stop.set()
        runs = list(_live)
    for scope in runs:
        scope.call_off(lambda: Interrupted(_signum))


def stopping() -> bool:
    """Whether :func:`stop` was called since the runs in progress began."""
    return _stop.is_set()


def check() -> None:
    """Raise when the current run (or group of fetches) is to stop: :class:`Interrupted` (:func:`stop`),
    :class:`Stopped` (its handle or deadline), :class:`CalledOff` (another fetch of the group failed). Cheap enough
    to call per file."""
    if _stop.is_set():
        raise Interrupted(_signum)
    scope = _scope.get()
    if scope is not None and scope.called_off:
        raise scope.stopped()


def called_off() -> bool:
    """Whether :func:`check` would raise: for a wait in someone else's loop that asks whether to give up (a lock's
    ``cancel_check``), which then calls :func:`check`."""
    scope = _scope.get()
    return _stop.is_set() or (scope is not None and scope.called_off)


def sleep(seconds: float) -> None:
    """Sleep, unless and until the runs are asked to stop (or the current scope is called off).

    :raises Interrupted: when they are, at once (:class:`CalledOff` within a tenth of a second).
    """
    ends = time.monotonic() + seconds
    while (left := ends - time.monotonic()) > 0:
        if _stop.wait(min(left, 0.1)):
            raise Interrupted(_signum)
        check()


def communicate(proc: subprocess.Popen[str], given: str, seconds: float) -> tuple[str, str]:
    """``proc``'s standard output and error once it has read ``given`` and exited, waiting at most ``seconds`` and
    only while the current run goes on: when the run is stopped (its handle, its deadline, :func:`stop`) or the time
    is up, the process and its process group (``proc`` must lead a session of its own) are killed and reaped at once.

    :raises subprocess.TimeoutExpired: ``seconds`` passed.
    :raises Interrupted: the run is to stop (as :func:`check`).
    """
    import os  # deferred with subprocess: only runs that start a program wait for one
    import subprocess

    ends = time.monotonic() + seconds
    first: str | None = given
    try:
        while True:
            check()
            try:
                return proc.communicate(first, timeout=min(0.05, max(0.0, ends - time.monotonic())))
            except subprocess.TimeoutExpired:
                first = None  # sent: the rest of the exchange goes on where it stopped
                if time.monotonic() >= ends:
                    raise
    except BaseException:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            proc.kill()
        proc.communicate()
        raise


def watch(sock: socket.socket | None) -> None:
    """Shut ``sock`` down when the current thread's scope (its run, or its group of fetches) is called off."""
    if sock is None:
        return
    scope = _scope.get()
    if scope is not None:
        scope.watch(sock)


@contextmanager
def run(
    cancel: Cancel | None = None, deadline: float | None = None, since: float | None = None
) -> Iterator[Scope]:
    """The extent of one run, in the calling thread: its :class:`Scope`, called off by ``cancel``, by ``deadline``
    (seconds from now, or from ``since``, a :func:`time.monotonic` reading: the caller's call, for a run that
    waited for a thread) or by :func:`stop`; a deadline too far to wait for is none. Within a run, another :func:`run` is the same run (``prepare`` calls
    ``plan_run`` and ``run_plan``), with the handle and deadline it adds. A request to stop (:func:`stop`) lasts
    until no run is left, so a process that goes on (a library caller) starts its next run afresh."""
    global _raised
    outer = _scope.get()
    while outer is not None and outer.parent is not None:
        outer = outer.parent
    scope = outer if outer is not None and outer in _live else Scope()
    token = _scope.set(scope) if scope is not outer else None
    timer = None
    left = (
        threading.TIMEOUT_MAX
        if deadline is None
        else deadline - (0.0 if since is None else time.monotonic() - since)
    )
    if deadline is not None and left < threading.TIMEOUT_MAX:  # beyond it (inf) the timer's wait fails: none
        timer = threading.Timer(max(0.0, left), scope.call_off, args=(_deadline(deadline),))
        timer.daemon = True
    with _state_lock:
        if token is not None:
            if not _live:
                _stop.clear()
            _live.add(scope)
            if _stop.is_set():
                scope.call_off(lambda: Interrupted(_signum))
    if cancel is not None:
        cancel._attach(scope)
    if timer is not None:
        timer.start()
    try:
        yield scope
    finally:
        if timer is not None:
            timer.cancel()
        if cancel is not None:
            cancel._detach(scope)
        if token is not None:
            _scope.reset(token)
            scope.close()
            with _state_lock:
                _live.discard(scope)
                if not _live:
                    _raised = False


def _deadline(seconds: float) -> Callable[[], BaseException]:
    def why() -> BaseException:
        return Stopped(deadline_passed(seconds))

    return why


def deadline_passed(seconds: float) -> Cancelled:
    """The error of a run whose deadline of ``seconds`` passed (exit 1)."""
    from preparer.errors import Cancelled  # deferred, as in _cancelled

    return Cancelled(f"the run's deadline passed ({seconds:g} s)", exit_code=1)


@contextmanager
def deferred() -> Iterator[None]:
    """In the main thread, hold a signal that arrives during the block and raise it when the block is done.

    Fetch threads still stop at once, and :func:`check` still raises in the block: it is how the block chooses
    the points where stopping is safe. In a library caller's main thread, where the caller's SIGINT handler
    (Python's own, which raises :class:`KeyboardInterrupt`, or one installed with :func:`signal.signal`) would run
    anywhere, that handler is set aside: a Ctrl-C is held, and given to the handler when the block is whole, or,
    inside an entry point (:func:`until_returned`), once the entry point has its result. Elsewhere than the main
    thread (which is the only one signals reach), the block is run as it is.
    """
    global _deferring, _held, _set_aside
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _deferring == 0 and _set_aside is None:
        callers = signal.getsignal(signal.SIGINT)
        if callable(callers) and callers is not _on_signal:  # the command's own handler holds by itself
            _set_aside = callers
            signal.signal(signal.SIGINT, _hold_callers_signal)
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        held = _held if _deferring == 0 else 0
        if held:
            _held = 0
        if _deferring == 0:
            _give_back()
    if held:  # not reached when the block raised: that error goes on
        raise Interrupted(held)


#: The caller's SIGINT handler, set aside by :func:`deferred` until the commit (or the entry point) is done, and the
#: signal held for it meanwhile (0: none).
_set_aside: Callable[[int, FrameType | None], object] | None = None
_callers_held = 0
#: How deep the main thread is in :func:`until_returned`.
_returning = 0


def _hold_callers_signal(signum: int, frame: FrameType | None) -> None:
    global _callers_held
    _callers_held = signum


def _give_back() -> None:
    """Put the caller's SIGINT handler back and send it the signal held for it, unless an entry point still runs
    (:func:`until_returned`): what the handler raises is raised here."""
    global _set_aside, _callers_held
    if _returning or _set_aside is None:
        return
    callers, held = _set_aside, _callers_held
    _set_aside, _callers_held = None, 0
    signal.signal(signal.SIGINT, callers)
    if held:
        signal.raise_signal(held)  # the caller's handler runs now, in this thread, as for the Ctrl-C itself


#: The attribute that carries an entry point's result on what the caller's SIGINT handler raised once it returned.
RESULT_ATTRIBUTE = "preparer_result"


def until_returned(work: Callable[[], T]) -> T:
    """``work()`` (an entry point), holding a SIGINT that :func:`deferred` held for the caller's handler until it
    has returned or raised: the handler gets it then, in the main thread, so a Ctrl-C during a commit neither
    breaks into it nor makes a committed run look failed. What the handler raises after ``work`` returned carries
    the result as its :data:`RESULT_ATTRIBUTE` (and a note saying so); after ``work`` raised, it is raised with
    that error as its context. A handler that does not raise (one that sets a flag) leaves the result returned."""
    global _returning
    if threading.current_thread() is not threading.main_thread():
        return work()
    callers = _mark_callers() if _returning == 0 else None
    _returning += 1
    try:
        result = work()
    except BaseException:
        _returning -= 1
        _unmark_callers(callers)
        _give_back()
        raise
    _returning -= 1
    _unmark_callers(callers)
    try:
        _give_back()
    except BaseException as err:
        with contextlib.suppress(AttributeError, TypeError):  # an exception that takes no attributes
            setattr(err, RESULT_ATTRIBUTE, result)
            err.add_note("preparer: the run was complete when this signal was handled; its result is kept")
        raise
    return result


class _Callers:
    """The caller's SIGINT handler while an entry point runs (:func:`until_returned`): what it raises, wherever the
    signal lands, is :class:`~preparer._logger.CallerFailed`, so that no ``except Exception`` of the run converts
    it and the entry point raises the caller's own exception, once everything the run opened is closed."""

    def __init__(self, handler: Callable[[int, FrameType | None], object]) -> None:
        self.handler = handler

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        from preparer._logger import CallerFailed  # deferred: only a caller's handler that raises needs it

        try:
            self.handler(signum, frame)
        except BaseException as err:
            raise CallerFailed(err) from err


def _mark_callers() -> Callable[[int, FrameType | None], object] | None:
    """Put the caller's own SIGINT handler (one installed with :func:`signal.signal`; not Python's, whose
    :class:`KeyboardInterrupt` needs no marking, nor the command's) inside a :class:`_Callers`; the handler, or
    ``None`` when there is none to mark."""
    handler = signal.getsignal(signal.SIGINT)
    if not callable(handler) or handler in (_on_signal, signal.default_int_handler, _hold_callers_signal):
        return None
    if isinstance(handler, _Callers):
        return None
    signal.signal(signal.SIGINT, _Callers(handler))
    return handler


def _unmark_callers(handler: Callable[[int, FrameType | None], object] | None) -> None:
    """The caller's handler as it was, in place of the :class:`_Callers` around it (installed, or set aside by
    :func:`deferred`)."""
    global _set_aside
    if handler is None:
        return
    if isinstance(_set_aside, _Callers):
        _set_aside = _set_aside.handler
    if isinstance(signal.getsignal(signal.SIGINT), _Callers):
        signal.signal(signal.SIGINT, handler)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _held, _raised
    stop(signum)
    if _deferring:
        _held = _held or signum
    elif _armed and not _raised:  # a second signal would break into the clean-up the first one started
        _raised = True
        raise Interrupted(signum)


#: Whether the process forked from its main thread (:func:`_before_fork`).
_forked_from_main = True


def _before_fork() -> None:
    global _forked_from_main
    _forked_from_main = threading.current_thread() is threading.main_thread()


def _in_child() -> None:
    """A forked child (``os.fork``, a ``multiprocessing`` 'fork' worker) has one thread and none of its parent's
    runs: the module's locks are made anew (one held by a sibling thread when the process forked would stay held
    forever), no run of the parent is live or stopping, and every :class:`Cancel` lets go of the parent's runs.
    When the fork came from another thread than the main one, the main thread's state (a commit's held signal,
    the caller's SIGINT handler set aside) was a thread's that is not in the child: the caller's handler is put
    back."""
    global _state_lock, _stop, _live, _signum, _raised, _deferring, _held, _armed, _returning
    global _set_aside, _callers_held
    _state_lock, _stop, _live, _signum, _raised = threading.RLock(), threading.Event(), set(), 0, False
    for handle in list(_handles):
        handle._in_child()
    if _forked_from_main:  # the forking thread is the main thread still, and unwinds its own blocks
        return
    callers = _set_aside or signal.getsignal(signal.SIGINT)
    if isinstance(callers, _Callers):
        callers = callers.handler
    _deferring = _held = _armed = _returning = _callers_held = 0
    _set_aside = None
    if callable(callers) and callers is not _hold_callers_signal:
        with contextlib.suppress(ValueError):  # not the main thread after all: nothing was set aside there
            signal.signal(signal.SIGINT, callers)


os.register_at_fork(before=_before_fork, after_in_child=_in_child)


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
