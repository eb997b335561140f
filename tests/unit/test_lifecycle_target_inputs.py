"""Where the build's target comes from, against the real lifecycle's: each ``targets`` and ``detect-env`` case of
tests/data/lifecycle-platform-015/cases.json (what the lifecycle's own detector did on Platform API 0.15 and below,
recorded as its PROVENANCE.md says) is built again here and run through the library (``plan_run``, the case's order
as the project's group), its flags and variables resolved as the command resolves them. The preparer's target and
verdict are the detector's, or differ where docs/targets.md "Where the rules differ" says why (:data:`DIFFERS`).
A sample also goes through the real CLI."""

from __future__ import annotations

import dataclasses
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from preparer import goflags, plan_run
from preparer.errors import InvalidInputsError, PreparerError, TargetRefused
from preparer.inputs import Inputs, resolve_inputs
from preparer.pipeline import target_of
from tests.plugins.cli import Result, base_env, run_cli
from tests.unit.test_lifecycle_targets import write_buildpacks

DATA = Path(__file__).resolve().parents[1] / "data" / "lifecycle-platform-015"
CASES: list[dict[str, Any]] = [
    case
    for case in json.loads((DATA / "cases.json").read_text())["cases"]
    if case["area"] in ("targets", "detect-env")
]
DOCS = Path(__file__).resolve().parents[2] / "docs" / "targets.md"
#: The bullet of docs/targets.md "Where the rules differ" each tag stands for, by its first words.
BULLETS = {
    "variant-key": "**Keys.**",
    "distro-unknown": "**An unknown distribution.**",
    "statement": "**Without analyzed.toml.**",
    "incomplete": "**A variable without what it needs.**",
}
_ENV = "target env: "
#: Each case on which the preparer and the detector differ (in target or verdict), and why.
DIFFERS = {
    "target: [run-image.target] with the spec's variant key": "variant-key",
    "target match: run image no distro, no os-release; buildpack for ubuntu 22.04": "distro-unknown",
    "target match: run image no distro, no os-release; buildpack for ubuntu 24.04": "distro-unknown",
    # Without analyzed.toml the variables are the platform's statement of the target; the detector reads none.
    f"{_ENV}DISTRO_NAME, no analyzed.toml": "statement",
    f"{_ENV}OS+ARCH, no analyzed.toml": "statement",
    f"{_ENV}DISTRO_NAME+DISTRO_VERSION, no analyzed.toml": "statement",
    f"{_ENV}OS+ARCH+ARCH_VARIANT+DISTRO_NAME+DISTRO_VERSION, no analyzed.toml": "statement",
    f"{_ENV}all set to arm64/ubuntu 24.04, buildpack for arm64 only, no analyzed.toml": "statement",
    # A variable without the one it needs is exit 3, with analyzed.toml or without.
    **{
        f"{_ENV}{names}, {where}": "incomplete"
        for names in ("ARCH", "ARCH_VARIANT", "DISTRO_VERSION", "OS+ARCH+DISTRO_VERSION")
        for where in ("no analyzed.toml", "analyzed.toml linux/amd64")
    },
}


def by_name(name: str) -> dict[str, Any]:
    return next(case for case in CASES if case["name"] == name)


def placed(text: str, dirs: dict[str, Path]) -> str:
    """``text`` with the case's ``<case>``, ``<layers>``, ... placeholders replaced by its directories."""
    for name, path in dirs.items():
        text = text.replace(f"<{name}>", str(path))
    return text


def lay_out(case: dict[str, Any], root: Path) -> dict[str, Path]:
    """The case's directories, buildpacks, analyzed.toml and other files under ``root``; its os-release at
    ``root/os-release`` (an empty file: none); a project.toml naming the case's group. Returns the directories."""
    dirs = {name: root / name for name in ("case", "layers", "buildpacks", "app", "platform")}
    for path in dirs.values():
        path.mkdir(parents=True)
    write_buildpacks(case, dirs["buildpacks"])
    if case["analyzed_toml"] is not None:
        (dirs["layers"] / "analyzed.toml").write_text(case["analyzed_toml"])
    for name, text in case["files"].items():
        path = Path(placed(name, dirs))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (root / "os-release").write_text(case["os_release"])
    (dirs["case"] / "builder-order.toml").write_text("")
    [group] = case["order"]
    (dirs["app"] / "project.toml").write_text(
        '[_]\nschema-version = "0.2"\n'
        + "".join(f'[[io.buildpacks.group]]\nid = "{e["id"]}"\nversion = "{e["version"]}"\n' for e in group)
    )
    return dirs


def case_env(case: dict[str, Any], dirs: dict[str, Path]) -> dict[str, str]:
    """The environment the detector ran with (PROVENANCE.md), the case's own variables placed."""
    env = {
        "CNB_LAYERS_DIR": str(dirs["layers"]),
        "CNB_BUILDPACKS_DIR": str(dirs["buildpacks"]),
        "CNB_APP_DIR": str(dirs["app"]),
        "CNB_PLATFORM_DIR": str(dirs["platform"]),
        "CNB_ORDER_PATH": str(dirs["case"] / "builder-order.toml"),
    }
    if case["platform_api"] is not None:
        env["CNB_PLATFORM_API"] = case["platform_api"]
    return env | {name: placed(value, dirs) for name, value in case["env"].items()}


def case_inputs(case: dict[str, Any], root: Path) -> Inputs:
    """The inputs the command resolves from the case's flags and environment; the os-release the case's, the
    machine amd64 (the detector's ``runtime.GOARCH`` where it ran)."""
    dirs = lay_out(case, root)
    inputs = resolve_inputs(goflags.parse(case_args(case, dirs)).values, case_env(case, dirs), cwd=root)
    return dataclasses.replace(
        inputs, target_platform="linux/amd64", os_release=root / "os-release", download_cache=None
    )


def case_args(case: dict[str, Any], dirs: dict[str, Path]) -> list[str]:
    """The case's flags, placed, but ``-order``: the case's order is the project's group here."""
    args = [placed(arg, dirs) for arg in case["args"]]
    while "-order" in args:
        at = args.index("-order")
        del args[at : at + 2]
    return args


def lifecycle_target(outcome: dict[str, Any]) -> tuple[str, ...] | None:
    """``(os, arch, variant, distro name, distro version)`` of the run image as the detector compared it: what it
    gave ``bin/detect``, else the run image its target refusal shows; ``None`` when it said neither."""
    if outcome.get("target_env"):
        given = dict(line.split("=", 1) for line in outcome["target_env"])
        names = ("OS", "ARCH", "ARCH_VARIANT", "DISTRO_NAME", "DISTRO_VERSION")
        return tuple(given.get(f"CNB_TARGET_{name}", "") for name in names)
    for text in (outcome.get("target_errors") or {}).values():
        found = re.search(r"run image: (\{.*?\}), buildpack:", text)
        if found:
            image = json.loads(found[1])
            distro = image.get("distro") or {}
            return (image.get("os", ""), image.get("arch", ""), image.get("arch-variant", ""),
                    distro.get("name", ""), distro.get("version", ""))  # fmt: skip
    return None


def preparer_outcome(case: dict[str, Any], root: Path) -> tuple[str, tuple[str, ...] | None, list[str]]:
    """The preparer's verdict on ``case`` laid out in ``root`` (``runs``, ``skips``: a buildpack refused on its
    targets, ``refused``: invalid inputs), its target as :func:`lifecycle_target` gives the detector's, and its
    warnings about the target."""
    warnings: list[str] = []
    try:
        inputs = case_inputs(case, root)
        target = target_of(inputs, warnings)
    except InvalidInputsError:
        return "refused", None, warnings
    shown = (target.os, target.arch, target.variant, target.distro_name, target.distro_version)
    try:
        plan_run(inputs)
    except TargetRefused:
        return "skips", shown, warnings
    except PreparerError as error:
        return f"failed ({error})", shown, warnings
    return "runs", shown, warnings


#: The detector's verdicts as the preparer's words: a group failed on a target is a buildpack refused; a start-up
#: failure (analyzed.toml unreadable) is the preparer's invalid inputs.
VERDICTS = {"runs": "runs", "no group passed": "skips", "start-up failure": "refused"}


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_the_target_is_read_as_the_detector_reads_it_or_as_documented(
    case: dict[str, Any], tmp_path: Path
) -> None:
    verdict, target, _ = preparer_outcome(case, tmp_path)
    outcome = case["lifecycle"]
    theirs = lifecycle_target(outcome)
    same = verdict == VERDICTS[outcome["verdict"]] and (theirs is None or target is None or target == theirs)
    assert same is (case["name"] not in DIFFERS), (verdict, target, outcome["verdict"], theirs)
    if DIFFERS.get(case["name"]) == "incomplete":
        assert verdict == "refused"


def test_every_difference_names_a_bullet_the_docs_have_and_a_case() -> None:
    section = DOCS.read_text().partition("## Where the rules differ from the detector's and pack's")[2]
    assert set(DIFFERS.values()) == set(BULLETS)
    for tag in BULLETS.values():
        assert f"- {tag}" in section, tag
    names = {case["name"] for case in CASES}
    assert set(DIFFERS) <= names
    agreeing = len(CASES) - len(DIFFERS)
    assert f"{agreeing} of the {len(CASES)} target cases" in DOCS.read_text()


def test_settings_analyzed_toml_overrides_are_warned_of(tmp_path: Path) -> None:
    """With analyzed.toml, the variables that say otherwise are each named with what the detector reads."""
    case = by_name(
        f"{_ENV}all set to ubuntu 24.04, buildpack for ubuntu 24.04 only, analyzed.toml linux/amd64"
    )
    verdict, target, warnings = preparer_outcome(case, tmp_path)
    assert (verdict, target) == ("skips", ("linux", "amd64", "", "ubuntu", "22.04"))
    assert [w.partition("=")[0] for w in warnings] == [
        "CNB_TARGET_ARCH", "CNB_TARGET_ARCH_VARIANT", "CNB_TARGET_DISTRO_VERSION"
    ]  # fmt: skip


#: Cases whose target does not hang on /etc/os-release (the CLI reads this machine's), run through the command.
CLI_CASES = [
    "target path: -analyzed wins over CNB_ANALYZED_PATH",
    "target path: CNB_ANALYZED_PATH names another file",
    "target path: -layers elsewhere moves the default",
    "target grid: [run-image.target] arch+distro.name+distro.version, no os-release",
    "target match: run image distro version 22.04 without a name; buildpack for ubuntu 24.04",
    "target match: run image no os, no arch, distro debian 12; buildpack for windows/amd64",
    "target match: run image no os, arch arm64; buildpack for linux/amd64",
    "target: malformed analyzed.toml",
    f"{_ENV}ARCH, analyzed.toml linux/amd64",
    f"{_ENV}DISTRO_VERSION, no analyzed.toml",
]


@pytest.mark.parametrize("name", CLI_CASES)
def test_the_command_reads_the_target_as_the_library_does(name: str, tmp_path: Path) -> None:
    case = by_name(name)
    dirs = lay_out(case, tmp_path)
    report = tmp_path / "report.toml"
    args = case_args(case, dirs)
    env = base_env(tmp_path, CNB_PREPARER_PLATFORM="linux/amd64", **case_env(case, dirs))
    result = run_cli([*args, "-prepare-report", str(report), "-download-cache", ""], env)
    assert "Traceback" not in result.stderr
    expected = VERDICTS[case["lifecycle"]["verdict"]]
    if name in DIFFERS:
        assert DIFFERS[name] == "incomplete"
        expected = "refused"
    assert result.code == {"runs": 0, "skips": 1, "refused": 3}[expected], result.stderr
    if expected != "runs":
        assert "ERROR: failed to " in result.stderr
        assert not (dirs["layers"] / "order.toml").exists()
        return
    said = tomllib.loads(report.read_text())["target"]
    theirs = lifecycle_target(case["lifecycle"])
    assert theirs is not None
    ours = (said["os"], said["arch"], said["variant"], said["distro-name"], said["distro-version"])
    # A distribution the detector did not take from analyzed.toml is os-release's: this machine's, for the command.
    assert ours == theirs if theirs[3] or theirs[4] else ours[:3] == theirs[:3]


def test_refusals_name_the_file_the_target_came_from(tmp_path: Path) -> None:
    case = by_name("target path: -analyzed wins over CNB_ANALYZED_PATH")
    dirs = lay_out(case, tmp_path)
    flagged = tmp_path / "case" / "flag" / "analyzed.toml"
    (dirs["buildpacks"] / "me_probe" / "1.0.0" / "buildpack.toml").write_text(
        case["buildpacks"][0]["toml"] + '\n[[targets]]\nos = "linux"\narch = "amd64"\n'
    )
    args = case_args(case, dirs)
    result: Result = run_cli(args, base_env(tmp_path, **case_env(case, dirs)))
    assert result.code == 1, result.stderr
    assert (
        "ERROR: failed to install me/probe@1.0.0: it runs on linux/amd64; this build is linux/ppc64le "
        f"({flagged} [run-image.target])"
    ) in result.stderr
