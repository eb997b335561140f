"""RFC 3161 timestamps of a keyless signature, from a timestamp authority of the trusted root.

A timestamp proves that the signature existed at its time (``genTime``). Sigstore bundles carry each one as the DER
of a ``TimeStampResp`` (RFC 3161 section 2.4.2, ``rfc3161Timestamps[].signedTimestamp``), and cosign's
``dev.sigstore.cosign/rfc3161timestamp`` annotation does too; a bare ``TimeStampToken`` (the CMS ``ContentInfo``
alone) is accepted as well. :func:`verify_timestamp` checks, in this order:

1. the authority granted it (status ``granted``);
2. its ``messageImprint`` is the hash of the signature, with the hash function the token names (SHA-256, SHA-384
   or SHA-512): a timestamp of another signature proves nothing about this one;
3. the CMS ``SignedData`` is signed by a timestamp authority of the trusted root (``timestampAuthorities``): the
   signer's certificate is the authority's leaf (its ``certChain`` lists it first) and carries the extended key
   usage ``timeStamping``, marked critical (RFC 3161 section 2.3); the path from it to the authority's root is valid
   at ``genTime``; the ``messageDigest`` signed attribute is the hash of the ``TSTInfo``, and the signature over the
   signed attributes verifies with the leaf's key (RFC 5652 section 5.4);
4. the authority's window (``validFor``) holds ``genTime``.

A nonce is not required: the signer asked for the timestamp, not this verifier. The CMS structures are parsed and
checked by ``rfc3161-client`` (the library sigstore-python uses; OpenSSL's PKCS#7 verification inside), imported
only when a signature object carries a timestamp.
"""

from __future__ import annotations

import calendar
import hashlib
import re
from typing import Any

from preparer.policy.keyless.model import Authority, KeylessProblem, TrustedRoot, when

#: A timestamp is one or two KiB with its certificates; a larger one is refused unread.
MAX_TIMESTAMP_BYTES = 64 << 10

#: The hash functions a ``messageImprint`` may use (their OIDs), by ``hashlib`` name.
_HASHES = {
    "2.16.840.1.101.3.4.2.1": "sha256",
    "2.16.840.1.101.3.4.2.2": "sha384",
    "2.16.840.1.101.3.4.2.3": "sha512",
}
#: PKIStatus values (RFC 3161 section 2.4.2) for messages.
_STATUS = {0: "granted", 1: "grantedWithMods", 2: "rejection", 3: "waiting", 4: "revocationWarning"}


def verify_timestamp(token: bytes, signature: bytes, root: TrustedRoot) -> int:
    """The time (``genTime``, whole seconds since the epoch) at which the RFC 3161 timestamp ``token`` (DER
    ``TimeStampResp`` or ``TimeStampToken``) says ``signature`` existed, once verified against a timestamp authority
    of ``root`` (module docstring).

    :raises KeylessProblem: a token that does not parse, was not granted, is for another signature, is not signed
        by a timestamp authority of ``root``, or whose authority was not valid at its time.
    """
    response, gen_time = _granted(token, signature)
    at = calendar.timegm(gen_time.utctimetuple())
    if not root.timestamp_authorities:
        raise KeylessProblem(
            f"it carries an RFC 3161 timestamp, and the trusted root {root.path} names no timestamp authority "
            "(timestampAuthorities is empty)"
        )
    reasons, outside = [], []
    for authority in root.timestamp_authorities:
        reason = _signed_by(response, signature, authority)
        if reason:
            reasons.append(f"{_name(authority)}: {reason}")
        elif authority.window.holds(at):
            return at
        else:
            outside.append(authority)
    if outside:
        window = outside[0].window
        end = "still in use" if window.end is None else when(window.end)
        raise KeylessProblem(
            f"the RFC 3161 timestamp's authority {_name(outside[0])} was not valid at its time {when(at)} (the "
            f"trusted root's validFor: from {when(window.start)}, to {end})"
        )
    raise KeylessProblem(
        f"the RFC 3161 timestamp of {when(at)} is not signed by a timestamp authority of the trusted root "
        f"{root.path} ({'; '.join(dict.fromkeys(reasons))})"
    )


def _granted(token: bytes, signature: bytes) -> tuple[Any, Any]:
    """The decoded response of ``token`` and its ``genTime``, once it is known to be a granted timestamp of
    ``signature`` (nothing is verified of its signer yet)."""
    # Deferred: rfc3161_client is loaded only by signatures that carry a timestamp.
    from rfc3161_client import VerificationError, decode_timestamp_response

    if len(token) > MAX_TIMESTAMP_BYTES:
        raise KeylessProblem(f"the RFC 3161 timestamp is larger than {MAX_TIMESTAMP_BYTES} bytes")
    try:
        response = decode_timestamp_response(_as_response(token))
        status = response.status
        info = response.tst_info
        algorithm, imprint, gen_time = (
            info.message_imprint.hash_algorithm.dotted_string,
            info.message_imprint.message,
            info.gen_time,
        )
    except (ValueError, VerificationError) as err:
        raise KeylessProblem(
            f"the RFC 3161 timestamp is not a DER TimeStampResp or TimeStampToken ({_short(str(err))})"
        ) from None
    if status != 0:
        raise KeylessProblem(
            f"the RFC 3161 timestamp was not granted (its status is {_STATUS.get(status, str(status))})"
        )
    name = _HASHES.get(algorithm)
    if name is None:
        raise KeylessProblem(
            f"the RFC 3161 timestamp's message imprint is of hash algorithm {algorithm}, not SHA-256, SHA-384 or "
            "SHA-512"
        )
    if imprint != hashlib.new(name, signature).digest():
        raise KeylessProblem(
            f"the RFC 3161 timestamp is for another signature (its message imprint is not the {name.upper()} of "
            "this signature)"
        )
    return response, gen_time


def _signed_by(response: Any, signature: bytes, authority: Authority) -> str:
    """Why ``response`` is not signed by ``authority``, or ``""`` when it is (steps 1 to 3 of the module docstring)."""
    # Deferred: cryptography and rfc3161_client are loaded only by signatures that carry a timestamp.
    from cryptography import x509
    from rfc3161_client import VerificationError, VerifierBuilder

    chain = [x509.load_der_x509_certificate(der) for der in authority.chain]
    # A chain of one certificate is the authority's root alone: then the leaf is the one the token carries.
    leaf = chain[0] if len(chain) > 1 else None
    verifier = VerifierBuilder(tsa_certificate=leaf, intermediates=chain[1:-1], roots=chain[-1:]).build()
    try:
        verifier.verify_message(response, signature)
    except (ValueError, VerificationError) as err:
        return _reason(str(err))
    if leaf is None and not _directly_issued(response, chain[0]):
        # The token's own certificates are OpenSSL's untrusted chain: one it brings must add no intermediate.
        return (
            "its signing certificate is not issued by the authority's root itself: an intermediate the token "
            "brings is not the trusted root's"
        )
    return ""


def _directly_issued(response: Any, issuer: Any) -> bool:
    """Whether the certificate the token names as its signer (the signer info's issuer and serial) is one of the
    token's certificates signed by ``issuer`` itself."""
    # Deferred: cryptography is loaded only by signatures that carry a timestamp.
    from cryptography import x509

    from preparer.policy.keyless.certs import issued  # deferred, as cryptography above

    signed = response.signed_data
    infos = list(signed.signer_infos)
    if len(infos) != 1:
        return False
    for der in signed.certificates:
        cert = x509.load_der_x509_certificate(der)
        if cert.issuer == infos[0].issuer and cert.serial_number == infos[0].serial_number:
            return issued(cert, issuer)
    return False


#: The library's and OpenSSL's words for a refusal, and the operator's.
_REASONS = (
    ("digest failure", "the message digest it signs is not the digest of its TSTInfo: the token was altered"),
    ("signature failure", "its CMS signature does not verify with the signing certificate's key"),
    ("Embedded certificate does not match", "it is signed by another certificate than the authority's"),
    ("certificate details does not match", "it is signed by another certificate than the authority's"),
    ("No leaf certificate found", "it does not carry the certificate of the signer it names"),
    ("neither found", "it carries no signing certificate, and the authority's chain names no leaf"),
    ("EKU", "the signing certificate's extended key usage is not timeStamping, marked critical"),
    ("Expected exactly one SignerInfo", "it does not have exactly one signer"),
)


def _reason(text: str) -> str:
    """An operator's words for a refusal by ``rfc3161-client`` (OpenSSL's error stack, when it has one)."""
    verify_error = re.search(r'Verify error: ([^"]+)"', text)
    if verify_error:
        return f"its certificate chain does not verify at its time: {verify_error[1]}"
    for words, reason in _REASONS:
        if words in text:
            return reason
    return _short(text)


def _short(text: str) -> str:
    return text if len(text) <= 200 else text[:197] + "..."


def _as_response(token: bytes) -> bytes:
    """``token`` as a ``TimeStampResp``: unchanged when it is one, else (a ``TimeStampToken``: a ``ContentInfo``,
    whose first field is an OID) wrapped in one whose status is ``granted``."""
    if len(token) < 2 or token[0] != 0x30:
        return token
    start = 2 if token[1] < 0x80 else 2 + (token[1] & 0x7F)
    if token[start : start + 1] != b"\x06":
        return token
    body = b"\x30\x03\x02\x01\x00" + token  # PKIStatusInfo { status granted }
    return b"\x30" + _der_length(len(body)) + body


def _der_length(length: int) -> bytes:
    if length < 0x80:
        return bytes([length])
    size = (length.bit_length() + 7) // 8
    return bytes([0x80 | size]) + length.to_bytes(size, "big")


def _name(authority: Authority) -> str:
    """The authority's ``uri``, or its leaf's subject when the trusted root gives none."""
    if authority.uri:
        return authority.uri
    from cryptography import x509  # deferred, as in _signed_by

    return str(x509.load_der_x509_certificate(authority.chain[0]).subject.rfc4514_string()) or "(unnamed)"
