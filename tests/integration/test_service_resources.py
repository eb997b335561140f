"""Nothing of a run outlives it: a service runs hundreds of builds in one process, and every session, pooled
connection, thread and temporary file a run opens is closed when the run returns, whether it succeeded, failed
or was cancelled (issue: the library in a long-lived build service, round 2).

Real components: the http file server on 127.0.0.1, which speaks HTTP/1.1 and keeps connections alive as real
servers do, and Debian's docker-registry, which does too. Counts are taken in this process, where the runs are.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import gc
import logging
import os
import shutil
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from preparer import Cancel, Cancelled, Inputs, plan_run, prepare, run_plan
from preparer.errors import FetchError
from tests.buildpacks import make_tgz
from tests.plugins.http_server import FileServer
from tests.plugins.registry import Registry, buildpack_layer, push_package
from tests.service import build as service_build

RUNS, POOL = 200, 8


def build(root: Path, *uris: str, cache: Path | None = None) -> Inputs:
    return service_build(root, *uris, download_cache=None if cache is None else str(cache))


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@dataclasses.dataclass
class Held:
    descriptors: int
    threads: int
    memory: int

    @classmethod
    def now(cls) -> Held:
        gc.collect()
        traced = tracemalloc.take_snapshot().filter_traces(NOT_THE_SERVERS)
        return cls(descriptors(), threading.active_count(), sum(trace.size for trace in traced.traces))


#: The test servers run in this process and keep a log of every request they answered: what they hold is not the
#: runs'. (Frames deep enough to see them: :func:`many_runs` traces 12.)
NOT_THE_SERVERS = [
    tracemalloc.Filter(False, pattern, all_frames=True)
    for pattern in ("*/socketserver.py", "*/tests/plugins/*", tracemalloc.__file__)
]


def settled(before: Held, seconds: float = 5.0) -> Held:
    """What the process holds once the servers' own threads have seen their clients go (they end when a client
    closes its connection: a connection left open keeps one)."""
    ends = time.monotonic() + seconds
    while True:
        now = Held.now()
        if (
            now.descriptors <= before.descriptors + 1 and now.threads <= before.threads
        ) or time.monotonic() > ends:
            return now
        time.sleep(0.1)


def many_runs(tmp_path: Path, runs: int, one: Callable[[Path], None], warm: int = POOL) -> tuple[Held, Held]:
    """``runs`` builds in a pool of :data:`POOL` threads, after a warm-up of ``warm`` (one per thread: imports and
    the interpreter's own caches are not a run's leak); what the process held before and after."""
    with concurrent.futures.ThreadPoolExecutor(POOL) as pool:
        list(pool.map(one, [tmp_path / f"warm{n}" for n in range(warm)]))
        tracemalloc.start(12)
        try:
            before = Held.now()
            list(pool.map(one, [tmp_path / f"run{n}" for n in range(runs)]))
            for n in range(runs):  # their trees: a service removes them too
                shutil.rmtree(tmp_path / f"run{n}", ignore_errors=True)
            after = settled(before)
        finally:
            tracemalloc.stop()
    return before, after


def assert_nothing_held(before: Held, after: Held) -> None:
    assert after.descriptors <= before.descriptors + 1, (before, after, os.listdir("/proc/self/fd"))
    assert after.threads <= before.threads, [t.name for t in threading.enumerate()]
    assert after.memory - before.memory <= 1 << 20, (before, after)


@pytest.fixture(autouse=True)
def _service_logging() -> Iterator[None]:
    """The ``preparer`` logger as a service has it: warnings to the service's handlers. (Earlier tests in the same
    worker may have left it at debug with a handler writing to a captured stream, which keeps every line.)"""
    logger = logging.getLogger("preparer")
    saved = logger.handlers[:], logger.level, logger.propagate
    logger.handlers, logger.propagate = [], True
    logger.setLevel(logging.WARNING)  # (setLevel, not the attribute: the level is cached)
    yield
    logger.handlers, logger.propagate = saved[0], saved[2]
    logger.setLevel(saved[1])


@pytest.fixture
def keep_alive(http_server: FileServer) -> FileServer:
    for n in range(2):
        make_tgz(http_server.root / f"bp{n}.tgz", f"svc/bp{n}", payload=os.urandom(2000))
    return http_server


@pytest.fixture(scope="module")
def image(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> str:
    bp = ("svc/img", "1.0.0")
    layer = buildpack_layer(tmp_path_factory.mktemp("img"), [(*bp, "")])
    push_package(registry, "svc/resources", "1", [(layer, [(*bp, "")])], bp)
    return f"docker://{registry.host}/svc/resources:1"


@pytest.mark.parametrize("cached", [False, True], ids=["no-cache", "shared-cache"])
def test_two_hundred_runs_that_download_hold_nothing_after(
    keep_alive: FileServer, image: str, tmp_path: Path, cached: bool
) -> None:
    cache = tmp_path / "cache" if cached else None
    uris = (keep_alive.url("bp0.tgz"), keep_alive.url("bp1.tgz"), image)

    def one(root: Path) -> None:
        report = prepare(build(root, *uris, cache=cache))
        assert [bp.id for bp in report.buildpacks] == ["svc/bp0", "svc/bp1", "svc/img"]

    before, after = many_runs(tmp_path, RUNS, one)
    assert_nothing_held(before, after)


def test_plans_that_measure_their_downloads_hold_nothing_after(
    keep_alive: FileServer, image: str, tmp_path: Path
) -> None:
    """``plan_run`` asks each source how large it is (a HEAD, an image's manifests) with a transport of its own:
    closed with the planning, as the run's is with the run."""
    uris = (keep_alive.url("bp0.tgz"), keep_alive.url("bp1.tgz"), image)

    def one(root: Path) -> None:
        plan = plan_run(build(root, *uris))
        assert plan.unknown_sizes == 0 and plan.download_size > 0
        assert [bp.id for bp in run_plan(plan).buildpacks] == ["svc/bp0", "svc/bp1", "svc/img"]

    # Half as many: the runs themselves are counted above. A longer warm-up: each plan opens two sessions, and what
    # the interpreter keeps of them (seen: the connection classes each session makes) reaches its high-water mark
    # only after some tens of runs; a leak goes on growing after it.
    before, after = many_runs(tmp_path, RUNS // 2, one, warm=RUNS // 2)
    assert_nothing_held(before, after)


def test_runs_that_fail_mid_download_hold_nothing_after(keep_alive: FileServer, tmp_path: Path) -> None:
    whole = make_tgz(tmp_path / "cut.tgz", "svc/cut", payload=os.urandom(200_000)).read_bytes()
    (keep_alive.root / "cut.tgz").write_bytes(whole[: len(whole) // 2])  # the gzip stream ends half-way

    def one(root: Path) -> None:
        with pytest.raises(FetchError, match=r"cut\.tgz"):
            prepare(build(root, keep_alive.url("bp0.tgz"), keep_alive.url("cut.tgz")))

    before, after = many_runs(tmp_path, 80, one)
    assert_nothing_held(before, after)


def test_runs_cancelled_mid_download_hold_nothing_after(keep_alive: FileServer, tmp_path: Path) -> None:
    make_tgz(keep_alive.root / "slow.tgz", "svc/slow", payload=os.urandom(50))

    def one(root: Path) -> None:
        keep_alive.fail("slow.tgz", "trickle")
        handle = Cancel()
        timer = threading.Timer(0.3, handle.set)
        timer.start()
        try:
            with pytest.raises(Cancelled):
                prepare(build(root, keep_alive.url("bp0.tgz"), keep_alive.url("slow.tgz")), cancel=handle)
        finally:
            timer.join()

    before, after = many_runs(tmp_path, 24, one)
    assert_nothing_held(before, after)


def test_runs_given_the_round_s_inputs_hold_nothing_after(keep_alive: FileServer, tmp_path: Path) -> None:
    """What this round added opens files of its own in each run: the list flags' env files, system.toml, the
    telemetry file each run appends to. Many runs at once leave no descriptor, thread or memory behind."""
    system = tmp_path / "system.toml"
    system.write_text('[system]\n[[system.post.buildpacks]]\nid = "examples/procfile"\nversion = "5.0.0"\n')
    env_file = tmp_path / "build.env"
    env_file.write_text("# the platform's\nA=1\r\nB=2")

    def one(root: Path) -> None:
        inputs = dataclasses.replace(
            build(root),
            buildpacks=(keep_alive.url("bp0.tgz"), "examples/node@1.2.0"),
            env_files=(str(env_file),),
            build_env=("C=3", "HOME"),
            environ={"HOME": "/home/tenant"},
            system_path=str(system),
            telemetry=True,
        )
        report = prepare(inputs)
        assert [m.id for m in report.groups[0].members] == ["svc/bp0", "examples/node", "examples/procfile"]
        assert (root / "layers" / "tracing" / "lifecycle" / "prepare.jsonl").is_file()
        assert (root / "platform" / "env" / "HOME").read_text() == "/home/tenant"

    before, after = many_runs(tmp_path, 40, one)  # a descriptor held per run would show 40 times
    assert_nothing_held(before, after)
