"""A keyless signature checked whole, offline, in the order sigstore's verifiers check it.

1. **A verified signing time.** Each transparency log entry must be for this signature, this certificate and
   this artifact; its signed entry timestamp (Rekor v1) proves its integrated time, and its inclusion proof with its
   signed checkpoint, when it has one, must verify too (it proves no time). An RFC 3161 timestamp from a timestamp
   authority of the trusted root proves a time as well. A signature without a log entry, or without any verified
   time, is refused.
2. **The certificate at that time.** At every verified time, the leaf chains to a certificate authority of the
   trusted root valid then, and the leaf itself was valid then; its embedded SCT verifies with a CT log of the root.
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
    from preparer.policy.keyless import certs, tlog  # deferred: cryptography is imported by them

    if not evidence.entries:
        raise KeylessProblem(
            "it has no transparency log entry (the keyless signature was not logged in Rekor)"
        )
    times = []
    for entry in evidence.entries:
        tlog.check_entry(entry, evidence)
        if entry.proof is not None:
            tlog.verify_inclusion(entry, root)
        if entry.promise is not None:
            times.append(tlog.verify_promise(entry, root))
        elif entry.proof is None:
            raise KeylessProblem(
                f"its log entry {entry.log_index} has neither an inclusion promise nor a proof"
            )
    if not times and evidence.timestamps:
        raise KeylessProblem(
            "its signing time is proven only by an RFC 3161 timestamp, which this preparer does not verify yet"
        )
    if not times:
        raise KeylessProblem(
            "no verified signing time: no signed entry timestamp from Rekor and no RFC 3161 timestamp"
        )
    for at in sorted(set(times)):
        authority = certs.chain_to_authority(evidence.leaf, evidence.chain, root, at)
    certs.verify_sct(evidence.leaf, certs.issued_by(evidence.leaf, authority.chain + evidence.chain), root)
    certs.verify_signature(evidence.leaf, evidence.signature, evidence.message)
    issuer, subject = certs.identity(evidence.leaf)
    return Verdict(issuer, subject, min(times), evidence.entries[0].log_index, evidence.leaf)
