"""docs/platforms.md: its Tekton Task and Kubernetes Job parse, and their preparer command lines are accepted."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from preparer import goflags
from preparer.inputs import resolve_inputs
from tests.golden import ROOT

DOC = (ROOT / "docs" / "platforms.md").read_text()
BLOCKS = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", DOC, re.DOTALL)]


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if doc["kind"] == "Task":
        return list(doc["spec"]["steps"])
    pod = doc["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod["containers"]]


def test_the_doc_has_a_tekton_task_and_a_job() -> None:
    assert [(b["apiVersion"], b["kind"]) for b in BLOCKS] == [("tekton.dev/v1", "Task"), ("batch/v1", "Job")]


@pytest.mark.parametrize("doc", BLOCKS, ids=lambda d: d["kind"])
def test_preparer_command_lines_parse_and_resolve(doc: dict[str, Any]) -> None:
    preparers = [c for c in containers(doc) if c.get("command") == ["/cnb/lifecycle/preparer"]]
    assert len(preparers) == 1
    step = preparers[0]
    # Tekton substitutes $(...) before the container starts; any value will do for the parser.
    args = [re.sub(r"\$\([^)]*\)", "/workspace", a) for a in step["args"]]
    parsed = goflags.parse(args)
    assert len(parsed.positionals) == 1 and not parsed.warnings
    env = {e["name"]: e.get("value", "from-a-secret") for e in step["env"]}
    assert env["CNB_PLATFORM_API"] == "0.15"
    inputs = resolve_inputs(parsed.values, env, cwd=Path("/"))
    mounts = {m["mountPath"] for m in step["volumeMounts"]}
    # Every directory the preparer writes is a volume the next phase sees.
    for written in (inputs.layers_dir, inputs.platform_dir, inputs.buildpacks_dir):
        assert str(written) in mounts
    assert inputs.uid == 1000 and inputs.gid == 1000


@pytest.mark.parametrize("doc", BLOCKS, ids=lambda d: d["kind"])
def test_the_creator_sees_what_the_preparer_wrote(doc: dict[str, Any]) -> None:
    steps = containers(doc)
    prepare = next(c for c in steps if c.get("command") == ["/cnb/lifecycle/preparer"])
    create = next(c for c in steps if c.get("command") == ["/cnb/lifecycle/creator"])
    assert steps.index(prepare) < steps.index(create)
    shared = {m["mountPath"] for m in prepare["volumeMounts"]} & {
        m["mountPath"] for m in create["volumeMounts"]
    }
    assert {"/layers", "/platform", "/buildpacks"} <= shared
    # The creator is pointed at the same buildpacks directory.
    creator_flags = goflags.parse([re.sub(r"\$\([^)]*\)", "/workspace", a) for a in create["args"]])
    assert creator_flags.values["buildpacks"] == "/buildpacks"
