"""Extraction in a forked child (the command's way): the child never outlives what it extracts, and what it
extracts is what this process would have (tests/unit/test_extract.py runs every refusal both ways)."""

from __future__ import annotations

import gzip
import io
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from preparer import interrupt
from preparer._fs import PER_FILE_WORK
from preparer.errors import FetchError
from preparer.fetch import workers
from preparer.fetch.extract import extract_tar
from tests.buildpacks import entry, make_tar


@pytest.fixture
def forked() -> Iterator[None]:
    """Extractions fork, as the command's do while another extraction writes in its process (the lock held)."""
    before = workers._allowed
    workers._allowed = True
    BEFORE.clear()
    BEFORE.update(all_children())
    with PER_FILE_WORK:
        yield
    workers._allowed = before


def all_children() -> set[int]:
    """This process's children, zombies included."""
    found: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/children") as f:
                found |= {int(pid) for pid in f.read().split()}
        except FileNotFoundError:
            continue  # a thread that ended between the listing and the read has no children to count
    return found


#: The children this process had before a test: the servers other tests of the same worker started.
BEFORE: set[int] = set()


def children() -> set[int]:
    """The children a test made."""
    return all_children() - BEFORE


def tree(count: int) -> bytes:
    files = [(entry(f"vendor/d{i % 7}/f{i}.rb"), os.urandom(i % 900 + 10)) for i in range(count)]
    return gzip.compress(make_tar([(entry("buildpack.toml"), b'api = "0.10"\n'), *files]))


def test_a_child_extracts_what_this_process_would(tmp_path: Path, forked: None) -> None:
    data = tree(500)
    results = []
    for where in ("child", "here"):
        dest = tmp_path / where
        dest.mkdir()
        if where == "here":
            PER_FILE_WORK.release()  # no other extraction: this one is done in this process
        try:
            results.append(extract_tar(io.BytesIO(data), dest, archive="bp.tgz", record=True))
        finally:
            if where == "here":
                PER_FILE_WORK.acquire()
    child, here = results
    assert (
        child.records is not None and here.records is not None and child.records.keys() == here.records.keys()
    )
    assert [(r[1], r[3]) for r in child.records.values()] == [(r[1], r[3]) for r in here.records.values()]
    assert (child.top_level, child.files, child.links, child.dirs) == (here.top_level, here.files, here.links,
                                                                       here.dirs)  # fmt: skip
    assert child.files == 501
    assert sorted(p.relative_to(tmp_path / "child") for p in (tmp_path / "child").rglob("*")) == sorted(
        p.relative_to(tmp_path / "here") for p in (tmp_path / "here").rglob("*")
    )
    assert children() == set()


class Stalling:
    """The first bytes of an archive, then nothing until the run is called off."""

    def __init__(self, data: bytes) -> None:
        self.data, self.sent = data, False

    def read(self, size: int = -1) -> bytes:
        if not self.sent:
            self.sent = True
            return self.data
        interrupt.sleep(60)
        return b""


def test_a_cancelled_extraction_ends_its_child_at_once(tmp_path: Path, forked: None) -> None:
    start = make_tar([(entry(f"f{i}"), b"x" * 100) for i in range(50)])[: 512 * 40]  # no end marker
    handle = interrupt.Cancel()
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            with interrupt.run(handle):
                extract_tar(Stalling(start), tmp_path, archive="slow.tar")
        except BaseException as err:  # noqa: BLE001 (kept for the test)
            outcome.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    time.sleep(0.5)
    assert len(children()) == 1  # the child waits for more bytes
    began = time.monotonic()
    handle.set()
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - began < 1.5
    assert outcome and not isinstance(outcome[0], FetchError)  # the run's stop, not an extraction error
    assert children() == set()  # killed and reaped
    written = sorted(p.name for p in tmp_path.iterdir())
    time.sleep(0.2)
    assert sorted(p.name for p in tmp_path.iterdir()) == written  # nothing writes any more


def test_damaged_gzip_data_is_named_as_such_from_the_child(tmp_path: Path, forked: None) -> None:
    damaged = bytearray(tree(200))
    damaged[len(damaged) // 2 : len(damaged) // 2 + 64] = b"\xff" * 64
    with pytest.raises(FetchError, match=r"the gzip data is damaged"):
        extract_tar(io.BytesIO(bytes(damaged)), tmp_path, archive="bad.tgz")
    assert children() == set()


def test_a_refusal_in_the_child_stops_the_reading_here(tmp_path: Path, forked: None) -> None:
    class Counting(io.BytesIO):
        served = 0

        def read(self, size: int | None = -1) -> bytes:
            data = super().read(size)
            Counting.served += len(data)
            return data

    evil = make_tar([(entry("../evil"), b"x"), *((entry(f"f{i}"), b"y" * 4000) for i in range(20_000))])
    with pytest.raises(FetchError, match=r"refusing entry '\.\./evil': path contains '\.\.'"):
        extract_tar(Counting(evil), tmp_path, archive="evil.tar")
    assert Counting.served < len(evil) // 4  # the child refused the first entry; the rest was never read
    assert not (tmp_path.parent / "evil").exists() and children() == set()


@pytest.mark.parametrize(
    ("affinity", "files", "forks"),
    [
        ({0, 1}, {}, True),
        ({0}, {}, False),  # taskset -c 0: a child would only add the pipe's copies
        ({0, 1, 2, 3}, {"/sys/fs/cgroup/cpu.max": "100000 100000"}, False),  # a pod limited to one CPU
        ({0, 1, 2, 3}, {"/sys/fs/cgroup/cpu.max": "max 100000"}, True),
        ({0, 1}, {"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "150000", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"},
         False),  # cgroup v1, one and a half CPUs
        ({0, 1}, {"/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "-1", "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000"},
         True),
    ],
)  # fmt: skip
def test_forking_needs_two_processors(
    affinity: set[int], files: dict[str, str], forks: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: affinity)
    monkeypatch.setattr(workers, "_first_line", files.get)
    monkeypatch.setattr(workers, "_allowed", False)
    workers.allow()
    assert workers.enabled() is forks


def test_a_lone_extraction_stays_in_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its reading ahead already uses a second core; a child would only add the pipe."""
    monkeypatch.setattr(workers, "_allowed", True)
    monkeypatch.setattr(workers, "extract_in_child", lambda *args: pytest.fail("forked"))
    assert extract_tar(io.BytesIO(tree(20)), tmp_path, archive="bp.tgz").files == 21
