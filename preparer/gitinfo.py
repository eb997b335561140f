"""What a git repository says of the app's source, read without a ``git`` binary and without running anything.

The lifecycle image has no ``git``, and running one would obey the repository's own config (``core.fsmonitor``,
hooks, credential helpers): a repository is data here. Refs, ``HEAD``, ``packed-refs``, ``shallow`` and the
remotes of ``config`` are read by this module (each file bounded in size, never through a symbolic link);
commits and tag objects, loose or packed, through dulwich's object store (loose objects bounded in size).

``describe`` follows ``git describe --tags --always``: a tag at HEAD; else the nearest tag by git's own count
(commits walked in commit-date order, a tag's depth being the commits it does not reach, up to ten candidates)
as ``<tag>-<n>-g<abbrev>``; else the abbreviated commit. The walk stops after :data:`MAX_WALK` commits or
:data:`MAX_SECONDS` (then only the abbreviated commit is given).
"""

from __future__ import annotations

import heapq
import os
import re
import stat
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from preparer._record import record

#: Bounds on what is read: small files, the refs, the history walk.
MAX_SMALL_FILE = 4096
MAX_PACKED_REFS = 16 << 20
MAX_CONFIG = 1 << 20
MAX_TAGS = 10_000
MAX_WALK = 100_000
MAX_SECONDS = 3.0
#: The largest object read, loose or packed (commits and tags are a few hundred bytes), and the most bytes of
#: deltas one packed object may be rebuilt from.
MAX_OBJECT = 1 << 20
MAX_DELTA_CHAIN = 16 << 20
#: git's default: ten candidate tags, abbreviations of at least seven hex digits.
MAX_CANDIDATES = 10
MIN_ABBREV = 7

_OID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_REF = re.compile(r"refs/[\x21-\x7e]+")


@record
class GitSource:
    """The source as the repository tells it."""

    commit: str
    describe: str
    #: The branch (when HEAD is on one), then the tags that point at HEAD.
    refs: tuple[str, ...]
    #: The ``origin`` remote (else the first), with user names, passwords, tokens, queries removed; ``None`` without
    #: remotes.
    url: str | None


class GitUnreadable(Exception):
    """The repository cannot be read as a repository; the reason is the message (no path of the app's inside)."""


def read_git(app: Path) -> GitSource | None:
    """What ``app``'s repository says of HEAD; ``None`` when there is no repository or no commit yet.

    Everything read is inside the app: ``gitdir:`` and ``commondir`` must lead inside its real path, and no file
    or directory of the repository is reached through a symbolic link, so an app cannot make the preparer read
    (and publish in an image label) another repository of the machine.

    :raises GitUnreadable: the repository is broken, hostile or beyond the bounds above.
    """
    dirs = _git_dirs(Path(os.path.realpath(app)))
    if dirs is None:
        return None
    gitdir, common = dirs
    head = _small(gitdir / "HEAD", MAX_SMALL_FILE, "HEAD").strip()
    packed = _packed_refs(common)
    branch = None
    if head.startswith("ref: "):
        branch = head[5:].strip()
        commit = _resolve(branch, gitdir, common, packed)
    else:
        commit = _oid(head, "HEAD")
    if commit is None:
        return None  # an unborn branch: no commit yet
    try:
        return _describe_source(commit, branch, gitdir, common, packed)
    except GitUnreadable:
        raise
    # dulwich's errors on a corrupt or hostile store have no common base (KeyError, ValueError, zlib.error, ...).
    except Exception:  # noqa: BLE001
        raise GitUnreadable(
            "its objects are damaged or not what git writes (found while reading objects)"
        ) from None


def _describe_source(
    commit: str, branch: str | None, gitdir: Path, common: Path, packed: dict[str, tuple[str, str | None]]
) -> GitSource:
    from dulwich.object_store import DiskObjectStore  # deferred: only apps with a .git need it

    objects = DiskObjectStore(str(common / "objects"), loose_object_size_limit=MAX_OBJECT)
    store = _BoundedStore(common, objects, len(commit) // 2)
    try:
        tags = _tags(common, packed, store)
        at_head = sorted((t for t in tags if t.commit == commit), key=_preference)
        branches = [branch.removeprefix("refs/heads/")] if branch and branch.startswith("refs/heads/") else []
        refs = (*branches, *sorted(t.name for t in at_head))
        describe = _describe(commit, tags, store, _shallow(common)) if not at_head else at_head[0].name
        return GitSource(commit, describe, refs, _remote_url(common))
    finally:
        store.close()


def _git_dirs(app: Path) -> tuple[Path, Path] | None:
    """The repository's git directory and common directory (they differ in worktrees)."""
    dot = app / ".git"
    try:
        info = os.lstat(dot)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise GitUnreadable(f".git cannot be read ({err.strerror})") from err
    if stat.S_ISLNK(info.st_mode):
        raise GitUnreadable(".git is a symbolic link (not followed)")
    if stat.S_ISDIR(info.st_mode):
        gitdir = dot
    elif stat.S_ISREG(info.st_mode):
        text = _small(dot, MAX_SMALL_FILE, ".git").strip()
        if not text.startswith("gitdir: "):
            raise GitUnreadable(".git is a file without a gitdir line")
        gitdir = _inside(app, app / text[len("gitdir: ") :].strip(), "the git directory .git names")
    else:
        raise GitUnreadable(".git is not a directory or a file")
    if not gitdir.is_dir():
        raise GitUnreadable("the git directory .git names does not exist")
    common = gitdir
    if os.path.lexists(gitdir / "commondir"):
        named = gitdir / _small(gitdir / "commondir", MAX_SMALL_FILE, "commondir").strip()
        common = _inside(app, named, "the common directory of the worktree")
        if not common.is_dir():
            raise GitUnreadable("the common directory of the worktree does not exist")
    return gitdir, common


def _inside(app: Path, path: Path, what: str) -> Path:
    """The real path of ``path``, which must be inside ``app`` (a real path).

    :raises GitUnreadable: it leads outside the app (a worktree of a repository elsewhere, or another repository of
        the machine): that repository is not the app's to describe.
    """
    real = Path(os.path.realpath(path))
    if real != app and app not in real.parents:
        raise GitUnreadable(f"{what} is outside the app (not read)")
    return real


def _unlinked(path: Path, what: str) -> None:
    """``path`` is reached through no symbolic link (below a real directory, every name is what it says).

    :raises GitUnreadable: a link is on the way.
    """
    if os.path.realpath(path) != os.path.abspath(path):
        raise GitUnreadable(f"{what} is reached through a symbolic link (not followed)")


def _head(path: Path, size: int, what: str) -> bytes:
    """The first ``size`` bytes of the regular file ``path``, never read through a symbolic link."""
    _unlinked(path.parent, what)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as err:
        raise GitUnreadable(f"{what} cannot be read ({err.strerror})") from err
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise GitUnreadable(f"{what} is not a regular file")
        return f.read(size)


def _small(path: Path, limit: int, what: str) -> str:
    """The text of ``path`` (never through a symbolic link), at most ``limit`` bytes."""
    data = _head(path, limit + 1, what)
    if len(data) > limit:
        raise GitUnreadable(f"{what} is larger than {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise GitUnreadable(f"{what} is not UTF-8") from None


def _oid(text: str, what: str) -> str:
    if not _OID.fullmatch(text):
        raise GitUnreadable(f"{what} holds no object id")
    return text


def _packed_refs(common: Path) -> dict[str, tuple[str, str | None]]:
    """``packed-refs``: ref name -> (object id, peeled commit of an annotated tag when recorded)."""
    path = common / "packed-refs"
    if not os.path.lexists(path):
        return {}
    refs: dict[str, tuple[str, str | None]] = {}
    last = None
    for line in _small(path, MAX_PACKED_REFS, "packed-refs").splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("^") and last is not None:
            refs[last] = (refs[last][0], _oid(line[1:], "packed-refs"))
            continue
        oid, _, name = line.partition(" ")
        if not _REF.fullmatch(name):
            raise GitUnreadable("packed-refs holds a malformed line")
        refs[name], last = (_oid(oid, "packed-refs"), None), name
    return refs


def _resolve(
    name: str, gitdir: Path, common: Path, packed: dict[str, tuple[str, str | None]], depth: int = 0
) -> str | None:
    """The object id ``name`` resolves to (symbolic refs followed five deep); ``None`` for an unborn branch."""
    if depth > 5 or not _REF.fullmatch(name) or ".." in name.split("/"):
        raise GitUnreadable("HEAD names a malformed or circular ref")
    for base in (gitdir, common):
        if os.path.lexists(base / name):
            text = _small(base / name, MAX_SMALL_FILE, "a ref").strip()
            if text.startswith("ref: "):
                return _resolve(text[5:].strip(), gitdir, common, packed, depth + 1)
            return _oid(text, "a ref")
    return packed[name][0] if name in packed else None


@record
class _Tag:
    name: str
    commit: str
    annotated: bool
    date: int


def _preference(tag: _Tag) -> tuple[bool, int, str]:
    """git's choice among tags of one commit: annotated first, the newer tag first, then by name."""
    return (not tag.annotated, -tag.date, tag.name)


def _tags(common: Path, packed: dict[str, tuple[str, str | None]], store: Any) -> list[_Tag]:
    from dulwich.objects import Commit, Tag  # deferred with the store

    found: dict[str, str] = {name: oid for name, (oid, _) in packed.items() if name.startswith("refs/tags/")}
    for name in _loose_refs(common, "refs/tags"):
        found[name] = _oid(_small(common / name, MAX_SMALL_FILE, "a tag").strip(), "a tag")
    if len(found) > MAX_TAGS:
        raise GitUnreadable(f"more than {MAX_TAGS} tags")
    tags = []
    for name, oid in sorted(found.items()):
        try:
            obj = store[oid.encode()]
            annotated, date = False, 0
            for _ in range(5):  # a tag of a tag of a commit...
                if not isinstance(obj, Tag):
                    break
                annotated, date = True, date or int(obj.tag_time or 0)
                obj = store[obj.object[1]]
        except _TooLarge:
            continue  # a tag of a large blob or tree: no commit, so no candidate
        if isinstance(obj, Commit):
            tags.append(_Tag(name.removeprefix("refs/tags/"), obj.id.decode(), annotated, date))
    return tags


def _loose_refs(common: Path, top: str) -> Iterator[str]:
    if not os.path.lexists(common / top):
        return
    _unlinked(common / top, top)
    count = 0
    for dirpath, dirnames, filenames in os.walk(common / top):  # os.walk follows no directory link
        for name in filenames:
            count += 1
            if count > MAX_TAGS:
                raise GitUnreadable(f"more than {MAX_TAGS} tags")
            path = Path(dirpath) / name
            if path.is_file() and not path.is_symlink():
                yield path.relative_to(common).as_posix()
        dirnames.sort()


def _shallow(common: Path) -> frozenset[str]:
    path = common / "shallow"
    if not os.path.lexists(path):
        return frozenset()
    return frozenset(_oid(line.strip(), "shallow") for line in _small(path, MAX_CONFIG, "shallow").split())


def _describe(head: str, tags: list[_Tag], store: Any, shallow: frozenset[str]) -> str:
    """``git describe --tags --always`` for a HEAD that no tag points at."""
    names: dict[str, _Tag] = {}
    for tag in sorted(tags, key=_preference):
        names.setdefault(tag.commit, tag)
    abbrev = _abbrev(head, store)
    if not names:
        return abbrev
    walk = _Walk(store, shallow)
    best = walk.nearest(head, names)
    return f"{best[0].name}-{best[1]}-g{abbrev}" if best else abbrev


class _Walk:
    """git describe's walk: commits by date, newest first; each candidate counts the commits it does not reach."""

    def __init__(self, store: Any, shallow: frozenset[str]) -> None:
        self.store, self.shallow = store, shallow
        self.deadline = time.monotonic() + MAX_SECONDS
        self.walked = 0

    def commit(self, oid: str) -> tuple[int, tuple[str, ...]]:
        self.walked += 1
        if self.walked > MAX_WALK or time.monotonic() > self.deadline:
            raise _GaveUp
        obj = self.store[oid.encode()]
        parents = () if oid in self.shallow else tuple(p.decode() for p in obj.parents)
        return int(obj.commit_time), parents

    def nearest(self, head: str, names: dict[str, _Tag]) -> tuple[_Tag, int] | None:
        try:
            return self._nearest(head, names)
        except _GaveUp:
            return None

    def _nearest(self, head: str, names: dict[str, _Tag]) -> tuple[_Tag, int] | None:
        queue = _DateQueue()
        flags: dict[str, int] = {head: 0}
        queue.push(self.commit(head), head)
        matches: list[_Match] = []
        seen = 0
        while queue:
            (_, parents), oid = queue.pop()
            seen += 1
            tag = names.get(oid)
            if tag is not None:
                if len(matches) == MAX_CANDIDATES:
                    queue.push(
                        self.commit(oid), oid
                    )  # git gives up here, and counts the rest for the best below
                    break
                matches.append(_Match(tag, seen - 1, 1 << len(matches), len(matches)))
                flags[oid] |= matches[-1].bit
            for match in matches:
                if not flags[oid] & match.bit:
                    match.depth += 1
            if any(m.tag.annotated for m in matches) and not queue and self._covered(flags[oid], matches):
                break
            self._enqueue(parents, flags, oid, queue)
        if not matches:
            return None
        best = min(matches, key=lambda m: (m.depth, m.order))
        self._finish(best, flags, queue)
        return best.tag, best.depth

    @staticmethod
    def _covered(flag: int, matches: list[_Match]) -> bool:
        depth = min(m.depth for m in matches)
        within = 0
        for m in matches:
            if m.depth == depth:
                within |= m.bit
        return flag & within == within

    def _enqueue(self, parents: tuple[str, ...], flags: dict[str, int], oid: str, queue: _DateQueue) -> None:
        for parent in parents:
            if parent not in flags:
                flags[parent] = 0
                queue.push(self.commit(parent), parent)
            flags[parent] |= flags[oid]

    def _finish(self, best: _Match, flags: dict[str, int], queue: _DateQueue) -> None:
        """Count the commits still queued that the best candidate does not reach (git's last pass)."""
        while queue:
            (_, parents), oid = queue.pop()
            if flags[oid] & best.bit:
                if all(flags[other] & best.bit for other in queue.names()):
                    break
            else:
                best.depth += 1
            self._enqueue(parents, flags, oid, queue)


class _Match:
    """A candidate tag: how many commits it does not reach (``depth``), its bit, the order it was found in."""

    def __init__(self, tag: _Tag, depth: int, bit: int, order: int) -> None:
        self.tag, self.depth, self.bit, self.order = tag, depth, bit, order


class _DateQueue:
    """Commits newest first; among equal dates, the first queued first (git's ``commit_list_insert_by_date``)."""

    def __init__(self) -> None:
        self._items: list[tuple[int, int, tuple[int, tuple[str, ...]], str]] = []
        self._count = 0

    def __bool__(self) -> bool:
        return bool(self._items)

    def push(self, commit: tuple[int, tuple[str, ...]], oid: str) -> None:
        self._count += 1
        heapq.heappush(self._items, (-commit[0], self._count, commit, oid))

    def pop(self) -> tuple[tuple[int, tuple[str, ...]], str]:
        _, _, commit, oid = heapq.heappop(self._items)
        return commit, oid

    def names(self) -> list[str]:
        return [item[3] for item in self._items]


class _GaveUp(Exception):
    """The walk went past its bounds."""


class _TooLarge(GitUnreadable):
    """An object is larger than :data:`MAX_OBJECT` (or its deltas than :data:`MAX_DELTA_CHAIN`)."""


class _BoundedStore:
    """dulwich's object store, asked for nothing it has not been shown to be small: before an object is read, its
    size is read from its header (a packed object's, and every delta's base's and result's) and refused past
    :data:`MAX_OBJECT`, so no object is inflated beyond that (dulwich inflates no more than a header says).
    Objects are read from the repository's own directories only: no alternates, no links, regular files."""

    #: Pack object types: the deltas.
    _OFS_DELTA, _REF_DELTA = 6, 7

    def __init__(self, common: Path, store: Any, hash_size: int) -> None:
        self.store, self.objects, self.hash_size = store, common / "objects", hash_size
        alternates = self.objects / "info" / "alternates"
        if os.path.lexists(alternates) and _small(alternates, MAX_SMALL_FILE, "alternates").strip():
            raise GitUnreadable("the repository borrows objects from another (objects/info/alternates)")
        packs = self.objects / "pack"
        if os.path.lexists(packs):
            _unlinked(packs, "objects/pack")
            for entry in os.scandir(
                packs
            ):  # before dulwich opens any: a FIFO or a device would hang or never end
                if not entry.is_file(follow_symlinks=False):
                    raise GitUnreadable("objects/pack holds something else than regular files")
        self.packs: list[tuple[Any, Any]] = []
        for pack in store.packs:
            self.packs.append((pack.index, open(pack.data.path, "rb")))  # noqa: SIM115 (closed in close())
        self.checked: set[bytes] = set()

    def __getitem__(self, oid: bytes) -> Any:
        self._check(oid, 0)
        return self.store[oid]

    def iter_prefix(self, prefix: bytes) -> Iterator[bytes]:
        found: Iterator[bytes] = self.store.iter_prefix(prefix)
        return found

    def close(self) -> None:
        for _, file in self.packs:
            file.close()
        self.store.close()

    def _check(self, oid: bytes, spent: int) -> int:
        """Check the object ``oid`` (hex); return the bytes of deltas it is rebuilt from, plus ``spent``."""
        if oid in self.checked:
            return spent
        text = oid.decode("ascii", "replace")
        loose = self.objects / text[:2] / text[2:]
        if os.path.lexists(loose):
            _loose_size(loose)
            self.checked.add(oid)
            return spent
        for index, file in self.packs:
            try:
                offset = index.object_offset(oid)
            except KeyError:
                continue
            spent = self._check_packed(file, offset, spent)
            self.checked.add(oid)
            return spent
        raise KeyError(oid)

    def _check_packed(self, file: Any, offset: int, spent: int) -> int:
        file.seek(offset)
        head = file.read(64)
        kind, size, at = _pack_header(head)
        spent += size
        if size > MAX_OBJECT or spent > MAX_DELTA_CHAIN:
            raise _TooLarge(f"an object is larger than {MAX_OBJECT} bytes (not read)")
        if kind == self._OFS_DELTA:
            distance, at = _offset(head, at)
            if not 0 < distance <= offset:
                raise GitUnreadable("a delta names a base outside its pack")
            spent = self._check_packed(file, offset - distance, spent)
            self._check_target(file, offset + at)
        elif kind == self._REF_DELTA:
            base = head[at : at + self.hash_size].hex().encode()
            spent = self._check(base, spent)
            self._check_target(file, offset + at + self.hash_size)
        return spent

    def _check_target(self, file: Any, at: int) -> None:
        """The size a delta at ``at`` (its zlib data) rebuilds, read from its first inflated bytes."""
        file.seek(at)
        inflater = zlib.decompressobj()
        data = inflater.decompress(file.read(4096), 32)
        _, pos = _varint(data, 0)
        target, _ = _varint(data, pos)
        if target > MAX_OBJECT:
            raise _TooLarge(f"an object is larger than {MAX_OBJECT} bytes (not read)")


def _loose_size(path: Path) -> None:
    """A loose object's size, from its header (``<type> <size>\\0``): at most :data:`MAX_OBJECT`.

    :raises GitUnreadable: it is not a regular file, or is malformed; :class:`_TooLarge`: it is too large.
    """
    try:
        header = zlib.decompressobj().decompress(_head(path, 4096, "an object"), 64).partition(b"\0")[0]
    except zlib.error:
        raise GitUnreadable("an object is not zlib data") from None
    size = header.partition(b" ")[2]
    if not size.isdigit():
        raise GitUnreadable("an object has a malformed header")
    if int(size) > MAX_OBJECT:
        raise _TooLarge(f"an object is larger than {MAX_OBJECT} bytes (not read)")


def _pack_header(data: bytes) -> tuple[int, int, int]:
    """A packed object's type and size (inflated, or of its delta), and where what follows starts."""
    if not data:
        raise GitUnreadable("a pack ends early")
    byte = data[0]
    kind, size, shift, at = (byte >> 4) & 7, byte & 15, 4, 1
    while byte & 0x80:
        if at >= len(data) or shift > 63:
            raise GitUnreadable("a pack holds a malformed object header")
        byte = data[at]
        size |= (byte & 0x7F) << shift
        shift, at = shift + 7, at + 1
    return kind, size, at


def _offset(data: bytes, at: int) -> tuple[int, int]:
    """An offset delta's distance back to its base (git's own variable-length encoding)."""
    if at >= len(data):
        raise GitUnreadable("a pack holds a malformed delta")
    byte = data[at]
    value, at = byte & 0x7F, at + 1
    while byte & 0x80:
        if at >= len(data) or value > 1 << 56:
            raise GitUnreadable("a pack holds a malformed delta")
        byte = data[at]
        value, at = ((value + 1) << 7) | (byte & 0x7F), at + 1
    return value, at


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """A little-endian base-128 number (a delta's sizes)."""
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise GitUnreadable("a pack holds a malformed delta")
        byte = data[at]
        value, shift, at = value | (byte & 0x7F) << shift, shift + 7, at + 1
        if not byte & 0x80:
            return value, at


def _abbrev(oid: str, store: Any) -> str:
    """The shortest prefix of ``oid`` of at least seven digits that names no other object."""
    for length in range(MIN_ABBREV, len(oid)):
        prefix = oid[:length].encode()
        if sum(1 for _ in zip(range(2), store.iter_prefix(prefix), strict=False)) <= 1:
            return oid[:length]
    return oid


def _remote_url(common: Path) -> str | None:
    """The ``origin`` remote's url, else the first remote's, without credentials."""
    path = common / "config"
    if not os.path.lexists(path):
        return None
    remotes: dict[str, str] = {}
    section = None
    for raw in _small(path, MAX_CONFIG, "config").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        header = re.fullmatch(r'\[\s*remote\s+"((?:[^"\\]|\\.)*)"\s*\]', line)
        if header:
            section = header.group(1)
            continue
        if line.startswith("["):
            section = None
            continue
        key, sep, value = line.partition("=")
        if section is not None and sep and key.strip().lower() == "url":
            remotes.setdefault(section, _unquote(value.strip()))
    url = remotes.get("origin") or next(iter(remotes.values()), None)
    return redact_url(url) if url else None


def _unquote(value: str) -> str:
    for marker in (" #", " ;", "\t#", "\t;"):
        if marker in value and not value.startswith('"'):
            value = value.split(marker, 1)[0].rstrip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return value


def redact_url(url: str) -> str:
    """``url`` without user name, password, token, query or fragment; scp-like ``user@host:path`` without
    ``user@``. Control characters are dropped."""
    url = "".join(c for c in url if c.isprintable())
    if "://" in url:
        try:
            parts = urlsplit(url)
            host = parts.netloc.rpartition("@")[2]
            return urlunsplit((parts.scheme, host, parts.path, "", ""))
        except ValueError:
            return url.split("://", 1)[0] + "://"
    if re.match(r"^[^/@:]+@[^/:]+:", url):
        return url.split("@", 1)[1]
    return url
