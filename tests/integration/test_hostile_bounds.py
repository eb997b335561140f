"""Hostile input is bounded: archive bombs by header size and by number, endless bodies, devices as sources.

Each attack runs through the real CLI; the preparer must exit 1 with a message saying why, within seconds, with
its peak memory under 64 MiB, and install nothing.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.buildpacks import buildpack_toml, many_entries_tgz, raw_header
from tests.golden import BUILDER, Layout, listing
from tests.plugins.cli import measured
from tests.plugins.http_server import FileServer
from tests.projects import group

BUDGET_MIB = 64


def run_measured(layout: Layout, tmp_path: Path, project: str) -> tuple[int, str, float, float]:
    """The CLI on ``project``: exit code, stderr, peak RSS of the preparer (MiB) and seconds taken."""
    (layout.app / "project.toml").write_text(project)
    result, peak, took = measured(layout, tmp_path, env={"CNB_PREPARER_HTTP_TIMEOUT": "5"})
    return result.code, result.stderr, peak, took


def long_name_bomb(path: Path, names: int = 2000, length: int = 60_000) -> Path:
    """GNU long-name headers of 60 KB each, compressed to almost nothing (the original needed 790 MiB)."""
    data = io.BytesIO()
    data.write(
        raw_header(b"buildpack.toml", len(buildpack_toml("me/bomb"))) + buildpack_toml("me/bomb").encode()
    )
    data.write(bytes(512 - len(buildpack_toml("me/bomb")) % 512))
    for i in range(names):
        long_name = b"%d-" % i + b"a" * length
        data.write(raw_header(b"././@LongLink", len(long_name) + 1, b"L"))
        data.write(long_name + b"\0" + bytes((512 - (len(long_name) + 1) % 512) % 512))
        data.write(raw_header(b"placeholder"))
    data.write(bytes(1024))
    path.write_bytes(gzip.compress(data.getvalue(), 9))
    return path


def test_a_long_name_bomb(layout: Layout, tmp_path: Path) -> None:
    bomb = long_name_bomb(layout.app / "bomb.tgz")
    assert bomb.stat().st_size < 1 << 20
    code, stderr, rss, took = run_measured(layout, tmp_path, group("bomb.tgz"))
    assert code == 1 and "a name longer than 4096 bytes" in stderr.splitlines()[-1]
    assert rss < BUDGET_MIB and took < 30


def test_a_huge_pax_header(layout: Layout, tmp_path: Path) -> None:
    records = b"".join(b"%d comment=%s\n" % (len(b"comment=\n") + 6 + 100, b"x" * 100) for _ in range(2000))
    data = raw_header(b"PaxHeader", len(records), b"x") + records + bytes(-len(records) % 512) + bytes(1024)
    (layout.app / "pax.tar").write_bytes(data)
    code, stderr, rss, _ = run_measured(layout, tmp_path, group("pax.tar"))
    assert code == 1 and "an extended header of" in stderr and "(at most 65536 are read)" in stderr
    assert rss < BUDGET_MIB


def test_an_archive_bomb_by_number_of_entries(tmp_path: Path) -> None:
    # On a tmpfs when there is one: what is measured is the preparer, not how fast a disk creates files.
    with tempfile.TemporaryDirectory(dir="/dev/shm" if Path("/dev/shm").is_dir() else None) as work:
        layout = Layout(Path(work) / "build")
        shutil.copytree(BUILDER, layout.root / "cnb")
        layout.app.mkdir(parents=True)
        layout.layers.mkdir()
        before = listing(layout.buildpacks)
        many_entries_tgz(layout.app / "many.tgz", 110_000)
        code, stderr, rss, took = run_measured(layout, Path(work), group("many.tgz"))
        assert code == 1 and "the archive holds more than 100000 entries" in stderr
        assert rss < BUDGET_MIB and took < 30
        assert listing(layout.buildpacks) == before


def test_an_endless_body_after_the_end_marker_ends(
    layout: Layout, tmp_path: Path, http_server: FileServer
) -> None:
    toml = buildpack_toml("me/endless").encode()
    archive = raw_header(b"buildpack.toml", len(toml)) + toml + bytes(-len(toml) % 512) + bytes(1024)
    (http_server.root / "endless.tar").write_bytes(archive)
    http_server.fail("endless.tar", *["endless"] * 4)
    code, stderr, rss, took = run_measured(layout, tmp_path, group(http_server.url("endless.tar")))
    assert code == 1 and "bytes follow the end of the archive" in stderr
    assert rss < BUDGET_MIB and took < 30


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_local_uri_that_is_a_device(layout: Layout, tmp_path: Path, device: str) -> None:
    os.symlink(device, layout.app / "bp.tgz")
    code, stderr, _, took = run_measured(layout, tmp_path, group("bp.tgz"))
    assert code == 1 and "not a directory or a regular file" in stderr and took < 30


def test_rss_budget_is_real(tmp_path: Path) -> None:
    # The measurement itself: a child that allocates 100 MiB is seen above the budget.
    script = "import resource, subprocess, sys\nsubprocess.run([sys.executable, '-c', 'x = bytearray(100 << 20)'])\n"
    script += "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert int(out) / 1024 > BUDGET_MIB
