"""system.toml read as the lifecycle's detector reads it (files/system.py): its buildpacks in the file's order, a
missing file as none, a value of the wrong type refused and located (exit 1), what the detector does not read a
warning, with the key meant when it is near."""

from __future__ import annotations

from pathlib import Path

import pytest

from preparer.errors import BuilderError
from preparer.files.system import SystemBuildpack, SystemBuildpacks, read_system
from preparer.inputs import Inputs, resolve_inputs


def read(tmp_path: Path, text: str) -> SystemBuildpacks:
    path = tmp_path / "system.toml"
    path.write_text(text)
    found = read_system(path)
    assert found is not None
    return found


def refused(tmp_path: Path, text: str) -> str:
    with pytest.raises(BuilderError) as caught:
        read(tmp_path, text)
    assert caught.value.exit_code == 1
    return caught.value.message


def test_a_missing_file_is_no_system_buildpacks(tmp_path: Path) -> None:
    assert read_system(tmp_path / "system.toml") is None
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    assert read_system(tmp_path / "link") is None


def test_an_empty_file_and_an_empty_system_table_are_none(tmp_path: Path) -> None:
    assert read(tmp_path, "") == SystemBuildpacks(tmp_path / "system.toml")
    assert read(tmp_path, "[system]\n") == SystemBuildpacks(tmp_path / "system.toml")


def test_pre_and_post_in_the_files_order_with_where_each_is_written(tmp_path: Path) -> None:
    found = read(
        tmp_path,
        '[[system.pre.buildpacks]]\nid = "sys/pre"\nversion = "1.0.0"\n\n'
        '[[system.pre.buildpacks]]\nid = "sys/pre2"\nversion = "2.0.0"\n\n'
        '[[system.post.buildpacks]]\nid = "sys/post"\nversion = "1.0.0"\n',
    )
    assert found.pre == (
        SystemBuildpack("sys/pre", "1.0.0", "system.pre.buildpacks[0]", 1),
        SystemBuildpack("sys/pre2", "2.0.0", "system.pre.buildpacks[1]", 5),
    )
    assert found.post == (SystemBuildpack("sys/post", "1.0.0", "system.post.buildpacks[0]", 9),)
    assert found.warnings == ()
    assert found.pre[1].where == "system.pre.buildpacks[1], line 5"


def test_an_element_without_an_id_or_a_version_is_kept_for_the_checks_to_refuse(tmp_path: Path) -> None:
    # The detector looks such a buildpack up all the same (and fails): whether it must is the merge's to say.
    found = read(tmp_path, '[[system.pre.buildpacks]]\nid = "sys/pre"\n')
    assert found.pre == (SystemBuildpack("sys/pre", "", "system.pre.buildpacks[0]", 1),)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "system.toml").mkdir()
    with pytest.raises(BuilderError, match="is a directory"):
        read_system(tmp_path / "system.toml")


def test_malformed_toml_is_refused_located(tmp_path: Path) -> None:
    message = refused(tmp_path, '[[system.pre.buildpacks]\nid = "x"\n')
    assert message.startswith(f"failed to read system buildpacks: {tmp_path / 'system.toml'}: ")
    assert "(at line 1, column" in message


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            '[system.pre]\nbuildpacks = "sys/pre"\n',
            (
                "system.pre.buildpacks must be an array of tables ([[system.pre.buildpacks]]), not a string (at line 2, "
                "column 1)"
            ),
        ),
        (
            '[[system.pre.buildpacks]]\nid = 7\nversion = "1.0.0"\n',
            "system.pre.buildpacks[0].id must be a string, not an integer (at line 2, column 1)",
        ),
        ('system = "on"\n', "system must be a table ([system]), not a string (at line 1, column 1)"),
        (
            "[system]\npost = [1]\n",
            "system.post must be a table ([system.post]), not an array (at line 2, column 1)",
        ),
        (
            '[[system.post.buildpacks]]\nid = "x"\nversion = 1.0\n',
            "system.post.buildpacks[0].version must be a string, not a number (at line 3, column 1)",
        ),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_as_the_detector_fails_on_it(
    tmp_path: Path, text: str, said: str
) -> None:
    message = refused(tmp_path, text)
    assert message == (
        f"failed to read system buildpacks: {tmp_path / 'system.toml'}: {said}; the lifecycle's detector fails at "
        "start-up on this file"
    )


def test_what_the_detector_does_not_read_is_a_warning_with_the_key_meant(tmp_path: Path) -> None:
    path = tmp_path / "system.toml"
    found = read(
        tmp_path,
        '[system]\nname = "x"\n\n'
        '[[system.pre.buildpack]]\nid = "sys/pre"\nversion = "1.0.0"\n\n'
        '[[system.post.buildpacks]]\nid = "sys/post"\nversoin = "1.0.0"\nuri = "docker://x"\n\n'
        '[[system.middle.buildpacks]]\nid = "sys/mid"\n\n'
        '[[pre.buildpacks]]\nid = "sys/top"\n',
    )
    assert found.pre == ()
    assert [bp.ref for bp in found.post] == ["sys/post@"]
    assert found.warnings == (
        (
            f"{path}: pre (line 16) is not read by the lifecycle: system buildpacks are written under [system], as "
            "[[system.pre.buildpacks]]"
        ),
        f"{path}: system.name (line 2) is not read by the lifecycle",
        f"{path}: system.middle (line 13) is not read by the lifecycle",
        (
            f"{path}: system.pre.buildpack (line 4) is not read by the lifecycle (did you mean "
            "system.pre.buildpacks?)"
        ),
        (
            f"{path}: system.post.buildpacks[0].versoin (line 10) is not read by the lifecycle (did you mean "
            "system.post.buildpacks[0].version?)"
        ),
        (
            f"{path}: system.post.buildpacks[0].uri (line 11) is not read by the lifecycle: a system buildpack is not "
            "fetched, it must already be in <buildpacks>"
        ),
    )


def test_optional_is_read_and_said_not_applied(tmp_path: Path) -> None:
    path = tmp_path / "system.toml"
    found = read(
        tmp_path,
        '[[system.pre.buildpacks]]\nid = "sys/a"\nversion = "1"\noptional = true\n\n'
        '[[system.pre.buildpacks]]\nid = "sys/b"\nversion = "1"\noptional = false\n\n'
        '[[system.pre.buildpacks]]\nid = "sys/c"\nversion = "1"\noptional = "yes"\n',
    )
    assert [bp.optional for bp in found.pre] == [True, False, False]
    assert found.warnings == (
        (
            f"{path}: system.pre.buildpacks[0], line 1 (sys/a@1) has optional = true, which the lifecycle (v0.21) does "
            "not read: its detector requires the buildpack in every group it is merged into, as every system buildpack "
            "(it must be in <buildpacks>, and a group fails when it does not detect)"
        ),
        (
            f"{path}: system.pre.buildpacks[2], line 11 (sys/c@1) has optional, a key the lifecycle (v0.21) does not "
            "read: its detector requires the buildpack in every group it is merged into, as every system buildpack (it "
            "must be in <buildpacks>, and a group fails when it does not detect)"
        ),
    )


@pytest.mark.parametrize(
    ("flags", "environ", "path"),
    [
        ({}, {}, "/cnb/system.toml"),
        ({}, {"CNB_SYSTEM_PATH": ""}, "/cnb/system.toml"),  # empty is the default, as the lifecycle reads it
        ({}, {"CNB_SYSTEM_PATH": "sys.toml"}, "/w/sys.toml"),  # relative to the working directory
        ({"system": "/a.toml"}, {"CNB_SYSTEM_PATH": "/b.toml"}, "/a.toml"),  # the flag wins
        ({"system": ""}, {"CNB_SYSTEM_PATH": "/b.toml"}, None),  # an empty flag: none
    ],
)
def test_where_system_toml_is_looked_for(
    flags: dict[str, object], environ: dict[str, str], path: str | None
) -> None:
    inputs = resolve_inputs(flags, environ, cwd=Path("/w"))
    assert inputs.system_path == (None if path is None else Path(path))
    assert inputs.disable_system_buildpacks is False


def test_system_buildpacks_turned_off_by_flag_or_variable() -> None:
    off = {"CNB_PREPARER_DISABLE_SYSTEM_BUILDPACKS": "true"}
    assert resolve_inputs({}, off, cwd=Path("/")).disable_system_buildpacks is True
    assert (
        resolve_inputs({"disable-system-buildpacks": True}, {}, cwd=Path("/")).disable_system_buildpacks
        is True
    )
    assert (
        resolve_inputs({"disable-system-buildpacks": False}, off, cwd=Path("/")).disable_system_buildpacks
        is False
    )
    # The library's own record reads none unless told.
    plain = Inputs(app_dir="/a", layers_dir="/l", platform_dir="/p", buildpacks_dir="/b", order_path="/o")
    assert plain.system_path is None and plain.disable_system_buildpacks is False
