"""Anchors and intermediates only from the trusted root (issue 48): a keyless signature whose leaf a Fulcio
intermediate issued that the trusted root retired before the signing time, or never listed, is refused even when
the signature's own chain offers that intermediate under a root the trusted root still trusts.

Each signature is made whole as cosign makes it (a ``.sig`` layer with its certificate, chain and Rekor bundle
annotations; a Sigstore bundle v0.1 with its ``x509CertificateChain``), read by the evidence reader and verified
whole (``verify``), with a Sigstore of the tests' own (tests/keyless.py).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from preparer.policy.keyless.evidence import from_bundle, from_cosign_layer
from preparer.policy.keyless.model import Evidence, KeylessProblem, TrustedRoot
from preparer.policy.keyless.root import load_root
from preparer.policy.keyless.verify import verify
from tests.keyless import GITHUB_ISSUER, T0, WORKFLOW, YEAR, Leaf, Sigstore, b64, der, new_key, rfc3339
from tests.keyless_log import pem
from tests.keyless_sign import Signer, cosign_annotations, keyless_bundle, make_signer
from tests.plugins.signing import simple_signing, statement

DIGEST = "sha256:" + "ab" * 32
DAY = 86400


def intermediate(sigstore: Sigstore, name: str) -> tuple[x509.Certificate, Any]:
    """Another Fulcio intermediate under the instance's root, as Fulcio's own is made; and its key."""
    key = new_key("p384")
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sigstore.test"),
                         x509.NameAttribute(NameOID.COMMON_NAME, name)])  # fmt: skip
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(sigstore.root.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(sigstore.root.not_valid_before_utc)
        .not_valid_after(sigstore.root.not_valid_after_utc)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(sigstore.root_key.public_key()), critical=False
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False)
        .sign(sigstore.root_key, hashes.SHA384())
    )
    return cert, key


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Signer:
    return make_signer(tmp_path_factory.mktemp("sigstore"))


@pytest.fixture(scope="module")
def retired(signer: Signer) -> tuple[x509.Certificate, Any]:
    return intermediate(signer.sigstore, "sigstore-test-intermediate-retired")


def root_with(signer: Signer, tmp_path: Path, extra: x509.Certificate | None = None) -> TrustedRoot:
    """The signer's trusted root; with ``extra``, also an authority of that intermediate (under the same root)
    that the root retired the day before the signing time."""
    doc = signer.sigstore.trusted_root_doc()
    if extra is not None:
        doc["certificateAuthorities"].insert(0, {
            "subject": {"organization": "sigstore.test", "commonName": "sigstore-test"},
            "uri": "https://fulcio-old.sigstore.test",
            "certChain": {"certificates": [{"rawBytes": b64(der(c))} for c in (extra, signer.sigstore.root)]},
            "validFor": {"start": rfc3339(T0 - YEAR), "end": rfc3339(T0 - DAY)},
        })  # fmt: skip
    path = tmp_path / "trusted_root.json"
    path.write_text(json.dumps(doc))
    return load_root(path)


def leaf_of(signer: Signer, issuing: tuple[x509.Certificate, Any] | None) -> Leaf:
    """A Fulcio leaf for the tests' workflow at T0, issued by ``issuing`` (the instance's own intermediate when
    ``None``), its SCT signed by the CT log the root trusts."""
    sigstore = signer.sigstore
    if issuing is not None:
        sigstore = dataclasses.replace(sigstore, intermediate=issuing[0], ca_key=issuing[1])
    return sigstore.leaf(not_before=T0 - 60)


def cosign_layer(signer: Signer, leaf: Leaf, chain: tuple[x509.Certificate, ...]) -> Evidence:
    """A keyless ``.sig`` layer as cosign v2 makes it, its chain annotation offering ``chain``."""
    payload = simple_signing("registry.example/acme/bp", DIGEST)
    signature = leaf.sign(payload)
    annotations = cosign_annotations(signer, leaf, payload, signature, "".join(pem(der(c)) for c in chain))
    found = from_cosign_layer(payload, b64(signature), annotations, "the .sig layer 1")
    assert found is not None
    return found


def bundle_v01(signer: Signer, leaf: Leaf, chain: tuple[x509.Certificate, ...]) -> Evidence:
    """A Sigstore bundle v0.1 (a DSSE envelope, logged with its promise), its x509CertificateChain the leaf and
    ``chain``."""
    doc = json.loads(keyless_bundle(signer, statement("registry.example/acme/bp", DIGEST), leaf))
    doc["mediaType"] = "application/vnd.dev.sigstore.bundle+json;version=0.1"
    material = doc["verificationMaterial"]
    del material["certificate"]
    material["x509CertificateChain"] = {"certificates": [{"rawBytes": b64(d)}
                                                         for d in (leaf.der, *(der(c) for c in chain))]}  # fmt: skip
    return from_bundle(json.dumps(doc).encode(), "referrer sha256:...")


FORMATS = pytest.mark.parametrize(
    "make", [cosign_layer, bundle_v01], ids=["cosign chain annotation", "bundle v0.1"]
)


@FORMATS
def test_a_leaf_of_the_roots_own_intermediate_verifies(signer: Signer, tmp_path: Path, make: Any) -> None:
    """The control: the same signature, its leaf issued by the intermediate the root trusts at the signing time."""
    found = make(signer, leaf_of(signer, None), (signer.sigstore.intermediate, signer.sigstore.root))
    verdict = verify(found, root_with(signer, tmp_path))
    assert (verdict.issuer, verdict.subject, verdict.signed_at) == (GITHUB_ISSUER, WORKFLOW, T0)


@FORMATS
def test_a_leaf_of_an_intermediate_the_root_retired_is_refused_though_its_chain_offers_it(
    signer: Signer, retired: tuple[x509.Certificate, Any], tmp_path: Path, make: Any
) -> None:
    found = make(signer, leaf_of(signer, retired), (retired[0], signer.sigstore.root))
    root = root_with(signer, tmp_path, retired[0])
    with pytest.raises(KeylessProblem) as caught:
        verify(found, root)
    said = str(caught.value)
    issuer = "CN=sigstore-test-intermediate-retired,O=sigstore.test"
    assert said.startswith(
        f"the certificate (issued by {issuer}) does not chain to a certificate authority of the trusted root "
        f"{root.path} valid at the signing time 2023-11-14T22:13:20Z ("
    )
    assert said.endswith(
        f": its issuer {issuer} is a certificate of the trusted root's authority (https://fulcio-old.sigstore.test) "
        "valid from 2022-11-14T22:13:20Z to 2023-11-13T22:13:20Z, not at the signing time; the signature's own chain "
        "cannot make it count"
    )


@FORMATS
def test_a_leaf_of_an_intermediate_the_root_never_listed_is_refused_though_its_chain_offers_it(
    signer: Signer, retired: tuple[x509.Certificate, Any], tmp_path: Path, make: Any
) -> None:
    found = make(signer, leaf_of(signer, retired), (retired[0], signer.sigstore.root))
    with pytest.raises(KeylessProblem) as caught:
        verify(found, root_with(signer, tmp_path))
    assert str(caught.value).endswith(
        ": its issuer CN=sigstore-test-intermediate-retired,O=sigstore.test is offered by the signature's own chain, "
        "and the trusted root does not list it; only the trusted root's certificates are anchors and intermediates"
    )
