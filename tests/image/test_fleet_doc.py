"""docs/fleet.md: its Kubernetes Job and Tekton Task parse, keeps the cache's push credentials out of the build step, and its
prepare step runs from the lifecycle image under runc (the step's securityContext, environment and volumes) with the
test's docker-registry as the cache repository: a first pod writes the records, a second asks the origin nothing."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from preparer import goflags
from tests.buildpacks import make_tgz
from tests.golden import BUILDER, ROOT
from tests.image.conftest import in_image
from tests.image.test_platforms_doc import pod_for, step_env, substituted
from tests.plugins.http_server import FileServer
from tests.plugins.registry import Registry

DOC = (ROOT / "docs" / "fleet.md").read_text()
DOCS = [d for b in re.findall(r"```yaml\n(.*?)```", DOC, re.DOTALL) for d in yaml.safe_load_all(b)]


def recipe(kind: str) -> dict[str, Any]:
    (found,) = [d for d in DOCS if d["kind"] == kind]
    return dict(found)


def steps(kind: str) -> dict[str, dict[str, Any]]:
    doc = recipe(kind)
    if kind == "Task":
        return {c["name"]: c for c in doc["spec"]["steps"]}
    pod = doc["spec"]["template"]["spec"]
    return {c["name"]: c for c in [*pod["initContainers"], *pod["containers"]]}


def volumes(kind: str) -> dict[str, dict[str, Any]]:
    doc = recipe(kind)
    spec = doc["spec"] if kind == "Task" else doc["spec"]["template"]["spec"]
    return {v["name"]: v for v in spec["volumes"]}


@pytest.mark.parametrize("kind", ["Job", "Task"])
def test_push_credentials_and_mirrors_reach_the_prepare_step_only(kind: str) -> None:
    prepare, create = steps(kind)["prepare"], steps(kind)["create"]
    env = step_env(prepare)
    mounts = {m["name"]: m["mountPath"] for m in prepare["volumeMounts"]}
    assert mounts["cache-push"] == env["DOCKER_CONFIG"]
    assert mounts["registry-hosts"] == env["CNB_REGISTRY_HOSTS_DIR"]
    assert "cache-push" not in {m["name"] for m in create["volumeMounts"]}
    assert not any(e["name"].startswith("CNB_DOWNLOAD_CACHE") for e in create["env"])
    items = volumes(kind)["registry-hosts"]["configMap"]["items"]
    assert items == [{"key": "docker.io", "path": "docker.io/hosts.toml"}]
    (config_map,) = [d for d in DOCS if d["kind"] == "ConfigMap"]
    assert "docker.io" in config_map["data"]
    assert len(goflags.parse(substituted(prepare["args"])).positionals) == 1


@pytest.mark.parametrize("kind", ["Job", "Task"])
def test_the_prepare_step_fills_and_then_uses_the_cache_repository(
    rootfs: Path, tmp_path: Path, registry: Registry, http_server: FileServer, kind: str
) -> None:
    step = steps(kind)["prepare"]
    args = substituted(step["args"])
    app = goflags.parse(args).values["app"]
    repo = f"{registry.host}/buildpacks/doc-{kind.lower()}-{os.getpid()}"
    env = step_env(step) | {"CNB_DOWNLOAD_CACHE_REPO": repo}
    archive = make_tgz(http_server.root / "bp.tgz", "acme/from-doc")
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    (config_map,) = [d for d in DOCS if d["kind"] == "ConfigMap"]

    def run(name: str) -> None:
        pod = pod_for(step, tmp_path / name)
        pod.binds.setdefault(str(app), tmp_path / name / "workspace")  # Tekton mounts its workspace itself
        pod.binds[str(app)].mkdir(parents=True, exist_ok=True)
        shutil.copytree(BUILDER / "buildpacks", pod.binds["/buildpacks"], dirs_exist_ok=True)
        shutil.copy(BUILDER / "order.toml", pod.binds["/buildpacks"] / "order.toml")
        project = f'[_]\nschema-version = "0.2"\n[[io.buildpacks.group]]\nuri = "{http_server.url("bp.tgz")}#sha256={sha}"\n'
        (pod.binds[str(app)] / "project.toml").write_text(project)
        hosts = pod.binds[env["CNB_REGISTRY_HOSTS_DIR"]] / "docker.io"
        hosts.mkdir()
        (hosts / "hosts.toml").write_text(config_map["data"]["docker.io"])
        (pod.binds[env["DOCKER_CONFIG"]] / "config.json").write_text(json.dumps({"auths": {}}))
        for path in [tmp_path / name, *(tmp_path / name).rglob("*")]:
            os.lchown(path, *pod.user)
        result = in_image(rootfs, *args, env=env, pod=pod)
        assert result.code == 0, result.stderr
        assert "acme_from-doc" in os.listdir(pod.binds["/buildpacks"])

    run("pod1")
    assert [s for s, _ in http_server.seen("bp.tgz")] == [200]
    run("pod2")  # a fresh pod: served by the cache repository
    assert [s for s, _ in http_server.seen("bp.tgz")] == [200]
