"""The signature boundary under attack: signature objects that are malformed, ambiguous, many or large.

Real CLI and the suite's real registry; the HTTP front of tests/plugins/registry.py serves what a real registry
cannot be made to hold (a manifest that is not JSON, a blob that is not what its digest says, a referrers API that
answers 405) and passes everything else through. One object that cannot be read is skipped and never refuses an
image another object proves; what one image's signatures may cost is bounded in all, and they are judged one at a
time, so the preparer's memory does not grow with them.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.golden import Layout
from tests.plugins.cli import Result, measured
from tests.plugins.registry import Front, upload_blob
from tests.plugins.signing import (
    BUNDLE,
    OCI_INDEX,
    OCI_MANIFEST,
    SIMPLE_SIGNING,
    Key,
    attach_bundle,
    bundle,
    make_key,
    simple_signing,
    statement,
)
from tests.projects import group
from tests.signed import Image, Rule, Scene


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer(image: Image, payload: bytes, signature: bytes, upload: bool = True) -> Any:
    """A layer of a ``.sig`` manifest: ``payload`` (uploaded, unless not ``upload``) and its signature."""
    digest = upload_blob(image.registry, image.repository, payload) if upload else sha(payload)
    return {"mediaType": SIMPLE_SIGNING, "size": len(payload), "digest": digest,
            "annotations": {"dev.cosignproject.cosign/signature": base64.b64encode(signature).decode()}}  # fmt: skip


def serve_sig(front: Front, image: Image, layers: list[Any]) -> None:
    """The front answers for the image's tag ``sha256-<hex>.sig`` a manifest of ``layers``."""
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": 2,
                           "digest": "sha256:" + "1" * 64}, "layers": layers}  # fmt: skip
    path = f"/v2/{image.repository}/manifests/{image.digest.replace(':', '-')}.sig"
    front.overrides[path] = (200, {"Content-Type": OCI_MANIFEST}, json.dumps(manifest).encode())


def serve_referrers(front: Front, image: Image, entries: list[Any]) -> None:
    """The front answers for the image's referrers tag schema's tag ``sha256-<hex>`` an index of ``entries`` (the
    test registry has no referrers API: it answers 404, and the tag is asked)."""
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}
    path = f"/v2/{image.repository}/manifests/{image.digest.replace(':', '-')}"
    front.overrides[path] = (200, {"Content-Type": OCI_INDEX}, json.dumps(index).encode())


def serve_referrer(front: Front, image: Image, body: bytes) -> Any:
    """The front serves ``body`` as the referrer manifest of its digest in the image's repository; its index
    entry."""
    front.overrides[f"/v2/{image.repository}/manifests/{sha(body)}"] = (
        200,
        {"Content-Type": OCI_MANIFEST},
        body,
    )
    return {"mediaType": OCI_MANIFEST, "digest": sha(body), "size": len(body), "artifactType": BUNDLE}


def valid_layer(image: Image, key: Key) -> Any:
    payload = simple_signing(image.name, image.digest)
    return layer(image, payload, key.sign(payload))


def valid_referrer(image: Image, key: Key) -> Any:
    data = bundle(key, statement(image.name, image.digest))
    return attach_bundle(image.registry, image.repository, image.digest, data, tag_schema=False)[1]


# One object that cannot be read is skipped


def _not_json_referrer(image: Image, front: Front, key: Key) -> Any:
    return ("referrers", serve_referrer(front, image, b"{not json"))


def _missing_bundle_blob(image: Image, front: Front, key: Key) -> Any:
    data = bundle(key, statement(image.name, image.digest))  # valid, but never uploaded
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": BUNDLE,
                "config": {"mediaType": "application/vnd.oci.empty.v1+json", "size": 2,
                           "digest": upload_blob(image.registry, image.repository, b"{}")},
                "layers": [{"mediaType": BUNDLE, "digest": sha(data), "size": len(data)}],
                "subject": {"mediaType": OCI_MANIFEST, "digest": image.digest, "size": 0}}  # fmt: skip
    return ("referrers", serve_referrer(front, image, json.dumps(manifest).encode()))


def _payload_not_text(image: Image, front: Front, key: Key) -> Any:
    payload = b"\x80" + simple_signing(image.name, image.digest)  # signed by the trusted key
    return ("sig", layer(image, payload, key.sign(payload)))


def _missing_payload(image: Image, front: Front, key: Key) -> Any:
    payload = simple_signing(image.name, image.digest) + b" "
    return ("sig", layer(image, payload, key.sign(payload), upload=False))  # a 404


def _payload_digest_mismatch(image: Image, front: Front, key: Key) -> Any:
    payload = simple_signing(image.name, image.digest) + b"  "
    described = layer(image, payload, key.sign(payload))
    other = payload.replace(b"cosign", b"COSIGN")  # same size, other bytes
    front.overrides[f"/v2/{image.repository}/blobs/{described['digest']}"] = (200, {}, other)
    return ("sig", described)


BROKEN = {
    "referrer manifest not JSON": (_not_json_referrer, "no signature found"),
    "referrer names a missing blob": (_missing_bundle_blob, "no signature found"),
    "payload not text": (
        _payload_not_text,
        "no image signature: its payload is refused: it is not UTF-8 text",
    ),
    "payload blob 404": (_missing_payload, "no signature found"),
    "payload blob digest mismatch": (_payload_digest_mismatch, "no signature found"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_one_unreadable_signature_object_is_skipped_and_another_proves_the_image(
    scene: Scene, front: Front, key: Key, case: str
) -> None:
    image = scene.image()
    make, refusal = BROKEN[case]
    where, broken = make(image, front, key)
    serve = serve_sig if where == "sig" else serve_referrers
    pol = scene.policy(Rule(["*"], keys=[key.public]))
    ref = image.via(front.host).pinned
    # Alone, it proves nothing: refused as an unsigned image is, in words, without a traceback.
    serve(front, image, [broken])
    alone = scene.run(pol, ref)
    assert alone.code == 1, alone.stderr
    assert "Traceback" not in alone.stderr
    assert "not signed by a key the platform policy trusts" in alone.stderr and refusal in alone.stderr
    # Before a valid signature, it is skipped (a debug line) and the image installed.
    good = valid_layer if where == "sig" else valid_referrer
    serve(front, image, [broken, good(image, key)])
    result = scene.run(pol, ref, "-log-level", "debug")
    assert result.code == 0, result.stderr
    assert scene.installed()
    skipped = "is no image signature" if case == "payload not text" else "skipped"
    assert any(skipped in line for line in result.stdout.splitlines()), result.stdout  # debug lines: stdout


def test_a_payload_larger_than_the_bound_is_skipped_unread(scene: Scene, front: Front, key: Key) -> None:
    image = scene.image()
    huge = {"mediaType": SIMPLE_SIGNING, "size": (16 << 20) + 1, "digest": "sha256:" + "0" * 64,
            "annotations": {"dev.cosignproject.cosign/signature": "AA=="}}  # fmt: skip
    serve_sig(front, image, [huge, valid_layer(image, key)])
    result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.via(front.host).pinned)
    assert result.code == 0, result.stderr
    assert f"/v2/{image.repository}/blobs/sha256:{'0' * 64}" not in front.requests


# Read as cosign reads it, or no signature


AMBIGUOUS: dict[str, tuple[Callable[[str, str], bytes], str]] = {
    "digest in upper case": (
        lambda ref, digest: simple_signing(ref, "sha256:" + digest.removeprefix("sha256:").upper()),
        "its payload's docker-manifest-digest 'sha256:",
    ),
    "digest with a newline": (
        lambda ref, digest: simple_signing(ref, digest + "\n"),
        "is not sha256: and 64 lowercase hex digits",
    ),
    "critical given twice": (
        lambda ref, digest: b'{"critical":{},' + simple_signing(ref, digest)[1:],
        "the key 'critical' is given twice in one object",
    ),
    "keys that differ by case": (
        lambda ref, digest: simple_signing(ref, digest)[:-1] + b',"Critical":{}}',
        "the keys 'critical' and 'Critical' differ only by case",
    ),
}


@pytest.mark.parametrize("case", list(AMBIGUOUS))
def test_a_payload_cosign_could_read_otherwise_is_no_signature_even_by_a_trusted_key(
    scene: Scene, front: Front, key: Key, case: str
) -> None:
    image = scene.image()
    make, problem = AMBIGUOUS[case]
    payload = make(image.name, image.digest)
    serve_sig(front, image, [layer(image, payload, key.sign(payload))])
    result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.via(front.host).pinned)
    assert result.code == 1
    assert "Traceback" not in result.stderr
    assert f"what key sha256:{key.fingerprint} signed is no image signature: " in result.stderr
    assert problem in result.stderr
    assert not scene.installed()


def test_a_bundle_whose_subject_is_in_upper_case_is_no_signature(
    scene: Scene, front: Front, key: Key
) -> None:
    image = scene.image()
    upper = "sha256:" + image.digest.removeprefix("sha256:").upper()
    data = bundle(key, statement(image.name, upper))
    serve_referrers(
        front,
        image,
        [attach_bundle(image.registry, image.repository, image.digest, data, tag_schema=False)[1]],
    )
    result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.via(front.host).pinned)
    assert result.code == 1
    assert "its statement names no sha256 subject in 64 lowercase hex digits" in result.stderr


# The referrers API


@pytest.mark.parametrize("status", [400, 405, 501])
def test_a_registry_whose_referrers_api_answers_an_error_falls_back_to_the_tag_schema(
    scene: Scene, front: Front, key: Key, status: int
) -> None:
    image = scene.image()
    repository, digest = image.repository, image.digest
    serve_referrers(front, image, [valid_referrer(image, key)])
    api = f"/v2/{repository}/referrers/{digest}"  # unfiltered: bundles come under four artifact types
    front.overrides[api] = (status, {}, b"")
    result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.via(front.host).pinned)
    assert result.code == 0, result.stderr
    assert front.requests.count(api) == 1  # asked once, not retried
    assert f"/v2/{repository}/manifests/{digest.replace(':', '-')}" in front.requests


# Many and large: bounded in all, judged one at a time


def run_measured(layout: Layout, tmp_path: Path, *args: str) -> tuple[Result, float]:
    """The CLI and its peak RSS in MiB (of the preparer's process alone: a parent that only waits for it)."""
    result, peak, _ = measured(layout, tmp_path, *args, seconds=300)
    return result, peak


#: Each bundle about 3.05 MiB: 16 of them are 49 MiB, 20 (61 MiB) go past the 64 MiB bound with the lists' 8 MiB.
PAD = 2_400_000


def test_many_large_signature_objects_are_judged_one_at_a_time_and_bounded_in_all(
    scene: Scene, layout: Layout, tmp_path: Path, front: Front, key: Key
) -> None:
    image = scene.image()
    stranger = make_key(tmp_path / "stranger")
    junk = []
    for number in range(20):  # signed by a key no rule trusts, each different
        doc = json.loads(statement(image.name, image.digest))
        doc["predicate"] = {"pad": "x" * PAD + str(number)}
        data = bundle(stranger, json.dumps(doc).encode())
        junk.append(attach_bundle(image.registry, image.repository, image.digest, data, tag_schema=False)[1])
    good = valid_referrer(image, key)
    (layout.app / "project.toml").write_text(group(f"docker://{image.via(front.host).pinned}"))
    pol = str(scene.policy(Rule(["*"], keys=[key.public])))
    # All 20 before the valid one: past the bound, the image is refused even though a valid signature follows.
    serve_referrers(front, image, [*junk, good])
    refused, peak = run_measured(layout, tmp_path, "-policy", pol)
    assert refused.code == 1
    assert "would go past the 67108864 bytes read for one image's signatures" in refused.stderr
    assert good["digest"] not in "".join(front.requests)
    print(f"peak RSS refusing past the bound: {peak:.1f} MiB")
    assert peak < 80, peak
    # 16 objects of 3 MiB, then the valid one: read one after another, kept by none; the 4 after it never asked.
    serve_referrers(front, image, [*junk[:16], good, *junk[16:]])
    front.requests.clear()
    (tmp_path / "again").mkdir()
    result, peak = run_measured(layout, tmp_path / "again", "-policy", pol)
    assert result.code == 0, result.stderr
    assert scene.installed()
    print(f"peak RSS with 16 bundles of 3 MiB (49 MiB) before the valid one: {peak:.1f} MiB")
    assert peak < 80, peak  # what was judged is not kept: the 49 MiB read would double it if it were
    assert not any(junk[n]["digest"] in p for n in range(16, 20) for p in front.requests)
