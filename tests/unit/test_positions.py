"""Where keys are written: every table, key and array element of any document the reader reads is found, at a
place where the text names it, from the reader's own pass (:func:`preparer.files.toml.parse_toml`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import given
from hypothesis import strategies as st

from preparer.errors import DescriptorError
from preparer.files._toml_pass import COMMON_LINES_FROM, Pass, TooMuch
from preparer.files.toml import MAX_DEPTH, MAX_INTEGER, MAX_NESTING, MIN_INTEGER, Document, parse_toml

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


def integers(node: Any) -> list[int]:
    if isinstance(node, dict):
        return [n for value in node.values() for n in integers(value)]
    if isinstance(node, list):
        return [n for value in node for n in integers(value)]
    return [node] if isinstance(node, int) and not isinstance(node, bool) else []


def read(text: str) -> Document:
    return parse_toml(text, "doc.toml", "document")


@given(DOCS, st.booleans())
def test_every_path_of_any_document_is_found(doc: dict[str, Any], multiline: bool) -> None:
    text = tomli_w.dumps(doc, multiline_strings=multiline)
    if any(
        not MIN_INTEGER <= n <= MAX_INTEGER for n in integers(doc)
    ):  # TOML's are 64-bit: refused, at its place
        with pytest.raises(
            DescriptorError, match=r"the integer .* is out of range: TOML integers are 64-bit"
        ) as info:
            read(text)
        assert info.value.line is not None and info.value.column is not None
        return
    document = read(text)
    assert document.table == doc
    lines = text.split("\n")  # TOML ends lines at \n only (not at U+0085 as splitlines does)
    for path in paths(document.table):
        assert path in document.places, (path, text)
        position = document.places.position(path)
        assert position is not None
        line, column = position
        assert 1 <= line <= len(lines) and 1 <= column <= len(lines[line - 1]) + 1


#: Text of TOML's own characters (brackets, quotes, escapes, comments, dots), as often as not almost a document.
TOMLISH = st.text(st.sampled_from(list("[]{}\"'#=.,\n\t \\ab_-019x+:")), max_size=200)


@given(st.one_of(st.text(max_size=300), TOMLISH, DOCS.map(tomli_w.dumps).map(lambda t: t[: len(t) // 2])))
def test_any_text_is_a_document_or_one_located_problem(text: str) -> None:
    """The pass is lenient: on any text it ends, and the reader gives a document or its one error, never another."""
    try:
        read(text)
    except DescriptorError as problem:
        assert problem.exit_code == 3 and problem.path == "doc.toml"


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
        'exclude = ["c", "d",\n  "e"]\n'
    )
    found = read(text).places
    assert found.position(("io", "buildpacks", "include", 1)) == (7, 3)
    assert found.position(("io", "buildpacks", "group", 0, "s")) == (11, 1)
    assert found.position(("io", "buildpacks", "group", 1)) == (12, 1)
    assert found.position(("io", "buildpacks", "group", 1, "script", "inline")) == (13, 26)
    assert ("not", "a", "table") not in found and ("not",) not in found
    assert found.position(("io", "buildpacks", "build", "env", 0, "q.k", "z")) == (17, 1)
    assert found.position(("io", "buildpacks", "pack", "group", 1, "uri")) == (19, 22)
    assert found.position(("io", "buildpacks", "pack", "exclude", 2)) == (21, 3)  # an array read whole
    assert found.nearest(("io", "buildpacks", "pack", "exclude", 7)) == (20, 1)


def passed(text: str, common_lines: bool) -> object:
    """What the reader's pass finds in ``text``, its common lines each read by one match or token by token."""
    found = Pass(text, MAX_NESTING, MAX_DEPTH, (MIN_INTEGER, MAX_INTEGER))
    found.common_lines = common_lines
    try:
        offsets = found.document()
    except TooMuch as refused:
        return ("refused", refused.cause, refused.offset)
    return offsets, found.arrays, found.flat


@given(st.one_of(DOCS.map(tomli_w.dumps), TOMLISH, st.text(max_size=300)))
def test_common_lines_are_found_alike_by_one_match_and_token_by_token(text: str) -> None:
    """A document shorter than COMMON_LINES_FROM is read token by token: what is found is what the one-match
    reading of its common lines finds, on any text."""
    assert passed(text, common_lines=True) == passed(text, common_lines=False)


def test_the_files_the_project_keeps_are_found_alike_both_ways() -> None:
    root = Path(__file__).parents[2]
    files = [p for d in ("fixtures", "tests/data") for p in (root / d).rglob("*.toml")]
    # Some are not UTF-8, on purpose: the pass reads what they decode to.
    texts = [p.read_bytes().decode("utf-8", errors="replace") for p in files]
    assert len(texts) > 100
    for text in texts:
        assert passed(text, common_lines=True) == passed(text, common_lines=False)


def test_a_long_document_reads_its_common_lines_by_one_match() -> None:
    short = '[[io.buildpacks.build.env]]\nname = "A"\nvalue = "b"\n'
    assert not Pass(short, MAX_NESTING, MAX_DEPTH, (MIN_INTEGER, MAX_INTEGER)).common_lines
    long = short * (COMMON_LINES_FROM // len(short) + 1)
    assert Pass(long, MAX_NESTING, MAX_DEPTH, (MIN_INTEGER, MAX_INTEGER)).common_lines
