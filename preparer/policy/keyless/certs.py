"""The leaf certificate of a keyless signature: its chain to a Fulcio CA, its embedded SCT, its identity, its key.

A Fulcio leaf lives ten minutes, so it is checked at the signing time (``at``, whole seconds since the epoch) that
the transparency log or a timestamp authority vouches for, never at the present. Only the trusted root's
certificates are trust anchors and intermediates, each of an authority valid at that time: the certificates a
signature object brings (cosign's chain annotation, a bundle v0.1's chain) add none, as sigstore's verifiers build
the chain from the trusted root alone.

The Sigstore X.509 profile (Fulcio's ``docs/certificate-specification.md``): a leaf is no CA, its key usage has
``digitalSignature`` and its extended key usage has ``codeSigning``; it names its signer in the Subject Alternative
Name (a URI, an email address, or the ``otherName`` 1.3.6.1.4.1.57264.1.7 of a username) and the OIDC issuer that
vouched for the signer in the extension 1.3.6.1.4.1.57264.1.8 (1.3.6.1.4.1.57264.1.1 before it, deprecated).

Every function here is pure: DER bytes and the trusted root in, a result or a :class:`~.model.KeylessProblem`
out.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

from preparer.policy.keyless.model import Authority, KeylessProblem, TrustedRoot, when

#: Fulcio's OIDC issuer extension, a DER UTF8String; and the deprecated one before it, the raw UTF-8 bytes.
OIDC_ISSUER = "1.3.6.1.4.1.57264.1.8"
OIDC_ISSUER_V1 = "1.3.6.1.4.1.57264.1.1"
#: The ``otherName`` of a Subject Alternative Name that holds a username (a DER UTF8String).
OTHER_NAME_USERNAME = "1.3.6.1.4.1.57264.1.7"


def chain_to_authority(leaf: bytes, given: tuple[bytes, ...], root: TrustedRoot, at: int) -> Authority:
    """The certificate authority of ``root`` the certificate ``leaf`` (DER) chains to, validated at the time
    ``at``: the authority's window (``validFor``) holds ``at``, and every certificate of the path was valid then.

    The path is made of the authority's own certificates and nothing else. ``given`` is the chain the signature
    object carries (cosign's chain annotation, a bundle's ``x509CertificateChain``, leaf-most first, the leaf
    itself left out or not): it must be certificates, and it may only repeat the trusted root's; one it adds
    (an intermediate the root never listed, or one of an authority retired before ``at``) is never used, and is
    named when the leaf's issuer is among them.

    :raises KeylessProblem: the leaf does not parse, is not of the Sigstore profile, was not valid at ``at``, or
        does not chain to an authority of ``root`` valid at ``at`` through that authority's certificates.
    """
    cert = _certificate(leaf, "the certificate")
    _check_profile(cert)
    start, end = _seconds(cert.not_valid_before_utc), _seconds(cert.not_valid_after_utc)
    if not start <= at <= end:
        raise KeylessProblem(
            f"the certificate was not valid at the signing time {when(at)} (it was valid from {when(start)} to "
            f"{when(end)})"
        )
    offered = [_certificate(der, f"certificate {i} of the signature's chain") for i, der in enumerate(given)]
    authorities = [authority for authority in root.authorities if authority.window.holds(at)]
    if not authorities:
        raise KeylessProblem(
            f"no certificate authority of the trusted root {root.path} was valid at the signing time {when(at)}"
        )
    reasons = []
    for authority in authorities:
        reason = _path_problem(cert, authority, at)
        if reason is None:
            return authority
        reasons.append(reason)
    raise KeylessProblem(
        f"the certificate (issued by {_name(cert.issuer)}) does not chain to a certificate authority of the trusted "
        f"root {root.path} valid at the signing time {when(at)} ({'; '.join(dict.fromkeys(reasons))})"
        + _foreign_issuer(cert, offered, root, at)
    )


def _path_problem(cert: Any, authority: Authority, at: int) -> str | None:
    """Why ``cert`` has no path to ``authority``'s root through ``authority``'s intermediates at ``at``, or
    ``None`` when it has one."""
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    from cryptography import x509
    from cryptography.x509 import verification

    # Fulcio's CAs carry an extended key usage (codeSigning) that the Web PKI's CA profile refuses, and its leaves
    # name no DNS name and no clientAuth: the profile is checked by the caller, the path with these policies.
    ca_policy = verification.ExtensionPolicy.webpki_defaults_ca().may_be_present(
        x509.ExtendedKeyUsage, verification.Criticality.AGNOSTIC, None
    )
    chain = [x509.load_der_x509_certificate(der) for der in authority.chain]
    verifier = (
        verification.PolicyBuilder()
        .store(verification.Store(chain[-1:]))
        .time(_datetime(at))
        .extension_policies(ca_policy=ca_policy, ee_policy=verification.ExtensionPolicy.permit_all())
        .build_client_verifier()
    )
    try:
        verifier.verify(cert, chain[:-1])
    except verification.VerificationError as err:
        return str(err).removeprefix("validation failed: ")
    return None


def _foreign_issuer(cert: Any, offered: list[Any], root: TrustedRoot, at: int) -> str:
    """Why the issuer of ``cert`` does not count, when it is a certificate the trusted root lists for an authority
    not valid at ``at``, or one only the signature's chain (``offered``) brings: ``": ..."``, else ``""``."""
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    from cryptography import x509

    for authority in root.authorities:
        if authority.window.holds(at):
            continue
        for der in authority.chain:
            if issued(cert, x509.load_der_x509_certificate(der)):
                window = authority.window
                until = "it is still in use" if window.end is None else f"to {when(window.end)}"
                named = f" ({authority.uri})" if authority.uri else ""
                return (
                    f": its issuer {_name(cert.issuer)} is a certificate of the trusted root's authority{named} valid "
                    f"from {when(window.start)} {until}, not at the signing time; the signature's own chain cannot "
                    "make it count"
                )
    if any(issued(cert, candidate) for candidate in offered):
        return (
            f": its issuer {_name(cert.issuer)} is offered by the signature's own chain, and the trusted root does "
            "not list it; only the trusted root's certificates are anchors and intermediates"
        )
    return ""


def issued(cert: Any, candidate: Any) -> bool:
    """Whether ``candidate``'s key signed ``cert`` (and its subject is ``cert``'s issuer)."""
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    from cryptography.exceptions import InvalidSignature

    if candidate.subject != cert.issuer:
        return False
    try:
        cert.verify_directly_issued_by(candidate)
    except (InvalidSignature, ValueError, TypeError):
        return False
    return True


def issued_by(leaf: bytes, candidates: tuple[bytes, ...]) -> bytes:
    """The certificate among ``candidates`` (DER) whose key signed ``leaf``: the issuer :func:`verify_sct` needs,
    found in the chain of the authority the leaf chains to.

    :raises KeylessProblem: none of them issued it.
    """
    cert = _certificate(leaf, "the certificate")
    for der in candidates:
        if issued(cert, _certificate(der, "a certificate of the chain")):
            return der
    raise KeylessProblem(
        f"no certificate of the chain issued the certificate (issued by {_name(cert.issuer)})"
    )


def verify_sct(leaf: bytes, issuer: bytes, root: TrustedRoot, *, at: tuple[int, ...] = ()) -> None:
    """Check that ``leaf`` (DER) carries an embedded SCT (RFC 6962 section 3.3, a precertificate's signed
    certificate timestamp) signed by a CT log of ``root`` whose window holds the SCT's time and each verified
    signing time ``at`` (the SCT's own time is only what the log's key signs: a key the root retired could sign any
    time, so the key must also be trusted when the signature was made, as the verifier proved it). ``issuer`` is
    the certificate that issued ``leaf`` (:func:`issued_by`): the SCT signs the hash of its key.

    The signed data is RFC 6962's ``digitally-signed`` struct (section 3.2) of a ``precert_entry``: the version, the
    signature type ``certificate_timestamp``, the timestamp, the entry type, the SHA-256 of the issuer's
    SubjectPublicKeyInfo, the leaf's TBSCertificate without the SCT extension, and the SCT's extensions.

    :raises KeylessProblem: no SCT, an SCT of a log the root does not name or does not trust at its time, or one
        whose signature does not verify.
    """
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert = _certificate(leaf, "the certificate")
    issuer_cert = _certificate(issuer, "the issuer's certificate")
    try:
        scts = cert.extensions.get_extension_for_class(x509.PrecertificateSignedCertificateTimestamps).value
    except x509.ExtensionNotFound:
        raise KeylessProblem(
            "the certificate has no embedded SCT: it was not logged in a certificate transparency log"
        ) from None
    issuer_key_hash = hashlib.sha256(
        issuer_cert.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    ).digest()
    tbs = cert.tbs_precertificate_bytes
    reasons = []
    for sct in scts:
        reason = _sct_problem(sct, issuer_key_hash, tbs, root, at)
        if reason is None:
            return
        reasons.append(reason)
    raise KeylessProblem("; ".join(dict.fromkeys(reasons)))


def _sct_problem(
    sct: Any, issuer_key_hash: bytes, tbs: bytes, root: TrustedRoot, at: tuple[int, ...]
) -> str | None:
    """Why one SCT does not verify, or ``None`` when it does."""
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
    from cryptography.x509.certificate_transparency import LogEntryType, SignatureAlgorithm, Version

    if sct.version != Version.v1 or sct.entry_type != LogEntryType.PRE_CERTIFICATE:
        return "the certificate's SCT is not a version 1 precertificate SCT"
    millis = _seconds(sct.timestamp) * 1000 + sct.timestamp.microsecond // 1000
    logs = [log for log in root.ctlogs if log.log_id == sct.log_id]
    if not logs:
        return (
            f"the certificate's SCT is from a CT log the trusted root {root.path} does not name "
            f"(log id {sct.log_id.hex()})"
        )
    log = next((log for log in logs if log.window.holds(millis // 1000)), None)
    if log is None:
        name = logs[0].url or sct.log_id.hex()
        return (
            f"the certificate's SCT is from the CT log {name}, not trusted at its time {when(millis // 1000)}"
        )
    name = log.url or log.log_id.hex()
    retired = next((t for t in sorted(at) if not log.window.holds(t)), None)
    if retired is not None:
        return f"the certificate's SCT is from the CT log {name}, not trusted at the verified signing time {when(retired)}"
    extensions = sct.extension_bytes
    signed = (
        struct.pack(">BBQH", 0, 0, millis, 1)
        + issuer_key_hash
        + len(tbs).to_bytes(3, "big")
        + tbs
        + len(extensions).to_bytes(2, "big")
        + extensions
    )
    try:
        if sct.signature_algorithm == SignatureAlgorithm.ECDSA and isinstance(
            log.key, ec.EllipticCurvePublicKey
        ):
            log.key.verify(sct.signature, signed, ec.ECDSA(sct.signature_hash_algorithm))
        elif sct.signature_algorithm == SignatureAlgorithm.RSA and isinstance(log.key, rsa.RSAPublicKey):
            log.key.verify(sct.signature, signed, padding.PKCS1v15(), sct.signature_hash_algorithm)
        else:
            algorithm = sct.signature_algorithm.name
            return f"the certificate's SCT is signed with {algorithm}, which the key of the CT log {name} is not for"
    except InvalidSignature:
        return f"the signature of the certificate's SCT does not verify with the key of the CT log {name}"
    return None


def identity(leaf: bytes) -> tuple[str, str]:
    """``(issuer, subject)`` of the certificate ``leaf`` (DER): the OIDC issuer that vouched for the signer, and the
    signer as its Subject Alternative Name names it (a URI, an email address, or a username).

    :raises KeylessProblem: the certificate names no OIDC issuer or no subject.
    """
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    from cryptography import x509

    cert = _certificate(leaf, "the certificate")
    issuer = ""
    for extension in cert.extensions:
        if extension.oid.dotted_string == OIDC_ISSUER:
            issuer = _utf8_string(extension.value.value, "its OIDC issuer extension (1.3.6.1.4.1.57264.1.8)")
            break
    else:
        for extension in cert.extensions:
            if extension.oid.dotted_string == OIDC_ISSUER_V1:
                issuer = _decoded(extension.value.value, "its OIDC issuer extension (1.3.6.1.4.1.57264.1.1)")
    if not issuer:
        raise KeylessProblem(
            "the certificate names no OIDC issuer (no extension 1.3.6.1.4.1.57264.1.8 or .1.1)"
        )
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        raise KeylessProblem("the certificate names no signer (it has no Subject Alternative Name)") from None
    for name in names:
        if isinstance(name, x509.UniformResourceIdentifier | x509.RFC822Name) and name.value:
            return issuer, name.value
        if isinstance(name, x509.OtherName) and name.type_id.dotted_string == OTHER_NAME_USERNAME:
            return issuer, _utf8_string(name.value, "its username (otherName 1.3.6.1.4.1.57264.1.7)")
    raise KeylessProblem(
        "the certificate names no signer (its Subject Alternative Name holds no URI, email address or username)"
    )


def verify_signature(leaf: bytes, signature: bytes, message: bytes) -> None:
    """Check that ``signature`` is over ``message`` by the key of the certificate ``leaf`` (DER): ECDSA P-256 with
    SHA-256 or P-384 with SHA-384 or SHA-256 (DER signatures, as Sigstore writes them), or Ed25519.

    :raises KeylessProblem: the signature does not verify, or the key is of a kind that is not supported.
    """
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519

    key = _certificate(leaf, "the certificate").public_key()
    try:
        if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp256r1":
            key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        elif isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name == "secp384r1":
            # SHA-384 is the curve's own; Sigstore's clients have signed with SHA-256 on any curve (the hash the
            # log records), and sigstore's verifiers take it.
            try:
                key.verify(signature, message, ec.ECDSA(hashes.SHA384()))
            except InvalidSignature:
                key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        elif isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(signature, message)
        else:
            raise KeylessProblem(
                f"the certificate's key is {_key_kind(key)}, which is not supported "
                "(supported: ECDSA P-256, ECDSA P-384, Ed25519)"
            )
    except (InvalidSignature, ValueError):
        # ValueError: a signature that is not DER at all.
        raise KeylessProblem("the signature does not verify with the certificate's key") from None


def _certificate(der: bytes, what: str) -> Any:
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    from cryptography import x509

    try:
        return x509.load_der_x509_certificate(der)
    except ValueError as err:
        raise KeylessProblem(f"{what} is not a DER X.509 certificate ({err})") from None


def _check_profile(cert: Any) -> None:
    """The Sigstore X.509 profile of a leaf: no CA, key usage ``digitalSignature``, extended key usage
    ``codeSigning``."""
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    extensions = cert.extensions
    try:
        if extensions.get_extension_for_class(x509.BasicConstraints).value.ca:
            raise KeylessProblem("the certificate is a CA certificate, not a signer's")
    except x509.ExtensionNotFound:
        pass
    try:
        usage = extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        raise KeylessProblem(
            "the certificate has no key usage: it is not a Sigstore signing certificate"
        ) from None
    if not usage.digital_signature:
        raise KeylessProblem("the certificate's key usage lacks digitalSignature: it may not sign")
    try:
        purposes = extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        raise KeylessProblem(
            "the certificate has no extended key usage: it is not a Sigstore code signing certificate"
        ) from None
    if ExtendedKeyUsageOID.CODE_SIGNING not in purposes:
        raise KeylessProblem(
            "the certificate's extended key usage lacks codeSigning: it is not for signing code"
        )


def _utf8_string(der: bytes, what: str) -> str:
    """The text of a DER UTF8String (tag 12) that fills ``der``."""
    if len(der) >= 2 and der[0] == 0x0C:
        length, offset = der[1], 2
        if length > 0x80:  # the long form: the length in the next (length & 0x7F) bytes
            offset = 2 + (length & 0x7F)
            length = int.from_bytes(der[2:offset], "big")
        if length != 0x80 and offset + length == len(der):
            return _decoded(der[offset:], what)
    raise KeylessProblem(f"the certificate's {what} is not a DER UTF8String")


def _decoded(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise KeylessProblem(f"the certificate's {what} is not UTF-8 text") from None


def _key_kind(key: Any) -> str:
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if isinstance(key, ec.EllipticCurvePublicKey):
        return f"ECDSA on {key.curve.name}"
    if isinstance(key, rsa.RSAPublicKey):
        return f"RSA of {key.key_size} bits"
    return type(key).__name__.removeprefix("_").removesuffix("PublicKey")


def _name(name: Any) -> str:
    return str(name.rfc4514_string()) or "an empty name"


def _seconds(moment: Any) -> int:
    """Whole seconds since the epoch of a ``datetime`` (naive ones are UTC, as cryptography's SCT times are)."""
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    import calendar

    return calendar.timegm(moment.utctimetuple())


def _datetime(at: int) -> Any:
    # Deferred: importing this module costs nothing until a keyless signature is checked.
    import datetime

    return datetime.datetime.fromtimestamp(at, datetime.UTC)
