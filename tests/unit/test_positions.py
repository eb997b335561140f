"""Where keys are written: every table, key and array element of any document tomli reads is found, at a place
where the text names it."""

from __future__ import annotations

from typing import Any

import tomli
import tomli_w
from hypothesis import given
from hypothesis import strategies as st

from preparer.files._positions import key_positions

KEYS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=6)
SCALARS = st.integers() | st.booleans() | st.text(max_size=12) | st.floats(allow_nan=False)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12,
)
DOCS = st.dictionaries(KEYS, VALUES, max_size=5)


def paths(node: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    found: list[tuple[str | int, ...]] = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += paths(value, (*prefix, index))
    return found


@given(DOCS, st.booleans())
def test_every_path_of_any_document_is_found(doc: dict[str, Any], multiline: bool) -> None:
    text = tomli_w.dumps(doc, multiline_strings=multiline)
    parsed = tomli.loads(text)
    found = key_positions(text)
    lines = text.split("\n")  # TOML ends lines at \n only (not at U+0085 as splitlines does)
    for path in paths(parsed):
        assert path in found, (path, text)
        line, column = found[path]
        assert 1 <= line <= len(lines) and 1 <= column <= len(lines[line - 1]) + 1


def test_hand_written_forms() -> None:
    text = (
        "# a comment\n"
        "[_]\n"
        'schema-version = "0.2"   # why\n'
        "[io.buildpacks]\n"
        "include = [\n"
        '  "a", # first\n'
        "  'b',\n"
        "]\n"
        "[[io.buildpacks.group]]\n"
        'id = "a/b"\n'
        's = """x\\"""y"""\n'
        "[[io.buildpacks.group]]\n"
        "script = { api = \"0.10\", inline = '''\n"
        "[not.a.table]\n"
        "''' }\n"
        "[[io.buildpacks.build.env]]\n"
        '"q.k".z = 1\n'
        "[io.buildpacks.pack]\n"
        'group = [{id="x"}, { uri = "y" }]\n'
    )
    tomli.loads(text)
    found = key_positions(text)
    assert found[("io", "buildpacks", "include", 1)] == (7, 3)
    assert found[("io", "buildpacks", "group", 0, "s")] == (11, 1)
    assert found[("io", "buildpacks", "group", 1)] == (12, 1)
    assert found[("io", "buildpacks", "group", 1, "script", "inline")] == (13, 26)
    assert ("not", "a", "table") not in found and ("not",) not in found
    assert found[("io", "buildpacks", "build", "env", 0, "q.k", "z")] == (17, 1)
    assert found[("io", "buildpacks", "pack", "group", 1, "uri")] == (19, 22)
