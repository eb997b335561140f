"""include / exclude with git's semantics on a real directory tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from preparer.appfilter import plan_removal, remove
from tests.golden import listing

TREE = [
    "cookie.jar", "other-cookie.jar", "nested/nested-cookie.jar", "nested-cookie.jar", "media/mountain.jpg",
    "media/person.png", "media/metadata", "secrets/api_keys.json", "secrets/sub/x", "run.sh", "project.toml",
    "node_modules/keep", "node_modules/drop",
]  # fmt: skip


@pytest.fixture
def app(tmp_path: Path) -> Path:
    for name in TREE:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    os.symlink("/etc", tmp_path / "etc-link")
    return tmp_path


def test_exclude_removes_files_and_whole_directories(app: Path) -> None:
    patterns = [
        "*.sh",
        "secrets/",
        "media/metadata",
        "/other-cookie.jar",
        "etc-link",
        "node_modules",
        "!node_modules/keep",
    ]
    removed = remove(plan_removal(app, None, patterns, app / "project.toml"))
    # As in git, a file below an excluded directory cannot be re-included.
    assert removed == 8
    assert listing(app) == [
        "cookie.jar", "media/", "media/mountain.jpg", "media/person.png", "nested-cookie.jar", "nested/",
        "nested/nested-cookie.jar", "project.toml",
    ]  # fmt: skip
    assert Path("/etc").is_dir()  # the symlink was removed, not followed


def test_include_keeps_only_matches_and_drops_emptied_directories(app: Path) -> None:
    removed = remove(plan_removal(app, ["*.jar", "/media/person.png"], None, app / "project.toml"))
    assert removed == 8
    assert listing(app) == [
        "cookie.jar", "media/", "media/person.png", "nested-cookie.jar", "nested/", "nested/nested-cookie.jar",
        "other-cookie.jar", "project.toml",
    ]  # fmt: skip


def test_negation_re_includes_files(app: Path) -> None:
    remove(plan_removal(app, None, ["*.jar", "!cookie.jar"], None))
    assert [p for p in listing(app) if p.endswith(".jar")] == ["cookie.jar"]


def test_the_descriptor_survives_an_exclude_of_its_directory(tmp_path: Path) -> None:
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "project.toml").write_text("")
    (tmp_path / "config" / "other").write_text("")
    remove(plan_removal(tmp_path, None, ["config/"], tmp_path / "config" / "project.toml"))
    assert listing(tmp_path) == ["config/", "config/project.toml"]


def test_planning_changes_nothing(app: Path) -> None:
    before = listing(app)
    plan_removal(app, ["nothing"], None, None)
    assert listing(app) == before
