"""What the keyless pieces share: the trusted root, the evidence of one signature, the verdict on it.

Times are whole seconds since the epoch (UTC), as Rekor's ``integratedTime`` is. Certificates are DER bytes; keys
are ``cryptography`` public key objects (typed ``Any`` here so that importing this module imports no cryptography).
"""

from __future__ import annotations

import time
from typing import Any

from preparer._record import field, record


def when(at: int) -> str:
    """The time ``at`` (seconds since the epoch) as messages write it: ``2024-04-02T19:19:20Z``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


class KeylessProblem(ValueError):
    """Why a keyless signature does not verify, in words for an operator (``the certificate does not chain to a
    Fulcio CA of the trusted root valid at 2024-04-02T19:19:20Z``). Never a Python class name or a traceback."""


class RootProblem(ValueError):
    """Why a trusted root file cannot be used; ``where`` is the JSON path of the value at fault
    (``certificateAuthorities[0].certChain.certificates[1]``), or ``""`` for the file as a whole."""

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.where = where


@record
class Window:
    """When a key or an authority of the trusted root may be trusted (``validFor``): ``start`` to ``end``, both
    inclusive; ``end`` ``None`` while it is still in use."""

    start: int
    end: int | None = None

    def holds(self, at: int) -> bool:
        return self.start <= at and (self.end is None or at <= self.end)


@record
class LogKey:
    """A transparency log's or a CT log's key: ``log_id`` is the log's id (the SHA-256 of ``spki``, or the
    ``logId.keyId`` the trusted root gives), ``key`` the ``cryptography`` public key."""

    log_id: bytes
    spki: bytes = field(repr=False)
    key: Any = field(repr=False, compare=False)
    window: Window
    #: ``baseUrl`` of the log, for messages (``https://rekor.sigstore.dev``).
    url: str = ""
    #: The checkpoint origin of a Rekor v2 log (its ``baseUrl`` host), ``""`` when the root gives none.
    origin: str = ""

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        """Pickled with its key as a DER SubjectPublicKeyInfo, read again when unpickled: a policy read in one
        process is used in another (``cryptography``'s keys do not pickle)."""
        from cryptography.hazmat.primitives import serialization  # deferred: the key was made with it

        der = self.key.public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        return _log_key, (self.log_id, self.spki, der, self.window, self.url, self.origin)


def _log_key(log_id: bytes, spki: bytes, der: bytes, window: Window, url: str, origin: str) -> LogKey:
    from cryptography.hazmat.primitives.serialization import load_der_public_key  # deferred, as in __reduce__

    key = load_der_public_key(der)
    return LogKey(log_id=log_id, spki=spki, key=key, window=window, url=url, origin=origin)


@record
class Authority:
    """A certificate authority (Fulcio) or a timestamp authority of the trusted root: its chain as DER, the leaf-most
    certificate first and the root last, as ``certChain.certificates`` lists it."""

    chain: tuple[bytes, ...] = field(repr=False)
    window: Window
    #: ``uri`` of the authority, for messages (``https://fulcio.sigstore.dev``).
    uri: str = ""


@record
class TrustedRoot:
    """The platform's ``trusted_root.json``: what keyless verification trusts, and nothing else."""

    path: str
    #: SHA-256 of the file's bytes, hex: shown by ``-dry-run`` as the root's fingerprint.
    sha256: str
    tlogs: tuple[LogKey, ...]
    ctlogs: tuple[LogKey, ...]
    authorities: tuple[Authority, ...]
    timestamp_authorities: tuple[Authority, ...] = ()


@record
class InclusionProof:
    """A Merkle inclusion proof of a log entry (RFC 6962) and the signed checkpoint (a signed note) it ends in."""

    log_index: int
    root_hash: bytes
    tree_size: int
    hashes: tuple[bytes, ...]
    #: The checkpoint's text (``envelope``), ``""`` when none was given.
    checkpoint: str = ""


@record
class LogEntry:
    """One transparency log entry as the signature object carries it.

    ``body`` is the entry's canonicalized body (decoded from base64): what the log hashed. ``promise`` is the
    signed entry timestamp (an inclusion promise, Rekor v1), ``None`` without one."""

    log_index: int
    log_id: bytes
    kind: str
    version: str
    body: bytes = field(repr=False)
    integrated_time: int | None = None
    promise: bytes | None = field(default=None, repr=False)
    proof: InclusionProof | None = None


@record
class Evidence:
    """Everything one keyless signature object offers to be checked, read but not yet trusted.

    ``signature`` is over ``message``: the payload itself for a ``.sig`` layer and a message-signature bundle, DSSE's
    pre-authentication encoding for a DSSE bundle. ``envelope`` is the DSSE envelope's JSON as the bundle gives it
    (``None`` for a ``.sig`` layer), for the log entry's consistency check (a ``dsse`` entry hashes it)."""

    leaf: bytes = field(repr=False)
    chain: tuple[bytes, ...] = field(repr=False)
    signature: bytes = field(repr=False)
    message: bytes = field(repr=False)
    entries: tuple[LogEntry, ...] = ()
    #: RFC 3161 signed timestamps (DER), over ``signature``.
    timestamps: tuple[bytes, ...] = field(default=(), repr=False)
    envelope: dict[str, Any] | None = field(default=None, repr=False)
    #: Where the evidence came from, for messages (``the .sig layer 1``, ``referrer sha256:…``).
    found: str = ""


@record
class Verdict:
    """A keyless signature that verified: who signed (``issuer``, ``subject``: the certificate's OIDC issuer and
    SAN), when (``signed_at``: the verified signing time), and the log entry that proves it."""

    issuer: str
    subject: str
    signed_at: int
    log_index: int | None = None
    #: The leaf certificate (DER), for the rest of the certificate's claims (GitHub workflow extensions).
    leaf: bytes = field(default=b"", repr=False)
