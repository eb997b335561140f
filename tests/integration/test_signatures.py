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
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.golden import Layout, listing
from tests.plugins.cli import Result
from tests.plugins.registry import Front, Registry, buildpack_layer, push_package, put_manifest, started
from tests.plugins.signing import (
    OCI_INDEX,
    Key,
    attach_bundle,
    bundle,
    bundle_sign,
    cosign_sign,
    make_key,
    sign_tag_scheme,
    simple_signing,
    statement,
)
from tests.projects import group

BP = ("acme/signed", "1.0.0")


def push_image(registry: Registry, tmp_path: Path, repository: str | None = None) -> tuple[str, str]:
    """A one-buildpack buildpackage in a repository of its own: ``(repository, manifest digest)``."""
    repository = repository or f"signed/{uuid.uuid4().hex[:12]}"
    layer = buildpack_layer(tmp_path / f"src-{uuid.uuid4().hex[:6]}", [(*BP, "")])
    digest, _ = push_package(registry, repository, "latest", [(layer, [(*BP, "")])], BP)
    return repository, digest


def policy(tmp_path: Path, *rules: tuple[list[str], list[Path]]) -> Path:
    """A policy of ``[[image.signed-by]]`` rules ``(images, key files)``; key paths written relative to it."""
    text = "# signatures\n"
    for images, keys in rules:
        text += "\n[[image.signed-by]]\n"
        text += f"images = {json.dumps(images)}\n"
        text += f"keys = {json.dumps([str(k.relative_to(tmp_path)) for k in keys])}\n"
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def installed(layout: Layout) -> bool:
    return "acme_signed/1.0.0/" in listing(layout.buildpacks)


def run(preparer: Callable[..., Result], pol: Path, ref: str, *extra: str) -> Result:
    return preparer("-policy", str(pol), *extra, project=group(f"docker://{ref}"))


# Signed


@pytest.mark.parametrize(
    "sign", [cosign_sign, bundle_sign], ids=["tag scheme", "bundle, referrers tag schema"]
)
def test_a_signed_image_is_installed_and_its_signature_reported(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, key: Key,
    sign: Callable[..., object],
) -> None:  # fmt: skip
    repository, digest = push_image(registry, tmp_path)
    sign(registry, repository, digest, key)
    pol = policy(tmp_path, ([f"{registry.host}/signed/*"], [key.public]))
    report = tmp_path / "report.toml"
    result = run(preparer, pol, f"{registry.host}/{repository}:latest", "-prepare-report", str(report))
    assert result.code == 0, result.stderr
    assert installed(layout)
    signatures = tomllib.loads(report.read_text())["signature"]
    fmt = "cosign" if sign is cosign_sign else "bundle"
    assert signatures == [{"entry": "io.buildpacks.group[0]", "image": f"{registry.host}/{repository}:latest",
                           "digest": digest, "format": fmt, "key": key.fingerprint}]  # fmt: skip


def test_a_bundle_is_found_through_the_referrers_api(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    registry: Registry,
    front: Front,
    key: Key,
) -> None:
    repository, digest = push_image(registry, tmp_path)
    # Pushed as a referrer only: no referrers tag schema index; the front serves the referrers API.
    payload = statement(f"{registry.host}/{repository}", digest)
    _, entry = attach_bundle(registry, repository, digest, bundle(key, payload), tag_schema=False)
    api = f"/v2/{repository}/referrers/{digest}"  # unfiltered: bundles come under four artifact types
    index = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [entry]}).encode()
    front.overrides[api] = (200, {"Content-Type": OCI_INDEX}, index)
    pol = policy(tmp_path, ([f"{front.host}/*"], [key.public]))
    result = run(preparer, pol, f"{front.host}/{repository}@{digest}")
    assert result.code == 0, result.stderr
    assert installed(layout)
    assert api in front.requests
    assert (
        f"/v2/{repository}/manifests/{digest.replace(':', '-')}" not in front.requests
    )  # no tag schema asked


def test_without_the_referrers_api_nor_a_tag_an_image_is_unsigned(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    registry: Registry,
    front: Front,
    key: Key,
) -> None:
    repository, digest = push_image(registry, tmp_path)
    payload = statement(f"{registry.host}/{repository}", digest)
    attach_bundle(
        registry, repository, digest, bundle(key, payload), tag_schema=False
    )  # stored, never listed
    pol = policy(tmp_path, (["*"], [key.public]))
    result = run(preparer, pol, f"{front.host}/{repository}@{digest}")
    assert result.code == 1
    assert "no signature found" in result.stderr


def test_a_second_valid_signature_beside_an_invalid_one_is_enough(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, key: Key
) -> None:
    repository, digest = push_image(registry, tmp_path)
    other = make_key(tmp_path / "other")
    payload = simple_signing(f"{registry.host}/{repository}", digest)
    sign_tag_scheme(
        registry, repository, digest, [(payload, other.sign(payload)), (payload, key.sign(payload))]
    )
    result = run(preparer, policy(tmp_path, (["*"], [key.public])), f"{registry.host}/{repository}@{digest}")
    assert result.code == 0, result.stderr
    assert installed(layout)


@pytest.mark.parametrize("curve", ["p384", "ed25519"])
def test_p384_and_ed25519_keys_verify(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, curve: str
) -> None:
    key = make_key(tmp_path / "keys", curve=curve)
    repository, digest = push_image(registry, tmp_path)
    bundle_sign(registry, repository, digest, key)
    result = run(preparer, policy(tmp_path, (["*"], [key.public])), f"{registry.host}/{repository}@{digest}")
    assert result.code == 0, result.stderr


# Refused: nothing installed, no layer asked for


def layers_asked(front: Front, repository: str) -> list[str]:
    return [p for p in front.requests if p.startswith(f"/v2/{repository}/blobs/")]


def test_an_unsigned_image_is_refused_before_its_config_or_layers_are_asked_for(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    registry: Registry,
    front: Front,
    key: Key,
) -> None:
    repository, digest = push_image(registry, tmp_path)
    pol = policy(tmp_path, ([f"{front.host}/signed/*"], [key.public]))
    result = run(preparer, pol, f"{front.host}/{repository}:latest")
    assert result.code == 1
    hex_ = digest.removeprefix("sha256:")
    assert result.stderr.strip().splitlines()[-1] == (
        f"ERROR: failed to fetch {front.host}/{repository}:latest: not signed by a key the platform policy trusts "
        f"(image.signed-by, line 3 of {pol}): no signature found; looked for signatures of {digest} at the tag "
        f"sha256-{hex_}.sig and among the referrers of {digest}"
    )
    assert not installed(layout)
    assert layers_asked(front, repository) == []  # neither config nor layer
    assert f"/v2/{repository}/manifests/latest" in front.requests


def test_the_registry_log_shows_no_layer_pulled_for_a_refused_image(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, key: Key
) -> None:
    with started(tmp_path / "logged", access_log=True) as logged:
        repository, digest = push_image(logged, tmp_path)
        other = make_key(tmp_path / "other")
        cosign_sign(logged, repository, digest, other)
        log = tmp_path / "logged" / "access.log"
        before = log.read_text().count("\n")
        result = run(
            preparer, policy(tmp_path, (["*"], [key.public])), f"{logged.host}/{repository}@{digest}"
        )
        asked = log.read_text().splitlines()[before:]
    assert result.code == 1
    assert any("sha256-" in line and ".sig" in line for line in asked)
    blobs = [line for line in asked if "/blobs/" in line and '"GET' in line]
    # The signature's payload is a blob; the image's config and layer are not asked for.
    assert len(blobs) == 1, blobs


def test_a_signature_by_another_key_names_the_rules_keys(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, key: Key
) -> None:
    repository, digest = push_image(registry, tmp_path)
    cosign_sign(registry, repository, digest, make_key(tmp_path / "other"))
    result = run(preparer, policy(tmp_path, (["*"], [key.public])), f"{registry.host}/{repository}@{digest}")
    assert result.code == 1
    assert f"1 signature found, none verifies with the rule's key (sha256:{key.fingerprint})" in result.stderr
    assert not installed(layout)


def test_a_tampered_payload_does_not_verify(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, key: Key
) -> None:
    repository, digest = push_image(registry, tmp_path)
    payload = simple_signing(f"{registry.host}/{repository}", digest)
    signature = key.sign(payload)
    tampered = payload.replace(b'"optional":null', b'"optional":{"by":"mallory"}')
    sign_tag_scheme(registry, repository, digest, [(tampered, signature)])
    result = run(preparer, policy(tmp_path, (["*"], [key.public])), f"{registry.host}/{repository}@{digest}")
    assert result.code == 1
    assert "none verifies with the rule's key" in result.stderr


@pytest.mark.parametrize("sign", [cosign_sign, bundle_sign], ids=["tag scheme", "bundle"])
def test_a_signature_for_another_digest_names_that_digest(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, key: Key,
    sign: Callable[..., object],
) -> None:  # fmt: skip
    repository, digest = push_image(registry, tmp_path)
    _, elsewhere = push_image(registry, tmp_path)
    sign(registry, repository, digest, key, signed_digest=elsewhere)  # a signature copied from another image
    result = run(preparer, policy(tmp_path, (["*"], [key.public])), f"{registry.host}/{repository}@{digest}")
    assert result.code == 1
    assert (
        f"the signature by key sha256:{key.fingerprint} is for {elsewhere}, not for {digest}" in result.stderr
    )


def test_a_real_cosign_signature_moved_to_another_image_names_the_digest_it_is_for(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry
) -> None:
    real = Path(__file__).resolve().parents[1] / "data" / "cosign-keyed"
    (tmp_path / "keys").mkdir()
    shutil.copy(real / "cosign.pub", tmp_path / "keys" / "cosign.pub")
    repository, digest = push_image(registry, tmp_path)
    payload, signature = (real / "payload.json").read_bytes(), (real / "signature.b64").read_text().strip()
    sign_tag_scheme(registry, repository, digest, [(payload, signature)])
    pol = policy(tmp_path, (["*"], [tmp_path / "keys" / "cosign.pub"]))
    result = run(preparer, pol, f"{registry.host}/{repository}@{digest}")
    assert result.code == 1
    assert (
        "is for sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b, not for"
        in result.stderr
    )


def test_an_attestation_of_another_kind_is_no_signature(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, key: Key
) -> None:
    repository, digest = push_image(registry, tmp_path)
    payload = statement(f"{registry.host}/{repository}", digest, "https://slsa.dev/provenance/v1")
    # Listed without the predicate annotation, so that it is fetched and judged by its statement.
    attach_bundle(registry, repository, digest, bundle(key, payload), predicate="")
    result = run(preparer, policy(tmp_path, (["*"], [key.public])), f"{registry.host}/{repository}@{digest}")
    assert result.code == 1
    assert "is no image signature: it is an attestation of https://slsa.dev/provenance/v1" in result.stderr


# Index and manifest digests


@pytest.mark.parametrize("signed", ["index", "manifest"])
def test_a_signature_over_the_index_or_the_platform_manifest_is_accepted(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, key: Key, signed: str
) -> None:
    repository, digest = push_image(registry, tmp_path)
    manifest_size = 0
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [
        {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": manifest_size,
         "platform": {"os": "linux", "architecture": "amd64"}}]}  # fmt: skip
    index_digest = put_manifest(registry, repository, "multi", json.dumps(index).encode(), OCI_INDEX)
    cosign_sign(registry, repository, index_digest if signed == "index" else digest, key)
    report = tmp_path / "report.toml"
    ref = f"{registry.host}/{repository}@{index_digest}"
    result = run(preparer, policy(tmp_path, (["*"], [key.public])), ref, "-prepare-report", str(report))
    assert result.code == 0, result.stderr
    signed_digest = tomllib.loads(report.read_text())["signature"][0]["digest"]
    assert signed_digest == (index_digest if signed == "index" else digest)


# Rules


def test_an_image_no_rule_names_needs_no_signature_and_every_matching_rule_applies(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, key: Key
) -> None:
    repository, digest = push_image(registry, tmp_path)
    second = make_key(tmp_path / "second")
    cosign_sign(registry, repository, digest, key)
    ref = f"{registry.host}/{repository}@{digest}"
    assert run(preparer, policy(tmp_path, (["elsewhere.example/*"], [key.public])), ref).code == 0
    both = policy(tmp_path, (["*"], [key.public]), ([f"{registry.host}/signed/*"], [second.public]))
    result = run(preparer, both, ref)
    assert result.code == 1
    assert f"(image.signed-by, line 7 of {both})" in result.stderr  # the second rule is not satisfied
    bundle_sign(registry, repository, digest, second)
    report = tmp_path / "report.toml"
    result = run(preparer, both, ref, "-prepare-report", str(report))
    assert result.code == 0, result.stderr
    keys = [s["key"] for s in tomllib.loads(report.read_text())["signature"]]
    assert keys == [key.fingerprint, second.fingerprint]


# Keys


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "No such file or directory"),
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
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, front: Front, key: Key,
    content: str | None, problem: str,
) -> None:  # fmt: skip
    bad = tmp_path / "keys" / "bad.pub"
    if content == "private":
        bad.write_bytes((tmp_path / "keys" / "cosign.key").read_bytes())
    elif content == "rsa":
        bad.write_text(RSA_PUBLIC)
    elif content is not None:
        bad.write_text(content)
    pol = policy(tmp_path, (["*"], [key.public, bad]))
    result = run(preparer, pol, f"{front.host}/signed/whatever:latest")
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
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    registry: Registry,
    front: Front,
    key: Key,
) -> None:
    repository, digest = push_image(registry, tmp_path)
    bundle_sign(registry, repository, digest, key)
    ref = f"{front.host}/{repository}@{digest}"
    pol = policy(tmp_path, (["*"], [key.public]))
    assert run(preparer, pol, ref).code == 0
    front.requests.clear()
    result = run(preparer, pol, ref)
    assert result.code == 0, result.stderr
    assert front.requests == []
    # A key changed after the cache was filled is still enforced: the record does not satisfy it, the registry is
    # asked, and nothing there does either.
    other = make_key(tmp_path / "other")
    result = run(preparer, policy(tmp_path, (["*"], [other.public])), ref)
    assert result.code == 1
    assert "none verifies with the rule's key" in result.stderr
    assert front.requests != []


# Bounds


def test_a_signature_tag_past_the_bound_refuses_the_image_even_with_a_valid_signature(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    registry: Registry,
    front: Front,
    key: Key,
) -> None:
    repository, digest = push_image(registry, tmp_path)
    payload = simple_signing(f"{registry.host}/{repository}", digest)
    layer = {"mediaType": "application/vnd.dev.cosign.simplesigning.v1+json", "size": len(payload),
             "digest": "sha256:" + "0" * 64, "annotations": {"dev.cosignproject.cosign/signature": "AA=="}}  # fmt: skip
    cosign_sign(registry, repository, digest, key)  # a valid one, then 1,001 more layers in front of it
    tag = f"/v2/{repository}/manifests/{digest.replace(':', '-')}.sig"
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": 2,
                           "digest": "sha256:" + "1" * 64},
                "layers": [layer] * 1001}  # fmt: skip
    front.overrides[tag] = (200, {"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
                            json.dumps(manifest).encode())  # fmt: skip
    result = run(preparer, policy(tmp_path, (["*"], [key.public])), f"{front.host}/{repository}@{digest}")
    assert result.code == 1
    assert "holds 1001 signatures, more than the 1000 looked at" in result.stderr
    assert layers_asked(front, repository) == []


# Shown


def test_a_dry_run_shows_each_images_rule_and_keys_and_asks_nothing(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, front: Front, key: Key
) -> None:
    pol = policy(tmp_path, ([f"{front.host}/signed/*"], [key.public]))
    result = run(preparer, pol, f"{front.host}/signed/app:1", "-dry-run")
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

    repository, digest = push_image(registry, tmp_path)
    cosign_sign(registry, repository, digest, key)
    fleet = f"{registry.host}/fleet/{uuid.uuid4().hex[:12]}"
    pol = policy(tmp_path, (["*"], [key.public]))
    project = group(f"docker://{front.host}/{repository}@{digest}")
    first = pod(tmp_path, "pod1", project, "-policy", str(pol), "-download-cache-repo", fleet)
    assert first.code == 0, first.stderr
    front.requests.clear()
    second = pod(tmp_path, "pod2", project, "-policy", str(pol), "-download-cache-repo", fleet)
    assert second.code == 0, second.stderr
    assert front.requests == []  # the image from the fleet's copy, its signature from the fleet's record
    # A rule the record does not satisfy sends the pod to the origin, which has nothing that satisfies it either.
    other = make_key(tmp_path / "other")
    third = pod(tmp_path, "pod3", project, "-policy", str(policy(tmp_path, (["*"], [other.public]))),
                "-download-cache-repo", fleet)  # fmt: skip
    assert third.code == 1
    assert "none verifies with the rule's key" in third.stderr
    assert any(".sig" in p for p in front.requests)


def test_the_signed_registry_example_of_the_docs(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry
) -> None:
    from tests.integration.test_policy import example

    key = make_key(tmp_path / "keys", "corp-cosign")
    pol = example("A signed registry", tmp_path, registry=registry)
    repository, digest = push_image(registry, tmp_path, f"buildpacks/{uuid.uuid4().hex[:8]}")
    refused = run(preparer, pol, f"{registry.host}/{repository}@{digest}")
    assert refused.code == 1
    assert f"(image.signed-by, line 8 of {pol}): no signature found" in refused.stderr
    bundle_sign(registry, repository, digest, key)
    result = run(preparer, pol, f"{registry.host}/{repository}@{digest}")
    assert result.code == 0, result.stderr
    assert installed(layout)
