"""What every entry point of the library (:func:`~preparer.pipeline.prepare`, :func:`~preparer.pipeline.plan_run`,
:func:`~preparer.pipeline.run_plan`) promises its caller: an argument of the wrong type is the caller's
:class:`TypeError` before anything runs; what a callback raises comes back as itself; every other error is a
:class:`~preparer.errors.PreparerError` (one the preparer did not foresee an :class:`~preparer.errors.UnexpectedError`).
"""

from __future__ import annotations

import contextvars
import functools
import math
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from preparer import interrupt
from preparer._fs import full_disk, no_space
from preparer._logger import CallerFailed, outside_run
from preparer.errors import Cancelled, NoSpaceError, PreparerError, UnexpectedError, with_fields
from preparer.inputs import Inputs
from preparer.interrupt import Cancel
from preparer.plan import Plan
from preparer.report import Report

if TYPE_CHECKING:
    from preparer.progress import Download, ProgressCallback


P = ParamSpec("P")
R = TypeVar("R")


class TypeError_(TypeError):
    """An argument of the wrong type given to an entry point."""


class ValueError_(ValueError):
    """An argument of the right type and a value no run can take (``deadline=nan``)."""


def callers(progress: ProgressCallback | None) -> ProgressCallback | None:
    """``progress`` as the run calls it: one event at a time, in the caller's own context, and whatever it raises
    is the caller's (:class:`CallerFailed`). Called at the entry point, before the run begins: the context is the
    caller's as it was at the call (:func:`callers_context`), as asyncio runs a callback in the context of whoever
    scheduled it, so a build the callback starts is a build of its own (its cancel, deadline, run id and
    measurements), and what the callback schedules in turn (``loop.call_soon_threadsafe``) carries nothing of the
    run."""
    if progress is None:
        return None
    callback, lock, context = progress, threading.Lock(), callers_context()

    def called(event: Download) -> None:
        with lock:  # the run's fetch threads report at once: the callback is entered by one at a time
            try:
                context.run(callback, event)  # entered by one thread at a time: the lock
            except Exception as err:
                raise CallerFailed(err) from err

    return called


def callers_context() -> contextvars.Context:
    """A copy of the current context outside every run of the library: the caller's context variables, none of
    the run's (its scope, its id, how deep the entry points are)."""
    context = contextvars.copy_context()
    context.run(_outside_runs)
    return context


def _outside_runs() -> None:
    interrupt.outside()
    outside_run()
    _depth.set(0)


def check_arguments(
    inputs: object, plan: object = None, cancel: object = None, deadline: object = None, run_id: object = None
) -> None:
    """:raises TypeError: an argument that is not what the function takes (the caller's mistake, not a run's).
    :raises ValueError: a deadline that is not a number (``nan``): no time is ever past it."""
    if not isinstance(inputs, Inputs) and inputs is not None:
        raise TypeError_(f"expected preparer.Inputs, got {type(inputs).__name__}: build one with Inputs(...)")
    if plan is not None and not isinstance(plan, Plan):
        raise TypeError_(f"expected a preparer.Plan (from plan_run), got {type(plan).__name__}")
    if cancel is not None and not isinstance(cancel, Cancel):
        raise TypeError_(f"cancel= takes a preparer.Cancel, not {type(cancel).__name__}")
    if deadline is not None and (not isinstance(deadline, int | float) or isinstance(deadline, bool)):
        raise TypeError_(f"deadline= takes a number of seconds, not {type(deadline).__name__}")
    if isinstance(deadline, float) and math.isnan(
        deadline
    ):  # never passed, never compared; time.sleep refuses it
        raise ValueError_("deadline= takes a number of seconds, not nan")
    if run_id is not None and not isinstance(run_id, str):
        raise TypeError_(f"run_id= takes a str, not {type(run_id).__name__}")


def typed(function: Callable[P, R]) -> Callable[P, R]:
    """The library's promise for ``function``: every error it raises is a :class:`PreparerError` (one it did not
    foresee becomes :class:`UnexpectedError`, exit 1, naming the original), except the caller's own: an argument
    of the wrong type is a :class:`TypeError` before anything runs, and what a callback raises comes back as
    itself."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        # A Ctrl-C held during the commit reaches the caller's SIGINT handler once the call is over; what that
        # handler raises is the caller's own, and carries the report (committed_report).
        return interrupt.until_returned(functools.partial(checked, *args, **kwargs))

    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        token = _depth.set(_depth.get() + 1)
        try:
            return function(*args, **kwargs)
        except (PreparerError, TypeError_, ValueError_):
            raise
        except CallerFailed as failed:
            if _depth.get() > 1:  # inside another entry point (prepare calls run_plan): the outer one says it
                raise
            raise failed.error from None
        except interrupt.Interrupted as stopped:  # a signal, or interrupt.stop(): an ordinary error out here
            raise Cancelled.by_signal(stopped.signum) from None
        except interrupt.Stopped as stopped:  # the run's handle, or its deadline
            raise stopped.error from None
        except Exception as err:
            full = full_disk(err)
            if full is not None:  # a write that no edge named: its file's directory is
                where = str(Path(full.filename).parent) if isinstance(full.filename, str) else None
                cause = no_space(full, "the directory", where) if where else "no space left on device"
                raise with_fields(NoSpaceError("prepare", cause), directory=where) from err
            raise UnexpectedError(
                "prepare", f"an error the preparer does not foresee ({err or 'no words'})"
            ) from err
        finally:
            _depth.reset(token)

    return wrapper


def committed_report(error: BaseException) -> Report | None:
    """The report of a run that was complete when ``error`` was raised by the caller's own SIGINT handler (Python's
    :class:`KeyboardInterrupt`, or one installed with :func:`signal.signal`), given a Ctrl-C that came during the
    commit and was held until :func:`prepare` or :func:`run_plan` was done: the outputs are written, as the report
    says. ``None`` for any other error: the run failed, and nothing changed."""
    found = getattr(error, interrupt.RESULT_ATTRIBUTE, None)
    return found if isinstance(found, Report) else None


#: How deep the current thread is in the entry points (:func:`typed`).
_depth: contextvars.ContextVar[int] = contextvars.ContextVar("preparer_entered", default=0)


def depth() -> int:
    """How many entry points the current thread is inside: 1 in a call of the caller's, 2 in :func:`run_plan` or
    :func:`plan_run` as :func:`prepare` calls them."""
    return _depth.get()
