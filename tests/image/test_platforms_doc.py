"""docs/platforms.md: its Tekton Task and Kubernetes Job parse, and their preparer command lines are accepted by
the CLI's parser and run by /cnb/lifecycle/preparer from the lifecycle image under runc, with the runtime config the
step's ``securityContext`` asks for, its environment, and its volumes as bind mounts."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from preparer import goflags
from preparer.inputs import resolve_inputs
from tests.golden import BUILDER, ROOT
from tests.image.conftest import Pod, in_image

DOC = (ROOT / "docs" / "platforms.md").read_text()
BLOCKS = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", DOC, re.DOTALL)]
#: What Tekton substitutes before a step starts.
TEKTON = {"workspaces.source.path": "/workspace/source", "params.APP_IMAGE": "registry.example/my-app:latest"}


def containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if doc["kind"] == "Task":
        return list(doc["spec"]["steps"])
    pod = doc["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod["containers"]]


def substituted(args: list[str]) -> list[str]:
    return [re.sub(r"\$\(([^)]*)\)", lambda m: TEKTON[m.group(1)], a) for a in args]


def step_env(step: dict[str, Any]) -> dict[str, str]:
    """The step's environment; values from Secrets are stand-ins."""
    stand_ins = {"CNB_REGISTRY_AUTH": "{}"}
    return {e["name"]: e["value"] if "value" in e else stand_ins[e["name"]] for e in step["env"]}


def tree(root: Path) -> list[str]:
    """Every path below ``root``."""
    found = []
    for top, dirs, files in os.walk(root):
        found += [os.path.relpath(os.path.join(top, name), root) for name in dirs + files]
    return sorted(found)


def preparer_step(doc: dict[str, Any]) -> dict[str, Any]:
    steps = [c for c in containers(doc) if c.get("command") == ["/cnb/lifecycle/preparer"]]
    assert len(steps) == 1
    return steps[0]


#: The doc's ``docker run`` lines: pack's, and a platform's that holds lists (dokku).
DOCKER_RUNS = [b for b in re.findall(r"```sh\n(.*?)```", DOC, re.DOTALL) if "docker run" in b]


def test_the_doc_has_a_docker_run_line_for_pack_and_for_a_platform_with_lists() -> None:
    assert len(DOCKER_RUNS) == 2 and "-platform-config" in DOCKER_RUNS[0] and "-buildpack" in DOCKER_RUNS[1]


@pytest.mark.parametrize("block", DOCKER_RUNS)
def test_the_docker_run_line_parses(block: str) -> None:
    words = shlex.split(block.replace("\\\n", " "))  # a backslash-newline continues the line
    args = words[words.index("/cnb/lifecycle/preparer") + 1 :]
    parsed = goflags.parse(args)
    assert parsed.positionals == ["my-app"] and not parsed.warnings
    inputs = resolve_inputs(parsed.values, {"CNB_PLATFORM_API": "0.15"}, cwd=Path("/"))
    mounts = {word.split(":")[1] for word in words if ":/" in word}
    assert {
        str(inputs.app_dir),
        str(inputs.layers_dir),
        str(inputs.platform_dir),
        str(inputs.buildpacks_dir),
    } <= mounts
    assert words[words.index("--user") + 1] == "root" and inputs.uid == 1000


def test_the_doc_has_a_tekton_task_and_a_job() -> None:
    assert [(b["apiVersion"], b["kind"]) for b in BLOCKS] == [("tekton.dev/v1", "Task"), ("batch/v1", "Job")]


@pytest.mark.parametrize("doc", BLOCKS, ids=lambda d: d["kind"])
def test_preparer_command_lines_parse_and_resolve(doc: dict[str, Any]) -> None:
    step = preparer_step(doc)
    parsed = goflags.parse(substituted(step["args"]))
    assert len(parsed.positionals) == 1 and not parsed.warnings
    env = step_env(step)
    assert env["CNB_PLATFORM_API"] == "0.15"
    inputs = resolve_inputs(parsed.values, env, cwd=Path("/"))
    mounts = {m["mountPath"] for m in step["volumeMounts"]}
    # Every directory the preparer writes is a volume the next phase sees.
    for written in (inputs.layers_dir, inputs.platform_dir, inputs.buildpacks_dir):
        assert str(written) in mounts
    # A hardened step: the build user itself (no -uid/-gid needed), and nothing a hardened pod forbids.
    assert inputs.uid is None and inputs.gid is None
    assert step["securityContext"] == HARDENED
    assert "/tmp" not in mounts and "TMPDIR" not in env  # the preparer needs no /tmp


#: The securityContext of a hardened build step, as the doc must show it.
HARDENED = {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True, "readOnlyRootFilesystem": True,
            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}  # fmt: skip


def pod_for(step: dict[str, Any], volumes: Path) -> Pod:
    """The OCI runtime config equivalent to the step's securityContext, with each volume a directory of
    ``volumes`` that the step's user owns (as ``fsGroup`` gives it)."""
    context = step["securityContext"]
    assert (
        context["readOnlyRootFilesystem"] and not context["allowPrivilegeEscalation"]
    )  # Pod always has both
    assert context["capabilities"] == {"drop": ["ALL"]}  # Pod gives none unless asked
    user = (context["runAsUser"], context["runAsGroup"])
    binds = {}
    for mount in step["volumeMounts"]:
        host = volumes / mount["mountPath"].strip("/").replace("/", "_")
        host.mkdir(parents=True, exist_ok=True)
        binds[mount["mountPath"]] = host
    return Pod(user=user, binds=binds, tmp="none")


@pytest.mark.parametrize("doc", BLOCKS, ids=lambda d: d["kind"])
def test_the_creator_sees_what_the_preparer_wrote(doc: dict[str, Any]) -> None:
    steps = containers(doc)
    prepare = preparer_step(doc)
    create = next(c for c in steps if c.get("command") == ["/cnb/lifecycle/creator"])
    assert steps.index(prepare) < steps.index(create)
    shared = {m["mountPath"] for m in prepare["volumeMounts"]} & {
        m["mountPath"] for m in create["volumeMounts"]
    }
    assert {"/layers", "/platform", "/buildpacks"} <= shared
    # The creator is pointed at the same buildpacks directory.
    assert goflags.parse(substituted(create["args"])).values["buildpacks"] == "/buildpacks"
    # The builder's buildpacks and order are copied into that volume before the preparer runs.
    copy = steps[steps.index(prepare) - 1]
    assert "/cnb/buildpacks/." in " ".join(copy["command"]) and "/cnb/order.toml" in " ".join(copy["command"])


@pytest.mark.parametrize("doc", BLOCKS, ids=lambda d: d["kind"])
def test_the_preparer_step_runs_in_the_image(doc: dict[str, Any], rootfs: Path, tmp_path: Path) -> None:
    """The step's exact command line and environment, in the image, in its securityContext, on its volumes: a dry
    run writes nothing (but the report it was asked for), then the real run prepares."""
    step = preparer_step(doc)
    args = substituted(step["args"])
    env = step_env(step)
    pod = pod_for(step, tmp_path / "volumes")
    inputs = resolve_inputs(goflags.parse(args).values, env, cwd=Path("/"))
    if str(inputs.app_dir) not in pod.binds:  # a Tekton workspace: Tekton mounts it, not the step
        pod.binds[str(inputs.app_dir)] = tmp_path / "volumes" / "workspace"
    app = pod.binds[str(inputs.app_dir)]
    shutil.copytree(ROOT / "fixtures" / "demo" / "app", app, dirs_exist_ok=True)
    buildpacks = pod.binds["/buildpacks"]  # what the copy step leaves in the volume
    shutil.copytree(BUILDER / "buildpacks", buildpacks, dirs_exist_ok=True)
    shutil.copy(BUILDER / "order.toml", buildpacks / "order.toml")
    if "DOCKER_CONFIG" in env:
        (pod.binds[env["DOCKER_CONFIG"]] / "config.json").write_text(json.dumps({"auths": {}}))
    for path in [tmp_path / "volumes", *(tmp_path / "volumes").rglob("*")]:
        os.lchown(path, *pod.user)  # fsGroup: the volumes are the build user's
    before = tree(tmp_path / "volumes")

    dry = in_image(rootfs, "-dry-run", *args, env=env, pod=pod)
    assert dry.code == 0, dry.stderr
    assert dry.stdout.startswith("===> PREPARING\n") and "Traceback" not in dry.stderr
    report = goflags.parse(args).values.get("prepare-report")
    report_on_host = pod.binds["/layers"] / Path(str(report)).name if report else None
    assert tree(tmp_path / "volumes") == sorted(
        before + ([str(report_on_host.relative_to(tmp_path / "volumes"))] if report_on_host else [])
    )
    if report_on_host:
        assert "dry-run = true" in report_on_host.read_text()

    real = in_image(rootfs, *args, env=env, pod=pod)
    assert real.code == 0, real.stderr
    order = pod.binds["/layers"] / "order.toml"
    assert order.stat().st_uid == 1000 and "demo/print-env" in order.read_text()
    assert (pod.binds["/platform"] / "env" / "GREETING").read_text() == "hello from project.toml"
    assert not (app / "npm-debug.log").exists() and (app / "index.js").exists()  # exclude = ["*.log", ...]
