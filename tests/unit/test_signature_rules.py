"""The policy's signature room on its own: key files, DSSE's PAE, what each format claims, and the bounds on the
work one image can cost. The registry-facing behaviour is tested in tests/integration/test_signatures.py."""

from __future__ import annotations

import base64
import hashlib
import time
from pathlib import Path

import pytest

from preparer.errors import InvalidInputsError, SignatureRefused
from preparer.fetch.guard import SignatureObject
from preparer.policy import load_policy
from preparer.policy.keys import KeyProblem, load_key
from preparer.policy.payload import pae
from preparer.policy.signatures import MAX_CHECKS, Check, SignedBy
from tests.plugins.signing import bundle, generate, make_key, pem_public_key, simple_signing, spki, statement

DIGEST = "sha256:" + "d" * 64


def test_pae_is_dsse_s_encoding() -> None:
    # The example of the DSSE protocol text.
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


def test_a_key_is_named_by_the_sha256_of_its_der(tmp_path: Path) -> None:
    key = make_key(tmp_path)
    loaded = load_key(key.public)
    der = base64.b64decode("".join(key.public.read_text().splitlines()[1:-1]))
    assert loaded.fingerprint == hashlib.sha256(der).hexdigest() == key.fingerprint
    assert loaded.algorithm == "ecdsa-p256-sha256"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nAA==\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n",
         "it is a private key (ENCRYPTED SIGSTORE PRIVATE KEY)"),
        ("-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n", "it is a certificate"),
        ("-----BEGIN PUBLIC KEY-----\nAA==\n", "no -----END PUBLIC KEY----- line"),
        ("-----BEGIN PUBLIC KEY-----\n!!!\n-----END PUBLIC KEY-----\n", "not base64"),
    ],
    ids=["cosign.key", "certificate", "unterminated", "not base64"],
)  # fmt: skip
def test_what_is_not_one_public_key_is_refused(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "k.pub"
    path.write_text(text)
    with pytest.raises(KeyProblem, match=problem.replace("(", r"\(").replace(")", r"\)")):
        load_key(path)


def test_a_p521_key_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "p521.pub"
    path.write_text(pem_public_key(spki(generate("p521"))))
    with pytest.raises(KeyProblem, match="ECDSA P-521 keys are not supported"):
        load_key(path)


def test_a_policy_names_the_rule_and_reads_keys_relative_to_itself(tmp_path: Path) -> None:
    make_key(tmp_path / "keys")
    (tmp_path / "policy.toml").write_text(
        '[image]\nallow = ["*"]\n\n[[image.signed-by]]\nkeys = ["keys/cosign.pub"]\n\n'
        '[[image.signed-by]]\nimages = ["r.example/x/*"]\nkeys = ["keys/cosign.pub"]\n'
    )
    policy = load_policy(tmp_path / "policy.toml")
    assert [(r.images, r.line) for r in policy.signed_by] == [(("*",), 4), (("r.example/x/*",), 7)]
    assert [len(policy.signed_by_rules(repo)) for repo in ("r.example/x/y", "other.example/z")] == [2, 1]


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ("keys = []", "keys must be a non-empty array of key files"),
        ('images = "*"\nkeys = ["k.pub"]', "images must be an array of non-empty strings"),
        ('key = ["k.pub"]', "unknown key 'key' (did you mean keys? known here: images, keys, identities)"),
    ],
)
def test_a_malformed_rule_is_exit_3_naming_its_line(tmp_path: Path, table: str, problem: str) -> None:
    (tmp_path / "policy.toml").write_text(f"# p\n[[image.signed-by]]\n{table}\n")
    with pytest.raises(InvalidInputsError) as refused:
        load_policy(tmp_path / "policy.toml")
    assert refused.value.exit_code == 3
    assert f"image.signed-by (line 2 of {tmp_path / 'policy.toml'}): {problem}" in str(refused.value)


def rule(tmp_path: Path) -> tuple[SignedBy, object]:
    key = make_key(tmp_path / "keys")
    return SignedBy(("*",), (load_key(key.public),), 3), key


def test_a_bundle_with_cosign_s_predicate_verifies_and_another_predicate_does_not(tmp_path: Path) -> None:
    signed_by, key = rule(tmp_path)
    check = Check([signed_by], "policy.toml", "io.buildpacks.group[0]")
    good = SignatureObject("bundle", "referrer a", bundle(key, statement("r", DIGEST)))  # type: ignore[arg-type]
    slsa = SignatureObject("bundle", "referrer b",
                           bundle(key, statement("r", DIGEST, "https://slsa.dev/provenance/v1")))  # type: ignore[arg-type]  # fmt: skip
    assert check.satisfying([good], [DIGEST]) is not None
    assert check.satisfying([slsa], [DIGEST]) is None
    with pytest.raises(SignatureRefused) as refused:
        check.verify([slsa], [DIGEST], "r@" + DIGEST)
    assert refused.value.reason == "not-a-signature"


def test_a_payload_of_another_type_is_not_a_cosign_signature(tmp_path: Path) -> None:
    signed_by, key = rule(tmp_path)
    payload = simple_signing("r", DIGEST, kind="something else")
    obj = SignatureObject("cosign", "tag layer 1", payload, base64.b64encode(key.sign(payload)).decode())  # type: ignore[attr-defined]
    check = Check([signed_by], "p", "e")
    assert check.satisfying([obj], [DIGEST]) is None
    with pytest.raises(SignatureRefused, match="its payload's type is 'something else', not cosign's"):
        check.verify([obj], [DIGEST], "r")


def test_the_keys_time_one_image_can_cost_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    signed_by, _ = rule(tmp_path)
    stranger = make_key(tmp_path / "stranger")
    payload = simple_signing("r", DIGEST)
    forged = base64.b64encode(stranger.sign(payload)).decode()
    objects = [SignatureObject("cosign", f"tag layer {n}", payload, forged) for n in range(4 * MAX_CHECKS)]
    check = Check([signed_by], "p", "e")
    started = time.monotonic()
    with pytest.raises(SignatureRefused) as refused:
        check.verify(objects, [DIGEST], "r@" + DIGEST)
    assert refused.value.reason == "unverified"
    calls = []
    original = type(signed_by.keys[0]).verify

    def counting(self, signature, message):  # type: ignore[no-untyped-def]
        calls.append(1)
        return original(self, signature, message)

    monkeypatch.setattr(type(signed_by.keys[0]), "verify", counting)
    check.satisfying(objects, [DIGEST])
    assert len(calls) == MAX_CHECKS
    assert time.monotonic() - started < 30


REAL = Path(__file__).resolve().parents[1] / "data" / "cosign-keyed"
REAL_DIGEST = "sha256:f3cfc9d0dbf931d3db4685ec659b7ac68e2a578219da4aae65427886e649b06b"


def test_a_signature_made_by_cosign_verifies_for_its_digest_and_no_other() -> None:
    key = load_key(REAL / "cosign.pub")
    signature = (REAL / "signature.b64").read_text().strip()
    obj = SignatureObject(
        "cosign", "sha256-f3cf.sig layer 1", (REAL / "payload.json").read_bytes(), signature
    )
    check = Check([SignedBy(("*",), (key,), 2)], "policy.toml", "io.buildpacks.group[0]")
    verified = check.satisfying([obj], [REAL_DIGEST])
    assert verified is not None and verified[0].key == key.fingerprint and verified[0].digest == REAL_DIGEST
    with pytest.raises(SignatureRefused) as refused:
        check.verify([obj], [DIGEST], "r@" + DIGEST)
    assert (refused.value.reason, refused.value.signed_digest) == ("other-digest", REAL_DIGEST)
