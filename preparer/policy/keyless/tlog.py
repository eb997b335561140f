"""The transparency log: a Rekor entry's signed entry timestamp, its inclusion proof and checkpoint, and that the
entry is for this signature, certificate and message.

Three checks, each on its own, each raising :class:`~.model.KeylessProblem` with the reason in an operator's words:

- :func:`verify_promise`: Rekor v1's inclusion promise (the signed entry timestamp, SET): the log's ECDSA signature
  over the canonical JSON of the entry's body, integrated time, index and log id. It makes the integrated time a
  verified signing time.
- :func:`verify_inclusion`: the Merkle inclusion proof (RFC 9162 section 2.1.3.2) recomputes the proof's root hash,
  and the checkpoint (a signed note, c2sp.org/signed-note and c2sp.org/tlog-checkpoint) that names the same tree
  size and root hash is signed by the log's key.
- :func:`check_entry`: the entry's body records this signature, this leaf certificate and this message's digest,
  so that a valid entry of someone else's signature cannot vouch for this one (CVE-2022-36056).

The log's keys are the trusted root's (``tlogs``), chosen by the entry's log id and required to be valid
(``validFor``) at a time the verifier proved: a signed entry timestamp's integrated time (the key's own signature
over it), or for a checkpoint, which signs no time, the verified signing time (:func:`~.verify.verify`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from typing import Any

from preparer._numbers import decimal
from preparer.policy.keyless.model import Evidence, KeylessProblem, LogEntry, LogKey, TrustedRoot, when
from preparer.policy.payload import PayloadProblem, b64, read_json

#: A checkpoint is a few hundred bytes; one larger than this is refused unread.
MAX_CHECKPOINT_BYTES = 64 << 10
#: Signature lines a checkpoint may carry (c2sp.org/signed-note asks verifiers to accept at least 16).
MAX_NOTE_SIGNATURES = 64
#: The deepest a Merkle path can be: a tree of at most 2^64 leaves.
MAX_PROOF_HASHES = 64


def _log_keys(
    entry: LogEntry,
    root: TrustedRoot,
    at: int | None,
    *,
    said: str = "when the entry {index} says it was logged",
) -> tuple[LogKey, ...]:
    """The trusted root's keys of the log ``entry`` names, valid at ``at`` (any time when ``None``); ``said``:
    what ``at`` is, for the message."""
    known = tuple(k for k in root.tlogs if k.log_id == entry.log_id)
    if not known:
        raise KeylessProblem(
            f"the log entry {entry.log_index} is from log {entry.log_id.hex()}, which the trusted root does not name"
        )
    valid = tuple(k for k in known if at is None or k.window.holds(at))
    if not valid:
        log = known[0].url or entry.log_id.hex()
        raise KeylessProblem(
            f"the key of log {log} was not valid at {when(at or 0)}, {said.format(index=entry.log_index)} (the "
            "trusted root's validFor)"
        )
    return valid


def _signed_by(key: Any, signature: bytes, message: bytes) -> bool:
    """Whether ``signature`` is ``key``'s over ``message``: ECDSA (DER, with the curve's hash) or Ed25519."""
    from cryptography.exceptions import InvalidSignature  # deferred: only keyless runs verify
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            size = key.curve.key_size
            hash_ = hashes.SHA256() if size <= 256 else hashes.SHA384() if size <= 384 else hashes.SHA512()
            key.verify(signature, message, ec.ECDSA(hash_))
        elif isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, message)
        else:
            return False
    except (InvalidSignature, ValueError):
        return False
    return True


def verify_promise(entry: LogEntry, root: TrustedRoot) -> int:
    """Verify ``entry``'s signed entry timestamp and return its integrated time, now verified.

    The SET is the log's signature over the RFC 8785 canonical JSON of ``{"body", "integratedTime", "logID",
    "logIndex"}`` (the body in base64, the log id in hex). Those four fields are ASCII strings and integers, whose
    canonical form is Python's ``json.dumps`` with sorted keys and no spaces.

    :raises KeylessProblem: no promise or integrated time, a log the trusted root does not name or whose key was
        not valid then, or a signature that does not verify.
    """
    if entry.promise is None or entry.integrated_time is None:
        raise KeylessProblem(
            f"the log entry {entry.log_index} has no signed entry timestamp (inclusion promise)"
        )
    signed = json.dumps(
        {
            "body": base64.b64encode(entry.body).decode(),
            "integratedTime": entry.integrated_time,
            "logID": entry.log_id.hex(),
            "logIndex": entry.log_index,
        },
        sort_keys=True,
        separators=(",", ":"),
    ).encode()
    for key in _log_keys(entry, root, entry.integrated_time):
        if _signed_by(key.key, entry.promise, signed):
            return entry.integrated_time
    raise KeylessProblem(
        f"the signed entry timestamp of log entry {entry.log_index} does not verify with the key of log "
        f"{_log_keys(entry, root, None)[0].url or entry.log_id.hex()}"
    )


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def root_from_proof(leaf: bytes, index: int, size: int, path: tuple[bytes, ...]) -> bytes:
    """The root hash of a tree of ``size`` leaves that an inclusion ``path`` gives for the entry ``leaf`` (its
    canonical body) at ``index``: RFC 9162 section 2.1.3.2, with leaf hash SHA-256(0x00 || leaf).

    :raises KeylessProblem: the index is outside the tree, or the path is too short or too long for it.
    """
    if not 0 <= index < size:
        raise KeylessProblem(f"the inclusion proof's index {index} is outside its tree of {size} entries")
    if len(path) > MAX_PROOF_HASHES:
        raise KeylessProblem(f"the inclusion proof has {len(path)} hashes, more than {MAX_PROOF_HASHES}")
    fn, sn = index, size - 1
    hash_ = hashlib.sha256(b"\x00" + leaf).digest()
    for sibling in path:
        if sn == 0:
            raise KeylessProblem("the inclusion proof has more hashes than its tree is deep")
        if fn & 1 or fn == sn:
            hash_ = _node(sibling, hash_)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            hash_ = _node(hash_, sibling)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise KeylessProblem("the inclusion proof has fewer hashes than its tree is deep")
    return hash_


def verify_inclusion(entry: LogEntry, root: TrustedRoot, *, at: int | None = None) -> None:
    """Verify ``entry``'s inclusion proof, and its checkpoint when it has one.

    The proof's hashes must lead from the entry's body to the proof's root hash; the checkpoint must be signed by
    the key of the entry's log valid at ``at`` and name the same tree size and root hash. ``at`` is a time the
    verifier proved (the entry's integrated time once its signed entry timestamp verified, or an RFC 3161
    timestamp's): never the integrated time an entry merely claims, since a checkpoint signs no time and a key
    the root retired could sign one for an entry no log holds. ``None``: the key's window is not checked (for
    the proof's mechanics alone; :func:`~.verify.verify` always gives a time). Without a checkpoint only the path
    is checked: the root hash is then vouched for by nothing (a bundle v0.1 relies on its signed entry timestamp;
    :func:`~.evidence.from_bundle` refuses a later bundle whose proof has no checkpoint).

    :raises KeylessProblem: no proof, a path that does not lead to the root hash, a malformed checkpoint, one not
        signed by the log's key, or one for another tree.
    """
    proof = entry.proof
    if proof is None:
        raise KeylessProblem(f"the log entry {entry.log_index} has no inclusion proof")
    computed = root_from_proof(entry.body, proof.log_index, proof.tree_size, proof.hashes)
    if computed != proof.root_hash:
        raise KeylessProblem(
            f"the inclusion proof of log entry {entry.log_index} does not lead to its root hash "
            f"(computed {computed.hex()}, the proof says {proof.root_hash.hex()})"
        )
    if not proof.checkpoint:
        return
    keys = _log_keys(entry, root, at, said="the verified signing time its checkpoint is judged at")
    origin, size, hash_ = verify_checkpoint(proof.checkpoint, keys)
    if size != proof.tree_size or hash_ != proof.root_hash:
        raise KeylessProblem(
            f"the checkpoint of log entry {entry.log_index} is for another tree (size {size}, root hash "
            f"{hash_.hex()}) than its inclusion proof (size {proof.tree_size}, root hash {proof.root_hash.hex()})"
        )
    for key in keys:
        if key.origin and not _same_origin(origin, key.origin):
            raise KeylessProblem(f"the checkpoint's origin is '{origin[:100]}', not the log's '{key.origin}'")


def _same_origin(origin: str, expected: str) -> bool:
    """Whether a checkpoint's ``origin`` line names the log whose origin is ``expected`` (its ``baseUrl`` host):
    exactly, as Rekor v2 writes it, or followed by `` - `` and the tree ID, as Rekor v1 writes it
    (``rekor.sigstore.dev - 1193050959916656506``)."""
    tree = origin.removeprefix(expected + " - ")
    return origin == expected or (tree != origin and tree.isascii() and tree.isdigit())


def key_name(key: LogKey) -> str:
    """The name a log signs its checkpoints with: its checkpoint origin (Rekor v2), or the host of its URL (Rekor
    v1 signs as ``rekor.sigstore.dev``); ``""`` when the trusted root gives neither."""
    if key.origin:
        return key.origin
    return key.url.split("://", 1)[-1].split("/", 1)[0]


def note_key_id(name: str, key: Any, spki: bytes) -> bytes:
    """The 4-byte key ID a signed note names ``key`` by (c2sp.org/signed-note): SHA-256(name || 0x0A || 0x01 ||
    32-byte key) for Ed25519; for ECDSA (type 0x02) the SHA-256 of the DER SubjectPublicKeyInfo, which is Rekor
    v1's log id."""
    from cryptography.hazmat.primitives.asymmetric import ed25519  # deferred, as in _signed_by
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    if isinstance(key, ed25519.Ed25519PublicKey):
        raw = key.public_bytes(Encoding.Raw, PublicFormat.Raw)
        return hashlib.sha256(name.encode() + b"\n\x01" + raw).digest()[:4]
    return hashlib.sha256(spki).digest()[:4]


def verify_checkpoint(text: str, keys: tuple[LogKey, ...]) -> tuple[str, int, bytes]:
    """The origin, tree size and root hash of the checkpoint ``text``, once a signature by one of ``keys`` over it
    verifies.

    A signature line counts when its key name and key ID are a key's (:func:`key_name`, :func:`note_key_id`); one
    that counts and does not verify refuses the note, as the spec recommends. Other lines (witnesses' cosignatures)
    are ignored.

    :raises KeylessProblem: a malformed note or checkpoint, or no signature by one of ``keys`` that verifies.
    """
    data = text.encode("utf-8", "surrogatepass")
    if len(data) > MAX_CHECKPOINT_BYTES:
        raise KeylessProblem(f"the checkpoint is larger than {MAX_CHECKPOINT_BYTES} bytes")
    if any(c < " " and c != "\n" for c in text):
        raise KeylessProblem("the checkpoint holds a control character")
    note, separator, block = text.partition("\n\n")
    if not separator or not block.endswith("\n"):
        raise KeylessProblem("the checkpoint is not a signed note (its text, a blank line, signature lines)")
    note += "\n"
    lines = block[:-1].split("\n")
    if len(lines) > MAX_NOTE_SIGNATURES:
        raise KeylessProblem(f"the checkpoint has more than {MAX_NOTE_SIGNATURES} signatures")
    signatures = []
    for line in lines:
        dash, name, encoded = line.split(" ") if line.count(" ") == 2 else ("", "", "")
        if dash != "\u2014" or not name:
            raise KeylessProblem(f"the checkpoint's signature line '{line[:80]}' is malformed")
        try:
            raw = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise KeylessProblem(f"the checkpoint's signature by {name[:80]} is not base64") from None
        if len(raw) < 5:
            raise KeylessProblem(f"the checkpoint's signature by {name[:80]} is too short")
        signatures.append((name, raw[:4], raw[4:]))
    verified = False
    for key in keys:
        name, hint = key_name(key), note_key_id(key_name(key), key.key, key.spki)
        for signer, key_id, signature in signatures:
            if key_id != hint or (name and signer != name):
                continue
            if not _signed_by(key.key, signature, note.encode()):
                raise KeylessProblem(f"the checkpoint's signature by {signer[:80]} does not verify")
            verified = True
    if not verified:
        named = ", ".join(key_name(k) or k.log_id.hex() for k in keys)
        raise KeylessProblem(f"the checkpoint carries no signature by the log's key ({named})")
    return _checkpoint_body(note)


def _checkpoint_body(note: str) -> tuple[str, int, bytes]:
    """Origin, tree size and root hash of a checkpoint's text (c2sp.org/tlog-checkpoint)."""
    lines = note[:-1].split("\n")
    if len(lines) < 3 or not lines[0]:
        raise KeylessProblem("the checkpoint lacks an origin, a tree size or a root hash")
    origin, size_text, hash_text = lines[:3]
    size = decimal(size_text)
    if size is None or (size_text.startswith("0") and size_text != "0") or len(size_text) > 20:
        raise KeylessProblem(f"the checkpoint's tree size '{size_text[:40]}' is not a decimal number")
    try:
        hash_ = base64.b64decode(hash_text, validate=True)
    except (binascii.Error, ValueError):
        hash_ = b""
    if len(hash_) != 32:
        raise KeylessProblem("the checkpoint's root hash is not the base64 of a SHA-256 hash")
    return origin, size, hash_


# -- the entry is for this signature ------------------------------------------------------------------------------


def check_entry(entry: LogEntry, evidence: Evidence) -> None:
    """Check that ``entry`` records ``evidence``'s signature, leaf certificate and message.

    - ``hashedrekord`` 0.0.1: ``spec.signature.content`` is the signature, ``spec.signature.publicKey.content`` the
      leaf certificate's PEM, ``spec.data.hash`` the SHA-256 of the message.
    - ``dsse`` 0.0.1: ``spec.payloadHash`` is the SHA-256 of the envelope's payload and ``spec.signatures`` are the
      envelope's, each with the leaf's PEM as verifier. ``spec.envelopeHash`` is not compared (as sigstore's
      verifiers do not: Rekor computed it over its own canonical form of the envelope).
    - ``hashedrekord`` 0.0.2 (Rekor v2): ``spec.hashedRekordV002.data`` is the SHA-256 digest of the message (for a
      DSSE envelope, of its pre-authentication encoding), ``signature.content`` the signature and
      ``signature.verifier.x509Certificate.rawBytes`` the leaf's DER.
    - ``dsse`` 0.0.2 (Rekor v2): ``spec.dsseV002.payloadHash`` is the SHA-256 of the payload, ``signatures`` the
      envelope's, each verifier the leaf's DER.

    :raises KeylessProblem: a body that is not JSON of its kind, an entry of another kind, or one that records
        another signature, certificate or message.
    """
    try:
        body = read_json(entry.body)
    except PayloadProblem as err:
        raise KeylessProblem(f"the body of log entry {entry.log_index} is refused: {err}") from None
    if not isinstance(body, dict):
        raise KeylessProblem(f"the body of log entry {entry.log_index} is not a JSON object")
    if (body.get("kind"), body.get("apiVersion")) != (entry.kind, entry.version):
        raise KeylessProblem(
            f"the body of log entry {entry.log_index} is of kind {str(body.get('kind'))[:40]} "
            f"{str(body.get('apiVersion'))[:20]}, not the {entry.kind} {entry.version} the entry says"
        )
    checks = {
        ("hashedrekord", "0.0.1"): _hashedrekord_v1,
        ("dsse", "0.0.1"): _dsse_v1,
        ("hashedrekord", "0.0.2"): _hashedrekord_v2,
        ("dsse", "0.0.2"): _dsse_v2,
    }
    check = checks.get((entry.kind, entry.version))
    if check is None:
        raise KeylessProblem(
            f"the log entry {entry.log_index} is of kind {entry.kind[:40]} {entry.version[:20]}, which is not "
            "checked (hashedrekord and dsse 0.0.1 and 0.0.2 are)"
        )
    spec = body.get("spec")
    if not isinstance(spec, dict):
        raise KeylessProblem(f"the body of log entry {entry.log_index} has no spec")
    why = check(spec, evidence)
    if why:
        raise KeylessProblem(f"the log entry {entry.log_index} is not for this signature: {why}")


def _pem_der(value: object) -> bytes | None:
    """The DER of the one certificate in ``value``, the base64 of a PEM (``None``: not one)."""
    if not isinstance(value, str):
        return None
    try:
        text = base64.b64decode(value, validate=True).decode("ascii")
    except (binascii.Error, ValueError):
        return None
    begin, end = "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----"
    inside = text.strip()
    if not inside.startswith(begin) or not inside.endswith(end) or inside.count(begin) != 1:
        return None
    try:
        return base64.b64decode("".join(inside[len(begin) : -len(end)].split()), validate=True)
    except (binascii.Error, ValueError):
        return None


def _get(doc: object, *path: str) -> object:
    for name in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(name)
    return doc


def _hashedrekord_v1(spec: dict[str, Any], evidence: Evidence) -> str:
    if evidence.envelope is not None:
        return (
            "a DSSE envelope is logged as a dsse entry (or a hashedrekord 0.0.2), not as a hashedrekord 0.0.1"
        )
    if b64(_get(spec, "signature", "content")) != evidence.signature:
        return "it records another signature"
    if _pem_der(_get(spec, "signature", "publicKey", "content")) != evidence.leaf:
        return "it records another certificate"
    algorithm, value = _get(spec, "data", "hash", "algorithm"), _get(spec, "data", "hash", "value")
    if algorithm != "sha256":
        return f"its digest is of algorithm {str(algorithm)[:20]}, not sha256"
    if value != hashlib.sha256(evidence.message).hexdigest():
        return "it records the digest of another message"
    return ""


def _envelope(evidence: Evidence) -> tuple[bytes, list[bytes]] | None:
    """The payload and the signatures of ``evidence``'s DSSE envelope (``None``: it has none)."""
    envelope = evidence.envelope
    if envelope is None:
        return None
    payload = b64(envelope.get("payload"))
    listed = envelope.get("signatures")
    signatures = (
        [b64(s.get("sig")) for s in listed if isinstance(s, dict)] if isinstance(listed, list) else []
    )
    if payload is None or not signatures or any(s is None for s in signatures):
        return None
    return payload, [s for s in signatures if s is not None]


def _dsse_v1(spec: dict[str, Any], evidence: Evidence) -> str:
    envelope = _envelope(evidence)
    if envelope is None:
        return "it is a dsse entry, and the signature is no DSSE envelope"
    payload, signatures = envelope
    algorithm, value = _get(spec, "payloadHash", "algorithm"), _get(spec, "payloadHash", "value")
    if algorithm != "sha256" or value != hashlib.sha256(payload).hexdigest():
        return "it records the hash of another payload"
    recorded = spec.get("signatures")
    if not isinstance(recorded, list) or len(recorded) != len(signatures):
        return "it records other signatures than the envelope's"
    for mine, theirs in zip(signatures, recorded, strict=True):
        if b64(_get(theirs, "signature")) != mine:
            return "it records other signatures than the envelope's"
        if _pem_der(_get(theirs, "verifier")) != evidence.leaf:
            return "it records another certificate"
    return ""


def _verifier_der(verifier: object) -> bytes | None:
    return b64(_get(verifier, "x509Certificate", "rawBytes"))


def _hashedrekord_v2(spec: dict[str, Any], evidence: Evidence) -> str:
    inner = spec.get("hashedRekordV002")
    if evidence.envelope is not None:
        # A DSSE envelope logged as a hashedrekord (the Rekor v2 spec): its one signature over the PAE.
        envelope = _envelope(evidence)
        if envelope is None or len(envelope[1]) != 1:
            return "a DSSE envelope logged as a hashedrekord must hold exactly one signature"
    algorithm, digest = _get(inner, "data", "algorithm"), b64(_get(inner, "data", "digest"))
    if algorithm != "SHA2_256":
        return f"its digest is of algorithm {str(algorithm)[:20]}, not SHA2_256"
    if digest != hashlib.sha256(evidence.message).digest():
        return "it records the digest of another message"
    if b64(_get(inner, "signature", "content")) != evidence.signature:
        return "it records another signature"
    if _verifier_der(_get(inner, "signature", "verifier")) != evidence.leaf:
        return "it records another certificate"
    return ""


def _dsse_v2(spec: dict[str, Any], evidence: Evidence) -> str:
    envelope = _envelope(evidence)
    if envelope is None:
        return "it is a dsse entry, and the signature is no DSSE envelope"
    payload, signatures = envelope
    inner = spec.get("dsseV002")
    algorithm, digest = _get(inner, "payloadHash", "algorithm"), b64(_get(inner, "payloadHash", "digest"))
    if algorithm != "SHA2_256" or digest != hashlib.sha256(payload).digest():
        return "it records the hash of another payload"
    recorded = _get(inner, "signatures")
    if not isinstance(recorded, list) or len(recorded) != len(signatures):
        return "it records other signatures than the envelope's"
    for mine, theirs in zip(signatures, recorded, strict=True):
        if b64(_get(theirs, "content")) != mine:
            return "it records other signatures than the envelope's"
        if _verifier_der(_get(theirs, "verifier")) != evidence.leaf:
            return "it records another certificate"
    return ""
