"""The leaf certificate of a keyless signature: its chain at the signing time, its SCT, its identity and its
signature (preparer/policy/keyless/certs.py), on certificates minted here (tests/keyless.py) and on real ones."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest

from preparer.policy.keyless.certs import (
    chain_to_authority,
    identity,
    issued_by,
    verify_sct,
    verify_signature,
)
from preparer.policy.keyless.model import KeylessProblem, TrustedRoot
from preparer.policy.keyless.root import load_root
from tests.keyless import GITHUB_ISSUER, T0, WORKFLOW, YEAR, Sigstore, der, make_sigstore, new_key

DATA = Path(__file__).resolve().parent.parent / "data" / "sigstore"


@pytest.fixture(scope="module")
def sigstore() -> Sigstore:
    return make_sigstore()


@pytest.fixture(scope="module")
def other() -> Sigstore:
    """Another Sigstore instance, with CAs and keys of its own (an attacker's, or staging's)."""
    return make_sigstore(name="other")


@pytest.fixture
def root(sigstore: Sigstore, tmp_path: Path) -> TrustedRoot:
    return load_root(sigstore.trusted_root(tmp_path / "trusted_root.json"))


# The chain, at the signing time.


def test_a_leaf_chains_to_the_ca_at_the_signing_time(sigstore: Sigstore, root: TrustedRoot) -> None:
    leaf = sigstore.leaf()
    assert chain_to_authority(leaf.der, (), root, T0) == root.authorities[0]
    # The leaf lives ten minutes, long gone by now: what matters is the signing time.
    assert chain_to_authority(leaf.der, (), root, T0 + 539) == root.authorities[0]


@pytest.mark.parametrize("at", [T0 - 61, T0 + 541])
def test_a_leaf_not_valid_at_the_signing_time_is_refused(
    sigstore: Sigstore, root: TrustedRoot, at: int
) -> None:
    leaf = sigstore.leaf()  # valid from T0 - 60 to T0 + 540
    with pytest.raises(KeylessProblem) as caught:
        chain_to_authority(leaf.der, (), root, at)
    assert str(caught.value) == (
        "the certificate was not valid at the signing time "
        + ("2023-11-14T22:12:19Z" if at < T0 else "2023-11-14T22:22:21Z")
        + " (it was valid from 2023-11-14T22:12:20Z to 2023-11-14T22:22:20Z)"
    )


def test_a_leaf_of_another_ca_is_refused(other: Sigstore, root: TrustedRoot) -> None:
    with pytest.raises(
        KeylessProblem, match=r"issued by CN=other-intermediate.*does not chain to a certificate"
    ):
        chain_to_authority(other.leaf().der, (), root, T0)


def test_a_chain_the_signature_gives_is_no_trust_anchor(other: Sigstore, root: TrustedRoot) -> None:
    """The signature object may bring its own chain, root included: it still chains to nothing the root trusts."""
    with pytest.raises(KeylessProblem, match="does not chain to a certificate authority of the trusted root"):
        chain_to_authority(other.leaf().der, other.chain, root, T0)


def test_a_given_intermediate_never_serves_below_the_roots_anchor(sigstore: Sigstore, tmp_path: Path) -> None:
    """Issue 48: the trusted root's certificates are the only anchors and intermediates; an intermediate the
    signature's chain brings (cosign's chain annotation, a bundle v0.1's chain) adds none, however it is given."""
    doc = sigstore.trusted_root_doc()
    del doc["certificateAuthorities"][0]["certChain"]["certificates"][0]  # the root only, no intermediate
    path = tmp_path / "root-only.json"
    path.write_text(json.dumps(doc))
    root = load_root(path)
    leaf = sigstore.leaf()
    with pytest.raises(KeylessProblem, match="does not chain"):
        chain_to_authority(leaf.der, (), root, T0)
    # A bundle's x509CertificateChain lists the leaf first.
    for given in ((der(sigstore.intermediate),), (leaf.der, der(sigstore.intermediate), der(sigstore.root))):
        with pytest.raises(
            KeylessProblem, match="is offered by the signature's own chain, and the trusted root"
        ):
            chain_to_authority(leaf.der, given, root, T0)
    with pytest.raises(KeylessProblem, match=r"certificate 0 of the signature's chain is not a DER X.509"):
        chain_to_authority(leaf.der, (b"junk",), root, T0)


@pytest.mark.parametrize("window", [(T0 + 1, None), (T0 - YEAR, T0 - 1)])
def test_a_ca_whose_window_does_not_hold_the_signing_time_is_refused(
    sigstore: Sigstore, tmp_path: Path, window: tuple[int, int | None]
) -> None:
    root = load_root(sigstore.trusted_root(tmp_path / "root.json", ca_window=window))
    with pytest.raises(KeylessProblem) as caught:
        chain_to_authority(sigstore.leaf().der, (), root, T0)
    assert str(caught.value) == (
        f"no certificate authority of the trusted root {root.path} was valid at the signing time 2023-11-14T22:13:20Z"
    )


def test_of_two_cas_only_the_one_valid_at_the_signing_time_counts(
    sigstore: Sigstore, other: Sigstore, tmp_path: Path
) -> None:
    doc = sigstore.trusted_root_doc(ca_window=(T0 - YEAR, T0 - 1))
    doc["certificateAuthorities"] += other.trusted_root_doc()["certificateAuthorities"]
    path = tmp_path / "two.json"
    path.write_text(json.dumps(doc))
    root = load_root(path)
    leaf = sigstore.leaf(not_before=T0 - 300)
    assert chain_to_authority(leaf.der, (), root, T0 - 1) == root.authorities[0]
    with pytest.raises(KeylessProblem, match=r"issued by CN=sigstore-test-intermediate.*does not chain"):
        chain_to_authority(leaf.der, (), root, T0)
    assert chain_to_authority(other.leaf().der, (), root, T0) == root.authorities[1]


def test_a_ca_certificate_expired_at_the_signing_time_is_refused(tmp_path: Path) -> None:
    """The CA's certificates are valid for ten years: eleven years on, the path does not validate then, though the
    trusted root's window (no end) holds the time."""
    old = make_sigstore(start=T0 - 11 * YEAR)
    root = load_root(old.trusted_root(tmp_path / "old.json"))
    with pytest.raises(KeylessProblem, match="cert is not valid at validation time"):
        chain_to_authority(old.leaf().der, (), root, T0)


@pytest.mark.parametrize(
    ("options", "cause"),
    [
        (
            {"code_signing": False},
            "the certificate's extended key usage lacks codeSigning: it is not for signing code",
        ),
        ({"digital_signature": False}, "the certificate's key usage lacks digitalSignature: it may not sign"),
        ({"is_ca": True}, "the certificate is a CA certificate, not a signer's"),
    ],
)
def test_a_leaf_outside_the_sigstore_profile_is_refused(
    sigstore: Sigstore, root: TrustedRoot, options: dict[str, bool], cause: str
) -> None:
    with pytest.raises(KeylessProblem) as caught:
        chain_to_authority(sigstore.leaf(**options).der, (), root, T0)  # type: ignore[arg-type]
    assert str(caught.value) == cause


def test_a_leaf_that_is_not_a_certificate_is_refused(root: TrustedRoot) -> None:
    with pytest.raises(KeylessProblem, match=r"^the certificate is not a DER X.509 certificate"):
        chain_to_authority(b"\x30\x03\x02\x01\x01", (), root, T0)


# The SCT.


def test_the_embedded_sct_verifies(sigstore: Sigstore, root: TrustedRoot) -> None:
    leaf = sigstore.leaf()
    issuer = issued_by(leaf.der, root.authorities[0].chain)
    assert issuer == der(sigstore.intermediate)
    verify_sct(leaf.der, issuer, root)


def test_a_leaf_without_an_sct_is_refused(sigstore: Sigstore, root: TrustedRoot) -> None:
    with pytest.raises(KeylessProblem, match="has no embedded SCT: it was not logged"):
        verify_sct(sigstore.leaf(sct=False).der, der(sigstore.intermediate), root)


def test_a_forged_sct_is_refused(sigstore: Sigstore, root: TrustedRoot) -> None:
    """Signed by another key, under the CT log's id."""
    leaf = sigstore.leaf(sct_key=new_key(), sct_log_id=sigstore.ct_log_id)
    with pytest.raises(KeylessProblem) as caught:
        verify_sct(leaf.der, der(sigstore.intermediate), root)
    assert str(caught.value) == (
        "the signature of the certificate's SCT does not verify with the key of the CT log "
        "https://ctfe.sigstore.test/2022"
    )


def test_an_sct_for_another_issuer_is_refused(sigstore: Sigstore, root: TrustedRoot) -> None:
    """The SCT signs the issuer's key hash: given the root as the issuer, it does not verify."""
    with pytest.raises(KeylessProblem, match="does not verify with the key of the CT log"):
        verify_sct(sigstore.leaf().der, der(sigstore.root), root)


def test_an_sct_of_a_log_the_root_does_not_name_is_refused(sigstore: Sigstore, root: TrustedRoot) -> None:
    key = new_key()
    leaf = sigstore.leaf(sct_key=key)
    with pytest.raises(
        KeylessProblem, match=r"from a CT log the trusted root .* does not name \(log id [0-9a-f]{64}\)"
    ):
        verify_sct(leaf.der, der(sigstore.intermediate), root)


def test_an_sct_outside_the_logs_window_is_refused(sigstore: Sigstore, tmp_path: Path) -> None:
    root = load_root(sigstore.trusted_root(tmp_path / "root.json", ct_window=(T0 - YEAR, T0 - 61)))
    with pytest.raises(KeylessProblem) as caught:
        verify_sct(sigstore.leaf().der, der(sigstore.intermediate), root)  # the SCT is of T0 - 60
    assert str(caught.value) == (
        "the certificate's SCT is from the CT log https://ctfe.sigstore.test/2022, not trusted at its time "
        "2023-11-14T22:12:20Z"
    )


def test_the_issuer_is_found_among_the_candidates(sigstore: Sigstore, other: Sigstore) -> None:
    leaf = sigstore.leaf()
    assert issued_by(leaf.der, (der(sigstore.root), *other.chain, der(sigstore.intermediate))) == der(
        sigstore.intermediate
    )
    with pytest.raises(KeylessProblem, match="no certificate of the chain issued the certificate"):
        issued_by(leaf.der, (der(sigstore.root), *other.chain))


# The identity.


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({}, (GITHUB_ISSUER, WORKFLOW)),
        ({"issuer_extension": "v1"}, (GITHUB_ISSUER, WORKFLOW)),
        ({"subject_kind": "email", "subject": "alice@example.com", "issuer": "https://accounts.google.com"},
         ("https://accounts.google.com", "alice@example.com")),
        ({"subject_kind": "username", "subject": "alice", "issuer": "https://oidc.example"},
         ("https://oidc.example", "alice")),
        ({"issuer": "https://issuer.example/" + "x" * 300}, ("https://issuer.example/" + "x" * 300, WORKFLOW)),
    ],
)  # fmt: skip
def test_the_identity_reads(sigstore: Sigstore, options: dict[str, str], expected: tuple[str, str]) -> None:
    assert identity(sigstore.leaf(**options).der) == expected  # type: ignore[arg-type]


def test_a_leaf_without_an_issuer_is_refused(sigstore: Sigstore) -> None:
    with pytest.raises(KeylessProblem, match="names no OIDC issuer"):
        identity(sigstore.leaf(issuer=None).der)


def test_a_leaf_without_a_san_is_refused(sigstore: Sigstore) -> None:
    with pytest.raises(KeylessProblem, match=r"names no signer \(it has no Subject Alternative Name\)"):
        identity(sigstore.leaf(san=False).der)


# The signature.


@pytest.mark.parametrize("kind", ["p256", "p384", "ed25519"])
def test_a_signature_verifies_with_the_leafs_key(sigstore: Sigstore, kind: str) -> None:
    leaf = sigstore.leaf(key_kind=kind)
    signature = leaf.sign(b"payload")
    verify_signature(leaf.der, signature, b"payload")
    with pytest.raises(KeylessProblem, match=r"^the signature does not verify with the certificate's key$"):
        verify_signature(leaf.der, signature, b"payloaD")
    with pytest.raises(KeylessProblem, match="does not verify"):
        verify_signature(sigstore.leaf(key_kind=kind).der, signature, b"payload")  # another leaf's key
    with pytest.raises(KeylessProblem, match="does not verify"):
        verify_signature(leaf.der, b"not a signature", b"payload")


# Real material: Sigstore's production and staging instances (tests/data/sigstore/PROVENANCE.md).


def _bundle_leaf(name: str) -> tuple[bytes, bytes, int]:
    """The leaf, the signature and the log's integrated time of a bundle of tests/data/sigstore."""
    bundle = json.loads((DATA / name).read_text())
    material = bundle["verificationMaterial"]
    cert = (
        material["certificate"]
        if "certificate" in material
        else material["x509CertificateChain"]["certificates"][0]
    )
    signature = base64.b64decode(bundle["messageSignature"]["signature"])
    return base64.b64decode(cert["rawBytes"]), signature, int(material["tlogEntries"][0]["integratedTime"])


def test_a_real_github_leaf_verifies_at_its_signing_time() -> None:
    root = load_root(DATA / "trusted_root.json")
    leaf, signature, at = _bundle_leaf("bundle_v3_github.whl.sigstore")
    authority = chain_to_authority(leaf, (), root, at)
    assert authority == root.authorities[1]  # the CA of 2022 on; the first one's window ended in 2022
    verify_sct(leaf, issued_by(leaf, authority.chain), root)
    assert identity(leaf) == (
        "https://token.actions.githubusercontent.com",
        "https://github.com/trailofbits/rfc8785.py/.github/workflows/release.yml@refs/tags/v0.1.2",
    )
    verify_signature(leaf, signature, (DATA / "bundle_v3_github.whl").read_bytes())
    with pytest.raises(KeylessProblem, match="does not verify"):
        verify_signature(leaf, signature, (DATA / "bundle_v3.txt").read_bytes())
    with pytest.raises(KeylessProblem, match="not valid at the signing time 2024-03-19T23:41:16Z"):
        chain_to_authority(leaf, (), root, at + 3600)


def test_a_real_staging_leaf_verifies_with_staging_and_not_with_production() -> None:
    production = load_root(DATA / "trusted_root.json")
    staging = load_root(DATA / "trusted_root.staging.json")
    leaf, signature, at = _bundle_leaf("bundle_v3.txt.sigstore")
    authority = chain_to_authority(leaf, (), staging, at)
    verify_sct(leaf, issued_by(leaf, authority.chain), staging)
    assert identity(leaf) == ("https://github.com/login/oauth", "william@yossarian.net")
    verify_signature(leaf, signature, (DATA / "bundle_v3.txt").read_bytes())
    with pytest.raises(KeylessProblem, match="does not chain to a certificate authority of the trusted root"):
        chain_to_authority(leaf, (), production, at)
    with pytest.raises(KeylessProblem, match=r"from a CT log the trusted root .* does not name"):
        verify_sct(leaf, issued_by(leaf, authority.chain), production)


def test_importing_the_modules_imports_no_cryptography() -> None:
    """Runs that verify no keyless signature do not pay for loading cryptography."""
    code = (
        "import sys, preparer.policy.keyless.root, preparer.policy.keyless.certs\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'cryptography'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"
