"""tomli's messages in words a user can act on, for the TOML reader (:mod:`preparer.files.toml`): a table or key
given twice named as it is written, with the line of its first declaration; a character that only looks like the
one TOML wants named.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from preparer._lookalike import describe, first_lookalike
from preparer._types import KeyPath


def readable(
    message: str, pos: int, place: str, text: str, written: Callable[[int], Iterator[tuple[KeyPath, int]]]
) -> str:
    """tomli's ``message`` of an error at ``pos`` of ``text`` in words a user can act on, its ``place`` (tomli's
    ``(at line L, column C)``) kept at the end; ``written(offset)``: the paths written before ``offset``, with their
    lines, in order.

    A table or key given twice is named as it is written (``[io.buildpacks]``, not tomli's tuple of its parts),
    with the line of its first declaration; a character that only looks like the one TOML wants (U+201C for
    ``"``, U+00A0 for a space) is named (:mod:`preparer._lookalike`).
    """
    line_start = text.rfind("\n", 0, pos) + 1
    line_end = text.find("\n", pos)
    line = text[line_start : len(text) if line_end < 0 else line_end]
    before = text[:line_start]
    twice = _declared_twice(message, line, written(line_start)) or _given_twice(
        message, line, before, written(line_start)
    )
    if twice is not None:
        return f"{twice} {place}"
    char = text[pos] if pos < len(text) else ""
    found = describe(char) if char else None
    if found is None and (lookalike := first_lookalike(line[: pos - line_start])) is not None:
        found = lookalike[1]
    return f"{message} {place}" + (f": the character at fault is {found}" if found else "")


#: The table header of a line, as written: ``[io.buildpacks]``, ``[[io.buildpacks.group]]``.
_HEADER = re.compile(r"\s*(\[\[?[^\]\n]*\]?\])")
#: A part of a dotted key, as written: bare, or quoted (its quotes left out: a key's parts compare without them).
_KEY_PART = re.compile(r"[A-Za-z0-9_-]+|(?<=\")[^\"]*(?=\")|(?<=')[^']*(?=')")
#: The key of a line's key/value pair, as written (a quoted part holding ``=`` is rare enough to be read wrong).
_KEY = re.compile(r"\s*([^=#\n]*?)\s*=")


def _declared_twice(message: str, line: str, keys: Iterator[tuple[KeyPath, int]]) -> str | None:
    """tomli's ``Cannot declare ('a', 'b') twice`` as ``the table [a.b] is declared twice, first at line N``."""
    if not message.startswith("Cannot declare ") and not message.startswith("Cannot redefine namespace "):
        return None
    header = _HEADER.match(line)
    written = header[1] if header else _spelled(message)
    first = _first_line(keys, _parts(message))
    return f"the table {written} is declared twice" + (f", first at line {first}" if first else "")


def _given_twice(message: str, line: str, before: str, keys: Iterator[tuple[KeyPath, int]]) -> str | None:
    """tomli's ``Cannot overwrite a value`` and ``Cannot mutate immutable namespace`` with the key named."""
    if message.startswith("Cannot mutate immutable namespace "):
        header, key = _HEADER.match(line), _KEY.match(line)
        written = header[1] if header else key[1] if key else _spelled(message)
        parts = _parts(message)
        name = ".".join(map(_part, parts))
        first = _first_line(keys, parts)
        at = f" at line {first}" if first else ""
        if first is not None and _value_at(before, first).startswith("["):
            return (
                f"{written}: {name} is an array, given whole{at}; add the entry to it there, or write every entry "
                f"as [[{name}]]"
            )
        return f"{written}: {name} is an inline table, given whole{at}; write the key in it there"
    if message != "Cannot overwrite a value":
        return None
    header = _HEADER.match(line)
    if header is not None:
        return f"the table {header[1]} is declared where a key already holds a value"
    key = _KEY.match(line)
    if key is None or not key[1]:
        return None
    lines = before.splitlines()
    table, opened = next(
        ((m[1], len(lines) - n) for n, m in enumerate(map(_HEADER.match, reversed(lines))) if m), (None, 0)
    )
    parts = tuple(_KEY_PART.findall(key[1]))
    first = min(
        (line for path, line in keys
         if line > opened and tuple(p for p in path if isinstance(p, str))[-len(parts):] == parts),
        default=None,
    )  # fmt: skip
    return (
        f"the key {key[1]} is given twice"
        + (f" in {table}" if table else "")
        + (f", first at line {first}" if first else "")
    )


def _value_at(before: str, line: int) -> str:
    """The value of the key/value pair on ``line`` of ``before`` (1-based), as written, from its first character."""
    lines = before.splitlines()
    text = lines[line - 1] if 0 < line <= len(lines) else ""
    key = _KEY.match(text)
    return text[key.end() :].lstrip() if key else ""


#: A string of a tuple's repr: ``'io'``, or ``"it's"``.
_REPR_STRING = re.compile(r"'((?:[^'\\]|\\.)*)'|\"((?:[^\"\\]|\\.)*)\"")


def _parts(message: str) -> tuple[str, ...]:
    """The key tomli's ``message`` names as a tuple of strings (``('io', 'buildpacks')``)."""
    return tuple(a or b for a, b in _REPR_STRING.findall(message, message.find("(") + 1))


def _part(name: str) -> str:
    """A key part as TOML writes it: bare when it can be, else quoted."""
    if name and re.fullmatch(r"[A-Za-z0-9_-]+", name):
        return name
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _spelled(message: str) -> str:
    return "[" + ".".join(map(_part, _parts(message))) + "]"


def _first_line(keys: Iterator[tuple[KeyPath, int]], parts: tuple[str, ...]) -> int | None:
    """The line where the key ``parts`` is first written, of the paths ``keys`` (with their lines, in order)."""
    if not parts:
        return None
    for path, line in keys:
        if tuple(p for p in path if isinstance(p, str)) == parts:
            return line
    return None
