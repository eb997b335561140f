"""The lists and the descriptor as data, through the library as a service uses it (issue 49): a descriptor kept in a
database (its TOML text, or its tables), the lists as ``Inputs`` fields, the same checks and names as the command's,
and ``check_descriptor`` for what a user submits before a build is queued. Real layouts; the public API only.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest

from preparer import Inputs, check_descriptor, prepare
from preparer.errors import DescriptorError, InvalidInputsError
from preparer.fetch.locator import ACCEPTED
from preparer.progress import Download
from tests.buildpacks import make_tgz
from tests.golden import BUILDER, Layout, env_files
from tests.plugins.http_server import FileServer
from tests.projects import HEAD

TABLES: dict[str, Any] = {
    "_": {"schema-version": "0.2"},
    "io": {
        "buildpacks": {
            "group": [{"id": "heroku/nodejs"}],
            "build": {"env": [{"name": "NODE_ENV", "value": "development"}, {"name": "KEPT", "value": "1"}]},
        }
    },
}


def build(root: Path, **fields: Any) -> tuple[Layout, Inputs]:
    layout = Layout(root)
    shutil.copytree(BUILDER, layout.root / "cnb")
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    inputs = Inputs(
        app_dir=str(layout.app), layers_dir=str(layout.layers), platform_dir=str(layout.platform),
        buildpacks_dir=str(layout.buildpacks), order_path=str(layout.order), download_cache=None, **fields,
    )  # fmt: skip
    return layout, inputs


def order_ids(layout: Layout) -> list[list[str]]:
    doc = tomllib.loads((layout.layers / "order.toml").read_text())
    return [[entry["id"] for entry in group["group"]] for group in doc["order"]]


def test_a_descriptor_given_as_tables_with_lists_builds_what_the_command_builds(tmp_path: Path) -> None:
    tables = json.loads(json.dumps(TABLES))
    provenance = tmp_path / "provenance.json"
    layout, inputs = build(
        tmp_path, descriptor_data=tables, pre_buildpacks=["heroku/python"],
        build_env={"NODE_ENV": "production", "TOKEN": "s3cr3t"}, provenance=str(provenance),
    )  # fmt: skip
    tables["io"]["buildpacks"]["group"][0]["id"] = (
        "heroku/procfile"  # the caller's later edit changes nothing
    )
    assert pickle.loads(pickle.dumps(inputs)).descriptor_data == TABLES
    report = prepare(inputs)
    assert order_ids(layout) == [["heroku/python", "heroku/nodejs"]]
    assert env_files(layout) == {"KEPT": "1", "NODE_ENV": "production", "TOKEN": "s3cr3t"}
    assert (
        "io.buildpacks.build.env[0] is not applied by the preparer: build_env[0] sets NODE_ENV over it"
        not in (report.warnings)
    )
    assert (
        "io.buildpacks.build.env[0] is not applied by the preparer: -env[0] sets NODE_ENV over it"
        in report.warnings
    )
    assert not (layout.app / "project.toml").exists()  # named, never written
    external = json.loads(provenance.read_text())["predicate"]["buildDefinition"]["externalParameters"]
    import tomli_w

    assert external["descriptor"] == {
        "path": "project.toml",
        "sha256": hashlib.sha256(tomli_w.dumps(TABLES).encode()).hexdigest(),
    }
    assert [e["entry"] for e in external["buildpacks"]["pre"]] == ["-pre-buildpack[0]"]
    assert external["lists"]["env"] == ["NODE_ENV", "TOKEN"]
    assert "s3cr3t" not in provenance.read_text()


def test_a_descriptor_given_as_text_is_read_as_a_file_with_its_lines(tmp_path: Path) -> None:
    text = (
        HEAD + '[[io.buildpacks.group]]\nid = "heroku/nodejs"\n[[io.buildpacks.group]]\nuri = "ftp://h/x"\n'
    )
    layout, inputs = build(tmp_path, descriptor_data=text)
    with pytest.raises(DescriptorError) as raised:
        prepare(inputs)
    error = raised.value
    assert (error.exit_code, error.key, error.line, error.path) == (
        3, "io.buildpacks.group[1].uri", 6, str(layout.app / "project.toml")
    )  # fmt: skip
    assert error.message == (
        f"failed to validate {layout.app}/project.toml: io.buildpacks.group[1].uri 'ftp://h/x': unsupported "
        f"protocol 'ftp' (a uri is {ACCEPTED})"
    )
    tables = tomllib.loads(text)
    with pytest.raises(DescriptorError) as by_key:
        prepare(build(tmp_path / "tables", descriptor_data=tables)[1])
    assert (by_key.value.key, by_key.value.line) == (
        "io.buildpacks.group[1].uri",
        None,
    )  # a mapping has no lines
    assert not (layout.layers / "order.toml").exists()


def test_a_list_s_problem_names_the_field_and_the_entry_as_the_command_s(tmp_path: Path) -> None:
    layout, inputs = build(tmp_path, buildpacks=["heroku/nodejs", "ftp://h/x.tgz"], build_env=["A B=1"])
    with pytest.raises(DescriptorError) as raised:
        prepare(inputs)
    problems = raised.value.problems
    assert [(p.field, p.key) for p in problems] == [("buildpacks", "-buildpack[1]"), ("build_env", "-env[0]")]
    assert problems[0].message.startswith(
        "failed to validate -buildpack: -buildpack[1] 'ftp://h/x.tgz': unsupported protocol 'ftp'; -buildpack takes"
    )
    assert not (layout.layers / "order.toml").exists()
    for field, value, said in (
        ("buildpacks", "heroku/nodejs", "Inputs.buildpacks must be a list or tuple of strings, not str"),
        ("build_env", [1], "Inputs.build_env[0] must be a string, not int"),
        ("build_env", {"A=B": "1"}, "Inputs.build_env has the name 'A=B', which holds '=': a name cannot"),
        ("env_files", ["", "x"], "Inputs.env_files[0] must be a path (str or os.PathLike), not ''"),
        ("descriptor_data", 3, "Inputs.descriptor_data must be the descriptor's TOML text or its tables"),
    ):
        with pytest.raises(InvalidInputsError) as refused:
            build(tmp_path / field / str(len(said)), **{field: value})
        assert refused.value.field == field and said in refused.value.message, refused.value.message


def test_check_descriptor_takes_the_lists_and_the_tables_as_a_run_does(tmp_path: Path) -> None:
    env = tmp_path / "ci.env"
    env.write_text("A=1\nexport B=2\n")
    problems = check_descriptor(
        text={**TABLES, "io": {"buildpacks": {"group": [{"uri": "ftp://h/x"}], "include": 1}}},
        buildpacks=["heroku/nodejs", "from=builder"], post_buildpacks=[""], env_files=[env],
    )  # fmt: skip
    assert [(p.field, p.key, p.line) for p in problems] == [
        ("buildpacks", "-buildpack[1]", None),
        ("post_buildpacks", "-post-buildpack[0]", None),
        ("env_files", f"{env}:2", 2),
        (
            None,
            "io.buildpacks.include",
            None,
        ),  # the group -buildpack replaces is not checked, as a run does not
    ]
    assert check_descriptor(text=HEAD, buildpacks=["heroku/nodejs"], build_env={"A": "1"}) == ()
    [not_toml] = check_descriptor(text={"_": {"schema-version": None}})
    assert not_toml.message.startswith("failed to read project descriptor: the tables given are not TOML")
    [a_string] = check_descriptor(
        text=HEAD, buildpacks="heroku/nodejs"
    )  # a str is a Sequence[str]: refused when called
    assert a_string.field == "buildpacks"
    assert a_string.message.endswith("Inputs.buildpacks must be a list or tuple of strings, not str")


def test_progress_and_the_report_name_a_list_s_entry_as_a_descriptor_s(
    tmp_path: Path, http_server: FileServer
) -> None:
    make_tgz(http_server.root / "bp.tgz", "acme/http", "1.0.0", payload=b"x" * 5000)
    url = http_server.url("bp.tgz")
    layout, inputs = build(tmp_path, descriptor_data=HEAD, buildpacks=["heroku/nodejs", url])
    events: list[Download] = []
    report = prepare(inputs, progress=events.append)
    assert {(e.entry, e.source, e.buildpack) for e in events} == {("-buildpack[1]", url, None)}
    assert [(b.id, b.action) for b in report.buildpacks] == [
        ("heroku/nodejs", "present"),
        ("acme/http", "installed"),
    ]
    assert order_ids(layout) == [["heroku/nodejs", "acme/http"]]
