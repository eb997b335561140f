"""Semantic Versioning 2.0 precedence, for choosing "the highest version" of a buildpack.

Versions that are not semver are not comparable and are left out of that choice; when only such versions
exist, the preparer asks for an explicit version.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: Compiled on first use (by ``re``'s cache): most runs compare no versions.
_SEMVER = (
    r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-((?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)(?:\.(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?\Z"
)

#: A sort key: release numbers, then whether it is a release, then prerelease identifiers.
_Key = tuple[tuple[int, int, int], int, tuple[tuple[int, int | str], ...]]


def semver_key(version: str) -> _Key | None:
    """The precedence key of ``version``, or ``None`` when it is not semver 2.0.

    >>> semver_key("1.0.0-rc.1") < semver_key("1.0.0")
    True
    """
    match = re.match(_SEMVER, version)
    if match is None:
        return None
    release = (int(match[1]), int(match[2]), int(match[3]))
    if match[4] is None:
        return release, 1, ()
    # Numeric identifiers sort before alphanumeric ones, and numerically among themselves.
    pre = tuple((0, int(p)) if p.isdigit() else (1, p) for p in match[4].split("."))
    return release, 0, pre


def highest(versions: Iterable[str]) -> str | None:
    """The highest semver version in ``versions``; ``None`` when none is semver."""
    keyed = [(k, v) for v in versions if (k := semver_key(v)) is not None]
    return max(keyed)[1] if keyed else None
