"""<layers>/project-metadata.toml from the descriptor and from git, with real repositories made by the git CLI.

Every git case is checked against ``git describe --tags --always`` run on the same repository, and the file is
read with the field names the lifecycle's exporter reads (``source.type``, ``source.version``,
``source.metadata``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from preparer import Inputs, prepare
from tests.golden import Layout
from tests.plugins.cli import Result
from tests.projects import HEAD

GIT = shutil.which("git") or "/usr/bin/git"
#: A fixed identity and clock, so that commits are made the same way on every machine.
GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_NOSYSTEM": "1", "HOME": "/nonexistent"}  # fmt: skip


def git(repo: Path, *args: str, date: int | None = None) -> str:
    env = {**os.environ, **GIT_ENV}
    if date is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"@{1_700_000_000 + date * 60} +0000"
    proc = subprocess.run([GIT, "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return proc.stdout.strip()


def commit(repo: Path, message: str, date: int, name: str = "file.txt") -> str:
    (repo / name).write_text(message)
    git(repo, "add", name)
    git(repo, "commit", "-q", "-m", message, date=date)
    return git(repo, "rev-parse", "HEAD")


def init(repo: Path) -> Path:
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", "main")
    return repo


def metadata(layout: Layout) -> dict[str, Any]:
    return tomllib.loads((layout.layers / "project-metadata.toml").read_text())


def described(repo: Path) -> str:
    return git(repo, "describe", "--tags", "--always")


def test_version_and_source_url_from_the_descriptor(preparer: Callable[..., Result], layout: Layout) -> None:
    project = HEAD + 'version = "1.0.2"\nsource-url = "https://user:token@git.example.com/org/app?x=1"\n'
    result = preparer(project=project)
    assert result.code == 0 and result.stderr == ""
    path = layout.layers / "project-metadata.toml"
    assert path.read_text() == (
        '[source]\ntype = "project"\n\n[source.version]\ndeclared = "1.0.2"\n\n'
        '[source.metadata]\nurl = "https://git.example.com/org/app"\n'
    )
    assert path.stat().st_mode & 0o777 == 0o644
    assert f"Wrote project metadata {path}" in result.stdout


def test_schema_0_1_reads_the_project_table(preparer: Callable[..., Result], layout: Layout) -> None:
    assert preparer(project='[project]\nversion = "0.9"\nname = "app"\n').code == 0
    assert metadata(layout) == {"source": {"type": "project", "version": {"declared": "0.9"}}}


def test_a_version_that_is_no_string_is_a_warning(preparer: Callable[..., Result], layout: Layout) -> None:
    result = preparer(project=HEAD + "version = 3\n")
    assert result.code == 0
    assert (
        result.stderr == "Warning: _.version is not applied by the preparer: it must be a non-empty string\n"
    )
    assert not (layout.layers / "project-metadata.toml").exists()


def test_git_branch_tags_describe_and_a_redacted_remote(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    repo = init(layout.app)
    commit(repo, "one", 1)
    git(repo, "tag", "-a", "v1.0.0", "-m", "release")
    commit(repo, "two", 2)
    head = commit(repo, "three", 3)
    git(repo, "remote", "add", "upstream", "https://other.example.com/x.git")
    git(repo, "remote", "add", "origin", "https://bot:ghp_secret@github.com/org/app.git")
    result = preparer(project=HEAD)
    assert result.code == 0 and result.stderr == ""
    assert described(repo) == f"v1.0.0-2-g{head[:7]}"
    assert (layout.layers / "project-metadata.toml").read_text() == (
        f'[source]\ntype = "git"\n\n[source.version]\ncommit = "{head}"\ndescribe = "v1.0.0-2-g{head[:7]}"\n\n'
        '[source.metadata]\nrefs = [\n    "main",\n]\nurl = "https://github.com/org/app.git"\n'
    )
    assert "ghp_secret" not in result.stdout + result.stderr


def test_tags_at_head_packed_refs_and_a_detached_head(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    repo = init(layout.app)
    head = commit(repo, "one", 1)
    git(repo, "tag", "v2")  # lightweight
    git(repo, "tag", "-a", "v1", "-m", "annotated")
    git(repo, "pack-refs", "--all")
    git(repo, "checkout", "-q", "--detach")
    assert preparer(project=HEAD).code == 0
    assert described(repo) == "v1"  # git prefers the annotated tag
    assert metadata(layout) == {"source": {
        "type": "git", "version": {"commit": head, "describe": "v1"}, "metadata": {"refs": ["v1", "v2"]},
    }}  # fmt: skip


def test_no_tags_and_no_remote(preparer: Callable[..., Result], layout: Layout) -> None:
    repo = init(layout.app)
    head = commit(repo, "one", 1)
    assert preparer(project=HEAD).code == 0
    assert metadata(layout)["source"]["version"] == {"commit": head, "describe": described(repo)}
    assert metadata(layout)["source"]["metadata"] == {"refs": ["main"]}


def test_merges_choose_the_tag_git_chooses(preparer: Callable[..., Result], layout: Layout) -> None:
    repo = init(layout.app)
    commit(repo, "base", 1)
    git(repo, "tag", "v1")
    git(repo, "checkout", "-q", "-b", "feature")
    for n in range(2, 5):
        commit(repo, f"feature {n}", n, "feature.txt")
    git(repo, "tag", "v2-rc")
    git(repo, "checkout", "-q", "main")
    commit(repo, "main 5", 5)
    git(repo, "merge", "-q", "--no-ff", "-m", "merge", "feature", date=6)
    commit(repo, "main 7", 7)
    git(repo, "gc", "-q")  # objects and refs packed
    assert preparer(project=HEAD).code == 0
    assert metadata(layout)["source"]["version"]["describe"] == described(repo)


def test_a_shallow_clone_and_a_worktree(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    origin = init(tmp_path / "origin")
    for n in range(1, 6):
        commit(origin, f"c{n}", n)
        if n == 2:
            git(origin, "tag", "old")
    git(tmp_path, "clone", "-q", "--depth", "2", f"file://{origin}", str(layout.app))
    assert preparer(project=HEAD).code == 0
    assert metadata(layout)["source"]["version"]["describe"] == described(layout.app)
    assert metadata(layout)["source"]["metadata"]["url"] == f"file://{origin}"

    # A worktree is read when its repository is inside the app too (here moved into it, as .main-git).
    worktree = tmp_path / "worktree"
    git(origin, "worktree", "add", "-q", "-b", "side", str(worktree))
    assert (worktree / ".git").is_file()
    expected = described(worktree)
    shutil.move(origin / ".git", worktree / ".main-git")
    (worktree / ".git").write_text("gitdir: .main-git/worktrees/worktree\n")
    result = prepare(Inputs(app_dir=worktree, layers_dir=tmp_path / "wt-layers", platform_dir=tmp_path / "p",
                            buildpacks_dir=layout.buildpacks, order_path=layout.order))  # fmt: skip
    assert result.project_metadata is not None
    assert result.project_metadata.document["source"]["metadata"]["refs"] == ["side"]
    assert result.project_metadata.document["source"]["version"]["describe"] == expected


def test_no_commit_yet_writes_nothing_and_says_nothing(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    init(layout.app)
    result = preparer(project=HEAD)
    assert (result.code, result.stderr) == (0, "")
    assert not (layout.layers / "project-metadata.toml").exists()
    assert "metadata" not in result.stdout


def test_excluding_git_still_gives_its_metadata(preparer: Callable[..., Result], layout: Layout) -> None:
    repo = init(layout.app)
    head = commit(repo, "one", 1)
    assert preparer(project=HEAD + '[io.buildpacks]\nexclude = [".git/"]\n').code == 0
    assert not (layout.app / ".git").exists()
    assert metadata(layout)["source"]["version"]["commit"] == head


def test_the_descriptor_wins_over_git(preparer: Callable[..., Result], layout: Layout) -> None:
    repo = init(layout.app)
    commit(repo, "one", 1)
    assert preparer(project=HEAD + 'version = "3.1"\n').code == 0
    assert metadata(layout) == {"source": {"type": "project", "version": {"declared": "3.1"}}}


def test_a_platform_file_is_kept_and_the_feature_can_be_off(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    layout.layers.mkdir(parents=True, exist_ok=True)
    (layout.layers / "project-metadata.toml").write_text('[source]\ntype = "kpack"\n')
    result = preparer("-log-level", "debug", project=HEAD + 'version = "1"\n')
    assert result.code == 0
    assert (layout.layers / "project-metadata.toml").read_text() == '[source]\ntype = "kpack"\n'
    assert "Keeping the platform's" in result.stdout + result.stderr

    (layout.layers / "project-metadata.toml").unlink()
    assert preparer("-project-metadata=", project=HEAD + 'version = "1"\n').code == 0
    assert not (layout.layers / "project-metadata.toml").exists()
    elsewhere = tmp_path / "meta" / "pm.toml"
    assert (
        preparer(project=HEAD + 'version = "1"\n', env={"CNB_PROJECT_METADATA_PATH": str(elsewhere)}).code
        == 0
    )
    assert tomllib.loads(elsewhere.read_text())["source"]["version"] == {"declared": "1"}


def test_dry_run_shows_it_and_the_report_records_it(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    report = tmp_path / "report.toml"
    result = preparer("-dry-run", "-prepare-report", str(report), project=HEAD + 'version = "2"\n')
    assert result.code == 0
    assert (
        f"  would write {layout.layers / 'project-metadata.toml'} (source: project, declared 2)"
        in result.stdout
    )
    assert not (layout.layers / "project-metadata.toml").exists()
    assert tomllib.loads(report.read_text())["project-metadata"] == {
        "path": str(layout.layers / "project-metadata.toml"), "action": "would write",
        "source": {"type": "project", "version": {"declared": "2"}},
    }  # fmt: skip


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user needs root")
def test_owned_like_order_toml(preparer: Callable[..., Result], layout: Layout) -> None:
    assert preparer("-uid", "1000", "-gid", "1000", project=HEAD + 'version = "1"\n').code == 0
    info = (layout.layers / "project-metadata.toml").stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (1000, 1000, 0o644)


# Hostile repositories: never a traceback, never a process started from the repository, at worst a warning.


def test_a_symlinked_git_is_not_followed(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    outside = init(tmp_path / "outside")
    commit(outside, "secret", 1)
    layout.app.mkdir(parents=True, exist_ok=True)
    (layout.app / ".git").symlink_to(outside / ".git")
    result = preparer(project=HEAD)
    assert result.code == 0
    assert result.stderr == (
        f"Warning: project metadata not written: the git repository in {layout.app} cannot be read: "
        ".git is a symbolic link (not followed)\n"
    )
    assert not (layout.layers / "project-metadata.toml").exists()


def test_nothing_in_the_repository_config_is_run(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    repo = init(layout.app)
    commit(repo, "one", 1)
    marker = tmp_path / "ran"
    for key in ("core.fsmonitor", "credential.helper", "core.sshCommand", "core.pager"):
        git(repo, "config", key, f"!touch {marker}")
    git(repo, "config", "include.path", "/etc/passwd")
    assert preparer(project=HEAD).code == 0
    assert not marker.exists()
    assert metadata(layout)["source"]["type"] == "git"


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda g: (g / "HEAD").write_text("garbage\n"), "HEAD holds no object id"),
        (
            lambda g: (g / "HEAD").write_text("ref: refs/heads/../../../etc/passwd\n"),
            "HEAD names a malformed",
        ),
        (
            lambda g: (g / "packed-refs").write_bytes(b"# pack-refs\n" + b"x" * (17 << 20)),
            "packed-refs is larger",
        ),
        (lambda g: (g / "HEAD").write_bytes(b"ref: refs/heads/main" + b" " * 5000), "HEAD is larger than"),
        (lambda g: shutil.rmtree(g / "objects"), "while reading objects"),
    ],
    ids=["garbage HEAD", "traversal in HEAD", "huge packed-refs", "huge HEAD", "no objects"],
)
def test_broken_or_hostile_repositories_are_a_warning(
    preparer: Callable[..., Result], layout: Layout, damage: Callable[[Path], object], reason: str
) -> None:
    repo = init(layout.app)
    commit(repo, "one", 1)
    git(repo, "tag", "v1")
    commit(repo, "two", 2)
    damage(repo / ".git")
    result = preparer(project=HEAD)
    assert result.code == 0 and "Traceback" not in result.stderr
    assert result.stderr.startswith(
        f"Warning: project metadata not written: the git repository in {layout.app}"
    )
    assert reason in result.stderr and len(result.stderr.splitlines()) == 1
    assert not (layout.layers / "project-metadata.toml").exists()


# The second trust-boundaries review (docs/security.md): the app's .git is input from the app's author.


def _pack_object(kind: int, size: int, body: bytes) -> bytes:
    """A pack entry: git's type-and-size header, then ``body`` (the rest of the header and the zlib data)."""
    head, size = [(kind << 4) | (size & 15)], size >> 4
    while size:
        head[-1] |= 0x80
        head.append(size & 0x7F)
        size >>= 7
    return bytes(head) + body


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        out.append((value & 0x7F) | (0x80 if value > 0x7F else 0))
        value >>= 7
        if not value:
            return bytes(out)


def delta_bomb(git_dir: Path, target: int) -> str:
    """A pack holding a 10-byte blob and a delta of it that rebuilds ``target`` bytes (copying the blob again and
    again: the delta inflates to a fifth of ``target``, and compresses to almost nothing); the delta's name."""
    import hashlib
    import zlib

    from dulwich.pack import write_pack_index_v2

    base = b"0123456789"
    delta = _varint(len(base)) + _varint(target) + b"\x90\x0a" * (target // len(base))
    blob = _pack_object(3, len(base), zlib.compress(base))
    data = b"PACK" + (2).to_bytes(4, "big") + (2).to_bytes(4, "big") + blob
    start = len(data)
    distance = start - 12  # back to the blob, in git's offset encoding
    encoded = [distance & 0x7F]
    while distance >> 7:
        distance = (distance >> 7) - 1
        encoded.insert(0, 0x80 | (distance & 0x7F))
    entry = _pack_object(6, len(delta), bytes(encoded) + zlib.compress(delta, 9))
    data += entry
    checksum = hashlib.sha1(data).digest()
    name = "pack-" + checksum.hex()
    pack_dir = git_dir / "objects" / "pack"
    (pack_dir / f"{name}.pack").write_bytes(data + checksum)
    blob_sha = hashlib.sha1(b"blob 10\0" + base).digest()
    bomb_sha = bytes.fromhex("ab" * 20)
    entries = sorted([(blob_sha, 12, zlib.crc32(blob)), (bomb_sha, start, zlib.crc32(entry))])
    with open(pack_dir / f"{name}.idx", "wb") as idx:
        write_pack_index_v2(idx, entries, checksum)
    return bomb_sha.hex()


@pytest.mark.parametrize("shape", ["packed blob at a tag", "packed blob at HEAD", "delta bomb at a tag"])
def test_a_packed_object_is_bounded_before_it_is_inflated(layout: Layout, tmp_path: Path, shape: str) -> None:
    """765 KiB of .git made 1.5 GiB of RSS: packed objects were inflated whole, whatever their size."""
    from tests.integration.test_hostile_bounds import BUDGET_MIB, run_measured

    repo = init(layout.app)
    commit(repo, "one", 1)
    git(repo, "tag", "v1")
    if shape == "delta bomb at a tag":
        (repo / ".git" / "refs" / "tags" / "bomb").write_text(delta_bomb(repo / ".git", 256 << 20) + "\n")
    else:
        big = subprocess.run(f"head -c {128 << 20} /dev/zero | {GIT} -C {repo} hash-object -w --stdin", shell=True,
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
        git(repo, "tag", "big", big)
        git(repo, "repack", "-a", "-d", "-q")
        git(repo, "prune-packed")
        if shape == "packed blob at HEAD":
            (repo / ".git" / "refs" / "heads" / "main").write_text(big + "\n")
    assert sum(f.stat().st_size for f in (repo / ".git").rglob("*") if f.is_file()) < 1 << 20
    code, stderr, rss, _ = run_measured(layout, tmp_path, HEAD)
    assert code == 0, stderr
    assert rss < BUDGET_MIB, f"{rss:.0f} MiB"
    if shape == "packed blob at HEAD":
        assert f"cannot be read: an object is larger than {1 << 20} bytes (not read)" in stderr
        assert not (layout.layers / "project-metadata.toml").exists()
    else:  # a tag of something that is no commit is no candidate: the rest is read as before
        assert stderr == ""
        assert metadata(layout)["source"]["version"]["describe"] == "v1"


@pytest.mark.parametrize("how", ["gitdir", "absolute gitdir", "commondir", "refs linked", "objects linked"])
def test_a_repository_outside_the_app_is_never_read(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, how: str
) -> None:
    """A .git file (or a worktree's commondir, or a directory of .git) leading to another repository of the
    machine would publish its commit, branch and remote in project-metadata.toml, an image label."""
    victim = init(tmp_path / "victim")
    secret = commit(victim, "victim's", 1)
    git(victim, "remote", "add", "origin", "https://git.example.com/victim/private")
    layout.app.mkdir(parents=True, exist_ok=True)
    if how in ("gitdir", "absolute gitdir"):
        target = victim / ".git" if how == "absolute gitdir" else os.path.relpath(victim / ".git", layout.app)
        (layout.app / ".git").write_text(f"gitdir: {target}\n")
    else:
        repo = init(layout.app)
        commit(repo, "app", 1)
        shutil.rmtree(repo / ".git" / "objects" if how == "objects linked" else repo / ".git" / "refs")
        if how == "commondir":
            (repo / ".git" / "refs").mkdir()
            (repo / ".git" / "commondir").write_text(f"{victim / '.git'}\n")
        elif how == "refs linked":
            (repo / ".git" / "refs").symlink_to(victim / ".git" / "refs")
        else:
            (repo / ".git" / "objects").symlink_to(victim / ".git" / "objects")
            (repo / ".git" / "refs" / "heads" / "main").write_text(secret + "\n")
    result = preparer(project=HEAD)
    assert result.code == 0, result.stderr
    assert result.stderr.startswith(
        f"Warning: project metadata not written: the git repository in {layout.app} cannot be read: "
    ), result.stderr
    assert "outside the app" in result.stderr or "symbolic link (not followed)" in result.stderr
    assert not (layout.layers / "project-metadata.toml").exists()
    assert secret not in result.stdout + result.stderr
