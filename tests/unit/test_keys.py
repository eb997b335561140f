"""Key files the policy trusts (preparer/policy/keys.py): what is read, what is refused and how it is named, and
verification with each supported algorithm. Keys are made with ``cryptography`` here, the verifier's own library;
the real cosign key and signature of tests/data/cosign-keyed check it against what cosign wrote."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preparer.policy.keys import KeyProblem, load_key
from tests.plugins.signing import generate, make_key, pem_public_key, spki

REAL = Path(__file__).resolve().parents[1] / "data" / "cosign-keyed"


def write(tmp_path: Path, der: bytes) -> Path:
    path = tmp_path / "k.pub"
    path.write_text(pem_public_key(der))
    return path


def test_the_fingerprint_of_cosign_s_key_is_the_one_openssl_gives() -> None:
    # openssl pkey -pubin -in tests/data/cosign-keyed/cosign.pub -outform DER | sha256sum
    key = load_key(REAL / "cosign.pub")
    assert key.fingerprint == "622601a9e498c09004d82cfb8879122e780c0813a0ba350edd3eefa73097605a"
    assert key.algorithm == "ecdsa-p256-sha256"


@pytest.mark.parametrize(
    ("curve", "algorithm"),
    [("p256", "ecdsa-p256-sha256"), ("p384", "ecdsa-p384-sha384"), ("ed25519", "ed25519")],
)
def test_each_supported_key_verifies_its_own_signature_and_nothing_else(
    tmp_path: Path, curve: str, algorithm: str
) -> None:
    signer = make_key(tmp_path / "signer", curve=curve)
    stranger = make_key(tmp_path / "stranger", curve=curve)
    key = load_key(signer.public)
    assert key.algorithm == algorithm
    message = b'{"critical":{"type":"cosign container image signature"}}'
    signature = signer.sign(message)
    assert key.verify(signature, message) is True
    assert key.verify(signature, message + b" ") is False
    assert key.verify(stranger.sign(message), message) is False


def test_p384_is_verified_over_sha384_not_sha256(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    signer = make_key(tmp_path, curve="p384")
    over_sha256 = signer.signing.sign(b"m", ec.ECDSA(hashes.SHA256()))
    assert load_key(signer.public).verify(over_sha256, b"m") is False


@pytest.mark.parametrize("curve", ["p256", "ed25519"])
@pytest.mark.parametrize(
    "damage",
    [b"", b"\x00", b"\x30\x02\x02", b"\x30" + b"\xff" * 80, b"\x00" * 64, b"x" * 10_000],
    ids=["empty", "one byte", "truncated DER", "bad length", "zeros", "long"],
)
def test_a_malformed_signature_is_not_a_signature(tmp_path: Path, curve: str, damage: bytes) -> None:
    key = load_key(make_key(tmp_path, curve=curve).public)
    assert key.verify(damage, b"m") is False


def test_a_der_signature_with_a_byte_after_it_is_not_one(tmp_path: Path) -> None:
    signer = make_key(tmp_path)
    signature = signer.sign(b"m")
    key = load_key(signer.public)
    assert key.verify(signature, b"m") is True
    assert key.verify(signature + b"\x00", b"m") is False


@pytest.mark.parametrize(
    ("curve", "problem"),
    [
        ("rsa", "RSA keys are not supported (supported: ECDSA P-256, ECDSA P-384, Ed25519)"),
        ("p521", "ECDSA P-521 keys are not supported (supported: ECDSA P-256, ECDSA P-384, Ed25519)"),
        (
            "secp256k1",
            "ECDSA secp256k1 keys are not supported (supported: ECDSA P-256, ECDSA P-384, Ed25519)",
        ),
    ],
)
def test_keys_of_other_algorithms_are_refused_by_name(tmp_path: Path, curve: str, problem: str) -> None:
    with pytest.raises(KeyProblem) as refused:
        load_key(write(tmp_path, spki(generate(curve))))
    assert str(refused.value) == problem


def test_ed448_and_algorithms_without_a_name_here_are_refused_naming_their_oid(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, x25519

    cases = [
        (ed448.Ed448PrivateKey.generate(), "Ed448 keys"),
        (x25519.X25519PrivateKey.generate(), "keys of algorithm 1.3.101.110"),
        (ec.generate_private_key(ec.BrainpoolP256R1()), "ECDSA on curve 1.3.36.3.3.2.8.1.1.7 keys"),
    ]
    for private, what in cases:
        with pytest.raises(KeyProblem) as refused:
            load_key(write(tmp_path, spki(private)))
        assert (
            str(refused.value) == f"{what} are not supported (supported: ECDSA P-256, ECDSA P-384, Ed25519)"
        )


P256 = bytes.fromhex("301306072a8648ce3d020106082a8648ce3d030107")  # AlgorithmIdentifier: ecPublicKey, P-256


@pytest.mark.parametrize(
    ("der", "problem"),
    [
        (b"\x00\x00\x00", "not a DER SubjectPublicKeyInfo (expected tag 0x30 at byte 0, found tag 0x00)"),
        (
            b"\x30\x05\x30\x03",
            "not a DER SubjectPublicKeyInfo (the element at byte 0 runs past the end (5 bytes))",
        ),
        (
            b"\x30\x84\xff\xff\xff\xff",
            "not a DER SubjectPublicKeyInfo (the element at byte 0 runs past the end",
        ),
        (b"\x30\x02\x30\x00", "not a DER SubjectPublicKeyInfo (expected tag 0x06 at byte 0, found the end)"),
        (
            b"\x30\x04\x30\x02\x06\x00",
            "not a DER SubjectPublicKeyInfo (an OBJECT IDENTIFIER that ends inside",
        ),
        # ecPublicKey with NULL parameters, and with explicit ones (a SEQUENCE): no named curve either way
        (
            bytes.fromhex("300d300b06072a8648ce3d02010500"),
            "an ECDSA key without a named curve is not supported",
        ),
        (
            bytes.fromhex("300d300b06072a8648ce3d02013000"),
            "an ECDSA key without a named curve is not supported",
        ),
        (b"\x30\x1a" + P256 + b"\x03\x03\x00\x04\x01", "not a valid P-256 public key ("),
    ],
    ids=[
        "not DER",
        "short",
        "huge length",
        "no OID",
        "empty OID",
        "NULL curve",
        "explicit curve",
        "no point",
    ],
)
def test_what_is_not_a_key_s_der_is_refused_saying_what(tmp_path: Path, der: bytes, problem: str) -> None:
    with pytest.raises(KeyProblem) as refused:
        load_key(write(tmp_path, der))
    assert str(refused.value).startswith(problem)


def test_bytes_after_the_key_are_refused(tmp_path: Path) -> None:
    der = spki(generate("p256"))
    load_key(write(tmp_path, der))
    with pytest.raises(KeyProblem, match=r"^not a DER SubjectPublicKeyInfo \(2 bytes after it\)$"):
        load_key(write(tmp_path, der + b"\x05\x00"))


def test_a_point_off_the_curve_is_refused_as_no_p256_key(tmp_path: Path) -> None:
    der = bytearray(spki(generate("p256")))
    der[-1] ^= 1  # the point's y no longer matches its x
    with pytest.raises(KeyProblem) as refused:
        load_key(write(tmp_path, bytes(der)))
    assert str(refused.value).startswith("not a valid P-256 public key (")
    assert "cryptography" not in str(refused.value) and "Error" not in str(refused.value)


def test_a_pem_block_of_cosign_s_real_key_rewrapped_reads_the_same(tmp_path: Path) -> None:
    """The PEM's line length is not the key: cosign.pub's body rewritten on one line has the same fingerprint."""
    lines = (REAL / "cosign.pub").read_text().splitlines()
    body = "".join(line.strip() for line in lines if not line.startswith("-----"))
    one_line = tmp_path / "one-line.pub"
    one_line.write_text(f"-----BEGIN PUBLIC KEY-----\n{body}\n-----END PUBLIC KEY-----\n")
    assert base64.b64decode(body)
    assert load_key(one_line).fingerprint == load_key(REAL / "cosign.pub").fingerprint


SPKIS = [spki(generate("p256")), spki(generate("p384")), spki(generate("ed25519"))]


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(SPKIS), st.integers(0, 200), st.binary(max_size=4), st.integers(0, 3))
def test_any_damage_to_a_key_is_a_key_problem_or_a_key(
    tmp_path: Path, der: bytes, at: int, insert: bytes, drop: int
) -> None:
    """Bytes changed, inserted or dropped anywhere: never an error of another kind (a traceback for the user)."""
    at = at % len(der)
    damaged = der[:at] + insert + der[at + drop :]
    try:
        key = load_key(write(tmp_path, damaged))
    except KeyProblem as problem:
        assert "Traceback" not in str(problem) and str(problem)
    else:
        assert key.verify(b"", b"m") is False
