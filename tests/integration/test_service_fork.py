"""A service that forks (``os.fork``, a ``multiprocessing`` 'fork' worker) while, or after, a thread of its own
builds: the child can build (issue 50: "os.fork while a sibling thread extracts hangs the child's builds forever:
two process-wide locks are inherited held").

Real components: the suite's HTTP server on 127.0.0.1, real archives (one of 4,000 files, so that a sibling thread
is extracting when the fork comes), real forks. A child that hangs is killed after 20 s and the test fails.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import tarfile
import threading
import time
from pathlib import Path

import pytest

from preparer import Inputs, prepare
from preparer._fs import PER_FILE_WORK
from tests.buildpacks import buildpack_toml, make_tgz
from tests.plugins.http_server import FileServer
from tests.service import build as service_build

#: Seconds a child may take to build before it is taken for hung.
CHILD_LIMIT = 20


def build(root: Path, *uris: str, cache: Path | None = None) -> Inputs:
    return service_build(root, *uris, download_cache=None if cache is None else str(cache))


def many_files(path: Path, bp_id: str, count: int = 4000) -> None:
    """A buildpack archive of ``count`` small files: seconds of per-file work to extract."""
    source = path.parent / (path.name + ".src")
    (source / "bin").mkdir(parents=True)
    (source / "buildpack.toml").write_text(buildpack_toml(bp_id))
    for name in ("detect", "build"):
        (source / "bin" / name).write_text("#!/bin/sh\n")
    (source / "files").mkdir()
    for n in range(count):
        (source / "files" / f"f{n}").write_text(str(n))
    with tarfile.open(path, "w:gz") as tar:
        tar.add(source, arcname=".")


def child_builds(inputs: Inputs) -> int:
    """In the child: build ``inputs``, 0 when it committed (SIGALRM ends a child that hangs)."""
    signal.alarm(CHILD_LIMIT)
    try:
        report = prepare(inputs)
        return 0 if [bp.id for bp in report.buildpacks] == ["svc/child"] else 2
    except BaseException:  # noqa: BLE001 - the child's outcome is its exit status
        return 3


def forked(inputs: Inputs) -> int:
    """The exit status of a forked child that builds ``inputs`` (-signal when a signal ended it)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = child_builds(inputs)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.fixture
def served(http_server: FileServer) -> FileServer:
    many_files(http_server.root / "big.tgz", "svc/big")
    make_tgz(http_server.root / "child.tgz", "svc/child")
    return http_server


def sibling_extracting(served: FileServer, root: Path) -> threading.Thread:
    """A thread of the service's that builds the big archive; returned once it is extracting."""
    inputs = build(root, served.url("big.tgz"))
    thread = threading.Thread(target=prepare, args=(inputs,), name="sibling")
    thread.start()
    ends = time.monotonic() + 30
    while not PER_FILE_WORK.locked():  # the extraction's per-file work has begun
        assert thread.is_alive() and time.monotonic() < ends, "the sibling never extracted"
        time.sleep(0.001)
    return thread


def test_a_child_forked_while_a_sibling_extracts_can_build(served: FileServer, tmp_path: Path) -> None:
    sibling = sibling_extracting(served, tmp_path / "sibling")
    status = forked(build(tmp_path / "child", served.url("child.tgz")))
    sibling.join()
    assert status == 0, f"the child {'hung' if status == -signal.SIGALRM else 'failed'} (status {status})"


def test_a_child_forked_after_builds_can_build(served: FileServer, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for n in range(3):
        prepare(build(tmp_path / f"b{n}", served.url("child.tgz"), cache=cache))  # a cache's installs too
    status = forked(build(tmp_path / "child", served.url("child.tgz"), cache=cache))
    assert status == 0, status


def test_a_multiprocessing_fork_worker_can_build_while_a_sibling_extracts(
    served: FileServer, tmp_path: Path
) -> None:
    sibling = sibling_extracting(served, tmp_path / "sibling")
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        outcome = pool.apply_async(child_builds, (build(tmp_path / "child", served.url("child.tgz")),))
        status = outcome.get(CHILD_LIMIT + 5)
    sibling.join()
    assert status == 0, status
