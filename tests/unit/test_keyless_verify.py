"""Keyless verification whole (policy/keyless/verify.py) on real Sigstore bundles, their trusted roots read as the
policy reads them (root.load_root): what sigstore's own verifiers accept is accepted with the same signer, and the
bundle of CVE-2022-36056 (a log entry for another signature) is refused.

The material is sigstore-python's and sigstore-rs's test assets (tests/data/sigstore/PROVENANCE.md and
tlog/PROVENANCE.md): production and staging bundles v0.1 to v0.3, message signatures and a DSSE envelope.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from preparer.policy.keyless.evidence import from_bundle
from preparer.policy.keyless.model import KeylessProblem
from preparer.policy.keyless.root import load_root
from preparer.policy.keyless.verify import verify

DATA = Path(__file__).parent.parent / "data" / "sigstore"
PRODUCTION, STAGING = DATA / "trusted_root.json", DATA / "tlog" / "trusted_root.staging.json"
GITHUB = "https://token.actions.githubusercontent.com"


@pytest.mark.parametrize(
    ("bundle", "artifact", "root", "issuer", "subject"),
    [
        ("bundle_v3_github.whl.sigstore", "bundle_v3_github.whl", PRODUCTION, GITHUB,
         "https://github.com/trailofbits/rfc8785.py/.github/workflows/release.yml@refs/tags/v0.1.2"),
        ("tlog/dsse_v001.sigstore.json", None, PRODUCTION, GITHUB,
         "https://github.com/prefix-dev/sigstore-example/.github/workflows/action.yaml@refs/heads/main"),
        ("tlog/bundle_v3.txt.sigstore", "tlog/bundle_v3.txt", STAGING, "https://github.com/login/oauth",
         "william@yossarian.net"),
        # A bundle v0.1 whose P-384 leaf signed with SHA-256, as Sigstore's clients did.
        ("tlog/bundle.txt.sigstore", "tlog/bundle.txt", STAGING, "https://github.com/login/oauth", "a@tny.town"),
    ],
    ids=["production github v0.3", "production dsse", "staging v0.3", "staging v0.1 p384"],
)  # fmt: skip
def test_a_real_bundle_verifies_with_its_signer(
    bundle: str, artifact: str | None, root: Path, issuer: str, subject: str
) -> None:
    found = from_bundle((DATA / bundle).read_bytes(), bundle,
                        artifact=(DATA / artifact).read_bytes() if artifact else None)  # fmt: skip
    verdict = verify(found, load_root(root))
    assert (verdict.issuer, verdict.subject) == (issuer, subject)


def test_a_real_bundle_is_refused_by_another_sigstores_root() -> None:
    found = from_bundle((DATA / "tlog/bundle_v3.txt.sigstore").read_bytes(), "staging",
                        artifact=(DATA / "tlog/bundle_v3.txt").read_bytes())  # fmt: skip
    with pytest.raises(KeylessProblem, match="which the trusted root"):
        verify(found, load_root(PRODUCTION))


def test_the_bundle_of_cve_2022_36056_is_refused() -> None:
    found = from_bundle((DATA / "tlog/bundle_cve_2022_36056.txt.sigstore").read_bytes(), "cve",
                        artifact=(DATA / "tlog/bundle_cve_2022_36056.txt").read_bytes())  # fmt: skip
    with pytest.raises(KeylessProblem, match="is not for this signature: it records another signature"):
        verify(found, load_root(STAGING))
