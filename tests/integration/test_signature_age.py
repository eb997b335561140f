"""How long a recorded signature verdict is trusted: ``image.signature-max-age`` (docs/policy.md, docs/security.md).

Real CLI and the suite's real registry, images signed as cosign signs them. A signature is withdrawn as it is in a
registry: the manifest its ``sha256-<hex>.sig`` tag names is deleted. The records are the ones the preparer wrote,
aged by rewriting their time, as a day passing would.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from tests.plugins.cli import Result
from tests.plugins.registry import Registry
from tests.plugins.signing import Key
from tests.projects import group
from tests.signed import Rule, Scene, push_image, write_policy


def signed_policy(tmp_path: Path, key: Key, max_age: str | None = None) -> Path:
    """A policy requiring ``key``'s signature of every image, with ``image.signature-max-age`` when given."""
    head = f'[image]\nsignature-max-age = "{max_age}"\n' if max_age is not None else ""
    name = f"policy-{uuid.uuid4().hex[:6]}.toml"
    return write_policy(tmp_path, Rule(["*"], keys=[key.public]), head=head, name=name)


def withdraw(registry: Registry, repository: str, signature: str) -> None:
    """Delete the signature manifest (and so its ``.sig`` tag), as ``crane delete`` would."""
    answer = requests.delete(f"http://{registry.host}/v2/{repository}/manifests/{signature}", timeout=10)
    assert answer.status_code == 202, answer.text


def records(cache: Path) -> list[Path]:
    return sorted((cache / "signatures").glob("*.json"))


@pytest.fixture
def signed(registry: Registry, tmp_path: Path, key: Key) -> tuple[str, str, str]:
    """An image signed by ``key`` in cosign's tag scheme: ``(reference by digest, repository, the signature
    manifest's digest)``."""
    image = push_image(registry, tmp_path)
    signature = image.sign(key, "sig")
    return image.pinned, image.repository, signature


def test_a_withdrawn_signature_admits_the_image_from_the_record_until_it_is_a_day_old(
    scene: Scene, tmp_path: Path, registry: Registry, key: Key, signed: tuple[str, str, str]
) -> None:
    ref, repository, signature = signed
    pol = signed_policy(tmp_path, key)
    assert scene.run(pol, ref).code == 0
    [record] = records(tmp_path / "cache")
    verified = json.loads(record.read_text())["verified"]
    assert abs(verified - time.time()) < 60  # the time the registry was asked
    withdraw(registry, repository, signature)
    again = scene.run(pol, ref)
    assert again.code == 0, again.stderr  # within 24 h the record spares the registry
    assert scene.installed()
    doc = json.loads(record.read_text())
    record.write_text(json.dumps(doc | {"verified": verified - 24 * 3600 - 1}))
    late = scene.run(pol, ref)
    assert late.code == 1
    assert "not signed by a key the platform policy trusts" in late.stderr
    assert "no signature found" in late.stderr


def test_a_record_without_a_time_is_expired(
    scene: Scene, tmp_path: Path, registry: Registry, key: Key, signed: tuple[str, str, str]
) -> None:
    """A record an older preparer wrote (no ``verified``) sends the run to the registry."""
    ref, repository, signature = signed
    pol = signed_policy(tmp_path, key)
    assert scene.run(pol, ref).code == 0
    [record] = records(tmp_path / "cache")
    doc = json.loads(record.read_text())
    record.write_text(json.dumps({"objects": doc["objects"]}))
    withdraw(registry, repository, signature)
    result = scene.run(pol, ref)
    assert result.code == 1
    assert "no signature found" in result.stderr


@pytest.mark.parametrize(("max_age", "admitted"), [("0", False), ("1h", True), ("90s", True)])
def test_signature_max_age_is_the_policys(
    scene: Scene, tmp_path: Path, registry: Registry, key: Key, signed: tuple[str, str, str],
    max_age: str, admitted: bool,
) -> None:  # fmt: skip
    ref, repository, signature = signed
    pol = signed_policy(tmp_path, key, max_age)
    assert scene.run(pol, ref).code == 0
    withdraw(registry, repository, signature)
    assert scene.run(pol, ref).code == (0 if admitted else 1)


@pytest.mark.parametrize("value", ['"1 day"', '"-1h"', "3600", "true"])
def test_a_malformed_signature_max_age_is_exit_3_naming_the_key_and_line(
    preparer: Callable[..., Result], tmp_path: Path, key: Key, value: str
) -> None:
    pol = tmp_path / "policy.toml"
    pol.write_text(f"[image]\nsignature-max-age = {value}\n")
    result = preparer("-policy", str(pol), project=group("docker://registry.example/a@sha256:" + "0" * 64))
    assert result.code == 3
    assert (
        f'image.signature-max-age (line 2 of {pol}): must be a duration such as "24h", "90m" or "0"'
        in result.stderr
    )


def test_the_fleets_record_is_trusted_for_the_same_time(
    tmp_path: Path, registry: Registry, key: Key, signed: tuple[str, str, str]
) -> None:
    """A pod with a cold local cache reads the fleet's ``sig-`` record: within the policy's time it spares the
    registry, with ``0`` the registry is asked (and the withdrawn signature refuses the image)."""
    from tests.integration.test_fleet import pod

    ref, repository, signature = signed
    fleet = f"{registry.host}/fleet/{uuid.uuid4().hex[:12]}"
    project = group(f"docker://{ref}")
    first = pod(
        tmp_path, "pod1", project, "-policy", str(signed_policy(tmp_path, key)), "-download-cache-repo", fleet
    )
    assert first.code == 0, first.stderr
    withdraw(registry, repository, signature)
    second = pod(
        tmp_path, "pod2", project, "-policy", str(signed_policy(tmp_path, key)), "-download-cache-repo", fleet
    )
    assert second.code == 0, second.stderr
    third = pod(tmp_path, "pod3", project, "-policy", str(signed_policy(tmp_path, key, "0")),
                "-download-cache-repo", fleet)  # fmt: skip
    assert third.code == 1
    assert "no signature found" in third.stderr
    # The fleet's record made a day older (as a pusher could only make it older or newer: a time from the future
    # is not trusted either): a cold pod asks the registry.
    for shift in (-24 * 3600 - 1, 3600):
        age_fleet_record(registry, fleet, shift)
        late = pod(tmp_path, f"pod-{shift}", project, "-policy", str(signed_policy(tmp_path, key)),
                   "-download-cache-repo", fleet)  # fmt: skip
        assert late.code == 1, late.stderr
        assert "no signature found" in late.stderr


def age_fleet_record(registry: Registry, fleet: str, seconds: int) -> None:
    """Rewrite the fleet's one ``sig-`` record with its time moved by ``seconds``."""
    from tests.plugins.registry import put_manifest, upload_blob

    repository = fleet.partition("/")[2]
    base = f"http://{registry.host}/v2/{repository}"
    [tag] = [t for t in requests.get(f"{base}/tags/list", timeout=10).json()["tags"] if t.startswith("sig-")]
    accept = {"Accept": "application/vnd.oci.image.manifest.v1+json"}
    manifest = requests.get(f"{base}/manifests/{tag}", headers=accept, timeout=10).json()
    layer = manifest["layers"][0]
    doc = requests.get(f"{base}/blobs/{layer['digest']}", timeout=10).json()
    data = json.dumps(doc | {"verified": int(time.time()) + seconds}).encode()
    manifest["layers"][0] = layer | {"digest": upload_blob(registry, repository, data), "size": len(data)}
    put_manifest(registry, repository, tag, json.dumps(manifest).encode(), manifest["mediaType"])
