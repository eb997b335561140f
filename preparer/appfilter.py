"""``include`` / ``exclude``: ``.gitignore`` patterns applied to ``<app>`` before the build.

Each pattern matches as in git, through ``pathspec``'s ``GitIgnoreSpec`` (anchoring, ``**``, directory patterns),
relative to the app root. Patterns are matched per path and the last matching one wins, so a ``!`` pattern takes
effect on every path it matches, also below a directory an earlier pattern matched:
``include = ["/dist/src", "!/dist/src/**/*.map"]`` keeps no ``.map`` file. This is pack's behaviour, which the
descriptors in the wild are written for; git's rule that a file below an excluded directory cannot be re-included
does not apply. A matched directory is taken or dropped whole only when no later ``!`` pattern could change a path
below it.

- exclude: every matched file, symlink and directory (with its content) is removed;
- include: everything not matched is removed, and directories left without included files with it.

The descriptor file is never removed (buildpacks may read it), and symlinks are removed, never followed.
Planning only reads; :func:`remove` deletes what the plan lists.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from preparer._fs import open_dir, open_subdir
from preparer._record import record
from preparer.errors import ApplyError


@record
class Removal:
    """What the filter removes from ``<app>``: files (and symlinks) first, then directories, deepest first."""

    root: Path
    files: tuple[Path, ...] = ()
    dirs: tuple[Path, ...] = ()
    #: Include patterns that decide no path of the app (a mistyped ``scr/`` for ``src/``).
    unmatched: tuple[str, ...] = ()
    #: Whether anything of the app but the descriptor stays.
    keeps_any: bool = True


def plan_removal(
    app_dir: Path, include: Sequence[str] | None, exclude: Sequence[str] | None, *keep: Path | None
) -> Removal:
    """List what ``include`` or ``exclude`` removes from ``app_dir``; nothing is changed.

    :param keep: paths never removed (the descriptor, the lock file the run reads or writes), nor the directories
        holding them; ``None`` stands for none.
    :raises ApplyError: when ``app_dir`` cannot be read (exit 1).
    """
    if include is None and exclude is None:
        return Removal(app_dir)
    kept = (_relative(path, app_dir) for path in keep)
    planner = _Planner(include, exclude, tuple(path for path in kept if path is not None))
    planner.walk(app_dir, "")
    unmatched = tuple(
        str(pattern.pattern)
        for index, pattern in enumerate(planner.spec.patterns)
        if planner.including and pattern.include and index not in planner.used
    )
    return Removal(app_dir, tuple(planner.files), tuple(planner.dirs), unmatched, planner.kept > 0)


class _Planner:
    """One walk of the app tree, deciding each path by the last pattern that matches it."""

    def __init__(
        self, include: Sequence[str] | None, exclude: Sequence[str] | None, keep: tuple[str, ...]
    ) -> None:
        import pathspec  # deferred: only runs with include/exclude need it

        self.including = include is not None
        self.spec = pathspec.GitIgnoreSpec.from_lines(include if include is not None else exclude or ())
        # The last negation: a directory matched by a later pattern can be decided whole.
        self.last_negation = max(
            (i for i, p in enumerate(self.spec.patterns) if p.include is False), default=-1
        )
        self.keep = keep
        self.files: list[Path] = []
        self.dirs: list[Path] = []
        #: The patterns that decided a path; how many paths (but the descriptor) stay.
        self.used: set[int] = set()
        self.kept = 0

    def decide(self, rel: str) -> bool:
        """Whether ``rel`` is matched (by the last pattern that matches it), noting the pattern."""
        result = self.spec.check_file(rel)
        if result.index is not None:
            self.used.add(result.index)
        return bool(result.include)

    def whole(self, rel: str) -> bool:
        """Whether the directory ``rel`` (matched) is decided with everything below it."""
        index = self.spec.check_file(rel).index
        return index is not None and index > self.last_negation

    def holds_keep(self, child: str) -> bool:
        return any(keep == child or keep.startswith(child + "/") for keep in self.keep)

    def walk(self, directory: Path, prefix: str) -> bool:
        """Plan ``directory`` (``prefix`` is its path relative to the app, with a trailing ``/``); return whether
        anything in it stays."""
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError as err:
            raise ApplyError(f"read {directory}", err.strerror or err) from err
        stays = False
        for entry in entries:
            path, child = Path(entry.path), f"{prefix}{entry.name}"
            if entry.is_dir(follow_symlinks=False):
                stays = self.directory(path, child, prefix) or stays
            elif self.holds_keep(child):
                stays = True
            elif self.decide(child) == self.including:
                stays = True
                self.kept += 1
            else:
                self.files.append(path)
        return stays

    def directory(self, path: Path, child: str, prefix: str) -> bool:
        """Plan one directory; return whether anything of it stays."""
        rel = child + "/"
        if not prefix and path.name.startswith(Trash.PREFIX):
            _whole_tree(path, self.files, self.dirs)  # left by a run killed while removing: never the app's
            return False
        if not self.decide(rel):
            if self.walk(path, rel) or not self.including:
                return True  # in exclude mode an unmatched directory stays, even if emptied
            self.dirs.append(path)
            return False
        if not self.holds_keep(child) and self.whole(rel):
            if self.including:
                self.kept += 1
                return True  # included with everything below it
            _whole_tree(path, self.files, self.dirs)
            return False
        # Matched, but a later ! pattern may change what is below: decide path by path. An included directory
        # emptied that way goes; an excluded one stays only for what was re-included.
        if self.walk(path, rel) or self.holds_keep(child) or (self.including and not _has_entries(path)):
            return True
        self.dirs.append(path)
        return False


def _has_entries(directory: Path) -> bool:
    with os.scandir(directory) as entries:
        return any(True for _ in entries)


def _whole_tree(root: Path, files: list[Path], dirs: list[Path]) -> None:
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        base = Path(dirpath)
        files.extend(base / name for name in sorted(filenames))
        # os.walk lists symlinks to directories among dirnames; they are links, removed as files.
        for name in sorted(dirnames):
            (files if (base / name).is_symlink() else dirs).append(base / name)
    dirs.append(root)


def _relative(path: Path | None, root: Path) -> str | None:
    if path is None:
        return None
    try:
        return Path(os.path.abspath(path)).relative_to(os.path.abspath(root)).as_posix()
    except ValueError:
        return None


def remove(removal: Removal) -> int:
    """Delete what ``removal`` lists, all or nothing: see :class:`Trash`. Returns the number of files removed.

    :raises ApplyError: naming the path that could not be removed (exit 1); then nothing was removed.
    """
    trash = Trash(removal.root)
    count = trash.move(removal)
    trash.empty()
    return count


class Trash:
    """Removal in two steps, so that it can be undone until the run commits.

    :meth:`move` renames every listed path into a hidden directory at the app's root (or, for a path on another
    filesystem mounted inside the app, beside it): a rename needs the same permissions as an unlink, so whatever
    would refuse the removal refuses it here, before anything is lost. :meth:`restore` puts everything back;
    :meth:`empty` deletes it for good.

    The app is the build user's (and its author's), and the preparer may run as root: nothing below the app
    directory is reached by path. The app directory is opened once, every directory below it is opened relative
    to its parent refusing links, and each rename is made between directory descriptors, so a directory swapped
    for a link meanwhile cannot make root move or delete anything outside the app (docs/security.md).
    """

    PREFIX = ".preparer-removed-"
    #: Directory descriptors kept open while moving (the files of one directory come together).
    _KEPT = 64

    def __init__(self, root: Path) -> None:
        self.root = root
        self._root: int | None = None
        #: ``(parent directory, name, trash index, name in the trash)``, in the order moved.
        self.moved: list[tuple[tuple[str, ...], str, int, str]] = []
        #: ``(descriptor of the directory holding it, its name, its descriptor)`` of each trash directory.
        self.bins: list[tuple[int, str, int]] = []
        self._bin_of: dict[tuple[str, ...], int] = {}  # a directory -> its trash, by index
        self._dirs: dict[tuple[str, ...], int] = {}

    def move(self, removal: Removal) -> int:
        """Move every file (deepest first), then every directory listed; on a failure, restore and raise.

        :raises ApplyError: naming the path that could not be moved.
        """
        moved = 0
        try:
            for path in removal.files:
                moved += self._move(path)
            for path in removal.dirs:
                self._move(path)
        except BaseException:
            self.restore()
            raise
        finally:
            self._forget_dirs()
        return moved  # a file already gone was not removed by this run, and is not counted

    def _move(self, path: Path) -> bool:
        """Move ``path`` aside; ``False`` when it is not there."""
        parts = path.relative_to(self.root).parts
        where, name = parts[:-1], parts[-1]
        try:
            parent = self._dir(where)
            index = self._bin(())
            try:
                os.rename(name, str(len(self.moved)), src_dir_fd=parent, dst_dir_fd=self.bins[index][2])
            except OSError as err:
                if err.errno != errno.EXDEV:
                    raise
                index = self._bin(where)  # a mount point inside the app
                os.rename(name, str(len(self.moved)), src_dir_fd=parent, dst_dir_fd=self.bins[index][2])
        except FileNotFoundError:
            return False
        except OSError as err:
            raise ApplyError(f"remove {path}", err.strerror or err) from err
        self.moved.append((where, name, index, str(len(self.moved))))
        return True

    def _dir(self, parts: tuple[str, ...]) -> int:
        """A descriptor of the app's directory ``parts``, reached from the app's root without following a link."""
        if self._root is None:
            self._root = open_dir(self.root)
        if not parts:
            return self._root
        if parts not in self._dirs and len(self._dirs) >= self._KEPT:
            self._forget_dirs()
        return self._open(parts)

    def _open(self, parts: tuple[str, ...]) -> int:
        found = self._dirs.get(parts)
        if found is None:
            parent = self._open(parts[:-1]) if len(parts) > 1 else self._root
            assert parent is not None
            found, _ = open_subdir(parent, parts[-1], self.root.joinpath(*parts))
            self._dirs[parts] = found
        return found

    def _forget_dirs(self) -> None:
        for fd in self._dirs.values():
            os.close(fd)
        self._dirs = {}

    def _bin(self, parts: tuple[str, ...]) -> int:
        """The trash directory of the app's directory ``parts``, made when first needed: its index."""
        found = self._bin_of.get(parts)
        if found is None:
            import secrets  # deferred, as in preparer._fs: only runs that remove files need it

            holder = os.dup(self._dir(parts))  # kept until the trash is emptied or restored
            name = f"{self.PREFIX}{secrets.token_hex(6)}"
            try:
                fd, _ = open_subdir(holder, name, self.root.joinpath(*parts, name), create=True, mode=0o700)
            except BaseException:
                os.close(holder)
                raise
            self.bins.append((holder, name, fd))
            found = self._bin_of[parts] = len(self.bins) - 1
        return found

    def restore(self) -> None:
        """Put back everything moved, in reverse order, and remove the trash directories."""
        for where, name, index, trashed in reversed(self.moved):
            with contextlib.suppress(OSError):
                os.rename(trashed, name, src_dir_fd=self.bins[index][2], dst_dir_fd=self._dir(where))
        self._forget_dirs()
        for holder, name, _ in self.bins:
            with contextlib.suppress(OSError):
                os.rmdir(name, dir_fd=holder)
        self._close()

    def empty(self) -> None:
        """Delete what was moved, for good."""
        for holder, name, _ in self.bins:
            shutil.rmtree(name, dir_fd=holder, ignore_errors=True)
        self._close()

    def _close(self) -> None:
        for holder, _, fd in self.bins:
            os.close(fd)
            os.close(holder)
        if self._root is not None:
            os.close(self._root)
        self.moved, self.bins, self._bin_of, self._root = [], [], {}, None
