"""The oracle issue 47 is to be checked against: tests/data/lifecycle-platform-015/cases.json, what the real
lifecycle's detector did with system buildpacks, execution environments and every target input it reads (recorded
as its PROVENANCE.md says). The preparer does not apply Platform API 0.15 that way yet, so this file checks only
that the recording is whole and well formed; the implementation of issue 47 adds the comparison (each case built
again and decided by the preparer, the verdict the detector's or documented as different), as
tests/unit/test_lifecycle_targets.py does for tests/data/lifecycle-targets/."""

from __future__ import annotations

import json
import re
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "lifecycle-platform-015"
RECORDING: dict[str, Any] = json.loads((DATA / "cases.json").read_text())
CASES: list[dict[str, Any]] = RECORDING["cases"]

AREAS = {"system", "exec-env", "targets", "detect-env"}
#: Each verdict and the exit codes the detector gives with it.
VERDICTS = {
    "runs": {0},
    "no group passed": {20, 21},
    "detect error": {22},
    "start-up failure": {1, 12},
    "refused flags": {2},
    "refused before start-up": {11},
}
STAGES = {"runs": "detect", "no group passed": "detect", "detect error": "detect", "start-up failure": "start-up",
          "refused flags": "flags", "refused before start-up": "before start-up"}  # fmt: skip
DETECTED = ("order", "group", "ran", "skipped_on_targets", "target_errors", "skipped_on_exec_env", "target_env",
            "exec_env_given")  # fmt: skip
REF = re.compile(r"^[a-z0-9/._-]+@[0-9.]+$")


def test_the_recording_names_its_source() -> None:
    source = RECORDING["lifecycle"]
    assert source["repository"] == "https://github.com/buildpacks/lifecycle"
    assert re.fullmatch(r"[0-9a-f]{40}", source["commit"])
    assert source["go"].startswith("go1.")
    assert (DATA / source["provenance"]).is_file()
    assert source["cross_checked"]["same_outcome_in_every_case"] is True


def test_every_case_has_a_unique_name_and_an_area() -> None:
    names = [case["name"] for case in CASES]
    assert len(names) == len(set(names))
    assert {case["area"] for case in CASES} == AREAS


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_every_case_has_its_inputs(case: dict[str, Any]) -> None:
    assert case["platform_api"] is None or re.fullmatch(r"0\.\d+", case["platform_api"])
    assert all(isinstance(arg, str) for arg in case["args"])
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in case["env"].items())
    for bp in case["buildpacks"]:
        # Every buildpack.toml is TOML (the spec's exec-env spelling included), and it is the buildpack it says.
        info = tomllib.loads(bp["toml"])["buildpack"]
        assert (info["id"], info["version"]) == (bp["id"], bp["version"])
        assert set(bp["bin"]) <= {"build", "detect"}
    assert case["order"] and all(group for group in case["order"])
    for element in (e for group in case["order"] for e in group):
        assert set(element) <= {"id", "version", "optional"} and element["id"]
    for key in ("system_toml", "analyzed_toml"):
        assert case[key] is None or isinstance(case[key], str)
    assert isinstance(case["os_release"], str)
    assert all(isinstance(bp_id, str) for bp_id in case["detect_fails"])
    assert all(path.startswith("<case>/") for path in case["files"])
    assert case["real_detect"] is (case["area"] == "detect-env")


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_every_case_has_an_outcome(case: dict[str, Any]) -> None:
    outcome = case["lifecycle"]
    verdict = outcome["verdict"]
    assert outcome["exit_code"] in VERDICTS[verdict]
    assert outcome["stage"] == STAGES[verdict]
    assert isinstance(outcome["error"], str) and isinstance(outcome["debug"], list)
    assert all(line.startswith("Warning: ") for line in outcome["warnings"])
    if verdict == "runs":
        assert not outcome["error"] and not outcome["messages"] and outcome["group"]
        assert set(outcome["group"]) <= set(outcome["ran"])
    else:
        assert outcome["messages"], "a refusal says why"
    if outcome["stage"] in ("flags", "before start-up"):
        return
    assert outcome["exec_env"] and outcome["analyzed_path"]
    if outcome["stage"] == "start-up":
        assert outcome["error"] and not any(key in outcome for key in DETECTED)
        return
    assert all(key in outcome for key in DETECTED)
    for ref in outcome["group"] + outcome["ran"] + outcome["skipped_on_targets"]:
        assert REF.match(ref), ref
    assert set(outcome["target_errors"]) == set(outcome["skipped_on_targets"])
    for skip in outcome["skipped_on_exec_env"]:
        assert REF.match(skip["ref"]) and skip["current"] == outcome["exec_env"]
        assert skip["ref"] in skip["line"] and skip["ref"] not in outcome["ran"]
    assert (outcome["target_env"] is None) is (not outcome["ran"])
    assert ("detect_env" in outcome) is case["real_detect"]


def test_the_recording_covers_what_the_issue_asks_for() -> None:
    names = "\n".join(case["name"] for case in CASES)
    for needed in ("no system.toml", "pre present", "post present", "missing from <buildpacks>", "optional = true",
                   "already in the group, same version", "already in the group, other version", "two groups",
                   "composite group element", "malformed", "targets do not match", "exec-env grid",
                   "spec's [[buildpack.exec-env]]", "Buildpack API 0.11", "composite", "group left empty",
                   "exec-env system", "CNB_EXEC_ENV unset", "target grid", "target env", "os-release",
                   "CNB_ANALYZED_PATH", "-analyzed", "distro version 22.04 without a name", "Platform 0.14",
                   "Platform 0.13"):  # fmt: skip
        assert needed in names, needed
    verdicts = Counter(case["lifecycle"]["verdict"] for case in CASES)
    assert set(verdicts) == set(VERDICTS)
    assert {case["platform_api"] for case in CASES} >= {"0.15", "0.14", "0.13"}


def test_the_provenance_gives_the_recordings_figures() -> None:
    text = (DATA / "PROVENANCE.md").read_text()
    assert f"`cases.json` holds {len(CASES)} cases" in text
    for area, count in Counter(case["area"] for case in CASES).items():
        assert f"| `{area}` | {count} |" in text, area
    assert RECORDING["lifecycle"]["commit"] in text


def test_the_recording_holds_no_machine_paths() -> None:
    text = (DATA / "cases.json").read_text()
    assert not re.search(r"/(tmp|work|home|root)/", text)
