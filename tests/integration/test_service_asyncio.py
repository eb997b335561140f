"""``await prepare_async(...)`` in a service built on asyncio: cancelling the awaiting task (``asyncio.timeout``,
``asyncio.wait_for``, a failing task group) cancels the run, and the await ends only once the run has stopped, so
nothing is written after the caller is told (issue: the library in a long-lived build service, round 2).

Real components: the suite's HTTP server, whose answer is held back for a second, so that a run not stopped would
commit a second after it began; the test looks at the build's directories when the cancellation is seen, and again
after that second has passed.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from pathlib import Path

import pytest

from preparer import Inputs, plan_run_async, prepare_async, run_plan_async
from tests.buildpacks import make_tgz
from tests.golden import BUILDER, Layout
from tests.plugins.http_server import FileServer

#: Seconds the server holds its answer back: a run that goes on commits after them.
HELD = 1.0


def slow_build(root: Path, server: FileServer, name: str = "slow.tgz") -> Inputs:
    """A build of one buildpack from ``server``, whose answer comes :data:`HELD` seconds late."""
    make_tgz(server.root / name, "example/slow")
    server.slow_seconds = HELD
    server.fail(name, "slow")
    layout = Layout(root)
    shutil.copytree(BUILDER / "buildpacks", layout.buildpacks)
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    (layout.app / "project.toml").write_text(
        f'[_]\nschema-version = "0.2"\n[[io.buildpacks.group]]\nuri = "{server.url(name)}"\n'
    )
    return Inputs(
        app_dir=str(layout.app), layers_dir=str(layout.layers), platform_dir=str(layout.platform),
        buildpacks_dir=str(layout.buildpacks), order_path=str(layout.order), download_cache=None,
    )  # fmt: skip


def written(inputs: Inputs) -> list[str]:
    """What the run wrote: the layers directory and the buildpacks installed."""
    found = [p.relative_to(inputs.layers_dir).as_posix() for p in inputs.layers_dir.rglob("*")]
    return found + [p.name for p in (inputs.buildpacks_dir / "example_slow").glob("*")]


def runs_alive() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == "preparer-run"]


async def after_the_commit_would_have_been(inputs: Inputs) -> list[str]:
    """What is written once a run not stopped would have committed."""
    await asyncio.sleep(HELD + 0.5)
    return written(inputs)


def test_a_run_not_cancelled_commits(http_server: FileServer, tmp_path: Path) -> None:
    """The case below, not cancelled: the run writes (so the tests below can see a write that should not be)."""
    inputs = slow_build(tmp_path, http_server)
    report = asyncio.run(prepare_async(inputs))
    assert [(bp.id, bp.action) for bp in report.buildpacks] == [("example/slow", "installed")]
    assert "order.toml" in written(inputs)


def test_asyncio_timeout_cancels_the_run_and_waits_for_it(http_server: FileServer, tmp_path: Path) -> None:
    inputs = slow_build(tmp_path, http_server)

    async def service() -> tuple[list[str], list[str], float]:
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await prepare_async(inputs)
        told = time.monotonic() - began
        return runs_alive(), await after_the_commit_would_have_been(inputs), told

    alive, later, told = asyncio.run(service())
    assert alive == []  # the run had stopped when the caller was told
    assert later == []  # and nothing was written after
    assert told < 0.8, told  # 0.3 s and the run's stop (10 ms measured)


def test_wait_for_cancels_the_run_and_waits_for_it(http_server: FileServer, tmp_path: Path) -> None:
    inputs = slow_build(tmp_path, http_server)

    async def service() -> tuple[list[str], list[str]]:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(prepare_async(inputs), 0.3)
        return runs_alive(), await after_the_commit_would_have_been(inputs)

    assert asyncio.run(service()) == ([], [])


def test_a_failing_task_group_cancels_its_runs(http_server: FileServer, tmp_path: Path) -> None:
    inputs = slow_build(tmp_path, http_server)

    async def fails() -> None:
        await asyncio.sleep(0.3)
        raise RuntimeError("another part of the request failed")

    async def service() -> tuple[list[str], list[str]]:
        with pytest.raises(ExceptionGroup) as failed:
            async with asyncio.TaskGroup() as group:
                group.create_task(prepare_async(inputs))
                group.create_task(fails())
        assert [str(e) for e in failed.value.exceptions] == ["another part of the request failed"]
        return runs_alive(), await after_the_commit_would_have_been(inputs)

    assert asyncio.run(service()) == ([], [])


def test_run_plan_async_is_cancelled_with_its_task(http_server: FileServer, tmp_path: Path) -> None:
    inputs = slow_build(tmp_path, http_server)
    http_server.faults.pop("/slow.tgz")  # the plan's HEAD (measuring the download) is answered at once...

    async def service() -> tuple[list[str], list[str]]:
        plan = await plan_run_async(inputs)
        http_server.fail("slow.tgz", "slow")  # ...and the download itself is held back
        task = asyncio.create_task(run_plan_async(plan))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return runs_alive(), await after_the_commit_would_have_been(inputs)

    assert asyncio.run(service()) == ([], [])


def test_a_run_waiting_for_the_executor_never_starts(http_server: FileServer, tmp_path: Path) -> None:
    """With an executor of one thread busy, a second run waits in its queue; cancelled there, it never begins."""
    import concurrent.futures

    first = slow_build(tmp_path / "a", http_server, "first.tgz")
    second = slow_build(tmp_path / "b", http_server, "second.tgz")

    async def service() -> list[str]:
        with concurrent.futures.ThreadPoolExecutor(1) as executor:
            running = asyncio.create_task(prepare_async(first, executor=executor))
            queued = asyncio.create_task(prepare_async(second, executor=executor))
            await asyncio.sleep(0.2)
            queued.cancel()
            with pytest.raises(asyncio.CancelledError):
                await queued
            await running
        return written(second)

    assert asyncio.run(service()) == []
    assert http_server.seen("second.tgz") == []  # not even asked
    assert "order.toml" in written(first)
