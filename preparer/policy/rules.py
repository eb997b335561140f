"""The platform's policy: which buildpack sources, env names and sizes a project may bring (docs/policy.md).

A policy is checked against the whole plan before anything is fetched or written: a refused entry stops the run
with exit 3 and no request made. Its limits travel with each fetch (:class:`Budget`) and stop a download or an
extraction the moment one is exceeded (exit 1). Without a policy nothing changes.
"""

from __future__ import annotations

import fnmatch
import os
import re
import threading
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard, TypeVar

import tomli

from preparer._record import field, record
from preparer.descriptor import lookup
from preparer.errors import PolicyError, PolicyRefused, with_fields
from preparer.fetch.guard import SIGNATURE_MAX_AGE, LimitExceeded, RunLimitExceeded
from preparer.files._toml import readable

if TYPE_CHECKING:
    from collections.abc import Iterator

    from preparer.policy.identity import Identity
    from preparer.policy.keyless.model import TrustedRoot
    from preparer.policy.keys import PublicKey
    from preparer.policy.signatures import Check, SignedBy

#: The kinds of source a policy names in ``sources.allow``.
KINDS = ("builder", "path", "http", "image", "cnb", "registry", "inline")
_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "kb": 1000, "mb": 10**6,
          "gb": 10**9, "tb": 10**12}  # fmt: skip
_SCHEMA: dict[str, frozenset[str]] = {
    "": frozenset({"sources", "http", "image", "limits", "env", "app", "sigstore"}),
    "sigstore": frozenset({"trusted-root"}),
    "sources": frozenset({"allow"}),
    "http": frozenset({"allow", "require-pin"}),
    "image": frozenset({"allow", "require-pin", "signed-by", "signature-max-age"}),
    "limits": frozenset({"buildpack", "run"}),
    "limits.buildpack": frozenset({"download-bytes", "extract-bytes", "entries"}),
    "limits.run": frozenset({"download-bytes", "extract-bytes", "entries"}),
    "env": frozenset({"allow", "deny"}),
    "app": frozenset({"include-exclude"}),
}
MAX_POLICY_BYTES = 1 << 20
T = TypeVar("T")


#: A table header, ``[name]`` or ``[[name]]``.
_HEADER = re.compile(r"^\s*\[+\s*([^\[\]]+?)\s*\]+")


def _table(header: re.Match[str]) -> str:
    """The dotted name of the table a header opens, quotes and spaces removed."""
    return header.group(1).replace(" ", "").replace('"', "")


@record
class Rule:
    """A value of the policy and the line where it is written (``None``: no line names it alone)."""

    key: str
    line: int | None


@record
class Limits:
    """Bytes downloaded, bytes extracted (or copied), entries written; ``None`` is unlimited."""

    download_bytes: int | None = None
    extract_bytes: int | None = None
    entries: int | None = None


@record
class Policy:
    """A parsed policy file. ``None`` in an allow list means "not restricted"."""

    path: str
    kinds: tuple[str, ...] | None = None
    http_allow: tuple[str, ...] | None = None
    http_pin: bool = False
    #: ``image.allow`` in canonical form (:func:`canonical_globs`), as the images it is matched against.
    image_allow: tuple[str, ...] | None = None
    image_pin: bool = False
    buildpack_limits: Limits = field(default_factory=Limits)
    run_limits: Limits = field(default_factory=Limits)
    env_allow: tuple[str, ...] | None = None
    env_deny: tuple[str, ...] = ()
    include_exclude: bool = True
    #: ``[[image.signed-by]]``: images that must carry a signature by a trusted key, in the file's order.
    signed_by: tuple[SignedBy, ...] = ()
    #: ``image.signature-max-age``: seconds a recorded signature verdict spares asking the registry (0: never).
    signature_max_age: float = SIGNATURE_MAX_AGE
    #: Where each key is written, for messages.
    rules: dict[str, Rule] = field(default_factory=dict)

    def rule(self, key: str) -> str:
        """``key`` and where it is: ``http.allow, line 7 of policy.toml``."""
        found = self.rules.get(key)
        if found is None:
            return f"{key} (the default) of {self.path}"
        return f"{key}, line {found.line} of {self.path}" if found.line else f"{key}, {self.path}"

    def budget(self, source: str, run: RunTotals, key: str = "", written: str = "") -> Budget:
        """The policy as one buildpack's fetch sees it: its limits, and what fetching reveals (redirects, a
        buildpackage where a plain archive was named).

        :param key: the entry, ``io.buildpacks.group[2]``; ``written``: its ``uri`` as written, for refusals.
        """
        return Budget(self, source, run, key, written or f'uri = "{source}"')

    def signed_by_rules(self, repository: str) -> tuple[SignedBy, ...]:
        """The ``[[image.signed-by]]`` rules whose ``images`` match ``repository`` (``registry/repository`` in the
        canonical form of :attr:`preparer.fetch.oci.reference.Reference.name`)."""
        return tuple(rule for rule in self.signed_by if matches(repository, rule.images) is not None)


#: How a policy given as text is named in messages.
POLICY_DATA_NAME = "policy data"


def load_policy(path: Path) -> Policy:
    """Read and check the policy file at ``path``.

    :raises PolicyError: unreadable, not TOML, an unknown key, or a value of the wrong kind (exit 3), naming the
        key and its line; its ``problems`` holds every problem of the file, in the file's order.
    """
    action = f"read policy {path}"
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_POLICY_BYTES + 1)
    except OSError as err:
        raise with_fields(PolicyError(action, err.strerror or str(err)), path=str(path)) from err
    return _parse(data, str(path), action, Path(path).parent, {})


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
    data = text.encode(errors="surrogatepass") if isinstance(text, str) else text
    return _parse(data, name, f"read policy {name}", None if base is None else Path(base), dict(keys or {}))


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


def _parse(data: bytes, name: str, action: str, base: Path | None, keys: dict[str, bytes]) -> Policy:
    def fail(cause: str, line: int | None = None) -> PolicyError:
        return with_fields(PolicyError(action, cause), path=name, line=line)

    if len(data) > MAX_POLICY_BYTES:
        raise fail(f"larger than {MAX_POLICY_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise fail(str(err)) from err
    try:
        doc = tomli.loads(text)
    except tomli.TOMLDecodeError as err:  # in the words the descriptor's errors use (a table given twice...)
        raise fail(readable(err, text), getattr(err, "lineno", None)) from err
    parser = _Parser(name, text, action, base, keys)
    policy = parser.policy(doc)
    if parser.problems:
        problems = tuple(sorted(parser.problems, key=lambda p: (p.line is None, p.line or 0)))
        raise with_fields(problems[0], problems=problems)
    return policy


class _Parser:
    """Reads a policy document, finding every problem of it (each in :attr:`problems`, the walk going on with the
    next key or rule)."""

    def __init__(self, path: str, text: str, action: str, base: Path | None, keys: dict[str, bytes]) -> None:
        self.path, self.lines, self.action = path, text.splitlines(), action
        self.base, self.given_keys = base, keys
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

    def fail(self, key: str, problem: str) -> PolicyError:
        return self.error(key, self.line(key), f"{key} ({self.where(key)}): {problem}")

    def error(self, key: str, line: int | None, cause: str) -> PolicyError:
        return with_fields(PolicyError(self.action, cause), path=self.path, key=key, line=line)

    def check_keys(self, doc: dict[str, Any], prefix: str = "") -> None:
        allowed = _SCHEMA.get(prefix, frozenset())
        for key, value in doc.items():
            dotted = f"{prefix}.{key}" if prefix else key
            if key not in allowed:
                self.problems.append(self.fail(dotted, f"unknown key ({_known(key, sorted(allowed))})"))
                continue
            if dotted == "image.signed-by":
                continue  # an array of tables: read by signed_by()
            if dotted in _SCHEMA:
                if not isinstance(value, dict):
                    self.problems.append(self.fail(dotted, "must be a table"))
                    continue
                self.check_keys(value, dotted)
            else:
                self.rules[dotted] = Rule(dotted, self.line(dotted))

    def globs(self, doc: dict[str, Any], key: str) -> tuple[str, ...] | None:
        value = lookup(doc, key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(key, "must be an array of non-empty strings")
        return tuple(value)

    def image_globs(self, doc: dict[str, Any], key: str) -> tuple[str, ...] | None:
        """The image globs at ``key``, in the canonical form references are matched in."""
        globs = self.globs(doc, key)
        if globs is None:
            return None
        try:
            return canonical_globs(globs)
        except ValueError as err:
            raise self.fail(key, str(err)) from None

    def flag(self, doc: dict[str, Any], key: str, default: bool) -> bool:
        value = lookup(doc, key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, "must be true or false")
        return value

    def size(self, doc: dict[str, Any], key: str) -> int | None:
        value = lookup(doc, key)
        if value is None or _count(value):
            return value
        match = re.fullmatch(r"\s*([0-9]+)\s*([A-Za-z]*)\s*", value) if isinstance(value, str) else None
        if match and match.group(2).lower() in _UNITS:
            return int(match.group(1)) * _UNITS[match.group(2).lower()]
        raise self.fail(key, 'must be a number of bytes (an integer, or a string such as "512MiB")')

    def duration(self, doc: dict[str, Any], key: str, default: float) -> float:
        """A Go duration, as ``-download-cache-max-age`` takes one (``"24h"``, ``"90m"``, ``"0"``), in seconds."""
        from preparer.goflags import parse_duration  # deferred: only policies that set a duration

        value = lookup(doc, key)
        if value is None:
            return default
        seconds = parse_duration(value) if isinstance(value, str) else 0.0 if value == 0 else None
        if seconds is None or isinstance(value, bool):
            raise self.fail(key, 'must be a duration such as "24h", "90m" or "0" (units: h, m, s, ms)')
        return seconds

    def count(self, doc: dict[str, Any], key: str) -> int | None:
        value = lookup(doc, key)
        if value is None or _count(value):
            return value
        raise self.fail(key, "must be a non-negative integer")

    def limits(self, doc: dict[str, Any], table: str) -> Limits:
        return Limits(
            self.attempt(lambda: self.size(doc, f"{table}.download-bytes"), None),
            self.attempt(lambda: self.size(doc, f"{table}.extract-bytes"), None),
            self.attempt(lambda: self.count(doc, f"{table}.entries"), None),
        )

    def kinds(self, doc: dict[str, Any]) -> tuple[str, ...] | None:
        kinds = self.globs(doc, "sources.allow")
        for kind in kinds or ():
            if kind not in KINDS:
                raise self.fail("sources.allow", f"unknown kind '{kind}' (kinds: {', '.join(KINDS)})")
        return kinds

    def policy(self, doc: dict[str, Any]) -> Policy:
        self.check_keys(doc)
        return Policy(
            path=self.path,
            kinds=self.attempt(lambda: self.kinds(doc), None),
            http_allow=self.attempt(lambda: self.globs(doc, "http.allow"), None),
            http_pin=self.attempt(lambda: self.flag(doc, "http.require-pin", False), False),
            image_allow=self.attempt(lambda: self.image_globs(doc, "image.allow"), None),
            image_pin=self.attempt(lambda: self.flag(doc, "image.require-pin", False), False),
            buildpack_limits=self.limits(doc, "limits.buildpack"),
            run_limits=self.limits(doc, "limits.run"),
            env_allow=self.attempt(lambda: self.globs(doc, "env.allow"), None),
            env_deny=self.attempt(lambda: self.globs(doc, "env.deny") or (), ()),
            include_exclude=self.attempt(lambda: self.flag(doc, "app.include-exclude", True), True),
            signed_by=self.attempt(lambda: self.signed_by(doc), ()),
            signature_max_age=self.attempt(
                lambda: self.duration(doc, "image.signature-max-age", SIGNATURE_MAX_AGE), SIGNATURE_MAX_AGE
            ),
            rules=self.rules,
        )

    def signed_by(self, doc: dict[str, Any]) -> tuple[SignedBy, ...]:
        """Every ``[[image.signed-by]]`` rule, its keys and the trusted root its identities need read now: a key or a
        root that cannot be used stops the run before any request (exit 3), naming the file and the rule's line."""
        value = lookup(doc, "image.signed-by")
        if value is None:
            return ()
        key = "image.signed-by"
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            raise self.fail(key, "must be an array of tables ([[image.signed-by]])")
        from preparer.policy.signatures import SignedBy  # deferred: only policies with signature rules

        headers = self.headers(key)
        identity_lines = iter(self.headers(f"{key}.identities"))
        root: list[TrustedRoot | None] = []  # read once, for the first rule with identities
        rules = []
        for index, table in enumerate(value):
            line = headers[index] if index < len(headers) else None
            where = f"line {line} of {self.path}" if line else self.path
            before = len(self.problems)
            unknown = sorted(set(table) - {"images", "keys", "identities"})
            if unknown:
                known = _known(unknown[0], ("images", "keys", "identities"))
                self.problems.append(
                    self.error(key, line, f"{key} ({where}): unknown key '{unknown[0]}' ({known})")
                )
            no_images: tuple[str, ...] = ()
            no_keys: tuple[PublicKey, ...] = ()
            images = self.attempt(partial(self.images, table, line, where), no_images)
            keys = self.attempt(
                partial(self.keys, table.get("keys"), "identities" in table, key, line, where), no_keys
            )
            identities = self.identities(table.get("identities"), identity_lines, where)
            if identities and not root:
                no_root: TrustedRoot | None = None
                root.append(self.attempt(partial(self.trusted_root, doc, where), no_root))
            if len(self.problems) == before:
                trusted = root[0] if identities and root else None
                rules.append(SignedBy(tuple(images), keys, line, identities, trusted))
        self.rules[key] = Rule(key, headers[0] if headers else None)
        return tuple(rules)

    def images(self, table: dict[str, Any], line: int | None, where: str) -> tuple[str, ...]:
        key = "image.signed-by"
        images = table.get("images", ["*"])
        if not isinstance(images, list) or not images or not all(isinstance(i, str) and i for i in images):
            raise self.error(key, line, f"{key} ({where}): images must be an array of non-empty strings")
        try:
            return canonical_globs(images)
        except ValueError as err:
            raise self.error(key, line, f"{key} ({where}): images: {err}") from None

    def keys(
        self, paths: Any, optional: bool, key: str, line: int | None, where: str
    ) -> tuple[PublicKey, ...]:
        """The keys of one ``[[image.signed-by]]`` rule, read (none when the rule has identities instead): each a
        name given with the policy (:func:`parse_policy`'s ``keys``), a PEM public key written in the policy, or
        a key file."""
        if paths is None and optional:
            return ()
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) and p for p in paths):
            raise self.error(
                key,
                line,
                f"{key} ({where}): keys must be a non-empty array of key files (PEM public keys) or PEM blocks"
                + ("" if optional else ", or the rule must have [[image.signed-by.identities]]"),
            )
        from preparer.policy.keys import KeyProblem, load_key, parse_key, service_key  # deferred: keys only

        keys = []
        for number, written in enumerate(paths, 1):
            refused = service_key(written)
            if refused is not None:
                self.problems.append(
                    self.error(key, line, f"{key} ({where}): key {written.strip()}: {refused}")
                )
                continue
            # One way to a key from its PEM: written in the policy, or given as bytes by name (parse_policy's keys).
            inline = written.lstrip().startswith("-----BEGIN ")
            given = None if inline else self.given_keys.get(written)
            path = None if inline or given is not None else self.resolve(written)
            if inline:
                shown = f"key {number} (inline PEM)"
            else:
                shown = f"key {written if given is not None or path is None else path}"
            try:
                if inline:
                    keys.append(parse_key(written, f"inline key {number} of the rule at {where}"))
                elif given is not None:
                    keys.append(parse_key(given, written))
                elif path is None:
                    raise KeyProblem("a relative path, and the policy was given without a base directory")
                else:
                    keys.append(load_key(path))
            except KeyProblem as problem:
                self.problems.append(self.error(key, line, f"{key} ({where}): {shown}: {problem}"))
        return tuple(keys)

    def resolve(self, written: str) -> Path | None:
        """The path ``written`` in the policy names: relative to the policy's directory (``None``: it has none)."""
        if Path(written).is_absolute():
            return Path(written)
        return None if self.base is None else self.base / written

    def identities(self, value: Any, lines: Iterator[int], rule: str) -> tuple[Identity, ...]:
        """The ``[[image.signed-by.identities]]`` of one rule: each an issuer (``issuer`` or ``issuer-regexp``) and a
        subject (``subject`` or ``subject-regexp``), as cosign requires both; a regexp must compile."""
        if value is None:
            return ()
        key = "image.signed-by.identities"
        if not isinstance(value, list) or not value or not all(isinstance(v, dict) for v in value):
            self.problems.append(
                self.error(key, None, f"{key} (the rule at {rule}): must be an array of tables ([[{key}]])")
            )
            return ()
        found = []
        for table in value:
            line = next(lines, None)
            none: Identity | None = None
            identity = self.attempt(partial(self.identity, table, line), none)
            if identity is not None:
                found.append(identity)
        return tuple(found)

    def identity(self, table: dict[str, Any], line: int | None) -> Identity:
        from preparer.policy.identity import IdentityProblem, read_identity  # deferred, as SignedBy

        try:
            return read_identity(table, line, self.path, self.lines)
        except IdentityProblem as problem:
            raise self.error("image.signed-by.identities", problem.line, str(problem)) from None

    def trusted_root(self, doc: dict[str, Any], rule: str) -> TrustedRoot:
        """``[sigstore] trusted-root``, read: the trusted root that identity rules need (the rule at ``rule`` has
        one)."""
        key = "sigstore.trusted-root"
        written = lookup(doc, key)
        if written is None:
            raise self.error(
                "image.signed-by.identities",
                None,
                f"image.signed-by.identities (the rule at {rule}): an identity rule needs [sigstore] trusted-root, "
                "the platform's copy of Sigstore's trusted root (trusted_root.json)",
            )
        if not isinstance(written, str) or not written:
            raise self.fail(key, "must be the path of a trusted_root.json file")
        from preparer.policy.keyless.model import RootProblem  # deferred: only policies with identity rules
        from preparer.policy.keyless.root import load_root

        path = self.resolve(written)
        if path is None:
            raise self.fail(
                key, f"{written}: a relative path, and the policy was given without a base directory"
            )
        try:
            return load_root(path)
        except RootProblem as problem:
            inside = f" (at {problem.where})" if problem.where else ""
            raise self.fail(key, f"{path}{inside}: {problem}") from None

    def headers(self, key: str) -> list[int]:
        """The lines of every ``[[key]]`` header, in order."""
        found = []
        for number, line in enumerate(self.lines, 1):
            header = _HEADER.match(line)
            if header and header.group(0).lstrip().startswith("[[") and _table(header) == key:
                found.append(number)
        return found


def canonical_globs(globs: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Image globs in the form :attr:`preparer.fetch.oci.reference.Reference.name` is (docs/policy.md, "Matching").

    :raises ValueError: one can never match an image: ``'<glob>' can never match an image: <why>``.
    """
    from preparer.fetch.oci.reference import canonical_glob  # deferred: only policies with image globs

    canonical = []
    for glob in globs:
        try:
            canonical.append(canonical_glob(glob))
        except ValueError as err:
            raise ValueError(f"'{glob}' can never match an image: {err}") from None
    return tuple(canonical)


def _known(word: str, keys: Iterable[str]) -> str:
    """``did you mean keys? known here: images, keys, identities``: what a table takes, in the order given."""
    from preparer._near import closest  # deferred: only a mistake asks

    known = list(keys)
    near = closest(word, known)
    return (f"did you mean {near}? " if near else "") + f"known here: {', '.join(known)}"


def _count(value: object) -> TypeGuard[int]:
    """Whether ``value`` is a non-negative integer (TOML's booleans are not)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def matches(value: str, patterns: tuple[str, ...]) -> str | None:
    """The first glob of ``patterns`` that ``value`` matches (``*`` matches ``/`` too), else ``None``."""
    return next((p for p in patterns if fnmatch.fnmatchcase(value, p)), None)


# Limits while fetching.


class RunTotals:
    """What every buildpack of the run has used so far (fetches run in parallel: guarded by a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.used = {"download_bytes": 0, "extract_bytes": 0, "entries": 0}


_WHAT = {
    "download_bytes": ("bytes downloaded", "download-bytes"),
    "extract_bytes": ("bytes extracted", "extract-bytes"),
    "entries": ("entries written", "entries"),
}


class Budget:
    """The policy as one buildpack's fetch sees it (a :class:`preparer.fetch.guard.Guard`): its limits, charged to
    the run's totals as well, and the decisions that only fetching can ask for (each redirect hop, a kind of source
    its content reveals, an image found while resolving)."""

    def __init__(self, policy: Policy, source: str, run: RunTotals, key: str = "", written: str = "") -> None:
        self.policy, self.source, self.run = policy, source, run
        self.key, self.written = key or source, written or f'uri = "{source}"'
        self.used = {"download_bytes": 0, "extract_bytes": 0, "entries": 0}

    def redirect(self, url: str) -> None:
        """A server redirects this fetch to ``url`` (canonical, shown form): ``http.allow`` decides it as it
        decided the URL written.

        :raises InvalidInputsError: the policy does not allow ``url`` (exit 3); nothing more is asked of it.
        """
        if self.policy.http_allow is not None and matches(url, self.policy.http_allow) is None:
            rule = f"it redirects to {url}, which matches no pattern of {self.policy.rule('http.allow')}"
            raise refusal(self.policy, Decision(self.key, self.written, False, rule, "http.allow"))

    def image(self, reference: str, repository: str, digest: str | None) -> None:
        """An image found while fetching (what a registry entry or a bare id resolves to) meets the image rules.

        :raises InvalidInputsError: the policy refuses it (exit 3).
        """
        problem = check_image(self.policy, repository, digest)
        if problem is not None:
            by, why = problem
            error = PolicyRefused(
                "prepare", f"the image {reference} is not allowed by the platform policy: {why}"
            )
            raise _fields(error, self.policy, self.key, by)

    def signatures(self, repository: str) -> Check | None:
        """The ``[[image.signed-by]]`` rules the image ``repository`` must meet, or ``None`` when none applies."""
        rules = self.policy.signed_by_rules(repository) if self.policy.signed_by else ()
        if not rules:
            return None
        from preparer.policy.signatures import Check  # deferred: only policies with signature rules

        entry = self.key if self.key != self.source else ""
        return Check(rules, self.policy.path, entry, self.policy.signature_max_age)

    def revealed(self, kind: str, what: str) -> None:
        """The content shows the source to be of ``kind`` (``what`` says how): it must be allowed too.

        :raises InvalidInputsError: ``kind`` is not in ``sources.allow`` (exit 3).
        """
        if self.policy.kinds is not None and kind not in self.policy.kinds:
            rule = f"{what}, and {kind} sources are not allowed ({self.policy.rule('sources.allow')})"
            raise refusal(self.policy, Decision(self.key, self.written, False, rule, "sources.allow"))

    def downloaded(self, count: int) -> None:
        self._charge("download_bytes", count)

    def extracted(self, count: int) -> None:
        self._charge("extract_bytes", count)

    def entry(self, count: int = 1) -> None:
        self._charge("entries", count)

    def _charge(self, what: str, count: int) -> None:
        if not count:
            return
        self.used[what] += count
        mine = getattr(self.policy.buildpack_limits, what)
        if mine is not None and self.used[what] > mine:
            self._exceeded(what, "limits.buildpack", mine)
        with self.run.lock:
            self.run.used[what] += count
            total = self.run.used[what]
        theirs = getattr(self.policy.run_limits, what)
        if theirs is not None and total > theirs:
            self._exceeded(what, "limits.run", theirs)

    def _exceeded(self, what: str, table: str, limit: int) -> None:
        noun, key = _WHAT[what]
        scope = "this buildpack" if table == "limits.buildpack" else "the run"
        raise (LimitExceeded if table == "limits.buildpack" else RunLimitExceeded)(
            f"fetch {self.source}",
            f"more than {limit} {noun} for {scope}: the platform policy's limit ({self.policy.rule(f'{table}.{key}')})",
        )


# Deciding each entry of the plan, before anything is fetched.


@record
class Decision:
    """One entry (a group entry or a build env variable) and what the policy says of it."""

    #: Where the entry is written: ``io.buildpacks.group[2]``.
    key: str
    #: The entry as written (credentials removed): ``uri = "https://host/bp.tgz"``.
    written: str
    allowed: bool
    #: Why, and which key of the policy says so (where it is written).
    rule: str
    #: The policy's key that decides it (``sources.allow``), when one does.
    by: str | None = None


def decide_source(policy: Policy, key: str, written: str, kinds: tuple[str, ...], target: Target) -> Decision:
    """What ``policy`` says of a buildpack source of ``kinds`` (all must be allowed) at ``target``."""
    for kind in kinds:
        if policy.kinds is not None and kind not in policy.kinds:
            rule = f"{kind} sources are not allowed ({policy.rule('sources.allow')})"
            return Decision(key, written, False, rule, "sources.allow")
    problem = None
    if target.url is not None:
        problem = _check_http(policy, target)
    elif target.image is not None:
        problem = check_image(policy, target.image, target.image_digest)
    if problem:
        by, why = problem
        return Decision(key, written, False, why, by)
    return Decision(key, written, True, _allowed_by(policy, kinds, target))


@record
class Target:
    """Where a source points: an http URL (with its pin and what the cache knows of it), or an image."""

    url: str | None = None
    pinned: bool = False
    cached_digest: str | None = None
    image: str | None = None
    image_digest: str | None = None


def _check_http(policy: Policy, target: Target) -> tuple[str, str] | None:
    url = target.url or ""
    if policy.http_allow is not None and matches(url, policy.http_allow) is None:
        return "http.allow", f"{url} matches no pattern of {policy.rule('http.allow')}"
    if policy.http_pin and not target.pinned:
        hint = ""
        if target.cached_digest:
            hex_digest = target.cached_digest.removeprefix("sha256:")
            hint = f'; the cached copy of this URL is sha256:{hex_digest}: write uri = "{url}#sha256={hex_digest}"'
        return (
            "http.require-pin",
            f"it must be pinned with #sha256=<digest> ({policy.rule('http.require-pin')}){hint}",
        )
    return None


def check_image(policy: Policy, repository: str, digest: str | None) -> tuple[str, str] | None:
    """Which key of ``policy`` refuses the image ``repository`` (``registry/repository`` in the canonical form of
    :attr:`preparer.fetch.oci.reference.Reference.name`) and why, or ``None``."""
    if policy.image_allow is not None and matches(repository, policy.image_allow) is None:
        return "image.allow", f"{repository} matches no pattern of {policy.rule('image.allow')}"
    if policy.image_pin and not digest:
        return (
            "image.require-pin",
            f"it must be pinned with @sha256:<digest> ({policy.rule('image.require-pin')})",
        )
    return None


def _allowed_by(policy: Policy, kinds: tuple[str, ...], target: Target) -> str:
    reasons = []
    if policy.kinds is not None:
        reasons.append(f"{', '.join(kinds)} in {policy.rule('sources.allow')}")
    if target.url is not None and policy.http_allow is not None:
        reasons.append(f"matches '{matches(target.url, policy.http_allow)}' of {policy.rule('http.allow')}")
    if target.image is not None and policy.image_allow is not None:
        reasons.append(
            f"matches '{matches(target.image, policy.image_allow)}' of {policy.rule('image.allow')}"
        )
    return "; ".join(reasons) or "nothing in the policy restricts it"


def decide_env(policy: Policy, key: str, name: str) -> Decision:
    """What ``policy`` says of the build env variable ``name``."""
    written = f'name = "{name}"'
    denied = matches(name, policy.env_deny)
    if denied is not None:
        return Decision(
            key, written, False, f"it matches '{denied}' of {policy.rule('env.deny')}", "env.deny"
        )
    if policy.env_allow is not None:
        allowed = matches(name, policy.env_allow)
        if allowed is None:
            return Decision(
                key, written, False, f"it matches no pattern of {policy.rule('env.allow')}", "env.allow"
            )
        return Decision(key, written, True, f"matches '{allowed}' of {policy.rule('env.allow')}")
    return Decision(key, written, True, "nothing in the policy restricts it")


def written_as(uri: str | None, bp_id: str | None, shown: str) -> str:
    """An entry as written, for messages: ``uri = "<shown>"``, ``id = "<id>"`` or ``script``."""
    return f'uri = "{shown}"' if uri else f'id = "{bp_id}"' if bp_id else "script"


def refusal(policy: Policy, decision: Decision) -> PolicyRefused:
    """The error of a refused entry (exit 3), with the rule that refuses it as data."""
    error = PolicyRefused(
        "prepare",
        f"{decision.key} ({decision.written} as written) is not allowed by the platform policy: {decision.rule}",
    )
    return _fields(error, policy, decision.key, decision.by)


def _fields(error: PolicyRefused, policy: Policy, entry: str, by: str | None) -> PolicyRefused:
    found = policy.rules.get(by) if by else None
    return with_fields(error, entry=entry, rule=by, policy=policy.path, line=found.line if found else None)
