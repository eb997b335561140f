"""``-provenance`` across runs (docs/provenance.md, "Same inputs, same bytes"): the same buildpack bytes give the
same statement however they reached the run: from their origin, this pod's download cache, no cache at all, the
fleet's repository; frozen to a lock or writing it. Real CLI, the suite's HTTP server and registries; every digest
compared is recomputed here from what was served.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.buildpacks import make_tgz
from tests.golden import Layout
from tests.integration.test_fleet import pod
from tests.integration.test_fleet_pins import two_platforms
from tests.integration.test_lock import fresh
from tests.integration.test_provenance import cnb_manifest_digest, dependencies, project, validate
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.plugins.registry import Registry, build_package, started, to_cnb


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def without_metadata(path: Path) -> str:
    """The file's text with ``runDetails.metadata`` taken out (the one part two runs may differ in)."""
    statement = json.loads(path.read_text())
    validate(statement)
    statement["predicate"]["runDetails"].pop("metadata")
    return json.dumps(statement, sort_keys=True, indent=2) + "\n"


def test_cold_warm_and_uncached_runs_give_the_same_bytes(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    http_server: FileServer,
    registry: Registry,
) -> None:
    """An archive, a ``.cnb`` over http and an image pulled through its index: the first run downloads them into
    the download cache, the second is served from it, the third has no cache. The three files are the same bytes
    but for the run details' metadata, and every digest is the one recomputed from what was served."""
    name = uuid.uuid4().hex[:8]
    archive = make_tgz(http_server.root / f"{name}.tgz", "acme/cold", "1.0.0", payload=b"cold")
    work = tmp_path / "work"
    work.mkdir()
    package = build_package(work, [("acme/overhttp", "2.0.0", "")], ("acme/overhttp", "2.0.0"))
    cnb = to_cnb(package.layout, "latest", http_server.root / f"{name}.cnb")
    index, amd = two_platforms(tmp_path, registry.ref(f"cold/{name}", "multi"))
    written = project(
        f'uri = "{http_server.url(archive.name)}"',
        f'uri = "{http_server.url(cnb.name)}"',
        f'uri = "docker://{registry.ref(f"cold/{name}", "multi")}"',
    )
    texts: list[str] = []
    for extra in ([], [], ["-download-cache", ""]):
        fresh(layout)
        out = tmp_path / f"provenance-{len(texts)}.json"
        result = preparer("-provenance", str(out), *extra, project=written)
        assert result.code == 0, result.stderr
        texts.append(without_metadata(out))
    assert (tmp_path / "cache").is_dir()  # the first two runs had a download cache
    assert texts[0] == texts[1] == texts[2]
    found = dependencies(json.loads(texts[0]))
    assert found["acme/cold@1.0.0"]["digest"] == {"sha256": sha256(archive.read_bytes())}
    assert found["acme/overhttp@2.0.0"]["digest"] == {"sha256": sha256(cnb.read_bytes())}
    image = found["acme/multi@1.0.0"]
    assert image["uri"] == f"docker://{registry.host}/cold/{name}@{amd}"
    assert image["digest"] == {"sha256": amd.removeprefix("sha256:")}
    assert image["annotations"]["index"] == index


def test_a_cnb_file_is_described_alike_on_disk_and_over_http(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    http_server: FileServer,
) -> None:
    """The same ``.cnb`` bytes, once a file in the app and once a URL: the same digest (the file's sha256, what
    ``sha256sum`` prints and a ``#sha256=`` pin holds), and the image manifest it holds named alike."""
    work = tmp_path / "work"
    work.mkdir()
    package = build_package(work, [("acme/both", "1.0.0", "")], ("acme/both", "1.0.0"))
    served = to_cnb(package.layout, "latest", http_server.root / f"{uuid.uuid4().hex[:8]}.cnb")
    (layout.app / "bps").mkdir()
    local = layout.app / "bps" / "both.cnb"
    shutil.copyfile(served, local)
    described = []
    for uri in ("bps/both.cnb", http_server.url(served.name)):
        fresh(layout)
        out = tmp_path / "provenance.json"
        result = preparer("-provenance", str(out), project=project(f'uri = "{uri}"'))
        assert result.code == 0, result.stderr
        described.append(dependencies(json.loads(out.read_text()))["acme/both@1.0.0"])
    on_disk, over_http = described
    assert on_disk["digest"] == over_http["digest"] == {"sha256": sha256(served.read_bytes())}
    manifest = cnb_manifest_digest(served)
    assert on_disk["annotations"]["manifest"] == over_http["annotations"]["manifest"] == manifest
    assert on_disk["annotations"]["path"] == "bps/both.cnb"
    assert over_http["uri"] == http_server.url(served.name)


def test_a_run_frozen_to_a_lock_differs_from_the_one_that_wrote_it_only_where_documented(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    http_server: FileServer,
    registry: Registry,
) -> None:
    """The lock's own description (``internalParameters.lock.action``) and ``locked: true`` on each entry frozen
    to it are the only differences: every uri and digest is the same."""
    name = uuid.uuid4().hex[:8]
    make_tgz(http_server.root / f"{name}.tgz", "acme/lockme", "1.0.0")
    two_platforms(tmp_path, registry.ref(f"lockme/{name}", "multi"))
    written = project(
        f'uri = "{http_server.url(f"{name}.tgz")}"',
        f'uri = "docker://{registry.ref(f"lockme/{name}", "multi")}"',
    )
    lock, out = layout.app / "preparer.lock", tmp_path / "provenance.json"
    statements = []
    for _ in range(2):
        fresh(layout)
        result = preparer("-lock", str(lock), "-provenance", str(out), project=written)
        assert result.code == 0, result.stderr
        statements.append(json.loads(without_metadata(out)))
    wrote, frozen = statements
    internal = [s["predicate"]["buildDefinition"]["internalParameters"].pop("lock") for s in statements]
    assert [i["action"] for i in internal] == ["written", "frozen"]
    assert internal[0]["sha256"] == internal[1]["sha256"] == sha256(lock.read_bytes())
    for dependency in frozen["predicate"]["buildDefinition"]["resolvedDependencies"]:
        if "entry" in dependency["annotations"]:
            assert dependency["annotations"].pop("locked") is True
    assert wrote == frozen


def _image_dependency(root: Path) -> dict[str, Any]:
    statement = json.loads((root / "provenance.json").read_text())
    validate(statement)
    [image] = [
        d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"] if "@" in d["name"]
    ]
    return dict(image)


def test_an_image_from_the_fleet_s_repository_is_described_as_from_its_origin(
    tmp_path: Path, registry: Registry
) -> None:
    """One pod pulls from the origin and shares the image; another, offline, is served the fleet's copy: the same
    uri (the origin's repository by the platform manifest's digest), digest, index and platform. For an image
    pinned by its index's digest, and for one named by a tag."""
    fleet = f"{registry.host}/fleet/{uuid.uuid4().hex[:12]}"
    with started(tmp_path / "origin") as origin:
        pinned_index, pinned_amd = two_platforms(tmp_path, origin.ref("vendor/pinned", "multi"))
        tagged_index, tagged_amd = two_platforms(tmp_path, origin.ref("vendor/tagged", "multi"))
        images = {
            "pinned": (f"{origin.host}/vendor/pinned@{pinned_index}", pinned_index, pinned_amd),
            "tagged": (origin.ref("vendor/tagged", "multi"), tagged_index, tagged_amd),
        }
        for kind, (reference, _, _) in images.items():
            first = pod(tmp_path, f"{kind}-1", project(f'uri = "docker://{reference}"'), "-download-cache-repo",
                        fleet, "-provenance", str(tmp_path / f"{kind}-1" / "provenance.json"))  # fmt: skip
            assert first.code == 0, first.stderr
    offline = ["-download-cache-repo", fleet, "-download-cache-repo-mode", "offline"]
    for kind, (reference, index, amd) in images.items():
        second = pod(tmp_path, f"{kind}-2", project(f'uri = "docker://{reference}"'), *offline,
                     "-provenance", str(tmp_path / f"{kind}-2" / "provenance.json"))  # fmt: skip
        assert second.code == 0, second.stderr
        direct = _image_dependency(tmp_path / f"{kind}-1")
        shared = _image_dependency(tmp_path / f"{kind}-2")
        assert shared == direct, kind
        repository = (
            reference.partition("@")[0].rpartition(":")[0]
            if kind == "tagged"
            else reference.partition("@")[0]
        )
        assert direct["uri"] == f"docker://{repository}@{amd}"
        assert direct["digest"] == {"sha256": amd.removeprefix("sha256:")}
        assert (direct["annotations"]["index"], direct["annotations"]["platform"]) == (index, "linux/amd64")


def test_the_same_build_in_two_directories_gives_the_same_bytes(
    http_server: FileServer, tmp_path: Path
) -> None:
    """A service builds the same app, builder, policy and run id in a directory of its own per build: the
    statements are the same bytes but for the run details' metadata, whatever the directories (the builder's
    order.toml, a local buildpack, the lock and the policy outside <app> are named by their file names, the policy's
    rules by their lines of "the policy", whose sha256 is in internalParameters; on main each held the absolute
    paths)."""
    import shutil

    from preparer import Inputs, prepare
    from tests.buildpacks import make_dir
    from tests.golden import BUILDER

    make_tgz(http_server.root / "where.tgz", "acme/where", "1.0.0", payload=b"where")
    texts = []
    for root in (tmp_path / "one", tmp_path / "other" / "deeper"):
        shutil.copytree(BUILDER, root / "cnb")
        app, outside = root / "workspace", root / "shared"
        app.mkdir(parents=True)
        make_dir(app / "inside", "acme/inside", "1.0.0")
        make_dir(outside / "bp", "acme/outside", "1.0.0")
        (outside / "policy.toml").write_text('[sources]\nallow = ["http", "path", "builder"]\n')
        (app / "project.toml").write_text(
            project(
                f'uri = "{http_server.url("where.tgz")}"', 'uri = "./inside"', 'uri = "../shared/bp"',
                'uri = "urn:cnb:builder:examples/node"',
            )
        )  # fmt: skip
        out = root / "provenance.json"
        inputs = Inputs(
            app_dir=app, layers_dir=root / "layers", platform_dir=root / "platform",
            buildpacks_dir=root / "cnb" / "buildpacks", order_path=root / "cnb" / "order.toml", download_cache=None,
            provenance=out, policy=outside / "policy.toml", lock=outside / "preparer.lock",
        )  # fmt: skip
        prepare(inputs, run_id="build-7")
        texts.append(without_metadata(out))
    assert texts[0] == texts[1]
    assert str(tmp_path) not in texts[0]
    found = dependencies(json.loads(texts[0]))
    assert found["acme/outside@1.0.0"]["annotations"]["path"] == "bp"
    assert found["acme/inside@1.0.0"]["annotations"]["path"] == "inside"
    assert found["order.toml"]["annotations"] == {"role": "builder order"}
    assert found["acme/where@1.0.0"]["annotations"]["policy"].endswith(" of the policy")
