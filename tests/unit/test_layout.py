"""The front door keeps up with the house: docs/layout.md names every module of the package under its folder, and
the README names every document."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYOUT = (ROOT / "docs" / "layout.md").read_text()
README = (ROOT / "README.md").read_text()


def _sections() -> dict[str, set[str]]:
    """The modules docs/layout.md names, by the folder whose section (``## preparer/fetch/``) names them."""
    found: dict[str, set[str]] = {}
    folder = None
    for line in LAYOUT.splitlines():
        heading = re.fullmatch(r"## (preparer/\S*)", line)
        if heading:
            folder = heading[1].rstrip("/")
            found[folder] = set()
            continue
        row = re.match(r"\| `([\w.]+\.py)` \|", line)
        if row and folder is not None:
            found[folder].add(row[1])
    return found


def test_the_layout_page_names_every_module_where_it_is() -> None:
    on_disk: dict[str, set[str]] = {}
    for path in (ROOT / "preparer").rglob("*.py"):
        on_disk.setdefault(path.parent.relative_to(ROOT).as_posix(), set()).add(path.name)
    assert _sections() == on_disk


def test_the_readme_names_every_document() -> None:
    documents = {f"docs/{path.name}" for path in (ROOT / "docs").glob("*.md")}
    assert {doc for doc in documents if doc not in README} == set()


def test_the_readme_is_one_screen_before_its_layout() -> None:
    assert README.index("## Layout") < len("\n".join(README.splitlines()[:70]))
