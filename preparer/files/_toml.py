"""Reading TOML with readable errors, and writing it atomically and deterministically."""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import stat
import threading
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
) -> TOMLTable:
    """Read and parse the TOML file ``path``, the one loader of every TOML file the preparer reads.

    Syntax errors name the file, line and column. The file must be a regular file of at most ``limit`` bytes.

    :param what: names the file's role in messages, e.g. ``project descriptor``.
    :param error: the class of error to raise (the descriptor's are exit 3; the builder's own files differ).
    :param action: the message's action, when not ``read <what>`` / ``parse <what>``.
    :raises DescriptorError: (or ``error``) when the file cannot be read or is not valid TOML.
    """
    try:
        data = read_regular(path, limit)
    except FileNotFoundError:
        raise error(action or f"read {what}", f"{path} does not exist") from None
    except IsADirectoryError:
        raise error(action or f"read {what}", f"{path} is a directory") from None
    except OSError as err:
        raise error(action or f"read {what}", f"{path}: {err.strerror or err}") from None
    except ValueError as why:
        raise error(action or f"read {what}", f"{path}: {why}") from None
    try:
        return tomllib.loads(data.decode())
    except UnicodeDecodeError as err:
        raise error(action or f"parse {what}", f"{path}: not UTF-8 text ({err.reason})") from None
    except tomllib.TOMLDecodeError as err:
        raise error(action or f"parse {what}", f"{path}: {err}") from None
    except RecursionError:
        raise error(action or f"parse {what}", f"{path}: nested too deeply") from None


def dumps_toml(doc: dict[str, Any]) -> str:
    """Serialise ``doc`` with tomli-w; key order is the dict's, so equal inputs give equal bytes."""
    import tomli_w  # only runs that write TOML need it

    return tomli_w.dumps(doc)


class PendingWrites:
    """Files written under temporary names and renamed into place together.

    Everything that can fail (creating directories, writing, ``chmod``, ``chown``) happens in :meth:`add`, so a
    failure there leaves nothing behind after :meth:`abort`; :meth:`commit` only renames.
    """

    def __init__(self) -> None:
        self.files: list[tuple[str, Path]] = []
        self.created: list[Path] = []

    def mkdir(self, path: Path, mode: int = 0o755) -> None:
        """Create ``path`` and its missing parents (remembered, so :meth:`abort` can remove them)."""
        try:
            self.created += make_dirs(path, mode)
        except OSError as err:
            raise ApplyError(f"create {path}", err.strerror or err) from None

    def add(self, path: Path, data: bytes, mode: int = 0o644, owner: tuple[int, int] | None = None) -> None:
        """Write ``data`` to a temporary file beside ``path``, with its final mode and owner."""
        # A name no other writer uses (tempfile would cost its import on every run): pid, thread, and a counter.
        tmp = str(path.parent / f".{path.name}.{os.getpid()}.{threading.get_ident()}.{next(_COUNTER)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except OSError as err:
            raise ApplyError(f"write {path}", err.strerror or err) from None
        self.files.append((tmp, path))
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode)
            if owner is not None:
                os.chown(tmp, *owner)
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

    def abort(self) -> None:
        """Remove the temporary files and the directories :meth:`mkdir` created."""
        for tmp, _ in self.files:
            Path(tmp).unlink(missing_ok=True)
        for directory in reversed(self.created):
            with contextlib.suppress(OSError):
                directory.rmdir()
        self.files, self.created = [], []


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
