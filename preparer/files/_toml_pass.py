"""The TOML reader's one pass over a document's text (:mod:`preparer.files.toml` is its only user): where every
key, table and array element is written, and what would build too much, refused at its place before tomli builds
anything. The reader sets the bounds.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import cached_property

from preparer._types import KeyPath


class TooMuch(Exception):
    """A document past a bound: why, and the offset of the value at fault."""

    def __init__(self, cause: str, offset: int) -> None:
        super().__init__(cause)
        self.cause, self.offset = cause, offset


_BLANK = r"[ \t\r\n]*(?:\#[^\n]*+[ \t\r\n]*)*"  # spaces, newlines and comments, each to its line's end
_BARE_KEY = r"[A-Za-z0-9_-]+(?:[ \t]*\.[ \t]*[A-Za-z0-9_-]+)*"
_STRING = r""""(?!"")[^"\\\n]*(?:\\.[^"\\\n]*)*"|'(?!'')[^'\n]*'"""
_SCALAR = r"""[^ \t\r\n\#\[{"',\]}][^\r\n\#,\]}]*?"""


class _Tokens:
    """The pass's regular expressions, each compiled when the pass first needs it (start-up compiles none; a
    document of common lines needs two of them, and Python's compiler takes about as long as the small document's
    whole read for the rest). The common lines (a header of bare names, a bare key given a one-line string or a
    number) and array elements are each read by one match; anything else, token by token."""

    @cached_property
    def blank(self) -> Callable[[str, int], int]:
        return _ends(re.compile(_BLANK))

    @cached_property
    def line(self) -> Callable[[str, int], re.Match[str] | None]:
        return re.compile(
            rf"""{_BLANK}(?:
                (?P<open>\[\[?)[ \t]*(?P<table>{_BARE_KEY})[ \t]*(?P<close>\]\]?)
              | (?P<key>{_BARE_KEY})[ \t]*=[ \t]*(?:{_STRING}|(?P<scalar>{_SCALAR}))
            )[ \t]*(?:\#[^\n]*)?(?=\r?\n|\Z)""",
            re.VERBOSE,
        ).match

    @cached_property
    def element(self) -> Callable[[str, int], re.Match[str] | None]:
        return re.compile(
            rf"{_BLANK}(?:(?P<string>{_STRING})|(?P<scalar>{_SCALAR})){_BLANK}(?:,|(?=\]))", re.VERBOSE
        ).match

    @cached_property
    def space(self) -> Callable[[str, int], int]:
        return _ends(re.compile(r"[ \t]*"))

    @cached_property
    def bare(self) -> Callable[[str, int], re.Match[str] | None]:
        return re.compile(r"[A-Za-z0-9_-]*").match

    @cached_property
    def basic(self) -> Callable[[str, int], re.Match[str] | None]:
        return re.compile(r'"((?:[^"\\\n]+|\\.)*)"').match

    @cached_property
    def literal(self) -> Callable[[str, int], re.Match[str] | None]:
        return re.compile(r"'([^'\n]*)'").match

    @cached_property
    def scalar(self) -> Callable[[str, int], re.Match[str] | None]:
        return re.compile(r"[^,\]}#\r\n]*").match  # a number, a date, a boolean: up to what ends it

    @cached_property
    def integer(self) -> Callable[[str], re.Match[str] | None]:
        return re.compile(r"[+-]?(?:0x[0-9A-Fa-f_]+|0o[0-7_]+|0b[01_]+|[0-9_]+)").fullmatch

    #: Digits (hexadecimal too) as zeros: where 16 follow one another, an array read whole may hold an integer
    #: out of range (``0x`` and 16 digits at least, 19 decimal digits), in a string maybe: then read again.
    digits = str.maketrans(dict.fromkeys("123456789abcdefABCDEF_", "0"))

    @cached_property
    def flat_element(self) -> Callable[[str, int, int], Iterator[re.Match[str]]]:
        return re.compile(r'"[^"\n]*"|[^ \t\r\n,"]+').finditer

    @cached_property
    def escape(self) -> re.Pattern[str]:
        return re.compile(r"\\(?:u([0-9A-Fa-f]{4})|U([0-9A-Fa-f]{8})|x([0-9A-Fa-f]{2})|(.))")


#: The length from which a document's common lines are each read by one match: below it, compiling that expression
#: (about a millisecond) costs more than it saves (about 15 microseconds a line), and most project.toml are shorter.
COMMON_LINES_FROM = 2048


def _no_match(text: str, at: int) -> None:
    return None


_TOKENS: list[_Tokens] = []
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\", "e": "\x1b"}


class Pass:
    """One pass over a document's text: the offset of every key, table and array element by its path, and the
    bounds. Lenient: on text that is not TOML it goes on (tomli, after it, says what is wrong), so it ends, and
    finds what it can; on TOML it finds every path tomli builds."""

    def __init__(self, text: str, nesting: int, depth: int, integers: tuple[int, int]) -> None:
        #: The bounds: arrays and inline tables in one another, tables and arrays in one another, integers.
        self.max_nesting, self.max_depth, self.integers = nesting, depth, integers
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
        #: Whether common lines are each read by one match (:attr:`_Tokens.line`), or token by token as the rest.
        self.common_lines = len(text) >= COMMON_LINES_FROM

    def document(self) -> dict[KeyPath, int]:
        text, blank = self.text, self.tokens.blank
        line = self.tokens.line if self.common_lines else _no_match
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
            if len(path) > self.max_depth:
                cause = f"nested too deeply: more than {self.max_depth} tables and arrays in one another"
                raise TooMuch(cause, offset)
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
        least, most = self.integers
        if value is not None and least <= (-value if token.startswith("-") else value) <= most:
            return
        shown = token if len(token) <= 40 else f"{token[:20]}… ({len(digits)} digits)"
        raise TooMuch(
            f"the integer {shown} is out of range: TOML integers are 64-bit, {least} to {most}",
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
        if self.nesting > self.max_nesting:
            cause = f"nested too deeply: more than {self.max_nesting} arrays or inline tables in one another"
            raise TooMuch(cause, self.at)
        self.at += 1

    def flat_array(self, path: KeyPath) -> bool:
        """Whether the array at :attr:`at` is one of one-line strings and numbers, without an escape, a comment or
        a long number (the common long array): then it is read whole, at C speed, and :attr:`at` left after it;
        its elements' places are found when asked for (:meth:`Places.offset`)."""
        text, start = self.text, self.at
        end = text.find("]", start)
        span = text[start + 1 : end]
        if end < 0 or self.nesting >= self.max_nesting or span.count('"') % 2 or '"""' in span:
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


def flat_elements(text: str, start: int, end: int) -> Iterator[int]:
    """Where each element of an array read whole (:meth:`Pass.flat_array`) starts, its elements between ``start``
    and ``end``."""
    return (found.start() for found in _TOKENS[0].flat_element(text, start, end))
