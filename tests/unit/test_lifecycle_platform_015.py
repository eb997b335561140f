"""System buildpacks and execution environments against the real lifecycle's detector: each ``system`` and
``exec-env`` case of tests/data/lifecycle-platform-015/cases.json (what the detector of v0.21.17 did, recorded as its
PROVENANCE.md says) is built again here and planned by the preparer, through the library and, for a sample, the real
CLI. The verdict is the detector's (a start-up failure, or a run that would find nothing to detect, is a refusal of
the preparer's, before anything is written), or the other one where docs/targets.md "Where the rules differ" says
why (``DIFFERS``).

A case's order is the project's group when it has one group and nothing of it is optional (``urn:cnb:builder:``
entries, so that the prepared order.toml is the case's), else the builder's order (``-order``): the detector reads
either the same way.

Exit codes: the detector's start-up failure (1) and a run with nothing to detect (20) or a buildpack failing at
detection (21 on targets, 22 on a buildpack.toml it cannot read) are the preparer's exit 1; an unsupported Buildpack
API is 12 for both; an unset Platform API 11 for both."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from preparer.api import APIVersion
from preparer.detection import Detection
from preparer.errors import PreparerError
from preparer.execenv import skip_reason
from preparer.goflags import parse
from preparer.inputs import resolve_inputs
from preparer.pipeline import plan_run
from preparer.target import Lookup, installed
from tests.golden import listing
from tests.plugins.cli import Result, base_env, run_cli
from tests.unit.test_lifecycle_targets import write_buildpacks

DATA = Path(__file__).resolve().parents[1] / "data" / "lifecycle-platform-015"
ALL: list[dict[str, Any]] = json.loads((DATA / "cases.json").read_text())["cases"]
CASES = [case for case in ALL if case["area"] in ("system", "exec-env")]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "targets.md"

#: The cases on which the preparer decides otherwise, each with the bullet of docs/targets.md "Where the rules
#: differ" that says why.
DIFFERS = {
    "exec-env odd: buildpack [test], CNB_EXEC_ENV '*'": "exec-env-value",
    "exec-env odd: buildpack [test], CNB_EXEC_ENV 'test,production'": "exec-env-value",
    "exec-env odd: buildpack [test], CNB_EXEC_ENV 'test production'": "exec-env-value",
    "exec-env odd: buildpack [test], CNB_EXEC_ENV 'te$t'": "exec-env-value",
    "system: Platform 0.14, -system is not a flag": "system-flag",
    "system: Platform 0.13, -system is not a flag": "system-flag",
    "exec-env spelling: spec's [[buildpack.exec-env]] in a second group's buildpack": "builder-order",
    "exec-env spelling: spec's [[buildpack.exec-env]] on an optional element": "builder-order",
}
#: The bullet each tag stands for, by its first words.
BULLETS = {
    "exec-env-value": "**`CNB_EXEC_ENV`.**",
    "system-flag": "**`-system` below Platform API 0.15.**",
    "builder-order": "**The builder's order left as it is.**",
}


def by_name(name: str) -> dict[str, Any]:
    return next(case for case in CASES if case["name"] == name)


def filled(text: str, root: Path) -> str:
    """``text`` with the case's directories in place of ``<case>``, ``<app>``, ``<layers>``..."""
    for name in ("app", "layers", "buildpacks", "platform"):
        text = text.replace(f"<{name}>", str(root / name))
    return text.replace("<case>", str(root))


def as_project(case: dict[str, Any]) -> bool:
    """Whether the case's order is given as the project's group (one group, none of it optional: the project's
    entries cannot be), else as the builder's order."""
    return len(case["order"]) == 1 and not any(e.get("optional") for e in case["order"][0])


def lay_out(case: dict[str, Any], root: Path) -> dict[str, str]:
    """The case's files under ``root`` (its ``<case>``): buildpacks, system.toml, analyzed.toml, os-release, the order
    as the project's group or the builder's; returns the environment the preparer is given."""
    write_buildpacks(case, root / "buildpacks")
    for name in ("app", "layers", "platform"):
        (root / name).mkdir(exist_ok=True)
    for path, text in case["files"].items():
        Path(filled(path, root)).write_text(text)
    if case["system_toml"] is not None:
        (root / "system.toml").write_text(case["system_toml"])
    if case["analyzed_toml"] is not None:
        (root / "layers" / "analyzed.toml").write_text(case["analyzed_toml"])
    (root / "os-release").write_text(case["os_release"])
    lines = []
    for group in case["order"] if not as_project(case) else []:
        lines.append("[[order]]")
        for e in group:
            optional = str(e.get("optional", False)).lower()
            lines.append(
                f'[[order.group]]\nid = "{e["id"]}"\nversion = "{e["version"]}"\noptional = {optional}'
            )
    (root / "order.toml").write_text("\n".join(lines) + "\n")
    if as_project(case):
        entries = "".join(
            f'[[io.buildpacks.group]]\nuri = "urn:cnb:builder:{e["id"]}@{e["version"]}"\n'
            for e in case["order"][0]
        )
        (root / "app" / "project.toml").write_text('[_]\nschema-version = "0.2"\n' + entries)
    environ = {k: filled(v, root) for k, v in case["env"].items()}
    if case["platform_api"] is not None:
        environ["CNB_PLATFORM_API"] = case["platform_api"]
    return environ


def directories(root: Path) -> list[str]:
    return [
        "-app", str(root / "app"), "-layers", str(root / "layers"), "-platform", str(root / "platform"),
        "-buildpacks", str(root / "buildpacks"), "-order", str(root / "order.toml"),
    ]  # fmt: skip


def planned(case: dict[str, Any], root: Path) -> Detection | PreparerError:
    """What the library's plan_run makes of the case: the groups as the detector will run them, or its refusal."""
    environ = lay_out(case, root)
    args = [filled(arg, root) for arg in case["args"]]
    try:
        inputs = resolve_inputs(parse([*directories(root), *args]).values, environ, cwd=root)
        inputs = replace(inputs, os_release=root / "os-release", download_cache=None)
        plan = plan_run(inputs)
    except PreparerError as error:
        return error
    assert plan.detection is not None
    return plan.detection


def expected_exit(case: dict[str, Any]) -> int:
    """The preparer's exit code for the detector's outcome: a refusal for whatever fails before a buildpack's own
    bin/detect decides; 0 where only bin/detect (a case's ``detect_fails``) makes no group pass."""
    lifecycle = case["lifecycle"]
    code = lifecycle["exit_code"]
    if code == 20 and case["detect_fails"]:
        return 0
    return {0: 0, 1: 1, 2: 2, 11: 11, 12: 12, 20: 1, 21: 1, 22: 1}[code]


def shown_order(detection: Detection, project: bool) -> list[list[str]]:
    """The groups as the lifecycle's recording writes them: ``id@version``, ``(optional)`` marked."""
    return [
        [m.ref + (" (optional)" if m.optional and not project else "") for m in group.members]
        for group in detection.groups
    ]


def exec_env_skips(detection: Detection) -> set[str]:
    """Every buildpack the preparer says the detector skips on its exec-env: elements and a composite's."""
    found = {m.ref for group in detection.groups for m in group.members if m.skipped and m.exec_env}
    found |= {
        within.split(":")[0]
        for group in detection.groups
        for m in group.members
        for within in m.skipped_within
        if "exec-env" in within
    }
    return found


def detected(
    detection: Detection, lookup: Lookup, fails: set[str], exec_env: str, api: APIVersion
) -> list[str]:
    """The group the detector would pass with the preparer's groups, every bin/detect passing but ``fails``: the
    detector's algorithm (``detectOrder``, ``detectGroup``, the resolver) over the groups as the preparer merged them,
    a composite tried group by group, an id run once in a group, a buildpack skipped on its exec-env."""

    def group(elements: list[tuple[str, str, bool]], done: list[tuple[str, str, bool]]) -> list[str] | None:
        done = list(done)
        for n, (bp_id, version, optional) in enumerate(elements):
            if any(d[0] == bp_id for d in done):
                continue
            found = lookup(bp_id, version)
            assert found is not None, bp_id
            descriptor = found[0]
            if descriptor.order:
                rest = elements[n + 1 :]
                for inner in descriptor.order:
                    got = group([(e.id, e.version, e.optional) for e in inner] + rest, done)
                    if got is not None:
                        return got
                if optional:
                    return group(rest, done)
                return None
            if skip_reason(descriptor, exec_env, api) is not None:
                continue
            done.append((bp_id, version, optional))
        if any(not optional and bp_id in fails for bp_id, _, optional in done):
            return None
        passed = [f"{bp_id}@{version}" for bp_id, version, _ in done if bp_id not in fails]
        return passed or None

    for members in detection.groups:
        got = group([(m.id, m.version, m.optional) for m in members.members], [])
        if got is not None:
            return got
    return []


#: An unset Platform API is the command's to refuse (the library's inputs always have one): the CLI's cases hold it.
LIBRARY_CASES = [case for case in CASES if case["platform_api"] is not None]


@pytest.mark.parametrize("case", LIBRARY_CASES, ids=[case["name"] for case in LIBRARY_CASES])
def test_the_preparer_decides_as_the_detector_or_as_documented(case: dict[str, Any], tmp_path: Path) -> None:
    got = planned(case, tmp_path)
    code = got.exit_code if isinstance(got, PreparerError) else 0
    lifecycle = case["lifecycle"]
    if case["name"] in DIFFERS:
        assert code != expected_exit(case), DIFFERS[case["name"]]
        return
    assert code == expected_exit(case), str(got) + " / " + lifecycle["error"]
    if isinstance(got, PreparerError) or not got.groups:
        return
    project = as_project(case)
    if project:  # the project's group has no optional elements: the refs alone
        assert shown_order(got, True) == [
            [ref.removesuffix(" (optional)") for ref in g] for g in lifecycle["order"]
        ]
    else:
        assert shown_order(got, False) == lifecycle["order"]
    assert exec_env_skips(got) == {skip["ref"] for skip in lifecycle["skipped_on_exec_env"]}
    lookup: Lookup = lambda bp_id, version: installed(tmp_path / "buildpacks", bp_id, version)
    api = APIVersion.parse(case["platform_api"])
    exec_env = lifecycle["exec_env"]
    assert detected(got, lookup, set(case["detect_fails"]), exec_env, api) == lifecycle["group"]


def test_every_difference_names_a_bullet_the_docs_have() -> None:
    text = DOCS.read_text()
    section = text[text.index("## Where the rules differ from the detector's and pack's") :]
    assert set(DIFFERS.values()) == set(BULLETS)
    for tag in BULLETS.values():
        assert f"- {tag}" in section, tag
    assert f"{len(CASES)} cases of tests/data/lifecycle-platform-015/" in section


def test_the_replay_covers_what_the_issue_asks_for() -> None:
    names = " ".join(case["name"] for case in CASES)
    for needed in ("pre missing", "pre present", "optional = true", "spec's [[buildpack.exec-env]]", "[*]",
                   "group left empty", "composite", "Platform 0.14"):  # fmt: skip
        assert needed in names, needed
    agreed = [case for case in CASES if case["name"] not in DIFFERS]
    assert len(agreed) == len(CASES) - len(DIFFERS) >= 130
    assert {case["name"] for case in CASES} - {case["name"] for case in LIBRARY_CASES} <= set(CLI_CASES)


CLI_CASES = [
    "system: pre present",
    "system: pre missing from <buildpacks>",
    "system: optional = true, missing from <buildpacks>",
    "system: malformed TOML",
    "system: system buildpack at Buildpack API 0.6 (unsupported)",
    "system: Platform 0.14, -system is not a flag",
    "system: CNB_PLATFORM_API unset",
    "system: two groups, second group's buildpack missing",
    "exec-env: group left empty by skips",
    "exec-env grid: buildpack [test], CNB_EXEC_ENV production",
    "exec-env spelling: spec's [[buildpack.exec-env]] name, Platform 0.15, Buildpack API 0.12",
    "exec-env odd: buildpack [test], CNB_EXEC_ENV 'te$t'",
]


def cli(case: dict[str, Any], root: Path) -> tuple[Result, list[str], list[str]]:
    """The case through the real CLI: its result, and what ``root`` held before and after."""
    environ = lay_out(case, root)
    env = base_env(root, **environ) | {"CNB_LOG_LEVEL": "info"}
    if case["platform_api"] is None:
        del env["CNB_PLATFORM_API"]
    args = [filled(arg, root) for arg in case["args"]]
    before = listing(root)
    result = run_cli([*directories(root), "-download-cache", "", *args], env)
    return result, before, listing(root)


@pytest.mark.parametrize("name", CLI_CASES)
def test_the_cli_decides_as_the_detector_and_writes_nothing_when_it_refuses(
    name: str, tmp_path: Path
) -> None:
    case = by_name(name)
    root = tmp_path / "case"
    root.mkdir()
    result, before, after = cli(case, root)
    assert "Traceback" not in result.stderr
    expected = expected_exit(case)
    if DIFFERS.get(name) == "system-flag":  # accepted, said not applied: a creator command line runs
        assert (expected, result.code) == (2, 0), result.stderr
        assert any("-system" in w and "are not applied" in w for w in result.warnings), result.stderr
        return
    if DIFFERS.get(name) == "exec-env-value":  # refused before anything runs, as pack refuses it
        assert (expected, result.code) == (0, 3), result.stderr
        assert "CNB_EXEC_ENV='te$t' is not an execution environment" in result.stderr
        assert after == before
        return
    assert result.code == expected, result.stderr
    if expected == 0:
        assert (root / "layers" / "order.toml").exists() is as_project(case)
        return
    error = result.stderr.splitlines()[-1]
    assert error.startswith("ERROR: failed to ")
    assert after == before
    lifecycle = case["lifecycle"]
    if lifecycle["error"].startswith(
        "open "
    ):  # the detector's own words name a path: the preparer's, the buildpack
        assert "the detector fails at start-up without it" in error
        looked = lifecycle["error"].removeprefix("open ").split(":")[0].split("/")
        assert f"{looked[1].replace('_', '/')}@{looked[2]}" in error
