"""Where each key of a TOML document is written: its line and column, for messages and for errors as data.

tomli gives values without positions. This reads the text of a document that tomli has already parsed (so it is
valid TOML) once more, for positions only: every table header, every key (dotted keys and inline tables too) and
every array element, by its path in the parsed document (``("io", "buildpacks", "group", 1, "uri")``).
"""

from __future__ import annotations

import contextlib

Path = tuple[str | int, ...]
#: ``(line, column)``, both from 1.
Position = tuple[int, int]

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\", "e": "\x1b"}


def key_positions(text: str) -> dict[Path, Position]:
    """The position of every key, table and array element of the valid TOML ``text``, by path.

    >>> positions = key_positions('a = 1\\n[[t]]\\nx = [1,\\n  {y = 2}]\\n')
    >>> positions[("a",)], positions[("t", 0)], positions[("t", 0, "x", 1, "y")]
    ((1, 1), (2, 1), (4, 4))
    """
    scanner = _Scanner(text)
    with contextlib.suppress(
        IndexError, ValueError
    ):  # a form this reader does not know: what was found so far
        scanner.document()
    return scanner.found


def nearest(positions: dict[Path, Position], path: Path) -> tuple[int | None, int | None]:
    """Where ``path`` is written, or else the nearest table or array holding it; ``(None, None)`` when none is."""
    for depth in range(len(path), 0, -1):
        if path[:depth] in positions:
            return positions[path[:depth]]
    return None, None


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0
        self.found: dict[Path, Position] = {}
        #: The index of the last element of each array of tables, by its path (indices resolved).
        self.arrays: dict[Path, int] = {}

    # Positions

    def position(self, at: int) -> Position:
        line_start = self.text.rfind("\n", 0, at) + 1
        return self.text.count("\n", 0, at) + 1, at - line_start + 1

    def record(self, path: Path, at: int) -> None:
        self.found.setdefault(path, self.position(at))

    # The document, line by line

    def document(self) -> None:
        table: Path = ()
        while (start := self.skip_space(newlines=True, comments=True)) < len(self.text):
            if self.peek() == "[":
                table = self.header()
            else:
                self.key_value(table)
            if self.at == start:
                raise ValueError("no progress")

    def header(self) -> Path:
        start = self.at
        double = self.text.startswith("[[", self.at)
        self.at += 2 if double else 1
        names = self.key()
        self.at = self.text.index("]]" if double else "]", self.at) + (2 if double else 1)
        path: Path = ()
        for number, name in enumerate(names):
            path = (*path, name)
            last = number == len(names) - 1
            if double and last:
                self.arrays[path] = self.arrays.get(path, -1) + 1
                self.record(path, start)
                path = (*path, self.arrays[path])
            elif path in self.arrays:
                path = (*path, self.arrays[path])
            self.record(path, start)  # a table a header defines implicitly is where it is first named
        return path

    def key_value(self, table: Path) -> None:
        start = self.at
        path = (*table, *self.key())
        for depth in range(len(table) + 1, len(path) + 1):  # a dotted key defines its tables where it is
            self.record(path[:depth], start)
        self.skip_space()
        self.at += 1  # '='
        self.value(path)

    def key(self) -> list[str]:
        names = []
        while True:
            self.skip_space()
            names.append(self.string() if self.peek() in "\"'" else self.bare())
            self.skip_space()
            if self.peek() != ".":
                return names
            self.at += 1

    def bare(self) -> str:
        start = self.at
        while self.at < len(self.text) and self.text[self.at] in _BARE:
            self.at += 1
        return self.text[start : self.at]

    # Values

    def value(self, path: Path) -> None:
        self.skip_space()
        char = self.peek()
        if char == "[":
            self.array(path)
        elif char == "{":
            self.inline_table(path)
        elif char in "\"'":
            self.string()
        else:
            while self.at < len(self.text) and self.text[self.at] not in ",]}#\n\r":
                self.at += 1

    def array(self, path: Path) -> None:
        self.at += 1
        index = 0
        while True:
            self.skip_space(newlines=True, comments=True)
            if self.peek() == "]":
                self.at += 1
                return
            self.record((*path, index), self.at)
            self.value((*path, index))
            index += 1
            self.skip_space(newlines=True, comments=True)
            if self.peek() == ",":
                self.at += 1

    def inline_table(self, path: Path) -> None:
        self.at += 1
        while True:
            self.skip_space(newlines=True, comments=True)  # TOML 1.1 allows newlines here; tomli may too
            if self.peek() == "}":
                self.at += 1
                return
            self.key_value(path)
            self.skip_space(newlines=True, comments=True)
            if self.peek() == ",":
                self.at += 1

    def string(self) -> str:
        quote = self.text[self.at]
        if self.text.startswith(quote * 3, self.at):
            end = self.at + 3
            while not self.text.startswith(quote * 3, end):
                end += 2 if self.text[end] == "\\" and quote == '"' else 1
            while self.text.startswith(quote, end + 3):  # up to two quotes may end the content
                end += 1
            self.at = end + 3
            return ""  # a multi-line string is never a key
        self.at += 1
        out = []
        while (char := self.text[self.at]) != quote:
            if char == "\\" and quote == '"':
                out.append(self.escape())
                continue
            out.append(char)
            self.at += 1
        self.at += 1
        return "".join(out)

    def escape(self) -> str:
        code = self.text[self.at + 1]
        if code in "uU":
            width = 4 if code == "u" else 8
            digits = self.text[self.at + 2 : self.at + 2 + width]
            self.at += 2 + width
            return chr(int(digits, 16))
        if code == "x":  # TOML 1.1
            self.at += 4
            return chr(int(self.text[self.at - 2 : self.at], 16))
        self.at += 2
        return _ESCAPES.get(code, code)

    # Between tokens

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def skip_space(self, newlines: bool = False, comments: bool = False) -> int:
        blank = " \t\r\n" if newlines else " \t"
        while self.at < len(self.text):
            char = self.text[self.at]
            if char in blank:
                self.at += 1
            elif comments and char == "#":
                self.skip_comment()
            else:
                break
        return self.at

    def skip_comment(self) -> None:
        if self.peek() == "#":
            end = self.text.find("\n", self.at)
            self.at = len(self.text) if end < 0 else end
