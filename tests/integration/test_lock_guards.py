"""A lock never silently stops applying, and every failure of a frozen run says the lock decided it (docs/lock.md).
Real CLI, the suite's real registry and HTTP server (whose request log shows that nothing was asked).
"""

from __future__ import annotations

import hashlib
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from tests.buildpacks import make_tgz
from tests.golden import Layout, listing
from tests.integration.test_lock import fresh, order, push, requests_seen
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.plugins.registry import Registry
from tests.projects import HEAD, group

NODE = HEAD + '[[io.buildpacks.group]]\nid = "examples/node"\n'


def test_a_lock_at_the_default_place_that_the_run_does_not_use_is_a_warning_every_run(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    lock = layout.app / "preparer.lock"
    assert preparer("-lock", str(lock), project=NODE).code == 0
    warning = (
        f"Warning: {lock} is not used: this run is not frozen to it, since -lock is not given; to install what it "
        f"locks, add -lock {lock} (CNB_PREPARER_LOCK)"
    )
    for _ in range(2):
        result = preparer(project=NODE)
        assert result.code == 0, result.stderr
        assert warning in result.warnings
    assert warning not in preparer("-lock", str(lock), project=NODE).warnings


def test_include_never_removes_the_lock_so_the_next_run_is_frozen_too(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    (layout.app / "src").mkdir()
    (layout.app / "src" / "main.js").write_text("x")
    (layout.app / "README").write_text("x")
    lock = layout.app / "preparer.lock"
    project = NODE.replace(
        "[[io.buildpacks.group]]", '[io.buildpacks]\ninclude = ["src"]\n\n[[io.buildpacks.group]]'
    )
    written = preparer("-lock", str(lock), project=project)
    assert written.code == 0, written.stderr
    assert lock.exists() and not (layout.app / "README").exists()  # written, and kept by the removal
    for _ in range(2):
        result = preparer("-lock", str(lock), project=project)
        assert result.code == 0, result.stderr
        assert f"Frozen to the lock file {lock} (1 entries)" in result.stdout
        assert lock.exists()


def test_exclude_never_removes_the_lock_it_reads(preparer: Callable[..., Result], layout: Layout) -> None:
    lock = layout.app / "ci" / "preparer.lock"
    lock.parent.mkdir()
    (layout.app / "server.js").write_text("x")
    project = NODE.replace(
        "[[io.buildpacks.group]]", '[io.buildpacks]\nexclude = ["ci/", "*.lock"]\n\n[[io.buildpacks.group]]'
    )
    assert preparer("-lock", str(lock), project=project).code == 0
    (layout.app / "ci" / "notes.txt").write_text("x")
    result = preparer("-lock", str(lock), project=project)
    assert result.code == 0, result.stderr
    assert lock.exists() and not (layout.app / "ci" / "notes.txt").exists()


def test_a_required_lock_that_is_missing_is_exit_3_naming_it_and_nothing_is_resolved(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer
) -> None:
    make_tgz(http_server.root / "a.tgz", "acme/a", "1.0.0")
    project = group(http_server.url("a.tgz"))
    seen = len(requests_seen(http_server))
    default = layout.app / "preparer.lock"
    for flags, env, path in (
        (("-require-lock",), {}, default),
        ((), {"CNB_PREPARER_REQUIRE_LOCK": "true"}, default),
        (("-require-lock", "-lock", str(layout.root / "ci.lock")), {}, layout.root / "ci.lock"),
    ):
        result = preparer(*flags, project=project, env=env)
        assert result.code == 3, result.stderr
        assert (
            f"ERROR: failed to apply lock file: {path} does not exist, and the platform requires a lock "
            "(-require-lock, CNB_PREPARER_REQUIRE_LOCK): nothing is resolved without one." in result.stderr
        )
        assert not path.exists()
    assert requests_seen(http_server)[seen:] == []
    assert not (layout.layers / "order.toml").exists()
    update = preparer("-require-lock", "-lock", str(default), "-update-lock", project=project)
    assert update.code == 3
    assert "-update-lock resolves entries unfrozen, and the platform requires a frozen run" in update.stderr


def test_a_required_lock_at_the_default_place_is_read_without_lock(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer
) -> None:
    make_tgz(http_server.root / "a.tgz", "acme/a", "1.0.0")
    project = group(http_server.url("a.tgz"))
    lock = layout.app / "preparer.lock"
    assert preparer("-lock", str(lock), project=project).code == 0
    make_tgz(http_server.root / "v2" / "a.tgz", "acme/a", "1.1.0")
    shutil.copy(http_server.root / "v2" / "a.tgz", http_server.root / "a.tgz")  # moved: frozen, 1.0.0 stays
    fresh(layout)
    result = preparer("-require-lock", project=project)
    assert result.code == 0, result.stderr
    assert f"Frozen to the lock file {lock}" in result.stdout
    assert order(layout) == [("acme/a", "1.0.0")]


@pytest.mark.parametrize("flags", [(), ("-update-lock",), ("-update-lock=all",)])
def test_a_lock_from_a_newer_preparer_is_exit_3_advising_to_upgrade_and_never_rewritten(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, flags: tuple[str, ...]
) -> None:
    lock = tmp_path / "preparer.lock"
    text = b'lock-version = 3\n\n[[buildpack]]\nentry = "io.buildpacks.group[0]"\nsomething-new = true\n'
    lock.write_bytes(text)
    result = preparer("-lock", str(lock), *flags, project=NODE)
    assert result.code == 3
    assert (
        f"ERROR: failed to read lock file {lock}: lock-version (line 1): 3 is newer than this preparer reads (2): "
        "the lock was written by a newer preparer; upgrade the preparer" in result.stderr
    )
    assert lock.read_bytes() == text
    assert not (layout.layers / "order.toml").exists()


def test_changed_bytes_at_a_locked_url_name_the_lock_the_entry_both_digests_and_the_ways_out(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, http_server: FileServer
) -> None:
    lock = tmp_path / "preparer.lock"
    archive = make_tgz(http_server.root / "bp.tgz", "acme/http", "1.0.0")
    before = "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest()
    project = group(http_server.url("bp.tgz"))
    assert preparer("-lock", str(lock), project=project).code == 0
    changed = make_tgz(http_server.root / "v2" / "bp.tgz", "acme/http", "1.0.0", payload=b"changed")
    shutil.copy(changed, archive)  # the same name, other bytes
    after = "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest()
    fresh(layout)
    shutil.rmtree(tmp_path / "cache")  # another machine: the server is asked
    result = preparer("-lock", str(lock), project=project)
    assert result.code == 1
    assert (
        f"ERROR: failed to fetch io.buildpacks.group[0] ({http_server.url('bp.tgz')}): the download is {after}, "
        f'but the lock file {lock} locks {before} for io.buildpacks.group[0] (uri = "{http_server.url("bp.tgz")}"): '
        "if the source was changed on purpose, rerun with -update-lock=io.buildpacks.group[0]; if not, examine the "
        "source before trusting it" in result.stderr
    )
    assert "the uri pins" not in result.stderr
    assert "acme_http/" not in listing(layout.buildpacks)


def test_a_locked_image_the_registry_no_longer_has_names_the_lock_the_entry_the_tag_and_the_fix(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry
) -> None:
    lock = tmp_path / "preparer.lock"
    repository = f"lock/{uuid.uuid4().hex[:8]}"
    digest = push(registry, tmp_path, repository, "1.0.0")
    tag = f"docker://{registry.host}/{repository}:latest"
    assert preparer("-lock", str(lock), project=group(tag)).code == 0
    push(registry, tmp_path, repository, "1.1.0")  # the tag moves on, and the old image is deleted
    deleted = requests.delete(f"http://{registry.host}/v2/{repository}/manifests/{digest}", timeout=10)
    assert deleted.status_code == 202, deleted.text
    fresh(layout)
    shutil.rmtree(tmp_path / "cache")  # another machine
    result = preparer("-lock", str(lock), project=group(tag))
    assert result.code == 1
    assert (
        f'ERROR: failed to fetch io.buildpacks.group[0] (uri = "{tag}"): the lock file {lock} locks it to '
        f"{registry.host}/{repository}@{digest}, which the registry no longer has (" in result.stderr
    )
    assert result.stderr.rstrip().endswith(
        f'to lock what uri = "{tag}" names now, rerun with -update-lock=io.buildpacks.group[0]'
    )
    fixed = preparer("-lock", str(lock), "-update-lock=io.buildpacks.group[0]", project=group(tag))
    assert fixed.code == 0, fixed.stderr
    assert order(layout) == [("acme/img", "1.1.0")]


def test_git_conflict_markers_in_the_lock_are_named_with_the_fix(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    lock = tmp_path / "preparer.lock"
    assert preparer("-lock", str(lock), project=NODE).code == 0
    text = lock.read_text()
    lock.write_text(
        text.replace(
            'version = "1.2.0"', '<<<<<<< HEAD\nversion = "1.2.0"\n=======\nversion = "1.3.0"\n>>>>>>> theirs'
        )
    )
    line = lock.read_text().splitlines().index("<<<<<<< HEAD") + 1
    result = preparer("-lock", str(lock), project=NODE)
    assert result.code == 3
    assert (
        f"ERROR: failed to read lock file {lock}: line {line}: a git merge conflict marker (<<<<<<<): the lock "
        f"was merged with a conflict. Take either side (git checkout --theirs {lock}), then rerun with "
        "-update-lock: it resolves again only the entries the project changed" in result.stderr
    )


ENTRY = 'lock-version = 1\n\n[[buildpack]]\nentry = "io.buildpacks.group[0]"\n'


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('id = "../../etc"\nversion = "1.0.0"\nsource = "http"\n', "buildpack[0].id (line 5): '../../etc' is not a buildpack id"),
        ('id = "acme/a"\nversion = "1/../../../x"\nsource = "http"\n',
         "buildpack[0].version (line 6): version '1/../../../x' cannot name a buildpack directory"),
        ('id = "acme/a"\nversion = "1.0.0"\nsource = "http"\npinned = "URL"\ndigest = "sha256:' + "z" * 64 + '"\n',
         "buildpack[0].digest (line 9): must be sha256:<64 hex digits>"),
        (('id = "acme/a"\nversion = "1.0.0"\nsource = "http"\npinned = "URL"\ndigest = "DIGEST"\n\n[[buildpack]]\n'
         'entry = "io.buildpacks.group[0]"\nid = "acme/a"\nversion = "1.0.0"\nsource = "http"\npinned = "URL"\n'
         'digest = "DIGEST"\n'),
         "buildpack[1].entry (line 12): io.buildpacks.group[0] is locked twice (first at line 4)"),
    ],
    ids=["id", "version", "digest", "twice"],
)  # fmt: skip
def test_a_hand_edited_lock_with_values_that_cannot_be_is_exit_3_naming_file_line_and_key_before_any_request(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, http_server: FileServer, table: str,
    problem: str,
) -> None:  # fmt: skip
    archive = make_tgz(http_server.root / "a.tgz", "acme/a", "1.0.0")
    digest = "sha256:" + hashlib.sha256(archive.read_bytes()).hexdigest()
    lock = tmp_path / "preparer.lock"
    lock.write_text(ENTRY + table.replace("URL", http_server.url("a.tgz")).replace("DIGEST", digest))
    seen = len(requests_seen(http_server))
    result = preparer("-lock", str(lock), project=group(http_server.url("a.tgz")))
    assert result.code == 3, result.stderr
    assert f"ERROR: failed to read lock file {lock}: {problem}" in result.stderr
    assert requests_seen(http_server)[seen:] == []
    assert not (layout.layers / "order.toml").exists()
