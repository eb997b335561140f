"""A Sigstore of the suite's own, made with ``cryptography``: what keyless signatures are verified against.

:func:`make_sigstore` makes a Fulcio-like certificate authority (a self-signed root and an intermediate, P-384, as
Fulcio's), a certificate transparency log key, two Rekor keys (a v1 log, ECDSA P-256, and a v2 log, Ed25519, whose
checkpoint origin is its host) and a timestamp authority (root and leaf). Its :meth:`Sigstore.leaf` issues signing
certificates as Fulcio does (the Sigstore X.509 profile, a SAN, the OIDC issuer extension, an embedded SCT signed
by the CT key), with any of them changed or left out for a test; :meth:`Sigstore.trusted_root` writes the
``trusted_root.json`` that trusts it, each window chosen. The private keys are attributes, for tests that sign
log entries, checkpoints or timestamps.

Times are whole seconds since the epoch. :data:`T0` is the default signing time; every default window holds it.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

#: The default signing time: 2023-11-14T22:13:20Z.
T0 = 1_700_000_000
YEAR = 365 * 86400
#: What Fulcio's certificates of GitHub Actions name.
GITHUB_ISSUER = "https://token.actions.githubusercontent.com"
WORKFLOW = "https://github.com/acme/buildpacks/.github/workflows/release.yml@refs/heads/main"
MEDIA_TYPE = "application/vnd.dev.sigstore.trustedroot+json;version=0.1"

OIDC_ISSUER = ObjectIdentifier("1.3.6.1.4.1.57264.1.8")
OIDC_ISSUER_V1 = ObjectIdentifier("1.3.6.1.4.1.57264.1.1")
USERNAME = ObjectIdentifier("1.3.6.1.4.1.57264.1.7")
SCT_LIST = ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")

Window = tuple[int, int | None]


def spki(key: Any) -> bytes:
    """The DER SubjectPublicKeyInfo of a public or private key."""
    public = key.public_key() if hasattr(key, "public_key") else key
    return bytes(
        public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )


def der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)


def rfc3339(at: int) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def new_key(kind: str = "p256") -> Any:
    """A private key: ``p256``, ``p384`` or ``ed25519``."""
    if kind == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    return ec.generate_private_key(ec.SECP384R1() if kind == "p384" else ec.SECP256R1())


def sign(key: Any, message: bytes) -> bytes:
    """A signature as Sigstore makes it: ECDSA (DER) with the curve's hash, or Ed25519."""
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(message)
    digest = hashes.SHA384() if key.curve.name == "secp384r1" else hashes.SHA256()
    return bytes(key.sign(message, ec.ECDSA(digest)))


@dataclass
class Leaf:
    """A signing certificate (``der``) and the signer's private key (``key``), as Fulcio hands them out."""

    der: bytes
    key: Any
    cert: x509.Certificate

    def sign(self, message: bytes) -> bytes:
        return sign(self.key, message)


@dataclass
class Sigstore:
    """A Sigstore instance: its keys, and its CAs' certificates (``cryptography`` objects)."""

    root_key: Any
    root: x509.Certificate
    ca_key: Any
    intermediate: x509.Certificate
    ct_key: Any
    rekor_key: Any
    rekor2_key: Any
    tsa_root_key: Any
    tsa_root: x509.Certificate
    tsa_key: Any
    tsa: x509.Certificate
    start: int

    rekor_url = "https://rekor.sigstore.test"
    rekor2_url = "https://log2025-1.rekor.sigstore.test"
    ct_url = "https://ctfe.sigstore.test/2022"

    @property
    def chain(self) -> tuple[bytes, ...]:
        """The CA's chain as the trusted root lists it: the intermediate, then the root (DER)."""
        return der(self.intermediate), der(self.root)

    @property
    def ct_log_id(self) -> bytes:
        return hashlib.sha256(spki(self.ct_key)).digest()

    @property
    def rekor_log_id(self) -> bytes:
        return hashlib.sha256(spki(self.rekor_key)).digest()

    @property
    def rekor2_log_id(self) -> bytes:
        return hashlib.sha256(spki(self.rekor2_key)).digest()

    def leaf(
        self,
        *,
        subject: str = WORKFLOW,
        subject_kind: str = "uri",
        issuer: str | None = GITHUB_ISSUER,
        issuer_extension: str = "v2",
        not_before: int = T0 - 60,
        lifetime: int = 600,
        key_kind: str = "p256",
        code_signing: bool = True,
        digital_signature: bool = True,
        is_ca: bool = False,
        sct: bool = True,
        sct_time: int | None = None,
        sct_key: Any = None,
        sct_log_id: bytes | None = None,
        san: bool = True,
    ) -> Leaf:
        """A signing certificate issued by the intermediate, as Fulcio issues one, valid from ``not_before`` for
        ``lifetime`` seconds. ``subject`` is its SAN (``subject_kind``: ``uri``, ``email`` or ``username``; no SAN
        with ``san=False``); ``issuer`` its OIDC issuer, in the extension 1.3.6.1.4.1.57264.1.8 (``v2``) or the
        deprecated .1.1 (``v1``), none when ``None``. Its SCT is signed at ``sct_time`` (default ``not_before``)
        by ``sct_key`` (default the CT log's) under ``sct_log_id`` (default that key's id); ``sct=False``: none.
        """
        key = new_key(key_kind)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([]))
            .issuer_name(self.intermediate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(_datetime(not_before))
            .not_valid_after(_datetime(not_before + lifetime))
            .add_extension(
                x509.KeyUsage(digital_signature, False, False, False, False, is_ca, False, False, False),
                critical=True,
            )
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.CODE_SIGNING if code_signing else ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca_key.public_key()), critical=False
            )
        )
        if is_ca:
            builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        if san:
            name: x509.GeneralName
            if subject_kind == "email":
                name = x509.RFC822Name(subject)
            elif subject_kind == "username":
                name = x509.OtherName(USERNAME, _utf8_string(subject))
            else:
                name = x509.UniformResourceIdentifier(subject)
            builder = builder.add_extension(x509.SubjectAlternativeName([name]), critical=True)
        if issuer is not None:
            if issuer_extension == "v1":
                builder = builder.add_extension(
                    x509.UnrecognizedExtension(OIDC_ISSUER_V1, issuer.encode()), critical=False
                )
            else:
                builder = builder.add_extension(
                    x509.UnrecognizedExtension(OIDC_ISSUER, _utf8_string(issuer)), critical=False
                )
        if sct:
            # The precertificate's TBS is this certificate's without the SCT list, which comes last.
            precert = builder.sign(self.ca_key, hashes.SHA384())
            signer = sct_key or self.ct_key
            log_id = sct_log_id or hashlib.sha256(spki(signer)).digest()
            extension = sct_list(
                precert.tbs_certificate_bytes,
                spki(self.ca_key),
                signer,
                log_id,
                (not_before if sct_time is None else sct_time) * 1000 + 123,
            )
            builder = builder.add_extension(extension, critical=False)
        cert = builder.sign(self.ca_key, hashes.SHA384())
        return Leaf(der(cert), key, cert)

    def trusted_root_doc(
        self,
        *,
        ca_window: Window | None = None,
        ct_window: Window | None = None,
        tlog_window: Window | None = None,
        tsa_window: Window | None = None,
        timestamp_authorities: bool = True,
    ) -> dict[str, Any]:
        """The ``trusted_root.json`` document that trusts this instance, each window ``(start, end or None)``
        (default: from :attr:`start`, no end)."""
        default = (self.start, None)
        return {
            "mediaType": MEDIA_TYPE,
            "tlogs": [
                _log(self.rekor_url, self.rekor_key, "PKIX_ECDSA_P256_SHA_256", tlog_window or default),
                _log(self.rekor2_url, self.rekor2_key, "PKIX_ED25519", tlog_window or default),
            ],
            "certificateAuthorities": [
                _authority("https://fulcio.sigstore.test", self.chain, ca_window or default),
            ],
            "ctlogs": [_log(self.ct_url, self.ct_key, "PKIX_ECDSA_P256_SHA_256", ct_window or default)],
            "timestampAuthorities": (
                [
                    _authority(
                        "https://tsa.sigstore.test",
                        (der(self.tsa), der(self.tsa_root)),
                        tsa_window or default,
                    )
                ]
                if timestamp_authorities
                else []
            ),
        }

    def trusted_root(self, path: Path, **windows: Any) -> Path:
        """Write :meth:`trusted_root_doc` (its keyword arguments) to ``path``; return ``path``."""
        path.write_text(json.dumps(self.trusted_root_doc(**windows), indent=2))
        return path


def make_sigstore(start: int = T0 - YEAR, name: str = "sigstore-test") -> Sigstore:
    """A new Sigstore instance whose CAs are valid from ``start`` for ten years (``name`` in their subjects)."""
    root_key, ca_key = new_key("p384"), new_key("p384")
    root = _ca(f"{name}", root_key, None, root_key, start, path_length=1)
    intermediate = _ca(
        f"{name}-intermediate", ca_key, root, root_key, start, path_length=0, code_signing=True
    )
    tsa_root_key, tsa_key = new_key("p384"), new_key("p384")
    tsa_root = _ca(f"{name}-tsa-root", tsa_root_key, None, tsa_root_key, start, path_length=0)
    tsa = (
        _builder(f"{name}-tsa", tsa_key, tsa_root, start)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.TIME_STAMPING]), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(tsa_root_key.public_key()), critical=False
        )
        .sign(tsa_root_key, hashes.SHA384())
    )
    return Sigstore(
        root_key=root_key,
        root=root,
        ca_key=ca_key,
        intermediate=intermediate,
        ct_key=new_key("p256"),
        rekor_key=new_key("p256"),
        rekor2_key=new_key("ed25519"),
        tsa_root_key=tsa_root_key,
        tsa_root=tsa_root,
        tsa_key=tsa_key,
        tsa=tsa,
        start=start,
    )


def sct_list(
    tbs: bytes, issuer_spki: bytes, key: Any, log_id: bytes, millis: int
) -> x509.UnrecognizedExtension:
    """The SCT list extension (RFC 6962 section 3.3) of one SCT by ``key`` over a precertificate's ``tbs``."""
    signed = (
        struct.pack(">BBQH", 0, 0, millis, 1)
        + hashlib.sha256(issuer_spki).digest()
        + len(tbs).to_bytes(3, "big")
        + tbs
        + b"\x00\x00"
    )
    signature = key.sign(signed, ec.ECDSA(hashes.SHA256()))
    sct = b"\x00" + log_id + struct.pack(">Q", millis) + b"\x00\x00" + b"\x04\x03" + _u16(signature)
    listed = _u16(_u16(sct))
    return x509.UnrecognizedExtension(SCT_LIST, b"\x04" + _der_length(len(listed)) + listed)


def _ca(
    name: str,
    key: Any,
    issuer: x509.Certificate | None,
    issuer_key: Any,
    start: int,
    path_length: int,
    code_signing: bool = False,
) -> x509.Certificate:
    builder = (
        _builder(name, key, issuer, start)
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    )
    if code_signing:  # Fulcio's intermediate carries one
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), critical=False
        )
    return builder.sign(issuer_key, hashes.SHA384())


def _builder(name: str, key: Any, issuer: x509.Certificate | None, start: int) -> x509.CertificateBuilder:
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sigstore.test"),
            x509.NameAttribute(NameOID.COMMON_NAME, name),
        ]
    )
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject if issuer is None else issuer.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_datetime(start))
        .not_valid_after(_datetime(start + 10 * YEAR))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )


def _log(url: str, key: Any, details: str, window: Window) -> dict[str, Any]:
    public = spki(key)
    return {
        "baseUrl": url,
        "hashAlgorithm": "SHA2_256",
        "publicKey": {"rawBytes": b64(public), "keyDetails": details, "validFor": _valid_for(window)},
        "logId": {"keyId": b64(hashlib.sha256(public).digest())},
    }


def _authority(uri: str, chain: tuple[bytes, ...], window: Window) -> dict[str, Any]:
    return {
        "subject": {"organization": "sigstore.test", "commonName": "sigstore-test"},
        "uri": uri,
        "certChain": {"certificates": [{"rawBytes": b64(each)} for each in chain]},
        "validFor": _valid_for(window),
    }


def _valid_for(window: Window) -> dict[str, str]:
    start, end = window
    return {"start": rfc3339(start)} if end is None else {"start": rfc3339(start), "end": rfc3339(end)}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _utf8_string(text: str) -> bytes:
    data = text.encode()
    return b"\x0c" + _der_length(len(data)) + data


def _der_length(length: int) -> bytes:
    if length < 0x80:
        return bytes([length])
    count = (length.bit_length() + 7) // 8
    return bytes([0x80 | count]) + length.to_bytes(count, "big")


def _u16(data: bytes) -> bytes:
    return len(data).to_bytes(2, "big") + data


def _datetime(at: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(at, datetime.UTC)
