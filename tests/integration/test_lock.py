"""The lock file (docs/lock.md), with the real CLI, the suite's HTTP server (whose request log shows what was asked)
and its real registry (pushed to over HTTP, a moved tag a second push).

What is checked is what a user sees: the lock's bytes, what is installed (``order.toml`` and ``<buildpacks>``), the
exit code and the message, and the requests the servers saw.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tomllib
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from preparer.fetch.oci.index import index_path
from tests.buildpacks import make_tgz
from tests.golden import Layout, listing
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.plugins.registry import Registry, buildpack_layer, push_package
from tests.projects import HEAD, group


def order(layout: Layout) -> list[tuple[str, str]]:
    doc = tomllib.loads((layout.layers / "order.toml").read_text())
    return [(e["id"], e["version"]) for e in doc["order"][0]["group"]]


def push(registry: Registry, tmp_path: Path, repository: str, version: str, tag: str = "latest") -> str:
    """``acme/img`` at ``version`` pushed as ``repository:tag``; its digest."""
    bp = ("acme/img", version)
    layer = buildpack_layer(tmp_path / f"src-{uuid.uuid4().hex[:6]}", [(*bp, "")])
    digest, _ = push_package(registry, repository, tag, [(layer, [(*bp, "")])], bp)
    return digest


def lock_an_image(
    preparer: Callable[..., Result], registry: Registry, tmp_path: Path, lock: Path
) -> tuple[str, str, str]:
    """``acme/img`` 1.0.0 pushed as ``<repository>:latest`` and locked by a first run: the repository, its digest
    and the project naming it by tag."""
    repository = f"lock/{uuid.uuid4().hex[:8]}"
    digest = push(registry, tmp_path, repository, "1.0.0")
    project = group(f"docker://{registry.host}/{repository}:latest")
    assert preparer("-lock", str(lock), project=project).code == 0
    return repository, digest, project


def requests_seen(server: FileServer) -> list[str]:
    with server.lock:
        return [path for path, _, _ in server.requests]


@pytest.fixture
def lock(tmp_path: Path) -> Path:
    return tmp_path / "preparer.lock"


def fresh(layout: Layout) -> None:
    """A new build: <buildpacks> as the builder has it, no order.toml."""
    from tests.golden import BUILDER

    shutil.rmtree(layout.buildpacks)
    shutil.copytree(BUILDER / "buildpacks", layout.buildpacks)
    (layout.layers / "order.toml").unlink(missing_ok=True)


def test_a_lock_is_written_after_a_run_and_is_the_same_bytes_for_the_same_inputs(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, http_server: FileServer,
    registry: Registry, lock: Path,
) -> None:  # fmt: skip
    archive = make_tgz(http_server.root / "bp.tgz", "acme/http", "1.2.0")
    repository = f"lock/{uuid.uuid4().hex[:8]}"
    digest = push(registry, tmp_path, repository, "2.0.0")
    project = group(http_server.url("bp.tgz"), f"docker://{registry.host}/{repository}:latest")
    project += '[[io.buildpacks.group]]\nid = "examples/node"\n'
    first = preparer("-lock", str(lock), project=project)
    assert first.code == 0, first.stderr
    written = lock.read_bytes()
    doc = tomllib.loads(written.decode())
    assert doc["lock-version"] == 1
    sha = "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest()
    assert doc["buildpack"] == [
        {"entry": "io.buildpacks.group[0]", "id": "acme/http", "version": "1.2.0", "source": "http",
         "pinned": http_server.url("bp.tgz"), "digest": sha, "written": {"uri": http_server.url("bp.tgz")}},
        {"entry": "io.buildpacks.group[1]", "id": "acme/img", "version": "2.0.0", "source": "image",
         "pinned": f"{registry.host}/{repository}@{digest}", "digest": digest,
         "written": {"uri": f"docker://{registry.host}/{repository}:latest"}},
        {"entry": "io.buildpacks.group[2]", "id": "examples/node", "version": "1.2.0", "source": "builder",
         "written": {"id": "examples/node"}},
    ]  # fmt: skip
    assert written.startswith(b"# The buildpacks each entry of project.toml resolved to")
    lock.unlink()
    fresh(layout)
    assert preparer("-lock", str(lock), project=project).code == 0
    assert lock.read_bytes() == written


def test_a_moved_tag_changes_nothing_and_update_lock_picks_it_up(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, lock: Path
) -> None:
    repository, first, project = lock_an_image(preparer, registry, tmp_path, lock)
    moved = push(registry, tmp_path, repository, "1.1.0")  # the tag now names another image
    assert moved != first
    fresh(layout)
    frozen = preparer("-lock", str(lock), project=project)
    assert frozen.code == 0, frozen.stderr
    assert order(layout) == [("acme/img", "1.0.0")]
    assert "acme_img/1.0.0/" in listing(layout.buildpacks) and "acme_img/1.1.0/" not in listing(
        layout.buildpacks
    )
    fresh(layout)
    updated = preparer("-lock", str(lock), "-update-lock=all", project=project)
    assert updated.code == 0, updated.stderr
    assert order(layout) == [("acme/img", "1.1.0")]
    assert tomllib.loads(lock.read_text())["buildpack"][0]["digest"] == moved
    assert (
        f"io.buildpacks.group[0]: acme/img@1.0.0 ({registry.host}/{repository}@{first}) -> acme/img@1.1.0"
        in (updated.stdout)
    )


def test_changed_bytes_at_a_locked_url_are_exit_1_naming_both_digests(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer, lock: Path
) -> None:
    archive = make_tgz(http_server.root / "bp.tgz", "acme/http", "1.0.0")
    before = "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest()
    project = group(http_server.url("bp.tgz"))
    assert preparer("-lock", str(lock), project=project).code == 0
    shutil.copy(
        make_tgz(http_server.root / "v2" / "bp.tgz", "acme/http", "1.0.0", payload=b"changed"), archive
    )
    after = "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest()
    fresh(layout)
    shutil.rmtree(layout.root.parent / "cache", ignore_errors=True)  # a cold cache: the server is asked
    result = preparer("-lock", str(lock), project=project)
    assert result.code == 1
    assert before.removeprefix("sha256:") in result.stderr and after.removeprefix("sha256:") in result.stderr
    assert not (layout.layers / "order.toml").exists()
    assert "acme_http/" not in listing(layout.buildpacks)


def test_a_warm_frozen_run_makes_no_request_at_all(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, http_server: FileServer, lock: Path
) -> None:
    make_tgz(http_server.root / "bp.tgz", "acme/http", "1.0.0")
    project = group(http_server.url("bp.tgz"))
    assert preparer("-lock", str(lock), project=project).code == 0
    seen = len(requests_seen(http_server))
    fresh(layout)
    result = preparer("-lock", str(lock), project=project)
    assert result.code == 0, result.stderr
    assert requests_seen(http_server)[seen:] == []  # unpinned in project.toml, pinned by the lock
    assert order(layout) == [("acme/http", "1.0.0")]


def test_a_locked_registry_id_installs_with_the_index_down(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, http_server: FileServer,
    registry: Registry, lock: Path,
) -> None:  # fmt: skip
    repository = f"lock/{uuid.uuid4().hex[:8]}"
    digest = push(registry, tmp_path, repository, "3.0.0")
    index_file = http_server.root / "index" / index_path("acme", "img")
    index_file.parent.mkdir(parents=True)
    entry = {"ns": "acme", "name": "img", "version": "3.0.0", "yanked": False,
             "addr": f"{registry.host}/{repository}@{digest}"}  # fmt: skip
    index_file.write_text(json.dumps(entry) + "\n")
    flags = ("-lock", str(lock), "-buildpack-registry-index", http_server.url("index"))
    project = group("urn:cnb:registry:acme/img")
    assert preparer(*flags, project=project).code == 0
    assert tomllib.loads(lock.read_text())["buildpack"][0]["source"] == "registry"
    shutil.rmtree(http_server.root / "index")  # the index is gone (404 for everything)
    http_server.fail("index/" + index_path("acme", "img"), "503", "503", "503", "503", "503", "503")
    fresh(layout)
    seen = len(requests_seen(http_server))
    result = preparer(*flags, project=project)
    assert result.code == 0, result.stderr
    assert order(layout) == [("acme/img", "3.0.0")]
    assert requests_seen(http_server)[seen:] == []


def test_an_edited_project_is_exit_3_naming_the_entry_before_any_request(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer, lock: Path
) -> None:
    make_tgz(http_server.root / "a.tgz", "acme/a", "1.0.0")
    make_tgz(http_server.root / "b.tgz", "acme/b", "1.0.0")
    assert preparer("-lock", str(lock), project=group(http_server.url("a.tgz"))).code == 0
    seen = len(requests_seen(http_server))
    written = (layout.layers / "order.toml").read_bytes()
    cases = {
        group(http_server.url("b.tgz")): (
            f'io.buildpacks.group[0] is written uri = "{http_server.url("b.tgz")}", but it locks '
            f'uri = "{http_server.url("a.tgz")}"'
        ),
        group(http_server.url("a.tgz"), http_server.url("b.tgz")): (
            f'io.buildpacks.group[1] (uri = "{http_server.url("b.tgz")}") is not in it'
        ),
        HEAD + '[[io.buildpacks.group]]\nid = "examples/node"\n': "io.buildpacks.group[0] is written",
    }
    for project, why in cases.items():
        result = preparer("-lock", str(lock), project=project)
        assert result.code == 3, result.stderr
        assert f"ERROR: failed to apply lock file {lock}: {why}" in result.stderr
        assert result.stderr.rstrip().endswith(": rerun with -update-lock")
    assert requests_seen(http_server)[seen:] == []
    assert (layout.layers / "order.toml").read_bytes() == written


def test_a_removed_entry_and_a_builder_version_gone_are_exit_3(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer, lock: Path
) -> None:
    make_tgz(http_server.root / "a.tgz", "acme/a", "1.0.0")
    both = group(http_server.url("a.tgz")) + '[[io.buildpacks.group]]\nid = "examples/node"\n'
    assert preparer("-lock", str(lock), project=both).code == 0
    removed = preparer("-lock", str(lock), project=group(http_server.url("a.tgz")))
    assert removed.code == 3
    assert (
        'it locks io.buildpacks.group[1] (id = "examples/node"), which the project no longer has'
        in removed.stderr
    )
    shutil.rmtree(layout.buildpacks / "examples_node" / "1.2.0")  # the builder moved on
    gone = preparer("-lock", str(lock), project=both)
    assert gone.code == 3
    assert "io.buildpacks.group[1] locks examples/node@1.2.0, which the builder no longer has" in gone.stderr


def test_latest_from_the_builder_stays_the_locked_version(
    preparer: Callable[..., Result], layout: Layout, lock: Path
) -> None:
    project = HEAD + '[[io.buildpacks.group]]\nid = "examples/node"\n'
    assert preparer("-lock", str(lock), project=project).code == 0
    newer = layout.buildpacks / "examples_node" / "9.0.0"
    shutil.copytree(layout.buildpacks / "examples_node" / "1.2.0", newer)
    toml = (newer / "buildpack.toml").read_text().replace('version = "1.2.0"', 'version = "9.0.0"')
    (newer / "buildpack.toml").write_text(toml)
    result = preparer("-lock", str(lock), project=project)
    assert result.code == 0, result.stderr
    assert order(layout) == [("examples/node", "1.2.0")]
    assert preparer(project=project).code == 0  # without the lock: the newest
    assert order(layout) == [("examples/node", "9.0.0")]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("lock-version = 0\n", "lock-version (line 1): unknown version 0 (this preparer reads 1 and 2)"),
        (('lock-version = 1\n[[buildpack]]\nentry = "io.buildpacks.group[0]"\nid = "a/b"\nversion = "1"\n'
          'source = "http"\n'), "buildpack[0] (line 2): a http buildpack needs pinned and digest"),
        ('lock-version = 1\n[[buildpack]]\nentry = "io.buildpacks.group[0]"\nid = "a/b"\nversion = "1"\nsource = "ftp"\n',
         "buildpack[0].source (line 6): unknown source 'ftp'"),
        ("lock-version = 1\nextra = true\n", "extra (line 2): unknown key"),
        ("lock-version = 1\n= 2\n", "line 2"),
    ],
    ids=["version", "missing pin", "source", "unknown key", "not TOML"],
)  # fmt: skip
def test_a_malformed_lock_is_exit_3_naming_the_file_line_and_key(
    preparer: Callable[..., Result], layout: Layout, lock: Path, text: str, problem: str
) -> None:
    lock.write_text(text)
    result = preparer("-lock", str(lock), project=HEAD + '[[io.buildpacks.group]]\nid = "examples/node"\n')
    assert result.code == 3
    assert str(lock) in result.stderr and problem in result.stderr


def test_a_hand_edited_lock_cannot_take_an_image_from_elsewhere(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, lock: Path
) -> None:
    repository = f"lock/{uuid.uuid4().hex[:8]}"
    push(registry, tmp_path, repository, "1.0.0")
    other = f"lock/{uuid.uuid4().hex[:8]}"
    elsewhere = push(registry, tmp_path, other, "6.6.6")
    project = group(f"docker://{registry.host}/{repository}:latest")
    assert preparer("-lock", str(lock), project=project).code == 0
    text = lock.read_text()
    digest = tomllib.loads(text)["buildpack"][0]["digest"]
    lock.write_text(text.replace(f"{repository}@{digest}", f"{other}@{elsewhere}").replace(digest, elsewhere))
    fresh(layout)
    result = preparer("-lock", str(lock), project=project)
    assert result.code == 3
    assert f"locks {registry.host}/{other}@{elsewhere}, which is not the image it names" in result.stderr


def test_the_policy_applies_to_what_is_locked(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, http_server: FileServer, lock: Path
) -> None:
    make_tgz(http_server.root / "bp.tgz", "acme/http", "1.0.0")
    project = group(http_server.url("bp.tgz"))
    assert preparer("-lock", str(lock), project=project).code == 0
    policy = tmp_path / "policy.toml"
    policy.write_text('[sources]\nallow = ["builder", "image"]\n')
    fresh(layout)
    result = preparer("-lock", str(lock), "-policy", str(policy), project=project)
    assert result.code == 3
    assert "http sources are not allowed" in result.stderr


def test_a_dry_run_with_update_lock_says_what_would_change_and_writes_nothing(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer, lock: Path
) -> None:
    make_tgz(http_server.root / "bp.tgz", "acme/http", "1.0.0")
    project = group(http_server.url("bp.tgz"))
    assert preparer("-lock", str(lock), project=project).code == 0
    before = lock.read_bytes()
    shutil.copy(
        make_tgz(http_server.root / "v2" / "bp.tgz", "acme/http", "1.1.0"), http_server.root / "bp.tgz"
    )
    fresh(layout)
    result = preparer("-lock", str(lock), "-update-lock=acme/http", "-dry-run", project=project)
    assert result.code == 0, result.stderr
    assert f"The lock file {lock} would change:" in result.stdout
    assert (
        "io.buildpacks.group[0]: acme/http@1.0.0 (" in result.stdout
        and "-> acme/http@1.1.0 (" in result.stdout
    )
    assert lock.read_bytes() == before
    assert not (layout.layers / "order.toml").exists()
    assert "acme_http/" not in listing(layout.buildpacks)


def test_update_lock_needs_a_lock(preparer: Callable[..., Result], layout: Layout) -> None:
    result = preparer("-update-lock", project=HEAD)
    assert result.code == 3
    assert "ERROR: failed to resolve inputs: -update-lock needs -lock FILE" in result.stderr


def test_signature_rules_apply_to_a_locked_image(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, lock: Path
) -> None:
    from tests.plugins.signing import cosign_sign, make_key

    repository, digest, project = lock_an_image(preparer, registry, tmp_path, lock)
    key = make_key(tmp_path / "keys")
    policy = tmp_path / "policy.toml"
    policy.write_text('[[image.signed-by]]\nkeys = ["keys/cosign.pub"]\n')
    fresh(layout)
    refused = preparer("-lock", str(lock), "-policy", str(policy), project=project)
    assert refused.code == 1
    assert f"failed to fetch {registry.host}/{repository}@{digest}: not signed by a key" in refused.stderr
    cosign_sign(registry, repository, digest, key)
    assert preparer("-lock", str(lock), "-policy", str(policy), project=project).code == 0


def test_a_frozen_dry_run_names_what_each_entry_is_locked_to(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, lock: Path
) -> None:
    repository, digest, project = lock_an_image(preparer, registry, tmp_path, lock)
    result = preparer("-lock", str(lock), "-dry-run", project=project)
    assert result.code == 0, result.stderr
    assert f"would fetch {registry.host}/{repository}@{digest}, as locked" in result.stdout
    assert f"  lock: frozen to {lock}" in result.stdout


def test_a_link_planted_in_the_app_cannot_send_the_lock_elsewhere(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (layout.app / "ci").symlink_to(elsewhere)  # the app's author planted it
    lock = layout.app / "ci" / "preparer.lock"
    result = preparer("-lock", str(lock), project=HEAD + '[[io.buildpacks.group]]\nid = "examples/node"\n')
    assert result.code == 1
    assert "ci" in result.stderr and "link" in result.stderr
    assert list(elsewhere.iterdir()) == []
    assert not (layout.layers / "order.toml").exists()
