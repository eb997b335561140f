"""A progress callback that starts a dependent build starts a build of its own: its cancel, deadline, log context
and measurements are its own, as a callback asyncio runs is in the context of whoever scheduled it (issue 50: "a
progress callback that starts a dependent build runs it in the first build's context").

Real components: the suite's HTTP server on 127.0.0.1 (a trickling download keeps build A busy; a held answer keeps
build B busy), real layouts, the public API only. A service starts the dependent build two ways: in the callback
itself, and on its event loop (``loop.call_soon_threadsafe``, as docs/library.md tells it to hand events over).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from preparer import (
    Cancel,
    Cancelled,
    Download,
    Plan,
    PreparerError,
    Report,
    plan_run,
    prepare,
    prepare_async,
    run_plan,
)
from tests.buildpacks import make_tgz
from tests.plugins.http_server import FileServer
from tests.service import build


class Lines(logging.Handler):
    """Every record of the ``preparer`` logger, with the run id it carries."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[tuple[str | None, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append((getattr(record, "run_id", None), record.getMessage()))

    def ids_of(self, text: str) -> set[str | None]:
        return {run_id for run_id, message in self.records if text in message}


@pytest.fixture
def lines() -> Iterator[Lines]:
    logger = logging.getLogger("preparer")
    handler, level = Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture
def served(http_server: FileServer) -> FileServer:
    make_tgz(http_server.root / "first.tgz", "svc/first", payload=os.urandom(2000))
    make_tgz(http_server.root / "long.tgz", "svc/long", payload=os.urandom(40))
    make_tgz(http_server.root / "dependent.tgz", "svc/dependent", payload=os.urandom(3000))
    http_server.slow_seconds = 1.0
    return http_server


def test_a_build_started_in_a_callback_is_its_own(served: FileServer, tmp_path: Path, lines: Lines) -> None:
    """Build A's callback plans and runs build B when A's first download is done; A is cancelled while B runs.
    B is measured, logs under its own id, and commits: A's cancel is A's alone."""
    served.fail("long.tgz", "trickle")  # A goes on downloading until it is cancelled
    a_inputs = build(tmp_path / "a", served.url("first.tgz"), served.url("long.tgz"))
    b_inputs = build(tmp_path / "b", served.url("dependent.tgz"))
    a_handle = Cancel()
    b: dict[str, object] = {}

    def dependent() -> None:
        plan = plan_run(b_inputs)
        b["plan"] = plan
        served.fail("dependent.tgz", "slow")  # B's download is held back while A is cancelled
        threading.Timer(0.3, a_handle.set).start()
        try:
            b["report"] = run_plan(plan)
        except PreparerError as err:  # what a service would see of B
            b["error"] = err

    def progress(event: Download) -> None:
        if event.kind == "finished" and event.url.endswith("first.tgz"):
            dependent()

    with pytest.raises(Cancelled):
        prepare(a_inputs, progress=progress, cancel=a_handle, run_id="build-a")
    assert "error" not in b, b.get("error")
    report, plan = b["report"], b["plan"]
    assert isinstance(report, Report) and isinstance(plan, Plan)
    assert [bp.id for bp in report.buildpacks] == ["svc/dependent"]
    assert plan.download_size == (served.root / "dependent.tgz").stat().st_size  # measured: a plan handed out
    b_ids = lines.ids_of(str(b_inputs.app_dir / "project.toml"))
    assert len(b_ids) == 1 and "build-a" not in b_ids and None not in b_ids, b_ids


def test_a_build_the_loop_starts_for_a_callback_is_its_own(
    served: FileServer, tmp_path: Path, lines: Lines
) -> None:
    """As docs/library.md tells a service: the callback hands its event to the loop (``call_soon_threadsafe``),
    where a task starts build B. Cancelling A's task leaves B to finish, under its own id."""
    served.fail("long.tgz", "trickle")
    a_inputs = build(tmp_path / "a", served.url("first.tgz"), served.url("long.tgz"))
    b_inputs = build(tmp_path / "b", served.url("dependent.tgz"))

    async def service() -> tuple[Report, float]:
        loop = asyncio.get_running_loop()
        started: asyncio.Future[asyncio.Task[Report]] = loop.create_future()

        def on_event(event: Download) -> None:  # on the loop
            if event.kind == "finished" and event.url.endswith("first.tgz") and not started.done():
                started.set_result(asyncio.create_task(prepare_async(b_inputs)))

        def progress(event: Download) -> None:  # in A's fetch threads
            loop.call_soon_threadsafe(on_event, event)

        a_task = asyncio.create_task(prepare_async(a_inputs, progress=progress, run_id="build-a"))
        b_task = await started
        a_task.cancel()
        began = time.monotonic()
        with pytest.raises(asyncio.CancelledError):
            await a_task
        stopped = time.monotonic() - began
        return await b_task, stopped

    served.fail("dependent.tgz", "slow")
    report, stopped = asyncio.run(service())
    assert [bp.id for bp in report.buildpacks] == ["svc/dependent"]
    assert stopped < 1.0, stopped
    b_ids = lines.ids_of(str(b_inputs.app_dir / "project.toml"))
    assert len(b_ids) == 1 and "build-a" not in b_ids and None not in b_ids, b_ids
