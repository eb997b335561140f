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
from tests.golden import Layout
from tests.integration.test_keyless import SUBJECT_REGEXP, keyless_policy
from tests.integration.test_signatures import installed, push_image, run
from tests.keyless import GITHUB_ISSUER, T0, WORKFLOW
from tests.keyless_log import hashedrekord
from tests.keyless_sign import Signer, bundle_keyless, keyless_bundle, make_signer, tlog_entry
from tests.plugins.cli import Result
from tests.plugins.registry import Registry
from tests.plugins.signing import BUNDLE, attach_bundle, statement

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SLSA = "https://slsa.dev/provenance/v1"


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    return make_signer(tmp_path / "sigstore")


def manifest_bytes(registry: Registry, repository: str, digest: str) -> bytes:
    """The manifest ``digest`` of ``repository`` as the registry serves it: the bytes its digest is of."""
    request = urllib.request.Request(
        f"http://{registry.host}/v2/{repository}/manifests/{digest}", headers={"Accept": OCI_MANIFEST}
    )
    with urllib.request.urlopen(request) as response:
        data: bytes = response.read()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
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


def signed_blob(registry: Registry, repository: str, digest: str, signer: Signer) -> bytes:
    """The image's manifest signed as a blob by the trusted identity: its message digest is the image's digest."""
    data = sign_blob(signer, manifest_bytes(registry, repository, digest))
    found = verify(from_bundle(data, "blob", artifact=manifest_bytes(registry, repository, digest)),
                   load_root(signer.root))  # fmt: skip
    assert (found.issuer, found.subject) == (
        GITHUB_ISSUER,
        WORKFLOW,
    )  # a valid keyless signature of those bytes
    return data


def attestation(registry: Registry, repository: str, digest: str, signer: Signer) -> bytes:
    """An in-toto statement about the image's digest with a SLSA provenance predicate, signed by the trusted
    identity as a DSSE bundle (what ``cosign attest`` makes)."""
    data = keyless_bundle(signer, statement(f"{registry.host}/{repository}", digest, predicate_type=SLSA))
    found = verify(from_bundle(data, "attestation"), load_root(signer.root))
    assert (found.issuer, found.subject) == (GITHUB_ISSUER, WORKFLOW)
    return data


OBJECTS: dict[str, tuple[Callable[[Registry, str, str, Signer], bytes], str]] = {
    "message signature (sign-blob)": (signed_blob, "the bundle holds no DSSE envelope"),
    "attestation of another predicate": (attestation, f"it is an attestation of {SLSA}, not a signature"),
}


@pytest.mark.parametrize("kind", OBJECTS)
def test_a_keyless_bundle_that_signs_no_image_is_no_signature(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    registry: Registry,
    signer: Signer,
    kind: str,
) -> None:
    repository, digest = push_image(registry, tmp_path)
    make, problem = OBJECTS[kind]
    # Its referrer claims, in annotations nobody signed, to hold cosign's image signature.
    attach_bundle(registry, repository, digest, make(registry, repository, digest, signer))
    pol = keyless_policy(tmp_path, signer)
    result = run(preparer, pol, f"{registry.host}/{repository}:latest")
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
    assert not installed(layout)


@pytest.mark.parametrize("kind", OBJECTS)
def test_the_debug_log_says_why_the_bundle_is_no_image_signature(
    preparer: Callable[..., Result], tmp_path: Path, registry: Registry, signer: Signer, kind: str
) -> None:
    repository, digest = push_image(registry, tmp_path)
    make, why = OBJECTS[kind]
    referrer, _ = attach_bundle(registry, repository, digest, make(registry, repository, digest, signer))
    result = run(preparer, keyless_policy(tmp_path, signer), f"{registry.host}/{repository}:latest",
                 "-log-level", "debug")  # fmt: skip
    assert result.code == 1
    said = f"Signature object referrer {referrer} is no image signature: {why}"
    assert said in result.stdout.splitlines(), result.stdout


@pytest.mark.parametrize("kind", OBJECTS)
def test_beside_an_image_signature_it_neither_counts_nor_refuses(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    registry: Registry,
    signer: Signer,
    kind: str,
) -> None:
    """The control of the tests above: the same registry, policy and signer install the image once it also has a
    cosign image signature (so the refusal above was the object's kind); and that object, listed first, is not
    reported as the signature."""
    repository, digest = push_image(registry, tmp_path)
    make, _ = OBJECTS[kind]
    attach_bundle(registry, repository, digest, make(registry, repository, digest, signer))
    bundle_keyless(registry, repository, digest, signer)
    report = tmp_path / "report.toml"
    result = run(preparer, keyless_policy(tmp_path, signer), f"{registry.host}/{repository}:latest",
                 "-prepare-report", str(report))  # fmt: skip
    assert result.code == 0, result.stderr
    assert installed(layout)
    assert f'subject = "{WORKFLOW}"' in report.read_text()
