"""A keyless signature checked whole, offline, in the order sigstore's verifiers check it.

1. **A verified signing time.** Each RFC 3161 timestamp from a timestamp authority of the trusted root proves a
   time (:mod:`.tsa`); one that does not verify proves nothing and is not counted, as sigstore's verifiers do (a
   real bundle may carry a timestamp of another message beside a good one). Each transparency log entry must be
   for this signature, this certificate and this artifact; its signed entry timestamp (Rekor v1) proves its
   integrated time, and its inclusion proof with its signed checkpoint, when it has one, must verify too (it proves
   no time: the log's key must be valid at the entry's verified integrated time, or, for an entry without a signed
   entry timestamp, such as Rekor v2's, at every verified time; an integrated time the entry merely claims chooses
   no key). A signature without a log entry, or without any verified time, is refused.
2. **The certificate at that time.** At every verified time, the leaf chains to a certificate authority of the
   trusted root valid then, and the leaf itself was valid then; its embedded SCT verifies with a CT log of the root
   trusted at the SCT's time and at every verified time.
3. **The signature** verifies with the leaf's key over what was signed.
4. **Who signed**: the certificate's OIDC issuer and subject, for the policy to match against its identities.

Any failure is a :class:`~preparer.policy.keyless.model.KeylessProblem` saying which check refused it.
"""

from __future__ import annotations

from preparer.policy.keyless.model import Evidence, KeylessProblem, TrustedRoot, Verdict


def verify(evidence: Evidence, root: TrustedRoot) -> Verdict:
    """The verdict on ``evidence`` against ``root``.

    :raises KeylessProblem: the first check that refuses it.
    """
    from preparer.policy.keyless import certs, tlog, tsa  # deferred: cryptography is imported by them

    if not evidence.entries:
        raise KeylessProblem(
            "it has no transparency log entry (the keyless signature was not logged in Rekor)"
        )
    stamped, refused = [], []
    for number, token in enumerate(evidence.timestamps, 1):
        try:
            stamped.append(tsa.verify_timestamp(token, evidence.signature, root))
        except KeylessProblem as problem:
            refused.append(f"its RFC 3161 timestamp {number} is refused: {problem}")
    promised: list[int | None] = []
    for entry in evidence.entries:
        tlog.check_entry(entry, evidence)
        if entry.promise is None and entry.proof is None:
            raise KeylessProblem(
                f"its log entry {entry.log_index} has neither an inclusion promise nor a proof"
            )
        promised.append(None if entry.promise is None else tlog.verify_promise(entry, root))
    times = stamped + [at for at in promised if at is not None]
    if not times:
        timestamps = "; ".join(refused) if refused else "no RFC 3161 timestamp"
        raise KeylessProblem(
            f"no verified signing time: no signed entry timestamp from Rekor, and {timestamps}"
        )
    for entry, logged in zip(evidence.entries, promised, strict=True):
        # A checkpoint signs no time: its key is judged at the entry's verified integrated time, else at every
        # verified time; never at the integrated time an entry without a signed entry timestamp claims.
        for at in sorted({logged} if logged is not None else set(times)) if entry.proof is not None else ():
            tlog.verify_inclusion(entry, root, at=at)
    for at in sorted(set(times)):
        authority = certs.chain_to_authority(evidence.leaf, evidence.chain, root, at)
    certs.verify_sct(evidence.leaf, certs.issued_by(evidence.leaf, authority.chain), root, at=tuple(times))
    certs.verify_signature(evidence.leaf, evidence.signature, evidence.message)
    issuer, subject = certs.identity(evidence.leaf)
    return Verdict(issuer, subject, min(times), evidence.entries[0].log_index, evidence.leaf)
