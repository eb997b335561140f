"""Fetching several buildpacks at once, failing as a whole when one fails."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import TypeVar

T = TypeVar("T")

#: Fetches at once: one per processor (at least two, so that one waits on the network while another extracts;
#: at most four). Extraction is per-file work under the interpreter lock between system calls, so more threads
#: than processors only queue for it: on two processors, four took a quarter longer than two.
MAX_WORKERS = min(4, max(2, len(os.sched_getaffinity(0))))


def fetch_all(jobs: Sequence[Callable[[], T]], *, max_workers: int = MAX_WORKERS) -> list[T]:
    """Run ``jobs`` in threads and return their results in job order.

    When a job fails, no further job starts; those already running finish (they write only into their own
    staging directories), and the error of the first failing job in job order is raised.
    """
    if len(jobs) == 1:
        return [jobs[0]()]
    stop = threading.Event()

    def guarded(job: Callable[[], T]) -> Callable[[], T | None]:
        def run() -> T | None:
            if stop.is_set():
                return None
            try:
                return job()
            except BaseException:
                # Set before this future fails, so no job queued behind it can start in between.
                stop.set()
                raise

        return run

    with ThreadPoolExecutor(
        max_workers=max(1, min(max_workers, len(jobs))), thread_name_prefix="fetch"
    ) as pool:
        futures: list[Future[T | None]] = [pool.submit(guarded(job)) for job in jobs]
        wait(futures, return_when=FIRST_EXCEPTION)
        if stop.is_set():
            for future in futures:
                future.cancel()
        wait(futures)  # nothing keeps running (or writing) once this returns
    for future in futures:
        if not future.cancelled() and future.exception() is not None:
            raise future.exception()  # type: ignore[misc]
    results: list[T] = []
    for future in futures:
        result = future.result()
        assert result is not None  # no job was skipped: none failed
        results.append(result)
    return results
