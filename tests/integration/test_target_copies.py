"""A copy already in ``<buildpacks>`` is checked and described as the build will run it, through the real CLI and
a real registry: a ``<buildpacks>`` shared by an arm64 build and an amd64 build of the same multi-architecture
tag keeps the arm64 copy (another build may be using it), so the amd64 build checks that copy against its target
(refused when it cannot run there), or warns that it runs it, and its report and provenance describe the bytes on
disk, never the amd64 image it fetched and did not install."""

from __future__ import annotations

import json
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path

from tests.buildpacks import buildpack_toml, make_dir
from tests.golden import Layout, listing, snapshot
from tests.plugins.cli import Result
from tests.plugins.registry import Registry, add_index, build_package, push
from tests.plugins.signing import Key
from tests.projects import group
from tests.signed import Image, Rule, write_policy

BOTH = '\n[[targets]]\nos = "linux"\narch = "amd64"\n\n[[targets]]\nos = "linux"\narch = "arm64"\n'


def hello(root: Path, arch: str, targets: str) -> Path:
    """``ux/hello@1.0.0`` as its ``arch`` image holds it: ``targets`` in buildpack.toml, a ``bin/build`` of its own."""
    make_dir(root, "ux/hello", "1.0.0", "0.10")
    (root / "buildpack.toml").write_text(buildpack_toml("ux/hello", "1.0.0", "0.10") + targets)
    (root / "bin" / "build").write_text(f"#!/bin/sh\necho built for {arch}\n")
    return root


def push_hello(
    tmp_path: Path, registry: Registry, tag: str, targets: dict[str, str]
) -> tuple[str, dict[str, str]]:
    """One index of ``ux/hello@1.0.0`` for linux/amd64 and linux/arm64 pushed as ``me/hello:<tag>``: its reference
    and each platform's manifest digest."""
    work = tmp_path / tag
    for arch in ("amd64", "arm64"):
        content = hello(work / f"{arch}-src", arch, targets[arch])
        build_package(work, [("ux/hello", "1.0.0", "")], ("ux/hello", "1.0.0"), tag=arch, architecture=arch,
                      layout=work / "layout", content=content)  # fmt: skip
    add_index(work / "layout", "multi", {"amd64": "amd64", "arm64": "arm64"})
    ref = registry.ref("me/hello", tag)
    push(work / "layout", "multi", ref, all_images=True)
    listed = json.loads((work / "layout" / "index.json").read_text())["manifests"]
    digests = {m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"] for m in listed}
    return ref, {arch: digests[arch] for arch in ("amd64", "arm64")}


def find_sha256sum(root: Path) -> str:
    """in-toto's dirHash of ``root``, as its spec computes it with the real tools."""
    command = "find . -type f | cut -c3- | LC_ALL=C sort | xargs -r sha256sum | sha256sum"
    return subprocess.run(
        ["sh", "-c", command], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()[0]


def test_a_copy_for_another_platform_is_refused_naming_both_and_the_way_out(
    preparer: Callable[..., Result], layout: Layout, registry: Registry, tmp_path: Path
) -> None:
    targets = {arch: f'\n[[targets]]\nos = "linux"\narch = "{arch}"\n' for arch in ("amd64", "arm64")}
    ref, digests = push_hello(tmp_path, registry, "per-arch", targets)
    project = group(f"docker://{ref}")
    arm = preparer(project=project, env={"CNB_PREPARER_PLATFORM": "linux/arm64"})
    assert arm.code == 0, arm.stderr
    copy = layout.buildpacks / "ux_hello" / "1.0.0"
    assert (copy / "bin" / "build").read_text() == "#!/bin/sh\necho built for arm64\n"
    (layout.layers / "order.toml").unlink()
    before = snapshot(layout) | {"layers": listing(layout.layers)}
    report, provenance = tmp_path / "report.toml", tmp_path / "provenance.json"
    amd = preparer("-prepare-report", str(report), "-provenance", str(provenance), project=project,
                   env={"CNB_PREPARER_PLATFORM": "linux/amd64"})  # fmt: skip
    assert amd.code == 1, amd.stderr
    assert "Traceback" not in amd.stderr
    assert (
        f"ERROR: failed to install ux/hello@1.0.0: {copy} already holds ux/hello@1.0.0 with other files than the "
        f"copy fetched from {ref} ({digests['amd64']}), and the build would run that copy: it runs on linux/arm64; "
        "this build is linux/amd64 (CNB_PREPARER_PLATFORM). To build, give each target its own <buildpacks> "
        f"(-buildpacks), or remove {copy} so that the fetched copy is installed"
    ) in amd.stderr
    assert snapshot(layout) | {"layers": listing(layout.layers)} == before
    assert (copy / "bin" / "build").read_text() == "#!/bin/sh\necho built for arm64\n"
    assert tomllib.loads(report.read_text()) == {
        "error": {"code": 1, "message": amd.stderr.split("ERROR: ")[1].strip()}
    }
    assert not provenance.exists()
    # The way out: a <buildpacks> of the amd64 build's own.
    own = tmp_path / "amd64-buildpacks"
    ok = preparer("-buildpacks", str(own), project=project, env={"CNB_PREPARER_PLATFORM": "linux/amd64"})
    assert ok.code == 0, ok.stderr
    assert (own / "ux_hello" / "1.0.0" / "bin" / "build").read_text() == "#!/bin/sh\necho built for amd64\n"


def test_a_copy_that_can_run_is_kept_warned_of_and_described_as_it_is_on_disk(
    preparer: Callable[..., Result], layout: Layout, registry: Registry, tmp_path: Path
) -> None:
    """Both images' buildpack.toml list both platforms (as multi-architecture buildpacks write them): the arm64
    copy passes the amd64 build's target check, and the build will run it. The warning says so; the report and the
    provenance name that copy by its files, and the amd64 image as fetched and not installed."""
    ref, digests = push_hello(tmp_path, registry, "both", {"amd64": BOTH, "arm64": BOTH})
    project = group(f"docker://{ref}")
    assert preparer(project=project, env={"CNB_PREPARER_PLATFORM": "linux/arm64"}).code == 0
    copy = layout.buildpacks / "ux_hello" / "1.0.0"
    report, provenance = tmp_path / "report.toml", tmp_path / "provenance.json"
    amd = preparer("-prepare-report", str(report), "-provenance", str(provenance), project=project,
                   env={"CNB_PREPARER_PLATFORM": "linux/amd64"})  # fmt: skip
    assert amd.code == 0, amd.stderr
    assert (copy / "bin" / "build").read_text() == "#!/bin/sh\necho built for arm64\n"  # kept, as it was
    on_disk = find_sha256sum(copy)
    warning = (
        f"Warning: ux/hello@1.0.0: {copy} already holds ux/hello@1.0.0 with other files than the copy fetched "
        f"from {ref} ({digests['amd64']}); the build runs the copy on disk (perhaps installed for another "
        "platform), and the report and the provenance describe it, not the one fetched. To run the fetched copy, "
        f"give each target its own <buildpacks> (-buildpacks), or remove {copy} so that the fetched copy is installed"
    )
    assert amd.stderr.count(warning) == 1, amd.stderr
    said = tomllib.loads(report.read_text())
    assert said["buildpacks"] == [
        {"id": "ux/hello", "version": "1.0.0", "source": ref, "action": "present",
         "digest": f"dirHash:{on_disk}", "not-installed": digests["amd64"]}
    ]  # fmt: skip
    statement = json.loads(provenance.read_text())
    [dependency] = [
        d
        for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]
        if "entry" in d["annotations"]
    ]
    host, _, _ = ref.partition("/")
    assert dependency == {
        "name": "ux/hello@1.0.0",
        "uri": "urn:cnb:builder:ux/hello@1.0.0",
        "digest": {"dirHash": on_disk},
        "annotations": {
            "entry": "io.buildpacks.group[0]",
            "notInstalled": {
                "uri": f"docker://{host}/me/hello@{digests['amd64']}",
                "digest": {"sha256": digests["amd64"].removeprefix("sha256:")},
                "annotations": {"index": dependency["annotations"]["notInstalled"]["annotations"]["index"],
                                "platform": "linux/amd64"},
            },
        },
    }  # fmt: skip
    # The same copy on the platform it was installed for: its own bytes, as fetched; nothing to say.
    arm = preparer(
        "-prepare-report", str(report), project=project, env={"CNB_PREPARER_PLATFORM": "linux/arm64"}
    )
    assert arm.code == 0, arm.stderr
    assert "already holds" not in arm.stderr
    assert tomllib.loads(report.read_text())["buildpacks"][0]["digest"] == digests["arm64"]


def test_a_copy_is_never_run_where_a_lock_pins_the_bytes(
    preparer: Callable[..., Result], layout: Layout, registry: Registry, tmp_path: Path
) -> None:
    """A lock vouches for the bytes fetched (frozen to it, or writing it): another copy in <buildpacks>, even one
    that can run on the build's target, is refused, naming the lock."""
    ref, digests = push_hello(tmp_path, registry, "locked", {"amd64": BOTH, "arm64": BOTH})
    project, lock = group(f"docker://{ref}"), tmp_path / "preparer.lock"
    amd64 = {"CNB_PREPARER_PLATFORM": "linux/amd64"}
    own = preparer("-lock", str(lock), "-buildpacks", str(tmp_path / "own"), project=project, env=amd64)
    assert own.code == 0, own.stderr
    assert preparer(project=project, env={"CNB_PREPARER_PLATFORM": "linux/arm64"}).code == 0
    copy = layout.buildpacks / "ux_hello" / "1.0.0"
    (layout.layers / "order.toml").unlink()
    before, locked = snapshot(layout) | {"layers": listing(layout.layers)}, lock.read_bytes()
    frozen = preparer("-lock", str(lock), project=project, env=amd64)
    assert frozen.code == 1, frozen.stderr
    pinned = ref.rpartition(":")[0] + "@sha256:"  # the frozen run pulls the index the lock pins, by digest
    assert (
        f"ERROR: failed to install ux/hello@1.0.0: {copy} already holds ux/hello@1.0.0 with other files than the "
        f"copy fetched from {pinned}"
    ) in frozen.stderr
    assert (
        f" ({digests['amd64']}), and the build would run that copy, while the lock {lock} pins the copy fetched. "
        f"To build, give each target its own <buildpacks> (-buildpacks), or remove {copy} so that the fetched "
        "copy is installed"
    ) in frozen.stderr
    assert (snapshot(layout) | {"layers": listing(layout.layers)}, lock.read_bytes()) == (before, locked)
    # A lock this run would write records the copy fetched, not the one the build would run: refused too.
    new = tmp_path / "new.lock"
    written = preparer("-lock", str(new), project=project, env=amd64)
    assert written.code == 1, written.stderr
    assert (
        f"({digests['amd64']}), and the build would run that copy, while the lock {new} records the copy fetched. "
        "To build, give each target its own <buildpacks>"
    ) in written.stderr
    assert not new.exists()
    assert snapshot(layout) | {"layers": listing(layout.layers)} == before
    # Unlocked, the same run keeps the copy and says so.
    unlocked = preparer(project=project, env=amd64)
    assert unlocked.code == 0, unlocked.stderr
    assert f"Warning: ux/hello@1.0.0: {copy} already holds" in unlocked.stderr


def test_a_copy_is_never_run_where_the_policy_required_signatures(
    preparer: Callable[..., Result], layout: Layout, registry: Registry, tmp_path: Path, key: Key
) -> None:
    """The signatures the policy required were verified for the amd64 image fetched, not for the arm64 copy on
    disk: refused, naming the policy's requirement."""
    ref, digests = push_hello(tmp_path, registry, "signed", {"amd64": BOTH, "arm64": BOTH})
    project = group(f"docker://{ref}")
    assert preparer(project=project, env={"CNB_PREPARER_PLATFORM": "linux/arm64"}).code == 0
    Image(registry, "me/hello", digests["amd64"]).sign(key, "sig")
    policy = write_policy(tmp_path, Rule(["*"], keys=[key.public]))
    copy = layout.buildpacks / "ux_hello" / "1.0.0"
    (layout.layers / "order.toml").unlink()
    before = snapshot(layout) | {"layers": listing(layout.layers)}
    signed = preparer("-policy", str(policy), project=project, env={"CNB_PREPARER_PLATFORM": "linux/amd64"})
    assert signed.code == 1, signed.stderr
    assert (
        f"ERROR: failed to install ux/hello@1.0.0: {copy} already holds ux/hello@1.0.0 with other files than the "
        f"copy fetched from {ref} ({digests['amd64']}), and the build would run that copy, while the platform "
        "policy required the signatures verified for the copy fetched. To build, give each target its own "
        f"<buildpacks> (-buildpacks), or remove {copy} so that the fetched copy is installed"
    ) in signed.stderr
    assert snapshot(layout) | {"layers": listing(layout.layers)} == before
    # Its own <buildpacks>: installed, the signature verified for the bytes installed.
    ok = preparer("-policy", str(policy), "-buildpacks", str(tmp_path / "own"), project=project,
                  env={"CNB_PREPARER_PLATFORM": "linux/amd64"})  # fmt: skip
    assert ok.code == 0, ok.stderr


def test_a_composites_children_kept_are_described_by_their_files(
    preparer: Callable[..., Result], layout: Layout, registry: Registry, tmp_path: Path
) -> None:
    """A composite buildpackage for two platforms (no targets declared: each copy can run anywhere): the amd64
    build after the arm64 one keeps the composite and its child as on disk; the provenance names both by their
    files, the child under ``kept``."""
    order = '\n[[order]]\n[[order.group]]\nid = "ux/child"\nversion = "1.0.0"\n'
    work = tmp_path / "composite"
    for arch in ("amd64", "arm64"):
        build_package(work, [("ux/child", "1.0.0", ""), ("ux/meta", "1.0.0", order)], ("ux/meta", "1.0.0"),
                      tag=arch, architecture=arch, layout=work / "layout", payload=arch.encode())  # fmt: skip
    add_index(work / "layout", "multi", {"amd64": "amd64", "arm64": "arm64"})
    ref = registry.ref("me/meta", "multi")
    push(work / "layout", "multi", ref, all_images=True)
    project = group(f"docker://{ref}")
    assert preparer(project=project, env={"CNB_PREPARER_PLATFORM": "linux/arm64"}).code == 0
    provenance = tmp_path / "provenance.json"
    amd = preparer(
        "-provenance", str(provenance), project=project, env={"CNB_PREPARER_PLATFORM": "linux/amd64"}
    )
    assert amd.code == 0, amd.stderr
    child, meta = (layout.buildpacks / name / "1.0.0" for name in ("ux_child", "ux_meta"))
    assert (child / "data.bin").read_bytes() == b"arm64"  # kept, as it was
    assert len([w for w in amd.warnings if "already holds" in w]) == 2, amd.stderr
    statement = json.loads(provenance.read_text())
    [dependency] = [
        d
        for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]
        if "entry" in d["annotations"]
    ]
    assert dependency["uri"] == "urn:cnb:builder:ux/meta@1.0.0"
    assert dependency["digest"] == {"dirHash": find_sha256sum(meta)}
    assert dependency["annotations"]["kept"] == [
        {"name": "ux/child@1.0.0", "digest": {"dirHash": find_sha256sum(child)}}
    ]
    assert dependency["annotations"]["notInstalled"]["annotations"]["platform"] == "linux/amd64"


def test_a_copy_that_is_a_link_or_broken_is_read_as_the_detector_would(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    """<buildpacks>/<id>/<version> a link to the very files fetched: the same copy, nothing to say. An empty
    directory there: the build would run a copy without buildpack.toml, so exit 1, naming it and the way out."""
    source = make_dir(layout.app / "bp", "me/bp")
    project = group("./bp")
    (layout.buildpacks / "me_bp").mkdir(parents=True)
    copy = layout.buildpacks / "me_bp" / "1.0.0"
    copy.symlink_to(source)
    linked = preparer(project=project)
    assert linked.code == 0, linked.stderr
    assert linked.warnings == []
    copy.unlink()
    copy.mkdir()
    (layout.layers / "order.toml").unlink()
    before = snapshot(layout) | {"layers": listing(layout.layers)}
    broken = preparer(project=project)
    assert broken.code == 1, broken.stderr
    assert (
        f"ERROR: failed to install me/bp@1.0.0: {copy} already holds me/bp@1.0.0 with other files than the copy "
        f"fetched from {source}, and the build would run that copy, which is broken: {copy / 'buildpack.toml'} "
        f"does not exist. To build, give each target its own <buildpacks> (-buildpacks), or remove {copy} so that "
        "the fetched copy is installed"
    ) in broken.stderr
    assert snapshot(layout) | {"layers": listing(layout.layers)} == before
