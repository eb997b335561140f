"""Public keys the platform policy trusts for signatures (``[[image.signed-by]]`` ``keys``), and verification with them.

A key file holds one PEM ``PUBLIC KEY`` block, a DER SubjectPublicKeyInfo: what ``cosign generate-key-pair``
writes to ``cosign.pub``. A key is named everywhere by its fingerprint, the SHA-256 of that DER, in hex.

Supported, each with the hash sigstore pairs it with: ECDSA P-256 with SHA-256 (cosign's default), ECDSA P-384 with
SHA-384, and pure Ed25519. ECDSA signatures are ASN.1 DER, as cosign writes them. Any other key (RSA, P-521, a
certificate, a private key) is refused when the policy is read, naming the file: never ignored.

The PEM block and the algorithm of the key are read here, so that a refusal says what the file is (a private key,
a certificate, an RSA key) rather than that a library could not read it. The key itself is read and every signature
verified by ``cryptography``, the one library of the preparer's signature work (keyless verification uses it too),
imported only by runs whose policy names keys; nothing here is cryptography of its own.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
from collections.abc import Callable
from pathlib import Path

from preparer._record import field, record

#: A key file is a few hundred bytes; a larger one is refused unread.
MAX_KEY_BYTES = 64 << 10

_EC_PUBLIC_KEY = "1.2.840.10045.2.1"
#: The named curves supported: the algorithm's name, the curve's for messages, the hash sigstore pairs with it.
_CURVES = {
    "1.2.840.10045.3.1.7": ("ecdsa-p256-sha256", "P-256", "SHA256"),
    "1.3.132.0.34": ("ecdsa-p384-sha384", "P-384", "SHA384"),
}
_ED25519 = "1.3.101.112"
#: Algorithms recognised only to be named in the refusal.
_NAMED = {
    "1.2.840.113549.1.1.1": "RSA",
    "1.2.840.113549.1.1.10": "RSA-PSS",
    "1.3.101.113": "Ed448",
    "1.3.132.0.35": "ECDSA P-521",
    "1.3.132.0.10": "ECDSA secp256k1",
}
SUPPORTED = "ECDSA P-256, ECDSA P-384, Ed25519"

# DER tags (X.690) of what a SubjectPublicKeyInfo's algorithm is made of.
_SEQUENCE, _OID = 0x30, 0x06


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
    #: The ``verify(signature, message)`` of the ``cryptography`` key, with the signature scheme of ``algorithm``;
    #: it raises ``InvalidSignature`` for a signature that is not this key's.
    _verify: Callable[[bytes, bytes], None] = field(repr=False, compare=False)

    def verify(self, signature: bytes, message: bytes) -> bool:
        """Whether ``signature`` is this key's over ``message`` (a malformed signature is not)."""
        from cryptography.exceptions import InvalidSignature  # deferred: imported already, at load

        try:
            self._verify(signature, message)
        except InvalidSignature:
            return False
        return True


def load_key(path: Path) -> PublicKey:
    """The public key in the PEM file at ``path``.

    :raises KeyProblem: missing, unreadable, not one PEM public key, a private key or a certificate, or of an
        algorithm that is not supported.
    """
    try:
        data = read_regular(path, MAX_KEY_BYTES + 1)
    except OSError as err:
        raise KeyProblem(err.strerror or str(err)) from None
    return parse_key(data, str(path))


def read_regular(path: Path, limit: int) -> bytes:
    """At most ``limit`` bytes of the regular file at ``path``, which the policy names (a key, a trusted root).

    It is opened without blocking, so a fifo (or a device) named there is refused at once instead of holding the
    run, and anything but a regular file is refused before a byte is read. Whatever is at the path when it is no
    regular file that can be read (nothing, a directory, a fifo, a device, a file the preparer may not read) is
    refused in the same words: a policy checked for someone else (``check_policy``) tells them nothing of the host's
    paths that the run does not need, which is a regular file to read.

    :raises OSError: it cannot be opened or read, or is not a regular file (``strerror`` says so).
    """
    import os  # deferred: only policies that name files read them
    import stat

    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        raise OSError(0, NO_REGULAR_FILE) from None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(0, NO_REGULAR_FILE)
        chunks, count = [], 0
        while count < limit:
            chunk = os.read(descriptor, min(limit - count, 1 << 16))
            if not chunk:
                break
            chunks.append(chunk)
            count += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(descriptor)


#: How :func:`read_regular` refuses a path at which there is no regular file it can read, whatever is there.
NO_REGULAR_FILE = (
    "not a regular file the preparer can read (missing, a directory, a fifo, a device, or not readable)"
)


def parse_key(text: str | bytes, name: str) -> PublicKey:
    """The public key in the PEM ``text``: a key file's bytes, a key given as bytes by name
    (:func:`preparer.parse_policy`'s ``keys``), or a PEM block written in the policy itself (as
    containers-policy.json's ``keyData``), named ``name``. Every key is read here.

    :raises KeyProblem: as :func:`load_key`.
    """
    data = text.encode("utf-8", "replace") if isinstance(text, str) else text
    if len(data) > MAX_KEY_BYTES:
        raise KeyProblem(f"larger than {MAX_KEY_BYTES} bytes: not a public key")
    if isinstance(text, bytes):
        text = data.decode("ascii", "replace")
    der = _pem_public_key(text)
    algorithm, verify = _parse(der)
    return PublicKey(name, hashlib.sha256(der).hexdigest(), algorithm, verify)


#: Key references cosign resolves through a service, which the preparer does not reach: the scheme and what it is.
SERVICE_KEYS = {
    "awskms": "an AWS KMS key",
    "gcpkms": "a Google Cloud KMS key",
    "azurekms": "an Azure Key Vault key",
    "hashivault": "a HashiCorp Vault key",
    "k8s": "a Kubernetes secret",
}


def service_key(written: str) -> str | None:
    """Why the key ``written`` as a KMS or Kubernetes URI (``awskms://...``) is refused, with the way out; ``None``
    for any other text."""
    scheme, sep, _ = written.strip().partition("://")
    what = SERVICE_KEYS.get(scheme.lower()) if sep else None
    if what is None:
        return None
    return (
        f"{what} ({scheme}://) is not read by the preparer, which reaches no key service: export its public key "
        f"with `cosign public-key --key {written.strip()} > cosign.pub` and name that file, or write the PEM block "
        "in keys"
    )


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


def _parse(der: bytes) -> tuple[str, Callable[[bytes, bytes], None]]:
    """The algorithm of a DER SubjectPublicKeyInfo, and the verifier of the key it holds."""
    algorithm, curve_oid = _algorithm(der)
    if algorithm == _EC_PUBLIC_KEY:
        if curve_oid is None:
            raise KeyProblem("an ECDSA key without a named curve is not supported")
        if curve_oid not in _CURVES:
            name = _NAMED.get(curve_oid, "ECDSA on curve " + curve_oid)
            raise KeyProblem(f"{name} keys are not supported (supported: {SUPPORTED})")
        name, curve, hash_name = _CURVES[curve_oid]
    elif algorithm == _ED25519:
        name, curve, hash_name = "ed25519", "Ed25519", ""
    else:
        what = f"{_NAMED[algorithm]} keys" if algorithm in _NAMED else f"keys of algorithm {algorithm}"
        raise KeyProblem(f"{what} are not supported (supported: {SUPPORTED})")
    return name, _verifier(der, curve, hash_name)


def _verifier(der: bytes, curve: str, hash_name: str) -> Callable[[bytes, bytes], None]:
    """The ``cryptography`` key of ``der`` (of the algorithm :func:`_parse` found), as a ``verify(signature,
    message)``: ECDSA over ``hash_name`` with a DER signature, or pure Ed25519 (``hash_name`` empty)."""
    # Deferred: only runs whose policy names keys load one; the others never import cryptography.
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519
    from cryptography.hazmat.primitives.serialization import load_der_public_key

    try:
        key = load_der_public_key(der)
    except ValueError as err:  # a point off the curve, a BIT STRING that is not one, ...
        cause = str(err).rpartition("Details: ")[2]
        raise KeyProblem(f"not a valid {curve} public key ({cause})") from None
    if isinstance(key, ec.EllipticCurvePublicKey) and hash_name:
        scheme = ec.ECDSA(getattr(hashes, hash_name)())
        return functools.partial(key.verify, signature_algorithm=scheme)
    if isinstance(key, ed25519.Ed25519PublicKey) and not hash_name:
        return key.verify
    raise KeyProblem(f"not a valid {curve} public key")  # the library read another kind of key


def _algorithm(der: bytes) -> tuple[str, str | None]:
    """The dotted OIDs of the algorithm of a DER SubjectPublicKeyInfo (RFC 5280, 4.1) and of its parameters when
    they are one (an ECDSA key's named curve, RFC 5480); ``None`` when they are absent or something else.

    Only the ``algorithm`` is read: the key is ``cryptography``'s to read, once the algorithm is known to be one
    supported (an unsupported one is named in the refusal, which the library's error would not do).
    """
    try:
        spki, end = _element(der, 0, _SEQUENCE)
        if end != len(der):
            raise KeyProblem(f"{len(der) - end} bytes after it")
        identifier, _ = _element(spki, 0, _SEQUENCE)
        oid, at = _element(identifier, 0, _OID)
        algorithm = _dotted(oid)
        parameters = (
            _dotted(_element(identifier, at, _OID)[0]) if identifier[at : at + 1] == b"\x06" else None
        )
    except KeyProblem as problem:
        raise KeyProblem(f"not a DER SubjectPublicKeyInfo ({problem})") from None
    return algorithm, parameters


def _element(data: bytes, at: int, tag: int) -> tuple[bytes, int]:
    """The contents of the DER element of ``tag`` starting at ``at`` in ``data``, and where the next one starts."""
    if at >= len(data) or data[at] != tag:
        found = f"tag 0x{data[at]:02x}" if at < len(data) else "the end"
        raise KeyProblem(f"expected tag 0x{tag:02x} at byte {at}, found {found}")
    if at + 1 >= len(data):
        raise KeyProblem(f"no length at byte {at + 1}")
    length, start = data[at + 1], at + 2
    if length & 0x80:  # the long form: the next (length & 0x7f) bytes are the length
        size = length & 0x7F
        if not 1 <= size <= 4 or start + size > len(data):
            raise KeyProblem(f"a length of {size} bytes at byte {at + 1}")
        length, start = int.from_bytes(data[start : start + size], "big"), start + size
    if start + length > len(data):
        raise KeyProblem(f"the element at byte {at} runs past the end ({length} bytes)")
    return data[start : start + length], start + length


def _dotted(oid: bytes) -> str:
    """An OBJECT IDENTIFIER's contents in dotted form: base-128 arcs, the first two in one (X.690, 8.19)."""
    if not oid or oid[-1] & 0x80:
        raise KeyProblem("an OBJECT IDENTIFIER that ends inside an arc")
    arcs, value = [], 0
    for byte in oid:
        value = value << 7 | byte & 0x7F
        if not byte & 0x80:
            arcs.append(value)
            value = 0
    first = min(arcs[0] // 40, 2)
    return ".".join(map(str, [first, arcs[0] - 40 * first, *arcs[1:]]))
