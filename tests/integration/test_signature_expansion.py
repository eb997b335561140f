"""Signature objects are bounded in what their parse builds, not only in their bytes (issue 48).

The attack as it was found: a registry (or whoever can push to it) attaches a 16 MiB Sigstore bundle of
``{},{},...`` as a referrer; the preparer read it within its 16 MiB bound and built six million dictionaries from
it, peaking at 474 MiB (baseline 42 MiB). And a referrers list of 4 MiB of the same, within the registry document
bound. Each run is the real CLI against the suite's registry (and its front, for the referrers API), its peak RSS
measured as the process's own ``ru_maxrss``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.golden import Layout
from tests.integration.test_signature_objects import run_measured
from tests.keyless_sign import Signer
from tests.plugins.registry import Front, Registry
from tests.plugins.signing import BUNDLE, OCI_INDEX, Key, attach_bundle
from tests.projects import group
from tests.signed import RELEASES, Rule, Scene

MIB = 1 << 20
#: The peak the preparer may reach reading them (before: 474 MiB for the bundle).
BUDGET_MIB = 100


def empty_objects(size: int, head: bytes = b"[", tail: bytes = b"]") -> bytes:
    """``head`` + ``{},{},...{}`` + ``tail``, ``size`` bytes in all."""
    count = (size - len(head) - len(tail) + 1) // 3
    return head + b"{}," * (count - 1) + b"{}" + tail


def hostile_bundle() -> bytes:
    """A 16 MiB document shaped as a bundle whose log entries are millions of empty objects."""
    head = json.dumps({"mediaType": BUNDLE, "verificationMaterial": {"tlogEntries": "X"}}).encode()
    before, after = head.split(b'"X"')
    return empty_objects(16 * MIB, before + b"[", b"]" + after)


@pytest.mark.parametrize("rule", ["identity", "key"])
def test_a_sixteen_mib_bundle_of_empty_objects_is_refused_unparsed_and_the_next_signature_counts(
    scene: Scene, layout: Layout, tmp_path: Path, registry: Registry, signer: Signer, key: Key, rule: str
) -> None:
    image = scene.image()
    data = hostile_bundle()
    assert len(data) <= 16 * MIB
    attach_bundle(
        registry, image.repository, image.digest, data
    )  # listed first in the referrers tag schema's index
    if rule == "identity":
        image.sign_keyless(signer, "bundle")
        pol = scene.policy(Rule(["*"], identities=[RELEASES]), trusted_root=signer.root)
    else:
        image.sign(key, "bundle")
        pol = scene.policy(Rule(["*"], keys=[key.public]))
    (layout.app / "project.toml").write_text(group(f"docker://{image.tagged}"))
    result, peak = run_measured(layout, tmp_path, "-policy", str(pol))
    print(f"peak RSS reading a 16 MiB bundle of empty objects, then the valid signature: {peak:.1f} MiB")
    assert result.code == 0, result.stderr
    assert scene.installed()
    assert peak < BUDGET_MIB, peak


def test_a_bundle_of_empty_objects_alone_is_a_refusal_in_words(
    scene: Scene, layout: Layout, tmp_path: Path, registry: Registry, signer: Signer
) -> None:
    image = scene.image()
    attach_bundle(registry, image.repository, image.digest, hostile_bundle())
    pol = scene.policy(Rule(["*"], identities=[RELEASES]), trusted_root=signer.root)
    (layout.app / "project.toml").write_text(group(f"docker://{image.tagged}"))
    result, peak = run_measured(layout, tmp_path, "-policy", str(pol))
    print(f"peak RSS refusing a 16 MiB bundle of empty objects: {peak:.1f} MiB")
    assert result.code == 1
    last = result.stderr.strip().splitlines()[-1]
    print(last)
    assert last.startswith(f"ERROR: failed to fetch {image.tagged}: not signed by an identity")
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
    assert not scene.installed()
    assert peak < BUDGET_MIB, peak


def test_a_referrers_list_of_four_mib_of_empty_objects_is_refused_in_words(
    scene: Scene, layout: Layout, tmp_path: Path, front: Front, key: Key
) -> None:
    image = scene.image()
    repository, digest = image.repository, image.digest
    listing = empty_objects(4 * MIB - 64, b'{"schemaVersion":2,"manifests":[', b"]}")
    front.overrides[f"/v2/{repository}/referrers/{digest}"] = (200, {"Content-Type": OCI_INDEX}, listing)
    (layout.app / "project.toml").write_text(group(f"docker://{front.host}/{repository}@{digest}"))
    result, peak = run_measured(
        layout, tmp_path, "-policy", str(scene.policy(Rule(["*"], keys=[key.public])))
    )
    print(f"peak RSS refusing a 4 MiB referrers list of empty objects: {peak:.1f} MiB")
    assert result.code == 1
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith(
            f"ERROR: failed to pull {front.host}/{repository}@{digest}: the list of referrers of {digest} is refused: "
            "it holds"
        )
    )
    assert peak < BUDGET_MIB, peak
