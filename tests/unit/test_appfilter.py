"""include / exclude on a real directory tree: git's patterns, pack's negations (docs/decisions.md, "Include and exclude")."""

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
    # Unlike git, a ! pattern re-includes a file below an excluded directory (pack's behaviour).
    assert removed == 7
    assert listing(app) == [
        "cookie.jar", "media/", "media/mountain.jpg", "media/person.png", "nested-cookie.jar", "nested/",
        "nested/nested-cookie.jar", "node_modules/", "node_modules/keep", "project.toml",
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


def test_negations_below_an_included_directory(tmp_path: Path) -> None:
    """The widely copied template: include a build output, minus its source maps and type declarations."""
    for name in ["dist/src/index.js", "dist/src/index.js.map", "dist/src/lib/a.js", "dist/src/lib/a.d.ts",
                 "dist/src/lib/a.js.map", "dist/src/types/only.d.ts", "dist/other.js", "src/app.ts"]:  # fmt: skip
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    (tmp_path / "dist" / "src" / "empty").mkdir()
    include = ["/dist/src", "!/dist/src/**/*.js.map", "!/dist/src/**/*.d.ts"]
    before = listing(tmp_path)
    plan = plan_removal(tmp_path, include, None, None)
    assert listing(tmp_path) == before  # planning alone removes nothing
    assert remove(plan) == 6
    assert listing(tmp_path) == [
        "dist/", "dist/src/", "dist/src/empty/", "dist/src/index.js", "dist/src/lib/", "dist/src/lib/a.js",
    ]  # fmt: skip


def test_negations_below_an_excluded_directory(tmp_path: Path) -> None:
    for name in ["node_modules/a/keep.txt", "node_modules/a/x.js", "node_modules/b/y.js", "app.js"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    remove(plan_removal(tmp_path, None, ["node_modules/", "!**/keep.txt"], None))
    assert listing(tmp_path) == ["app.js", "node_modules/", "node_modules/a/", "node_modules/a/keep.txt"]


def test_a_negation_before_the_pattern_it_would_undo_changes_nothing(tmp_path: Path) -> None:
    for name in ["logs/keep.log", "logs/x.log"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    remove(plan_removal(tmp_path, None, ["!logs/keep.log", "logs/"], None))
    assert listing(tmp_path) == []  # the last matching pattern wins: logs/ removes everything below it
