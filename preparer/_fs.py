"""Directories with the modes the preparer means, whatever the process umask, reached without following a link
that someone else planted.

A hardened container's umask is often 027 or 077, and ``mkdir(mode=…)`` is masked by it (``Path.mkdir`` also
creates missing parents with the default mode). Everything the build user must read is created through
:func:`make_dirs`, which sets each new directory's mode explicitly.

The directories the platform names (``<buildpacks>``, ``<layers>``, ``<platform>``, ``<app>``) may be writable by
the build user, while the preparer runs as root. A path below them is never handed to the kernel as a string for
a write: the directory is opened once (:func:`open_dir`), and everything below it is reached relative to that
descriptor, one name at a time, refusing links (:func:`open_subdir`), so a link planted where a directory was
expected cannot lead root elsewhere (docs/security.md, "Directories the build user can write").
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def build_owner(uid: int | None, gid: int | None) -> tuple[int, int] | None:
    """``(uid, gid)`` for files the build reads (``-1``: the one not given, left as it is), when running as root and
    either was given; else ``None``: the files stay the process's."""
    if os.geteuid() != 0 or (uid is None and gid is None):
        return None
    return (uid if uid is not None else -1, gid if gid is not None else -1)


def make_dirs(path: Path, mode: int = 0o755) -> list[Path]:
    """Create ``path`` and any missing parents, each with exactly ``mode``; existing ones are left as they are.

    One ``mkdir`` call when ``path`` exists already, so it is cheap to call per file.

    :returns: the directories created, outermost first.
    :raises OSError: as ``mkdir`` does (``FileExistsError`` is not raised for an existing ``path``).
    """
    try:
        path.mkdir(mode)
    except FileExistsError:
        return []
    except FileNotFoundError:
        created = make_dirs(path.parent, mode)
        try:
            path.mkdir(mode)
        except FileExistsError:  # made meanwhile by a concurrent writer
            return created
        os.chmod(path, mode)
        return [*created, path]
    os.chmod(path, mode)
    return [path]


def name_beside(name: str, tail: str) -> str:
    """A hidden name beside the file ``name``: ``.<name><tail>``, with as much of ``name`` as a file's name has room
    for (255 bytes), so that a file or directory whose name is as long as it can be is staged too."""
    head = os.fsencode(name)[: 255 - 1 - len(os.fsencode(tail))]
    return f".{os.fsdecode(head)}{tail}"


def is_inside(root: str, path: str) -> bool:
    """Whether the resolved ``path`` is ``root`` or below it (both already ``os.path.realpath``)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def new_dir(parent: Path, prefix: str, suffix: str = "", mode: int = 0o700) -> Path:
    """A new directory ``parent/<prefix><random><suffix>``, made by this call (``mkdir`` refuses a name that
    exists, a link included) with exactly ``mode``: ``tempfile.mkdtemp``'s guarantees, without importing tempfile
    and random (2 ms of every run's start-up, for a name)."""
    for _ in range(100):
        path = parent / f"{prefix}{os.urandom(6).hex()}{suffix}"
        try:
            path.mkdir(0o700)
        except FileExistsError:
            continue
        if mode != 0o700:
            path.chmod(mode)
        return path
    raise FileExistsError(errno.EEXIST, "no unused name found", str(parent / prefix))


@contextmanager
def temp_file(directory: Path, prefix: str) -> Iterator[Path]:
    """A new empty file in ``directory``, removed on exit unless it was renamed away meanwhile."""
    import tempfile  # deferred: it brings random and hashlib, which runs that write no temporary file skip

    fd, name = tempfile.mkstemp(prefix=prefix, dir=directory)
    os.close(fd)
    path = Path(name)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


#: A claimed directory's name while it is being claimed (``mkdtemp``'s name, before it is locked and renamed).
_BEING_CLAIMED = ".new"


@contextmanager
def claimed_dir(parent: Path, prefix: str) -> Iterator[Path]:
    """A new private directory ``parent/<prefix><random>`` for one run, removed when the block ends.

    The run holds a lock on the directory (``flock``) for as long as it lives: the kernel drops it when the
    process dies, however it dies, so :func:`sweep` can tell what a dead run left from what a live one uses.
    The directory gets its final name only once it is locked.

    :raises OSError: the directory cannot be made.
    """
    import shutil  # deferred: only runs that fetch claim directories

    fresh, path, fd = _claim(parent, prefix)
    try:
        yield path
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def _claim(parent: Path, prefix: str) -> tuple[Path, Path, int]:
    """A directory made, locked, then given its final name: ``(its first name, its final name, the locked
    descriptor)``. A sweep may remove the directory between the ``mkdir`` and the lock (it is then nobody's, as a
    killed run's is): the rename finds it gone, and another is made."""
    import fcntl  # deferred, as in claimed_dir

    for _ in range(100):
        fresh = new_dir(parent, prefix, _BEING_CLAIMED)
        try:
            fd = os.open(fresh, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            continue  # swept before it was opened
        path = fresh.with_name(fresh.name.removesuffix(_BEING_CLAIMED))
        try:  # a file system without locks: never swept, as if always in use
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_EX)
            os.rename(fresh, path)
        except FileNotFoundError:
            os.close(fd)
            continue  # swept before it was locked
        except BaseException:
            os.close(fd)
            raise
        return fresh, path, fd
    raise FileExistsError(errno.EEXIST, "every directory made was swept before it was claimed", str(parent))


def sweep(parent: Path, prefix: str) -> list[str]:
    """Remove the directories :func:`claimed_dir` made in ``parent`` for runs that died (killed, or out of
    memory): those of this user whose lock nobody holds. A directory a live run holds is never touched.

    :returns: the names removed.
    """
    import fcntl  # deferred, as in claimed_dir: only runs that fetch sweep
    import shutil

    removed: list[str] = []
    try:
        entries = [e for e in os.scandir(parent) if e.name.startswith(prefix)]
    except OSError:
        return removed
    for entry in entries:
        try:
            info = entry.stat(follow_symlinks=False)
            fd = os.open(entry.path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # gone meanwhile, or not a directory
        try:
            if info.st_uid != os.geteuid():
                continue
            try:  # one being claimed and not locked yet is removed too: its claimer makes another (_claim)
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: a live run's
            shutil.rmtree(entry.path, ignore_errors=True)
            if not os.path.lexists(entry.path):
                removed.append(entry.name)
        finally:
            os.close(fd)
    return removed


#: Per-file work on trees (extracting an archive, recording a tree) runs one thread at a time.
#: Each file costs a few short system calls, each of which lets go of the interpreter lock; with two threads at
#: it, every call hands the lock to the other thread and waits to get it back, and two extractions at once took
#: 2.8 times as long as one (four: 7 times). Downloading, hashing and inflating go on in parallel meanwhile.
PER_FILE_WORK = threading.Lock()


def _per_file_work_in_child() -> None:
    """A forked child has one thread, and none of its parent's extractions: the lock a sibling thread held when the
    process forked is free in the child (held, every extraction of the child waited for it forever)."""
    PER_FILE_WORK._at_fork_reinit()  # type: ignore[attr-defined]  # CPython's own, as logging's handlers use it


os.register_at_fork(after_in_child=_per_file_work_in_child)


def current_umask() -> int:
    """The process's umask, read without changing it (``/proc/self/status``); ``0o777`` when it cannot be read,
    so that callers set every mode explicitly."""
    try:
        with open("/proc/self/status", "rb") as status:
            for line in status:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o777


def file_record(info: os.stat_result) -> list[int]:
    """What the download cache records of a file, to tell later that it is unchanged: inode, size, modification
    time, mode, owner."""
    return [info.st_ino, info.st_size, info.st_mtime_ns, stat.S_IMODE(info.st_mode), info.st_uid]


def dir_record(info: os.stat_result) -> list[int]:
    """What the download cache records of a directory: inode, modification time (any entry added, removed or
    replaced changes it), owner, mode."""
    return [info.st_ino, info.st_mtime_ns, info.st_uid, stat.S_IMODE(info.st_mode)]


#: Flags of a directory opened to work relative to: never one to read or write through.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class UnsafeDirectory(OSError):
    """A directory below a platform directory is not what it must be (a link, not a directory, someone else's); the
    message names it and says why."""


def open_dir(path: Path) -> int:
    """A descriptor of the directory ``path`` that the platform named (links in its own path are the platform's)."""
    return os.open(path, DIR_FLAGS)


def open_subdir(
    parent: int, name: str, shown: Path, *, create: bool = False, mode: int = 0o755, owned: bool = False
) -> tuple[int, bool]:
    """Open the directory ``name`` of the directory ``parent`` (a descriptor), never through a link; with
    ``create``, make it (with exactly ``mode``) when it is missing. ``shown`` is its path, for messages.

    :param owned: it must belong to the preparer's user or to root (a directory whose contents root changes).
    :returns: ``(descriptor, whether it was made)``.
    :raises UnsafeDirectory: it is a link, not a directory, or (``owned``) another user's.
    :raises OSError: as ``mkdir`` and ``open`` do.
    """
    made = False
    if create:
        try:
            os.mkdir(name, mode, dir_fd=parent)
            made = True
        except FileExistsError:
            pass
    try:
        fd = os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        # Linux says ENOTDIR for a link opened with O_DIRECTORY | O_NOFOLLOW: tell the two apart.
        if stat.S_ISLNK(os.lstat(name, dir_fd=parent).st_mode):
            raise UnsafeDirectory(err.errno, f"{shown} is a symbolic link (not followed)") from err
        raise UnsafeDirectory(err.errno, f"{shown} is not a directory") from err
    try:
        info = os.fstat(fd)
        if owned and info.st_uid not in (0, os.geteuid()):
            raise UnsafeDirectory(
                errno.EPERM, f"{shown} is owned by uid {info.st_uid}, not by the preparer's user or root"
            )
        if made and stat.S_IMODE(info.st_mode) != mode:
            os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd, made


def shared_with_others(directory: Path) -> tuple[Path, str] | None:
    """Whether another user could replace what is ours in ``directory`` (rename it, plant a link in its place):
    ``(the directory above that allows it, why)``, or ``None``. ``directory`` and every directory above it must
    belong to root or the preparer's user and be writable only by their owner, unless sticky (as ``/tmp`` is).
    Missing directories are skipped."""
    path = Path(os.path.abspath(directory))
    for current in (path, *path.parents):
        try:
            info = current.lstat()
        except FileNotFoundError:
            continue
        except OSError as err:
            return current, f"cannot be read ({err.strerror})"
        if stat.S_ISLNK(info.st_mode):
            # A link above is as trusted as its target and the directory holding it.
            problem = shared_with_others(Path(os.path.realpath(current)))
            if problem is not None:
                return problem
            continue
        if info.st_uid not in (0, os.geteuid()):
            return current, f"is owned by uid {info.st_uid}"
        if info.st_mode & 0o022 and not info.st_mode & stat.S_ISVTX:
            return current, "is writable by others and not sticky"
    return None


#: The errors of a file system with no room left for this process: out of blocks or inodes, or out of quota.
FULL = frozenset({errno.ENOSPC, errno.EDQUOT})


def full_disk(err: BaseException | None) -> OSError | None:
    """The ``ENOSPC`` or ``EDQUOT`` error behind ``err`` (itself, or what it was raised from), or ``None``."""
    seen = 0
    while err is not None and seen < 10:
        if isinstance(err, OSError) and err.errno in FULL:
            return err
        err, seen = err.__cause__ or err.__context__, seen + 1
    return None


class KeptCopyFull(OSError):
    """A full disk met writing the copy of a download that is kept as it streams (into the download cache, or
    staging without one), told apart from the writes of what reads the same stream (an extraction into staging):
    the original's ``errno`` and words, raised from it."""


@contextmanager
def keeping_copy() -> Iterator[None]:
    """For the block, which writes a download's kept copy (and reads nothing from disk), a full disk is raised as
    a :class:`KeptCopyFull` (from the original)."""
    try:
        yield
    except OSError as err:
        if err.errno not in FULL or isinstance(err, KeptCopyFull):
            raise
        raise KeptCopyFull(err.errno, err.strerror) from err


def full_in(err: BaseException, root: Path) -> OSError | None:
    """The full disk behind ``err`` when it is that of the directory ``root`` (the download cache): met writing a
    kept copy there (:class:`KeptCopyFull`), or naming a file below ``root``; ``None`` otherwise."""
    full = full_disk(err)
    if full is None:
        return None
    if isinstance(full, KeptCopyFull):
        return full
    name = full.filename
    return full if isinstance(name, str) and is_inside(str(root), name) else None


def no_space(err: OSError, place: str, directory: Path | str) -> str:
    """The cause of a full file system, naming the directory the run could not write in and its role
    (``<buildpacks>``, ``<layers>``...): ``no space left on device in <layers> (/layers)``."""
    cause = f"no space left on device in {place} ({directory})"
    if err.errno == errno.EDQUOT:
        cause += f": the disk quota of uid {os.geteuid()} is used up"
    return cause


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, which must be a regular file (a link to one is fine) of at most ``limit`` bytes.

    Opened without blocking, so a FIFO or a terminal is refused instead of waited on, and a device such as
    ``/dev/zero`` is refused instead of read forever.

    :raises OSError: as ``open`` does; ``ValueError`` with the reason for anything that is not such a file.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory")
        if not stat.S_ISREG(info.st_mode):
            raise ValueError("not a regular file")
        if info.st_size > limit:
            raise ValueError(f"larger than {limit} bytes")
        chunks, size = [], 0
        while chunk := os.read(fd, limit + 1 - size):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise ValueError(f"larger than {limit} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)
