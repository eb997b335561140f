"""The lock file's format (docs/lock.md): what each buildpack entry resolved to, read and written.

What a lock does to a run (freezing it, checking what was fetched) is :mod:`preparer.lock`'s.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from preparer._record import record
from preparer._types import dotted
from preparer.entries import GroupEntry
from preparer.errors import DescriptorError, with_fields
from preparer.files.locked import Locked

LOCK_VERSION = 1
#: The version of a lock holding several targets (``[[target]]``, each with its ``[[target.buildpack]]``): a lock of
#: one target is still written as version 1, which older preparers read; one of several is version 2, which they
#: refuse as written by a newer preparer rather than half-read.
TARGETS_VERSION = 2
#: Where a lock is looked for when no ``-lock`` is given: the documented place, ``<app>/preparer.lock``. A run
#: without ``-lock`` warns when a file is there (it is not used); ``-require-lock`` reads it.
DEFAULT_LOCK_NAME = "preparer.lock"
#: A lock is a few hundred bytes per entry; a larger file is refused unread.
MAX_LOCK_BYTES = 1 << 20
SOURCES = ("builder", "path", "http", "image", "registry", "inline")
HEADER = (
    "# The buildpacks each entry of project.toml resolved to, written by the preparer: commit it with the app.\n"
    "# A run with -lock installs exactly these; to resolve again and rewrite it, add -update-lock.\n"
)
Mode = Literal["frozen", "write", "update"]


@record
class LockState:
    """The lock of a run: its file, the entries read from it (``None``: there was none), and what the run does
    with it: ``frozen`` to it, ``write`` it (there was none), ``update`` it (``-update-lock``). A lock given as
    bytes (``Inputs.lock_data``) is ``in_memory``: ``path`` only names it, and nothing is written to disk; the
    report carries the lock instead.

    ``kept`` are the keys of the entries an update keeps exactly as locked (the run is frozen to them, and they
    are written back unchanged); the others are resolved again.
    """

    path: Path
    entries: tuple[Locked, ...] | None
    mode: Mode
    in_memory: bool = False
    #: The bytes the lock was read from, when it was.
    data: bytes | None = None
    kept: frozenset[str] = frozenset()
    #: The build's ``os/arch[/variant]`` the lock was made for (its ``[target]``); ``None`` in a lock written
    #: before it was recorded, or one not read.
    target: str | None = None
    #: The build's execution environment the lock was made for (its ``exec-env``); ``None`` in a lock written before
    #: it was recorded, or one not read.
    exec_env: str | None = None
    #: The entries of the lock's other targets: never frozen to, checked or moved by this run, and written back
    #: unchanged with this target's.
    others: tuple[TargetLock, ...] = ()


@record
class TargetLock:
    """One target's entries in a lock: ``target`` is ``os/arch[/variant]`` (``None``: a lock written before the
    target was recorded, which is for any target)."""

    target: str | None
    entries: tuple[Locked, ...]


@record
class LockFile:
    """A lock file as read: each target's entries, in the file's order (one, for a lock of one target or one
    written before the target was recorded)."""

    targets: tuple[TargetLock, ...]
    #: The execution environment it was last written with (``None``: a lock written before it was recorded).
    exec_env: str | None = None

    @property
    def platforms(self) -> str:
        """The targets it holds, for messages: ``linux/amd64, linux/arm64``."""
        return ", ".join(t.target or "any target" for t in self.targets)

    def of(self, platform: str | None) -> TargetLock | None:
        """The entries for ``platform`` (the same platform written otherwise counts: ``linux/arm64`` is
        ``linux/arm64/v8``), or ``None`` when the lock has none. A lock that records no target is for any."""
        from preparer.target import same_platform  # deferred: only a lock of several targets compares them

        for section in self.targets:
            if section.target is None or platform is None or same_platform(section.target, platform):
                return section
        return None

    def besides(self, platform: str | None) -> tuple[TargetLock, ...]:
        """The entries of every target but ``platform``'s."""
        own = self.of(platform)
        return tuple(t for t in self.targets if t is not own)


#: How a lock's reader says what is wrong at a key: ``fail(at, problem[, advice])``.
_Fail = Callable[..., DescriptorError]

#: How a lock given as bytes is named in messages.
LOCK_DATA_NAME = Path("Inputs.lock_data")


class NewerLockError(DescriptorError):
    """A lock written by a newer preparer (its ``lock-version`` is higher than this one reads): never rewritten in
    the old format, even with ``-update-lock``."""


def written_of(entry: GroupEntry) -> dict[str, str]:
    """The entry as written, as the lock keeps it (no credentials)."""
    from preparer.fetch.locator import redact  # deferred, as everywhere a uri is shown

    written: dict[str, str] = {}
    if entry.uri is not None:
        written["uri"] = redact(entry.uri)
    if entry.id is not None:
        written["id"] = entry.id
    if entry.version is not None:
        written["version"] = entry.version
    if entry.script is not None:
        script = entry.script
        text = f"{script.api}\x00{script.shell}\x00{script.inline}".encode()
        written["script"] = "sha256:" + hashlib.sha256(text).hexdigest()
    return written


def shown(written: Mapping[str, str]) -> str:
    return ", ".join(f'{k} = "{v}"' for k, v in written.items() if k != "script") or "script"


def read_lock(path: Path) -> LockFile:
    """The lock file at ``path``: its bytes read, then :func:`parse_lock`.

    :raises DescriptorError: as :func:`parse_lock`, or a file that cannot be read (exit 3).
    """
    from preparer.files.toml import read_bytes  # deferred: only runs with a lock read one

    return parse_lock(read_bytes(path, "lock file", limit=MAX_LOCK_BYTES), str(path))


def parse_lock(data: bytes, name: str) -> LockFile:
    """A lock file's entries and target, from its bytes; ``name`` names it in messages (its path, as the user knows
    it).

    Everything a hand edit can break is refused here, before any request: git's conflict markers, a
    ``lock-version`` this preparer does not read, unknown keys, an id or version that cannot be one, a digest that
    is not one, the same entry twice.

    :raises NewerLockError: a lock written by a newer preparer (exit 3, advising to upgrade).
    :raises DescriptorError: anything else that is not a lock this preparer wrote (exit 3), naming the file, line
        and key.
    """
    from preparer.files.toml import parse_toml  # deferred: only runs with a lock read one

    if len(data) <= MAX_LOCK_BYTES:  # a larger one (Inputs.lock_data) is refused unread, by parse_toml
        _check_conflicts(data, name)
    read = parse_toml(data, name, "lock file", limit=MAX_LOCK_BYTES)
    doc, places = read.table, read.places

    def fail(
        at: tuple[str | int, ...], problem: str, advice: str = "rerun with -update-lock"
    ) -> DescriptorError:
        key = dotted(at)
        line = places.line(at)
        spot = f" (line {line})" if line else ""
        error = DescriptorError(f"read lock file {name}", f"{key}{spot}: {problem}; {advice}")
        return with_fields(error, path=name, key=key, line=line)

    version = _check_version(doc.get("lock-version"), fail)
    made_in = _exec_env(doc.get("exec-env"), fail)
    if version == LOCK_VERSION:
        unknown = sorted(set(doc) - {"lock-version", "exec-env", "target", "buildpack"})
        if unknown:
            raise fail((unknown[0],), "unknown key")
        target = doc.get("target")
        if target is not None and not isinstance(target, dict):
            raise fail(("target",), "must be a table ([target])")
        only = TargetLock(
            None if target is None else _target(target, ("target",), fail),
            _entries(doc, (), fail, places.line),
        )
        return LockFile((only,), made_in)
    unknown = sorted(set(doc) - {"lock-version", "exec-env", "target"})
    if unknown:
        raise fail((unknown[0],), "unknown key")
    tables = doc.get("target")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise fail(("target",), "must be an array of tables ([[target]]), one per target")
    from preparer.target import same_platform  # deferred: only a lock of several targets compares them

    targets: list[TargetLock] = []
    for n, table in enumerate(tables):
        platform = _target(table, ("target", n), fail, also=("buildpack",))
        if any(t.target is not None and same_platform(t.target, platform) for t in targets):
            raise fail(("target", n), f"{platform} is locked twice: a lock has one [[target]] per target")
        targets.append(TargetLock(platform, _entries(table, ("target", n), fail, places.line)))
    return LockFile(tuple(targets), made_in)


def _entries(
    table: dict[str, Any],
    at: tuple[str | int, ...],
    fail: _Fail,
    line: Callable[[tuple[str | int, ...]], int | None],
) -> tuple[Locked, ...]:
    """The ``[[buildpack]]`` tables of ``table`` (the document, or a ``[[target]]``) read, one per entry."""
    tables = table.get("buildpack", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise fail((*at, "buildpack"), "must be an array of tables ([[buildpack]])")
    entries = tuple(_locked(t, (*at, "buildpack", n), fail) for n, t in enumerate(tables))
    first: dict[str, int] = {}
    for n, e in enumerate(entries):
        if e.entry in first:
            again = line((*at, "buildpack", first[e.entry], "entry"))
            twice = (
                f"{e.entry} is locked twice (first at line {again or '?'}): a lock has one table per entry"
            )
            raise fail((*at, "buildpack", n, "entry"), twice)
        first[e.entry] = n
    return entries


def _exec_env(value: object, fail: _Fail) -> str | None:
    """``exec-env``, the execution environment the lock was made for, or ``None`` without one."""
    from preparer.execenv import exec_env_problem  # deferred, as the lock's other readers

    if value is None:
        return None
    if not isinstance(value, str) or exec_env_problem(value) is not None:
        raise fail(("exec-env",), "must be an execution environment, as production")
    return value


def _target(table: dict[str, Any], at: tuple[str | int, ...], fail: _Fail, also: tuple[str, ...] = ()) -> str:
    """``os/arch[/variant]`` of a target's table (``[target]``, or a ``[[target]]`` with ``also`` its other keys)."""
    unknown = sorted(set(table) - {"os", "arch", "variant", *also})
    if unknown:
        raise fail((*at, unknown[0]), "unknown key")
    for key in ("os", "arch", "variant"):
        value = table.get(key, "")
        required = key != "variant"
        if not isinstance(value, str) or ((value or required) and not _TARGET_PART.fullmatch(value)):
            raise fail((*at, key), "must be lower case letters and digits, as in linux/amd64/v1")
    return "/".join(p for p in (table["os"], table["arch"], table.get("variant", "")) if p)


#: A part of a target as the lock records it (:func:`preparer.target.parse_platform` takes the same).
_TARGET_PART = re.compile(r"[a-z0-9_.]+")


def _check_conflicts(data: bytes, name: str) -> None:
    """:raises DescriptorError: ``data`` holds a git conflict marker: it is named as such, with the way out."""
    marker = _conflict_marker(data.removeprefix(b"\xef\xbb\xbf"))
    if marker is None:
        return
    line, sign = marker
    error = DescriptorError(
        f"read lock file {name}",
        f"line {line}: a git merge conflict marker ({sign}): the lock was merged with a conflict. Take either "
        f"side (git checkout --theirs {name}), then rerun with -update-lock: it resolves again only the entries "
        "the project changed",
    )
    raise with_fields(error, path=name, line=line)


def _check_version(version: object, fail: _Fail) -> int:
    """``version``, one this preparer reads (1, or 2 for a lock of several targets).

    :raises NewerLockError: ``version`` is higher than this preparer reads; DescriptorError: not one it reads."""
    if version is None:
        raise fail(
            ("lock-version",),
            f"missing: not a lock file the preparer wrote (it writes lock-version = {LOCK_VERSION})",
        )
    if isinstance(version, int) and not isinstance(version, bool) and version > TARGETS_VERSION:
        newer = fail(
            ("lock-version",),
            f"{version} is newer than this preparer reads ({TARGETS_VERSION}): the lock was written by a newer "
            "preparer",
            "upgrade the preparer (rewriting the lock in the old format would lose what it records)",
        )
        raise with_fields(NewerLockError(newer.action, newer.cause), **_fields_of(newer))
    if version not in (LOCK_VERSION, TARGETS_VERSION) or isinstance(version, bool):
        raise fail(
            ("lock-version",),
            f"unknown version {version!r} (this preparer reads {LOCK_VERSION} and {TARGETS_VERSION})",
        )
    assert isinstance(version, int)
    return version


def _fields_of(error: DescriptorError) -> dict[str, object]:
    return {"path": error.path, "key": error.key, "line": error.line}


#: The lines git writes around a conflict (``merge.conflictStyle`` diff3 and zdiff3 add ``|||||||``).
_MARKERS = (b"<<<<<<<", b"|||||||", b"=======", b">>>>>>>")


def _conflict_marker(data: bytes) -> tuple[int, str] | None:
    """The line and the marker of the first git conflict marker in ``data``, or ``None``."""
    for number, line in enumerate(data.splitlines(), 1):
        for sign in _MARKERS:
            if line.startswith(sign) and (len(line) == len(sign) or line[len(sign)] in b" \t"):
                return number, sign.decode()
    return None


def _locked(
    table: dict[str, Any],
    at: tuple[str | int, ...],
    fail: Callable[[tuple[str | int, ...], str], DescriptorError],
) -> Locked:
    known = {"entry", "written", "id", "version", "source", "pinned", "digest", "index"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise fail((*at, unknown[0]), "unknown key")
    for name in ("entry", "id", "version", "source"):
        if not isinstance(table.get(name), str) or not table[name]:
            raise fail((*at, name), "must be a non-empty string")
    for name in ("pinned", "digest", "index"):
        if name in table and not isinstance(table[name], str):
            raise fail((*at, name), "must be a string")
    written = table.get("written", {})
    if not isinstance(written, dict) or not all(isinstance(v, str) for v in written.values()):
        raise fail((*at, "written"), "must be a table of strings")
    from preparer.files.buildpack import check_id, version_problem  # deferred, as in parse_lock

    if not _ENTRY.fullmatch(table["entry"]):
        raise fail(
            (*at, "entry"),
            "must name an entry by where it is, as io.buildpacks.group[0], io.buildpacks.pack.pre.group[1] or "
            "-buildpack[0] do",
        )
    if not check_id(table["id"]):
        raise fail((*at, "id"), f"{table['id'][:80]!r} is not a buildpack id")
    problem = version_problem(table["version"])
    if problem is not None:
        raise fail((*at, "version"), problem[:120])
    source = table["source"]
    if source not in SOURCES:
        raise fail((*at, "source"), f"unknown source '{source[:40]}' (one of {', '.join(SOURCES)})")
    digest = table.get("digest")
    if digest is not None and not _is_digest(digest):
        raise fail((*at, "digest"), "must be sha256:<64 hex digits>")
    pinned = table.get("pinned")
    if source in ("image", "registry", "http") and (pinned is None or digest is None):
        raise fail(at, f"a {source} buildpack needs pinned and digest")
    if source in ("image", "registry") and not str(pinned).endswith("@" + str(digest)):
        raise fail((*at, "pinned"), "must name the image by its digest")
    index = table.get("index")
    if index is not None and (source not in ("image", "registry") or not _is_digest(index)):
        raise fail((*at, "index"), "must be sha256:<64 hex digits>, for an image or registry buildpack")
    return Locked(table["entry"], dict(written), table["id"], table["version"], source, pinned, digest, index)


#: The key of an entry, as the lock names it: where the layer that gave it has it, as written (the descriptor's
#: ``io.buildpacks.group[0]``, a 0.1 descriptor's ``build.buildpacks[0]``, its namespace's
#: ``io.buildpacks.pack.pre.group[1]``, the platform file's ``pack.post.group[0]``), or a list flag's ``-buildpack[0]``.
#: Whether the project still has it is the frozen run's question (:mod:`preparer.lock.freeze`).
_ENTRY = re.compile(
    r"(?:-(?:pre-|post-)?buildpack|(?:[^\s.\[\]]{1,64}\.){0,16}(?i:group|buildpacks))\[(?:0|[1-9][0-9]{0,5})\]"
)


def _is_digest(value: str) -> bool:
    algorithm, _, hexdigest = value.partition(":")
    return algorithm == "sha256" and len(hexdigest) == 64 and all(c in "0123456789abcdef" for c in hexdigest)


def dumps_lock(
    entries: Sequence[Locked],
    target: str | None = None,
    others: Sequence[TargetLock] = (),
    exec_env: str | None = None,
) -> bytes:
    """The lock file: the same entries (and ``target``, the ``os/arch[/variant]`` the run was for, and its
    ``exec_env``) give the same bytes. With ``others``, the entries of other targets, it holds every target: a
    ``[[target]]`` each, in the order of their names, so that the targets' order does not depend on which build
    added which."""
    from preparer.files.toml import dumps_toml  # deferred, as above

    doc: dict[str, Any] = {"lock-version": LOCK_VERSION if not others else TARGETS_VERSION}
    if exec_env is not None:
        doc["exec-env"] = exec_env
    if not others:
        if target is not None:
            doc["target"] = _target_table(target)
        doc["buildpack"] = [_table(e) for e in entries]
        return (HEADER + dumps_toml(doc)).encode()
    sections = sorted((TargetLock(target, tuple(entries)), *others), key=lambda t: t.target or "")
    doc["target"] = [
        _target_table(t.target or "") | {"buildpack": [_table(e) for e in t.entries]} for t in sections
    ]
    return (HEADER + dumps_toml(doc)).encode()


def _target_table(target: str) -> dict[str, str]:
    os_, arch, *variant = target.split("/")
    return {"os": os_, "arch": arch} | ({"variant": variant[0]} if variant else {})


def _table(e: Locked) -> dict[str, Any]:
    table: dict[str, Any] = {"entry": e.entry, "id": e.id, "version": e.version, "source": e.source}
    if e.pinned is not None:
        table["pinned"] = e.pinned
    if e.digest is not None:
        table["digest"] = e.digest
    if e.index is not None:
        table["index"] = e.index
    table["written"] = dict(sorted(e.written.items()))
    return table
