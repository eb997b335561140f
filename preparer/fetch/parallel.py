"""Fetching several buildpacks at once, failing as a whole when one fails."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import TypeVar

from preparer import interrupt

T = TypeVar("T")

#: Fetches at once: one per processor (at least two, so that one waits on the network while another extracts;
#: at most four). Extraction is per-file work under the interpreter lock between system calls, so more threads
#: than processors only queue for it: on two processors, four took a quarter longer than two.
MAX_WORKERS = min(4, max(2, len(os.sched_getaffinity(0))))


#: Seconds an interrupted run gives its fetch threads to stop (they check between pieces of work, and their
#: sockets are shut down) before it cleans up and leaves them.
STOP_GRACE = 0.5


def fetch_all(jobs: Sequence[Callable[[], T]], *, max_workers: int = MAX_WORKERS) -> list[T]:
    """Run ``jobs`` in threads and return their results in job order.

    When a job fails, no further job starts; those already running finish (they write only into their own
    staging directories), and the error of the first failing job in job order is raised. When the run is asked to
    stop (:mod:`preparer.interrupt`), the threads get :data:`STOP_GRACE` seconds and :class:`Interrupted` is
    raised; a thread still blocked (connecting) is left behind and writes nothing when it wakes.
    """
    if len(jobs) == 1:
        return [jobs[0]()]
    failed = threading.Event()

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

        return run

    pool = ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(jobs))), thread_name_prefix="fetch")
    futures: list[Future[T | None]] = [pool.submit(guarded(job)) for job in jobs]
    try:
        wait(futures, return_when=FIRST_EXCEPTION)
        if failed.is_set():
            for future in futures:
                future.cancel()
        wait(futures)  # nothing keeps running (or writing) once this returns
    except BaseException:  # a signal, in this (the main) thread
        interrupt.stop()
        for future in futures:
            future.cancel()
        wait(futures, timeout=STOP_GRACE)
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    interrupt.check()  # stopped from elsewhere: that is why the jobs failed
    for future in futures:
        error = None if future.cancelled() else future.exception()
        if error is not None:
            raise error
    results: list[T] = []
    for future in futures:
        result = future.result()
        assert result is not None  # no job was skipped: none failed
        results.append(result)
    return results
