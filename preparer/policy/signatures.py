"""``[[image.signed-by]]``: images that must carry a signature by a key the platform trusts (docs/policy.md).

Fetching finds the signature objects an image has (:class:`~preparer.fetch.guard.SignatureObject`) before any of
its config or layers; this module judges them, as ``cosign verify --key`` does (without a transparency log):

- **cosign's tag scheme** (sigstore/cosign ``specs/SIGNATURE_SPEC.md``): the payload is a simple-signing document
  whose ``critical.type`` is ``cosign container image signature`` and whose ``critical.image.
  docker-manifest-digest`` is the signed digest; the signature (base64 of DER) is over the payload's bytes.
  ``critical.identity.docker-reference`` is not compared (cosign ignores it).
- **Sigstore bundles** v0.3 (sigstore/protobuf-specs), cosign v3's default: a DSSE envelope whose payload is an
  in-toto statement with predicate type ``https://sigstore.dev/cosign/sign/v1``; each signature is over DSSE's
  pre-authentication encoding (PAE) of the payload type and payload; the statement's ``subject[].digest.sha256``
  are the signed digests. An attestation of any other predicate type is not a signature.

A signature counts for an image when it verifies with one of the rule's keys and is for the digest being installed:
the platform manifest's, or the index's that led to it (cosign signs whichever digest it was given). Every rule
whose ``images`` match must be satisfied, each by its own keys.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any

from preparer._record import record
from preparer.errors import SignatureRefused, with_fields
from preparer.fetch.guard import SIGNATURE_MAX_AGE, SignatureObject, Verified
from preparer.policy.keys import PublicKey

COSIGN_TYPE = "cosign container image signature"
BUNDLE_V03 = "application/vnd.dev.sigstore.bundle.v0.3+json"
COSIGN_PREDICATE = "https://sigstore.dev/cosign/sign/v1"
IN_TOTO_PAYLOAD = "application/vnd.in-toto+json"
_STATEMENTS = ("https://in-toto.io/Statement/v1", "https://in-toto.io/Statement/v0.1")
#: At most this many signature checks (object x key) per rule: a registry cannot make verification slow.
MAX_CHECKS = 256
#: At most this many signatures in one DSSE envelope are looked at.
MAX_ENVELOPE_SIGNATURES = 16


@record
class SignedBy:
    """One ``[[image.signed-by]]`` rule: the images it covers (globs on ``registry/repository``, as
    ``image.allow``), the keys it trusts, and the line of its ``[[image.signed-by]]`` header."""

    images: tuple[str, ...]
    keys: tuple[PublicKey, ...]
    line: int | None


@record
class _Claim:
    """What a signature object says, before any key is tried: the digests it is for, the message its signatures
    are over, and those signatures; or, in ``problem``, why it is no signature of an image."""

    digests: frozenset[str]
    message: bytes
    signatures: tuple[bytes, ...]
    problem: str | None = None


def claim(obj: SignatureObject) -> _Claim:
    """What ``obj`` claims (nothing is verified here)."""
    return _cosign_claim(obj) if obj.format == "cosign" else _bundle_claim(obj)


def _cosign_claim(obj: SignatureObject) -> _Claim:
    signature = _b64(obj.signature or "")
    doc = _json(obj.payload)
    critical = doc.get("critical") if isinstance(doc, dict) else None
    if not isinstance(critical, dict):
        return _Claim(frozenset(), obj.payload, (), "its payload is not a simple-signing document")
    image = critical.get("image")
    digest = image.get("docker-manifest-digest") if isinstance(image, dict) else None
    signatures = (signature,) if signature else ()
    if critical.get("type") != COSIGN_TYPE:
        kind = str(critical.get("type"))[:100]
        return _Claim(frozenset(), obj.payload, signatures, f"its payload's type is '{kind}', not cosign's")
    if not isinstance(digest, str):
        return _Claim(frozenset(), obj.payload, signatures, "its payload names no docker-manifest-digest")
    return _Claim(frozenset({digest}), obj.payload, signatures)


def _bundle_claim(obj: SignatureObject) -> _Claim:
    bundle = _json(obj.payload)
    if not isinstance(bundle, dict) or bundle.get("mediaType") != BUNDLE_V03:
        kind = str(bundle.get("mediaType"))[:100] if isinstance(bundle, dict) else "not JSON"
        return _Claim(frozenset(), b"", (), f"it is not a Sigstore bundle v0.3 ({kind})")
    envelope = bundle.get("dsseEnvelope")
    if not isinstance(envelope, dict):
        return _Claim(frozenset(), b"", (), "the bundle holds no DSSE envelope")
    payload_type = envelope.get("payloadType")
    payload = _b64(envelope.get("payload"))
    listed = envelope.get("signatures")
    raw = (
        [s.get("sig") for s in listed[:MAX_ENVELOPE_SIGNATURES] if isinstance(s, dict)]
        if isinstance(listed, list)
        else []
    )
    signatures = tuple(sig for sig in map(_b64, raw) if sig)
    if not isinstance(payload_type, str) or payload is None:
        return _Claim(frozenset(), b"", (), "its DSSE envelope has no payload or payload type")
    message = pae(payload_type, payload)
    statement = _json(payload)
    if payload_type != IN_TOTO_PAYLOAD or not isinstance(statement, dict):
        return _Claim(
            frozenset(),
            message,
            signatures,
            f"its payload is not an in-toto statement ({payload_type[:100]})",
        )
    if statement.get("_type") not in _STATEMENTS:
        return _Claim(frozenset(), message, signatures, "its payload is not an in-toto statement")
    predicate = statement.get("predicateType")
    if predicate != COSIGN_PREDICATE:
        return _Claim(
            frozenset(),
            message,
            signatures,
            f"it is an attestation of {str(predicate)[:200]}, not a signature",
        )
    subjects = statement.get("subject")
    digests = frozenset(
        "sha256:" + s["digest"]["sha256"]
        for s in (subjects if isinstance(subjects, list) else [])
        if isinstance(s, dict)
        and isinstance(s.get("digest"), dict)
        and isinstance(s["digest"].get("sha256"), str)
    )
    if not digests:
        return _Claim(frozenset(), message, signatures, "its statement names no sha256 subject")
    return _Claim(digests, message, signatures)


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: ``DSSEv1 <len> <type> <len> <payload>``, lengths in ASCII decimal."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def _b64(value: object) -> bytes | None:
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None


def _json(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


class Check:
    """The rules of one policy that apply to one image (a :class:`~preparer.fetch.guard.SignatureCheck`);
    ``max_age``: the policy's ``image.signature-max-age``, in seconds."""

    def __init__(
        self, rules: Sequence[SignedBy], policy: str, entry: str, max_age: float = SIGNATURE_MAX_AGE
    ) -> None:
        self.rules, self.policy, self.entry, self.max_age = tuple(rules), policy, entry, max_age

    def satisfying(
        self, objects: Sequence[SignatureObject], digests: Sequence[str]
    ) -> tuple[Verified, ...] | None:
        found = self._search(objects, digests)[1]
        return None if None in found else tuple(f for f in found if f is not None)

    def verify(
        self, objects: Sequence[SignatureObject], digests: Sequence[str], image: str
    ) -> tuple[Verified, ...]:
        claims, found = self._search(objects, digests)
        for rule, verified in zip(self.rules, found, strict=True):
            if verified is None:
                raise self._refusal(rule, objects, claims, digests, image)
        return tuple(f for f in found if f is not None)

    def _search(
        self, objects: Sequence[SignatureObject], digests: Sequence[str]
    ) -> tuple[list[_Claim], list[Verified | None]]:
        """What each object claims, and for each rule the first object that satisfies it (``None``: none)."""
        claims = [claim(o) for o in objects]
        return claims, [self._first(rule, objects, claims, digests) for rule in self.rules]

    def refuse(self, image: str, digest: str, why: str) -> SignatureRefused:
        """The refusal of an image whose signature objects are past a bound (``why``): refused even if a valid
        signature is among them."""
        rule = self.rules[0]
        return self._error(rule, image, digest, why, "not-a-signature", None)

    @staticmethod
    def _first(
        rule: SignedBy, objects: Sequence[SignatureObject], claims: Sequence[_Claim], digests: Sequence[str]
    ) -> Verified | None:
        """The first object that claims one of ``digests`` and verifies with one of the rule's keys."""
        checks = 0
        for obj, said in zip(objects, claims, strict=True):
            if said.problem is not None or said.digests.isdisjoint(digests):
                continue  # only what claims this image is worth a key's time
            for signature in said.signatures:
                for key in rule.keys:
                    checks += 1
                    if checks > MAX_CHECKS:
                        return None
                    if key.verify(signature, said.message):
                        digest = next(d for d in digests if d in said.digests)
                        return Verified(obj.format, digest, key.fingerprint, obj.found)
        return None

    def _refusal(
        self,
        rule: SignedBy,
        objects: Sequence[SignatureObject],
        claims: Sequence[_Claim],
        digests: Sequence[str],
        image: str,
    ) -> SignatureRefused:
        """Why no object satisfies ``rule``: none found, one by a trusted key for another digest, one by a trusted
        key that is no signature, or none verifies with the rule's keys (each named by its fingerprint)."""
        fingerprints = tuple(k.fingerprint for k in rule.keys)
        digest = digests[-1]
        other, not_signature, checks = None, None, 0
        for said in claims:
            if said.problem is None and not said.digests.isdisjoint(digests):
                continue  # tried already: it did not verify
            for signature in said.signatures:
                for key in rule.keys:
                    checks += 1
                    if checks > MAX_CHECKS or not key.verify(signature, said.message):
                        continue
                    if said.problem is None and other is None:
                        other = (key.fingerprint, min(said.digests))
                    elif said.problem is not None and not_signature is None:
                        not_signature = (key.fingerprint, said.problem)
        keys = ", ".join(f"sha256:{f}" for f in fingerprints)
        if other is not None:
            reason, signed = "other-digest", other[1]
            why = f"the signature by key sha256:{other[0]} is for {signed}, not for {digest}"
        elif not_signature is not None:
            reason, signed = "not-a-signature", None
            why = f"what key sha256:{not_signature[0]} signed is no image signature: {not_signature[1]}"
        elif objects:
            reason, signed = "unverified", None
            count = f"{len(objects)} signature{'s' if len(objects) != 1 else ''}"
            why = f"{count} found, none verifies with the rule's key{'s' if len(fingerprints) != 1 else ''} ({keys})"
        else:
            reason, signed = "unsigned", None
            why = "no signature found (no sha256-<hex>.sig tag, and no Sigstore bundle among its referrers)"
        return self._error(rule, image, digest, why, reason, signed)

    def _error(
        self, rule: SignedBy, image: str, digest: str, why: str, reason: str, signed: str | None
    ) -> SignatureRefused:
        where = f"line {rule.line} of {self.policy}" if rule.line else self.policy
        error = SignatureRefused(
            f"fetch {image}",
            f"not signed by a key the platform policy trusts (image.signed-by, {where}): {why}",
        )
        return with_fields(
            error, entry=self.entry or None, image=image, digest=digest, reason=reason,
            keys=tuple(k.fingerprint for k in rule.keys), signed_digest=signed, policy=self.policy, line=rule.line,
        )  # fmt: skip
