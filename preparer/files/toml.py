"""The one reader of every TOML file the preparer reads (the project descriptor, the platform file, the policy, the
lock, containerd's ``hosts.toml``, ``buildpack.toml``, ``order.toml``, ``analyzed.toml``); TOML written
deterministically (:func:`dumps_toml`).

A file is read bounded (its bytes, at most ``limit``; a FIFO, a device or a directory refused at once, never waited
on), decoded (UTF-8, a byte order mark read over), passed over once by the reader itself, then parsed by tomli.
The pass finds where every key, table and array element is written (:class:`Places`, returned with the document)
and refuses, at its place and before tomli builds anything, what would build too much: arrays and inline tables
nested more than :data:`MAX_NESTING` deep, values more than :data:`MAX_DEPTH` tables and arrays deep, an integer
outside TOML's 64-bit range. Every problem is one error: the caller's class (its exit code) with the action, the
file, the cause, and the place: ``(at line L, column C)`` in the cause, and the ``line`` and ``column`` fields
where the class has them (docs/decisions.md, "One TOML reader").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import tomli

from preparer._fs import read_regular
from preparer._lookalike import describe, first_lookalike
from preparer._record import record
from preparer._types import TOMLTable
from preparer.errors import DescriptorError, PreparerError, with_fields

#: The largest TOML file read (a project descriptor is a few KiB; a platform's files are not much more).
MAX_TOML = 1 << 20
#: How deep arrays and inline tables may be in one another: TOML's recommended minimum a parser supports. A bound
#: of its own, so that what is refused does not depend on how deep the stack is where the file is read.
MAX_NESTING = 100
#: How many tables and arrays a value may be in (each part of a dotted key or a header is a table): what every
#: walk over a document (the overlay, a copy, the report's writer) recurses through, far within Python's stack.
MAX_DEPTH = 200
#: TOML's integers: 64-bit, as the spec says and pack's parser holds them (tomli alone takes any number of digits,
#: and Python refuses to convert more than 4300).
MIN_INTEGER, MAX_INTEGER = -(1 << 63), (1 << 63) - 1

#: A key's path in a document: table and key names, and the index of each array element.
KeyPath = tuple[str | int, ...]


class Places:
    """Where each key, table and array element of a document is written, by its path in the parsed document
    (``("io", "buildpacks", "group", 1, "uri")``): the first place that names it (a table a header or a dotted key
    defines implicitly is where it is first named)."""

    def __init__(
        self, text: str, offsets: dict[KeyPath, int], flat: dict[KeyPath, tuple[int, int]] | None = None
    ) -> None:
        self.text = text
        self.offsets = offsets
        #: The arrays of one-line strings and numbers the pass read whole, by path: the start and end of their
        #: elements, each element's place found when one is asked for.
        self.flat = dict(flat or {})
        self.starts: list[int] | None = None

    def __contains__(self, path: object) -> bool:
        return isinstance(path, tuple) and self.offset(path) is not None

    def offset(self, path: KeyPath) -> int | None:
        """Where in the text ``path`` is written, or ``None``."""
        found = self.offsets.get(path)
        if found is None and path and path[:-1] in self.flat:
            start, end = self.flat[path[:-1]]
            for index, element in enumerate(_TOKENS[0].flat_element(self.text, start, end)):
                self.offsets.setdefault((*path[:-1], index), element.start())
            self.flat.pop(path[:-1], None)
            found = self.offsets.get(path)
        return found

    def place(self, offset: int) -> tuple[int, int]:
        """The line and column (both from 1) of the character at ``offset`` of the text."""
        import bisect  # deferred: only a problem asks where it is

        if self.starts is None:  # most documents never need it
            self.starts = [0, *(m.end() for m in re.finditer("\n", self.text))]
        line = bisect.bisect_right(self.starts, offset)
        return line, offset - self.starts[line - 1] + 1

    def position(self, path: KeyPath) -> tuple[int, int] | None:
        """The line and column where ``path`` is written, or ``None``."""
        offset = self.offset(path)
        return None if offset is None else self.place(offset)

    def line(self, path: KeyPath) -> int | None:
        """The line where ``path`` is written, or ``None``."""
        found = self.position(path)
        return None if found is None else found[0]

    def nearest(self, path: KeyPath) -> tuple[int | None, int | None]:
        """Where ``path`` is written, or else the nearest table or array holding it; ``(None, None)`` when none is."""
        for depth in range(len(path), 0, -1):
            found = self.position(path[:depth])
            if found is not None:
                return found
        return None, None

    def before(self, offset: int) -> Iterator[tuple[KeyPath, int]]:
        """Every path written before ``offset``, with its line, in the order they are written."""
        for path, at in sorted(self.offsets.items(), key=lambda item: item[1]):
            if at >= offset:
                return
            yield path, self.place(at)[0]


@record
class Document:
    """A TOML document read: its tables, where each key is written, and the name messages give its file."""

    table: TOMLTable
    places: Places
    name: str


class _Failure:
    """How problems with one file are said: ``error(action, cause)``, the cause naming the file (``named``) and the
    place, the error's ``path``, ``line`` and ``column`` set where its class has them."""

    def __init__(
        self, name: str, what: str, error: type[PreparerError], action: str | None, named: bool
    ) -> None:
        self.name, self.what, self.error, self.action, self.named = name, what, error, action, named

    def __call__(
        self,
        verb: str,
        cause: str,
        place: tuple[int, int] | None = None,
        said: bool = False,
        prefix: bool = True,
    ) -> PreparerError:
        """The error of ``cause``; ``place`` is said at its end unless the cause says it already (``said``), and the
        file's name before it when causes are ``named`` (unless the cause names it, ``prefix`` false)."""
        where = f"{self.name}: " if self.named and prefix else ""
        at = f" (at line {place[0]}, column {place[1]})" if place is not None and not said else ""
        failed = self.error(self.action or f"{verb} {self.what}", f"{where}{cause}{at}")
        line, column = place or (None, None)
        fields = {"path": self.name, "line": line, "column": column}
        return with_fields(failed, **{k: v for k, v in fields.items() if hasattr(failed, k)})


def read_toml(
    path: Path,
    what: str,
    *,
    error: type[PreparerError] = DescriptorError,
    action: str | None = None,
    limit: int = MAX_TOML,
    named: bool = True,
) -> Document:
    """The TOML file ``path``, read bounded and parsed (:func:`read_bytes`, then :func:`parse_toml`).

    :param what: names the file's role in messages, e.g. ``project descriptor``.
    :param error: the class of error to raise (the descriptor's are exit 3; the builder's own files differ).
    :param action: the message's action, when not ``read <what>`` / ``parse <what>``.
    :param named: whether causes start with ``path``; not when ``action`` names the file as the user knows it
        (a staged copy's path means nothing to them).
    :raises DescriptorError: (or ``error``) when the file cannot be read, is not TOML, or builds too much.
    """
    data = read_bytes(path, what, error=error, action=action, limit=limit, named=named)
    return parse_toml(data, str(path), what, error=error, action=action, limit=limit, named=named)


def read_bytes(
    path: Path,
    what: str,
    *,
    error: type[PreparerError] = DescriptorError,
    action: str | None = None,
    limit: int = MAX_TOML,
    named: bool = True,
) -> bytes:
    """The bytes of the file ``path``: a regular file (a link to one is fine) of at most ``limit`` bytes; anything
    else (a FIFO, a device, a directory) is refused at once. The parameters are :func:`read_toml`'s.

    :raises DescriptorError: (or ``error``) when it cannot be read.
    """
    fail = _Failure(str(path), what, error, action, named)
    try:
        return read_regular(path, limit)
    except FileNotFoundError:
        raise fail(
            "read", f"{path} does not exist" if named else f"there is no {path.name}", prefix=False
        ) from None
    except IsADirectoryError:
        raise fail(
            "read", f"{path} is a directory" if named else f"{path.name} is a directory", prefix=False
        ) from None
    except OSError as err:
        raise fail("read", str(err.strerror or err)) from err
    except ValueError as why:
        raise fail("read", str(why)) from why


def parse_toml(
    data: str | bytes,
    name: str,
    what: str,
    *,
    error: type[PreparerError] = DescriptorError,
    action: str | None = None,
    limit: int = MAX_TOML,
    named: bool = True,
) -> Document:
    """The document whose bytes (or text) are ``data``, named ``name`` in messages, as :func:`read_toml` reads a
    file: at most ``limit`` bytes (refused before anything is parsed), UTF-8, TOML, within the bounds.

    :raises DescriptorError: (or ``error``) as :func:`read_toml`.
    """
    fail = _Failure(name, what, error, action, named)
    text = _decode(data, limit, fail)
    try:
        found = _Pass(text)
        found.document()
    except _TooMuch as bound:
        raise fail("parse", bound.cause, Places(text, {}).place(bound.offset)) from None
    places = Places(text, found.offsets, found.flat)
    try:
        table = tomli.loads(text)
    except tomli.TOMLDecodeError as err:
        raise fail("parse", readable(err, text, places), (err.lineno, err.colno), said=True) from err
    return Document(table, places, name)


def _decode(data: str | bytes, limit: int, fail: _Failure) -> str:
    """``data`` as text: UTF-8 of at most ``limit`` bytes (a character is one to four), a byte order mark read over
    (as pack does)."""
    size = (
        len(data)
        if isinstance(data, bytes) or len(data) > limit
        else len(data.encode(errors="surrogatepass"))
    )
    if size > limit:
        raise fail("read", f"larger than {limit} bytes")
    if isinstance(data, str):
        try:
            data.encode()
        except UnicodeEncodeError as err:  # a lone surrogate: no file holds one
            place = data.count("\n", 0, err.start) + 1, err.start - data.rfind("\n", 0, err.start)
            raise fail("parse", f"not UTF-8 text: {err.reason}", place) from err
        return data.removeprefix("\ufeff")
    data = data.removeprefix(b"\xef\xbb\xbf")  # without the utf-8-sig codec: one module less to import
    try:
        return data.decode()
    except UnicodeDecodeError as err:
        line_start = data.rfind(b"\n", 0, err.start) + 1
        place = data.count(b"\n", 0, err.start) + 1, len(data[line_start : err.start].decode()) + 1
        raise fail("parse", f"not UTF-8 text: {err.reason}", place) from err


def dumps_toml(doc: dict[str, Any]) -> str:
    """Serialise ``doc`` with tomli-w; key order is the dict's, so equal inputs give equal bytes."""
    import tomli_w  # deferred: only runs that write TOML need it

    return tomli_w.dumps(doc)


# The reader's pass: where everything is written, and what would build too much.


class _TooMuch(Exception):
    """A document past a bound: why, and the offset of the value at fault."""

    def __init__(self, cause: str, offset: int) -> None:
        super().__init__(cause)
        self.cause, self.offset = cause, offset


class _Tokens:
    """The pass's regular expressions, compiled on the first read (start-up compiles none). The common lines (a
    header of bare names, a bare key given a one-line string or a number) and array elements are each read by one
    match; anything else, token by token."""

    def __init__(self) -> None:
        blank = r"[ \t\r\n]*(?:\#[^\n]*[ \t\r\n]*)*"  # spaces, newlines and comments
        bare_key = r"[A-Za-z0-9_-]+(?:[ \t]*\.[ \t]*[A-Za-z0-9_-]+)*"
        string = r""""(?!"")[^"\\\n]*(?:\\.[^"\\\n]*)*"|'(?!'')[^'\n]*'"""
        scalar = r"""[^ \t\r\n\#\[{"',\]}][^\r\n\#,\]}]*?"""
        self.blank = _ends(re.compile(blank))
        self.line = re.compile(
            rf"""{blank}(?:
                (?P<open>\[\[?)[ \t]*(?P<table>{bare_key})[ \t]*(?P<close>\]\]?)
              | (?P<key>{bare_key})[ \t]*=[ \t]*(?:{string}|(?P<scalar>{scalar}))
            )[ \t]*(?:\#[^\n]*)?(?=\r?\n|\Z)""",
            re.VERBOSE,
        ).match
        self.element = re.compile(
            rf"{blank}(?:(?P<string>{string})|(?P<scalar>{scalar})){blank}(?:,|(?=\]))", re.VERBOSE
        ).match
        self.space = _ends(re.compile(r"[ \t]*"))
        self.bare = re.compile(r"[A-Za-z0-9_-]*").match
        self.basic = re.compile(r'"((?:[^"\\\n]+|\\.)*)"').match
        self.literal = re.compile(r"'([^'\n]*)'").match
        self.scalar = re.compile(r"[^,\]}#\r\n]*").match  # a number, a date, a boolean: up to what ends it
        self.integer = re.compile(r"[+-]?(?:0x[0-9A-Fa-f_]+|0o[0-7_]+|0b[01_]+|[0-9_]+)").fullmatch
        #: Digits (hexadecimal too) as zeros: where 16 follow one another, an array read whole may hold an integer
        #: out of range (``0x`` and 16 digits at least, 19 decimal digits), in a string maybe: then read again.
        self.digits = str.maketrans(dict.fromkeys("123456789abcdefABCDEF_", "0"))
        self.flat_element = re.compile(r'"[^"\n]*"|[^ \t\r\n,"]+').finditer
        self.escape = re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|x([0-9A-Fa-f]{2})|(.))")


_TOKENS: list[_Tokens] = []
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\", "e": "\x1b"}


class _Pass:
    """One pass over a document's text: the offset of every key, table and array element by its path, and the
    bounds. Lenient: on text that is not TOML it goes on (tomli, after it, says what is wrong), so it ends, and
    finds what it can; on TOML it finds every path tomli builds."""

    def __init__(self, text: str) -> None:
        if not _TOKENS:
            _TOKENS.append(_Tokens())
        self.tokens = _TOKENS[0]
        self.text, self.at = text, 0
        self.offsets: dict[KeyPath, int] = {}
        #: The index of the last element of each array of tables (``[[name]]``), by its path (indices resolved).
        self.arrays: dict[KeyPath, int] = {}
        #: The arrays read whole (:meth:`flat_array`), by path: where their elements start and end.
        self.flat: dict[KeyPath, tuple[int, int]] = {}
        self.nesting = 0

    def document(self) -> dict[KeyPath, int]:
        text, line, blank = self.text, self.tokens.line, self.tokens.blank
        table: KeyPath = ()
        while True:
            found = line(text, self.at)
            if found is not None:
                opened, names, closed, key, scalar = found.groups()
                if key is not None:  # a bare key and a one-line value
                    self.at = found.end()
                    self.keyed(table, key, found.start(4), scalar, found.start(5))
                    continue
                if len(opened) == len(closed):  # a header of bare names
                    self.at = found.end()
                    table = self.table(_names(names), found.start(1), opened == "[[")
                    continue
            start = self.at = blank(text, self.at)
            if start >= len(text):
                return self.offsets
            if text[start] == "[":
                table = self.header()
            else:
                self.key_value(table)
            if self.at == start:
                self.at += 1  # a character the pass does not know: tomli names it

    def keyed(self, table: KeyPath, key: str, start: int, scalar: str | None, at: int) -> None:
        """A bare ``key`` (at ``start``) given a one-line string, or the ``scalar`` at ``at``."""
        if "." in key:
            for name in _names(key):
                table = (*table, name)
                self.record(table, start)
        else:
            self.record((*table, key), start)
        if scalar is not None and len(scalar) >= 18:  # shorter, none is out of range
            self.integer(scalar, at)

    def record(self, path: KeyPath, offset: int) -> None:
        if path not in self.offsets:
            if len(path) > MAX_DEPTH:
                cause = f"nested too deeply: more than {MAX_DEPTH} tables and arrays in one another"
                raise _TooMuch(cause, offset)
            self.offsets[path] = offset

    def header(self) -> KeyPath:
        text, start = self.text, self.at
        double = text.startswith("[[", start)
        self.at = start + (2 if double else 1)
        names = self.key()
        close = "]]" if double else "]"
        if text.startswith(close, self.at):
            self.at += len(close)
        return self.table(names, start, double)

    def table(self, names: list[str], start: int, double: bool) -> KeyPath:
        """The path of the table a header opens (``double``: an array of tables' next element)."""
        path: KeyPath = ()
        for number, name in enumerate(names, 1):
            path = (*path, name)
            if double and number == len(names):
                self.arrays[path] = self.arrays.get(path, -1) + 1
                self.record(path, start)
                path = (*path, self.arrays[path])
            elif path in self.arrays:
                path = (*path, self.arrays[path])
            self.record(path, start)  # a table a header defines implicitly is where it is first named
        return path

    def key_value(self, table: KeyPath) -> None:
        text, start = self.text, self.at
        path = table
        for name in self.key():
            path = (*path, name)
            self.record(path, start)  # a dotted key defines its tables where it is
        if text.startswith("=", self.at):
            self.at += 1
            self.value(path)

    def key(self) -> list[str]:
        """The parts of the dotted key at :attr:`at`; :attr:`at` is left after it and the spaces that follow."""
        text, space, tokens = self.text, self.tokens.space, self.tokens
        names = []
        while True:
            self.at = space(text, self.at)
            char = text[self.at : self.at + 1]
            quoted = (
                tokens.basic(text, self.at)
                if char == '"'
                else tokens.literal(text, self.at)
                if char == "'"
                else None
            )
            if quoted is not None:
                names.append(_unescape(quoted[1], tokens) if char == '"' else quoted[1])
                self.at = quoted.end()
            else:
                bare = tokens.bare(text, self.at)
                names.append(bare[0] if bare else "")
                self.at = bare.end() if bare else self.at
            self.at = space(text, self.at)
            if not text.startswith(".", self.at):
                return names
            self.at += 1

    def value(self, path: KeyPath) -> None:
        text = self.text
        self.at = self.tokens.space(text, self.at)
        char = text[self.at : self.at + 1]
        if char == "[":
            self.array(path)
        elif char == "{":
            self.inline_table(path)
        elif char == '"' or char == "'":
            self.string(char)
        else:
            token = self.tokens.scalar(text, self.at)
            if token is not None and token.end() - self.at >= 18:  # shorter, none is out of range
                self.integer(token[0].rstrip(), self.at)
            self.at = token.end() if token is not None else self.at

    def integer(self, token: str, offset: int) -> None:
        if self.tokens.integer(token) is None:
            return  # a float, a date, or not TOML
        digits = token.lstrip("+-").replace("_", "")
        try:
            value = int(digits, 0) if len(digits) <= 80 else None
        except ValueError:  # a leading zero: not TOML, which tomli says
            return
        if value is not None and MIN_INTEGER <= (-value if token.startswith("-") else value) <= MAX_INTEGER:
            return
        shown = token if len(token) <= 40 else f"{token[:20]}… ({len(digits)} digits)"
        raise _TooMuch(
            f"the integer {shown} is out of range: TOML integers are 64-bit, {MIN_INTEGER} to {MAX_INTEGER}",
            offset,
        )

    def string(self, quote: str) -> None:
        text, tokens = self.text, self.tokens
        if text.startswith(quote * 3, self.at):
            self.at = _multiline_end(text, self.at + 3, quote)
            return
        found = (tokens.basic if quote == '"' else tokens.literal)(text, self.at)
        self.at = found.end() if found is not None else self.at + 1

    def nest(self) -> None:
        """An array or an inline table opens at :attr:`at`."""
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            cause = f"nested too deeply: more than {MAX_NESTING} arrays or inline tables in one another"
            raise _TooMuch(cause, self.at)
        self.at += 1

    def flat_array(self, path: KeyPath) -> bool:
        """Whether the array at :attr:`at` is one of one-line strings and numbers, without an escape, a comment or
        a long number (the common long array): then it is read whole, at C speed, and :attr:`at` left after it;
        its elements' places are found when asked for (:meth:`Places.offset`)."""
        text, start = self.text, self.at
        end = text.find("]", start)
        span = text[start + 1 : end]
        if end < 0 or self.nesting >= MAX_NESTING or span.count('"') % 2 or '"""' in span:
            return False  # not closed, too deep (said by nest), or a "]" in a string
        if any(char in span for char in "[{#'\\") or _long_number(span, self.tokens.digits):
            return False
        self.flat[path] = (start + 1, end)
        self.at = end + 1
        return True

    def array(self, path: KeyPath) -> None:
        if self.flat_array(path):
            return
        text, blank, element = self.text, self.tokens.blank, self.tokens.element
        self.nest()
        index = 0
        while True:
            found = element(text, self.at)
            if found is not None:  # a string or a number, and what follows it: one match
                kind = found.lastgroup or "scalar"
                self.record((*path, index), found.start(kind))
                if kind == "scalar" and len(found[kind]) >= 18:
                    self.integer(found[kind], found.start(kind))
                index += 1
                self.at = found.end()
                continue
            start = self.at = blank(text, self.at)
            if start >= len(text):
                break
            if text[start] in "],":
                self.at += 1
                if text[start] == "]":
                    break
                continue
            self.record((*path, index), start)
            self.value((*path, index))
            index += 1
            if self.at == start:
                self.at += 1
        self.nesting -= 1

    def inline_table(self, path: KeyPath) -> None:
        text, blank = self.text, self.tokens.blank
        self.nest()
        while (start := blank(text, self.at)) < len(text):  # TOML 1.1 allows newlines in one
            self.at = start
            char = text[start]
            if char == "}":
                self.at += 1
                break
            if char == ",":
                self.at += 1
                continue
            self.key_value(path)
            if self.at == start:
                self.at += 1
        self.nesting -= 1


def _ends(pattern: re.Pattern[str]) -> Callable[[str, int], int]:
    """``pattern`` (which matches the empty string too) as where its match at an offset ends."""
    match = pattern.match

    def end(text: str, at: int) -> int:
        found = match(text, at)
        return at if found is None else found.end()

    return end


def _long_number(span: str, digits: dict[int, str]) -> bool:
    """Whether ``span`` may hold an integer too long for TOML's range (in a string too, then read again)."""
    return span.translate(digits).find("0" * 16) >= 0


def _multiline_end(text: str, at: int, quote: str) -> int:
    """Just past the multi-line string whose content starts at ``at`` (the text's end when it is not closed: tomli
    says so): its closing quotes, and up to two more that end its content."""
    while (found := text.find(quote * 3, at)) >= 0:
        escapes = found
        while quote == '"' and escapes > at and text[escapes - 1] == "\\":
            escapes -= 1
        if (found - escapes) % 2 == 0:  # not an escaped quote
            end = found + 3
            while end < len(text) and text[end] == quote and end - found < 5:
                end += 1
            return end
        at = found + 1
    return len(text)


def _names(key: str) -> list[str]:
    """The parts of a dotted key of bare names, as written (``a.b``, ``a . b``)."""
    names = key.split(".")
    return [name.strip(" \t") for name in names] if " " in key or "\t" in key else names


def _unescape(written: str, tokens: _Tokens) -> str:
    """A basic string's content with its escapes read (a key's: where a quoted key names a table)."""
    if "\\" not in written:
        return written

    def one(match: re.Match[str]) -> str:
        code = match[1] or match[2] or match[3]
        if code:
            return chr(int(code, 16)) if int(code, 16) <= 0x10FFFF else ""
        return _ESCAPES.get(match[4], match[4])

    return tokens.escape.sub(one, written)


# tomli's messages in words a user can act on.


def readable(err: tomli.TOMLDecodeError, text: str, places: Places) -> str:
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
    twice = _declared_twice(err.msg, line, places.before(line_start)) or _given_twice(
        err.msg, line, before, places.before(line_start)
    )
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
