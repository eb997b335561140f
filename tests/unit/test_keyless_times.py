"""Log keys are chosen by a time the verifier proved, never by one the evidence claims (issue 48).

The attack as it was found: a Rekor key the trusted root retired yesterday signs the checkpoint of an entry that
has no signed entry timestamp and claims an ``integratedTime`` of two days ago, while an RFC 3161 timestamp proves
the real signing time. The checkpoint signs no time, so only the timestamp's time may choose its key.

Material: Sigstore's staging Rekor v2 bundle (tests/data/sigstore/tlog/PROVENANCE.md), whose checkpoint its log
key really signed and whose timestamp Sigstore's staging TSA really granted; the trusted root says when the key
was retired, and the bundle says (unsigned) when it was logged.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from preparer.policy.keyless.evidence import from_bundle
from preparer.policy.keyless.model import KeylessProblem
from preparer.policy.keyless.root import load_root, parse_root
from preparer.policy.keyless.verify import verify
from tests.keyless import T0, YEAR, rfc3339
from tests.keyless_log import DATA
from tests.keyless_sign import Signer, make_signer
from tests.unit.test_keyless_anchors import cosign_layer

BUNDLE, ARTIFACT = "staging-rekor-v2.txt.sigstore.json", "staging-rekor-v2.txt"
#: The staging TSA's genTime in the bundle: 2025-06-09T11:57:38Z.
SIGNED_AT = 1749470258
DAY = 86400
LOG = "https://log2025-alpha1.rekor.sigstage.dev"


def staging_root(log_end: int | None) -> Any:
    document = json.loads((DATA / "trusted_root.staging.json").read_bytes())
    (log,) = [t for t in document["tlogs"] if t["baseUrl"] == LOG]
    log["publicKey"]["validFor"]["start"] = rfc3339(SIGNED_AT - 30 * DAY)
    if log_end is not None:
        log["publicKey"]["validFor"]["end"] = rfc3339(log_end)
    return parse_root(json.dumps(document).encode(), "trusted_root.json")


def bundle(claimed: int | None) -> Any:
    """The bundle, its entry claiming (no signature covers it) that it was integrated at ``claimed``."""
    document = json.loads((DATA / BUNDLE).read_bytes())
    if claimed is not None:
        document["verificationMaterial"]["tlogEntries"][0]["integratedTime"] = str(claimed)
    return from_bundle(json.dumps(document).encode(), BUNDLE, artifact=(DATA / ARTIFACT).read_bytes())


def test_the_bundle_verifies_while_its_log_key_is_trusted() -> None:
    """The control: the same bundle and claim, the key still in use: verified at the timestamp's time."""
    assert verify(bundle(SIGNED_AT - 2 * DAY), staging_root(None)).signed_at == SIGNED_AT


def test_a_checkpoint_by_a_key_retired_before_the_proven_time_is_refused_whatever_time_the_entry_claims() -> (
    None
):
    retired_yesterday = SIGNED_AT - DAY
    with pytest.raises(KeylessProblem) as caught:
        verify(bundle(SIGNED_AT - 2 * DAY), staging_root(retired_yesterday))
    assert str(caught.value) == (
        f"the key of log {LOG} was not valid at 2025-06-09T11:57:38Z, the verified signing time its checkpoint is "
        "judged at (the trusted root's validFor)"
    )


def test_a_claimed_integrated_time_is_no_verified_time() -> None:
    """Without the timestamp nothing proves a time, whatever the entry says: refused, never judged at its claim."""
    found = bundle(SIGNED_AT - 2 * DAY)
    import dataclasses

    with pytest.raises(
        KeylessProblem, match=r"^no verified signing time: no signed entry timestamp from Rekor"
    ):
        verify(dataclasses.replace(found, timestamps=()), staging_root(None))


# The same class for CT logs: an SCT's time is signed by the very key whose window it would choose.


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Signer:
    return make_signer(tmp_path_factory.mktemp("sigstore"))


def test_an_sct_by_a_ct_key_retired_before_the_signing_time_is_refused_whatever_time_it_signs(
    signer: Signer, tmp_path: Path
) -> None:
    """A CT key retired yesterday signs an SCT dated two days ago into a certificate used today: refused."""
    root = load_root(signer.sigstore.trusted_root(tmp_path / "root.json", ct_window=(T0 - YEAR, T0 - DAY)))
    backdated = signer.sigstore.leaf(not_before=T0 - 60, sct_time=T0 - 2 * DAY)
    with pytest.raises(KeylessProblem) as caught:
        verify(cosign_layer(signer, backdated, (signer.sigstore.intermediate,)), root)
    assert str(caught.value) == (
        f"the certificate's SCT is from the CT log {signer.sigstore.ct_url}, not trusted at the verified signing "
        "time 2023-11-14T22:13:20Z"
    )
    # The control: the same certificate, the CT key still trusted when it signed.
    trusted = load_root(signer.sigstore.trusted_root(tmp_path / "open.json", ct_window=(T0 - YEAR, None)))
    assert verify(cosign_layer(signer, backdated, (signer.sigstore.intermediate,)), trusted).signed_at == T0
