"""Buildpackages from a real registry (Debian's docker-registry on 127.0.0.1), .cnb files and the registry index."""

from __future__ import annotations

import base64
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.golden import Layout, listing
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.plugins.registry import (
    PASSWORD,
    USER,
    Package,
    Registry,
    TokenRegistry,
    add_index,
    build_package,
    push,
    to_cnb,
)
from tests.projects import group

CHILD_ORDER = '\n[[order]]\n[[order.group]]\nid = "me/child"\nversion = "1.0.0"\n'


@pytest.fixture(scope="session")
def composite(tmp_path_factory: pytest.TempPathFactory, registry: Registry) -> tuple[Package, str]:
    """A composite buildpackage (me/meta with child me/child) pushed as me/meta:1; returns its digest too."""
    work = tmp_path_factory.mktemp("composite")
    package = build_package(
        work, [("me/child", "1.0.0", ""), ("me/meta", "2.0.0", CHILD_ORDER)], ("me/meta", "2.0.0")
    )
    return package, push(package.layout, "latest", registry.ref("me/meta", "1"))


def order_ids(layout: Layout) -> list[str]:
    text = (layout.layers / "order.toml").read_text()
    return [line.split('"')[1] for line in text.splitlines() if line.strip().startswith("id =")]


def test_tag_and_digest_references(preparer: Callable[..., Result], layout: Layout, registry: Registry,
                                   composite: tuple[Package, str]) -> None:  # fmt: skip
    _, digest = composite
    by_tag = preparer(project=group(f"docker://{registry.ref('me/meta', '1')}"))
    assert by_tag.code == 0, by_tag.stderr
    assert (layout.buildpacks / "me_child" / "1.0.0" / "bin" / "build").is_file()
    assert (layout.buildpacks / "me_meta" / "2.0.0" / "buildpack.toml").is_file()
    assert order_ids(layout)[0] == "me/meta"  # the package's top-level buildpack, not its child
    shutil.rmtree(layout.buildpacks / "me_child")
    shutil.rmtree(layout.buildpacks / "me_meta")
    bare = preparer(project=group(f"{registry.host}/me/meta@{digest}"))
    assert bare.code == 0, bare.stderr
    assert (layout.buildpacks / "me_child" / "1.0.0" / "buildpack.toml").is_file()


def test_a_cached_digest_reference_needs_no_network(preparer: Callable[..., Result], layout: Layout,
                                                    registry: Registry, composite: tuple[Package, str]) -> None:  # fmt: skip
    _, digest = composite
    project = group(f"docker://{registry.host}/me/meta@{digest}")
    assert preparer(project=project).code == 0
    shutil.rmtree(layout.buildpacks / "me_meta")
    shutil.rmtree(layout.buildpacks / "me_child")
    # Every request now goes to a proxy that does not exist: the run must not make one.
    offline = {"http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9", "no_proxy": ""}
    again = preparer(project=project, env=offline)
    assert again.code == 0, again.stderr
    assert (layout.buildpacks / "me_meta" / "2.0.0" / "buildpack.toml").is_file()
    by_tag = preparer(project=group(f"docker://{registry.ref('me/meta', '1')}"), env=offline)
    assert by_tag.code == 1  # a tag must be asked for: one manifest request


def test_an_index_with_two_platforms(preparer: Callable[..., Result], layout: Layout, registry: Registry,
                                     tmp_path: Path) -> None:  # fmt: skip
    work = tmp_path / "multi"
    work.mkdir()
    build_package(work, [("me/multi", "1.0.0", "")], ("me/multi", "1.0.0"), tag="amd64", architecture="amd64")
    build_package(work, [("me/multi", "1.1.0", "")], ("me/multi", "1.1.0"), tag="arm64", architecture="arm64",
                  layout=work / "layout")  # fmt: skip
    add_index(work / "layout", "multi", {"amd64": "amd64", "arm64": "arm64"})
    push(work / "layout", "multi", registry.ref("me/multi", "multi"), all_images=True)
    uri = f"docker://{registry.ref('me/multi', 'multi')}"
    amd = preparer(project=group(uri), env={"CNB_PREPARER_PLATFORM": "linux/amd64"})
    assert amd.code == 0, amd.stderr
    assert listing(layout.buildpacks / "me_multi") == ["1.0.0/", "1.0.0/bin/", "1.0.0/bin/build", "1.0.0/bin/detect",
                                                       "1.0.0/buildpack.toml"]  # fmt: skip
    arm = preparer(project=group(uri), env={"CNB_PREPARER_PLATFORM": "linux/arm64"})
    assert arm.code == 0, arm.stderr
    assert (layout.buildpacks / "me_multi" / "1.1.0" / "buildpack.toml").is_file()
    none = preparer(project=group(uri), env={"CNB_PREPARER_PLATFORM": "linux/s390x"})
    assert none.code == 1
    assert (
        "no image for linux/s390x (CNB_PREPARER_PLATFORM) in the index (it has: linux/amd64, linux/arm64)"
        in none.stderr
    )


def test_a_corrupted_blob_installs_nothing(preparer: Callable[..., Result], layout: Layout, registry: Registry,
                                           tmp_path: Path) -> None:  # fmt: skip
    work = tmp_path / "bad"
    work.mkdir()
    package = build_package(work, [("me/bad", "1.0.0", "")], ("me/bad", "1.0.0"), payload=b"p" * 5000)
    push(package.layout, "latest", registry.ref("me/bad"))
    layer = package.manifest()["layers"][0]["digest"]
    blob = registry.blob_file(layer)
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    before = listing(layout.buildpacks)
    result = preparer(
        project=group(f"docker://{registry.ref('me/bad')}"), env={"CNB_PREPARER_HTTP_TIMEOUT": "2"}
    )
    assert result.code == 1
    assert f"blob {layer}: digest mismatch" in result.stderr
    assert listing(layout.buildpacks) == before
    assert not (layout.layers / "order.toml").exists()


def test_a_missing_image(preparer: Callable[..., Result], registry: Registry) -> None:
    result = preparer(project=group(f"docker://{registry.ref('me/nothing-here')}"))
    assert result.code == 1
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to pull {registry.ref('me/nothing-here')}: manifest 'latest' not found in "
        f"{registry.host}/me/nothing-here"
    )


@pytest.fixture(scope="session")
def private(tmp_path_factory: pytest.TempPathFactory, auth_registry: Registry) -> str:
    work = tmp_path_factory.mktemp("private")
    package = build_package(work, [("me/private", "1.0.0", "")], ("me/private", "1.0.0"))
    push(package.layout, "latest", auth_registry.ref("me/private"), creds=(USER, PASSWORD))
    return f"docker://{auth_registry.ref('me/private')}"


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_credentials_in_the_lifecycle_order(preparer: Callable[..., Result], layout: Layout, tmp_path: Path,
                                            auth_registry: Registry, private: str) -> None:  # fmt: skip
    project = group(private)
    anonymous = preparer(project=project)
    assert anonymous.code == 1
    assert (
        anonymous.stderr.splitlines()[-1]
        == f"ERROR: failed to pull {auth_registry.host}/me/private: unauthorized anonymously (UNAUTHORIZED: "
        f"authentication required): no credentials for {auth_registry.host} in CNB_REGISTRY_AUTH (not set) or "
        f"{tmp_path / '.docker' / 'config.json'} ($HOME/.docker/config.json: does not exist)"
    )  # the registry's own words, and where credentials are read

    wrong = preparer(
        project=project, env={"CNB_REGISTRY_AUTH": json.dumps({auth_registry.host: basic(USER, "nope")})}
    )
    assert wrong.code == 1
    assert "unauthorized with credentials from CNB_REGISTRY_AUTH" in wrong.stderr

    env_auth = {"CNB_REGISTRY_AUTH": json.dumps({f"http://{auth_registry.host}/v2": basic(USER, PASSWORD)})}
    assert preparer("-log-level", "debug", project=project, env=env_auth).code == 0
    shutil.rmtree(layout.buildpacks / "me_private")

    config_dir = tmp_path / "docker-config"
    config_dir.mkdir()
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (config_dir / "config.json").write_text(json.dumps({"auths": {auth_registry.host: {"auth": auth}}}))
    assert (
        preparer(
            project=project, env={"DOCKER_CONFIG": str(config_dir), "CNB_PREPARER_HTTP_TIMEOUT": "5"}
        ).code
        == 0
    )
    shutil.rmtree(layout.buildpacks / "me_private")

    # CNB_REGISTRY_AUTH comes first: a wrong one there is not rescued by a right docker config.
    both = env_auth | {"CNB_REGISTRY_AUTH": wrong_auth(auth_registry), "DOCKER_CONFIG": str(config_dir)}
    assert preparer(project=project, env=both).code == 1


def wrong_auth(registry: Registry) -> str:
    return json.dumps({registry.host: basic(USER, "nope")})


def test_credential_helpers(preparer: Callable[..., Result], layout: Layout, tmp_path: Path,
                            auth_registry: Registry, private: str) -> None:  # fmt: skip
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-testing"
    helper.write_text(f'#!/bin/sh\nread server\necho \'{{"Username":"{USER}","Secret":"{PASSWORD}"}}\'\n')
    helper.chmod(0o755)
    config_dir = tmp_path / "docker-config"
    config_dir.mkdir()
    (config_dir / "config.json").write_text(json.dumps({"credHelpers": {auth_registry.host: "testing"}}))
    env = {"DOCKER_CONFIG": str(config_dir), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result = preparer(project=group(private), env=env)
    assert result.code == 0, result.stderr
    (config_dir / "config.json").write_text(json.dumps({"credsStore": "testing"}))
    shutil.rmtree(layout.buildpacks / "me_private")
    assert preparer(project=group(private), env=env).code == 0


def test_no_credential_reaches_output(preparer: Callable[..., Result], tmp_path: Path, auth_registry: Registry,
                                      private: str) -> None:  # fmt: skip
    token = basic(USER, PASSWORD)
    for env in ({"CNB_REGISTRY_AUTH": json.dumps({auth_registry.host: token})},
                {"CNB_REGISTRY_AUTH": wrong_auth(auth_registry)}):  # fmt: skip
        result = preparer("-log-level", "debug", "-prepare-report", str(tmp_path / "r.toml"), project=group(private),
                          env=env)  # fmt: skip
        everything = result.stdout + result.stderr + (tmp_path / "r.toml").read_text()
        for secret in (PASSWORD, token.split()[1], basic(USER, "nope").split()[1]):
            assert secret not in everything


def test_cnb_files_from_a_path_and_over_http(preparer: Callable[..., Result], layout: Layout,
                                             composite: tuple[Package, str], http_server: FileServer) -> None:  # fmt: skip
    package, _ = composite
    cnb = to_cnb(package.layout, "latest", layout.app / "meta.cnb")
    assert preparer(project=group("meta.cnb")).code == 0
    assert (layout.buildpacks / "me_child" / "1.0.0" / "buildpack.toml").is_file()
    assert order_ids(layout)[0] == "me/meta"
    shutil.rmtree(layout.buildpacks / "me_child")
    shutil.rmtree(layout.buildpacks / "me_meta")
    shutil.copy(cnb, http_server.root / "meta.cnb")
    result = preparer(project=group(http_server.url("meta.cnb")))
    assert result.code == 0, result.stderr
    assert (layout.buildpacks / "me_meta" / "2.0.0" / "buildpack.toml").is_file()


def test_buildpack_registry_index(preparer: Callable[..., Result], layout: Layout, registry: Registry,
                                  composite: tuple[Package, str], http_server: FileServer) -> None:  # fmt: skip
    _, digest = composite
    index_file = http_server.root / "index" / "me" / "ta" / "me_meta"
    index_file.parent.mkdir(parents=True)
    entries = [
        {
            "ns": "me",
            "name": "meta",
            "version": "2.0.0",
            "yanked": False,
            "addr": f"{registry.host}/me/meta@{digest}",
        },
        {
            "ns": "me",
            "name": "meta",
            "version": "3.0.0",
            "yanked": True,
            "addr": f"{registry.host}/me/gone@{digest}",
        },
    ]
    index_file.write_text("\n".join(json.dumps(e, separators=(",", ":")) for e in entries) + "\n")
    flags = ("-buildpack-registry-index", http_server.url("index"))
    latest = preparer(*flags, project=group("urn:cnb:registry:me/meta"))
    assert latest.code == 0, latest.stderr
    assert order_ids(layout)[0] == "me/meta"
    yanked = preparer(*flags, project=group("urn:cnb:registry:me/meta@3.0.0"))
    assert (
        yanked.code == 1
        and "version 3.0.0 of me/meta is not in the registry (or was yanked)" in yanked.stderr
    )
    missing = preparer(*flags, project=group("urn:cnb:registry:me/nothing"))
    assert missing.code == 1 and "no buildpack me/nothing in the registry" in missing.stderr


def test_the_bearer_token_challenge_flow(preparer: Callable[..., Result], layout: Layout, tmp_path: Path,
                                         token_registry: TokenRegistry, composite: tuple[Package, str]) -> None:  # fmt: skip
    uri = f"docker://{token_registry.host}/me/meta:1"
    anonymous = preparer(project=group(uri))
    assert anonymous.code == 1 and "unauthorized anonymously" in anonymous.stderr
    config_dir = tmp_path / "docker-config"
    config_dir.mkdir()
    auth = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (config_dir / "config.json").write_text(
        json.dumps({"auths": {f"http://{token_registry.host}": {"auth": auth}}})
    )
    result = preparer("-log-level", "debug", project=group(uri), env={"DOCKER_CONFIG": str(config_dir)})
    assert result.code == 0, result.stderr
    assert (layout.buildpacks / "me_meta" / "2.0.0" / "buildpack.toml").is_file()
    assert token_registry.tokens_issued  # the token came from the challenge's realm
    for token in token_registry.tokens_issued:
        assert token not in result.stdout + result.stderr


def test_concurrent_preparers_share_one_cache(
    tmp_path: Path, registry: Registry, composite: tuple[Package, str]
) -> None:
    """Four preparers at once, one download cache: every run installs the package, and the cache ends up
    holding each blob once, with no partial download left behind."""
    import subprocess
    import sys

    from tests.golden import BUILDER
    from tests.plugins.cli import base_env

    package, digest = composite
    cache = tmp_path / "shared-cache"
    runs = []
    for i in range(4):
        build = Layout(tmp_path / f"build{i}")
        shutil.copytree(BUILDER, build.root / "cnb")
        build.app.mkdir(parents=True)
        build.layers.mkdir()
        uri = (
            f"docker://{registry.host}/me/meta@{digest}"
            if i % 2
            else f"docker://{registry.ref('me/meta', '1')}"
        )
        (build.app / "project.toml").write_text(group(uri))
        command = [sys.executable, "-m", "preparer", *build.flags(), "-download-cache", str(cache)]
        process = subprocess.Popen(
            command, env=base_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        runs.append((build, process))
    for build, process in runs:
        _, stderr = process.communicate(timeout=120)
        assert process.returncode == 0, stderr.decode()
        assert order_ids(build)[0] == "me/meta"
        assert (build.buildpacks / "me_child" / "1.0.0" / "bin" / "build").is_file()
    manifest = package.manifest()
    expected = {digest, manifest["config"]["digest"], *(layer["digest"] for layer in manifest["layers"])}
    assert {"sha256:" + p.name for p in (cache / "blobs" / "sha256").iterdir()} == expected
    assert list((cache / "tmp").iterdir()) == []
