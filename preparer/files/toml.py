"""Reading TOML bounded and with readable errors; TOML written deterministically.

The commit's transactional writes are :mod:`preparer.writes`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomli

from preparer._fs import read_regular
from preparer._lookalike import describe, first_lookalike
from preparer._types import TOMLTable
from preparer.errors import DescriptorError, PreparerError, with_fields
from preparer.files._positions import key_positions

#: The largest TOML file read (a project descriptor is a few KiB; a platform's files are not much more).
MAX_TOML = 1 << 20


def load_toml_text(
    path: Path,
    what: str,
    *,
    error: type[PreparerError] = DescriptorError,
    action: str | None = None,
    limit: int = MAX_TOML,
    named: bool = True,
) -> tuple[TOMLTable, str]:
    """Read and parse the TOML file ``path``, the one loader of every TOML file the preparer reads: the document,
    and its text (where its keys are written, for messages).

    Syntax errors name the file, line and column. The file must be a regular file of at most ``limit`` bytes.

    :param what: names the file's role in messages, e.g. ``project descriptor``.
    :param error: the class of error to raise (the descriptor's are exit 3; the builder's own files differ).
    :param action: the message's action, when not ``read <what>`` / ``parse <what>``.
    :param named: whether causes start with ``path``; not when ``action`` names the file as the user knows it
        (a staged copy's path means nothing to them).
    :raises DescriptorError: (or ``error``) when the file cannot be read or is not valid TOML.
    """
    where = f"{path}: " if named else ""

    def fail(verb: str, cause: str) -> PreparerError:
        failed = error(action or f"{verb} {what}", cause)
        return with_fields(failed, path=str(path)) if isinstance(failed, DescriptorError) else failed

    try:
        data = read_regular(path, limit)
    except FileNotFoundError:
        raise fail("read", f"{path} does not exist" if named else f"there is no {path.name}") from None
    except IsADirectoryError:
        raise fail("read", f"{path} is a directory" if named else f"{path.name} is a directory") from None
    except OSError as err:
        raise fail("read", f"{where}{err.strerror or err}") from err
    except ValueError as why:
        raise fail("read", f"{where}{why}") from why
    text = decode_toml(data, fail, where)
    return parse_toml(text, fail, where), text


def decode_toml(data: bytes, fail: Callable[[str, str], PreparerError], where: str = "") -> str:
    """``data`` as text: UTF-8, a byte order mark read over (as pack does). ``fail(verb, cause)`` makes the error of
    bytes that are not UTF-8 (where the first such byte is, for a descriptor's)."""
    data = data.removeprefix(b"\xef\xbb\xbf")  # without the utf-8-sig codec: one module less to import
    try:
        return data.decode()
    except UnicodeDecodeError as err:
        line_start = data.rfind(b"\n", 0, err.start) + 1
        column = len(data[line_start : err.start].decode()) + 1
        failed = fail("parse", f"{where}not UTF-8 text ({err.reason})")
        raise _at(failed, data.count(b"\n", 0, err.start) + 1, column) from err


#: How deep arrays and inline tables may be in one another: TOML's recommended minimum a parser supports. A bound
#: of its own, so that what is refused does not depend on how deep the stack is where the file is read.
MAX_NESTING = 100


def parse_toml(text: str, fail: Callable[[str, str], PreparerError], where: str = "") -> TOMLTable:
    """The document ``text``; ``fail(verb, cause)`` makes the error of one that is not TOML, or nests arrays and
    inline tables more than :data:`MAX_NESTING` deep (its line and column set, for a descriptor's)."""
    deep = too_deep(text)
    if deep is not None:
        too = f"{where}nested too deeply: more than {MAX_NESTING} arrays or inline tables in one another"
        raise _at(fail("parse", too), *position(text, deep))
    try:
        return tomli.loads(text)
    except tomli.TOMLDecodeError as err:
        raise _at(fail("parse", f"{where}{readable(err, text)}"), err.lineno, err.colno) from err
    except RecursionError:  # a key of more parts than the recursion limit: where tomli gives up
        raise _at(fail("parse", f"{where}nested too deeply"), *position(text, _recursion_at(text))) from None


def readable(err: tomli.TOMLDecodeError, text: str) -> str:
    """tomli's message for ``err`` in words a user can act on, its place kept at the end.

    A table or key given twice is named as it is written (``[io.buildpacks]``, not tomli's tuple of its parts),
    with the line of its first declaration; a character that only looks like the one TOML wants (U+201C for
    ``"``, U+00A0 for a space) is named (:mod:`preparer._lookalike`).
    """
    place = str(err).removeprefix(err.msg).strip()  # tomli's: (at line L, column C), or (at end of document)
    line_start = text.rfind("\n", 0, err.pos) + 1
    line_end = text.find("\n", err.pos)
    line = text[line_start : len(text) if line_end < 0 else line_end]
    before = text[:line_start]
    twice = _declared_twice(err.msg, line, before) or _given_twice(err.msg, line, before)
    if twice is not None:
        return f"{twice} {place}"
    char = text[err.pos] if err.pos < len(text) else ""
    found = describe(char) if char else None
    if found is None and (lookalike := first_lookalike(line[: err.pos - line_start])) is not None:
        found = lookalike[1]
    return f"{err.msg} {place}" + (f": the character at fault is {found}" if found else "")


#: The table header of a line, as written: ``[io.buildpacks]``, ``[[io.buildpacks.group]]``.
_HEADER = re.compile(r"\s*(\[\[?[^\]\n]*\]?\])")
#: A part of a dotted key, as written: bare, or quoted (its quotes left out: a key's parts compare without them).
_KEY_PART = re.compile(r"[A-Za-z0-9_-]+|(?<=\")[^\"]*(?=\")|(?<=')[^']*(?=')")
#: The key of a line's key/value pair, as written (a quoted part holding ``=`` is rare enough to be read wrong).
_KEY = re.compile(r"\s*([^=#\n]*?)\s*=")


def _declared_twice(message: str, line: str, before: str) -> str | None:
    """tomli's ``Cannot declare ('a', 'b') twice`` as ``the table [a.b] is declared twice, first at line N``."""
    if not message.startswith("Cannot declare ") and not message.startswith("Cannot redefine namespace "):
        return None
    header = _HEADER.match(line)
    written = header[1] if header else _spelled(message)
    first = _first_line(before, _parts(message))
    return f"the table {written} is declared twice" + (f", first at line {first}" if first else "")


def _given_twice(message: str, line: str, before: str) -> str | None:
    """tomli's ``Cannot overwrite a value`` and ``Cannot mutate immutable namespace`` with the key named."""
    if message.startswith("Cannot mutate immutable namespace "):
        header, key = _HEADER.match(line), _KEY.match(line)
        written = header[1] if header else key[1] if key else _spelled(message)
        parts = _parts(message)
        name = ".".join(map(_part, parts))
        first = _first_line(before, parts)
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
        (line for path, (line, _) in key_positions(before).items()
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


def _first_line(before: str, parts: tuple[str, ...]) -> int | None:
    """The line of the text ``before`` (valid TOML: tomli read it) where the key ``parts`` is first written."""
    if not parts:
        return None
    for path, (line, _) in sorted(key_positions(before).items(), key=lambda item: item[1]):
        if tuple(p for p in path if isinstance(p, str)) == parts:
            return line
    return None


def _at(error: PreparerError, line: int, column: int) -> PreparerError:
    """``error`` with its line and column when it is a descriptor's (other files' errors name no place)."""
    return with_fields(error, line=line, column=column) if isinstance(error, DescriptorError) else error


def position(text: str, at: int) -> tuple[int, int]:
    """The line and column (both from 1) of the offset ``at`` of ``text``."""
    return text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)


#: What the nesting scan stops at: a quote, a comment, or a bracket.
_NESTING_TOKEN = re.compile(r"[\"'#\[\]{}]")


def too_deep(text: str, limit: int = MAX_NESTING) -> int | None:
    """The offset of the first ``[`` or ``{`` that opens more than ``limit`` levels deep, outside strings and
    comments, or ``None``. A table header counts as the array or table it looks like, closed on its line."""
    if text.count("[") + text.count("{") <= limit:  # the common case, without a scan
        return None
    depth, at = 0, 0
    while (token := _NESTING_TOKEN.search(text, at)) is not None:
        char, at = token[0], token.end()
        if char == "#":
            end = text.find("\n", at)
            at = len(text) if end < 0 else end
        elif char in "\"'":
            at = _string_end(text, token.start())
        elif char in "[{":
            depth += 1
            if depth > limit:
                return token.start()
        else:
            depth = max(0, depth - 1)
    return None


def _string_end(text: str, start: int) -> int:
    """The offset just past the string that opens at ``start`` (its end, or the line's, when it is not closed)."""
    quote = text[start]
    delimiter = quote * 3 if text.startswith(quote * 3, start) else quote
    at = start + len(delimiter)
    while at < len(text):
        char = text[at]
        if char == "\\" and quote == '"':
            at += 2
        elif text.startswith(delimiter, at):
            end = at + len(delimiter)
            while len(delimiter) == 3 and text.startswith(quote, end) and end - at < 5:
                end += 1  # up to two quotes of the content may come before a multi-line string's end
            return end
        elif char == "\n" and len(delimiter) == 1:
            return at
        else:
            at += 1
    return at


def _recursion_at(text: str) -> int:
    """Where parsing ``text`` gives up for recursion: the shortest prefix that still does ends there."""
    low, high = (
        0,
        len(text),
    )  # the prefix of ``high`` characters recurses too deeply, that of ``low`` does not
    while high - low > 1:
        middle = (low + high) // 2
        try:
            tomli.loads(text[:middle])
        except RecursionError:
            high = middle
        except tomli.TOMLDecodeError:
            low = middle
        else:
            low = middle
    return high - 1


def dumps_toml(doc: dict[str, Any]) -> str:
    """Serialise ``doc`` with tomli-w; key order is the dict's, so equal inputs give equal bytes."""
    import tomli_w  # deferred: only runs that write TOML need it

    return tomli_w.dumps(doc)
