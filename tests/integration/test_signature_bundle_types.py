"""Sigstore bundles are found under every media type producers give them as ``artifactType`` (issue 48).

cosign v3 pushes ``application/vnd.dev.sigstore.bundle.v0.3+json``; GitHub's attest action and older clients push
``application/vnd.dev.sigstore.bundle+json;version=0.1``, ``...0.2`` or ``...0.3``. A referrers query filtered on
one of them misses the others, so the preparer asks unfiltered and picks the bundles itself. Real CLI and the
suite's registry (Debian's docker-registry, which has no referrers API: the referrers tag schema is read), and the
HTTP front of tests/plugins/registry.py playing a registry with the referrers API (it serves only the unfiltered
query, so a filtered one would find nothing).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tests.plugins.registry import Front, Registry, put_manifest, upload_blob
from tests.plugins.signing import OCI_INDEX, OCI_MANIFEST, Key, bundle, statement
from tests.signed import Image, Rule, Scene

TYPES = (
    "application/vnd.dev.sigstore.bundle+json;version=0.1",
    "application/vnd.dev.sigstore.bundle+json;version=0.2",
    "application/vnd.dev.sigstore.bundle+json;version=0.3",
    "application/vnd.dev.sigstore.bundle.v0.3+json",
)


def attach_as(image: Image, data: bytes, media_type: str) -> dict[str, Any]:
    """Push ``data`` (a bundle) as a referrer of ``image`` whose ``artifactType`` and layer are ``media_type``,
    as GitHub's attest action pushes one; its index entry."""
    registry, repository, digest = image.registry, image.repository, image.digest
    manifest = {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": media_type,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "size": 2,
                   "digest": upload_blob(registry, repository, b"{}")},
        "layers": [{"mediaType": media_type, "size": len(data), "digest": upload_blob(registry, repository, data)}],
        "subject": {"mediaType": OCI_MANIFEST, "digest": digest, "size": 0},
        "annotations": {"dev.sigstore.bundle.content": "dsse-envelope",
                        "dev.sigstore.bundle.predicateType": "https://sigstore.dev/cosign/sign/v1"},
    }  # fmt: skip
    body = json.dumps(manifest).encode()
    referrer = "sha256:" + hashlib.sha256(body).hexdigest()
    put_manifest(registry, repository, referrer, body, OCI_MANIFEST)
    return {"mediaType": OCI_MANIFEST, "digest": referrer, "size": len(body), "artifactType": media_type,
            "annotations": manifest["annotations"]}  # fmt: skip


def signed_bundle(image: Image, key: Key, media_type: str) -> bytes:
    doc = json.loads(bundle(key, statement(image.name, image.digest)))
    doc["mediaType"] = media_type  # the bundle says what it is as its referrer does
    return json.dumps(doc).encode()


@pytest.mark.parametrize("media_type", TYPES)
def test_a_bundle_under_each_media_type_is_found_through_the_referrers_tag_schema(
    scene: Scene, registry: Registry, key: Key, media_type: str
) -> None:
    image = scene.image()
    entry = attach_as(image, signed_bundle(image, key, media_type), media_type)
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [entry]}
    put_manifest(
        registry, image.repository, image.digest.replace(":", "-"), json.dumps(index).encode(), OCI_INDEX
    )
    result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.tagged)
    assert result.code == 0, result.stderr
    assert scene.installed()


@pytest.mark.parametrize("media_type", TYPES)
def test_a_bundle_under_each_media_type_is_found_through_the_referrers_api(
    scene: Scene, front: Front, key: Key, media_type: str
) -> None:
    image = scene.image()
    repository, digest = image.repository, image.digest
    entry = attach_as(image, signed_bundle(image, key, media_type), media_type)
    # Another referrer first (an SBOM): the unfiltered list holds every type, the bundle is picked from it.
    sbom: dict[str, Any] = {"mediaType": OCI_MANIFEST, "digest": "sha256:" + "5" * 64, "size": 100,
            "artifactType": "application/spdx+json"}  # fmt: skip
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [sbom, entry]}
    api = f"/v2/{repository}/referrers/{digest}"
    front.overrides[api] = (200, {"Content-Type": OCI_INDEX}, json.dumps(index).encode())
    result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.via(front.host).pinned)
    assert result.code == 0, result.stderr
    assert scene.installed()
    assert api in front.requests  # asked once, without a filter
    assert not any(sbom["digest"] in p for p in front.requests)  # what is no bundle is never fetched
