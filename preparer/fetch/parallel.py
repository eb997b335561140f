"""Fetching several buildpacks at once, failing as a whole when one fails."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from preparer import interrupt
from preparer._logger import CallerFailed
from preparer.errors import FetchErrors, PreparerError, RunLimitReached

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

T = TypeVar("T")

#: Fetches at once: one per processor (at least two, so that one waits on the network while another extracts;
#: at most four). Extraction is per-file work under the interpreter lock between system calls, so more threads
#: than processors only queue for it: on two processors, four took a quarter longer than two.
MAX_WORKERS = min(4, max(2, len(os.sched_getaffinity(0))))


#: Seconds an interrupted run gives its fetch threads to stop (they check between pieces of work, and their
#: sockets are shut down) before it cleans up and leaves them.
STOP_GRACE = 0.5

#: Seconds the fetches under way are given to end on their own once one has failed (a request already sent may
#: answer with its own failure, reported with the first) before they are called off.
ANSWER_GRACE = 1.0


def fetch_all(jobs: Sequence[Callable[[], T]], *, max_workers: int = MAX_WORKERS) -> list[T]:
    """Run ``jobs`` in threads and return their results in job order.

    When a job fails, no further job starts; those under way get :data:`ANSWER_GRACE` seconds to end on their own,
    then are called off (:class:`~preparer.interrupt.Scope`: their sockets shut, their threads stopped at their
    next check), and every failure known is raised together, in job order (:class:`~preparer.errors.FetchErrors`
    when there are several). A failure is thus reported within about a second of being known, whatever else is
    downloading. When the run is asked to stop (:mod:`preparer.interrupt`), the threads get :data:`STOP_GRACE`
    seconds and :class:`Interrupted` is raised. A thread still blocked (connecting) is left behind and writes
    nothing when it wakes (its next check stops it).
    """
    if len(jobs) == 1:
        return [jobs[0]()]
    from concurrent import futures as cf  # deferred: one job needs no pool

    failed = threading.Event()
    scope = interrupt.Scope(interrupt.current())

    def guarded(job: Callable[[], T]) -> Callable[[], T | None]:
        def run() -> T | None:
            if failed.is_set():
                return None
            try:
                return job()
            except BaseException:
                # Set before this future fails, so no job queued behind it can start in between.
                failed.set()
                raise

        return scope.run(run)

    pool = cf.ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(jobs))), thread_name_prefix="fetch")
    futures: list[Future[T | None]] = [pool.submit(guarded(job)) for job in jobs]
    try:
        cf.wait(futures, return_when=cf.FIRST_EXCEPTION)
        if failed.is_set():
            for future in futures:
                future.cancel()
            if cf.wait(futures, timeout=ANSWER_GRACE).not_done:
                scope.call_off()
                cf.wait(futures, timeout=STOP_GRACE)
    except BaseException as err:  # a signal, in this (the main) thread
        _abandon(err, scope, futures, pool)
        raise
    pool.shutdown(wait=not failed.is_set(), cancel_futures=True)
    interrupt.check()  # stopped from elsewhere: that is why the jobs failed
    errors = [error for error in map(_failure, futures) if error is not None]
    if errors:
        raise _together(errors)
    results: list[T] = []
    for future in futures:
        result = future.result()
        assert result is not None  # no job was skipped: none failed
        results.append(result)
    return results


def _abandon(
    err: BaseException, scope: interrupt.Scope, futures: list[Future[T | None]], pool: ThreadPoolExecutor
) -> None:
    """A signal in the main thread while it waits for the fetches: they are called off and given
    :data:`STOP_GRACE` seconds. One the command or Python turns into a stop stops every run of the process; what the
    caller's own handler raised (:class:`~preparer._logger.CallerFailed`) stops this run alone."""
    from concurrent import futures as cf  # deferred, as in fetch_all

    if not isinstance(err, CallerFailed):
        interrupt.stop()
    scope.call_off()
    for future in futures:
        future.cancel()
    cf.wait(futures, timeout=STOP_GRACE)
    pool.shutdown(wait=False, cancel_futures=True)


def _failure(future: Future[T | None]) -> BaseException | None:
    """The job's own failure: ``None`` for a job that succeeded, never started, is still running, or was called
    off because another failed."""
    if future.cancelled() or not future.done():
        return None
    error = future.exception()
    return None if isinstance(error, interrupt.CalledOff) else error


def _together(errors: list[BaseException]) -> BaseException:
    """One error for the run: the only one, or all of them when each is one of the package's (a bug stays itself)."""
    known = [error for error in errors if isinstance(error, PreparerError)]
    if len(errors) == 1 or len(known) < len(errors):
        return errors[0]
    whole_run = next((error for error in known if isinstance(error, RunLimitReached)), None)
    if whole_run is not None:  # the run is over: said once, not once for each buildpack it stopped
        return whole_run
    return FetchErrors(tuple(known))
