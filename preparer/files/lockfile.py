"""The lock file's format (docs/lock.md): what each buildpack entry resolved to, read and written.

What a lock does to a run (freezing it, checking what was fetched) is :mod:`preparer.lock`'s.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from preparer._record import record
from preparer.config import GroupEntry
from preparer.errors import DescriptorError, with_fields
from preparer.files.locked import Locked

LOCK_VERSION = 1
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
    report carries the lock instead."""

    path: Path
    entries: tuple[Locked, ...] | None
    mode: Mode
    in_memory: bool = False
    #: The bytes the lock was read from, when it was.
    data: bytes | None = None


#: How a lock given as bytes is named in messages.
LOCK_DATA_NAME = Path("Inputs.lock_data")


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


def read_lock(path: Path) -> tuple[Locked, ...]:
    """The entries of the lock at ``path``.

    :raises DescriptorError: not TOML, an unknown ``lock-version``, a missing or malformed key (exit 3), naming the
        file, line and key.
    """
    from preparer.files._toml import load_toml_text  # deferred: only runs with a lock read one

    doc, text = load_toml_text(path, "lock file", limit=MAX_LOCK_BYTES)
    return _entries(doc, text, path)


def parse_lock(data: bytes, name: Path) -> tuple[Locked, ...]:
    """The entries of the lock whose bytes are ``data`` (``Inputs.lock_data``), read as a lock file is; ``name``
    names it in messages.

    :raises DescriptorError: as :func:`read_lock`.
    """
    from preparer.files._toml import decode_toml, parse_toml  # deferred, as read_lock's

    def fail(verb: str, cause: str) -> DescriptorError:
        return with_fields(DescriptorError(f"{verb} lock file", cause), path=str(name))

    where = f"{name}: "
    if len(data) > MAX_LOCK_BYTES:
        raise fail("read", f"{where}larger than {MAX_LOCK_BYTES} bytes")
    text = decode_toml(data, fail, where)
    return _entries(parse_toml(text, fail, where), text, name)


def _entries(doc: Mapping[str, Any], text: str, path: Path) -> tuple[Locked, ...]:
    from preparer.files._positions import key_positions  # deferred, as read_lock's

    positions = key_positions(text)

    def fail(at: tuple[str | int, ...], problem: str) -> DescriptorError:
        key = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in at).lstrip(".")
        line = positions.get(at, (None, None))[0]
        where = f" (line {line})" if line else ""
        error = DescriptorError(f"read lock file {path}", f"{key}{where}: {problem}; rerun with -update-lock")
        return with_fields(error, path=str(path), key=key, line=line)

    version = doc.get("lock-version")
    if version is None:
        raise fail(
            ("lock-version",),
            f"missing: not a lock file the preparer wrote (it writes lock-version = {LOCK_VERSION})",
        )
    if version != LOCK_VERSION:
        raise fail(("lock-version",), f"unknown version {version!r} (this preparer reads {LOCK_VERSION})")
    unknown = sorted(set(doc) - {"lock-version", "buildpack"})
    if unknown:
        raise fail((unknown[0],), "unknown key")
    tables = doc.get("buildpack", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise fail(("buildpack",), "must be an array of tables ([[buildpack]])")
    return tuple(_locked(table, ("buildpack", n), fail) for n, table in enumerate(tables))


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


def _is_digest(value: str) -> bool:
    algorithm, _, hexdigest = value.partition(":")
    return algorithm == "sha256" and len(hexdigest) == 64 and all(c in "0123456789abcdef" for c in hexdigest)


def dumps_lock(entries: Sequence[Locked]) -> bytes:
    """The lock file: the same entries give the same bytes."""
    from preparer.files._toml import dumps_toml  # deferred, as above

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
    return (HEADER + dumps_toml({"lock-version": LOCK_VERSION, "buildpack": tables})).encode()
