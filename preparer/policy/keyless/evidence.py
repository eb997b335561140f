"""A keyless signature object read into :class:`~.model.Evidence`: a Sigstore bundle, or a cosign ``.sig`` layer.

- :func:`from_bundle`: a Sigstore bundle (sigstore/protobuf-specs ``sigstore_bundle.proto``) of media type
  v0.1, v0.2 or v0.3, in protobuf's JSON form (64-bit integers as strings, bytes as base64).
- :func:`from_cosign_layer`: a layer of cosign's ``.sig`` tag made by a keyless ``cosign sign``: the leaf
  certificate, its chain and Rekor's answer (``dev.sigstore.cosign/bundle``) are annotations of the layer.

Nothing is verified here; everything is read strictly (:func:`preparer.policy.payload.read_json`) and bounded, and
what is malformed is refused with a :class:`~.model.KeylessProblem` naming the field at fault.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from typing import Any

from preparer.policy.keyless.model import Evidence, InclusionProof, KeylessProblem, LogEntry
from preparer.policy.payload import PayloadProblem, pae, read_json

BUNDLE_TYPES = {
    "application/vnd.dev.sigstore.bundle+json;version=0.1": 1,
    "application/vnd.dev.sigstore.bundle+json;version=0.2": 2,
    "application/vnd.dev.sigstore.bundle+json;version=0.3": 3,
    "application/vnd.dev.sigstore.bundle.v0.3+json": 3,
}
#: Transparency log entries one signature object may carry.
MAX_ENTRIES = 16
#: Hashes of one inclusion proof (a tree of at most 2^64 entries).
MAX_PROOF_HASHES = 64
#: Certificates of one chain, the leaf included.
MAX_CERTIFICATES = 10
#: RFC 3161 timestamps of one signature object.
MAX_TIMESTAMPS = 16

CERTIFICATE = "dev.sigstore.cosign/certificate"
CHAIN = "dev.sigstore.cosign/chain"
BUNDLE = "dev.sigstore.cosign/bundle"
TIMESTAMP = "dev.sigstore.cosign/rfc3161timestamp"

_INT64 = (1 << 63) - 1


def _problem(where: str, why: str) -> KeylessProblem:
    return KeylessProblem(f"{where} {why}" if where else why)


def _json(data: bytes, what: str) -> Any:
    try:
        return read_json(data)
    except PayloadProblem as err:
        raise KeylessProblem(f"{what} is refused: {err}") from None


def _object(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _problem(where, "is not a JSON object")
    return value


def _b64(value: object, where: str, *, size: int | None = None) -> bytes:
    if not isinstance(value, str) or not value:
        raise _problem(where, "is missing or not a base64 string")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _problem(where, "is not base64") from None
    if size is not None and len(raw) != size:
        raise _problem(where, f"is {len(raw)} bytes, not {size}")
    return raw


def _int(value: object, where: str) -> int:
    """A protobuf JSON 64-bit integer: a decimal string (``"123"``), or a JSON number without a fraction."""
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 19:
        number = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise _problem(where, "is not a whole number")
    if not 0 <= number <= _INT64:
        raise _problem(where, "is out of range")
    return number


def _list(value: object, where: str, most: int) -> list[Any]:
    if not isinstance(value, list):
        raise _problem(where, "is not a list")
    if len(value) > most:
        raise _problem(where, f"has {len(value)} items, more than {most}")
    return value


def _string(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise _problem(where, "is missing or not a string")
    return value


# -- Sigstore bundles ---------------------------------------------------------------------------------------------


def from_bundle(data: bytes, found: str, *, artifact: bytes | None = None) -> Evidence:
    """The evidence of the Sigstore bundle ``data``.

    A DSSE bundle's message is the envelope's pre-authentication encoding. A message-signature bundle signs an
    artifact it does not hold: ``artifact`` is that artifact, and the bundle's ``messageDigest`` must be its SHA-256.

    :raises KeylessProblem: not a bundle of a known media type, a public key instead of a certificate (a keyed
        signature), a malformed or missing field, a count past its bound, a v0.2 or later bundle whose entries lack
        an inclusion proof with a checkpoint, or a message signature without its artifact or for another one.
    """
    bundle = _object(_json(data, "the bundle"), "the bundle")
    media_type = bundle.get("mediaType")
    version = BUNDLE_TYPES.get(media_type) if isinstance(media_type, str) else None
    if version is None:
        raise KeylessProblem(f"the bundle's media type '{str(media_type)[:100]}' is not a Sigstore bundle's")
    material = _object(bundle.get("verificationMaterial"), "the bundle's verificationMaterial")
    leaf, chain = _certificates(material, version)
    entries = tuple(
        _entry(item, f"tlogEntries[{i}]", version)
        for i, item in enumerate(_list(material.get("tlogEntries", []), "tlogEntries", MAX_ENTRIES))
    )
    timestamps = _timestamps(material.get("timestampVerificationData"))
    envelope = bundle.get("dsseEnvelope")
    signed = bundle.get("messageSignature")
    if (envelope is None) == (signed is None):
        raise KeylessProblem("the bundle must hold one of dsseEnvelope and messageSignature")
    if envelope is not None:
        envelope = _object(envelope, "dsseEnvelope")
        signature, message = _dsse(envelope)
    else:
        signature, message = _message_signature(_object(signed, "messageSignature"), artifact)
    return Evidence(
        leaf=leaf,
        chain=chain,
        signature=signature,
        message=message,
        entries=entries,
        timestamps=timestamps,
        envelope=envelope,
        found=found,
    )


def _certificates(material: dict[str, Any], version: int) -> tuple[bytes, tuple[bytes, ...]]:
    """The leaf certificate and the rest of the chain the bundle gives (DER)."""
    if "publicKey" in material:
        raise KeylessProblem("the bundle is signed with a public key, not a certificate: it is not keyless")
    if version >= 3:
        if "x509CertificateChain" in material:
            raise KeylessProblem("a v0.3 bundle gives its leaf in certificate, not in x509CertificateChain")
        leaf = _b64(
            _object(material.get("certificate"), "certificate").get("rawBytes"), "certificate.rawBytes"
        )
        return leaf, ()
    chain = _object(material.get("x509CertificateChain"), "x509CertificateChain")
    listed = _list(chain.get("certificates"), "x509CertificateChain.certificates", MAX_CERTIFICATES)
    if not listed:
        raise KeylessProblem("x509CertificateChain.certificates is empty")
    ders = tuple(
        _b64(_object(c, f"certificates[{i}]").get("rawBytes"), f"certificates[{i}].rawBytes")
        for i, c in enumerate(listed)
    )
    return ders[0], ders[1:]


def _entry(item: object, where: str, version: int) -> LogEntry:
    entry = _object(item, where)
    kind = _object(entry.get("kindVersion"), f"{where}.kindVersion")
    integrated = _int(entry.get("integratedTime", "0"), f"{where}.integratedTime")
    promise = entry.get("inclusionPromise")
    proof = entry.get("inclusionProof")
    log_entry = LogEntry(
        log_index=_int(entry.get("logIndex"), f"{where}.logIndex"),
        log_id=_b64(_object(entry.get("logId"), f"{where}.logId").get("keyId"), f"{where}.logId.keyId"),
        kind=_string(kind.get("kind"), f"{where}.kindVersion.kind")[:64],
        version=_string(kind.get("version"), f"{where}.kindVersion.version")[:64],
        body=_b64(entry.get("canonicalizedBody"), f"{where}.canonicalizedBody"),
        integrated_time=integrated or None,
        promise=(
            None
            if promise is None
            else _b64(
                _object(promise, f"{where}.inclusionPromise").get("signedEntryTimestamp"),
                f"{where}.inclusionPromise.signedEntryTimestamp",
            )
        ),
        proof=None if proof is None else _proof(proof, f"{where}.inclusionProof"),
    )
    if version >= 2 and (log_entry.proof is None or not log_entry.proof.checkpoint):
        raise _problem(
            where, "has no inclusion proof with a checkpoint, which a bundle v0.2 or later must have"
        )
    if version == 1 and log_entry.promise is None:
        raise _problem(where, "has no inclusion promise, which a bundle v0.1 must have")
    return log_entry


def _proof(item: object, where: str) -> InclusionProof:
    proof = _object(item, where)
    checkpoint = proof.get("checkpoint")
    envelope = "" if checkpoint is None else _object(checkpoint, f"{where}.checkpoint").get("envelope")
    if not isinstance(envelope, str):
        raise _problem(f"{where}.checkpoint.envelope", "is not a string")
    hashes = _list(proof.get("hashes", []), f"{where}.hashes", MAX_PROOF_HASHES)
    return InclusionProof(
        log_index=_int(proof.get("logIndex"), f"{where}.logIndex"),
        root_hash=_b64(proof.get("rootHash"), f"{where}.rootHash", size=32),
        tree_size=_int(proof.get("treeSize"), f"{where}.treeSize"),
        hashes=tuple(_b64(h, f"{where}.hashes[{i}]", size=32) for i, h in enumerate(hashes)),
        checkpoint=envelope,
    )


def _timestamps(value: object) -> tuple[bytes, ...]:
    if value is None:
        return ()
    data = _object(value, "timestampVerificationData")
    listed = _list(data.get("rfc3161Timestamps", []), "rfc3161Timestamps", MAX_TIMESTAMPS)
    return tuple(
        _b64(
            _object(t, f"rfc3161Timestamps[{i}]").get("signedTimestamp"),
            f"rfc3161Timestamps[{i}].signedTimestamp",
        )
        for i, t in enumerate(listed)
    )


def _dsse(envelope: dict[str, Any]) -> tuple[bytes, bytes]:
    """The one signature of a DSSE envelope and the message it is over (PAE of type and payload)."""
    payload_type = _string(envelope.get("payloadType"), "dsseEnvelope.payloadType")
    payload = _b64(envelope.get("payload"), "dsseEnvelope.payload")
    signatures = _list(envelope.get("signatures"), "dsseEnvelope.signatures", 1)
    if len(signatures) != 1:
        raise KeylessProblem("the DSSE envelope holds no signature (a keyless envelope holds exactly one)")
    signature = _b64(
        _object(signatures[0], "dsseEnvelope.signatures[0]").get("sig"), "dsseEnvelope.signatures[0].sig"
    )
    return signature, pae(payload_type, payload)


def _message_signature(signed: dict[str, Any], artifact: bytes | None) -> tuple[bytes, bytes]:
    """The signature of a message-signature bundle and the artifact it is over."""
    signature = _b64(signed.get("signature"), "messageSignature.signature")
    if artifact is None:
        raise KeylessProblem(
            "the bundle signs an artifact it does not hold (messageSignature), and none was given"
        )
    digest = signed.get("messageDigest")
    if digest is not None:
        digest = _object(digest, "messageSignature.messageDigest")
        if digest.get("algorithm") != "SHA2_256":
            raise KeylessProblem(
                f"messageSignature.messageDigest is of algorithm {str(digest.get('algorithm'))[:20]}, not SHA2_256"
            )
        value = _b64(digest.get("digest"), "messageSignature.messageDigest.digest", size=32)
        if value != hashlib.sha256(artifact).digest():
            raise KeylessProblem("the bundle's messageDigest is not the SHA-256 of the artifact")
    return signature, artifact


# -- cosign's .sig layers -----------------------------------------------------------------------------------------


def from_cosign_layer(
    payload: bytes, signature_b64: str, annotations: Mapping[str, str], found: str
) -> Evidence | None:
    """The evidence of a layer of a cosign ``.sig`` image, or ``None`` when it carries no certificate (a signature
    by a key, which :mod:`preparer.policy.signatures` judges).

    The signature (``dev.cosignproject.cosign/signature``, given as ``signature_b64``) is over the payload's bytes.
    The bundle annotation is Rekor v1's answer: ``{"SignedEntryTimestamp", "Payload": {"body", "integratedTime",
    "logIndex", "logID"}}``; the entry's kind is its body's. An RFC 3161 timestamp annotation
    (``{"SignedRFC3161Timestamp": base64}``) is read when there is one.

    :raises KeylessProblem: a malformed certificate, chain, signature, bundle or timestamp annotation.
    """
    pem = annotations.get(CERTIFICATE)
    if not pem:
        return None
    leaf = _pem_certificates(pem, "the certificate annotation")
    if len(leaf) != 1:
        raise KeylessProblem(f"the certificate annotation holds {len(leaf)} certificates, not one")
    chain = _pem_certificates(annotations.get(CHAIN, ""), "the chain annotation")
    signature = _b64(signature_b64, "the layer's signature")
    entries = () if not annotations.get(BUNDLE) else (_cosign_entry(annotations[BUNDLE]),)
    timestamps: tuple[bytes, ...] = ()
    if annotations.get(TIMESTAMP):
        stamp = _object(
            _json(annotations[TIMESTAMP].encode(), "the timestamp annotation"), "the timestamp annotation"
        )
        timestamps = (
            _b64(stamp.get("SignedRFC3161Timestamp"), "the timestamp annotation's SignedRFC3161Timestamp"),
        )
    return Evidence(
        leaf=leaf[0],
        chain=chain,
        signature=signature,
        message=payload,
        entries=entries,
        timestamps=timestamps,
        found=found,
    )


def _cosign_entry(text: str) -> LogEntry:
    where = "the bundle annotation's"
    bundle = _object(_json(text.encode(), "the bundle annotation"), "the bundle annotation")
    answer = _object(bundle.get("Payload"), f"{where} Payload")
    body = _b64(answer.get("body"), f"{where} Payload.body")
    log_id = answer.get("logID")
    if not isinstance(log_id, str) or len(log_id) != 64:
        raise _problem(f"{where} Payload.logID", "is not the hex of a SHA-256 log id")
    try:
        log_bytes = bytes.fromhex(log_id)
    except ValueError:
        raise _problem(f"{where} Payload.logID", "is not the hex of a SHA-256 log id") from None
    integrated = answer.get("integratedTime")
    index = answer.get("logIndex")
    if not isinstance(integrated, int) or isinstance(integrated, bool) or not 0 < integrated <= _INT64:
        raise _problem(f"{where} Payload.integratedTime", "is not a positive whole number")
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index <= _INT64:
        raise _problem(f"{where} Payload.logIndex", "is not a whole number")
    kind = _object(_json(body, "the log entry's body"), "the log entry's body")
    return LogEntry(
        log_index=index,
        log_id=log_bytes,
        kind=_string(kind.get("kind"), "the log entry's body kind")[:64],
        version=_string(kind.get("apiVersion"), "the log entry's body apiVersion")[:64],
        body=body,
        integrated_time=integrated,
        promise=_b64(bundle.get("SignedEntryTimestamp"), f"{where} SignedEntryTimestamp"),
    )


def _pem_certificates(text: str, what: str) -> tuple[bytes, ...]:
    """The DER of each ``CERTIFICATE`` block of ``text``, at most :data:`MAX_CERTIFICATES`."""
    begin, end = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
    found: list[bytes] = []
    body: list[str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if body is None:
            if line == begin:
                body = []
            elif line:
                raise KeylessProblem(f"{what} is not PEM certificates (line {number})")
        elif line == end:
            try:
                found.append(base64.b64decode("".join(body), validate=True))
            except (binascii.Error, ValueError):
                raise KeylessProblem(f"{what} holds a certificate that is not base64") from None
            if len(found) > MAX_CERTIFICATES:
                raise KeylessProblem(f"{what} holds more than {MAX_CERTIFICATES} certificates")
            body = None
        else:
            body.append(line)
    if body is not None:
        raise KeylessProblem(f"{what} has a certificate without its END line")
    return tuple(found)


# -- what a keyless signature claims, for a rule that cannot verify it ---------------------------------------------


def claimed_signer(kind: str, payload: bytes, annotations: Mapping[str, str]) -> tuple[str, str] | None:
    """``(issuer, subject)`` the certificate of a keyless signature object names, read and not verified (for a
    refusal by a rule with keys only, to point to identities): a ``.sig`` layer's (``kind`` ``cosign``) certificate
    annotation, or a bundle's leaf. ``None``: no certificate (a keyed signature), or one that names no identity.
    ``("", "")``: a certificate whose identity cannot be read."""
    from preparer.policy.keyless.certs import identity  # deferred: cryptography, for a refusal only

    if kind == "cosign":
        pem = annotations.get(CERTIFICATE)
        try:
            found = _pem_certificates(pem, "the certificate annotation") if pem else ()
        except KeylessProblem:
            return ("", "")
        leaf = found[0] if found else None
    else:
        leaf = _bundle_leaf(payload)
    if leaf is None:
        return None
    try:
        return identity(leaf)
    except KeylessProblem:
        return ("", "")


def _bundle_leaf(payload: bytes) -> bytes | None:
    """The leaf certificate a bundle carries (v0.3's ``certificate``, or the first of ``x509CertificateChain``)."""
    try:
        bundle = read_json(payload)
    except PayloadProblem:
        return None
    material = bundle.get("verificationMaterial") if isinstance(bundle, dict) else None
    if not isinstance(material, dict):
        return None
    listed = material.get("x509CertificateChain", {})
    first = (
        listed.get("certificates", [None])[0]
        if isinstance(listed, dict) and listed.get("certificates")
        else None
    )
    holder = material.get("certificate", first)
    raw = holder.get("rawBytes") if isinstance(holder, dict) else None
    try:
        return base64.b64decode(raw, validate=True) if isinstance(raw, str) and raw else None
    except (binascii.Error, ValueError):
        return None
