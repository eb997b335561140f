"""The library pipeline on a real layout: dry run, report file, ownership, missing files."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path

import pytest

from preparer import DescriptorError, FetchError, Inputs, InvalidInputsError, prepare
from tests.golden import Layout, env_files, listing, make_layout, snapshot


def inputs_for(layout: Layout, **extra: object) -> Inputs:
    return Inputs(
        app_dir=layout.app,
        layers_dir=layout.layers,
        platform_dir=layout.platform,
        buildpacks_dir=layout.buildpacks,
        order_path=layout.order,
        **extra,  # type: ignore[arg-type]
    )


def test_dry_run_changes_nothing_but_writes_the_report(tmp_path: Path) -> None:
    layout, _ = make_layout(tmp_path, "v01-build-table")
    before = snapshot(layout)
    report_path = tmp_path / "report.toml"
    report = prepare(inputs_for(layout, dry_run=True, prepare_report=report_path))
    assert report.dry_run
    assert snapshot(layout) == before
    assert not (layout.layers / "order.toml").exists()
    doc = tomllib.loads(report_path.read_text())
    assert doc["dry-run"] is True
    assert doc["descriptor"] == {"path": str(layout.app / "project.toml"), "schema-version": "0.1"}
    assert doc["unapplied"] == [{"key": "build.builder", "reason": "not applied by the preparer"}]


def test_report_records_what_was_done(tmp_path: Path) -> None:
    layout, _ = make_layout(tmp_path, "v01-build-table")
    report_path = tmp_path / "out" / "report.toml"
    prepare(inputs_for(layout, prepare_report=report_path))
    doc = tomllib.loads(report_path.read_text())
    assert doc["dry-run"] is False
    assert doc["buildpacks"] == [
        {"id": "examples/ca-certificates", "version": "3.1.0", "source": "examples/ca-certificates",
         "action": "present"},
        {"id": "examples/python", "version": "2.0.0", "source": "examples/python", "action": "present"},
    ]  # fmt: skip
    assert doc["env"] == [{"name": "PIP_NO_CACHE_DIR", "action": "written"}]
    assert doc["app"] == {"removed": 2}
    assert doc["effective"]["build"]["env"] == [{"name": "PIP_NO_CACHE_DIR", "value": "1"}]


def test_a_failure_is_recorded_in_the_report(tmp_path: Path) -> None:
    layout, _ = make_layout(tmp_path, "unknown-buildpack")
    report_path = tmp_path / "report.toml"
    with pytest.raises(FetchError):
        prepare(inputs_for(layout, prepare_report=report_path))
    doc = tomllib.loads(report_path.read_text())
    assert doc["error"]["code"] == 1
    assert doc["error"]["message"].startswith("failed to resolve io.buildpacks.group[0] (examples/ruby)")
    assert env_files(layout) == {}


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_files_the_build_reads_are_owned_by_uid_and_gid(tmp_path: Path) -> None:
    layout, _ = make_layout(tmp_path, "v01-build-table")
    prepare(inputs_for(layout, uid=1234, gid=5678))
    for path in (layout.layers / "order.toml", layout.platform / "env" / "PIP_NO_CACHE_DIR"):
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (1234, 5678)
        assert st.st_mode & 0o777 == 0o644
    assert (layout.platform / "env").stat().st_mode & 0o777 == 0o755


def test_a_missing_default_descriptor_means_nothing_to_apply(tmp_path: Path) -> None:
    layout, _ = make_layout(tmp_path, "v02-latest-versions")
    (layout.app / "project.toml").unlink()
    report = prepare(inputs_for(layout))
    assert report.descriptor_path is None
    assert listing(layout.layers) == []


def test_a_missing_explicit_descriptor_exits_3(tmp_path: Path) -> None:
    layout, _ = make_layout(tmp_path, "v02-latest-versions")
    with pytest.raises(DescriptorError) as info:
        prepare(inputs_for(layout, project_descriptor=tmp_path / "nope.toml"))
    assert info.value.exit_code == 3
    assert str(info.value) == f"failed to read project descriptor: {tmp_path / 'nope.toml'} does not exist"


def test_a_descriptor_elsewhere_resolves_relative_paths_from_its_directory(tmp_path: Path) -> None:
    layout, _ = make_layout(tmp_path, "v02-latest-versions")
    elsewhere = tmp_path / "elsewhere" / "project.toml"
    elsewhere.parent.mkdir()
    elsewhere.write_text('[_]\nschema-version = "0.2"\n[[io.buildpacks.group]]\nuri = "./missing-bp"\n')
    with pytest.raises(FetchError) as info:
        prepare(inputs_for(layout, project_descriptor=elsewhere))
    assert str(tmp_path / "elsewhere" / "missing-bp") in str(info.value)


def test_platform_config_needs_a_namespace(tmp_path: Path) -> None:
    layout, _ = make_layout(tmp_path, "rfc-pack-toml")
    with pytest.raises(InvalidInputsError) as info:
        prepare(inputs_for(layout, platform_config=tmp_path / "config" / "pack.toml"))
    assert info.value.exit_code == 3
