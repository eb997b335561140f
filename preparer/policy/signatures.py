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

Every payload and bundle is read as cosign (Go) reads it, or is no signature (:func:`~preparer.policy.payload.
read_json`), and a digest it names counts only in the one form a registry gives it (``sha256:`` and 64 lowercase
hex digits). Objects are judged one at a time, as the registry's are fetched, and none is kept once judged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from preparer._logger import log
from preparer._record import record
from preparer.errors import SignatureRefused, with_fields
from preparer.fetch.guard import SIGNATURE_MAX_AGE, SignatureObject, Verified, signature_tag
from preparer.fetch.streams import is_digest
from preparer.policy.identity import Identity
from preparer.policy.keys import PublicKey
from preparer.policy.payload import PayloadProblem, b64, pae, read_json

if TYPE_CHECKING:
    from preparer.policy.keyless.model import TrustedRoot, Verdict

COSIGN_TYPE = "cosign container image signature"
#: The annotation of a keyless ``.sig`` layer that holds its certificate.
CERTIFICATE = "dev.sigstore.cosign/certificate"
BUNDLE_V03 = "application/vnd.dev.sigstore.bundle.v0.3+json"
#: Every spelling of a Sigstore bundle's media type (v0.1 and v0.2 bundles carry a certificate chain).
BUNDLES = frozenset({
    BUNDLE_V03, "application/vnd.dev.sigstore.bundle+json;version=0.3",
    "application/vnd.dev.sigstore.bundle+json;version=0.2", "application/vnd.dev.sigstore.bundle+json;version=0.1",
})  # fmt: skip
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
    ``image.allow``), the keys and the keyless identities it trusts (a signature of either kind satisfies it), the
    line of its ``[[image.signed-by]]`` header, and the trusted root its identities are verified against."""

    images: tuple[str, ...]
    keys: tuple[PublicKey, ...]
    line: int | None
    identities: tuple[Identity, ...] = ()
    root: TrustedRoot | None = None

    @property
    def trusts(self) -> str:
        """``a key``, ``an identity`` or ``a key or an identity``, for refusals."""
        kinds = [kind for kind, has in (("a key", self.keys), ("an identity", self.identities)) if has]
        return " or ".join(kinds)


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
    signature = b64(obj.signature or "")
    signatures = (signature,) if signature else ()
    doc, problem = _json(obj.payload)
    if problem is not None:
        return _Claim(frozenset(), obj.payload, signatures, f"its payload is refused: {problem}")
    critical = doc.get("critical") if isinstance(doc, dict) else None
    if not isinstance(critical, dict):
        return _Claim(frozenset(), obj.payload, signatures, "its payload is not a simple-signing document")
    image = critical.get("image")
    digest = image.get("docker-manifest-digest") if isinstance(image, dict) else None
    if critical.get("type") != COSIGN_TYPE:
        kind = _shown(critical.get("type"))
        return _Claim(frozenset(), obj.payload, signatures, f"its payload's type is '{kind}', not cosign's")
    if not isinstance(digest, str):
        return _Claim(frozenset(), obj.payload, signatures, "its payload names no docker-manifest-digest")
    if not is_digest(digest):
        shown = _shown(digest)
        why = f"its payload's docker-manifest-digest '{shown}' is not sha256: and 64 lowercase hex digits"
        return _Claim(frozenset(), obj.payload, signatures, why)
    return _Claim(frozenset({digest}), obj.payload, signatures)


def _bundle_claim(obj: SignatureObject) -> _Claim:
    bundle, problem = _json(obj.payload)
    if problem is not None:
        return _Claim(frozenset(), b"", (), f"the bundle is refused: {problem}")
    if not isinstance(bundle, dict) or bundle.get("mediaType") not in BUNDLES:
        kind = _shown(bundle.get("mediaType")) if isinstance(bundle, dict) else "not a JSON object"
        return _Claim(frozenset(), b"", (), f"it is not a Sigstore bundle ({kind})")
    envelope = bundle.get("dsseEnvelope")
    if not isinstance(envelope, dict):
        return _Claim(frozenset(), b"", (), "the bundle holds no DSSE envelope")
    payload_type = envelope.get("payloadType")
    payload = b64(envelope.get("payload"))
    listed = envelope.get("signatures")
    raw = (
        [s.get("sig") for s in listed[:MAX_ENVELOPE_SIGNATURES] if isinstance(s, dict)]
        if isinstance(listed, list)
        else []
    )
    signatures = tuple(sig for sig in map(b64, raw) if sig)
    if not isinstance(payload_type, str) or payload is None:
        return _Claim(frozenset(), b"", (), "its DSSE envelope has no payload or payload type")
    message = pae(payload_type, payload)
    statement, problem = _json(payload)
    if problem is not None:
        return _Claim(frozenset(), message, signatures, f"its statement is refused: {problem}")
    if payload_type != IN_TOTO_PAYLOAD or not isinstance(statement, dict):
        return _Claim(
            frozenset(),
            message,
            signatures,
            f"its payload is not an in-toto statement ({_shown(payload_type)})",
        )
    if statement.get("_type") not in _STATEMENTS:
        return _Claim(frozenset(), message, signatures, "its payload is not an in-toto statement")
    predicate = statement.get("predicateType")
    if predicate != COSIGN_PREDICATE:
        return _Claim(
            frozenset(),
            message,
            signatures,
            f"it is an attestation of {_shown(predicate)}, not a signature",
        )
    subjects = statement.get("subject")
    named = [
        "sha256:" + s["digest"]["sha256"]
        for s in (subjects if isinstance(subjects, list) else [])
        if isinstance(s, dict)
        and isinstance(s.get("digest"), dict)
        and isinstance(s["digest"].get("sha256"), str)
    ]
    digests = frozenset(d for d in named if is_digest(d))
    if not digests:
        why = "its statement names no sha256 subject"
        if named:
            why += f" in 64 lowercase hex digits ('{_shown(named[0])}')"
        return _Claim(frozenset(), message, signatures, why)
    return _Claim(digests, message, signatures)


def _json(data: bytes) -> tuple[Any, str | None]:
    """The JSON document ``data`` read strictly, or why it is refused."""
    try:
        return read_json(data), None
    except PayloadProblem as problem:
        return None, str(problem)


def _shown(value: object) -> str:
    """``value`` as a message may show it: printable, at most 100 characters."""
    text = "".join(c if c.isprintable() else "?" for c in str(value))
    return text if len(text) <= 100 else text[:99] + "…"


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
        judging = self._judge(objects, digests)
        return judging.found() if judging.done else None

    def verify(
        self,
        objects: Iterable[SignatureObject],
        digests: Sequence[str],
        image: str,
        keep: Callable[[SignatureObject], None] | None = None,
    ) -> tuple[Verified, ...]:
        judging = self._judge(objects, digests, keep)
        for progress in judging.progress:
            if progress.verified is None:
                raise self._refusal(progress, judging, image)
        return judging.found()

    def _judge(
        self,
        objects: Iterable[SignatureObject],
        digests: Sequence[str],
        keep: Callable[[SignatureObject], None] | None = None,
    ) -> _Judging:
        """``objects`` judged one at a time until every rule is satisfied (``keep``: given each object that
        satisfies a rule)."""
        judging = _Judging(self.rules, digests)
        for obj in objects:
            if judging.judge(obj) and keep is not None:
                keep(obj)
            if judging.done:
                break
        return judging

    def refuse(self, image: str, digest: str, why: str) -> SignatureRefused:
        """The refusal of an image whose signature objects are past a bound (``why``): refused even if a valid
        signature is among them."""
        rule = self.rules[0]
        return self._error(rule, image, digest, why, "not-a-signature", None)

    def _refusal(self, progress: _Progress, judging: _Judging, image: str) -> SignatureRefused:
        """Why no object satisfies ``progress``'s rule: none found, one by a trusted key for another digest, one
        by a trusted key that is no signature, or none verifies with the rule's keys (each named by its
        fingerprint); and where signatures of which digests were looked for."""
        rule, digests = progress.rule, judging.digests
        fingerprints = tuple(k.fingerprint for k in rule.keys)
        digest = digests[-1]
        keys = ", ".join(f"sha256:{f}" for f in fingerprints)
        trusted = "; ".join(i.shown for i in rule.identities)
        if progress.other_signer is not None:
            reason, signed = "other-identity", None
            signer = progress.other_signer
            why = (
                f"the keyless signature for {digest} is by issuer {signer.issuer}, subject {signer.subject}, which "
                f"no identity of the rule matches ({trusted})"
            )
            partly = next(
                filter(None, (i.partial(signer.issuer, signer.subject) for i in rule.identities)), None
            )
            why += f": {partly}" if partly else ""
        elif progress.keyless_problem is not None and not rule.keys:
            reason, signed, why = "unverified", None, progress.keyless_problem
        elif progress.other is not None:
            reason, signed = "other-digest", progress.other[1]
            why = f"the signature by key sha256:{progress.other[0]} is for {signed}, not for {digest}"
        elif progress.not_signature is not None:
            reason, signed = "not-a-signature", None
            named, problem = progress.not_signature
            why = f"what {named} signed is no image signature: {problem}"
        elif judging.seen:
            reason, signed = "unverified", None
            count = f"{judging.seen} signature{'s' if judging.seen != 1 else ''}"
            with_keys = f"the rule's key{'s' if len(fingerprints) != 1 else ''} ({keys})"
            trusting = " or ".join(
                w for w, has in ((with_keys, keys), (f"its identities ({trusted})", trusted)) if has
            )
            why = f"{count} found, none verifies with {trusting}" + _keyless_hint(progress.keyless_seen)
        else:
            reason, signed = "unsigned", None
            why = "no signature found"
        return self._error(rule, image, digest, f"{why}; {looked_for(digests)}", reason, signed)

    def _error(
        self, rule: SignedBy, image: str, digest: str, why: str, reason: str, signed: str | None
    ) -> SignatureRefused:
        where = f"line {rule.line} of {self.policy}" if rule.line else self.policy
        error = SignatureRefused(
            f"fetch {image}",
            f"not signed by {rule.trusts} the platform policy trusts (image.signed-by, {where}): {why}",
        )
        return with_fields(
            error, entry=self.entry or None, image=image, digest=digest, reason=reason,
            keys=tuple(k.fingerprint for k in rule.keys), signed_digest=signed, policy=self.policy, line=rule.line,
        )  # fmt: skip


def looked_for(digests: Sequence[str]) -> str:
    """Where the signatures of ``digests`` were looked for, in words: their ``.sig`` tags and their referrers."""
    tags = " and ".join(signature_tag(d) for d in digests)
    if len(digests) == 1:
        return (
            f"looked for signatures of {digests[0]} at the tag {tags} and among the referrers of {digests[0]}"
        )
    return (
        f"looked for signatures of {' and '.join(digests)} at the tags {tags} and among the referrers of each"
    )


class _Progress:
    """What judging has found for one rule so far: the object that satisfies it, and for its refusal the first
    signature by one of its keys for another digest (``other``: fingerprint, digest) and the first by one of its keys
    or identities that is no image signature (``not_signature``: the signer in words, the problem). Each search tries
    at most :data:`MAX_CHECKS` keys."""

    def __init__(self, rule: SignedBy) -> None:
        self.rule = rule
        self.verified: Verified | None = None
        self.other: tuple[str, str] | None = None
        self.not_signature: tuple[str, str] | None = None
        #: A keyless signature for the image that verified but is another signer's; why the first one that did not
        #: verify was refused.
        self.other_signer: Verdict | None = None
        self.keyless_problem: str | None = None
        #: For a rule with keys only: the first keyless signature seen, where, and the signer it claims.
        self.keyless_seen: tuple[str, str, str] | None = None
        self.checks = self.evidence_checks = 0

    def judge(self, obj: SignatureObject, said: _Claim, digests: Sequence[str]) -> bool:
        """Whether ``obj`` (which claims ``said``) satisfies the rule; what it shows for a refusal is noted."""
        if not self.rule.identities and self.keyless_seen is None:
            self.keyless_seen = _keyless_claim(obj)
        if said.problem is None and not said.digests.isdisjoint(digests):
            digest = next(d for d in digests if d in said.digests)
            if self.rule.identities and self.checks < MAX_CHECKS:
                self.checks += 1
                if self._keyless(obj, digest):
                    return True
            fingerprint, self.checks = _verifying(self.rule, said, self.checks)
            if fingerprint is None:
                return False
            self.verified = Verified(obj.format, digest, fingerprint, obj.found, line=self.rule.line)
            return True
        # Only what claims this image is worth a key's time for the verdict; the rest, for the refusal's words.
        if (self.other if said.problem is None else self.not_signature) is not None:
            return False
        fingerprint, self.evidence_checks = _verifying(self.rule, said, self.evidence_checks)
        if fingerprint is not None and said.problem is None:
            self.other = (fingerprint, min(said.digests))
        elif fingerprint is not None and said.problem is not None:
            self.not_signature = (f"key sha256:{fingerprint}", said.problem)
        elif said.problem is not None and self.rule.identities and self.evidence_checks < MAX_CHECKS:
            self.evidence_checks += 1  # a trusted signer's attestation is worth naming as such
            verdict = _keyless(obj, self.rule)
            if not isinstance(verdict, str) and any(i.matches(verdict.issuer, verdict.subject)
                                                    for i in self.rule.identities):  # fmt: skip
                self.not_signature = (f"issuer {verdict.issuer}, subject {verdict.subject}", said.problem)
        return False

    def _keyless(self, obj: SignatureObject, digest: str) -> bool:
        """Whether ``obj`` is a keyless signature that verifies and names one of the rule's identities."""
        verdict = _keyless(obj, self.rule)
        if isinstance(verdict, str):
            log.debug("Signature %s is no keyless signature the policy can use: %s", obj.found, verdict)
            self.keyless_problem = (
                self.keyless_problem or f"the keyless signature {obj.found} does not verify: {verdict}"
            )
            return False
        if not any(identity.matches(verdict.issuer, verdict.subject) for identity in self.rule.identities):
            self.other_signer = self.other_signer or verdict
            return False
        self.verified = Verified(obj.format, digest, "", obj.found, verdict.issuer, verdict.subject,
                                 verdict.log_index, verdict.signed_at, self.rule.line)  # fmt: skip
        return True


def _keyless_claim(obj: SignatureObject) -> tuple[str, str, str] | None:
    """``(where, issuer, subject)`` when ``obj`` is a keyless signature (its certificate's claims, not verified)."""
    # The common case of a keyed rule, a keyed signature: no certificate to read (and the bundle not read twice).
    if obj.format == "cosign" and not any(name == CERTIFICATE for name, _ in obj.annotations):
        return None
    if (
        obj.format != "cosign"
        and b'"certificate"' not in obj.payload
        and b"x509CertificateChain" not in obj.payload
    ):
        return None
    from preparer.policy.keyless.evidence import claimed_signer  # deferred: only keyless signatures

    claimed = claimed_signer(obj.format, obj.payload, dict(obj.annotations))
    return None if claimed is None else (obj.found, *claimed)


def _keyless_hint(seen: tuple[str, str, str] | None) -> str:
    """What a rule with keys only says of a keyless signature it saw: that it is keyless, and how to trust it."""
    if seen is None:
        return ""
    where, issuer, subject = seen
    signer = f" by issuer {issuer}, subject {subject}" if issuer and subject else ""
    return (
        f": the signature {where} is keyless (a Sigstore certificate{signer}, not verified), which no key can "
        "verify; to trust its signer, give the rule [[image.signed-by.identities]] with its issuer and subject "
        "and the policy [sigstore] trusted-root (docs/policy.md, keyless identities)"
    )


def _verifying(rule: SignedBy, said: _Claim, checks: int) -> tuple[str | None, int]:
    """The fingerprint of the first of the rule's keys one of ``said``'s signatures verifies with (``None``:
    none), and the checks made so far, ``checks`` included: none past :data:`MAX_CHECKS`."""
    for signature in said.signatures:
        for key in rule.keys:
            if checks >= MAX_CHECKS:
                return None, checks
            checks += 1
            if key.verify(signature, said.message):
                return key.fingerprint, checks
    return None, checks


class _Judging:
    """One image's rules judged against its signature objects, one at a time: what was found for each rule, and
    how many objects were seen. No object is kept."""

    def __init__(self, rules: Sequence[SignedBy], digests: Sequence[str]) -> None:
        self.digests = tuple(digests)
        self.progress = [_Progress(rule) for rule in rules]
        self.seen = 0

    @property
    def done(self) -> bool:
        """Whether every rule is satisfied."""
        return all(p.verified is not None for p in self.progress)

    def judge(self, obj: SignatureObject) -> bool:
        """Judge ``obj`` for every rule not yet satisfied; whether it satisfies one."""
        self.seen += 1
        said = claim(obj)
        if said.problem is not None:
            log.debug("Signature object %s is no image signature: %s", obj.found, said.problem)
        used = False
        for progress in self.progress:
            if progress.verified is None:
                used = progress.judge(obj, said, self.digests) or used
        return used

    def found(self) -> tuple[Verified, ...]:
        """The signature that satisfies each rule satisfied."""
        return tuple(p.verified for p in self.progress if p.verified is not None)


def _keyless(obj: SignatureObject, rule: SignedBy) -> Verdict | str:
    """The keyless verdict on ``obj`` against the rule's trusted root, or why there is none (a keyed signature,
    or a check that refused it)."""
    # Deferred: only identity rules verify keyless signatures.
    from preparer.policy.keyless.evidence import from_bundle, from_cosign_layer
    from preparer.policy.keyless.model import KeylessProblem
    from preparer.policy.keyless.verify import verify

    assert rule.root is not None  # the policy reads it for every rule with identities
    try:
        if obj.format == "cosign":
            found = from_cosign_layer(obj.payload, obj.signature or "", dict(obj.annotations), obj.found)
            if found is None:
                return "it is signed with a key, not keylessly (no certificate)"
        else:
            found = from_bundle(obj.payload, obj.found)
        return verify(found, rule.root)
    except KeylessProblem as problem:
        return str(problem)
