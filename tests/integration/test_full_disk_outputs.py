"""A full disk where the run's outputs go, as a user meets it: ``<layers>``, ``<platform>``, the lock's directory,
the report's and the provenance's, each a small tmpfs that is full (see tests/integration/test_full_disk.py, whose
mounting fixture these tests use); through the CLI. The commit is all or nothing: what was there before stays
byte for byte, and nothing of the run is left."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.buildpacks import make_tgz
from tests.golden import Layout, listing
from tests.integration.test_full_disk import Mount, fill, mount_tmpfs, served
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.projects import group

__all__ = ["mount_tmpfs"]  # the fixture, used by name

ENV = "[[io.buildpacks.build.env]]\nname = 'A'\nvalue = 'new'\n"


def contents(root: Path) -> dict[str, bytes]:
    """Every file below ``root`` and its bytes."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def old_outputs(layout: Layout) -> None:
    """What an earlier run left: an order.toml, project metadata and an env file (``B``: the run writes ``A``)."""
    (layout.layers / "order.toml").write_text(
        "[[order]]\n[[order.group]]\nid = 'old/one'\nversion = '0.1.0'\n"
    )
    (layout.layers / "project-metadata.toml").write_text("[source]\ntype = 'old'\n")
    (layout.platform / "env").mkdir(parents=True)
    (layout.platform / "env" / "B").write_text("old")


@pytest.mark.parametrize(("flag", "place"), [("layers", "<layers>"), ("platform", "<platform>")])
def test_a_full_layers_or_platform_disk_leaves_the_old_outputs_as_they_were(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout, mount_tmpfs: Mount,
    flag: str, place: str,
) -> None:  # fmt: skip
    old_outputs(layout)
    directory = getattr(layout, flag)
    mount_tmpfs(directory, "64k")
    fill(directory)
    (layout.app / "project.toml").write_text(served(http_server) + ENV)
    before, kept = listing(layout.root), contents(layout.root)
    result = preparer()
    assert result.code == 1, result.stderr
    assert result.stderr.splitlines()[-1].endswith(f": no space left on device in {place} ({directory})")
    assert "Traceback" not in result.stderr
    assert listing(layout.root) == before
    assert contents(layout.root) == kept  # the old order.toml, metadata and env file, byte for byte


@pytest.mark.parametrize("output", ["lock", "prepare-report", "provenance"])
def test_a_full_disk_where_an_output_file_goes_names_its_directory(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout, tmp_path: Path,
    mount_tmpfs: Mount, output: str,
) -> None:  # fmt: skip
    old_outputs(layout)
    outputs = tmp_path / "outputs"
    mount_tmpfs(outputs, "64k")
    fill(outputs)
    (layout.app / "project.toml").write_text(served(http_server) + ENV)
    before, kept = listing(layout.root), contents(layout.root)
    result = preparer(f"-{output}", str(outputs / "out.file"))
    assert result.code == 1, result.stderr
    assert result.stderr.splitlines()[-1].endswith(
        f": no space left on device in the directory ({outputs})"
    ), result.stderr
    assert result.warnings == []  # a failed run's report, which cannot be written either, is not said twice
    assert "Traceback" not in result.stderr
    assert listing(layout.root) == before
    assert contents(layout.root) == kept
    assert listing(outputs) == [".filler"]


def test_a_failed_run_whose_report_cannot_be_written_says_its_own_error(
    preparer: Callable[..., Result],
    http_server: FileServer,
    layout: Layout,
    tmp_path: Path,
    mount_tmpfs: Mount,
) -> None:
    outputs = tmp_path / "outputs"
    mount_tmpfs(outputs, "64k")
    fill(outputs)
    result = preparer(
        "-prepare-report", str(outputs / "report.toml"), project=group(http_server.url("nope.tgz"))
    )
    assert result.code == 1, result.stderr
    unwritten = (
        f"failed to write {outputs / 'report.toml'}: no space left on device in the directory ({outputs})"
    )
    assert result.warnings == [f"Warning: the failed run's report was not written: {unwritten}"]
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to download {http_server.url('nope.tgz')}: HTTP 404 Not Found"
    )


@pytest.mark.parametrize("cached", [False, True], ids=["downloaded", "from-the-cache"])
def test_a_big_archive_that_fills_staging_while_it_is_extracted_names_buildpacks(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout, tmp_path: Path,
    mount_tmpfs: Mount, cached: bool,
) -> None:  # fmt: skip
    """8 MiB of zeros, a few KiB as a .tgz: the disk (1 MiB, nothing used) fills in the middle of the extraction
    into staging, or of the copy of the download cache's tree."""
    make_tgz(http_server.root / "zeros.tgz", "me/zeros", payload=bytes(8 << 20))
    (layout.app / "project.toml").write_text(group(http_server.url("zeros.tgz")))
    if cached:
        assert preparer().code == 0
        shutil.rmtree(layout.buildpacks / "me_zeros")
    cache = listing(tmp_path / "cache")
    mount_tmpfs(layout.buildpacks, "1m")
    before = listing(layout.root)
    result = preparer() if cached else preparer("-download-cache", "")
    assert result.code == 1, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to install {http_server.url('zeros.tgz')}: no space left on device in <buildpacks> "
        f"({layout.buildpacks})"
    )
    assert "download cache" not in result.stderr
    assert listing(layout.root) == before
    assert listing(tmp_path / "cache") == cache  # the cached copy is kept
