"""The policy file (``-policy``, docs/policy.md): read, every key checked, every problem found.

A policy that cannot be read, or breaks its schema, is a :class:`~preparer.errors.PolicyError` (exit 3) naming the
key and its line, with every problem of the file in its ``problems``: a run reads none of it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeGuard

from preparer._near import closest
from preparer.descriptor import lookup
from preparer.errors import PolicyError, with_fields
from preparer.fetch.guard import SIGNATURE_MAX_AGE
from preparer.files.toml import Document, parse_toml, read_toml
from preparer.policy.problems import Findings, known_here
from preparer.policy.rules import KINDS, NO_MATCH, Limits, Policy, Rule, canonical_globs
from preparer.policy.signed_by import SignedByReader

_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "kb": 1000, "mb": 10**6,
          "gb": 10**9, "tb": 10**12}  # fmt: skip
_SCHEMA: dict[str, frozenset[str]] = {
    "": frozenset({"sources", "http", "image", "limits", "env", "app", "sigstore"}),
    "sigstore": frozenset({"trusted-root"}),
    "sources": frozenset({"allow"}),
    "http": frozenset({"allow", "require-pin"}),
    "image": frozenset({"allow", "require-pin", "signed-by", "signature-max-age", "no-match-policy"}),
    "limits": frozenset({"buildpack", "run"}),
    "limits.buildpack": frozenset({"download-bytes", "extract-bytes", "entries"}),
    "limits.run": frozenset({"download-bytes", "extract-bytes", "entries"}),
    "env": frozenset({"allow", "deny"}),
    "app": frozenset({"include-exclude"}),
}
MAX_POLICY_BYTES = 1 << 20
_NO_MATCH_MEANS = (
    "what becomes of an image no [[image.signed-by]] rule matches: refused, warned of, or let through"
)


#: How a policy given as text is named in messages.
POLICY_DATA_NAME = "policy data"


def load_policy(path: Path) -> Policy:
    """Read and check the policy file at ``path``.

    :raises PolicyError: unreadable, not TOML, an unknown key, or a value of the wrong kind (exit 3), naming the
        key and its line; its ``problems`` holds every problem of the file, in the file's order.
    """
    action = f"read policy {path}"
    read = read_toml(
        Path(path), "policy", error=PolicyError, action=action, limit=MAX_POLICY_BYTES, named=False
    )
    return _checked(read, action, Path(path).parent, {})


def parse_policy(
    text: str | bytes,
    *,
    base: str | os.PathLike[str] | None = None,
    keys: Mapping[str, bytes] | None = None,
    name: str = POLICY_DATA_NAME,
) -> Policy:
    """The policy whose text is ``text``, as :func:`load_policy` reads a file: for a service that keeps policies
    in its database.

    :param base: the directory that relative paths in it (key files, the trusted root) are read from; without it,
        only absolute paths, ``keys`` and inline PEM keys can be used.
    :param keys: PEM public keys by the name the policy's ``keys`` arrays give them (``keys = ["team.pub"]``);
        a name found here is never read from disk.
    :param name: names the policy in messages.
    :raises PreparerError: a :class:`~preparer.errors.PolicyError`, as :func:`load_policy` (exit 3).
    """
    action = f"read policy {name}"
    read = parse_toml(
        text, name, "policy", error=PolicyError, action=action, limit=MAX_POLICY_BYTES, named=False
    )
    return _checked(read, action, None if base is None else Path(base), dict(keys or {}))


def check_policy(
    path: str | os.PathLike[str] | None = None,
    *,
    text: str | bytes | None = None,
    base: str | os.PathLike[str] | None = None,
    keys: Mapping[str, bytes] | None = None,
) -> tuple[PolicyError, ...]:
    """Every problem of the policy file at ``path`` (or of its ``text``), each a
    :class:`~preparer.errors.PolicyError` with ``path``, ``key`` and ``line``, in the file's order; an empty tuple:
    a run reads it. The same checks as a run's (:func:`load_policy`), which raises the first of them.

    :param base: with ``text``, as :func:`parse_policy`'s (``path``'s directory otherwise).
    :raises TypeError: neither ``path`` nor ``text`` is given.
    """
    if path is None and text is None:
        raise TypeError("check_policy() needs the policy's path or its text")
    try:
        if text is None:
            load_policy(Path(path or ""))
        else:
            name = POLICY_DATA_NAME if path is None else str(path)
            parse_policy(text, base=base if base is not None or path is None else Path(path).parent, keys=keys,
                         name=name)  # fmt: skip
    except PolicyError as err:
        return err.problems or (err,)
    return ()


def _checked(read: Document, action: str, base: Path | None, keys: dict[str, bytes]) -> Policy:
    """The policy ``read``, every key checked: every problem found, in the file's order."""
    found = Findings(read.name, read.places, action)
    policy = _Parser(found, base, keys).policy(read.table)
    if found.problems:
        problems = tuple(sorted(found.problems, key=lambda p: (p.line is None, p.line or 0)))
        raise with_fields(problems[0], problems=problems)
    return policy


class _Parser:
    """Reads a policy document, finding every problem of it (each in its :class:`Findings`, the walk going on with
    the next key or rule); the ``[[image.signed-by]]`` rules are :class:`SignedByReader`'s."""

    def __init__(self, found: Findings, base: Path | None, keys: dict[str, bytes]) -> None:
        self.found, self.base, self.given_keys = found, base, keys

    def check_keys(self, doc: dict[str, Any], prefix: str = "") -> None:
        allowed = _SCHEMA.get(prefix, frozenset())
        for key, value in doc.items():
            dotted = f"{prefix}.{key}" if prefix else key
            if key not in allowed:
                path = (*prefix.split("."), key) if prefix else (key,)  # as written: a key may hold a dot
                known = known_here(key, sorted(allowed))
                if not known.startswith("did you mean"):
                    known = _elsewhere(key, prefix) + known
                self.found.problems.append(self.found.fail(dotted, f"unknown key ({known})", path))
                continue
            if dotted == "image.signed-by":
                continue  # an array of tables: read by signed_by()
            if dotted in _SCHEMA:
                if not isinstance(value, dict):
                    self.found.problems.append(self.found.fail(dotted, "must be a table"))
                    continue
                self.check_keys(value, dotted)
            else:
                self.found.rules[dotted] = Rule(dotted, self.found.line(dotted))

    def globs(self, doc: dict[str, Any], key: str) -> tuple[str, ...] | None:
        value = lookup(doc, key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.found.fail(key, "must be an array of non-empty strings")
        return tuple(value)

    def image_globs(self, doc: dict[str, Any], key: str) -> tuple[str, ...] | None:
        """The image globs at ``key``, in the canonical form references are matched in."""
        globs = self.globs(doc, key)
        if globs is None:
            return None
        try:
            return canonical_globs(globs)
        except ValueError as err:
            raise self.found.fail(key, str(err)) from None

    def flag(self, doc: dict[str, Any], key: str, default: bool) -> bool:
        value = lookup(doc, key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.found.fail(key, "must be true or false")
        return value

    def no_match(self, doc: dict[str, Any]) -> str | None:
        """``image.no-match-policy``: ``deny``, ``warn`` or ``allow`` (policy-controller's words), or ``None``."""
        key = "image.no-match-policy"
        value = lookup(doc, key)
        if value is None:
            return None
        if isinstance(value, str) and value in NO_MATCH:
            return value
        meant = closest(value, NO_MATCH) if isinstance(value, str) else None
        hint = f"did you mean {meant}? " if meant else ""
        raise self.found.fail(key, f"must be one of {', '.join(NO_MATCH)} ({hint}{_NO_MATCH_MEANS})")

    def size(self, doc: dict[str, Any], key: str) -> int | None:
        value = lookup(doc, key)
        if value is None or _count(value):
            return value
        match = re.fullmatch(r"\s*([0-9]+)\s*([A-Za-z]*)\s*", value) if isinstance(value, str) else None
        if match and match.group(2).lower() in _UNITS:
            return int(match.group(1)) * _UNITS[match.group(2).lower()]
        raise self.found.fail(key, 'must be a number of bytes (an integer, or a string such as "512MiB")')

    def duration(self, doc: dict[str, Any], key: str, default: float) -> float:
        """A Go duration, as ``-download-cache-max-age`` takes one (``"24h"``, ``"90m"``, ``"0"``), in seconds."""
        from preparer.goflags import parse_duration  # deferred: only policies that set a duration

        value = lookup(doc, key)
        if value is None:
            return default
        seconds = parse_duration(value) if isinstance(value, str) else 0.0 if value == 0 else None
        if seconds is None or isinstance(value, bool):
            raise self.found.fail(key, 'must be a duration such as "24h", "90m" or "0" (units: h, m, s, ms)')
        return seconds

    def count(self, doc: dict[str, Any], key: str) -> int | None:
        value = lookup(doc, key)
        if value is None or _count(value):
            return value
        raise self.found.fail(key, "must be a non-negative integer")

    def limits(self, doc: dict[str, Any], table: str) -> Limits:
        return Limits(
            self.found.attempt(lambda: self.size(doc, f"{table}.download-bytes"), None),
            self.found.attempt(lambda: self.size(doc, f"{table}.extract-bytes"), None),
            self.found.attempt(lambda: self.count(doc, f"{table}.entries"), None),
        )

    def kinds(self, doc: dict[str, Any]) -> tuple[str, ...] | None:
        kinds = self.globs(doc, "sources.allow")
        for kind in kinds or ():
            if kind not in KINDS:
                raise self.found.fail("sources.allow", f"unknown kind '{kind}' (kinds: {', '.join(KINDS)})")
        return kinds

    def policy(self, doc: dict[str, Any]) -> Policy:
        self.check_keys(doc)
        return Policy(
            path=self.found.path,
            kinds=self.found.attempt(lambda: self.kinds(doc), None),
            http_allow=self.found.attempt(lambda: self.globs(doc, "http.allow"), None),
            http_pin=self.found.attempt(lambda: self.flag(doc, "http.require-pin", False), False),
            image_allow=self.found.attempt(lambda: self.image_globs(doc, "image.allow"), None),
            image_pin=self.found.attempt(lambda: self.flag(doc, "image.require-pin", False), False),
            buildpack_limits=self.limits(doc, "limits.buildpack"),
            run_limits=self.limits(doc, "limits.run"),
            env_allow=self.found.attempt(lambda: self.globs(doc, "env.allow"), None),
            env_deny=self.found.attempt(lambda: self.globs(doc, "env.deny") or (), ()),
            include_exclude=self.found.attempt(lambda: self.flag(doc, "app.include-exclude", True), True),
            signed_by=self.found.attempt(
                lambda: SignedByReader(self.found, self.base, self.given_keys).read(doc), ()
            ),
            signature_max_age=self.found.attempt(
                lambda: self.duration(doc, "image.signature-max-age", SIGNATURE_MAX_AGE), SIGNATURE_MAX_AGE
            ),
            no_match=self.found.attempt(lambda: self.no_match(doc), None),
            rules=self.found.rules,
        )


def _elsewhere(key: str, table: str) -> str:
    """``did you mean image.no-match-policy? ``: the places of the schema other than ``table`` where ``key`` is
    read (a key written in the wrong table, or at the top), or nothing."""
    places = [f"{t}.{key}" if t else key for t, keys in _SCHEMA.items() if t != table and key in keys]
    # What allow and deny say depends on their table: sources.deny is no env.deny.
    if not places or key in ("allow", "deny"):
        return ""
    return f"did you mean {' or '.join(places)}? "


def _count(value: object) -> TypeGuard[int]:
    """Whether ``value`` is a non-negative integer (TOML's booleans are not)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
