"""Keyless signatures: images signed by a Sigstore identity (a Fulcio certificate logged in Rekor), verified offline
against the platform's trusted root before any of their layers is pulled.

Real CLI and the suite's real registry. The Sigstore instance (CA, CT log, Rekor log) is the tests' own
(tests/keyless.py, tests/keyless_log.py): nothing here can reach the public one, and its trusted root is written
the way the public one is. Signatures are made as cosign makes them (tests/keyless_sign.py).
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

import pytest

from tests.keyless import GITHUB_ISSUER, WORKFLOW
from tests.keyless_sign import Signer, make_signer
from tests.plugins.registry import Front, Registry
from tests.plugins.signing import make_key
from tests.signed import RELEASES, SUBJECT_REGEXP, Form, Identity, Rule, Scene


@pytest.mark.parametrize("form", ["sig", "bundle"], ids=["tag scheme", "bundle"])
def test_a_keyless_signed_image_is_installed_and_its_signer_reported(
    scene: Scene, tmp_path: Path, registry: Registry, signer: Signer, form: Form
) -> None:
    image = scene.image()
    image.sign_keyless(signer, form)
    report = tmp_path / "report.toml"
    pol = scene.policy(Rule(["*"], identities=[RELEASES]), trusted_root=signer.root)
    result = scene.run(pol, image.tagged, "-prepare-report", str(report))
    assert result.code == 0, result.stderr
    assert scene.installed()
    [signature] = tomllib.loads(report.read_text())["signature"]
    log_index = signature.pop("log-index")
    assert isinstance(log_index, int) and log_index >= 1000
    # The leaf lived ten minutes in 2023: it is judged at its verified signing time, not now.
    assert signature == {
        "entry": "io.buildpacks.group[0]", "image": f"{registry.host}/{image.repository}:latest",
        "digest": image.digest, "format": "cosign" if form == "sig" else "bundle", "issuer": GITHUB_ISSUER,
        "subject": WORKFLOW, "integrated-time": "2023-11-14T22:13:20Z",
    }  # fmt: skip


@pytest.mark.parametrize("form", ["sig", "bundle"], ids=["tag scheme", "bundle"])
def test_another_signer_is_refused_naming_its_issuer_and_subject(
    scene: Scene, registry: Registry, signer: Signer, form: Form
) -> None:
    image = scene.image()
    repository, digest = image.repository, image.digest
    other = "https://github.com/mallory/fork/.github/workflows/release.yml@refs/heads/main"
    image.sign_keyless(signer, form, signer.leaf(subject=other))
    pol = scene.policy(Rule(["*"], identities=[RELEASES]), trusted_root=signer.root)
    result = scene.run(pol, image.tagged)
    assert result.code == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"ERROR: failed to fetch {registry.host}/{repository}:latest: not signed by an identity the platform policy "
        f"trusts (image.signed-by, line 4 of {pol}): the keyless signature for {digest} is by issuer "
        f"{GITHUB_ISSUER}, subject {other}, which no identity of the rule matches (issuer {GITHUB_ISSUER}, "
        f"subject-regexp {SUBJECT_REGEXP}); looked for signatures of {digest} at the tag "
        f"{digest.replace(':', '-')}.sig and among the referrers of {digest}"
    )
    assert not scene.installed()


def test_a_pattern_written_for_cosigns_partial_match_matches_nothing_more(
    scene: Scene, signer: Signer
) -> None:
    """cosign matches ``--certificate-identity-regexp`` anywhere in the value; here it must match all of it, so a
    pattern that relied on a partial match refuses, never widens."""
    image = scene.image()
    image.sign_keyless(signer, "sig")
    partial = Identity(GITHUB_ISSUER, subject_regexp=r"github\.com/acme/buildpacks")
    pol = scene.policy(Rule(["*"], identities=[partial]), trusted_root=signer.root)
    result = scene.run(pol, image.tagged)
    assert result.code == 1 and "which no identity of the rule matches" in result.stderr
    assert not scene.installed()


@pytest.mark.parametrize("form", ["sig", "bundle"], ids=["tag scheme", "bundle"])
def test_a_certificate_from_another_sigstore_does_not_verify(
    scene: Scene, tmp_path: Path, signer: Signer, form: Form
) -> None:
    """The same identity, certified and logged by a Sigstore the trusted root does not name: refused."""
    image = scene.image()
    image.sign_keyless(make_signer(tmp_path / "elsewhere"), form)
    pol = scene.policy(Rule(["*"], identities=[RELEASES]), trusted_root=signer.root)
    result = scene.run(pol, image.tagged)
    assert result.code == 1
    assert "not signed by an identity the platform policy trusts" in result.stderr
    assert "does not verify:" in result.stderr
    assert not scene.installed()


def test_a_signing_time_outside_the_certificate_is_refused(scene: Scene, signer: Signer) -> None:
    """A leaf used after its ten minutes (a stolen key): the log's time is outside the certificate's."""
    image = scene.image()
    from tests.keyless import T0

    image.sign_keyless(signer, "sig", signer.leaf(at=T0), at=T0 + 3600)
    pol = scene.policy(Rule(["*"], identities=[RELEASES]), trusted_root=signer.root)
    result = scene.run(pol, image.tagged)
    assert result.code == 1 and "does not verify:" in result.stderr
    assert not scene.installed()


def test_a_rule_with_keys_and_identities_is_satisfied_by_either(
    scene: Scene, tmp_path: Path, signer: Signer
) -> None:
    key = make_key(tmp_path / "keys")
    pol = scene.policy(Rule(["*"], keys=[key.public], identities=[RELEASES]), trusted_root=signer.root)
    keyed = scene.image()
    keyed.sign(key, "sig")
    assert scene.run(pol, keyed.tagged).code == 0
    keyless = scene.image()
    keyless.sign_keyless(signer, "bundle")
    assert scene.run(pol, keyless.tagged).code == 0
    unsigned = scene.image()
    result = scene.run(pol, unsigned.tagged)
    assert (
        result.code == 1 and "not signed by a key or an identity the platform policy trusts" in result.stderr
    )


def test_a_warm_run_verifies_the_recorded_keyless_signature_again_and_asks_nothing(
    scene: Scene, tmp_path: Path, front: Front, signer: Signer
) -> None:
    image = scene.image()
    image.sign_keyless(signer, "sig")
    ref = image.via(front.host).pinned
    pol = scene.policy(Rule(["*"], identities=[RELEASES]), trusted_root=signer.root)
    assert scene.run(pol, ref).code == 0
    front.requests.clear()
    report = tmp_path / "warm.toml"
    result = scene.run(pol, ref, "-prepare-report", str(report))
    assert result.code == 0, result.stderr
    assert front.requests == []
    assert tomllib.loads(report.read_text())["signature"][0]["subject"] == WORKFLOW
    # Another platform's identity: the record does not satisfy it, the registry is asked and refuses.
    other = Identity(GITHUB_ISSUER, subject="https://github.com/acme/other/.github/workflows/x.yml@v1")
    pol = scene.policy(Rule(["*"], identities=[other]), trusted_root=signer.root)
    result = scene.run(pol, ref)
    assert result.code == 1 and "which no identity of the rule matches" in result.stderr
    assert front.requests != []


def test_a_recorded_keyless_signature_is_not_reused_once_the_trusted_root_changed(
    scene: Scene, tmp_path: Path, front: Front, signer: Signer
) -> None:
    """The platform rotates its trusted root (another Sigstore, the same identity rule) after a run recorded the
    signature: the record is judged against the new root, does not satisfy it, and the registry is asked again."""
    image = scene.image()
    image.sign_keyless(signer, "sig")
    ref = image.via(front.host).pinned
    assert (
        scene.run(scene.policy(Rule(["*"], identities=[RELEASES]), trusted_root=signer.root), ref).code == 0
    )
    other = make_signer(tmp_path / "other-sigstore")
    order = (scene.layout.layers / "order.toml").read_bytes()
    front.requests.clear()
    pol = scene.policy(Rule(["*"], identities=[RELEASES]), trusted_root=other.root, name="rotated.toml")
    result = scene.run(pol, ref)
    assert result.code == 1, result.stderr
    assert (
        f"not signed by an identity the platform policy trusts (image.signed-by, line 4 of {pol})"
        in result.stderr
    )
    assert "which the trusted root does not name" in result.stderr, result.stderr
    assert front.requests != []
    assert (scene.layout.layers / "order.toml").read_bytes() == order  # the refused run changed nothing


def test_the_dry_run_shows_each_identity_and_the_trusted_roots_fingerprint(
    scene: Scene, registry: Registry, signer: Signer
) -> None:
    image = scene.image()
    pol = scene.policy(Rule(["*"], identities=[RELEASES]), trusted_root=signer.root)
    result = scene.run(pol, image.tagged, "-dry-run")
    assert result.code == 0, result.stderr
    fingerprint = hashlib.sha256(signer.root.read_bytes()).hexdigest()
    assert (
        f"  signatures: io.buildpacks.group[0] ({registry.host}/{image.repository}): image.signed-by, line 4 of "
        f"{pol}: identity issuer {GITHUB_ISSUER}, subject-regexp {SUBJECT_REGEXP}, "
        f"trusted root {signer.root} (sha256:{fingerprint})"
    ) in result.stdout


# The policy's own mistakes: exit 3 before any request


IDENTITY = f'issuer = "{GITHUB_ISSUER}"\nsubject = "{WORKFLOW}"\n'


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            f"[[image.signed-by]]\n[[image.signed-by.identities]]\n{IDENTITY}",
            (
                "image.signed-by.identities (the rule at line 1 of POLICY): an identity rule needs [sigstore] trusted-root, "
                "the platform's copy of Sigstore's trusted root (trusted_root.json)"
            ),
        ),
        (
            (
                '[sigstore]\ntrusted-root = "sigstore/trusted_root.json"\n[[image.signed-by]]\n'
                f'[[image.signed-by.identities]]\nissuer = "{GITHUB_ISSUER}"\n'
            ),
            (
                "image.signed-by.identities (line 4 of POLICY): an identity needs its subject: subject or subject-regexp "
                "(cosign requires both an issuer and a subject)"
            ),
        ),
        (
            (
                '[sigstore]\ntrusted-root = "sigstore/trusted_root.json"\n[[image.signed-by]]\n'
                f'[[image.signed-by.identities]]\n{IDENTITY}issuer-regexp = ".*"\n'
            ),
            "image.signed-by.identities (line 4 of POLICY): give issuer or issuer-regexp, not both",
        ),
        (
            (
                '[sigstore]\ntrusted-root = "sigstore/trusted_root.json"\n[[image.signed-by]]\n'
                f'[[image.signed-by.identities]]\nissuer = "{GITHUB_ISSUER}"\nsubject-regexp = "(unclosed"\n'
            ),
            (
                "image.signed-by.identities (line 6 of POLICY): subject-regexp is not a valid regular expression "
                "(Go's regexp syntax, as cosign reads it): missing ): (unclosed"
            ),
        ),
        (
            (
                '[sigstore]\ntrusted-root = "sigstore/trusted_root.json"\n[[image.signed-by]]\n'
                f'[[image.signed-by.identities]]\n{IDENTITY}subjct = "x"\n'
            ),
            (
                "image.signed-by.identities (line 7 of POLICY): unknown key 'subjct' (did you mean subject? known here: issuer, issuer-regexp, "
                "subject, subject-regexp)"
            ),
        ),
        (
            (
                '[sigstore]\ntrusted-root = "missing.json"\n[[image.signed-by]]\n'
                f"[[image.signed-by.identities]]\n{IDENTITY}"
            ),
            "sigstore.trusted-root (line 2 of POLICY): DIR/missing.json: ",
        ),
        (
            (
                '[sigstore]\ntrusted-root = "sigstore/no-ctlogs.json"\n[[image.signed-by]]\n'
                f"[[image.signed-by.identities]]\n{IDENTITY}"
            ),
            "sigstore.trusted-root (line 2 of POLICY): DIR/sigstore/no-ctlogs.json",
        ),
    ],
    ids=[
        "no trusted root",
        "no subject",
        "both issuers",
        "bad regexp",
        "typo",
        "missing root",
        "root without CT",
    ],
)
def test_a_keyless_rule_that_cannot_work_is_exit_3_before_any_request(
    scene: Scene, tmp_path: Path, signer: Signer, front: Front, text: str, says: str
) -> None:
    doc = json.loads(signer.root.read_text())
    doc["ctlogs"] = []
    (signer.root.parent / "no-ctlogs.json").write_text(json.dumps(doc))
    pol = tmp_path / "policy.toml"
    pol.write_text(text)
    result = scene.run(pol, f"{front.host}/any/thing:1")
    assert result.code == 3, result.stderr
    expected = f"ERROR: failed to read policy {pol}: " + says.replace("POLICY", str(pol)).replace(
        "DIR", str(tmp_path)
    )
    assert result.stderr.strip().splitlines()[-1].startswith(expected), result.stderr
    assert front.requests == []
