"""The commit's transactional writes: files written under temporary names, then renamed into place together,
each relative to its directory's descriptor (never through a link), so that a run that fails or dies leaves
nothing half written.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import stat
from pathlib import Path

from preparer._fs import full_disk, make_dirs, name_beside, no_space, open_dir, open_subdir
from preparer.errors import ApplyError, NoSpaceError, with_fields

_COUNTER = itertools.count()


#: The temporary name of a pending write, ``.<name>.preparer-<pid>-<n>.tmp``.
_PENDING_NAME = re.compile(r"\..+\.preparer-[0-9]+-[0-9]+\.tmp\Z", re.DOTALL)


class PendingWrites:
    """Files written under temporary names and renamed into place together.

    Everything that can fail (creating directories, writing, ``chmod``, ``chown``) happens in :meth:`add`, so a
    failure there leaves nothing behind after :meth:`abort`; :meth:`commit` only renames. Each temporary file is
    locked (``flock``) until it is renamed or removed, so that the temporary files of a run that died (a
    ``.order.toml…tmp`` in ``<layers>``, or a ``.NAME…tmp`` in ``<platform>/env`` that the build would take for
    a variable) can be told from a live run's and are removed by the next run (:meth:`ready`).

    The directories written to may be writable by the build user while the preparer runs as root: each is opened
    once (:meth:`ready`), and every file is made, renamed and removed relative to that descriptor, never through
    a link (:mod:`preparer._fs`).
    """

    def __init__(self, places: tuple[tuple[str, Path], ...] = ()) -> None:
        #: The platform's directories by role (``("<layers>", path)``...), as a full disk names them.
        self.places = places
        #: ``(directory descriptor, temporary name, final name, final path)`` of each file written.
        self.files: list[tuple[int, str, str, Path]] = []
        self.fds: list[int] = []
        #: The descriptors of the directories made ready, by path.
        self.dirs: dict[Path, int] = {}
        #: Directories made: the platform's own (by path), and those below it (``(parent descriptor, name)``).
        self.created: list[Path | tuple[int, str]] = []

    def ready(self, base: Path, *names: str, mode: int = 0o755) -> Path:
        """Make the directory ``base/names...`` ready for writes, and remove the temporary files that runs which
        died left in it. ``base`` is a directory the platform named: it and its missing parents are created as
        named. ``names`` are reached below it one by one, never through a link, and created when missing. What is
        created is remembered, so :meth:`abort` can remove it.

        :returns: the directory's path (what :meth:`add` is given the files of).
        :raises ApplyError: a directory cannot be made or opened, or one of ``names`` is a link (exit 1).
        """
        path = base.joinpath(*names)
        if path in self.dirs:
            return path
        current = base
        try:
            self.created += make_dirs(base, mode)
            fd = open_dir(base)
            self.dirs[base] = fd
            for name in names:
                current = current / name
                fd, made = open_subdir(self.dirs[current.parent], name, current, create=True, mode=mode)
                self.dirs[current] = fd
                if made:
                    self.created.append((self.dirs[current.parent], name))
        except OSError as err:
            raise self._failed(f"create {current}", err, current) from err
        _sweep_pending(fd)
        return path

    def ready_below(self, directory: Path) -> Path:
        """:meth:`ready` for ``directory``, reached from the deepest of the platform's directories (:attr:`places`)
        that holds it: below that one, others may write (the build user, the app's author), so no link is followed
        there; above it, the path is the platform's."""
        holding = [base for _, base in self.places if directory == base or base in directory.parents]
        if not holding:
            return self.ready(directory)
        base = max(holding, key=lambda b: len(b.parts))
        return self.ready(base, *directory.relative_to(base).parts)

    def add(self, path: Path, data: bytes, mode: int = 0o644, owner: tuple[int, int] | None = None) -> None:
        """Write ``data`` to a temporary file beside ``path``, with its final mode and owner (its directory made
        ready with :meth:`ready_below` when it is not)."""
        directory = (
            self.dirs[path.parent] if path.parent in self.dirs else self.dirs[self.ready_below(path.parent)]
        )
        try:
            fd, tmp = _locked_temp(directory, path.name)
        except OSError as err:
            raise self._failed(f"write {path}", err, path.parent) from err
        self.files.append((directory, tmp, path.name, path))
        self.fds.append(fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
        except OSError as err:
            raise self._failed(f"write {path}", err, path.parent) from err
        if owner is not None:
            _give(fd, path, owner)

    def _failed(self, action: str, err: OSError, directory: Path) -> ApplyError | NoSpaceError:
        """The error of a write in ``directory`` that failed: a full disk names the directory the platform gave."""
        if full_disk(err) is None:
            return ApplyError(action, err.strerror or err)
        place, where = next(
            ((name, base) for name, base in self.places if directory == base or base in directory.parents),
            ("the directory", directory),
        )
        return with_fields(
            NoSpaceError(action, no_space(err, place, where)), place=place, directory=str(where)
        )

    def commit(self) -> None:
        """Rename every file into place."""
        for directory, tmp, name, path in self.files:
            try:
                os.replace(tmp, name, src_dir_fd=directory, dst_dir_fd=directory)
            except OSError as err:
                raise self._failed(f"write {path}", err, path.parent) from err
        self.files, self.created = [], []
        self._close()

    def abort(self) -> None:
        """Remove the temporary files and the directories :meth:`ready` created."""
        for directory, tmp, _, _ in self.files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=directory)
        for made in reversed(self.created):
            with contextlib.suppress(OSError):
                if isinstance(made, Path):
                    made.rmdir()
                else:
                    os.rmdir(made[1], dir_fd=made[0])
        self.files, self.created = [], []
        self._close()

    def _close(self) -> None:
        for fd in [*self.fds, *self.dirs.values()]:
            os.close(fd)
        self.fds, self.dirs = [], {}


def _give(fd: int, path: Path, owner: tuple[int, int]) -> None:
    """Give the file ``fd`` to the build user (``-uid``/``-gid``).

    :raises ApplyError: it cannot be (exit 1); without the right to, the message says what to change.
    """
    try:
        os.fchown(fd, *owner)
    except OSError as err:
        who = ":".join("-" if part == -1 else str(part) for part in owner)
        cause = err.strerror or str(err)
        if err.errno == errno.EPERM:
            cause = (
                f"{cause}: the preparer runs as root without the CHOWN capability (add CHOWN to the container's "
                "capabilities, or run the preparer as the build user, without -uid and -gid)"
            )
        raise ApplyError(f"give {path} to the build user {who} (-uid/-gid)", cause) from err


def _locked_temp(directory: int, name: str) -> tuple[int, str]:
    """A new temporary file beside ``name`` in the directory ``directory``, open and locked: ``(fd, its name)``."""
    import fcntl  # deferred, as tempfile is elsewhere: a C module, but not one every command needs

    for _ in range(3):
        # A name no other writer uses (tempfile would cost its import on every run): pid and a counter.
        tmp = name_beside(name, f".preparer-{os.getpid()}-{next(_COUNTER)}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o600, dir_fd=directory)
        with contextlib.suppress(OSError):  # a file system without locks: never swept, as if always in use
            fcntl.flock(fd, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            if os.lstat(tmp, dir_fd=directory).st_ino == os.fstat(fd).st_ino:
                return fd, tmp
        os.close(fd)  # swept by another run in the instant before it was locked: make another
    raise OSError(errno.EAGAIN, f"temporary files beside {name} keep disappearing")


def _sweep_pending(directory: int) -> None:
    """Remove the temporary files of pending writes in the directory ``directory`` that no live run holds."""
    import fcntl  # deferred: only runs that write files sweep

    try:
        names = [n for n in os.listdir(directory) if _PENDING_NAME.match(n)]
    except OSError:
        return
    for name in names:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=directory)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if os.lstat(name, dir_fd=directory).st_ino == os.fstat(fd).st_ino:
                os.unlink(name, dir_fd=directory)
        except OSError:
            continue  # held by a live run, or gone
        finally:
            os.close(fd)


def write_atomic(
    path: Path,
    data: bytes,
    mode: int = 0o644,
    owner: tuple[int, int] | None = None,
    places: tuple[tuple[str, Path], ...] = (),
) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and ``os.replace``.

    :param owner: ``(uid, gid)`` to own the file, or ``None`` to keep the writer's.
    :param places: the build's directories (:attr:`PendingWrites.places`): below one, no link is followed.
    :raises ApplyError: when the directory or file cannot be written (exit 1).
    """
    pending = PendingWrites(places)
    try:
        pending.add(path, data, mode, owner)
        pending.commit()
    except BaseException:
        pending.abort()
        raise
