"""Where ``-provenance`` is written, by whom, and what the library gives (docs/provenance.md): relative paths, ``..``,
a directory reached through a link, a read-only mount (exit 3 before any request), the owner of the file when root
gives ``-uid``/``-gid``; ``Report.provenance`` against the file, inputs given as data, a cancelled run, a saved
plan. Real CLI in a subprocess, the library in this process, the suite's HTTP server.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from preparer import Cancel, Cancelled, Inputs, plan_run, prepare, run_plan
from tests.buildpacks import make_tgz
from tests.golden import BUILDER, Layout
from tests.integration.test_provenance import dependencies, project, validate
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


BUILDER_ONLY = project('uri = "urn:cnb:builder:examples/node"')


def test_a_path_with_dot_dot_and_one_through_a_linked_directory_are_written_where_they_lead(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    for given, lands in (
        (tmp_path / "a" / ".." / "dotdot.json", tmp_path / "dotdot.json"),
        (tmp_path / "linked" / "through.json", tmp_path / "real" / "through.json"),
    ):
        (layout.layers / "order.toml").unlink(missing_ok=True)
        result = preparer("-provenance", str(given), project=BUILDER_ONLY)
        assert result.code == 0, result.stderr
        assert not lands.is_symlink()
        validate(json.loads(lands.read_text()))
    assert (tmp_path / "real").is_dir() and (tmp_path / "linked").is_symlink()


def test_a_path_that_is_the_report_s_through_a_link_is_refused(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "real")
    result = preparer(
        "-provenance", str(tmp_path / "linked" / "out"), "-prepare-report", str(tmp_path / "real" / "out"),
        project=BUILDER_ONLY,
    )  # fmt: skip
    assert result.code == 3
    assert "-prepare-report and -provenance name the same file" in result.stderr.splitlines()[-1]


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[Path]:
    """A read-only tmpfs; skipped where mounting is not permitted."""
    directory = tmp_path / "ro"
    directory.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(directory)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.skip(f"a tmpfs cannot be mounted here ({done.stderr.strip()})")
    try:
        yield directory
    finally:
        subprocess.run(["umount", str(directory)], check=False)


def test_a_read_only_mount_is_exit_3_before_any_request_even_as_root(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer, read_only: Path
) -> None:
    """Root may write anywhere the permissions say, but not on a read-only file system."""
    make_tgz(http_server.root / "prov-ro.tgz", "acme/ro", "1.0.0")
    out = read_only / "provenance.json"
    result = preparer("-provenance", str(out), project=project(f'uri = "{http_server.url("prov-ro.tgz")}"'))
    assert result.code == 3, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to resolve inputs: -provenance {out}: {read_only} cannot be written"
    )
    assert http_server.seen("prov-ro.tgz") == []
    assert not (layout.layers / "order.toml").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root gives files to -uid/-gid")
def test_as_root_with_uid_and_gid_the_provenance_is_the_platform_s_as_the_report_is(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    """The build's files go to the build user; the provenance, as the report, stays the preparer's: records of
    the platform, which the build does not read (and may not change)."""
    out, report = tmp_path / "provenance.json", tmp_path / "report.toml"
    result = preparer("-provenance", str(out), "-prepare-report", str(report), "-uid", "1234", "-gid", "2345",
                      project=BUILDER_ONLY)  # fmt: skip
    assert result.code == 0, result.stderr
    order = (layout.layers / "order.toml").stat()
    assert (order.st_uid, order.st_gid) == (1234, 2345)
    assert {(p.stat().st_uid, p.stat().st_gid) for p in (out, report)} == {(0, 0)}
    assert out.stat().st_mode & 0o777 == 0o644


def build(root: Path, written: str) -> tuple[Layout, Callable[..., Inputs]]:
    """A layout of its own with ``written`` as its project.toml, and what makes its inputs (given more fields)."""
    layout = Layout(root)
    shutil.copytree(BUILDER, layout.root / "cnb")
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    (layout.app / "project.toml").write_text(written)

    def inputs(**more: Any) -> Inputs:
        return Inputs(
            app_dir=layout.app, layers_dir=layout.layers, platform_dir=layout.platform,
            buildpacks_dir=layout.buildpacks, order_path=layout.order, download_cache=None, **more,
        )  # fmt: skip

    return layout, inputs


def test_the_library_s_statement_is_the_file_s_and_data_inputs_are_described(
    tmp_path: Path, http_server: FileServer
) -> None:
    """``Report.provenance`` equals the file's JSON exactly; a policy and a lock given as data are described by
    the sha256 of those bytes, with no path."""
    archive = make_tgz(http_server.root / "prov-lib.tgz", "acme/lib", "1.0.0")
    written = project(f'uri = "{http_server.url("prov-lib.tgz")}"')
    _, inputs = build(tmp_path / "first", written)
    out = tmp_path / "provenance.json"
    policy = b'[http]\nallow = ["http://127.0.0.1:*/*"]\n'
    first = prepare(inputs(provenance=out, policy_data=policy, lock=tmp_path / "made.lock"))
    assert first.provenance == json.loads(out.read_text())
    lock_bytes = (tmp_path / "made.lock").read_bytes()
    _, inputs = build(tmp_path / "second", written)
    second = prepare(inputs(provenance=out, policy_data=policy.decode(), lock_data=lock_bytes))
    assert second.provenance is not None
    assert second.provenance == json.loads(out.read_text())
    internal = second.provenance["predicate"]["buildDefinition"]["internalParameters"]
    assert internal["policy"] == {"sha256": sha256(policy)}
    assert internal["lock"] == {"action": "frozen", "sha256": sha256(lock_bytes)}
    found = dependencies(second.provenance)["acme/lib@1.0.0"]
    assert found["digest"] == {"sha256": sha256(archive.read_bytes())}
    assert found["annotations"]["locked"] is True


def test_a_cancelled_run_writes_no_provenance_and_leaves_the_old_one(
    tmp_path: Path, http_server: FileServer
) -> None:
    make_tgz(http_server.root / "prov-slow.tgz", "acme/slow", "1.0.0", payload=os.urandom(3000))
    http_server.fail("prov-slow.tgz", "trickle")
    layout, inputs = build(tmp_path / "b", project(f'uri = "{http_server.url("prov-slow.tgz")}"'))
    out = tmp_path / "provenance.json"
    out.write_bytes(b"the last run's\n")
    handle = Cancel()
    import threading

    threading.Timer(1.0, handle.set).start()
    with pytest.raises(Cancelled):
        prepare(inputs(provenance=out), cancel=handle)
    assert out.read_bytes() == b"the last run's\n"
    assert not (layout.layers / "order.toml").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".provenance")] == []


def test_a_saved_plan_run_later_writes_the_provenance_of_what_it_installed(
    tmp_path: Path, http_server: FileServer
) -> None:
    archive = make_tgz(http_server.root / "prov-plan.tgz", "acme/planned", "1.0.0")
    layout, inputs = build(tmp_path / "b", project(f'uri = "{http_server.url("prov-plan.tgz")}"'))
    out = tmp_path / "provenance.json"
    plan = plan_run(inputs(provenance=out))
    assert not out.exists()  # planning writes nothing
    report = run_plan(plan)
    assert report.provenance is not None
    assert report.provenance == json.loads(out.read_text())
    found = dependencies(report.provenance)["acme/planned@1.0.0"]
    assert found["digest"] == {"sha256": sha256(archive.read_bytes())}
    assert report.provenance["subject"][0] == {
        "name": "layers/order.toml",
        "digest": {"sha256": sha256((layout.layers / "order.toml").read_bytes())},
    }


@pytest.mark.parametrize("flag", ["-provenance", "-prepare-report"])
@pytest.mark.parametrize("where", ["app", "layers"])
def test_a_link_planted_below_a_build_directory_cannot_send_the_file_elsewhere(
    flag: str, where: str, preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    """Below <app> (its author's) and <layers> (the build user's, from an earlier build), a directory of the path
    that is a link is refused, as for the lock; the file is never written where the link leads."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    base = layout.app if where == "app" else layout.layers
    base.mkdir(parents=True, exist_ok=True)
    (base / "out").symlink_to(elsewhere)
    result = preparer(flag, str(base / "out" / "record.json"), project=project('id = "examples/node"'))
    assert result.code == 1, result.stderr
    assert "out" in result.stderr and "link" in result.stderr
    assert list(elsewhere.iterdir()) == []
    assert not (layout.layers / "order.toml").exists()


def test_an_app_without_a_project_toml_writes_no_provenance_and_removes_an_earlier_one(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    """in-toto refuses a statement with no subject: a run that writes none of the build's files writes none, says
    so, and an earlier run's statement at the path does not pass for this run's."""
    out = tmp_path / "provenance.json"
    first = preparer("-provenance", str(out), project=BUILDER_ONLY)
    assert first.code == 0, first.stderr
    validate(json.loads(out.read_text()))
    (layout.app / "project.toml").unlink()
    fresh = preparer("-provenance", str(out))
    assert fresh.code == 0, fresh.stderr
    assert fresh.warnings == [
        (
            f"Warning: the provenance {out} is not written: this run writes none of the build's files (no order.toml, "
            "env file or project-metadata.toml; without a project.toml the builder's order is the build's), and an "
            "in-toto statement must have a subject; an earlier run's provenance there is removed"
        )
    ]
    assert not out.exists()
    assert "Wrote the provenance" not in fresh.stdout + fresh.stderr
