"""The checks of single values the configuration takes, each from its text alone: a group entry's ``uri``
(:func:`entry_locator`, which the plan makes its steps with too), a version that is a range, an include/exclude
pattern, an env name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, assert_never

from preparer._record import record
from preparer.errors import InvalidInputsError

if TYPE_CHECKING:
    from preparer.fetch.locator import Locator


#: A version range (compiled on first use, by ``re``'s cache, as below: few runs name versions).
_RANGE = r"^\s*[~^<>=!]|\|\||\s-\s|,"
#: ``x``, ``X`` or ``*`` as one of the three numeric parts (``1.x``, ``1.2.*``); in a prerelease or build part
#: (``1.0.0+build.x``) it is an ordinary identifier, as the lifecycle reads it.
_WILDCARD = r"(^|\.)[xX*](\.|$)"


@record
class UriProblem:
    """Why a group entry's ``uri`` is refused, from its text alone: said after the entry's key."""

    #: Whether the ``uri`` is at fault (else the entry as a whole: an ``id`` that contradicts it).
    on_uri: bool
    #: What follows the entry's key in the message: ``.uri 'ftp://h/x': unsupported protocol 'ftp'``.
    detail: str
    #: The refusal itself, without the key or the value: ``unsupported protocol 'ftp'`` (a list's entry is said
    #: with it: :mod:`preparer.lists`).
    cause: str = ""


def entry_locator(
    uri: str, bp_id: str | None, base_dir: Path, exists: Callable[[Path], bool]
) -> Locator | UriProblem:
    """What a group entry's ``uri`` names, or why it is refused (its form, scheme, URN, URL, port, image reference,
    digest pin; a version range; an ``id`` that is not the bare id it names). The one check of a ``uri``: the
    configuration is checked with it, and the plan makes its steps with it.

    :param bp_id: the entry's ``id``, when it has one.
    :param exists: whether a path is there; a ``uri`` without a scheme names a path when ``base_dir/<uri>`` is.
    """
    # Deferred: the fetch package (and what it imports) stays off runs whose entries name no uri.
    from preparer.fetch import locator as locators

    try:
        locator = locators.parse_locator(uri, base_dir, exists)
    except InvalidInputsError as err:
        return UriProblem(True, f".uri '{locators.redact(uri)}': {err.cause}", err.cause or "")
    match locator:
        case (
            locators.BuilderLocator() | locators.IdLocator()
        ):  # a buildpack id and a version, which may not be a range
            problem = None if locator.version is None else version_range_problem(locator.version)
            if problem:
                return UriProblem(True, f".uri: {problem}", problem)
            if isinstance(locator, locators.IdLocator) and bp_id is not None and bp_id != locator.id:
                return UriProblem(
                    False, f": id '{bp_id}' does not match uri '{uri}'", f"id '{bp_id}' does not match it"
                )
        case (
            locators.PathLocator()
            | locators.HttpLocator()
            | locators.ImageLocator()
            | locators.RegistryLocator()
            | locators.InlineLocator()
        ):
            pass  # what parsing checked is all there is to check of their text
        case _ as never:
            assert_never(never)
    return locator


def version_range_problem(version: str) -> str | None:
    """Why ``version`` is refused when it is a range such as ``~0.20``, ``^1``, ``>=1`` or ``1.x``.

    >>> version_range_problem("1.2.3") is None, version_range_problem("1.0.0+build.x") is None
    (True, True)
    """
    core = re.split(r"[-+]", version, maxsplit=1)[0]
    if re.search(_RANGE, version) is None and re.search(_WILDCARD, core) is None:
        return None
    return (
        f"'{version}' is a version range, and ranges are not supported: give an exact version, "
        "or no version for the highest one"
    )


#: Bounds on include/exclude patterns. Matching translates a pattern to a regular expression, whose backtracking
#: grows as a name's length to the power of the wildcards in one path segment (``*a*a*a*b``), and of the ``**`` in
#: one pattern: bounded, every pattern matches any name in a bounded time. Real patterns stay far below.
MAX_STARS_PER_SEGMENT = 2
MAX_DOUBLE_STARS = 4
MAX_PATTERN = 1024


def pattern_problem(pattern: str) -> str | None:
    """Why an include/exclude ``pattern`` is refused, or ``None``.

    >>> pattern_problem("dist/*.min.*.js") is None, pattern_problem("*a*a*b")
    (True, "'*a*a*b' has 3 '*' in one path segment; at most 2 are allowed")
    """
    if len(pattern) > MAX_PATTERN:
        return f"a pattern of {len(pattern)} characters; at most {MAX_PATTERN} are allowed"
    segments = pattern.split("/")
    double = sum(1 for segment in segments if segment == "**")
    if double > MAX_DOUBLE_STARS:
        return f"'{pattern}' has {double} '**'; at most {MAX_DOUBLE_STARS} are allowed"
    for segment in segments:
        stars = 0 if segment == "**" else segment.replace("**", "*").count("*")
        if stars > MAX_STARS_PER_SEGMENT:
            return f"'{pattern}' has {stars} '*' in one path segment; at most {MAX_STARS_PER_SEGMENT} are allowed"
    return None


def lookalike_in(name: str) -> str:
    """``: its character 'О' is U+041E (CYRILLIC CAPITAL LETTER O), not a Latin letter`` for the first character
    of ``name`` that is not ASCII (a letter of another script, a fullwidth one, a look-alike of punctuation), or
    empty: what a message says of a name a user cannot tell from the one meant."""
    from preparer._lookalike import first_lookalike  # deferred: only a name with one needs it

    found = first_lookalike(name)
    return "" if found is None else f": its character {name[found[0]]!r} is {found[1]}"


#: The longest name of a file, in bytes (``NAME_MAX`` of every file system a build runs on).
_NAME_MAX = 255


def env_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a file in ``<platform>/env`` (empty, ``.``, ``..``, holding ``/``, ``=`` or NUL, or
    longer than a file's name can be), or ``None`` when it can."""
    if not name:
        return "an env name must not be empty"
    if name in (".", ".."):
        return f"'{name}' is not a valid env name"
    for char, label in (("/", "'/'"), ("=", "'='"), ("\0", "NUL")):
        if char in name:
            return f"env name {name!r} must not contain {label}"
    size = len(name.encode("utf-8", "surrogateescape"))
    if (
        size > _NAME_MAX
    ):  # refused here, not by the commit's write (exit 1, after a dry run said all was well)
        return (
            f"env name '{name[:32]}…' is {size} bytes long: it names a file in <platform>/env, and a file's name "
            f"holds at most {_NAME_MAX} bytes"
        )
    return None
