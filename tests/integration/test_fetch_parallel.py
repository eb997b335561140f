"""fetch_all: results in job order, the first failing job's error, no start after a failure, nothing left running."""

from __future__ import annotations

import functools
import threading
from pathlib import Path

import pytest

from preparer.errors import FetchError
from preparer.fetch.parallel import fetch_all


def test_results_come_back_in_job_order() -> None:
    # Each job waits for the one after it, so they finish in reverse order.
    events = [threading.Event() for _ in range(5)]
    events[-1].set()

    def job(i: int) -> str:
        assert events[i].wait(10)
        if i:
            events[i - 1].set()
        return f"bp{i}"

    jobs = [functools.partial(job, i) for i in range(5)]
    assert fetch_all(jobs, max_workers=5) == [f"bp{i}" for i in range(5)]


def test_the_first_failing_job_in_job_order_wins() -> None:
    second_failed = threading.Event()

    def first() -> str:
        assert second_failed.wait(10)  # fails last in time, first in job order
        raise FetchError("download a.tgz", "HTTP 404 Not Found")

    def second() -> str:
        second_failed.set()
        raise FetchError("download b.tgz", "HTTP 404 Not Found")

    with pytest.raises(FetchError) as info:
        fetch_all([first, second, lambda: "c"], max_workers=2)
    assert str(info.value) == "failed to download a.tgz: HTTP 404 Not Found"


def test_no_job_starts_after_a_failure() -> None:
    started: list[int] = []

    def fail() -> str:
        raise FetchError("download a.tgz", "timed out")

    def record(i: int) -> str:
        started.append(i)
        return str(i)

    with pytest.raises(FetchError):
        fetch_all([fail, *(lambda i=i: record(i) for i in range(1, 8))], max_workers=1)
    assert started == []


def test_running_jobs_finish_before_the_error_is_raised(tmp_path: Path) -> None:
    running, failed = threading.Event(), threading.Event()
    out = tmp_path / "written-by-the-slow-job"

    def fail() -> str:
        assert running.wait(10)
        failed.set()
        raise FetchError("download a.tgz", "HTTP 500")

    def slow() -> str:
        running.set()
        assert failed.wait(10)
        with open(out, "wb") as f:  # still writing after the other job failed
            f.writelines(b"x" * 4096 for _ in range(64))
        return "b"

    with pytest.raises(FetchError):
        fetch_all([fail, slow], max_workers=2)
    assert out.stat().st_size == 64 * 4096  # complete: the writer ended before fetch_all returned


def test_one_job_runs_in_the_calling_thread() -> None:
    assert fetch_all([lambda: threading.current_thread().name]) == [threading.current_thread().name]
