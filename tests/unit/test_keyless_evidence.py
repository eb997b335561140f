"""Keyless signature objects read into evidence (preparer/policy/keyless/evidence.py): real bundles of each media
type and cosign ``.sig`` annotations are read; malformed ones are refused, naming the field at fault."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest

from preparer.policy.keyless import evidence, tlog
from preparer.policy.keyless.model import Evidence, KeylessProblem
from preparer.policy.payload import pae
from tests.keyless_log import DATA, Log, hashedrekord, pem, real_root


def bundle(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / name).read_bytes())
    return doc


def read(doc: dict[str, Any], artifact: bytes | None = b"") -> Evidence:
    return evidence.from_bundle(json.dumps(doc).encode(), "referrer sha256:ab", artifact=artifact)


@pytest.mark.parametrize(
    ("name", "artifact", "chain", "index"),
    [
        ("bundle.txt.sigstore", "bundle.txt", 0, 7390977),
        ("bundle_v3.txt.sigstore", "bundle_v3.txt", 0, 25915956),
        ("bundle_v3_alt.txt.sigstore", "bundle_v3_alt.txt", 0, 25915997),
    ],
)
def test_message_signature_bundles_of_each_version_are_read(
    name: str, artifact: str, chain: int, index: int
) -> None:
    data = (DATA / artifact).read_bytes()
    found = evidence.from_bundle((DATA / name).read_bytes(), "referrer sha256:ab", artifact=data)
    doc = bundle(name)
    signed = doc["messageSignature"]
    assert found.signature == base64.b64decode(signed["signature"])
    assert found.message == data
    assert found.envelope is None and found.found == "referrer sha256:ab"
    assert len(found.chain) == chain and found.leaf[:2] == b"\x30\x82"  # a DER SEQUENCE
    (entry,) = found.entries
    assert entry.log_index == index and entry.kind == "hashedrekord" and entry.version == "0.0.1"
    assert entry.integrated_time == int(doc["verificationMaterial"]["tlogEntries"][0]["integratedTime"])
    assert entry.proof is not None and entry.proof.tree_size > entry.proof.log_index


def test_a_dsse_bundle_s_message_is_the_pae_of_its_envelope() -> None:
    doc = bundle("dsse_v001.sigstore.json")
    found = read(doc, None)
    envelope = doc["dsseEnvelope"]
    assert found.message == pae(envelope["payloadType"], base64.b64decode(envelope["payload"]))
    assert found.signature == base64.b64decode(envelope["signatures"][0]["sig"])
    assert found.envelope == envelope and found.timestamps == ()


def test_timestamps_and_rekor_v2_entries_are_read() -> None:
    found = read(bundle("staging-rekor-v2.txt.sigstore.json"), (DATA / "staging-rekor-v2.txt").read_bytes())
    (entry,) = found.entries
    assert entry.integrated_time is None and entry.promise is None and entry.version == "0.0.2"
    assert len(found.timestamps) == 1 and found.timestamps[0][:1] == b"\x30"


def test_a_bundle_with_a_public_key_is_not_keyless() -> None:
    doc = bundle("bundle_v3.txt.sigstore")
    doc["verificationMaterial"] = {
        "publicKey": {"hint": "abc"},
        "tlogEntries": doc["verificationMaterial"]["tlogEntries"],
    }
    with pytest.raises(
        KeylessProblem, match=r"signed with a public key, not a certificate: it is not keyless"
    ):
        read(doc)


def test_a_v0_2_bundle_without_a_checkpoint_is_refused() -> None:
    with pytest.raises(KeylessProblem, match=r"tlogEntries\[0\] has no inclusion proof with a checkpoint"):
        evidence.from_bundle((DATA / "bundle_no_checkpoint.txt.sigstore").read_bytes(), "x", artifact=b"")


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    target: Any = doc
    names = path.split(".")
    for name in names[:-1]:
        target = target[int(name)] if isinstance(target, list) else target[name]
    if value is KeyError:
        del target[names[-1]]
    else:
        target[names[-1]] = value
    return doc


ENTRY = "verificationMaterial.tlogEntries.0"


@pytest.mark.parametrize(
    ("path", "value", "cause"),
    [
        (
            "mediaType",
            "application/vnd.dev.sigstore.bundle+json;version=0.4",
            "media type '.*version=0.4' is not",
        ),
        (f"{ENTRY}.logIndex", "12a", r"tlogEntries\[0\].logIndex is not a whole number"),
        (f"{ENTRY}.logIndex", "-1", "logIndex is not a whole number"),
        (f"{ENTRY}.logIndex", True, "logIndex is not a whole number"),
        (f"{ENTRY}.logIndex", "99999999999999999999", "logIndex is not a whole number"),
        (f"{ENTRY}.integratedTime", 1.5, "integratedTime is not a whole number"),
        (f"{ENTRY}.logId.keyId", "not base64!", "logId.keyId is not base64"),
        (f"{ENTRY}.canonicalizedBody", KeyError, "canonicalizedBody is missing"),
        (f"{ENTRY}.kindVersion", "hashedrekord", "kindVersion is not a JSON object"),
        (f"{ENTRY}.inclusionProof.rootHash", "AAAA", "rootHash is 3 bytes, not 32"),
        (f"{ENTRY}.inclusionProof.hashes", ["AAAA"], r"hashes\[0\] is 3 bytes, not 32"),
        (
            f"{ENTRY}.inclusionProof.hashes",
            [base64.b64encode(bytes(32)).decode()] * 65,
            "hashes has 65 items, more than 64",
        ),
        (f"{ENTRY}.inclusionProof.checkpoint", {"envelope": 5}, "checkpoint.envelope is not a string"),
        ("verificationMaterial.tlogEntries", [{}] * 17, "tlogEntries has 17 items, more than 16"),
        ("verificationMaterial.certificate", {"rawBytes": ""}, "certificate.rawBytes is missing"),
        ("verificationMaterial.x509CertificateChain", {"certificates": []}, "gives its leaf in certificate"),
        ("messageSignature.signature", KeyError, "messageSignature.signature is missing"),
        ("messageSignature", KeyError, "must hold one of dsseEnvelope and messageSignature"),
        ("dsseEnvelope", {}, "must hold one of dsseEnvelope and messageSignature"),
        ("messageSignature.messageDigest.algorithm", "SHA2_512", "messageDigest is of algorithm SHA2_512"),
    ],
)
def test_a_malformed_bundle_is_refused_naming_the_field(path: str, value: Any, cause: str) -> None:
    doc = _set(bundle("bundle_v3.txt.sigstore"), path, value)
    with pytest.raises(KeylessProblem, match=cause):
        read(doc, (DATA / "bundle_v3.txt").read_bytes())


def test_bundle_bounds_and_message_artifacts() -> None:
    doc = bundle("bundle.txt.sigstore")
    certificates = doc["verificationMaterial"]["x509CertificateChain"]["certificates"]
    doc["verificationMaterial"]["x509CertificateChain"]["certificates"] = certificates * 11
    with pytest.raises(KeylessProblem, match=r"certificates has 11 items, more than 10"):
        read(doc)
    with pytest.raises(KeylessProblem, match=r"signs an artifact it does not hold"):
        read(bundle("bundle_v3.txt.sigstore"), None)
    with pytest.raises(KeylessProblem, match=r"messageDigest is not the SHA-256 of the artifact"):
        read(bundle("bundle_v3.txt.sigstore"), b"another artifact")
    v1 = _set(bundle("bundle.txt.sigstore"), f"{ENTRY}.inclusionPromise", KeyError)
    with pytest.raises(KeylessProblem, match=r"no inclusion promise, which a bundle v0.1 must have"):
        read(v1, (DATA / "bundle.txt").read_bytes())
    dsse = bundle("dsse_v001.sigstore.json")
    dsse["dsseEnvelope"]["signatures"] *= 2
    with pytest.raises(KeylessProblem, match=r"signatures has 2 items, more than 1"):
        read(dsse)


@pytest.mark.parametrize(
    "data",
    [b"", b"[]", b'{"mediaType": 1}', b'{"a": 1, "a": 1}', b"\xff"],
)
def test_what_is_no_bundle_is_refused(data: bytes) -> None:
    with pytest.raises(KeylessProblem):
        evidence.from_bundle(data, "x")


# -- cosign .sig layers -------------------------------------------------------------------------------------------

PAYLOAD = (
    b'{"critical":{"identity":{"docker-reference":"r.example/bp"},"image":{"docker-manifest-digest":"sha256:'
    + b"a" * 64
    + b'"},"type":"cosign container image signature"},"optional":null}'
)


def cosign_layer(log: Log) -> tuple[dict[str, str], bytes, bytes]:
    leaf, signature = b"\x30\x82leaf-der", b"sig-der"
    entry = log.add(hashedrekord(signature, leaf, PAYLOAD))
    annotations = {
        evidence.CERTIFICATE: pem(leaf),
        evidence.CHAIN: pem(b"\x30\x82intermediate") + pem(b"\x30\x82root"),
        evidence.BUNDLE: json.dumps(
            {
                "SignedEntryTimestamp": base64.b64encode(entry.promise or b"").decode(),
                "Payload": {
                    "body": base64.b64encode(entry.body).decode(),
                    "integratedTime": entry.integrated_time,
                    "logIndex": entry.log_index,
                    "logID": entry.log_id.hex(),
                },
            }
        ),
    }
    return annotations, leaf, signature


def test_a_keyless_cosign_layer_is_read_and_its_entry_verifies() -> None:
    log = Log()
    annotations, leaf, signature = cosign_layer(log)
    found = evidence.from_cosign_layer(
        PAYLOAD, base64.b64encode(signature).decode(), annotations, "the .sig layer 1"
    )
    assert found is not None
    assert (found.leaf, found.chain, found.message, found.found) == (
        leaf,
        (b"\x30\x82intermediate", b"\x30\x82root"),
        PAYLOAD,
        "the .sig layer 1",
    )
    (entry,) = found.entries
    assert (entry.kind, entry.version, entry.proof) == ("hashedrekord", "0.0.1", None)
    assert tlog.verify_promise(entry, log.root()) == entry.integrated_time
    tlog.check_entry(entry, found)


def test_a_cosign_layer_without_a_certificate_is_keyed() -> None:
    assert evidence.from_cosign_layer(PAYLOAD, "c2ln", {}, "x") is None
    assert evidence.from_cosign_layer(PAYLOAD, "c2ln", {evidence.CERTIFICATE: ""}, "x") is None


def test_a_real_cosign_bundle_annotation_verifies_and_its_rekord_kind_is_named() -> None:
    annotation = (DATA / "cosign-bundle-annotation.json").read_text()
    annotations = {evidence.CERTIFICATE: pem(b"\x30\x82leaf"), evidence.BUNDLE: annotation}
    found = evidence.from_cosign_layer(PAYLOAD, "c2ln", annotations, "x")
    assert found is not None
    (entry,) = found.entries
    assert tlog.verify_promise(entry, real_root("trusted_root.production.json")) == 1634714717
    with pytest.raises(KeylessProblem, match=r"of kind rekord 0.0.1, which is not checked"):
        tlog.check_entry(entry, found)


@pytest.mark.parametrize(
    ("change", "cause"),
    [
        ({evidence.CERTIFICATE: "not pem"}, "certificate annotation is not PEM certificates"),
        ({evidence.CERTIFICATE: pem(b"a") + pem(b"b")}, "holds 2 certificates, not one"),
        ({evidence.CERTIFICATE: "-----BEGIN CERTIFICATE-----\nAAAA\n"}, "without its END line"),
        ({evidence.CHAIN: pem(b"c") * 11}, "more than 10 certificates"),
        ({evidence.BUNDLE: "{"}, "bundle annotation is refused: it is not JSON"),
        ({evidence.BUNDLE: '{"Payload": {}}'}, "Payload.body is missing"),
        (
            {evidence.TIMESTAMP: '{"SignedRFC3161Timestamp": 5}'},
            "SignedRFC3161Timestamp is missing or not a base64",
        ),
    ],
)
def test_a_malformed_cosign_layer_is_refused(change: dict[str, str], cause: str) -> None:
    annotations, _, signature = cosign_layer(Log())
    annotations.update(change)
    with pytest.raises(KeylessProblem, match=cause):
        evidence.from_cosign_layer(PAYLOAD, base64.b64encode(signature).decode(), annotations, "x")


@pytest.mark.parametrize(
    ("field", "value", "cause"),
    [
        ("logID", "abc", "logID is not the hex"),
        ("logID", "z" * 64, "logID is not the hex"),
        ("integratedTime", "1", "integratedTime is not a positive whole number"),
        ("logIndex", -1, "logIndex is not a whole number"),
    ],
)
def test_a_malformed_cosign_bundle_annotation_is_refused(field: str, value: Any, cause: str) -> None:
    annotations, _, signature = cosign_layer(Log())
    doc = json.loads(annotations[evidence.BUNDLE])
    doc["Payload"][field] = value
    annotations[evidence.BUNDLE] = json.dumps(doc)
    with pytest.raises(KeylessProblem, match=cause):
        evidence.from_cosign_layer(PAYLOAD, base64.b64encode(signature).decode(), annotations, "x")
    with pytest.raises(KeylessProblem, match=r"the layer's signature is not base64"):
        evidence.from_cosign_layer(PAYLOAD, "@@", cosign_layer(Log())[0], "x")
    assert hashlib.sha256(PAYLOAD).hexdigest()  # the payload is bytes, signed as given
