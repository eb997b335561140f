"""``trusted_root.json`` (sigstore/protobuf-specs ``TrustedRoot``) read into a :class:`~.model.TrustedRoot`.

The file is what Sigstore's TUF repository publishes as ``trusted_root.json``: the Fulcio certificate authorities
(``certificateAuthorities``), the Rekor transparency logs (``tlogs``), the certificate transparency logs
(``ctlogs``) and the timestamp authorities (``timestampAuthorities``), each with the window (``validFor``) in which
it may be trusted. Everything in it is checked when it is read: a key or a certificate that does not parse, a key
of an algorithm the verifier does not support, a window that is not RFC 3339 times: the file is refused as a
whole, naming the JSON path of the value at fault, rather than verifying later with part of it.

Supported keys: ECDSA P-256 and P-384, Ed25519, and RSA of 2048 bits or more (as ``keyDetails`` names them).
"""

from __future__ import annotations

import base64
import binascii
import calendar
import hashlib
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from preparer.policy.keyless.model import Authority, LogKey, RootProblem, TrustedRoot, Window

#: A trusted root is a few KiB (Sigstore's production root is 7 KiB); a larger file is refused unread.
MAX_ROOT_BYTES = 1 << 20

#: The media types of a trusted root: the old form, which clients must still read, and the current one.
MEDIA_TYPES = (
    "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
    "application/vnd.dev.sigstore.trustedroot.v0.1+json",
)

#: ``keyDetails`` values (protobuf-specs ``PublicKeyDetails``) and the kind of key each names.
_KEY_DETAILS = {
    "PKIX_ECDSA_P256_SHA_256": "secp256r1",
    "PKIX_ECDSA_P384_SHA_384": "secp384r1",
    "PKIX_ED25519": "ed25519",
    # RSA, for CT logs: the deprecated names too (Sigstore's staging root still lists a PKCS1_RSA_PKCS1V5 key,
    # whose rawBytes are a PKCS#1 RSAPublicKey rather than a SubjectPublicKeyInfo).
    "PKCS1_RSA_PKCS1V5": "rsa",
    "PKCS1_RSA_PSS": "rsa",
    "PKIX_RSA_PKCS1V5": "rsa",
    "PKIX_RSA_PSS": "rsa",
    "PKIX_RSA_PKCS1V15_2048_SHA256": "rsa",
    "PKIX_RSA_PKCS1V15_3072_SHA256": "rsa",
    "PKIX_RSA_PKCS1V15_4096_SHA256": "rsa",
    "PKIX_RSA_PSS_2048_SHA256": "rsa",
    "PKIX_RSA_PSS_3072_SHA256": "rsa",
    "PKIX_RSA_PSS_4096_SHA256": "rsa",
}
SUPPORTED = "ECDSA P-256, ECDSA P-384, Ed25519, RSA"

_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]{1,9}))?(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))"
)


def load_root(path: Path) -> TrustedRoot:
    """The trusted root in the file at ``path``.

    :raises RootProblem: the file is missing, unreadable, larger than :data:`MAX_ROOT_BYTES`, not JSON, not a
        trusted root, or holds a value that cannot be used (module docstring).
    """
    from preparer.policy.keys import read_regular  # deferred, as parse_root's reader

    try:
        data = read_regular(path, MAX_ROOT_BYTES + 1)  # a fifo or a device is refused at once
    except OSError as err:
        raise RootProblem(err.strerror or str(err)) from None
    if len(data) > MAX_ROOT_BYTES:
        raise RootProblem(f"larger than {MAX_ROOT_BYTES} bytes: not a trusted root")
    return parse_root(data, str(path))


def parse_root(data: bytes, path: str = "") -> TrustedRoot:
    """The trusted root in ``data`` (the bytes of ``trusted_root.json``); ``path`` is where they were read.

    :raises RootProblem: as :func:`load_root`.
    """
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    from preparer.policy.payload import PayloadProblem, read_json

    pem = _pem_kind(data)
    if pem:
        raise RootProblem(
            f"it is a PEM {pem} (such as Fulcio's CA certificate, or a Rekor or CT log key), not a trusted root: "
            "trusted-root names Sigstore's trusted_root.json, the JSON document (mediaType "
            f"{MEDIA_TYPES[0]}) that lists the certificate authorities, transparency logs, CT logs and timestamp "
            "authorities with when each may be trusted, as cosign initialize, sigstore trust-instance or "
            "policy-controller's TrustRoot keep it"
        )
    try:
        doc = read_json(data)
    except PayloadProblem as err:
        raise RootProblem(f"not a trusted root: {err}") from None
    if not isinstance(doc, dict):
        raise RootProblem("not a trusted root: not a JSON object")
    media_type = doc.get("mediaType")
    if media_type not in MEDIA_TYPES:
        shown = "missing" if media_type is None else repr(media_type)
        # The usual mistake: TUF's own root.json, which signs the trusted root but is not it.
        tuf = (
            " (it is TUF's root.json: give the trusted_root.json target it distributes)"
            if "signed" in doc
            else ""
        )
        raise RootProblem(
            f"not a trusted root: mediaType is {shown}, not {MEDIA_TYPES[0]!r}{tuf}", "mediaType"
        )
    tlogs = tuple(_log(item, f"tlogs[{i}]", origin=True) for i, item in enumerate(_list(doc, "tlogs")))
    ctlogs = tuple(_log(item, f"ctlogs[{i}]") for i, item in enumerate(_list(doc, "ctlogs")))
    authorities = tuple(
        _authority(item, f"certificateAuthorities[{i}]")
        for i, item in enumerate(_list(doc, "certificateAuthorities"))
    )
    timestamp_authorities = tuple(
        _authority(item, f"timestampAuthorities[{i}]")
        for i, item in enumerate(_list(doc, "timestampAuthorities"))
    )
    for name, found in (("certificateAuthorities", authorities), ("tlogs", tlogs), ("ctlogs", ctlogs)):
        if not found:
            raise RootProblem(
                f"it names no {_WHAT[name]}: keyless signatures cannot be verified with it", name
            )
    return TrustedRoot(
        path=path,
        sha256=hashlib.sha256(data).hexdigest(),
        tlogs=tlogs,
        ctlogs=ctlogs,
        authorities=authorities,
        timestamp_authorities=timestamp_authorities,
    )


def _pem_kind(data: bytes) -> str:
    """``certificate``, ``public key``, ... when ``data`` is PEM (what the label says, in words); ``""`` if not."""
    text = data.lstrip()[:100]
    if not text.startswith(b"-----BEGIN "):
        return ""
    label = text[len(b"-----BEGIN ") :].partition(b"-----")[0].decode("ascii", "replace").strip()
    return label.lower() or "block"


_WHAT = {
    "certificateAuthorities": "certificate authority (certificateAuthorities is empty)",
    "tlogs": "transparency log (tlogs is empty)",
    "ctlogs": "certificate transparency log (ctlogs is empty)",
}


def _list(doc: dict[str, Any], name: str) -> list[Any]:
    value = doc.get(name, [])
    if not isinstance(value, list):
        raise RootProblem(f"{name} is not a list", name)
    return value


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RootProblem(f"{where} is not an object", where)
    return value


def _string(doc: dict[str, Any], name: str, where: str, required: bool = True) -> str:
    value = doc.get(name)
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        shown = "missing" if value is None else "empty" if value == "" else "not a string"
        raise RootProblem(f"{where}.{name} is {shown}", f"{where}.{name}")
    return value


def _base64(doc: dict[str, Any], name: str, where: str) -> bytes:
    text = _string(doc, name, where)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise RootProblem(f"{where}.{name} is not base64", f"{where}.{name}") from None


def _log(value: Any, where: str, origin: bool = False) -> LogKey:
    """A ``TransparencyLogInstance``: its key, its window and its id."""
    log = _object(value, where)
    url = _string(log, "baseUrl", where, required=False)
    key_where = f"{where}.publicKey"
    public = _object(log.get("publicKey"), key_where)
    spki = _base64(public, "rawBytes", key_where)
    details = _string(public, "keyDetails", key_where, required=False)
    key = _public_key(spki, details, key_where)
    window = _window(public.get("validFor"), f"{key_where}.validFor")
    log_id = hashlib.sha256(spki).digest()
    if "logId" in log:
        log_id = _base64(_object(log["logId"], f"{where}.logId"), "keyId", f"{where}.logId")
    host = ""
    if origin and url:
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
        if not host:
            raise RootProblem(f"{where}.baseUrl {url!r} is not a URL", f"{where}.baseUrl")
    return LogKey(log_id=log_id, spki=spki, key=key, window=window, url=url, origin=host)


def _public_key(spki: bytes, details: str, where: str) -> Any:
    """The ``cryptography`` key of a DER SubjectPublicKeyInfo, of a kind that is supported and that ``keyDetails``
    (when given) names."""
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    from cryptography.hazmat.primitives.serialization import load_der_public_key

    try:
        key = load_der_public_key(spki)
    except (ValueError, UnsupportedAlgorithm) as err:
        raise RootProblem(f"{where}.rawBytes is not a DER public key ({err})", f"{where}.rawBytes") from None
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in ("secp256r1", "secp384r1"):
        kind = key.curve.name
    elif isinstance(key, ed25519.Ed25519PublicKey):
        kind = "ed25519"
    elif isinstance(key, rsa.RSAPublicKey) and key.key_size >= 2048:
        kind = "rsa"
    else:
        raise RootProblem(
            f"{where}.rawBytes is a key of a kind that is not supported ({_describe(key)}; supported: {SUPPORTED})",
            f"{where}.rawBytes",
        )
    if details:
        expected = _KEY_DETAILS.get(details)
        if expected is None:
            raise RootProblem(
                f"{where}.keyDetails {details!r} is not supported (supported: {SUPPORTED})",
                f"{where}.keyDetails",
            )
        if expected != kind:
            raise RootProblem(
                f"{where}.keyDetails is {details!r}, but the key is {_describe(key)}", f"{where}.keyDetails"
            )
    return key


def _describe(key: Any) -> str:
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if isinstance(key, ec.EllipticCurvePublicKey):
        return f"ECDSA on {key.curve.name}"
    if isinstance(key, rsa.RSAPublicKey):
        return f"RSA of {key.key_size} bits"
    return type(key).__name__.removeprefix("_").removesuffix("PublicKey") or "unknown"


def _authority(value: Any, where: str) -> Authority:
    """A ``CertificateAuthority`` (Fulcio or a timestamp authority): its chain, leaf-most first, and its window."""
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    from cryptography import x509

    authority = _object(value, where)
    uri = _string(authority, "uri", where, required=False)
    chain_where = f"{where}.certChain"
    certificates = _object(authority.get("certChain"), chain_where).get("certificates")
    if not isinstance(certificates, list) or not certificates:
        raise RootProblem(
            f"{chain_where}.certificates is not a list of certificates", f"{chain_where}.certificates"
        )
    chain = []
    for index, item in enumerate(certificates):
        item_where = f"{chain_where}.certificates[{index}]"
        der = _base64(_object(item, item_where), "rawBytes", item_where)
        try:
            x509.load_der_x509_certificate(der)
        except ValueError as err:
            raise RootProblem(f"{item_where} is not a DER X.509 certificate ({err})", item_where) from None
        chain.append(der)
    window = _window(authority.get("validFor"), f"{where}.validFor")
    return Authority(chain=tuple(chain), window=window, uri=uri)


def _window(value: Any, where: str) -> Window:
    """A ``TimeRange``: ``start`` (required) and ``end`` (absent while in use), RFC 3339, to whole seconds that
    stay inside it (a fraction of a second rounds ``start`` up and ``end`` down)."""
    if value is None:
        raise RootProblem(f"{where} is missing: the trusted root must say when it may be trusted", where)
    window = _object(value, where)
    start = _time(window.get("start"), f"{where}.start", round_up=True)
    if window.get("end") is None:
        return Window(start)
    end = _time(window["end"], f"{where}.end", round_up=False)
    if end < start:
        raise RootProblem(f"{where} ends before it starts", where)
    return Window(start, end)


def _time(value: Any, where: str, round_up: bool) -> int:
    """Seconds since the epoch of an RFC 3339 time (``2022-12-31T23:59:59.999Z``)."""
    if value is None:
        raise RootProblem(f"{where} is missing", where)
    match = _RFC3339.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise RootProblem(f"{where} is not an RFC 3339 time: {str(value)[:60]!r}", where)
    year, month, day, hour, minute, second = (int(match[i]) for i in range(1, 7))
    if not (
        1 <= month <= 12 and 1 <= day <= calendar.monthrange(year, month)[1] and hour < 24 and minute < 60
    ):
        raise RootProblem(f"{where} is not a valid time: {value!r}", where)
    if second > 59:
        raise RootProblem(f"{where} is a leap second, which is not supported: {value!r}", where)
    seconds = calendar.timegm((year, month, day, hour, minute, second))
    if match[9]:
        offset = int(match[10]) * 3600 + int(match[11]) * 60
        seconds -= offset if match[9] == "+" else -offset
    if round_up and match[7] and int(match[7]):
        seconds += 1
    return seconds
