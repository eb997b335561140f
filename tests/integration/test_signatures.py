"""``[[image.signed-by]]``: images verified against the platform's keys before any of their layers is pulled.

Real CLI, the suite's real registry (Debian's docker-registry 2.8, which stores referrers but has no referrers API:
bundles are found there through the referrers tag schema), and the HTTP front of tests/plugins/registry.py where
the referrers API itself is under test (the front serves that endpoint and passes everything else through) or where
what the preparer asks for must be seen. Images are signed as cosign signs them (tests/plugins/signing.py).
"""

from __future__ import annotations

import json
import shutil
import tomllib
import uuid
from pathlib import Path

import pytest

from tests.plugins.registry import Front, Registry, put_manifest, started
from tests.plugins.signing import (
    OCI_INDEX,
    Key,
    attach_bundle,
    bundle,
    make_key,
    sign_tag_scheme,
    simple_signing,
    statement,
)
from tests.projects import group
from tests.signed import Form, Image, Rule, Scene, push_image, write_policy

# Signed


@pytest.mark.parametrize("form", ["sig", "bundle"], ids=["tag scheme", "bundle, referrers tag schema"])
def test_a_signed_image_is_installed_and_its_signature_reported(
    scene: Scene, tmp_path: Path, registry: Registry, key: Key, form: Form
) -> None:
    image = scene.image()
    image.sign(key, form)
    pol = scene.policy(Rule([f"{registry.host}/signed/*"], keys=[key.public]))
    report = tmp_path / "report.toml"
    result = scene.run(pol, image.tagged, "-prepare-report", str(report))
    assert result.code == 0, result.stderr
    assert scene.installed()
    signatures = tomllib.loads(report.read_text())["signature"]
    fmt = "cosign" if form == "sig" else "bundle"
    assert signatures == [{"entry": "io.buildpacks.group[0]", "image": f"{registry.host}/{image.repository}:latest",
                           "digest": image.digest, "format": fmt, "key": key.fingerprint}]  # fmt: skip


def test_a_bundle_is_found_through_the_referrers_api(
    scene: Scene, registry: Registry, front: Front, key: Key
) -> None:
    image = scene.image()
    repository, digest = image.repository, image.digest
    # Pushed as a referrer only: no referrers tag schema index; the front serves the referrers API.
    payload = statement(image.name, digest)
    _, entry = attach_bundle(registry, repository, digest, bundle(key, payload), tag_schema=False)
    api = f"/v2/{repository}/referrers/{digest}"  # unfiltered: bundles come under four artifact types
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [entry]}).encode()
    front.overrides[api] = (200, {"Content-Type": OCI_INDEX}, index)
    pol = scene.policy(Rule([f"{front.host}/*"], keys=[key.public]))
    result = scene.run(pol, image.via(front.host).pinned)
    assert result.code == 0, result.stderr
    assert scene.installed()
    assert api in front.requests
    assert (
        f"/v2/{repository}/manifests/{digest.replace(':', '-')}" not in front.requests
    )  # no tag schema asked


def test_without_the_referrers_api_nor_a_tag_an_image_is_unsigned(
    scene: Scene, front: Front, key: Key
) -> None:
    image = scene.image()
    image.sign(key, "bundle", tag_schema=False)  # stored, never listed
    result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.via(front.host).pinned)
    assert result.code == 1
    assert "no signature found" in result.stderr


def test_a_second_valid_signature_beside_an_invalid_one_is_enough(
    scene: Scene, tmp_path: Path, registry: Registry, key: Key
) -> None:
    image = scene.image()
    other = make_key(tmp_path / "other")
    payload = simple_signing(image.name, image.digest)
    sign_tag_scheme(
        registry,
        image.repository,
        image.digest,
        [(payload, other.sign(payload)), (payload, key.sign(payload))],
    )
    result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.pinned)
    assert result.code == 0, result.stderr
    assert scene.installed()


@pytest.mark.parametrize("curve", ["p384", "ed25519"])
def test_p384_and_ed25519_keys_verify(scene: Scene, tmp_path: Path, curve: str) -> None:
    key = make_key(tmp_path / "keys", curve=curve)
    image = scene.image()
    image.sign(key, "bundle")
    result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.pinned)
    assert result.code == 0, result.stderr


# Refused: nothing installed, no layer asked for


def layers_asked(front: Front, repository: str) -> list[str]:
    return [p for p in front.requests if p.startswith(f"/v2/{repository}/blobs/")]


def test_an_unsigned_image_is_refused_before_its_config_or_layers_are_asked_for(
    scene: Scene, front: Front, key: Key
) -> None:
    image = scene.image()
    repository, digest = image.repository, image.digest
    pol = scene.policy(Rule([f"{front.host}/signed/*"], keys=[key.public]))
    result = scene.run(pol, image.via(front.host).tagged)
    assert result.code == 1
    hex_ = digest.removeprefix("sha256:")
    assert result.stderr.strip().splitlines()[-1] == (
        f"ERROR: failed to fetch {front.host}/{repository}:latest: not signed by a key the platform policy trusts "
        f"(image.signed-by, line 3 of {pol}): no signature found; looked for signatures of {digest} at the tag "
        f"sha256-{hex_}.sig and among the referrers of {digest}"
    )
    assert not scene.installed()
    assert layers_asked(front, repository) == []  # neither config nor layer
    assert f"/v2/{repository}/manifests/latest" in front.requests


def test_the_registry_log_shows_no_layer_pulled_for_a_refused_image(
    scene: Scene, tmp_path: Path, key: Key
) -> None:
    with started(tmp_path / "logged", access_log=True) as logged:
        image = push_image(logged, tmp_path)
        other = make_key(tmp_path / "other")
        image.sign(other, "sig")
        log = tmp_path / "logged" / "access.log"
        before = log.read_text().count("\n")
        result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.pinned)
        asked = log.read_text().splitlines()[before:]
    assert result.code == 1
    assert any("sha256-" in line and ".sig" in line for line in asked)
    blobs = [line for line in asked if "/blobs/" in line and '"GET' in line]
    # The signature's payload is a blob; the image's config and layer are not asked for.
    assert len(blobs) == 1, blobs


def test_a_signature_by_another_key_names_the_rules_keys(scene: Scene, tmp_path: Path, key: Key) -> None:
    image = scene.image()
    image.sign(make_key(tmp_path / "other"), "sig")
    result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.pinned)
    assert result.code == 1
    assert f"1 signature found, none verifies with the rule's key (sha256:{key.fingerprint})" in result.stderr
    assert not scene.installed()


def test_a_tampered_payload_does_not_verify(scene: Scene, registry: Registry, key: Key) -> None:
    image = scene.image()
    payload = simple_signing(image.name, image.digest)
    signature = key.sign(payload)
    tampered = payload.replace(b'"optional":null', b'"optional":{"by":"mallory"}')
    sign_tag_scheme(registry, image.repository, image.digest, [(tampered, signature)])
    result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.pinned)
    assert result.code == 1
    assert "none verifies with the rule's key" in result.stderr


@pytest.mark.parametrize("form", ["sig", "bundle"], ids=["tag scheme", "bundle"])
def test_a_signature_for_another_digest_names_that_digest(scene: Scene, key: Key, form: Form) -> None:
    image = scene.image()
    elsewhere = scene.image().digest
    image.sign(key, form, signed_digest=elsewhere)  # a signature copied from another image
    result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.pinned)
    assert result.code == 1
    assert (
        f"the signature by key sha256:{key.fingerprint} is for {elsewhere}, not for {image.digest}"
        in result.stderr
    )


def test_a_real_cosign_signature_moved_to_another_image_names_the_digest_it_is_for(
    scene: Scene, tmp_path: Path, registry: Registry
) -> None:
    real = Path(__file__).resolve().parents[1] / "data" / "cosign-keyed"
    (tmp_path / "keys").mkdir()
    shutil.copy(real / "cosign.pub", tmp_path / "keys" / "cosign.pub")
    image = scene.image()
    payload, signature = (real / "payload.json").read_bytes(), (real / "signature.b64").read_text().strip()
    sign_tag_scheme(registry, image.repository, image.digest, [(payload, signature)])
    pol = scene.policy(Rule(["*"], keys=[tmp_path / "keys" / "cosign.pub"]))
    result = scene.run(pol, image.pinned)
    assert result.code == 1
    assert (
        "is for sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b, not for"
        in result.stderr
    )


def test_an_attestation_of_another_kind_is_no_signature(scene: Scene, registry: Registry, key: Key) -> None:
    image = scene.image()
    payload = statement(image.name, image.digest, "https://slsa.dev/provenance/v1")
    # Listed without the predicate annotation, so that it is fetched and judged by its statement.
    attach_bundle(registry, image.repository, image.digest, bundle(key, payload), predicate="")
    result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.pinned)
    assert result.code == 1
    assert "is no image signature: it is an attestation of https://slsa.dev/provenance/v1" in result.stderr


# Index and manifest digests


@pytest.mark.parametrize("signed", ["index", "manifest"])
def test_a_signature_over_the_index_or_the_platform_manifest_is_accepted(
    scene: Scene, tmp_path: Path, registry: Registry, key: Key, signed: str
) -> None:
    image = scene.image()
    manifest_size = 0
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": image.digest, "size": manifest_size,
         "platform": {"os": "linux", "architecture": "amd64"}}]}  # fmt: skip
    index_digest = put_manifest(registry, image.repository, "multi", json.dumps(index).encode(), OCI_INDEX)
    through = Image(registry, image.repository, index_digest)  # the image pulled through its index
    (through if signed == "index" else image).sign(key, "sig")
    report = tmp_path / "report.toml"
    pol = scene.policy(Rule(["*"], keys=[key.public]))
    result = scene.run(pol, through.pinned, "-prepare-report", str(report))
    assert result.code == 0, result.stderr
    signed_digest = tomllib.loads(report.read_text())["signature"][0]["digest"]
    assert signed_digest == (index_digest if signed == "index" else image.digest)


# Rules


def test_an_image_no_rule_names_needs_no_signature_and_every_matching_rule_applies(
    scene: Scene, tmp_path: Path, registry: Registry, key: Key
) -> None:
    image = scene.image()
    second = make_key(tmp_path / "second")
    image.sign(key, "sig")
    ref = image.pinned
    assert scene.run(scene.policy(Rule(["elsewhere.example/*"], keys=[key.public])), ref).code == 0
    both = scene.policy(
        Rule(["*"], keys=[key.public]), Rule([f"{registry.host}/signed/*"], keys=[second.public])
    )
    result = scene.run(both, ref)
    assert result.code == 1
    assert f"(image.signed-by, line 7 of {both})" in result.stderr  # the second rule is not satisfied
    image.sign(second, "bundle")
    report = tmp_path / "report.toml"
    result = scene.run(both, ref, "-prepare-report", str(report))
    assert result.code == 0, result.stderr
    keys = [s["key"] for s in tomllib.loads(report.read_text())["signature"]]
    assert keys == [key.fingerprint, second.fingerprint]


# Keys


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (
            None,
            "not a regular file the preparer can read (missing, a directory, a fifo, a device, or not readable)",
        ),
        ("not a key\n", "not a PEM file"),
        ("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n", "not a DER SubjectPublicKeyInfo"),
        (
            "private",
            "it is a private key (PRIVATE KEY): give the public key (cosign.pub), never the private one",
        ),
        ("rsa", "RSA keys are not supported (supported: ECDSA P-256, ECDSA P-384, Ed25519)"),
    ],
    ids=["missing", "not PEM", "not DER", "private", "RSA"],
)
def test_a_key_that_cannot_be_used_is_exit_3_naming_it_before_any_request(
    scene: Scene, tmp_path: Path, front: Front, key: Key, content: str | None, problem: str
) -> None:
    bad = tmp_path / "keys" / "bad.pub"
    if content == "private":
        bad.write_bytes((tmp_path / "keys" / "cosign.key").read_bytes())
    elif content == "rsa":
        bad.write_text(RSA_PUBLIC)
    elif content is not None:
        bad.write_text(content)
    pol = scene.policy(Rule(["*"], keys=[key.public, bad]))
    result = scene.run(pol, f"{front.host}/signed/whatever:latest")
    assert result.code == 3
    assert f"image.signed-by (line 3 of {pol}): key {bad}: {problem}" in result.stderr
    assert front.requests == []


#: An RSA 2048 public key (SPKI PEM), to be refused by name.
RSA_PUBLIC = """-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAu1SU1LfVLPHCozMxH2Mo
4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u
+qKhbwKfBstIs+bMY2Zkp18gnTxKLxoS2tFczGkPLPgizskuemMghRniWaoLcyeh
kd3qqGElvW/VDL5AaWTg0nLVkjRo9z+40RQzuVaE8AkAFmxZzow3x+VJYKdjykkJ
0iT9wCS0DRTXu269V264Vf/3jvredZiKRkgwlL9xNAwxXFg0x/XFw005UWVRIkdg
cKWTjpBP2dPwVZ4WWC+9aGVd+Gyn1o0CLelf4rEjGoXbAAEgAqeGUxrcIlbjXfbc
mwIDAQAB
-----END PUBLIC KEY-----
"""


# Caches


def test_a_warm_run_verifies_again_from_the_cache_and_asks_nothing(
    scene: Scene, tmp_path: Path, front: Front, key: Key
) -> None:
    image = scene.image()
    image.sign(key, "bundle")
    ref = image.via(front.host).pinned
    pol = scene.policy(Rule(["*"], keys=[key.public]))
    assert scene.run(pol, ref).code == 0
    front.requests.clear()
    result = scene.run(pol, ref)
    assert result.code == 0, result.stderr
    assert front.requests == []
    # A key changed after the cache was filled is still enforced: the record does not satisfy it, the registry is
    # asked, and nothing there does either.
    other = make_key(tmp_path / "other")
    result = scene.run(scene.policy(Rule(["*"], keys=[other.public])), ref)
    assert result.code == 1
    assert "none verifies with the rule's key" in result.stderr
    assert front.requests != []


# Bounds


def test_a_signature_tag_past_the_bound_refuses_the_image_even_with_a_valid_signature(
    scene: Scene, front: Front, key: Key
) -> None:
    image = scene.image()
    repository, digest = image.repository, image.digest
    payload = simple_signing(image.name, digest)
    layer = {"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json", "size": len(payload),
             "digest": "sha256:" + "0" * 64, "annotations": {"dev.cosignproject.cosign/signature": "AA=="}}  # fmt: skip
    image.sign(key, "sig")  # a valid one, then 1,001 more layers in front of it
    tag = f"/v2/{repository}/manifests/{digest.replace(':', '-')}.sig"
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": 2,
                           "digest": "sha256:" + "1" * 64},
                "layers": [layer] * 1001}  # fmt: skip
    front.overrides[tag] = (200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
                            json.dumps(manifest).encode())  # fmt: skip
    result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.via(front.host).pinned)
    assert result.code == 1
    assert "holds 1001 signatures, more than the 1000 looked at" in result.stderr
    assert layers_asked(front, repository) == []


# Shown


def test_a_dry_run_shows_each_images_rule_and_keys_and_asks_nothing(
    scene: Scene, front: Front, key: Key
) -> None:
    pol = scene.policy(Rule([f"{front.host}/signed/*"], keys=[key.public]))
    result = scene.run(pol, f"{front.host}/signed/app:1", "-dry-run")
    assert result.code == 0, result.stderr
    assert (
        f"  signatures: io.buildpacks.group[0] ({front.host}/signed/app): image.signed-by, line 3 of {pol}: "
        f"key {key.public} (sha256:{key.fingerprint})"
    ) in result.stdout
    assert front.requests == []


def test_a_pod_with_a_cold_cache_verifies_from_the_fleets_record_without_asking_the_origin(
    tmp_path: Path, registry: Registry, front: Front, key: Key
) -> None:
    from tests.integration.test_fleet import pod

    image = push_image(registry, tmp_path)
    image.sign(key, "sig")
    fleet = f"{registry.host}/fleet/{uuid.uuid4().hex[:12]}"
    pol = write_policy(tmp_path, Rule(["*"], keys=[key.public]))
    project = group(f"docker://{image.via(front.host).pinned}")
    first = pod(tmp_path, "pod1", project, "-policy", str(pol), "-download-cache-repo", fleet)
    assert first.code == 0, first.stderr
    front.requests.clear()
    second = pod(tmp_path, "pod2", project, "-policy", str(pol), "-download-cache-repo", fleet)
    assert second.code == 0, second.stderr
    assert front.requests == []  # the image from the fleet's copy, its signature from the fleet's record
    # A rule the record does not satisfy sends the pod to the origin, which has nothing that satisfies it either.
    other = make_key(tmp_path / "other")
    changed = write_policy(tmp_path, Rule(["*"], keys=[other.public]))
    third = pod(tmp_path, "pod3", project, "-policy", str(changed), "-download-cache-repo", fleet)
    assert third.code == 1
    assert "none verifies with the rule's key" in third.stderr
    assert any(".sig" in p for p in front.requests)


def test_the_signed_registry_example_of_the_docs(scene: Scene, tmp_path: Path, registry: Registry) -> None:
    from tests.integration.test_policy import example

    key = make_key(tmp_path / "keys", "corp-cosign")
    pol = example("A signed registry", tmp_path, registry=registry)
    image = scene.image(f"buildpacks/{uuid.uuid4().hex[:8]}")
    refused = scene.run(pol, image.pinned)
    assert refused.code == 1
    assert f"(image.signed-by, line 8 of {pol}): no signature found" in refused.stderr
    image.sign(key, "bundle")
    result = scene.run(pol, image.pinned)
    assert result.code == 0, result.stderr
    assert scene.installed()
