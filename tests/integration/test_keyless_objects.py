"""Which keyless objects count as image signatures: a DSSE bundle whose in-toto statement has the predicate type
``https://sigstore.dev/cosign/sign/v1``, and a ``.sig`` layer's simple-signing payload. A message-signature bundle
(what ``cosign sign-blob`` makes) and an attestation of another predicate type are not image signatures, even signed
by a trusted identity, valid, logged, for the image's digest, and attached as referrers whose (unsigned) annotations
claim to be a signature.

Real CLI and the suite's real registry; signatures made with the tests' own Sigstore (tests/keyless_sign.py), and
checked here to verify as keyless signatures, so that what refuses them is what they sign, not a broken signature.
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from preparer.policy.keyless.evidence import from_bundle
from preparer.policy.keyless.root import load_root
from preparer.policy.keyless.verify import verify
from tests.keyless import GITHUB_ISSUER, T0, WORKFLOW
from tests.keyless_log import hashedrekord
from tests.keyless_sign import Signer, keyless_bundle, tlog_entry
from tests.plugins.registry import Registry
from tests.plugins.signing import BUNDLE, attach_bundle, statement
from tests.signed import RELEASES, SUBJECT_REGEXP, Image, Rule, Scene

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SLSA = "https://slsa.dev/provenance/v1"


def manifest_bytes(image: Image) -> bytes:
    """The image's manifest as the registry serves it: the bytes its digest is of."""
    request = urllib.request.Request(
        f"http://{image.registry.host}/v2/{image.repository}/manifests/{image.digest}",
        headers={"Accept": OCI_MANIFEST},
    )
    with urllib.request.urlopen(request) as response:
        data: bytes = response.read()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == image.digest
    return data


def sign_blob(signer: Signer, artifact: bytes, at: int = T0) -> bytes:
    """``cosign sign-blob --bundle`` (keyless): a Sigstore bundle v0.3 whose message signature is over ``artifact``,
    logged in Rekor as a ``hashedrekord`` 0.0.1 with its promise, inclusion proof and checkpoint."""
    leaf = signer.leaf(at=at)
    signature = leaf.sign(artifact)
    tlog = tlog_entry(signer, hashedrekord(signature, leaf.der, artifact), "hashedrekord", at)

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return json.dumps({
        "mediaType": BUNDLE,
        "verificationMaterial": {"certificate": {"rawBytes": b64(leaf.der)}, "tlogEntries": [tlog]},
        "messageSignature": {"messageDigest": {"algorithm": "SHA2_256", "digest": b64(hashlib.sha256(artifact).digest())},
                             "signature": b64(signature)},
    }).encode()  # fmt: skip


def signed_blob(image: Image, signer: Signer) -> bytes:
    """The image's manifest signed as a blob by the trusted identity: its message digest is the image's digest."""
    data = sign_blob(signer, manifest_bytes(image))
    found = verify(from_bundle(data, "blob", artifact=manifest_bytes(image)), load_root(signer.root))
    assert (found.issuer, found.subject) == (
        GITHUB_ISSUER,
        WORKFLOW,
    )  # a valid keyless signature of those bytes
    return data


def attestation(image: Image, signer: Signer) -> bytes:
    """An in-toto statement about the image's digest with a SLSA provenance predicate, signed by the trusted
    identity as a DSSE bundle (what ``cosign attest`` makes)."""
    data = keyless_bundle(signer, statement(image.name, image.digest, predicate_type=SLSA))
    found = verify(from_bundle(data, "attestation"), load_root(signer.root))
    assert (found.issuer, found.subject) == (GITHUB_ISSUER, WORKFLOW)
    return data


OBJECTS: dict[str, tuple[Callable[[Image, Signer], bytes], str]] = {
    "message signature (sign-blob)": (signed_blob, "the bundle holds no DSSE envelope"),
    "attestation of another predicate": (attestation, f"it is an attestation of {SLSA}, not a signature"),
}


@pytest.mark.parametrize("kind", OBJECTS)
def test_a_keyless_bundle_that_signs_no_image_is_no_signature(
    scene: Scene, registry: Registry, signer: Signer, kind: str
) -> None:
    image = scene.image()
    repository, digest = image.repository, image.digest
    make, problem = OBJECTS[kind]
    # Its referrer claims, in annotations nobody signed, to hold cosign's image signature.
    attach_bundle(registry, repository, digest, make(image, signer))
    pol = scene.policy(Rule(["*"], identities=[RELEASES]), trusted_root=signer.root)
    result = scene.run(pol, image.tagged)
    assert result.code == 1, result.stderr
    # An attestation by a trusted signer is named as such; a message signature's bytes are unknown to the run, so
    # its signer cannot be told.
    why = (
        f"what issuer {GITHUB_ISSUER}, subject {WORKFLOW} signed is no image signature: {problem}"
        if problem.startswith("it is an attestation")
        else f"1 signature found, none verifies with its identities (issuer {GITHUB_ISSUER}, subject-regexp "
        f"{SUBJECT_REGEXP})"
    )
    assert result.stderr.strip().splitlines()[-1] == (
        f"ERROR: failed to fetch {registry.host}/{repository}:latest: not signed by an identity the platform policy "
        f"trusts (image.signed-by, line 4 of {pol}): {why}; looked for signatures of {digest} at the tag "
        f"{digest.replace(':', '-')}.sig and among the referrers of {digest}"
    )
    assert not scene.installed()


@pytest.mark.parametrize("kind", OBJECTS)
def test_the_debug_log_says_why_the_bundle_is_no_image_signature(
    scene: Scene, signer: Signer, kind: str
) -> None:
    image = scene.image()
    make, why = OBJECTS[kind]
    referrer, _ = attach_bundle(image.registry, image.repository, image.digest, make(image, signer))
    pol = scene.policy(Rule(["*"], identities=[RELEASES]), trusted_root=signer.root)
    result = scene.run(pol, image.tagged, "-log-level", "debug")
    assert result.code == 1
    said = f"Signature object referrer {referrer} is no image signature: {why}"
    assert said in result.stdout.splitlines(), result.stdout


@pytest.mark.parametrize("kind", OBJECTS)
def test_beside_an_image_signature_it_neither_counts_nor_refuses(
    scene: Scene, tmp_path: Path, signer: Signer, kind: str
) -> None:
    """The control of the tests above: the same registry, policy and signer install the image once it also has a
    cosign image signature (so the refusal above was the object's kind); and that object, listed first, is not
    reported as the signature."""
    image = scene.image()
    make, _ = OBJECTS[kind]
    attach_bundle(image.registry, image.repository, image.digest, make(image, signer))
    image.sign_keyless(signer, "bundle")
    report = tmp_path / "report.toml"
    pol = scene.policy(Rule(["*"], identities=[RELEASES]), trusted_root=signer.root)
    result = scene.run(pol, image.tagged, "-prepare-report", str(report))
    assert result.code == 0, result.stderr
    assert scene.installed()
    assert f'subject = "{WORKFLOW}"' in report.read_text()
