"""Interrupted runs, as platforms interrupt them: SIGTERM when a pod is deleted, Ctrl-C, ``kill -9`` (the OOM
killer, a lost node) at any moment, with another run alive beside it; and the library stopped from a thread.

The real CLI in a subprocess against the real HTTP server; a seeded loop picks the kill points (its seed is in
the failure message, so a failure can be replayed).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

from preparer import Inputs, prepare
from preparer.errors import Cancelled
from preparer.fetch.parallel import MAX_WORKERS
from preparer.interrupt import stop
from tests.buildpacks import make_dir, make_tgz
from tests.golden import BUILDER, Layout
from tests.plugins.cli import base_env
from tests.plugins.http_server import FileServer
from tests.projects import HEAD


def project(*uris: str, extra: str = "") -> str:
    return HEAD + extra + "".join(f'[[io.buildpacks.group]]\nuri = "{u}"\n' for u in uris)


def new_layout(root: Path) -> Layout:
    layout = Layout(root)
    shutil.copytree(BUILDER, layout.root / "cnb")
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    return layout


def start(layout: Layout, home: Path, cache: Path, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "preparer", *layout.flags(), "-download-cache", str(cache), *args]
    return subprocess.Popen(
        command, env=base_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def contents(root: Path, skip: tuple[str, ...] = ()) -> dict[str, object]:
    """Every entry below ``root``: a file's bytes and mode, a link's target, a directory's mode."""
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if rel.split("/")[0].startswith(skip):
            continue
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            found[rel] = ("link", os.readlink(path))
        elif stat.S_ISDIR(info.st_mode):
            found[rel] = ("dir", stat.S_IMODE(info.st_mode))
        else:
            found[rel] = ("file", stat.S_IMODE(info.st_mode), path.read_bytes())
    return found


def outputs(layout: Layout, skip: tuple[str, ...] = ()) -> dict[str, dict[str, object]]:
    """What the phase may change: the app, the layers, the platform directory, the buildpacks."""
    return {
        "app": contents(layout.app),
        "layers": contents(layout.layers),
        "platform": contents(layout.platform) if layout.platform.exists() else {},
        "buildpacks": contents(layout.buildpacks, skip),
    }


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 20) -> None:
    ends = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < ends, f"timed out waiting for {what}"
        time.sleep(0.02)


def staging_dirs(layout: Layout) -> set[str]:
    return {p.name for p in layout.buildpacks.iterdir() if p.name.startswith(".preparer-staging-")}


def cache_tmp(cache: Path) -> set[str]:
    tmp = cache / "tmp"
    return {p.name for p in tmp.iterdir()} if tmp.is_dir() else set()


def complete_cache(cache: Path) -> None:
    """Only complete entries: every tree has its manifest."""
    trees = cache / "trees" / "sha256"
    if trees.is_dir():
        for tree in trees.iterdir():
            assert (tree / "manifest.json").is_file() and (tree / "root").is_dir(), tree.name


# SIGTERM and SIGINT during parallel downloads from a slow server (as many at once as the preparer runs).


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_parallel_downloads_within_a_second(signum: int, http_server: FileServer,
                                                           tmp_path: Path) -> None:  # fmt: skip
    layout = new_layout(tmp_path / "build")
    names = [f"bp{i}.tgz" for i in range(4)]
    for i, name in enumerate(names):
        make_tgz(http_server.root / name, f"me/slow{i}", payload=os.urandom(4000))
        http_server.fail(name, "trickle")
    (layout.app / "debug.log").write_text("excluded")
    (layout.app / "index.js").write_text("kept")
    (layout.app / "project.toml").write_text(
        project(*map(http_server.url, names), extra='[io.buildpacks]\nexclude = ["*.log"]\n'
                '[[io.buildpacks.build.env]]\nname = "A"\nvalue = "1"\n')
    )  # fmt: skip
    report = tmp_path / "report.toml"
    before = outputs(layout)
    cache = tmp_path / "cache"
    proc = start(layout, tmp_path, cache, "-prepare-report", str(report))
    at_once = min(len(names), MAX_WORKERS)
    wait_for(lambda: sum(bool(http_server.seen(n)) for n in names) == at_once, "the downloads to start")
    time.sleep(0.3)  # bytes are trickling in
    sent = time.monotonic()
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=10)
    took = time.monotonic() - sent
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, stderr
    assert stderr.splitlines()[-1] == f"ERROR: failed to prepare: interrupted ({name})"
    assert took < 1.0, f"stopped {took:.2f} s after {name}"
    assert outputs(layout) == before
    assert cache_tmp(cache) == set()
    complete_cache(cache)
    assert (
        report.read_text()
        == f'[error]\ncode = {128 + signum}\nmessage = "failed to prepare: interrupted ({name})"\n'
    )
    assert "preparer-staging" not in stderr


# kill -9 at random points, with a live run beside the killed one.


@pytest.fixture
def sources(http_server: FileServer, tmp_path: Path) -> Iterator[str]:
    """A project of three http archives of many small files, a local directory and an inline buildpack, with an
    exclude and env: a run goes through every phase (download, extraction, cache, commit, removal)."""
    for i in range(3):
        src = make_dir(tmp_path / f"src{i}", f"me/many{i}", payload=os.urandom(2000))
        for j in range(150):
            (src / "lib" / f"f{j}.rb").parent.mkdir(exist_ok=True)
            (src / "lib" / f"f{j}.rb").write_text(f"# file {j} of {i}\n" * 20)
        subprocess.run(
            ["tar", "-czf", str(http_server.root / f"many{i}.tgz"), "-C", str(src), "."], check=True
        )
    make_tgz(http_server.root / "slow.tgz", "me/slow", payload=os.urandom(4000))
    inline = '[[io.buildpacks.group]]\nid = "me/inline"\n[io.buildpacks.group.script]\napi = "0.10"\ninline = "echo hi"\n'
    yield project(
        *(http_server.url(f"many{i}.tgz") for i in range(3)), "./localbp",
        extra='[io.buildpacks]\nexclude = ["*.log", "tmp/"]\n[[io.buildpacks.build.env]]\nname = "A"\nvalue = "1"\n',
    ) + inline  # fmt: skip


def fill_app(layout: Layout, descriptor: str) -> None:
    (layout.app / "project.toml").write_text(descriptor)
    make_dir(layout.app / "localbp", "me/local", payload=b"local")
    (layout.app / "tmp").mkdir()
    for i in range(50):
        (layout.app / "tmp" / f"{i}.log").write_text("x")
        (layout.app / f"keep{i}.py").write_text("y")


class Reference(NamedTuple):
    """An uninterrupted run of ``sources``: the outputs before and after it, and how long it took."""

    before: dict[str, dict[str, object]]
    after: dict[str, dict[str, object]]
    seconds: float


def uninterrupted(sources: str, tmp_path: Path) -> Reference:
    reference = new_layout(tmp_path / "reference")
    fill_app(reference, sources)
    before = outputs(reference)
    started = time.monotonic()
    run = start(reference, tmp_path, tmp_path / "reference-cache")
    _, stderr = run.communicate(timeout=120)
    seconds = time.monotonic() - started
    assert run.returncode == 0, stderr
    return Reference(before, outputs(reference), seconds)


def seeded() -> tuple[int, random.Random]:
    """The seed of the moments chosen (``PREPARER_KILL_SEED`` replays a failure), and their generator."""
    seed = int(os.environ.get("PREPARER_KILL_SEED", random.randrange(1 << 30)))
    return seed, random.Random(seed)


def test_after_kill_9_at_any_moment_the_next_run_writes_what_an_uninterrupted_run_does(
    sources: str, http_server: FileServer, tmp_path: Path
) -> None:
    reference = uninterrupted(sources, tmp_path)
    expected, duration = reference.after, reference.seconds
    seed, rng = seeded()
    cache = tmp_path / "cache"  # shared by every run below, as on a persistent volume
    for i in range(8):
        why = f"seed {seed}, iteration {i}"
        layout = new_layout(tmp_path / f"build{i}")
        fill_app(layout, sources)
        # A run that stays alive beside the killed one, sharing its <buildpacks> and the cache.
        live_layout = new_layout(tmp_path / f"live{i}")
        (live_layout.app / "project.toml").write_text(project(http_server.url("slow.tgz")))
        http_server.fail("slow.tgz", "trickle")
        live = start(live_layout, tmp_path, cache, "-buildpacks", str(layout.buildpacks))
        wait_for(lambda i=i: len(http_server.seen("slow.tgz")) > i, f"the live run's download ({why})")  # type: ignore[misc]
        wait_for(
            lambda layout=layout: len(staging_dirs(layout)) == 1 and len(cache_tmp(cache)) == 1,  # type: ignore[misc]
            f"the live run's dirs ({why})",
        )
        live_staging, live_tmp = staging_dirs(layout), cache_tmp(cache)

        victim = start(layout, tmp_path, cache)
        time.sleep(rng.uniform(0, duration * 1.2))
        victim.kill()
        victim.communicate(timeout=30)

        again = start(layout, tmp_path, cache)
        _, stderr = again.communicate(timeout=120)
        assert again.returncode == 0, f"{why}: {stderr}"
        assert outputs(layout, skip=(".preparer-staging-",)) == expected, why
        assert staging_dirs(layout) == live_staging, (
            why
        )  # the dead run's staging removed, the live one's kept
        assert cache_tmp(cache) == live_tmp, why  # the same for the cache's temporary directories
        complete_cache(cache)
        assert "preparer-staging" not in stderr, why

        assert live.poll() is None, why
        live.send_signal(signal.SIGTERM)
        _, live_err = live.communicate(timeout=10)
        assert live.returncode == 143, f"{why}: {live_err}"
        assert staging_dirs(layout) == set(), why
        assert cache_tmp(cache) == set(), why


# The library, stopped from another thread.


def test_a_library_run_stopped_from_a_thread_raises_cancelled_and_changes_nothing(
    http_server: FileServer, tmp_path: Path
) -> None:
    layout = new_layout(tmp_path / "build")
    make_tgz(http_server.root / "bp.tgz", "me/slow", payload=os.urandom(4000))
    http_server.fail("bp.tgz", "trickle")
    (layout.app / "project.toml").write_text(project(http_server.url("bp.tgz")))
    before = outputs(layout)
    inputs = Inputs(
        app_dir=str(layout.app), layers_dir=str(layout.layers), platform_dir=str(layout.platform),
        buildpacks_dir=str(layout.buildpacks), order_path=str(layout.order), download_cache=str(tmp_path / "cache"),
    )  # fmt: skip
    timer = threading.Timer(1.0, stop, args=(signal.SIGTERM,))
    timer.start()
    started = time.monotonic()
    with pytest.raises(Cancelled) as stopped:  # an ordinary error: not a KeyboardInterrupt
        prepare(inputs)
    assert time.monotonic() - started < 2.5
    assert stopped.value.exit_code == 143
    assert stopped.value.message == "failed to prepare: interrupted (SIGTERM)"
    assert outputs(layout) == before
    assert cache_tmp(tmp_path / "cache") == set()
    # The next run is not stopped by the request to stop the last one.
    prepare(inputs)
    assert (layout.buildpacks / "me_slow" / "1.0.0" / "buildpack.toml").is_file()


def test_sigterm_at_any_moment_leaves_all_or_nothing(sources: str, tmp_path: Path) -> None:
    reference = uninterrupted(sources, tmp_path)
    before, expected, duration = reference.before, reference.after, reference.seconds
    seed, rng = seeded()
    cache = tmp_path / "cache"
    for i in range(10):
        why = f"seed {seed}, iteration {i}"
        layout = new_layout(tmp_path / f"build{i}")
        fill_app(layout, sources)
        proc = start(layout, tmp_path, cache)
        time.sleep(rng.uniform(0, duration))
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        took = time.monotonic() - sent
        after = outputs(layout)
        if proc.returncode == -signal.SIGTERM:  # before the interpreter had started the command
            assert after == before, why
            continue
        assert took < 1.0, f"{why}: stopped {took:.2f} s after SIGTERM"
        if proc.returncode == 0:  # done before the signal came
            assert after == expected, why
        else:
            assert proc.returncode == 143, f"{why}: {stderr}"
            assert stderr.splitlines()[-1] == "ERROR: failed to prepare: interrupted (SIGTERM)", why
            assert after in (before, expected), why  # held during the commit's last steps: all written
        assert staging_dirs(layout) == set() and cache_tmp(cache) == set(), why
        complete_cache(cache)
