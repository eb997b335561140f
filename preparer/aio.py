"""The entry points as coroutines, for services built on asyncio: ``await prepare_async(inputs)``.

Each runs its function (:func:`~preparer.pipeline.prepare`, :func:`~preparer.pipeline.plan_run`,
:func:`~preparer.pipeline.run_plan`) in one thread of its own, or in the ``executor`` given, while the event loop
goes on; the run's downloads go on in its fetch pool, as in any run. Cancelling the awaiting task (``asyncio.timeout``,
``asyncio.wait_for``, a failure in its ``asyncio.TaskGroup``, ``task.cancel()``) cancels the run, as its
:class:`~preparer.interrupt.Cancel` handle would, and the await raises :class:`asyncio.CancelledError` only once
the run's thread has stopped: nothing is written, fetched or committed after the caller is told it was cancelled.
A run still waiting for a thread of the ``executor`` is taken off its queue and never starts. A ``deadline``
counts from the call, however long the run waits for a thread: one that passes while the run is queued ends the
await with :class:`~preparer.errors.Cancelled` then, and the run never starts.

The ``executor`` must give threads of this process (a :class:`concurrent.futures.ThreadPoolExecutor`): a run's
cancel handle, callbacks and context live here. A process pool is refused at the call with :class:`TypeError`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
import time
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
    executor: concurrent.futures.ThreadPoolExecutor | None = None,
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
    from preparer.entrypoints import check_arguments  # deferred, as the package's own names are
    from preparer.pipeline import prepare

    def run() -> Report:
        return prepare(inputs, progress=progress, cancel=cancel, run_id=run_id)

    check_arguments(inputs, None, cancel, deadline, run_id)
    return await _awaited(run, executor, deadline)


async def plan_run_async(
    inputs: Inputs,
    *,
    cancel: Cancel | None = None,
    deadline: float | None = None,
    run_id: str | None = None,
    executor: concurrent.futures.ThreadPoolExecutor | None = None,
) -> Plan:
    """:func:`preparer.plan_run`, awaited, cancelled with its task as :func:`prepare_async` is.

    :raises asyncio.CancelledError: the awaiting task was cancelled; the run has stopped.
    :raises PreparerError: as :func:`preparer.plan_run`.
    """
    from preparer.entrypoints import check_arguments  # deferred, as in prepare_async
    from preparer.pipeline import plan_run

    def run() -> Plan:
        return plan_run(inputs, cancel=cancel, run_id=run_id)

    check_arguments(inputs, None, cancel, deadline, run_id)
    return await _awaited(run, executor, deadline)


async def run_plan_async(
    plan: Plan,
    inputs: Inputs | None = None,
    progress: ProgressCallback | None = None,
    *,
    cancel: Cancel | None = None,
    deadline: float | None = None,
    run_id: str | None = None,
    executor: concurrent.futures.ThreadPoolExecutor | None = None,
) -> Report:
    """:func:`preparer.run_plan`, awaited, cancelled with its task as :func:`prepare_async` is.

    :raises asyncio.CancelledError: the awaiting task was cancelled; the run has stopped.
    :raises PreparerError: as :func:`preparer.run_plan`.
    """
    from preparer.entrypoints import check_arguments  # deferred, as in prepare_async
    from preparer.pipeline import run_plan

    def run() -> Report:
        return run_plan(plan, inputs, progress, cancel=cancel, run_id=run_id)

    check_arguments(inputs, plan, cancel, deadline, run_id)
    return await _awaited(run, executor, deadline)


async def _awaited(
    work: Callable[[], R], executor: concurrent.futures.ThreadPoolExecutor | None, deadline: float | None
) -> R:
    """What ``work`` returns, run in another thread inside a run whose handle the awaiting task's cancellation sets,
    and whose ``deadline`` counts from now.

    The entry point ``work`` calls joins that run (:func:`preparer.interrupt.run`: a run inside a run is the same
    one), so the task's handle and the caller's own both stop it.
    """
    _check_executor(executor)
    called = time.monotonic()
    handle = Cancel()
    context = contextvars.copy_context()  # the caller's context variables, as asyncio.to_thread gives them

    def in_run() -> R:
        with interrupt.run(handle, deadline, since=called):
            return work()

    future, thread = _start(lambda: context.run(in_run), executor)
    waiting = asyncio.wrap_future(future)
    try:
        if deadline is not None and executor is not None:  # a queued run ends at its deadline, never starting
            await asyncio.wait([waiting], timeout=max(0.0, min(deadline, threading.TIMEOUT_MAX)))
            if future.cancel():
                raise interrupt.deadline_passed(deadline)
        return await asyncio.shield(waiting)
    except asyncio.CancelledError:
        handle.set()
        if not future.cancel():  # it has begun: it stops within a tenth of a second, and is waited for
            await _stopped(waiting)
        raise
    finally:
        if thread is not None and future.done():
            thread.join()  # past its last line already (the result is set): a thread of the run outlives no await


def _check_executor(executor: object) -> None:
    """:raises TypeError: ``executor`` cannot run a run: not an executor, or one whose workers are other processes
    (a run's cancel handle, callbacks and context are objects of this one)."""
    if executor is None:
        return
    if not isinstance(executor, concurrent.futures.Executor):
        raise TypeError(
            f"executor= takes a concurrent.futures.ThreadPoolExecutor, not {type(executor).__name__}"
        )
    if isinstance(executor, concurrent.futures.ProcessPoolExecutor):
        raise TypeError(
            "executor= takes a concurrent.futures.ThreadPoolExecutor, not a ProcessPoolExecutor: a run's cancel "
            "handle, progress callback and context live in this process (to build in another process, call "
            "preparer.prepare there)"
        )


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
