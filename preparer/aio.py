"""The entry points as coroutines, for services built on asyncio: ``await prepare_async(inputs)``.

Each runs its function (:func:`~preparer.pipeline.prepare`, :func:`~preparer.pipeline.plan_run`,
:func:`~preparer.pipeline.run_plan`) in one thread of its own, or in the ``executor`` given, while the event loop
goes on; the run's downloads go on in its fetch pool, as in any run. Cancelling the awaiting task (``asyncio.timeout``,
``asyncio.wait_for``, a failure in its ``asyncio.TaskGroup``, ``task.cancel()``) cancels the run, as its
:class:`~preparer.interrupt.Cancel` handle would, and the await raises :class:`asyncio.CancelledError` only once
the run's thread has stopped: nothing is written, fetched or committed after the caller is told it was cancelled.
A run still waiting for a thread of the ``executor`` is taken off its queue and never starts.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from preparer import interrupt
from preparer.interrupt import Cancel

if TYPE_CHECKING:
    from preparer.inputs import Inputs
    from preparer.plan import Plan
    from preparer.progress import ProgressCallback
    from preparer.report import Report

R = TypeVar("R")

__all__ = ["plan_run_async", "prepare_async", "run_plan_async"]


async def prepare_async(
    inputs: Inputs,
    *,
    progress: ProgressCallback | None = None,
    cancel: Cancel | None = None,
    deadline: float | None = None,
    run_id: str | None = None,
    executor: concurrent.futures.Executor | None = None,
) -> Report:
    """:func:`preparer.prepare`, awaited: cancelling the awaiting task cancels the run, and the await returns once
    the run has stopped.

    :param progress: as :func:`preparer.prepare`'s: called from the run's fetch threads, never from the event loop
        (hand events to the loop with ``loop.call_soon_threadsafe``).
    :param cancel: a handle that stops this run too (one shared by several runs stops them all).
    :param executor: where the run's thread comes from (a pool that bounds how many runs go on at once); a thread
        of its own when left out.
    :raises asyncio.CancelledError: the awaiting task was cancelled; the run has stopped.
    :raises PreparerError: as :func:`preparer.prepare`.
    """
    from preparer.pipeline import prepare  # deferred, as the package's own names are

    def run() -> Report:
        return prepare(inputs, progress=progress, cancel=cancel, deadline=deadline, run_id=run_id)

    return await _awaited(run, executor)


async def plan_run_async(
    inputs: Inputs,
    *,
    cancel: Cancel | None = None,
    deadline: float | None = None,
    run_id: str | None = None,
    executor: concurrent.futures.Executor | None = None,
) -> Plan:
    """:func:`preparer.plan_run`, awaited, cancelled with its task as :func:`prepare_async` is.

    :raises asyncio.CancelledError: the awaiting task was cancelled; the run has stopped.
    :raises PreparerError: as :func:`preparer.plan_run`.
    """
    from preparer.pipeline import plan_run  # deferred, as in prepare_async

    def run() -> Plan:
        return plan_run(inputs, cancel=cancel, deadline=deadline, run_id=run_id)

    return await _awaited(run, executor)


async def run_plan_async(
    plan: Plan,
    inputs: Inputs | None = None,
    progress: ProgressCallback | None = None,
    *,
    cancel: Cancel | None = None,
    deadline: float | None = None,
    run_id: str | None = None,
    executor: concurrent.futures.Executor | None = None,
) -> Report:
    """:func:`preparer.run_plan`, awaited, cancelled with its task as :func:`prepare_async` is.

    :raises asyncio.CancelledError: the awaiting task was cancelled; the run has stopped.
    :raises PreparerError: as :func:`preparer.run_plan`.
    """
    from preparer.pipeline import run_plan  # deferred, as in prepare_async

    def run() -> Report:
        return run_plan(plan, inputs, progress, cancel=cancel, deadline=deadline, run_id=run_id)

    return await _awaited(run, executor)


async def _awaited(work: Callable[[], R], executor: concurrent.futures.Executor | None) -> R:
    """What ``work`` returns, run in another thread inside a run whose handle the awaiting task's cancellation sets.

    The entry point ``work`` calls joins that run (:func:`preparer.interrupt.run`: a run inside a run is the same
    one), so the task's handle and the caller's own both stop it.
    """
    handle = Cancel()
    context = contextvars.copy_context()  # the caller's context variables, as asyncio.to_thread gives them

    def in_run() -> R:
        with interrupt.run(handle):
            return work()

    future, thread = _start(lambda: context.run(in_run), executor)
    waiting = asyncio.wrap_future(future)
    try:
        return await asyncio.shield(waiting)
    except asyncio.CancelledError:
        handle.set()
        if not future.cancel():  # it has begun: it stops within a tenth of a second, and is waited for
            await _stopped(waiting)
        raise
    finally:
        if thread is not None and future.done():
            thread.join()  # past its last line already (the result is set): a thread of the run outlives no await


async def _stopped(waiting: asyncio.Future[R]) -> None:
    """Wait until ``waiting`` is done, however often the task is cancelled meanwhile (each cancellation is still
    the caller's: the task raises :class:`asyncio.CancelledError` once it is done)."""
    while not waiting.done():
        try:
            await asyncio.wait([waiting])  # never cancels what it waits for
        except asyncio.CancelledError:
            continue
    if not waiting.cancelled():
        waiting.exception()  # seen: what the run raised once cancelled is not the caller's news


def _start(
    work: Callable[[], R], executor: concurrent.futures.Executor | None
) -> tuple[concurrent.futures.Future[R], threading.Thread | None]:
    """``work`` begun in ``executor``, or in a thread of its own (returned with it)."""
    if executor is not None:
        return executor.submit(work), None
    future: concurrent.futures.Future[R] = concurrent.futures.Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(work())
        except BaseException as err:  # noqa: BLE001 - the awaiting task's to raise
            future.set_exception(err)

    thread = threading.Thread(target=run, name="preparer-run")
    thread.start()
    return future, thread
