"""Keyless signatures made as cosign makes them, offline, with a Sigstore of the tests' own (tests/keyless.py) and a
Rekor log signed with its key (tests/keyless_log.py): a ``.sig`` layer with its certificate and Rekor bundle
annotations (cosign up to v2), and a Sigstore bundle v0.3 attached as a referrer (cosign v3)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from preparer.policy.keyless.model import LogKey, Window
from tests.keyless import GITHUB_ISSUER, T0, WORKFLOW, Leaf, Sigstore, b64, der, make_sigstore, spki
from tests.keyless_log import Log, hashedrekord, pem
from tests.plugins.registry import Registry
from tests.plugins.signing import BUNDLE, attach_bundle, sign_tag_scheme, simple_signing, statement

IN_TOTO = "application/vnd.in-toto+json"


@dataclass
class Signer:
    """A Sigstore instance, its Rekor log, and the trusted root that trusts them (written to ``root``)."""

    sigstore: Sigstore
    log: Log
    root: Path

    def leaf(self, subject: str = WORKFLOW, issuer: str = GITHUB_ISSUER, at: int = T0) -> Leaf:
        """A Fulcio certificate for ``subject`` from ``issuer``, valid for ten minutes around ``at``."""
        return self.sigstore.leaf(subject=subject, issuer=issuer, not_before=at - 60)

    @property
    def chain_pem(self) -> str:
        return "".join(pem(der(c)) for c in (self.sigstore.intermediate, self.sigstore.root))


def make_signer(directory: Path) -> Signer:
    """A new Sigstore and its log; its trusted root written to ``directory/trusted_root.json``."""
    sigstore = make_sigstore()
    log = Log(kind="ecdsa", name="rekor.sigstore.test")
    log.private = sigstore.rekor_key  # the log signs with the key the trusted root names
    public = sigstore.rekor_key.public_key()
    log.key = LogKey(hashlib.sha256(spki(public)).digest(), spki(public), public, Window(sigstore.start),
                     sigstore.rekor_url)  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    return Signer(sigstore, log, sigstore.trusted_root(directory / "trusted_root.json"))


def cosign_keyless(
    registry: Registry,
    repository: str,
    digest: str,
    signer: Signer,
    leaf: Leaf | None = None,
    signed_digest: str | None = None,
    at: int = T0,
) -> str:
    """``cosign sign`` (v2, keyless) with the tag scheme: the simple-signing payload signed with a Fulcio leaf, logged
    in Rekor as a ``hashedrekord``; the layer carries the certificate, its chain and the Rekor bundle."""
    leaf = leaf or signer.leaf(at=at)
    payload = simple_signing(f"{registry.host}/{repository}", signed_digest or digest)
    signature = leaf.sign(payload)
    annotations = cosign_annotations(signer, leaf, payload, signature, signer.chain_pem, at)
    return sign_tag_scheme(registry, repository, digest, [(payload, signature)], [annotations])


def cosign_annotations(
    signer: Signer, leaf: Leaf, payload: bytes, signature: bytes, chain: str, at: int = T0
) -> dict[str, str]:
    """The annotations of a keyless ``.sig`` layer as cosign v2 writes them: the leaf, the chain it offers (PEM), and
    the Rekor bundle of ``signature`` over ``payload``, logged as a ``hashedrekord`` in the signer's log at ``at``."""
    body = hashedrekord(signature, leaf.der, payload)
    entry = signer.log.add(body, at=at)
    assert entry.promise is not None
    rekor = {"SignedEntryTimestamp": b64(entry.promise),
             "Payload": {"body": b64(body), "integratedTime": at, "logIndex": entry.log_index,
                         "logID": entry.log_id.hex()}}  # fmt: skip
    return {
        "dev.sigstore.cosign/certificate": pem(leaf.der),
        "dev.sigstore.cosign/chain": chain,
        "dev.sigstore.cosign/bundle": json.dumps(rekor),
    }


def tlog_entry(signer: Signer, body: bytes, kind: str, at: int = T0) -> dict[str, Any]:
    """``body`` (a ``kind`` 0.0.1 entry) added to the signer's Rekor log at ``at``, as a bundle's ``tlogEntries``
    item: its promise, inclusion proof and checkpoint."""
    entry = signer.log.add(body, at=at)
    assert entry.promise is not None and entry.proof is not None
    proof = entry.proof
    return {
        "logIndex": str(entry.log_index), "logId": {"keyId": b64(entry.log_id)},
        "kindVersion": {"kind": kind, "version": "0.0.1"}, "integratedTime": str(at),
        "inclusionPromise": {"signedEntryTimestamp": b64(entry.promise)},
        "inclusionProof": {"logIndex": str(proof.log_index), "rootHash": b64(proof.root_hash),
                           "treeSize": str(proof.tree_size), "hashes": [b64(h) for h in proof.hashes],
                           "checkpoint": {"envelope": proof.checkpoint}},
        "canonicalizedBody": b64(body),
    }  # fmt: skip


def keyless_bundle(signer: Signer, payload: bytes, leaf: Leaf | None = None, at: int = T0) -> bytes:
    """A Sigstore bundle v0.3 as cosign v3 makes one: a DSSE envelope over ``payload`` (an in-toto statement) signed
    with a Fulcio leaf, logged in Rekor as ``dsse`` 0.0.1 with its promise, inclusion proof and checkpoint."""
    leaf = leaf or signer.leaf(at=at)
    signature = leaf.sign(b"DSSEv1 %d %b %d %b" % (len(IN_TOTO), IN_TOTO.encode(), len(payload), payload))
    envelope = {"payload": b64(payload), "payloadType": IN_TOTO, "signatures": [{"sig": b64(signature)}]}
    body = json.dumps({
        "apiVersion": "0.0.1", "kind": "dsse",
        "spec": {"envelopeHash": {"algorithm": "sha256",
                                  "value": hashlib.sha256(json.dumps(envelope).encode()).hexdigest()},
                 "payloadHash": {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()},
                 "signatures": [{"signature": b64(signature), "verifier": b64(pem(leaf.der).encode())}]},
    }, sort_keys=True, separators=(",", ":")).encode()  # fmt: skip
    return json.dumps({
        "mediaType": BUNDLE,
        "verificationMaterial": {"certificate": {"rawBytes": b64(leaf.der)},
                                 "tlogEntries": [tlog_entry(signer, body, "dsse", at)]},
        "dsseEnvelope": envelope,
    }).encode()  # fmt: skip


def bundle_keyless(
    registry: Registry, repository: str, digest: str, signer: Signer, leaf: Leaf | None = None, at: int = T0
) -> str:
    """``cosign sign`` (v3, keyless): the bundle attached as a referrer of ``digest``; the referrer's digest."""
    payload = statement(f"{registry.host}/{repository}", digest)
    return attach_bundle(registry, repository, digest, keyless_bundle(signer, payload, leaf, at))[0]
