"""What a service hands each call: a deadline that counts from the call, however long the run waited for a
thread; a value no run can take (``deadline=nan``), or an executor the library cannot use (a process pool), refused
at the call (issue 50: "queued builds end 2.5 s and 3.7 s after the call"; "deadline=nan arrives as Cancelled";
"executor=ProcessPoolExecutor type-checks and then fails with a bare AttributeError").

Real components: the suite's HTTP server on 127.0.0.1, holding each answer back 5 s, so that a run is busy for
longer than any deadline here; real thread and process pools.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from pathlib import Path

import pytest

from preparer import Cancelled, plan_run, plan_run_async, prepare, prepare_async, run_plan_async
from tests.integration.test_service_asyncio import slow_build, written
from tests.plugins.http_server import FileServer


def test_a_deadline_counts_from_the_call_on_a_one_thread_executor(
    http_server: FileServer, tmp_path: Path
) -> None:
    """Three builds, each 1.5 s from its call, on a pool of one thread whose first build is held 5 s: each ends
    1.5 s after the call, the queued ones never starting (on main they ended 1.5, 3 and 4.5 s after it)."""
    builds = [slow_build(tmp_path / f"b{n}", http_server, f"slow{n}.tgz") for n in range(3)]
    http_server.slow_seconds = 5.0

    async def service(pool: concurrent.futures.ThreadPoolExecutor) -> list[tuple[float, Cancelled]]:
        async def one(n: int) -> tuple[float, Cancelled]:
            began = time.monotonic()
            try:
                await prepare_async(builds[n], deadline=1.5, executor=pool)
            except Cancelled as err:
                return time.monotonic() - began, err
            raise AssertionError("the build was not stopped")

        return await asyncio.gather(*(one(n) for n in range(3)))

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        ended = asyncio.run(service(pool))
    for took, err in ended:
        assert 1.4 < took < 2.0, [t for t, _ in ended]
        assert err.exit_code == 1 and "deadline passed (1.5 s)" in str(err), err
    assert [written(inputs) for inputs in builds] == [[], [], []]
    assert [len(http_server.seen(f"slow{n}.tgz")) for n in range(3)] == [1, 0, 0]  # the queued never asked


def test_a_nan_deadline_is_refused_at_the_call(http_server: FileServer, tmp_path: Path) -> None:
    inputs = slow_build(tmp_path, http_server)
    for call in (
        lambda: prepare(inputs, deadline=float("nan")),
        lambda: plan_run(inputs, deadline=float("nan")),
    ):
        began = time.monotonic()
        with pytest.raises(ValueError, match="deadline= takes a number of seconds, not nan"):
            call()
        assert time.monotonic() - began < 0.5
    with pytest.raises(ValueError, match="not nan"):
        asyncio.run(prepare_async(inputs, deadline=float("nan")))
    assert written(inputs) == [] and http_server.seen("slow.tgz") == []


def test_an_endless_deadline_is_none(
    http_server: FileServer, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """``deadline=inf`` (or one past what a timer can wait): the run has no deadline, and says nothing on stderr
    (on main the timer's thread died with a traceback of its own)."""
    http_server.slow_seconds = 0.1
    for n, deadline in enumerate((float("inf"), 1e300)):
        inputs = slow_build(tmp_path / str(n), http_server, f"slow{n}.tgz")
        http_server.slow_seconds = 0.1
        assert [bp.id for bp in prepare(inputs, deadline=deadline).buildpacks] == ["example/slow"]
    time.sleep(0.2)
    assert capfd.readouterr().err == ""


def test_a_process_pool_is_refused_at_the_call(http_server: FileServer, tmp_path: Path) -> None:
    """A process pool type-checks no more (the parameter is a ThreadPoolExecutor) and is refused at the call with
    a TypeError saying why, for each coroutine (on main: a bare AttributeError from pickling the run)."""
    inputs = slow_build(tmp_path, http_server)
    plan = plan_run(inputs)
    asked = len(http_server.seen("slow.tgz"))  # the plan's probe
    with concurrent.futures.ProcessPoolExecutor(1) as pool:
        calls = (
            prepare_async(inputs, executor=pool),  # type: ignore[arg-type]  # what mypy refuses
            plan_run_async(inputs, executor=pool),  # type: ignore[arg-type]
            run_plan_async(plan, inputs, executor=pool),  # type: ignore[arg-type]
        )
        for call in calls:
            with pytest.raises(
                TypeError, match="ThreadPoolExecutor, not a ProcessPoolExecutor: a run's cancel"
            ):
                asyncio.run(call)
    with pytest.raises(
        TypeError, match=r"executor= takes a concurrent\.futures\.ThreadPoolExecutor, not str"
    ):
        asyncio.run(prepare_async(inputs, executor="pool"))  # type: ignore[arg-type]
    assert written(inputs) == [] and len(http_server.seen("slow.tgz")) == asked
