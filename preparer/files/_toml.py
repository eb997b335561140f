"""Reading TOML with readable errors, and writing it atomically and deterministically."""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from preparer._fs import make_dirs
from preparer._types import TOMLTable
from preparer.errors import ApplyError, DescriptorError, PreparerError

_COUNTER = itertools.count()


#: The largest TOML file read (a project descriptor is a few KiB; a platform's files are not much more).
MAX_TOML = 1 << 20


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


def load_toml(
    path: Path,
    what: str,
    *,
    error: type[PreparerError] = DescriptorError,
    action: str | None = None,
    limit: int = MAX_TOML,
    named: bool = True,
) -> TOMLTable:
    """Read and parse the TOML file ``path``, the one loader of every TOML file the preparer reads.

    Syntax errors name the file, line and column. The file must be a regular file of at most ``limit`` bytes.

    :param what: names the file's role in messages, e.g. ``project descriptor``.
    :param error: the class of error to raise (the descriptor's are exit 3; the builder's own files differ).
    :param action: the message's action, when not ``read <what>`` / ``parse <what>``.
    :param named: whether causes start with ``path``; not when ``action`` names the file as the user knows it
        (a staged copy's path means nothing to them).
    :raises DescriptorError: (or ``error``) when the file cannot be read or is not valid TOML.
    """
    where = f"{path}: " if named else ""

    def fail(verb: str, cause: str) -> PreparerError:
        return error(action or f"{verb} {what}", cause)

    try:
        data = read_regular(path, limit)
    except FileNotFoundError:
        raise fail("read", f"{path} does not exist" if named else f"there is no {path.name}") from None
    except IsADirectoryError:
        raise fail("read", f"{path} is a directory" if named else f"{path.name} is a directory") from None
    except OSError as err:
        raise fail("read", f"{where}{err.strerror or err}") from None
    except ValueError as why:
        raise fail("read", f"{where}{why}") from None
    try:
        return tomllib.loads(data.decode())
    except UnicodeDecodeError as err:
        raise fail("parse", f"{where}not UTF-8 text ({err.reason})") from None
    except tomllib.TOMLDecodeError as err:
        raise fail("parse", f"{where}{err}") from None
    except RecursionError:
        raise fail("parse", f"{where}nested too deeply") from None


def dumps_toml(doc: dict[str, Any]) -> str:
    """Serialise ``doc`` with tomli-w; key order is the dict's, so equal inputs give equal bytes."""
    import tomli_w  # deferred: only runs that write TOML need it

    return tomli_w.dumps(doc)


#: The temporary name of a pending write, ``.<name>.preparer-<pid>-<n>.tmp``.
_PENDING_NAME = re.compile(r"\..+\.preparer-\d+-\d+\.tmp\Z", re.DOTALL)


class PendingWrites:
    """Files written under temporary names and renamed into place together.

    Everything that can fail (creating directories, writing, ``chmod``, ``chown``) happens in :meth:`add`, so a
    failure there leaves nothing behind after :meth:`abort`; :meth:`commit` only renames. Each temporary file is
    locked (``flock``) until it is renamed or removed, so that the temporary files of a run that died (a
    ``.order.toml…tmp`` in ``<layers>``, or a ``.NAME…tmp`` in ``<platform>/env`` that the build would take for
    a variable) can be told from a live run's and are removed by the next run (:meth:`ready`).
    """

    def __init__(self) -> None:
        self.files: list[tuple[str, Path]] = []
        self.fds: list[int] = []
        self.created: list[Path] = []

    def ready(self, path: Path, mode: int = 0o755) -> None:
        """Make the directory ``path`` ready for writes: create it and its missing parents (remembered, so
        :meth:`abort` can remove them), and remove the temporary files that runs which died left in it."""
        try:
            self.created += make_dirs(path, mode)
        except OSError as err:
            raise ApplyError(f"create {path}", err.strerror or err) from None
        _sweep_pending(path)

    def add(self, path: Path, data: bytes, mode: int = 0o644, owner: tuple[int, int] | None = None) -> None:
        """Write ``data`` to a temporary file beside ``path``, with its final mode and owner."""
        try:
            fd, tmp = _locked_temp(path)
        except OSError as err:
            raise ApplyError(f"write {path}", err.strerror or err) from None
        self.files.append((tmp, path))
        self.fds.append(fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
            if owner is not None:
                os.fchown(fd, *owner)
        except OSError as err:
            raise ApplyError(f"write {path}", err.strerror or err) from None

    def commit(self) -> None:
        """Rename every file into place."""
        for tmp, path in self.files:
            try:
                os.replace(tmp, path)
            except OSError as err:
                raise ApplyError(f"write {path}", err.strerror or err) from None
        self.files = []
        self._close()

    def abort(self) -> None:
        """Remove the temporary files and the directories :meth:`ready` created."""
        for tmp, _ in self.files:
            Path(tmp).unlink(missing_ok=True)
        self._close()
        for directory in reversed(self.created):
            with contextlib.suppress(OSError):
                directory.rmdir()
        self.files, self.created = [], []

    def _close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def _locked_temp(path: Path) -> tuple[int, str]:
    """A new temporary file beside ``path``, open and locked: ``(fd, name)``."""
    import fcntl  # deferred, as tempfile is elsewhere: a C module, but not one every command needs

    for _ in range(3):
        # A name no other writer uses (tempfile would cost its import on every run): pid and a counter.
        tmp = str(path.parent / f".{path.name}.preparer-{os.getpid()}-{next(_COUNTER)}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with contextlib.suppress(OSError):  # a file system without locks: never swept, as if always in use
            fcntl.flock(fd, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            if Path(tmp).lstat().st_ino == os.fstat(fd).st_ino:
                return fd, tmp
        os.close(fd)  # swept by another run in the instant before it was locked: make another
    raise OSError(errno.EAGAIN, f"temporary files beside {path} keep disappearing")


def _sweep_pending(directory: Path) -> None:
    """Remove the temporary files of pending writes in ``directory`` that no live run holds."""
    import fcntl  # deferred: only runs that write files sweep

    try:
        names = [n for n in os.listdir(directory) if _PENDING_NAME.match(n)]
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            Path(path).unlink()
        except OSError:
            continue  # held by a live run, or gone
        finally:
            os.close(fd)


def write_atomic(path: Path, data: bytes, mode: int = 0o644, owner: tuple[int, int] | None = None) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and ``os.replace``.

    :param owner: ``(uid, gid)`` to own the file, or ``None`` to keep the writer's.
    :raises ApplyError: when the directory or file cannot be written (exit 1).
    """
    pending = PendingWrites()
    try:
        pending.add(path, data, mode, owner)
        pending.commit()
    except BaseException:
        pending.abort()
        raise
