"""``-provenance`` for images trusted by a keyless signature (docs/provenance.md, "resolvedDependencies": how it was
trusted): the ``signatures`` annotation names the signer's issuer and subject, the log entry and the signing time,
as the report's ``[[signature]]`` does and as the signature was made.

Real CLI and the suite's real registry. The images are signed, offline, by the tests' own Sigstore (a Fulcio-like CA
and a Rekor log, tests/keyless.py and tests/keyless_log.py) in both formats the preparer reads: cosign's ``.sig`` tag
with its certificate and Rekor bundle annotations, and a Sigstore bundle attached as a referrer
(tests/keyless_sign.py). Every statement is validated against the schemas of tests/data/provenance.
"""

from __future__ import annotations

import tomllib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.golden import Layout
from tests.integration.test_lock import fresh
from tests.integration.test_provenance import dependencies, project
from tests.integration.test_provenance_sources import run_and_read
from tests.keyless import GITHUB_ISSUER, T0, WORKFLOW, rfc3339
from tests.keyless_sign import Signer
from tests.plugins.cli import Result
from tests.plugins.registry import Registry
from tests.plugins.signing import make_key
from tests.signed import RELEASES, Form, Identity, Rule, Scene

#: The buildpack of :meth:`Scene.image`'s buildpackage.
NAME = "acme/signed@1.0.0"
#: The Rekor log of tests/keyless_log.py logs each entry among padding entries of its own, which these begin.
PADDING = (b'{"other": ', b'{"later": ')


def logged(signer: Signer) -> list[int]:
    """The log indexes the signer's Rekor log gave the entries signed into it, padding left out (as
    ``Log.add`` numbers them: 1000 plus the leaf's position)."""
    return [1000 + i for i, leaf in enumerate(signer.log.leaves) if not leaf.startswith(PADDING)]


def said_by_report(report: Path, *rules: str) -> list[dict[str, Any]]:
    """The report's ``[[signature]]`` tables, less ``entry`` and ``image``, with the provenance's camelCase names,
    each with the rule it satisfied (which the report file does not name), in order."""
    names = {"log-index": "logIndex", "integrated-time": "integratedTime"}
    said = tomllib.loads(report.read_text())["signature"]
    assert len(said) == len(rules)
    return [
        {names.get(k, k): v for k, v in s.items() if k not in ("entry", "image")} | {"rule": rule}
        for s, rule in zip(said, rules, strict=True)
    ]


@pytest.mark.parametrize("form", ["sig", "bundle"], ids=["tag scheme", "bundle"])
def test_a_keyless_signature_is_described_as_the_report_and_the_signer_say(
    preparer: Callable[..., Result], layout: Layout, scene: Scene, tmp_path: Path, registry: Registry,
    signer: Signer, form: Form,
) -> None:  # fmt: skip
    """A subject and a signing time of this test's own (not the kit's defaults), so that each value is the
    signature's; a warm run, which verifies the signature recorded with the download, describes it the same."""
    image = scene.image()
    repository, digest = image.repository, image.digest
    subject = (
        f"https://github.com/acme/buildpacks/.github/workflows/release.yml@refs/heads/r-{uuid.uuid4().hex}"
    )
    at = T0 + 86400 + 17
    image.sign_keyless(signer, form, signer.leaf(subject=subject, at=at), at=at)
    [log_index] = logged(signer)
    pol = scene.policy(Rule(["*"], identities=[RELEASES]), trusted_root=signer.root)
    written = project(f'uri = "docker://{image.tagged}"')
    statement, _, _ = run_and_read(preparer, tmp_path, written, "-policy", str(pol))
    found = dependencies(statement)[NAME]
    assert found["annotations"]["signatures"] == [
        {
            "digest": digest,
            "format": "cosign" if form == "sig" else "bundle",
            "issuer": GITHUB_ISSUER,
            "subject": subject,
            "logIndex": log_index,
            "integratedTime": rfc3339(at),
            "rule": "image.signed-by, line 4 of the policy",
        }
    ]
    assert found["annotations"]["signatures"] == said_by_report(
        tmp_path / "report.toml", "image.signed-by, line 4 of the policy"
    )
    assert found["annotations"]["policy"]  # the rule that allowed it
    assert found["uri"] == f"docker://{registry.host}/{repository}@{digest}"
    assert found["digest"] == {"sha256": digest.removeprefix("sha256:")}

    fresh(layout)  # installed again, from the download cache: the signature as recorded is verified again
    warm, _, _ = run_and_read(preparer, tmp_path, written, "-policy", str(pol))
    assert dependencies(warm)[NAME] == found


def test_a_rule_with_keys_and_identities_says_which_satisfied_it(
    preparer: Callable[..., Result], layout: Layout, scene: Scene, tmp_path: Path, signer: Signer
) -> None:
    """One rule trusting a key and an identity: an image signed with the key is described by the key's
    fingerprint and no signer, an image signed keylessly by the signer and no key; both by the one rule."""
    key = make_key(tmp_path / "keys")
    pol = scene.policy(Rule(["*"], keys=[key.public], identities=[RELEASES]), trusted_root=signer.root)
    rule = "image.signed-by, line 4 of the policy"
    keyed_image = scene.image()
    keyed_image.sign(key, "sig")
    keyless_image = scene.image()
    keyless_image.sign_keyless(signer, "sig")
    [log_index] = logged(signer)

    statement, _, _ = run_and_read(
        preparer, tmp_path, project(f'uri = "docker://{keyed_image.tagged}"'), "-policy", str(pol)
    )
    keyed = dependencies(statement)[NAME]["annotations"]
    assert keyed["signatures"] == [
        {"digest": keyed_image.digest, "format": "cosign", "key": key.fingerprint, "rule": rule}
    ]
    assert keyed["signatures"] == said_by_report(tmp_path / "report.toml", rule)

    fresh(layout)
    statement, _, _ = run_and_read(
        preparer, tmp_path, project(f'uri = "docker://{keyless_image.tagged}"'), "-policy", str(pol)
    )
    keyless = dependencies(statement)[NAME]["annotations"]
    [signature] = keyless["signatures"]
    assert "key" not in signature
    assert signature == {
        "digest": keyless_image.digest, "format": "cosign", "issuer": GITHUB_ISSUER,
        "subject": WORKFLOW,
        "logIndex": log_index, "integratedTime": rfc3339(T0), "rule": rule,
    }  # fmt: skip
    assert keyless["signatures"] == said_by_report(tmp_path / "report.toml", rule)


def test_two_rules_on_one_image_are_each_named_with_the_signature_that_satisfied_it(
    preparer: Callable[..., Result], scene: Scene, tmp_path: Path, registry: Registry, signer: Signer
) -> None:
    """A rule trusting a key and a rule trusting an identity both cover the image, which carries a keyed
    signature (its ``.sig`` tag) and a keyless one (a bundle among its referrers): two signatures, each with its
    rule's line."""
    key = make_key(tmp_path / "keys")
    image = scene.image()
    digest = image.digest
    image.sign(key, "sig")
    image.sign_keyless(signer, "bundle")
    [log_index] = logged(signer)
    pol = scene.policy(
        Rule(["*"], keys=[key.public]),
        Rule([f"{registry.host}/signed/*"], identities=[Identity(GITHUB_ISSUER, subject=WORKFLOW)]),
        trusted_root=signer.root,
    )
    statement, _, _ = run_and_read(
        preparer, tmp_path, project(f'uri = "docker://{image.tagged}"'), "-policy", str(pol)
    )
    keyed_rule, keyless_rule = (
        "image.signed-by, line 4 of the policy",
        "image.signed-by, line 8 of the policy",
    )
    assert dependencies(statement)[NAME]["annotations"]["signatures"] == [
        {"digest": digest, "format": "cosign", "key": key.fingerprint, "rule": keyed_rule},
        {"digest": digest, "format": "bundle", "issuer": GITHUB_ISSUER, "subject": WORKFLOW,
         "logIndex": log_index, "integratedTime": rfc3339(T0), "rule": keyless_rule},
    ]  # fmt: skip
    assert dependencies(statement)[NAME]["annotations"]["signatures"] == said_by_report(
        tmp_path / "report.toml", keyed_rule, keyless_rule
    )
