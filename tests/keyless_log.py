"""Transparency logs for tests: a log of our own that signs entry timestamps and checkpoints with keys made here,
and the logs of a real ``trusted_root.json`` (its ``tlogs`` only: the trusted root's reader is ``root.py``'s)."""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

from preparer.policy.keyless.model import InclusionProof, LogEntry, LogKey, TrustedRoot, Window

DATA = Path(__file__).parent / "data" / "sigstore" / "tlog"
#: 2024-01-01T00:00:00Z: when our own logs' entries are integrated.
T0 = 1704067200


def _spki(key: Any) -> bytes:
    return bytes(
        key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def _time(text: str) -> int:
    return int(datetime.datetime.fromisoformat(text).timestamp())


def real_root(name: str) -> TrustedRoot:
    """The transparency logs of ``tests/data/sigstore/tlog/<name>`` (a trusted root, or a trust config holding
    one), each key loaded with ``cryptography``."""
    path = DATA / name
    doc = json.loads(path.read_bytes())
    doc = doc.get("trustedRoot", doc)
    logs = []
    for log in doc["tlogs"]:
        spki = base64.b64decode(log["publicKey"]["rawBytes"])
        valid = log["publicKey"]["validFor"]
        window = Window(_time(valid["start"]), _time(valid["end"]) if "end" in valid else None)
        url = log["baseUrl"]
        logs.append(
            LogKey(
                log_id=base64.b64decode(log["logId"]["keyId"]),
                spki=spki,
                key=serialization.load_der_public_key(spki),
                window=window,
                url=url,
                origin=url.split("://", 1)[1] if log["publicKey"]["keyDetails"] == "PKIX_ED25519" else "",
            )
        )
    return TrustedRoot(str(path), hashlib.sha256(path.read_bytes()).hexdigest(), tuple(logs), (), ())


class Log:
    """A transparency log of our own: Rekor v1 style (ECDSA P-256, entries with signed entry timestamps, the log
    id the SHA-256 of the key) or Rekor v2 style (Ed25519, checkpoints only, named by its origin)."""

    def __init__(
        self, kind: str = "ecdsa", name: str = "rekor.test.example", window: Window | None = None
    ) -> None:
        self.private: Any = (
            ec.generate_private_key(ec.SECP256R1())
            if kind == "ecdsa"
            else ed25519.Ed25519PrivateKey.generate()
        )
        self.kind, self.name = kind, name
        spki = _spki(self.private.public_key())
        self.key = LogKey(
            log_id=hashlib.sha256(spki).digest(),
            spki=spki,
            key=self.private.public_key(),
            window=window or Window(T0 - 86400),
            url=f"https://{name}",
            origin=name if kind == "ed25519" else "",
        )
        self.leaves: list[bytes] = []

    def root(self, *others: LogKey) -> TrustedRoot:
        return TrustedRoot("trusted_root.json", "0" * 64, (self.key, *others), (), ())

    def sign(self, data: bytes) -> bytes:
        if self.kind == "ecdsa":
            return bytes(self.private.sign(data, ec.ECDSA(hashes.SHA256())))
        return bytes(self.private.sign(data))

    def key_id(self) -> bytes:
        if self.kind == "ecdsa":
            return self.key.log_id[:4]
        raw = self.private.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return hashlib.sha256(self.name.encode() + b"\n\x01" + raw).digest()[:4]

    def promise(self, body: bytes, index: int, at: int) -> bytes:
        """The signed entry timestamp Rekor v1 gives an entry."""
        signed = json.dumps(
            {
                "body": base64.b64encode(body).decode(),
                "integratedTime": at,
                "logID": self.key.log_id.hex(),
                "logIndex": index,
            },
            sort_keys=True,
            separators=(",", ":"),
        )
        return self.sign(signed.encode())

    def checkpoint(
        self, size: int, root_hash: bytes, *, origin: str | None = None, signer: Log | None = None
    ) -> str:
        """A checkpoint of this log (``origin`` as Rekor v1 writes it by default), signed by ``signer`` (this
        log by default) under this log's name."""
        if origin is None:
            origin = self.name if self.kind == "ed25519" else f"{self.name} - 1193050959916656506"
        note = f"{origin}\n{size}\n{base64.b64encode(root_hash).decode()}\n"
        by = signer or self
        signature = base64.b64encode(by.key_id() + by.sign(note.encode())).decode()
        return f"{note}\n\u2014 {self.name} {signature}\n"

    def add(self, body: bytes, *, padding: int = 5, at: int = T0) -> LogEntry:
        """``body`` logged among ``padding`` other entries: its entry with a promise, a proof and a checkpoint."""
        for i in range(padding // 2):
            self.leaves.append(b'{"other": %d}' % i)
        index = len(self.leaves)
        self.leaves.append(body)
        for i in range(padding - padding // 2):
            self.leaves.append(b'{"later": %d}' % i)
        size = len(self.leaves)
        root_hash, path = tree_root(self.leaves), inclusion_path(self.leaves, index)
        proof = InclusionProof(index, root_hash, size, tuple(path), self.checkpoint(size, root_hash))
        kind = json.loads(body)
        return LogEntry(
            log_index=1000 + index,
            log_id=self.key.log_id,
            kind=kind.get("kind", "hashedrekord"),
            version=kind.get("apiVersion", "0.0.1"),
            body=body,
            integrated_time=at if self.kind == "ecdsa" else None,
            promise=self.promise(body, 1000 + index, at) if self.kind == "ecdsa" else None,
            proof=proof,
        )


def _leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def _largest_power_below(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def tree_root(leaves: list[bytes]) -> bytes:
    """RFC 9162's Merkle tree hash of ``leaves`` (written from the definition, recursively)."""
    if len(leaves) == 1:
        return _leaf(leaves[0])
    k = _largest_power_below(len(leaves))
    return hashlib.sha256(b"\x01" + tree_root(leaves[:k]) + tree_root(leaves[k:])).digest()


def inclusion_path(leaves: list[bytes], index: int) -> list[bytes]:
    """RFC 9162's audit path of the leaf at ``index`` (from the definition, recursively)."""
    if len(leaves) == 1:
        return []
    k = _largest_power_below(len(leaves))
    if index < k:
        return [*inclusion_path(leaves[:k], index), tree_root(leaves[k:])]
    return [*inclusion_path(leaves[k:], index - k), tree_root(leaves[:k])]


def pem(der: bytes) -> str:
    body = base64.b64encode(der).decode()
    return (
        "-----BEGIN CERTIFICATE-----\n"
        + "".join(body[i : i + 64] + "\n" for i in range(0, len(body), 64))
        + "-----END CERTIFICATE-----\n"
    )


def hashedrekord(signature: bytes, leaf: bytes, message: bytes) -> bytes:
    """A ``hashedrekord`` 0.0.1 body as Rekor v1 canonicalizes it."""
    doc = {
        "apiVersion": "0.0.1",
        "kind": "hashedrekord",
        "spec": {
            "data": {"hash": {"algorithm": "sha256", "value": hashlib.sha256(message).hexdigest()}},
            "signature": {
                "content": base64.b64encode(signature).decode(),
                "publicKey": {"content": base64.b64encode(pem(leaf).encode()).decode()},
            },
        },
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
