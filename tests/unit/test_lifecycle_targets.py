"""The preparer's target rules against the real lifecycle's: each case of tests/data/lifecycle-targets/cases.json
(what the lifecycle's own detector did, recorded as its PROVENANCE.md says) is built again here and decided by
:mod:`preparer.target`; the verdict is the detector's, or the other one where docs/targets.md "Where the rules
differ" says why. A handful also go through the real CLI."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from preparer.errors import TargetRefused
from preparer.files.buildpack import BuildpackDescriptor, buildpack_dir
from preparer.target import Lookup, Target, build_target, check_targets, installed, why_not
from tests.golden import Layout, listing, snapshot
from tests.plugins.cli import Result
from tests.projects import group

DATA = Path(__file__).resolve().parents[1] / "data" / "lifecycle-targets"
CASES: list[dict[str, Any]] = json.loads((DATA / "cases.json").read_text())["cases"]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "targets.md"
#: The bullet of docs/targets.md "Where the rules differ" each tag of ``differs`` stands for, by its first words.
BULLETS = {
    "variant-key": "**Keys.**",
    "names": "**Names.**",
    "distro-unknown": "**An unknown distribution.**",
    "bin": "**`bin/`.**",
    "stacks": "**`[[stacks]]`.**",
}


def by_name(name: str) -> dict[str, Any]:
    return next(case for case in CASES if case["name"] == name)


def write_buildpacks(case: dict[str, Any], root: Path) -> None:
    """The case's buildpacks in ``root``, laid out as ``<buildpacks>`` (``<id>/<version>/``), each ``bin/`` file
    the case names."""
    for bp in case["buildpacks"]:
        where = buildpack_dir(root, bp["id"], bp["version"])
        where.mkdir(parents=True)
        (where / "buildpack.toml").write_text(bp["toml"])
        for name in bp["bin"]:
            (where / "bin").mkdir(exist_ok=True)
            (where / "bin" / name).write_text("#!/bin/sh\nexit 0\n")


def target_of(case: dict[str, Any], layers: Path, os_release: Path) -> Target:
    """The build's target as the preparer finds it: the case's analyzed.toml in ``layers``, its os-release at
    ``os_release`` (none when empty), the host's platform (``linux/amd64``, as the detector's) otherwise."""
    (layers / "analyzed.toml").write_text(case["analyzed_toml"])
    if case["os_release"]:
        os_release.write_text(case["os_release"])
    return build_target(None, "linux/amd64", "the host", layers / "analyzed.toml", os_release)


def chosen_group(ref: str, target: Target, lookup: Lookup) -> list[str]:
    """The component buildpacks the detector would run for ``ref`` by the preparer's rules: a composite's first
    group whose non-optional members can all run (an optional member included, as the detector runs it too)."""
    bp_id, _, version = ref.partition("@")
    found = lookup(bp_id, version)
    assert found is not None
    if not found[0].order:
        return [ref]
    for members in found[0].order:
        if all(
            e.optional or why_not(*must(lookup, e.id, e.version), target, lookup, []) is None for e in members
        ):
            return [r for e in members for r in chosen_group(e.ref, target, lookup)]
    return []


def must(lookup: Lookup, bp_id: str, version: str) -> tuple[BuildpackDescriptor, Callable[[str], bool]]:
    """What ``lookup`` finds: every buildpack of a case is written."""
    found = lookup(bp_id, version)
    assert found is not None, bp_id
    return found


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_the_preparer_decides_as_the_lifecycle_or_as_documented(case: dict[str, Any], tmp_path: Path) -> None:
    buildpacks, layers = tmp_path / "buildpacks", tmp_path / "layers"
    layers.mkdir()
    write_buildpacks(case, buildpacks)
    target = target_of(case, layers, tmp_path / "os-release")
    lookup = partial(installed, buildpacks)
    [[top]] = case["order"]
    found = lookup(top["id"], top["version"])
    assert found is not None
    why = why_not(*found, target, lookup, [])
    enforced = tuple(map(int, case["platform_api"].split("."))) >= (0, 12)
    refused = False
    try:
        warnings = check_targets([found], target, lookup, enforced=enforced)
    except TargetRefused as error:
        refused = True
        assert str(error) == f"failed to install {top['id']}@{top['version']}: {why}"
    assert refused is (why is not None and enforced)
    if not enforced:
        # Below Platform API 0.12 the detector checks nothing, and the preparer only warns.
        assert case["lifecycle"]["verdict"] == "runs"
        assert any(why in w for w in warnings) if why else not warnings
        return
    preparer_verdict = "skips" if refused else "runs"
    if case["differs"] is None:
        assert preparer_verdict == case["lifecycle"]["verdict"], why
        if preparer_verdict == "runs":
            assert chosen_group(f"{top['id']}@{top['version']}", target, lookup) == case["lifecycle"]["group"]
    else:
        assert preparer_verdict != case["lifecycle"]["verdict"], case["differs"]


def test_every_difference_names_a_bullet_the_docs_have() -> None:
    text = DOCS.read_text()
    section = text[text.index("## Where the rules differ from the detector's and pack's") :]
    tags = {case["differs"] for case in CASES} - {None}
    assert tags == set(BULLETS)
    for tag in tags:
        assert f"- {BULLETS[tag]}" in section, tag
    # The figures the docs give are those of the recording.
    assert f"{len(CASES)} cases run through the detector's own code" in text


def test_the_recording_covers_what_the_issue_asks_for() -> None:
    names = " ".join(case["name"] for case in CASES)
    for needed in ("arm64-v8", "arm-v6", "arm-v7", "variant=", "distro", "stacks: api 0.9", "stacks: api 0.10",
                   "only bin/build.bat", "no bin/", "composite", "optional"):  # fmt: skip
        assert needed in names, needed
    verdicts = {case["lifecycle"]["verdict"] for case in CASES}
    assert verdicts == {"runs", "skips"}
    assert len(CASES) >= 40


def untouched(layout: Layout) -> dict[str, list[str]]:
    """``<app>`` but its project.toml, ``<platform>``, ``<buildpacks>`` and ``<layers>``, as listed."""
    seen = snapshot(layout)
    seen["app"] = [name for name in seen["app"] if name != "project.toml"]
    return seen | {"layers": listing(layout.layers)}


CLI_CASES = [
    "grid: buildpack arm64 on run image amd64",
    "grid: buildpack arm64-v8 on run image arm64",
    "grid: buildpack arm-v6 on run image arm",
    "distro: ubuntu 24.04 and debian 12 listed, run image ubuntu 22.04",
    "composite: [arm] | [any] on amd64",
    "composite: [arm] on amd64",
    "stacks: api 0.9 bionic on arm64 ubuntu 22.04",
]


@pytest.mark.parametrize("name", CLI_CASES)
def test_the_cli_refuses_what_the_rules_refuse_and_writes_nothing(
    name: str, preparer: Callable[..., Result], layout: Layout
) -> None:
    case = by_name(name)
    top, *components = case["buildpacks"]
    # The order's buildpack comes from the app (a path); a composite's members are already in <buildpacks>.
    write_buildpacks({"buildpacks": [top]}, layout.app / "bp")
    local = buildpack_dir(layout.app / "bp", top["id"], top["version"])
    write_buildpacks({"buildpacks": components}, layout.buildpacks)
    target = target_of(case, layout.layers, Path("/etc/os-release"))
    before = untouched(layout)
    result = preparer(project=group("./" + local.relative_to(layout.app).as_posix()), env={})
    assert "Traceback" not in result.stderr
    found = installed(layout.app / "bp", top["id"], top["version"])
    assert found is not None
    why = why_not(*found, target, partial(installed, layout.buildpacks), [])
    verdict = case["lifecycle"]["verdict"]
    expected = verdict if case["differs"] is None else {"runs": "skips", "skips": "runs"}[verdict]
    if expected == "runs":
        assert result.code == 0, result.stderr
        assert (buildpack_dir(layout.buildpacks, top["id"], top["version"]) / "buildpack.toml").is_file()
        return
    assert result.code == 1, result.stderr
    assert why is not None
    message = f"failed to install {top['id']}@{top['version']}: {why}"
    assert message in result.stderr
    assert f"({layout.layers / 'analyzed.toml'} [run-image.target]" in message
    assert re.search(r"this build is linux/", message)
    assert untouched(layout) == before
    assert not (layout.layers / "order.toml").exists()
