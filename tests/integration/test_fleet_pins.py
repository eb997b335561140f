"""Images pinned by the digest of their index, through the fleet's repository (docs/fleet.md): resolved through that
digest only, never through a ``ref-`` record, which maps a name to a digest and could put another image in place of
the pinned one.

The origin is a docker-registry of the test's own (stopped to show an offline pod never needs it), the fleet's
repository the suite's registry, pods run the real CLI (tests/integration/test_fleet.py).
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import requests

from preparer.fetch.fleet import ref_tag
from tests.golden import listing
from tests.integration.test_fleet import pod, tags
from tests.integration.test_signature_age import signed_policy
from tests.plugins.registry import Front, Registry, add_index, build_package, push, put_manifest, started
from tests.plugins.signing import cosign_sign, make_key
from tests.projects import group

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def two_platforms(tmp_path: Path, destination: str) -> tuple[str, str]:
    """``acme/multi`` 1.0.0 (linux/amd64) and 1.1.0 (linux/arm64) in one index pushed to ``destination``
    (``registry/repository:tag``): the index's digest and the amd64 manifest's."""
    work = tmp_path / f"multi-{uuid.uuid4().hex[:6]}"
    work.mkdir()
    build_package(work, [("acme/multi", "1.0.0", "")], ("acme/multi", "1.0.0"), tag="amd64")
    build_package(work, [("acme/multi", "1.1.0", "")], ("acme/multi", "1.1.0"), tag="arm64", architecture="arm64",
                  layout=work / "layout")  # fmt: skip
    add_index(work / "layout", "multi", {"amd64": "amd64", "arm64": "arm64"})
    index = push(work / "layout", "multi", destination, all_images=True)
    listed = json.loads((work / "layout" / "index.json").read_text())["manifests"]
    amd = next(
        m for m in listed if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "amd64"
    )
    return index, str(amd["digest"])


def forge_ref(registry: Registry, fleet: str, reference: str, digest: str) -> None:
    """A ``ref-`` record, as a pusher could write one, saying that ``reference`` names ``digest``."""
    host, _, repository = fleet.partition("/")
    base = f"http://{host}/v2/{repository}"
    [real] = [t for t in tags(fleet) if t.startswith("ref-")]
    record = requests.get(f"{base}/manifests/{real}", headers={"Accept": OCI_MANIFEST}, timeout=10).json()
    record["annotations"] |= {
        "io.buildpacks.preparer.digest": digest,
        "org.opencontainers.image.source": reference,
    }
    put_manifest(registry, repository, ref_tag(reference), json.dumps(record).encode(), OCI_MANIFEST)


def test_an_index_pin_is_served_offline_through_its_index_and_a_forged_ref_record_changes_nothing(
    tmp_path: Path, registry: Registry
) -> None:
    fleet = f"{registry.host}/fleet/{uuid.uuid4().hex[:12]}"
    key = make_key(tmp_path / "keys")
    offline = ["-download-cache-repo", fleet, "-download-cache-repo-mode", "offline"]
    with started(tmp_path / "origin") as origin:
        index, amd = two_platforms(tmp_path, origin.ref("vendor/multi", "multi"))
        cosign_sign(
            origin, "vendor/multi", index, key
        )  # signed at its index, as `cosign sign <multi-arch tag>`
        other = two_platforms(tmp_path, origin.ref("vendor/other", "1"))[0]
        pinned = f"{origin.host}/vendor/multi@{index}"
        pol = str(signed_policy(tmp_path, key))
        first = pod(
            tmp_path, "pod1", group(f"docker://{pinned}"), "-policy", pol, "-download-cache-repo", fleet
        )
        assert first.code == 0, first.stderr
        assert f"index-{index.removeprefix('sha256:')}" in tags(fleet)
        assert f"sha256-{amd.removeprefix('sha256:')}" in tags(fleet)
        assert not [t for t in tags(fleet) if t.startswith("ref-")]  # a digest is never recorded as a name
        # Another image, pulled by tag, is in the fleet too, with the ref- record of its tag.
        by_tag = pod(tmp_path, "pod-other", group(f"docker://{origin.ref('vendor/other', '1')}"),
                     "-download-cache-repo", fleet)  # fmt: skip
        assert by_tag.code == 0, by_tag.stderr
        host, _, repository = fleet.partition("/")
        ref_record = next(t for t in tags(fleet) if t.startswith("ref-"))
        answer = requests.get(f"http://{host}/v2/{repository}/manifests/{ref_record}",
                              headers={"Accept": OCI_MANIFEST}, timeout=10)  # fmt: skip
        other_amd = answer.json()["annotations"]["io.buildpacks.preparer.digest"]
        assert other_amd != amd and other != index
    # The origin is gone. A pusher records that the pinned reference names the other image.
    forge_ref(registry, fleet, pinned, other_amd)
    second = pod(tmp_path, "pod2", group(f"docker://{pinned}"), "-policy", pol, *offline)
    assert second.code == 0, second.stderr
    installed = listing(tmp_path / "pod2" / "cnb" / "buildpacks")
    assert "acme_multi/1.0.0/" in installed and "acme_multi/1.1.0/" not in installed
    # Without the index's bytes in the fleet, the pin is not there: the forged record is not used instead.
    gone = requests.delete(f"http://{host}/v2/{repository}/blobs/{index}", timeout=10)
    assert gone.status_code == 202, gone.text
    third = pod(tmp_path, "pod3", group(f"docker://{pinned}"), "-policy", pol, *offline)
    assert third.code == 1
    assert f"failed to pull {pinned}: not in the download cache repository (seed sha256-" in third.stderr
    assert not (tmp_path / "pod3" / "cnb" / "buildpacks" / "acme_multi").exists()


def test_a_fleet_that_serves_no_index_as_a_manifest_serves_it_from_its_record(
    tmp_path: Path, registry: Registry, front: Front
) -> None:
    """Registries other than Debian's do not serve a blob as a manifest: the index's record is read (its layer
    verified against the pinned digest), and the platform manifest by the digest the index names. A record whose
    layer is not the pinned digest is ignored, with a warning, and the pod finds nothing."""
    repository = f"fleet/{uuid.uuid4().hex[:12]}"
    with started(tmp_path / "origin") as origin:
        index, _ = two_platforms(tmp_path, origin.ref("vendor/multi", "multi"))
        pinned = f"{origin.host}/vendor/multi@{index}"
        project = group(f"docker://{pinned}")
        assert (
            pod(tmp_path, "pod1", project, "-download-cache-repo", f"{registry.host}/{repository}").code == 0
        )
    # Read through the front, which answers what only other registries answer.
    offline = ["-download-cache-repo", f"{front.host}/{repository}", "-download-cache-repo-mode", "offline"]
    front.overrides[f"/v2/{repository}/manifests/{index}"] = (
        404,
        {},
        b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}',
    )
    served = pod(tmp_path, "pod2", group(f"docker://{pinned}"), *offline)
    assert served.code == 0, served.stderr
    assert "acme_multi/1.0.0/" in listing(tmp_path / "pod2" / "cnb" / "buildpacks")
    tag = f"index-{index.removeprefix('sha256:')}"
    assert f"/v2/{repository}/manifests/{tag}" in front.requests
    record = requests.get(f"http://{registry.host}/v2/{repository}/manifests/{tag}",
                          headers={"Accept": OCI_MANIFEST}, timeout=10).json()  # fmt: skip
    # The record's layer swapped for another blob the fleet holds (the empty config): not the index's digest.
    record["layers"][0] |= {"digest": record["config"]["digest"], "size": record["config"]["size"]}
    put_manifest(registry, repository, tag, json.dumps(record).encode(), OCI_MANIFEST)
    result = pod(tmp_path, "pod3", group(f"docker://{pinned}"), *offline)
    assert result.code == 1
    assert (
        f"the download cache repository's {tag} is ignored: its layer is not the digest it is tagged with"
        in (result.stderr)
    )
