"""fetch_image, fetch_registry and fetch_cnb called as the pipeline calls them, against the real registry.

Covers the image shapes that pack and other tools write besides umoci's: uncompressed and gzip layers, flattened
packages, absolute entry names, Docker v2 manifests and manifest lists; what a Fetched holds; the cache; and
registries that misbehave (through a front that rewrites some answers of the real registry).
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from preparer.errors import FetchError, InvalidInputsError
from preparer.fetch.base import FetchContext, Fetched
from preparer.fetch.cache import DownloadCache
from preparer.fetch.locator import ImageLocator
from preparer.fetch.oci.client import MAX_MANIFEST
from preparer.fetch.oci.image import fetch_image
from preparer.fetch.oci.layout import fetch_cnb
from preparer.fetch.registries import Registries
from preparer.fetch.sink import Sink
from preparer.fetch.store import Store
from preparer.fetch.transport import Transport
from tests.plugins.registry import (
    DOCKER_MEDIA,
    PASSWORD,
    USER,
    Front,
    Registry,
    TokenRegistry,
    add_index,
    build_package,
    buildpack_layer,
    push,
    push_package,
    to_cnb,
)

CHILD_ORDER = '\n[[order]]\n[[order.group]]\nid = "lib/child"\nversion = "1.0.0"\n'


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def context(
    tmp_path: Path, cache: bool = True, platform: str = "linux/amd64", environ: dict[str, str] | None = None
) -> FetchContext:
    staging = tmp_path / "staging"
    staging.mkdir(exist_ok=True)
    return FetchContext(
        sink=Sink(staging), store=Store(DownloadCache.open(tmp_path / "cache") if cache else None),
        transport=Transport(timeouts=(2.0, 5.0), backoff=0.01),
        registries=Registries(environ=environ or {}, platform=platform),
    )  # fmt: skip


def contents(fetched: Fetched) -> dict[str, list[str]]:
    """``id@version`` -> the files of each staged buildpack."""
    return {
        f"{bp.descriptor.id}@{bp.descriptor.version}": sorted(
            p.relative_to(bp.path).as_posix() for p in bp.path.rglob("*") if p.is_file()
        )
        for bp in fetched.buildpacks
    }


FILES = ["bin/build", "bin/detect", "buildpack.toml"]


@pytest.mark.parametrize("compress", [True, False], ids=["gzip", "uncompressed"])
def test_a_flattened_package_with_absolute_names(tmp_path: Path, registry: Registry, compress: bool) -> None:
    """pack's --flatten: one layer holds the composite and its child; entries are named /cnb/buildpacks/..."""
    layer = buildpack_layer(tmp_path, [("lib/child", "1.0.0", ""), ("lib/meta", "2.0.0", CHILD_ORDER)])
    held = [("lib/child", "1.0.0", ""), ("lib/meta", "2.0.0", CHILD_ORDER)]
    repo = f"lib/flat-{'gz' if compress else 'raw'}"
    digest, _ = push_package(registry, repo, "1", [(layer, held)], ("lib/meta", "2.0.0"), compress=compress)
    fetched = fetch_image(ImageLocator(f"{registry.host}/{repo}:1"), context(tmp_path))
    assert (fetched.top.id, fetched.top.version) == ("lib/meta", "2.0.0")
    assert fetched.buildpacks[0].descriptor == fetched.top  # the top-level buildpack comes first
    assert contents(fetched) == {"lib/meta@2.0.0": ["buildpack.toml"], "lib/child@1.0.0": FILES}
    assert fetched.digest == digest
    assert fetched.source == f"{registry.host}/{repo}:1"
    for bp in fetched.buildpacks:
        assert (bp.path / "buildpack.toml").is_file() and bp.path.is_relative_to(tmp_path / "staging")
        assert bp.path.stat().st_mode & 0o777 == 0o755


def test_docker_v2_manifests_and_manifest_lists(tmp_path: Path, registry: Registry) -> None:
    work = tmp_path / "work"
    work.mkdir()
    build_package(work, [("lib/v2", "1.0.0", "")], ("lib/v2", "1.0.0"), tag="amd64")
    build_package(work, [("lib/v2", "1.1.0", "")], ("lib/v2", "1.1.0"), tag="arm64", architecture="arm64",
                  layout=work / "layout")  # fmt: skip
    add_index(work / "layout", "multi", {"amd64": "amd64", "arm64": "arm64"})
    for tag, extra in (("multi", ["--all"]), ("amd64", [])):
        subprocess.run(
            ["skopeo", "copy", "--dest-tls-verify=false", "--format", "v2s2", *extra,
             f"oci:{work / 'layout'}:{tag}", f"docker://{registry.ref('lib/v2', tag)}"],
            check=True, capture_output=True,
        )  # fmt: skip
    arm = fetch_image(
        ImageLocator(registry.ref("lib/v2", "multi")), context(tmp_path, platform="linux/arm64")
    )
    assert arm.top.version == "1.1.0"
    single = fetch_image(ImageLocator(registry.ref("lib/v2", "amd64")), context(tmp_path))
    assert single.top.version == "1.0.0"
    layer = buildpack_layer(tmp_path, [("lib/v2d", "1.0.0", "")], absolute=False)
    _, manifest = push_package(
        registry,
        "lib/v2d",
        "1",
        [(layer, [("lib/v2d", "1.0.0", "")])],
        ("lib/v2d", "1.0.0"),
        media=DOCKER_MEDIA,
    )
    assert manifest["mediaType"] == DOCKER_MEDIA["manifest"]
    assert contents(fetch_image(ImageLocator(f"{registry.host}/lib/v2d:1"), context(tmp_path))) == {
        "lib/v2d@1.0.0": FILES
    }


def test_without_a_cache_blobs_stay_in_staging(tmp_path: Path, registry: Registry) -> None:
    layer = buildpack_layer(tmp_path, [("lib/nocache", "1.0.0", "")])
    push_package(
        registry, "lib/nocache", "1", [(layer, [("lib/nocache", "1.0.0", "")])], ("lib/nocache", "1.0.0")
    )
    fetched = fetch_image(ImageLocator(f"{registry.host}/lib/nocache:1"), context(tmp_path, cache=False))
    assert contents(fetched) == {"lib/nocache@1.0.0": FILES}
    assert not (tmp_path / "cache").exists()


def test_a_cached_digest_makes_no_request_and_runs_no_credential_helper(
    tmp_path: Path, front: Front, registry: Registry
) -> None:
    layer = buildpack_layer(tmp_path, [("lib/cached", "1.0.0", "")])
    digest, _ = push_package(registry, "lib/cached", "1", [(layer, [("lib/cached", "1.0.0", "")])],
                             ("lib/cached", "1.0.0"))  # fmt: skip
    # A credential helper that leaves a mark each time it runs.
    bin_dir, config = tmp_path / "bin", tmp_path / "docker"
    bin_dir.mkdir()
    config.mkdir()
    helper = bin_dir / "docker-credential-mark"
    helper.write_text(f'#!/bin/sh\necho run >> "{tmp_path}/helper-runs"\nexit 1\n')
    helper.chmod(0o755)
    (config / "config.json").write_text(json.dumps({"credHelpers": {front.host: "mark"}}))
    environ = {"DOCKER_CONFIG": str(config), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    with pytest.raises(FetchError, match="credential helper docker-credential-mark exited with 1"):
        fetch_image(ImageLocator(f"{front.host}/lib/cached@{digest}"), context(tmp_path, environ=environ))
    # The same digest, fetched anonymously once to fill the cache, then again with the failing helper configured.
    fetch_image(ImageLocator(f"{front.host}/lib/cached@{digest}"), context(tmp_path))
    front.requests.clear()
    runs = (tmp_path / "helper-runs").read_text()
    again = fetch_image(ImageLocator(f"{front.host}/lib/cached@{digest}"), context(tmp_path, environ=environ))
    assert contents(again) == {"lib/cached@1.0.0": FILES}
    assert front.requests == []
    assert (tmp_path / "helper-runs").read_text() == runs
    # A tag: exactly one manifest request, the rest from the cache.
    fetch_image(ImageLocator(f"{front.host}/lib/cached:1"), context(tmp_path))
    assert front.requests == ["/v2/lib/cached/manifests/1"]


def test_a_blob_larger_than_its_descriptor_is_refused(
    tmp_path: Path, front: Front, registry: Registry
) -> None:
    layer = buildpack_layer(tmp_path, [("lib/big", "1.0.0", "")])
    _, manifest = push_package(
        registry, "lib/big", "1", [(layer, [("lib/big", "1.0.0", "")])], ("lib/big", "1.0.0")
    )
    descriptor = manifest["layers"][0]  # type: ignore[index]
    blob = gzip.compress(layer, mtime=0)
    front.overrides[f"/v2/lib/big/blobs/{descriptor['digest']}"] = (200, {}, blob + b"\0" * (3 << 20))
    with pytest.raises(FetchError) as info:
        fetch_image(ImageLocator(f"{front.host}/lib/big:1"), context(tmp_path))
    assert str(info.value) == (
        f"failed to pull {front.host}/lib/big:1: blob {descriptor['digest']}: larger than the "
        f"{descriptor['size']} bytes of its descriptor"
    )
    assert not list((tmp_path / "cache" / "blobs" / "sha256").glob(descriptor["digest"][7:]))


def manifest_answer(
    doc: object, media_type: str = "application/vnd.oci.image.manifest.v1+json"
) -> tuple[int, dict[str, str], bytes]:
    return 200, {"Content-Type": media_type}, json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        (manifest_answer({"schemaVersion": 1, "name": "lib/odd", "fsLayers": []}, "application/json"),
         "it is a Docker schema 1 manifest, which is not supported"),
        (manifest_answer({"schemaVersion": 2, "mediaType": "application/vnd.example+json"}),
         "unsupported manifest media type 'application/vnd.example+json'"),
        (manifest_answer({"schemaVersion": 2, "config": {"digest": "sha256:../../x"}, "layers": []}),
         "the manifest names no image config with a valid sha256 digest"),
        (manifest_answer({"schemaVersion": 2, "manifests": [{"digest": "latest",
                                                             "platform": {"os": "linux", "architecture": "amd64"}}]}),
         "the index entry for linux/amd64 has no valid sha256 digest"),
        ((200, {}, b"[" * (MAX_MANIFEST + 1)), f"manifest '1' is larger than {MAX_MANIFEST} bytes"),
        ((200, {}, b"<html>"), "the manifest is not JSON"),
    ],
    ids=["schema1", "media-type", "config-digest", "index-digest", "too-large", "not-json"],
)  # fmt: skip
def test_malformed_manifests(tmp_path: Path, front: Front, answer: tuple, cause: str) -> None:  # type: ignore[type-arg]
    front.overrides["/v2/lib/odd/manifests/1"] = answer
    with pytest.raises(FetchError) as info:
        fetch_image(ImageLocator(f"{front.host}/lib/odd:1"), context(tmp_path))
    assert str(info.value).startswith(f"failed to pull {front.host}/lib/odd:1: {cause}")


@pytest.mark.parametrize(
    ("labels", "cause"),
    [
        ({}, "not a buildpackage: it has no label 'io.buildpacks.buildpack.layers'"),
        ({"io.buildpacks.buildpack.layers": "[]", "io.buildpacks.buildpackage.metadata": "{}"},
         "label 'io.buildpacks.buildpack.layers' is not a JSON object"),
        ({"io.buildpacks.buildpack.layers": '{"lib/x": ["1.0.0"]}', "io.buildpacks.buildpackage.metadata": "{}"},
         "label 'io.buildpacks.buildpack.layers' has a malformed entry for 'lib/x'"),
        ({"io.buildpacks.buildpack.layers": '{"lib/x": {"..": {"layerDiffID": "sha256:00"}}}',
          "io.buildpacks.buildpackage.metadata": "{}"},
         "label 'io.buildpacks.buildpack.layers' has a malformed entry for lib/x@.."),
        ({"io.buildpacks.buildpack.layers": '{"lib/x": {"1.0.0": {"layerDiffID": "sha256:00"}}}',
          "io.buildpacks.buildpackage.metadata": "{}"},
         "the layer of lib/x@1.0.0 (sha256:00) is not in the image"),
    ],
    ids=["no-label", "not-object", "versions-not-object", "unsafe-version", "unknown-layer"],
)  # fmt: skip
def test_malformed_buildpackage_labels(tmp_path: Path, registry: Registry, labels: dict[str, str],
                                       cause: str) -> None:  # fmt: skip
    from tests.plugins.registry import put_manifest, upload_blob

    config = json.dumps({"config": {"Labels": labels}, "rootfs": {"diff_ids": []}}).encode()
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": upload_blob(registry, "lib/labels", config), "size": len(config)},
                "layers": []}  # fmt: skip
    put_manifest(registry, "lib/labels", "1", json.dumps(manifest).encode(), str(manifest["mediaType"]))
    with pytest.raises(FetchError) as info:
        fetch_image(ImageLocator(f"{registry.host}/lib/labels:1"), context(tmp_path))
    assert str(info.value) == f"failed to read buildpackage {registry.host}/lib/labels:1: {cause}"


def test_a_layer_whose_buildpack_differs_from_its_label(tmp_path: Path, registry: Registry) -> None:
    layer = buildpack_layer(tmp_path, [("lib/other", "1.0.0", "")])
    push_package(registry, "lib/liar", "1", [(layer, [("lib/liar", "1.0.0", "")])], ("lib/liar", "1.0.0"))
    with pytest.raises(
        FetchError, match=re.escape("the layer of lib/liar@1.0.0 has no buildpack.toml for it")
    ):
        fetch_image(ImageLocator(f"{registry.host}/lib/liar:1"), context(tmp_path))


def test_reference_errors(tmp_path: Path, registry: Registry) -> None:
    with pytest.raises(InvalidInputsError) as bad:
        fetch_image(ImageLocator("Not/A/Reference"), context(tmp_path))
    assert bad.value.exit_code == 3
    with pytest.raises(FetchError) as missing:
        fetch_image(ImageLocator(f"{registry.host}/lib/none@sha256:{'0' * 64}"), context(tmp_path))
    assert str(missing.value) == (
        f"failed to pull {registry.host}/lib/none@sha256:{'0' * 64}: manifest 'sha256:{'0' * 64}' not found in "
        f"{registry.host}/lib/none"
    )


def test_localhost_is_a_loopback_registry(tmp_path: Path, registry: Registry) -> None:
    layer = buildpack_layer(tmp_path, [("lib/local", "1.0.0", "")])
    push_package(registry, "lib/local", "1", [(layer, [("lib/local", "1.0.0", "")])], ("lib/local", "1.0.0"))
    port = registry.host.rsplit(":", 1)[1]
    fetched = fetch_image(ImageLocator(f"localhost:{port}/lib/local:1"), context(tmp_path))
    assert fetched.source == f"localhost:{port}/lib/local:1"


def test_wrong_credentials_from_the_docker_config(tmp_path: Path, auth_registry: Registry) -> None:
    config = tmp_path / "docker"
    config.mkdir()
    auth = base64.b64encode(f"{USER}:not-it".encode()).decode()
    (config / "config.json").write_text(json.dumps({"auths": {auth_registry.host: {"auth": auth}}}))
    with pytest.raises(FetchError) as info:
        fetch_image(ImageLocator(f"{auth_registry.host}/lib/private:1"),
                    context(tmp_path, environ={"DOCKER_CONFIG": str(config)}))  # fmt: skip
    assert str(info.value) == (
        f"failed to pull {auth_registry.host}/lib/private: unauthorized with credentials from docker config "
        f"{config / 'config.json'} (UNAUTHORIZED: authentication required)"
    )
    assert "not-it" not in str(info.value) and auth not in str(info.value)


def test_cnb_files_with_an_index_of_two_platforms(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    build_package(work, [("lib/cnb", "1.0.0", "")], ("lib/cnb", "1.0.0"), tag="amd64")
    build_package(work, [("lib/cnb", "1.1.0", "")], ("lib/cnb", "1.1.0"), tag="arm64", architecture="arm64",
                  layout=work / "layout")  # fmt: skip
    add_index(work / "layout", "multi", {"amd64": "amd64", "arm64": "arm64"})
    cnb = to_cnb(work / "layout", "amd64", tmp_path / "one.cnb")
    one = fetch_cnb(cnb, source="one.cnb", digest=None, ctx=context(tmp_path))
    assert one.top.version == "1.0.0" and one.digest is not None and one.source == "one.cnb"
    # The layout as a tar whose index.json names one image index of two platforms.
    index_json = work / "layout" / "index.json"
    index = json.loads(index_json.read_text())
    index["manifests"] = [m for m in index["manifests"] if m["mediaType"].endswith("index.v1+json")]
    index_json.write_text(json.dumps(index))
    subprocess.run(["tar", "-cf", str(tmp_path / "multi.cnb"), "-C", str(work / "layout"), "."], check=True)
    arm = fetch_cnb(tmp_path / "multi.cnb", source="multi.cnb", digest=None,
                    ctx=context(tmp_path, platform="linux/arm64"))  # fmt: skip
    assert arm.top.version == "1.1.0"


def test_a_corrupt_cnb_blob(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    package = build_package(work, [("lib/bad", "1.0.0", "")], ("lib/bad", "1.0.0"), payload=b"x" * 4000)
    layer = package.manifest()["layers"][0]["digest"]
    path = package.layout / "blobs" / "sha256" / layer.removeprefix("sha256:")
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF
    path.write_bytes(bytes(data))
    subprocess.run(["tar", "-cf", str(tmp_path / "bad.cnb"), "-C", str(package.layout), "."], check=True)
    with pytest.raises(FetchError, match=f"blob {layer} does not match its digest"):
        fetch_cnb(tmp_path / "bad.cnb", source="bad.cnb", digest=None, ctx=context(tmp_path))


def test_push_helper_sanity(registry: Registry, tmp_path: Path) -> None:
    """The umoci path and the raw path agree on what a buildpackage is."""
    work = tmp_path / "w"
    work.mkdir()
    package = build_package(work, [("lib/sane", "1.0.0", "")], ("lib/sane", "1.0.0"))
    digest = push(package.layout, "latest", registry.ref("lib/sane"))
    fetched = fetch_image(ImageLocator(f"{registry.host}/lib/sane@{digest}"), context(tmp_path))
    assert fetched.digest == digest and contents(fetched) == {"lib/sane@1.0.0": FILES}


def test_a_bearer_token_from_cnb_registry_auth_is_sent_as_it_is(
    tmp_path: Path, token_registry: TokenRegistry, registry: Registry
) -> None:
    import urllib.request

    layer = buildpack_layer(tmp_path, [("lib/bearer", "1.0.0", "")])
    push_package(
        registry, "lib/bearer", "1", [(layer, [("lib/bearer", "1.0.0", "")])], ("lib/bearer", "1.0.0")
    )
    request = urllib.request.Request(f"http://{token_registry.host}/token",
                                     headers={"Authorization": basic(USER, PASSWORD)})  # fmt: skip
    with urllib.request.urlopen(request) as response:
        token = json.loads(response.read())["token"]
    issued = len(token_registry.tokens_issued)
    environ = {"CNB_REGISTRY_AUTH": json.dumps({token_registry.host: f"Bearer {token}"})}
    fetched = fetch_image(
        ImageLocator(f"{token_registry.host}/lib/bearer:1"), context(tmp_path, environ=environ)
    )
    assert contents(fetched) == {"lib/bearer@1.0.0": FILES}
    assert len(token_registry.tokens_issued) == issued  # no challenge was answered: the header was enough
