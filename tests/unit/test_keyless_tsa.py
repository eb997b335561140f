"""RFC 3161 timestamps (preparer/policy/keyless/tsa.py), and keyless verification when a timestamp is the proof of
time (verify.py): real Sigstore timestamps verify at their genTime; one for another signature, from an authority the
trusted root does not name or did not trust then, or altered, is refused with the reason."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from preparer.policy.keyless import evidence, tsa
from preparer.policy.keyless.model import Evidence, KeylessProblem, TrustedRoot
from preparer.policy.keyless.root import parse_root
from preparer.policy.keyless.verify import verify
from tests.keyless_log import DATA

#: genTime of the real timestamps: 2024-10-31T10:23:39Z (the test TSA), 2025-06-09T11:57:38Z and
#: 2026-05-13T19:23:33Z (Sigstore's staging TSA).
TSA_BUNDLE_TIME, REKOR2_TIME, REKOR2_DSSE_TIME = 1730370219, 1749470258, 1778700213


def doc(name: str) -> dict[str, Any]:
    """The trusted root in ``tests/data/sigstore/tlog/<name>`` (or the one a trust config holds), as JSON."""
    found: dict[str, Any] = json.loads((DATA / name).read_bytes())
    inner: dict[str, Any] = found.get("trustedRoot", found)
    return inner


def root(document: dict[str, Any], path: str = "trusted_root.json") -> TrustedRoot:
    return parse_root(json.dumps(document).encode(), path)


def tsa_root() -> TrustedRoot:
    """The trust config of ``tsa/bundle.txt.sigstore`` with the test TSA that signed it (``tsa/ca.json``)."""
    document = doc("tsa/trust_config.json")
    document["timestampAuthorities"] = [json.loads((DATA / "tsa/ca.json").read_bytes())]
    return root(document)


def read(bundle: str, artifact: str | None = None) -> Evidence:
    return evidence.from_bundle(
        (DATA / bundle).read_bytes(), bundle, artifact=(DATA / artifact).read_bytes() if artifact else None
    )


TSA_BUNDLE = ("tsa/bundle.txt.sigstore", "tsa/bundle.txt")
REKOR2 = ("staging-rekor-v2.txt.sigstore.json", "staging-rekor-v2.txt")
REKOR2_DSSE = ("a.dsse.staging-rekor-v2.txt.sigstore.json", None)


@pytest.mark.parametrize(
    ("bundle", "staging", "at"),
    [
        (
            TSA_BUNDLE,
            False,
            TSA_BUNDLE_TIME,
        ),  # its chain: leaf, intermediate, root; the token carries the leaf
        (REKOR2, True, REKOR2_TIME),
        (REKOR2_DSSE, True, REKOR2_DSSE_TIME),  # a token without certificates: the leaf is the root's
    ],
)
def test_real_timestamps_verify_at_their_gen_time(
    bundle: tuple[str, str | None], staging: bool, at: int
) -> None:
    found = read(*bundle)
    trusted = root(doc("trusted_root.staging.json")) if staging else tsa_root()
    assert tsa.verify_timestamp(found.timestamps[0], found.signature, trusted) == at


def test_a_time_stamp_token_without_its_response_verifies_too() -> None:
    found = read(*REKOR2)
    response = found.timestamps[0]
    assert response[:2] == b"\x30\x82" and response[4:9] == b"\x30\x03\x02\x01\x00"  # status: granted
    token = response[9:]  # the ContentInfo alone
    assert tsa.verify_timestamp(token, found.signature, root(doc("trusted_root.staging.json"))) == REKOR2_TIME


def test_a_sha512_imprint_is_checked_with_sha512() -> None:
    # The second timestamp of the real bundle is the test TSA's SHA-512 timestamp of the message "hello".
    stamp = read(*TSA_BUNDLE).timestamps[1]
    assert tsa.verify_timestamp(stamp, b"hello", tsa_root()) == 1730381504  # 2024-10-31T13:31:44Z
    with pytest.raises(
        KeylessProblem, match=r"for another signature \(its message imprint is not the SHA512"
    ):
        tsa.verify_timestamp(stamp, read(*TSA_BUNDLE).signature, tsa_root())


def test_a_timestamp_of_another_signature_is_refused() -> None:
    found = read(*REKOR2)
    other = read(*REKOR2_DSSE).signature
    with pytest.raises(
        KeylessProblem,
        match=r"^the RFC 3161 timestamp is for another signature \(its message imprint is not the SHA256 of this "
        r"signature\)$",
    ):
        tsa.verify_timestamp(found.timestamps[0], other, root(doc("trusted_root.staging.json")))


def test_a_timestamp_authority_the_root_does_not_name_is_refused() -> None:
    found = read(*TSA_BUNDLE)
    # The real trust config names another test TSA (a leaf and chain of its own), not the one that signed.
    with pytest.raises(
        KeylessProblem,
        match=r"the RFC 3161 timestamp of 2024-10-31T10:23:39Z is not signed by a timestamp authority of the "
        r"trusted root trusted_root.json \(O=local,CN=Test TSA Timestamping: its certificate chain does not verify "
        r"at its time: unable to get local issuer certificate\)$",
    ):
        tsa.verify_timestamp(found.timestamps[0], found.signature, root(doc("tsa/trust_config.json")))
    # Sigstore's production TSA did not sign the staging one's timestamp: the chain finds no issuer.
    staging = read(*REKOR2)
    with pytest.raises(
        KeylessProblem,
        match=r"https://timestamp.sigstore.dev/api/v1/timestamp: its certificate chain does not verify",
    ):
        tsa.verify_timestamp(
            staging.timestamps[0], staging.signature, root(doc("trusted_root.production.json"))
        )


def test_a_root_without_timestamp_authorities_is_refused() -> None:
    found, document = read(*REKOR2), doc("trusted_root.staging.json")
    document["timestampAuthorities"] = []
    with pytest.raises(
        KeylessProblem, match=r"the trusted root trusted_root.json names no timestamp authority"
    ):
        tsa.verify_timestamp(found.timestamps[0], found.signature, root(document))


@pytest.mark.parametrize(
    ("valid_for", "shown"),
    [
        ({"start": "2024-01-01T00:00:00Z", "end": "2024-10-31T10:23:38Z"}, "to 2024-10-31T10:23:38Z"),
        ({"start": "2024-10-31T10:23:40Z"}, "from 2024-10-31T10:23:40Z, to still in use"),
    ],
)
def test_an_authority_whose_window_does_not_hold_the_time_is_refused(
    valid_for: dict[str, str], shown: str
) -> None:
    found = read(*TSA_BUNDLE)
    authority = json.loads((DATA / "tsa/ca.json").read_bytes())
    authority["validFor"] = valid_for
    document = doc("tsa/trust_config.json")
    document["timestampAuthorities"] = [authority]
    with pytest.raises(
        KeylessProblem,
        match=r"the RFC 3161 timestamp's authority CN=Test TSA Timestamping,O=local was not valid at its time "
        rf"2024-10-31T10:23:39Z \(the trusted root's validFor: .*{shown}\)",
    ):
        tsa.verify_timestamp(found.timestamps[0], found.signature, root(document))


def test_an_altered_timestamp_is_refused() -> None:
    found = read(*TSA_BUNDLE)
    stamp, trusted = found.timestamps[0], tsa_root()
    # genTime one second earlier: the imprint still matches, the signed digest of the TSTInfo does not.
    assert stamp.count(b"20241031102339Z") == 1
    earlier = stamp.replace(b"20241031102339Z", b"20241031102338Z")
    with pytest.raises(KeylessProblem, match=r"the message digest it signs is not the digest of its TSTInfo"):
        tsa.verify_timestamp(earlier, found.signature, trusted)
    # The last byte of the CMS signature (the ECDSA s value) changed.
    forged = stamp[:-1] + bytes([stamp[-1] ^ 1])
    with pytest.raises(
        KeylessProblem, match=r"its CMS signature does not verify with the signing certificate"
    ):
        tsa.verify_timestamp(forged, found.signature, trusted)


def test_a_timestamp_not_granted_is_refused() -> None:
    found = read(*REKOR2)
    stamp = found.timestamps[0]
    rejected = stamp[:8] + b"\x02" + stamp[9:]  # PKIStatusInfo.status: rejection
    with pytest.raises(
        KeylessProblem, match=r"^the RFC 3161 timestamp was not granted \(its status is rejection\)$"
    ):
        tsa.verify_timestamp(rejected, found.signature, root(doc("trusted_root.staging.json")))


@pytest.mark.parametrize("token", [b"", b"not a timestamp", b"\x30\x82\xff\xff", "TRUNCATE"])
def test_what_is_no_timestamp_is_refused_without_a_traceback(token: bytes | str) -> None:
    found = read(*REKOR2)
    data = found.timestamps[0][:300] if token == "TRUNCATE" else token
    assert isinstance(data, bytes)
    with pytest.raises(
        KeylessProblem, match=r"^the RFC 3161 timestamp is not a DER TimeStampResp or TimeStampToken"
    ):
        tsa.verify_timestamp(data, found.signature, root(doc("trusted_root.staging.json")))


def test_a_huge_timestamp_is_refused_unread() -> None:
    with pytest.raises(KeylessProblem, match=r"larger than 65536 bytes"):
        tsa.verify_timestamp(b"\x30" * (tsa.MAX_TIMESTAMP_BYTES + 1), b"sig", tsa_root())


# -- verify(): a timestamp as the proof of time -------------------------------------------------------------------


@pytest.mark.parametrize(("bundle", "at"), [(REKOR2, REKOR2_TIME), (REKOR2_DSSE, REKOR2_DSSE_TIME)])
def test_a_rekor_v2_bundle_verifies_with_its_timestamp(bundle: tuple[str, str | None], at: int) -> None:
    found = read(*bundle)
    assert found.entries[0].integrated_time is None  # Rekor v2: the timestamp is the only proof of time
    verdict = verify(found, root(doc("trusted_root.staging.json")))
    assert verdict.signed_at == at
    assert verdict.log_index == found.entries[0].log_index
    assert verdict.issuer and verdict.subject


def test_a_rekor_v2_checkpoint_is_checked_with_the_log_key_valid_at_the_timestamp() -> None:
    found, document = read(*REKOR2), doc("trusted_root.staging.json")
    (log,) = [t for t in document["tlogs"] if t["baseUrl"] == "https://log2025-alpha1.rekor.sigstage.dev"]
    log["publicKey"]["validFor"]["end"] = "2025-06-09T11:57:37Z"  # a second before the TSA's time
    with pytest.raises(
        KeylessProblem,
        match=r"the key of log https://log2025-alpha1.rekor.sigstage.dev was not valid at 2025-06-09T11:57:38Z",
    ):
        verify(found, root(document))


def test_a_rekor_v2_bundle_whose_timestamp_is_refused_has_no_verified_time() -> None:
    found, document = read(*REKOR2), doc("trusted_root.staging.json")
    document["timestampAuthorities"] = doc("trusted_root.production.json")["timestampAuthorities"]
    with pytest.raises(
        KeylessProblem,
        match=r"^no verified signing time: no signed entry timestamp from Rekor, and its RFC 3161 timestamp "
        r"1 is refused: the RFC 3161 timestamp of 2025-06-09T11:57:38Z is not signed by a timestamp authority",
    ):
        verify(found, root(document))


def test_a_rekor_v2_bundle_without_a_timestamp_has_no_verified_time() -> None:
    import dataclasses

    found = dataclasses.replace(read(*REKOR2), timestamps=())
    with pytest.raises(KeylessProblem, match=r"^no verified signing time: no signed entry timestamp"):
        verify(found, root(doc("trusted_root.staging.json")))


def test_a_bundle_with_a_promise_and_timestamps_is_checked_at_each_verified_time() -> None:
    found = read(*TSA_BUNDLE)
    # The signed entry timestamp and the first timestamp verify (both 10:23:39Z); the second timestamp is of
    # another message: like sigstore's verifiers, a timestamp that does not verify proves nothing and is not counted.
    assert verify(found, tsa_root()).signed_at == TSA_BUNDLE_TIME
    # With a root whose TSA did not sign any of them, the signed entry timestamp still proves the time.
    assert verify(found, root(doc("tsa/trust_config.json"))).signed_at == TSA_BUNDLE_TIME


def test_the_certificate_is_checked_at_the_timestamp_s_time() -> None:
    found, document = read(*REKOR2), doc("trusted_root.staging.json")
    (fulcio,) = document["certificateAuthorities"]
    fulcio["validFor"]["end"] = "2025-06-09T11:57:37Z"  # a second before the TSA's time
    with pytest.raises(
        KeylessProblem,
        match=r"^no certificate authority of the trusted root trusted_root.json was valid at the signing time "
        r"2025-06-09T11:57:38Z$",
    ):
        verify(found, root(document))


def test_the_timestamp_bytes_are_what_the_bundle_carries() -> None:
    # The reader hands the DER of signedTimestamp over unchanged: what the tests above edit is what bundles hold.
    bundle = json.loads((DATA / REKOR2[0]).read_bytes())
    (stamp,) = bundle["verificationMaterial"]["timestampVerificationData"]["rfc3161Timestamps"]
    assert read(*REKOR2).timestamps == (base64.b64decode(stamp["signedTimestamp"]),)
