"""Public keys the platform policy trusts for signatures (``[[image.signed-by]]`` ``keys``), and verification with them.

A key file holds one PEM ``PUBLIC KEY`` block, a DER SubjectPublicKeyInfo: what ``cosign generate-key-pair``
writes to ``cosign.pub``. A key is named everywhere by its fingerprint, the SHA-256 of that DER, in hex.

Supported, each with the hash sigstore pairs it with: ECDSA P-256 with SHA-256 (cosign's default), ECDSA P-384 with
SHA-384, and pure Ed25519. ECDSA signatures are ASN.1 DER, as cosign writes them. Any other key (RSA, P-521, a
certificate, a private key) is refused when the policy is read, naming the file: never ignored. The verification
is the ``ecdsa`` library's (pure Python, imported only by runs whose policy names keys); nothing here is
cryptography of its own.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from pathlib import Path
from typing import Any

from preparer._record import field, record

#: A key file is a few hundred bytes; a larger one is refused unread.
MAX_KEY_BYTES = 64 << 10

_EC_PUBLIC_KEY = (1, 2, 840, 10045, 2, 1)
_CURVES = {
    (1, 2, 840, 10045, 3, 1, 7): ("ecdsa-p256-sha256", "NIST256p", "sha256"),
    (1, 3, 132, 0, 34): ("ecdsa-p384-sha384", "NIST384p", "sha384"),
}
_ED25519 = (1, 3, 101, 112)
#: Algorithms recognised only to be named in the refusal.
_NAMED = {
    (1, 2, 840, 113549, 1, 1, 1): "RSA",
    (1, 2, 840, 113549, 1, 1, 10): "RSA-PSS",
    (1, 3, 101, 113): "Ed448",
    (1, 3, 132, 0, 35): "ECDSA P-521",
    (1, 3, 132, 0, 10): "ECDSA secp256k1",
}
SUPPORTED = "ECDSA P-256, ECDSA P-384, Ed25519"


class KeyProblem(ValueError):
    """A key file that cannot be used, and why (the policy names the file and its line)."""


@record
class PublicKey:
    """A trusted public key.

    Attributes:
        path: the key file.
        fingerprint: SHA-256 of its DER SubjectPublicKeyInfo, hex.
        algorithm: ``ecdsa-p256-sha256``, ``ecdsa-p384-sha384`` or ``ed25519``.
    """

    path: str
    fingerprint: str
    algorithm: str
    _key: Any = field(repr=False, compare=False)

    def verify(self, signature: bytes, message: bytes) -> bool:
        """Whether ``signature`` is this key's over ``message`` (a malformed signature is not)."""
        from ecdsa import BadSignatureError  # deferred, as at load
        from ecdsa.der import UnexpectedDER
        from ecdsa.util import sigdecode_der

        try:
            if self.algorithm == "ed25519":
                return bool(self._key.verify(signature, message))
            hashfunc = getattr(hashlib, self.algorithm.rsplit("-", 1)[1])
            return bool(self._key.verify(signature, message, hashfunc=hashfunc, sigdecode=sigdecode_der))
        except (BadSignatureError, UnexpectedDER, ValueError, AssertionError):
            return False


def load_key(path: Path) -> PublicKey:
    """The public key in the PEM file at ``path``.

    :raises KeyProblem: missing, unreadable, not one PEM public key, a private key or a certificate, or of an
        algorithm that is not supported.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_KEY_BYTES + 1)
    except OSError as err:
        raise KeyProblem(err.strerror or str(err)) from None
    if len(data) > MAX_KEY_BYTES:
        raise KeyProblem(f"larger than {MAX_KEY_BYTES} bytes: not a public key")
    der = _pem_public_key(data.decode("ascii", "replace"))
    algorithm, key = _parse(der)
    return PublicKey(str(path), hashlib.sha256(der).hexdigest(), algorithm, key)


def _pem_public_key(text: str) -> bytes:
    """The DER of the one ``PUBLIC KEY`` block of ``text``."""
    begins = [line.strip() for line in text.splitlines() if line.strip().startswith("-----BEGIN ")]
    if not begins:
        raise KeyProblem("not a PEM file (no -----BEGIN line): give the public key, as cosign.pub")
    label = begins[0].removeprefix("-----BEGIN ").rstrip("-").strip()
    if "PRIVATE KEY" in label:
        raise KeyProblem(
            f"it is a private key ({label}): give the public key (cosign.pub), never the private one"
        )
    if label == "CERTIFICATE":
        raise KeyProblem(
            "it is a certificate: certificates and keyless (Fulcio) signatures are not supported; give the public key"
        )
    if label != "PUBLIC KEY" or len(begins) > 1:
        raise KeyProblem(f"not one PEM public key (found {', '.join(begins)})")
    body, inside = [], False
    for line in text.splitlines():
        line = line.strip()
        if line == "-----BEGIN PUBLIC KEY-----":
            inside = True
        elif line == "-----END PUBLIC KEY-----":
            break
        elif inside and line:
            body.append(line)
    else:
        raise KeyProblem("the PEM block has no -----END PUBLIC KEY----- line")
    try:
        return base64.b64decode("".join(body), validate=True)
    except (binascii.Error, ValueError):
        raise KeyProblem("the PEM block is not base64") from None


def _parse(der: bytes) -> tuple[str, Any]:
    """The algorithm of a DER SubjectPublicKeyInfo and the library's key for it."""
    import ecdsa  # deferred: only runs whose policy names keys verify signatures
    from ecdsa import der as asn1

    try:
        spki, rest = asn1.remove_sequence(der)
        algorithm, _ = asn1.remove_sequence(spki)
        oid, params = asn1.remove_object(algorithm)
        if rest:
            raise asn1.UnexpectedDER("trailing data")
    except asn1.UnexpectedDER as err:
        raise KeyProblem(f"not a DER SubjectPublicKeyInfo ({err})") from None
    if oid == _EC_PUBLIC_KEY:
        try:
            curve_oid, _ = asn1.remove_object(params)
        except asn1.UnexpectedDER:
            raise KeyProblem("an ECDSA key without a named curve is not supported") from None
        if curve_oid not in _CURVES:
            name = _NAMED.get(curve_oid, "ECDSA on curve " + ".".join(map(str, curve_oid)))
            raise KeyProblem(f"{name} keys are not supported (supported: {SUPPORTED})")
        name, curve, _ = _CURVES[curve_oid]
    elif oid == _ED25519:
        name, curve = "ed25519", "Ed25519"
    else:
        what = _NAMED.get(oid, "keys of algorithm " + ".".join(map(str, oid)))
        raise KeyProblem(f"{what} keys are not supported (supported: {SUPPORTED})")
    try:
        key = ecdsa.VerifyingKey.from_der(der, valid_encodings=None)
    except (ecdsa.der.UnexpectedDER, ecdsa.errors.MalformedPointError, ValueError, AssertionError) as err:
        raise KeyProblem(f"not a valid {curve} public key ({err})") from None
    return name, key
