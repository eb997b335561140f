"""What a platform sees of ``[[image.signed-by]]`` keys written in other forms than a key file, and what a signature
check tells: real CLI, the suite's real registry, images signed as cosign signs them (tests/plugins/signing.py)."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from tests.plugins.registry import Front, Registry
from tests.plugins.signing import Key, make_key
from tests.signed import Form, Rule, Scene


def inline_policy(scene: Scene, keys: list[str]) -> Path:
    """A policy of one rule over every image whose ``keys`` are written as they are (a PEM block, a URI), the
    rule at line 1."""
    return scene.policy(Rule(["*"], keys=keys), head="")


def test_an_inline_pem_key_verifies_as_its_file_does(scene: Scene, key: Key) -> None:
    image = scene.image()
    image.sign(key, "sig")
    pol = inline_policy(scene, [key.public.read_text()])
    result = scene.run(pol, image.tagged)
    assert result.code == 0, result.stderr
    assert scene.installed()


def test_an_inline_pem_key_of_another_signer_refuses(scene: Scene, tmp_path: Path, key: Key) -> None:
    image = scene.image()
    image.sign(key, "sig")
    other = make_key(tmp_path / "other")
    result = scene.run(inline_policy(scene, [other.public.read_text()]), image.tagged)
    assert result.code == 1, result.stderr
    assert "none verifies with the rule's key" in result.stderr
    assert not scene.installed()


def test_an_inline_block_that_is_not_a_public_key_is_named_by_its_place(
    scene: Scene, tmp_path: Path, front: Front, key: Key
) -> None:
    private = (tmp_path / "keys" / "cosign.key").read_text()
    pol = inline_policy(scene, [key.public.read_text(), private])
    result = scene.run(pol, f"{front.host}/signed/whatever:latest")
    assert result.code == 3, result.stderr
    assert f"image.signed-by (line 1 of {pol}): key 2 (inline PEM): it is a private key" in result.stderr
    assert front.requests == []


@pytest.mark.parametrize(
    ("uri", "what"),
    [
        ("awskms:///arn:aws:kms:us-east-1:111122223333:key/abcd", "an AWS KMS key"),
        ("gcpkms://projects/p/locations/global/keyRings/r/cryptoKeys/k", "a Google Cloud KMS key"),
        ("azurekms://vault.vault.azure.net/key", "an Azure Key Vault key"),
        ("hashivault://transit-key", "a HashiCorp Vault key"),
        ("k8s://build-system/cosign-keys", "a Kubernetes secret"),
    ],
)
def test_a_key_service_uri_is_refused_by_name_with_the_way_out(
    scene: Scene, front: Front, uri: str, what: str
) -> None:
    pol = inline_policy(scene, [uri])
    result = scene.run(pol, f"{front.host}/signed/whatever:latest")
    assert result.code == 3, result.stderr
    scheme = uri.partition("://")[0]
    assert (
        f"image.signed-by (line 1 of {pol}): key {uri}: {what} ({scheme}://) is not read by the preparer, which "
        f"reaches no key service: export its public key with `cosign public-key --key {uri} > cosign.pub` and name "
        "that file"
    ) in result.stderr
    assert "Traceback" not in result.stderr
    assert front.requests == []


def test_debug_logs_each_signature_request(scene: Scene, key: Key) -> None:
    image = scene.image()
    image.sign(key, "sig")
    pol = inline_policy(scene, [key.public.read_text()])
    result = scene.run(pol, image.tagged, "-log-level", "debug")
    assert result.code == 0, result.stderr
    tag = image.digest.replace(":", "-") + ".sig"
    assert f"Signatures of {image.digest}: asking for the manifest of the tag {tag}" in result.stdout
    assert f"the payload of signature 1 of the tag {tag}" in result.stdout
    quiet = scene.run(pol, image.tagged)
    assert "Signatures" not in quiet.stdout


@pytest.mark.parametrize("form", ["sig", "bundle"], ids=["tag scheme", "bundle, referrers"])
def test_a_signature_payload_is_not_shown_as_a_download_of_the_buildpack(
    scene: Scene, registry: Registry, key: Key, form: Form
) -> None:
    image = scene.image()
    image.sign(key, form)
    result = scene.run(inline_policy(scene, [key.public.read_text()]), image.tagged)
    assert result.code == 0, result.stderr
    shown = [line for line in result.stdout.splitlines() if line.startswith("Downloading ")]
    # The buildpackage's blobs are shown (its config and its one layer: a line each when it starts, maybe more as
    # it goes); the signature's are not.
    blobs = {line.split()[2] for line in shown}
    asked = urllib.request.Request(
        f"http://{registry.host}/v2/{image.repository}/manifests/{image.digest}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    )
    with urllib.request.urlopen(asked) as answer:
        manifest = json.load(answer)
    assert blobs == {manifest["config"]["digest"][:19], manifest["layers"][0]["digest"][:19]}, shown
