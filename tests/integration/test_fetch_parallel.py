"""fetch_all: results in job order, the first failing job's error, no start after a failure, nothing left running."""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path

import pytest

from preparer import interrupt
from preparer.errors import FetchError, FetchErrors
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


def test_every_failure_is_reported_together_in_job_order() -> None:
    second_failed = threading.Event()

    def first() -> str:
        assert second_failed.wait(10)  # fails last in time, first in job order
        raise FetchError("download a.tgz", "HTTP 404 Not Found")

    def second() -> str:
        second_failed.set()
        raise FetchError("download b.tgz", "HTTP 404 Not Found")

    with pytest.raises(FetchErrors) as info:
        fetch_all([first, second, lambda: "c"], max_workers=2)
    assert str(info.value) == (
        "failed to fetch 2 buildpacks:\n  failed to download a.tgz: HTTP 404 Not Found\n"
        "  failed to download b.tgz: HTTP 404 Not Found"
    )
    assert info.value.exit_code == 1 and [e.action for e in info.value.errors] == [
        "download a.tgz",
        "download b.tgz",
    ]


def test_fetches_under_way_are_called_off_within_about_a_second(tmp_path: Path) -> None:
    """A job that would go on for a minute stops at its next check once another has failed; only the real
    failure is reported, and the error comes within about a second."""
    checked = tmp_path / "checks"
    started = threading.Event()

    def long() -> str:
        started.set()
        for _ in range(600):
            interrupt.sleep(0.1)  # a piece of work, and the check between pieces
            checked.write_text("still running")
        return "never"

    def fail() -> str:
        assert started.wait(10)
        raise FetchError("download a.tgz", "HTTP 404 Not Found")

    begun = time.monotonic()
    with pytest.raises(FetchError) as info:
        fetch_all([long, fail], max_workers=2)
    took = time.monotonic() - begun
    assert str(info.value) == "failed to download a.tgz: HTTP 404 Not Found"  # not the called-off one
    assert took < 5, took  # ANSWER_GRACE (1 s) and a tenth of a second to stop; generous for a loaded machine
    before = checked.stat().st_mtime_ns
    time.sleep(0.3)
    assert checked.stat().st_mtime_ns == before  # the called-off thread writes nothing more


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
