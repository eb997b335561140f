"""What reading one policy file has found so far: the rules (each key and its line, for the messages of the
decisions they make) and the problems, each naming its key and where it is written; a problem ends the check of
its key or rule, and the walk goes on with the next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

from preparer.errors import PolicyError, with_fields
from preparer.policy.rules import Rule

if TYPE_CHECKING:
    from preparer._types import KeyPath
    from preparer.files.toml import Places

T = TypeVar("T")


class Findings:
    """The rules and problems of one policy file as its walk finds them; ``places``: where its keys are written
    (the reader's, :class:`preparer.files.toml.Places`)."""

    def __init__(self, path: str, places: Places, action: str) -> None:
        self.path, self.places, self.action = path, places, action
        #: Each key the policy sets, and where (for the messages of the decisions it makes).
        self.rules: dict[str, Rule] = {}
        self.problems: list[PolicyError] = []

    def attempt(self, read: Callable[[], T], default: T) -> T:
        """What ``read`` returns, or ``default`` when it finds a problem (kept in :attr:`problems`)."""
        try:
            return read()
        except PolicyError as problem:
            self.problems.append(problem)
            return default

    def line(self, key: str | KeyPath) -> int | None:
        """The line where ``key`` (dotted, or its path) is written, as a table or a key."""
        return self.places.line(tuple(key.split(".")) if isinstance(key, str) else key)

    def where(self, line: int | None) -> str:
        """``line N of FILE``, or the file."""
        return f"line {line} of {self.path}" if line else self.path

    def fail(self, key: str, problem: str, path: KeyPath | None = None) -> PolicyError:
        """The problem of ``key`` (dotted; written at ``path`` when it holds a dot of its own)."""
        line = self.line(key if path is None else path)
        return self.error(key, line, f"{key} ({self.where(line)}): {problem}")

    def error(self, key: str, line: int | None, cause: str) -> PolicyError:
        return with_fields(PolicyError(self.action, cause), path=self.path, key=key, line=line)


def known_here(word: str, keys: Iterable[str]) -> str:
    """``did you mean keys? known here: images, keys, identities``: what a table takes, in the order given."""
    from preparer._near import closest  # deferred: only a mistake asks

    known = list(keys)
    near = closest(word, known)
    return (f"did you mean {near}? " if near else "") + f"known here: {', '.join(known)}"
