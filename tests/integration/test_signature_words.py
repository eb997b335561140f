"""What a platform sees of ``[[image.signed-by]]`` keys written in other forms than a key file, and what a signature
check tells: real CLI, the suite's real registry, images signed as cosign signs them (tests/plugins/signing.py)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.golden import Layout
from tests.integration.test_signatures import installed, push_image, run
from tests.plugins.cli import Result
from tests.plugins.registry import Front, Registry
from tests.plugins.signing import Key, bundle_sign, cosign_sign, make_key


def inline_policy(tmp_path: Path, keys: list[str]) -> Path:
    """A policy of one rule over every image whose ``keys`` are written as they are (a PEM block, a URI)."""
    path = tmp_path / "policy.toml"
    path.write_text(f'[[image.signed-by]]\nimages = ["*"]\nkeys = {json.dumps(keys)}\n')
    return path


def test_an_inline_pem_key_verifies_as_its_file_does(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, key: Key
) -> None:
    repository, digest = push_image(registry, tmp_path)
    cosign_sign(registry, repository, digest, key)
    pol = inline_policy(tmp_path, [key.public.read_text()])
    result = run(preparer, pol, f"{registry.host}/{repository}:latest")
    assert result.code == 0, result.stderr
    assert installed(layout)


def test_an_inline_pem_key_of_another_signer_refuses(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, key: Key
) -> None:
    repository, digest = push_image(registry, tmp_path)
    cosign_sign(registry, repository, digest, key)
    other = make_key(tmp_path / "other")
    result = run(
        preparer, inline_policy(tmp_path, [other.public.read_text()]), f"{registry.host}/{repository}:latest"
    )
    assert result.code == 1, result.stderr
    assert "none verifies with the rule's key" in result.stderr
    assert not installed(layout)


def test_an_inline_block_that_is_not_a_public_key_is_named_by_its_place(
    preparer: Callable[..., Result], tmp_path: Path, front: Front, key: Key
) -> None:
    private = (tmp_path / "keys" / "cosign.key").read_text()
    pol = inline_policy(tmp_path, [key.public.read_text(), private])
    result = run(preparer, pol, f"{front.host}/signed/whatever:latest")
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
    preparer: Callable[..., Result], tmp_path: Path, front: Front, uri: str, what: str
) -> None:
    pol = inline_policy(tmp_path, [uri])
    result = run(preparer, pol, f"{front.host}/signed/whatever:latest")
    assert result.code == 3, result.stderr
    scheme = uri.partition("://")[0]
    assert (
        f"image.signed-by (line 1 of {pol}): key {uri}: {what} ({scheme}://) is not read by the preparer, which "
        f"reaches no key service: export its public key with `cosign public-key --key {uri} > cosign.pub` and name "
        "that file"
    ) in result.stderr
    assert "Traceback" not in result.stderr
    assert front.requests == []


def test_debug_logs_each_signature_request(
    preparer: Callable[..., Result], tmp_path: Path, registry: Registry, key: Key
) -> None:
    repository, digest = push_image(registry, tmp_path)
    cosign_sign(registry, repository, digest, key)
    pol = inline_policy(tmp_path, [key.public.read_text()])
    result = run(preparer, pol, f"{registry.host}/{repository}:latest", "-log-level", "debug")
    assert result.code == 0, result.stderr
    tag = digest.replace(":", "-") + ".sig"
    assert f"Signatures of {digest}: asking for the manifest of the tag {tag}" in result.stdout
    assert f"the payload of signature 1 of the tag {tag}" in result.stdout
    quiet = run(preparer, pol, f"{registry.host}/{repository}:latest")
    assert "Signatures" not in quiet.stdout


@pytest.mark.parametrize("sign", [cosign_sign, bundle_sign], ids=["tag scheme", "bundle, referrers"])
def test_a_signature_payload_is_not_shown_as_a_download_of_the_buildpack(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, key: Key,
    sign: Callable[..., object],
) -> None:  # fmt: skip
    repository, digest = push_image(registry, tmp_path)
    sign(registry, repository, digest, key)
    result = run(
        preparer, inline_policy(tmp_path, [key.public.read_text()]), f"{registry.host}/{repository}:latest"
    )
    assert result.code == 0, result.stderr
    shown = [line for line in result.stdout.splitlines() if line.startswith("Downloading ")]
    # The buildpackage's blobs are shown (its config and its one layer: a line each when it starts, maybe more as
    # it goes); the signature's are not.
    blobs = {line.split()[2] for line in shown}
    asked = urllib.request.Request(
        f"http://{registry.host}/v2/{repository}/manifests/{digest}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
    )
    with urllib.request.urlopen(asked) as answer:
        manifest = json.load(answer)
    assert blobs == {manifest["config"]["digest"][:19], manifest["layers"][0]["digest"][:19]}, shown
