"""Image documents: telling manifests from indexes, choosing a platform, descriptor sizes, registry index paths."""

from __future__ import annotations

import pytest

from preparer.errors import FetchError
from preparer.fetch.oci.buildpackage import choose_platform, descriptor_size
from preparer.fetch.oci.client import (
    DOCKER_LIST,
    DOCKER_MANIFEST,
    OCI_INDEX,
    OCI_MANIFEST,
    kind_of,
)
from preparer.fetch.oci.index import index_path
from preparer.fetch.streams import is_digest

DIGEST = "sha256:" + "0f" * 32


@pytest.mark.parametrize(
    ("doc", "kind"),
    [
        ({"mediaType": OCI_MANIFEST, "config": {}, "layers": []}, "manifest"),
        ({"mediaType": DOCKER_MANIFEST, "config": {}, "layers": []}, "manifest"),
        ({"schemaVersion": 2, "config": {}, "layers": []}, "manifest"),  # OCI lets mediaType out
        ({"mediaType": OCI_INDEX, "manifests": []}, "index"),
        ({"mediaType": DOCKER_LIST, "manifests": []}, "index"),
        ({"schemaVersion": 2, "manifests": []}, "index"),
    ],
)
def test_kind_of(doc: dict[str, object], kind: str) -> None:
    assert kind_of(doc) == kind


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"schemaVersion": 1, "fsLayers": []}, "Docker schema 1"),
        ({"mediaType": "application/vnd.docker.distribution.manifest.v1+prettyjws"}, "unsupported manifest"),
        ({"schemaVersion": 2}, "unsupported manifest media type 'None'"),
    ],
)
def test_kind_of_refuses_other_documents(doc: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        kind_of(doc)


def entry(os: str, arch: str, variant: str | None = None, digest: str = DIGEST) -> dict[str, object]:
    platform = {"os": os, "architecture": arch} | ({"variant": variant} if variant else {})
    return {"mediaType": OCI_MANIFEST, "digest": digest, "size": 1, "platform": platform}


def test_choose_platform() -> None:
    index = {"manifests": [entry("linux", "amd64"), entry("linux", "arm", "v6"), entry("linux", "arm", "v7"),
                           entry("linux", "arm64", "v8")]}  # fmt: skip
    assert choose_platform(index, "linux/amd64", "x") is index["manifests"][0]
    assert choose_platform(index, "linux/arm/v7", "x") is index["manifests"][2]
    assert choose_platform(index, "linux/arm64", "x") is index["manifests"][3]
    with pytest.raises(FetchError) as info:
        choose_platform(index, "windows/amd64", "reg.io/x:1")
    assert str(info.value) == (
        "failed to pull reg.io/x:1: no image for windows/amd64 in the index "
        "(it has: linux/amd64, linux/arm/v6, linux/arm/v7, linux/arm64/v8)"
    )


@pytest.mark.parametrize(
    ("platform", "chosen"),
    [
        ("linux/arm", 2),  # arm is arm/v7: not the v6 listed first
        ("linux/arm/7", 2),
        ("linux/arm/v6", 1),
        ("linux/arm64", 3),  # arm64 is arm64/v8
        ("linux/arm64/v8", 3),
        ("linux/amd64/v1", 0),  # amd64 with variant v1
        ("linux/amd64", 0),
        ("linux/x86_64", 0),
    ],
)
def test_choose_platform_compares_normalised_names(platform: str, chosen: int) -> None:
    index = {"manifests": [entry("linux", "amd64", "v1"), entry("linux", "arm", "v6"), entry("linux", "arm", "v7"),
                           entry("linux", "arm64")]}  # fmt: skip
    assert choose_platform(index, platform, "x") is index["manifests"][chosen]


@pytest.mark.parametrize("platform", ["linux/amd64/v3", "linux/arm/v5", "windows/arm64"])
def test_choose_platform_refuses_other_variants_and_entries_without_a_platform(platform: str) -> None:
    index = {"manifests": [entry("linux", "amd64", "v2"), entry("linux", "arm", "v7"), entry("", "arm64"),
                           {"mediaType": OCI_MANIFEST, "digest": DIGEST, "size": 1}]}  # fmt: skip
    with pytest.raises(FetchError) as info:
        choose_platform(index, platform, "x")
    assert str(info.value).endswith("(it has: linux/amd64/v2, linux/arm/v7, ?/arm64, ?/?)")


def test_an_index_without_platforms_is_one_image() -> None:
    first = {"mediaType": OCI_MANIFEST, "digest": DIGEST, "size": 1}
    assert choose_platform({"manifests": [first, dict(first)]}, "linux/arm64", "x") is first
    with pytest.raises(FetchError, match="it has: none"):
        choose_platform({"manifests": []}, "linux/amd64", "x")


@pytest.mark.parametrize(
    ("descriptor", "size"), [({"size": 12}, 12), ({"size": 0}, 0), ({"size": -1}, None), ({"size": "12"}, None),
                             ({"size": True}, None), ({}, None)],
)  # fmt: skip
def test_descriptor_size(descriptor: dict[str, object], size: int | None) -> None:
    assert descriptor_size(descriptor) == size


def test_is_digest() -> None:
    assert is_digest(DIGEST)
    for bad in ("sha256:" + "0F" * 32, "sha512:" + "0" * 128, "sha256:../x", None, "latest", DIGEST + "0"):
        assert not is_digest(bad)


@pytest.mark.parametrize(
    ("ns", "name", "path"),
    [("a", "b", "1/a_b"), ("heroku", "go", "2/heroku_go"), ("x", "jvm", "3/jv/x_jvm"),
     ("paketo-buildpacks", "nodejs", "no/de/paketo-buildpacks_nodejs"), ("me", "meta", "me/ta/me_meta")],
)  # fmt: skip
def test_registry_index_paths(ns: str, name: str, path: str) -> None:
    assert index_path(ns, name) == path


def test_allocator_tuning_applies_once_and_respects_explicit_tunables() -> None:
    import os
    import subprocess
    import sys

    if not os.confstr("CS_GNU_LIBC_VERSION"):
        pytest.skip("glibc only")
    code = "from preparer.fetch.oci.memory import tune_allocator as t; print(t(), t())"
    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
    plain = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert plain.stdout.split() == ["True", "False"]
    chosen = env | {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1000000"}
    kept = subprocess.run(
        [sys.executable, "-c", code], env=chosen, capture_output=True, text=True, check=True
    )
    assert kept.stdout.split() == ["False", "False"]
