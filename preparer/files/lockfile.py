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
from preparer.entries import GroupEntry
from preparer.errors import DescriptorError, with_fields
from preparer.files.locked import Locked

LOCK_VERSION = 1
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


@record
class LockFile:
    """A lock file as read: its entries, and the ``os/arch[/variant]`` it was made for (``None``: a lock written
    before the target was recorded)."""

    entries: tuple[Locked, ...]
    target: str | None = None
    #: The execution environment it was made for (``None``: a lock written before it was recorded).
    exec_env: str | None = None


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
        key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in at).lstrip(".")
        line = places.line(at)
        spot = f" (line {line})" if line else ""
        error = DescriptorError(f"read lock file {name}", f"{key}{spot}: {problem}; {advice}")
        return with_fields(error, path=name, key=key, line=line)

    _check_version(doc.get("lock-version"), fail)
    unknown = sorted(set(doc) - {"lock-version", "exec-env", "target", "buildpack"})
    if unknown:
        raise fail((unknown[0],), "unknown key")
    tables = doc.get("buildpack", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise fail(("buildpack",), "must be an array of tables ([[buildpack]])")
    entries = tuple(_locked(table, ("buildpack", n), fail) for n, table in enumerate(tables))
    first: dict[str, int] = {}
    for n, e in enumerate(entries):
        if e.entry in first:
            again = places.line(("buildpack", first[e.entry], "entry"))
            twice = (
                f"{e.entry} is locked twice (first at line {again or '?'}): a lock has one table per entry"
            )
            raise fail(("buildpack", n, "entry"), twice)
        first[e.entry] = n
    return LockFile(entries, _target(doc.get("target"), fail), _exec_env(doc.get("exec-env"), fail))


def _exec_env(value: object, fail: Callable[..., DescriptorError]) -> str | None:
    """``exec-env``, the execution environment the lock was made for, or ``None`` without one."""
    from preparer.execenv import exec_env_problem  # deferred, as the lock's other readers

    if value is None:
        return None
    if not isinstance(value, str) or exec_env_problem(value) is not None:
        raise fail(("exec-env",), "must be an execution environment, as production")
    return value


def _target(table: object, fail: Callable[..., DescriptorError]) -> str | None:
    """``os/arch[/variant]`` of the ``[target]`` table, or ``None`` without one."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise fail(("target",), "must be a table ([target])")
    unknown = sorted(set(table) - {"os", "arch", "variant"})
    if unknown:
        raise fail(("target", unknown[0]), "unknown key")
    for key in ("os", "arch", "variant"):
        value = table.get(key, "")
        required = key != "variant"
        if not isinstance(value, str) or ((value or required) and not _TARGET_PART.fullmatch(value)):
            raise fail(("target", key), "must be lower case letters and digits, as in linux/amd64/v1")
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


def _check_version(version: object, fail: Callable[..., DescriptorError]) -> None:
    """:raises NewerLockError: ``version`` is higher than this preparer reads; DescriptorError: not one it reads."""
    if version is None:
        raise fail(
            ("lock-version",),
            f"missing: not a lock file the preparer wrote (it writes lock-version = {LOCK_VERSION})",
        )
    if isinstance(version, int) and not isinstance(version, bool) and version > LOCK_VERSION:
        newer = fail(
            ("lock-version",),
            f"{version} is newer than this preparer reads ({LOCK_VERSION}): the lock was written by a newer "
            "preparer",
            "upgrade the preparer (rewriting the lock in the old format would lose what it records)",
        )
        raise with_fields(NewerLockError(newer.action, newer.cause), **_fields_of(newer))
    if version != LOCK_VERSION:
        raise fail(("lock-version",), f"unknown version {version!r} (this preparer reads {LOCK_VERSION})")


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


def dumps_lock(entries: Sequence[Locked], target: str | None = None, exec_env: str | None = None) -> bytes:
    """The lock file: the same entries (and ``target``, the ``os/arch[/variant]`` the run was for, and its
    ``exec_env``) give the same bytes."""
    from preparer.files.toml import dumps_toml  # deferred, as above

    tables = []
    for e in entries:
        table: dict[str, Any] = {"entry": e.entry, "id": e.id, "version": e.version, "source": e.source}
        if e.pinned is not None:
            table["pinned"] = e.pinned
        if e.digest is not None:
            table["digest"] = e.digest
        if e.index is not None:
            table["index"] = e.index
        table["written"] = dict(sorted(e.written.items()))
        tables.append(table)
    doc: dict[str, Any] = {"lock-version": LOCK_VERSION}
    if exec_env is not None:
        doc["exec-env"] = exec_env
    if target is not None:
        os_, arch, *variant = target.split("/")
        doc["target"] = {"os": os_, "arch": arch} | ({"variant": variant[0]} if variant else {})
    doc["buildpack"] = tables
    return (HEADER + dumps_toml(doc)).encode()
