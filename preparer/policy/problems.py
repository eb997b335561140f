"""What reading one policy file has found so far: the rules (each key and its line, for the messages of the
decisions they make) and the problems, each naming its key and where it is written; a problem ends the check of
its key or rule, and the walk goes on with the next.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TypeVar

from preparer.errors import PolicyError, with_fields
from preparer.policy.rules import Rule

T = TypeVar("T")

#: A table header, ``[name]`` or ``[[name]]``.
_HEADER = re.compile(r"^\s*\[+\s*([^\[\]]+?)\s*\]+")


def _table(header: re.Match[str]) -> str:
    """The dotted name of the table a header opens, quotes and spaces removed."""
    return header.group(1).replace(" ", "").replace('"', "")


class Findings:
    """The rules and problems of one policy file as its walk finds them."""

    def __init__(self, path: str, text: str, action: str) -> None:
        self.path, self.lines, self.action = path, text.splitlines(), action
        self.rules: dict[str, Rule] = {}
        self.problems: list[PolicyError] = []

    def attempt(self, read: Callable[[], T], default: T) -> T:
        """What ``read`` returns, or ``default`` when it finds a problem (kept in :attr:`problems`)."""
        try:
            return read()
        except PolicyError as problem:
            self.problems.append(problem)
            return default

    def where(self, key: str) -> str:
        """``line N of FILE`` where ``key`` (dotted) is written, or the file."""
        line = self.line(key)
        return f"line {line} of {self.path}" if line else self.path

    def line(self, key: str) -> int | None:
        """The line where ``key`` (dotted) is written: as a table, or as a key of a table header."""
        parts = key.split(".")
        current = ""
        for number, line in enumerate(self.lines, 1):
            header = _HEADER.match(line)
            if header:
                current = _table(header)
                if current == key:
                    return number
                continue
            for split in range(len(parts)):
                table, rest = ".".join(parts[:split]), ".".join(parts[split:])
                if current == table and re.match(rf"^\s*{re.escape(rest)}\s*=", line):
                    return number
        return None

    def headers(self, key: str) -> list[int]:
        """The lines of every ``[[key]]`` header, in order."""
        found = []
        for number, line in enumerate(self.lines, 1):
            header = _HEADER.match(line)
            if header and header.group(0).lstrip().startswith("[[") and _table(header) == key:
                found.append(number)
        return found

    def fail(self, key: str, problem: str) -> PolicyError:
        return self.error(key, self.line(key), f"{key} ({self.where(key)}): {problem}")

    def error(self, key: str, line: int | None, cause: str) -> PolicyError:
        return with_fields(PolicyError(self.action, cause), path=self.path, key=key, line=line)


def known_here(word: str, keys: Iterable[str]) -> str:
    """``did you mean keys? known here: images, keys, identities``: what a table takes, in the order given."""
    from preparer._near import closest  # deferred: only a mistake asks

    known = list(keys)
    near = closest(word, known)
    return (f"did you mean {near}? " if near else "") + f"known here: {', '.join(known)}"
