"""Buildpack trees on disk: copying a local directory with the archive rules, linking a cached tree into staging,
and installing a staged buildpack into ``<buildpacks>``.

Directories are 0755 and files 0644, or 0755 when any execute bit was set, whatever the umask. Symbolic links
are kept as links (never followed) and must stay inside the buildpack; special files and setuid/setgid bits are
refused.
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import shutil
import stat
import threading
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from preparer import interrupt
from preparer._fs import (
    PER_FILE_WORK,
    current_umask,
    file_record,
    is_inside,
    make_dirs,
    name_beside,
    new_dir,
    open_dir,
    open_subdir,
)
from preparer._record import record
from preparer.errors import ApplyError, FetchError
from preparer.fetch.cache import CachedTree, CacheMismatch, changed_dir
from preparer.files.buildpack import BuildpackDescriptor, buildpack_dir, read_buildpack_toml

if TYPE_CHECKING:
    from preparer.fetch.guard import Guard


@record
class StagedBuildpack:
    """One buildpack unpacked in staging, ``buildpack.toml`` at the top of ``path``."""

    descriptor: BuildpackDescriptor
    path: Path


def staged_buildpack(root: Path, source: str) -> StagedBuildpack:
    """The buildpack unpacked at ``root``, whose ``buildpack.toml`` must be at the top.

    :param source: the ``uri`` as the user wrote it (redacted), named in errors instead of the staging path.
    :raises FetchError: no ``buildpack.toml`` at the top, or one that cannot be read.
    """
    if not (root / "buildpack.toml").is_file():
        raise FetchError(f"fetch buildpack from {source}", _no_descriptor(root))
    return StagedBuildpack(read_buildpack_toml(root / "buildpack.toml", shown=source), root)


def _no_descriptor(root: Path) -> str:
    """Why there is no ``buildpack.toml`` at ``root``, and what to do when it is one directory down (an archive of a
    buildpack's directory rather than of what is in it)."""
    below = sorted(p.parent.name for p in root.glob("*/buildpack.toml") if not p.parent.is_symlink())
    if len(below) != 1:
        return "no buildpack.toml at the root of the buildpack"
    return (
        f"buildpack.toml is in {below[0]}/, not at the root of the archive: make the archive from inside the "
        f"buildpack's directory (tar -czf {below[0]}.tgz -C {below[0]} .)"
    )


def copy_tree(
    src: Path,
    dest: Path,
    source: str,
    guard: Guard | None = None,
    above: dict[tuple[int, int], Path] | None = None,
) -> None:
    """Copy the buildpack directory ``src`` into the existing empty ``dest``, checking every entry.

    Like extraction, the copy is per-file work: it holds ``PER_FILE_WORK``, so that parallel fetches copy one
    tree at a time instead of trading the interpreter lock at every system call.

    :param above: the directories above ``dest`` by device and inode, when the caller keeps them for its run (a
        sink's ``above_staging``); filled here the first time. Without it they are found for this copy alone.
    :raises FetchError: for links leaving the buildpack, special files, setuid/setgid bits; ``src`` holds ``dest``
        (it would be copied into itself until names grow too long).
    """
    _refuse_copy_into_itself(src, dest, source, {} if above is None else above)
    with PER_FILE_WORK:
        links = _copy_entries(str(src), str(dest), source, current_umask(), guard)
    # Each target was checked alone; resolved through each other (``x -> .``, ``y -> x/..``) they must stay too.
    root = os.path.realpath(dest)
    for rel, link in links.items():
        if not is_inside(root, os.path.realpath(dest / rel)):
            raise FetchError(
                f"copy buildpack from {source}",
                f"refusing entry '{rel}': symbolic link '{link}' leaves the buildpack",
            )


def _refuse_copy_into_itself(src: Path, dest: Path, source: str, above: dict[tuple[int, int], Path]) -> None:
    """Refuse to copy ``src`` when ``dest`` is inside it (``uri = ".."`` from an app under ``<buildpacks>``'s
    parent, or a buildpack's own repository holding ``-buildpacks``), compared by device and inode, not by name.
    ``above`` holds the directories above ``dest`` (the staging directory and up), found once when it is empty: a
    run's copies all stage in one directory, and finding them again cost each local buildpack a stat of every
    directory up to the root."""
    try:
        held = src.stat()
        if not above:  # filled whole at once: the run's fetch threads may copy at the same time
            found = {}
            for parent in dest.parents:
                info = parent.stat()
                found[(info.st_dev, info.st_ino)] = parent
            above.update(found)
    except OSError:
        return  # the copy says what cannot be read
    place = above.get((held.st_dev, held.st_ino))
    if place is None:
        return  # dest itself is new and empty: never the source
    # ``dest`` is ``<staging>/dir-*``, staging in ``<buildpacks>`` (or $TMPDIR): name that, not a random name.
    staged_in = dest.parent.parent
    what = "is" if place == staged_in else "holds"
    raise FetchError(
        f"copy buildpack from {source}",
        f"it {what} {staged_in}, where the preparer stages the buildpacks it installs, and would be copied"
        " into itself: name the buildpack's own directory (the one holding buildpack.toml), outside it",
    )


def _copy_entries(src: str, dest: str, source: str, masked: int, guard: Guard | None) -> dict[str, str]:
    """Copy what is below ``src`` into ``dest`` (strings: one pass over possibly thousands of entries); the links
    made, by name relative to ``dest``."""
    os.chmod(dest, 0o755)
    links: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(src):
        interrupt.check()
        rel_dir = dirpath[len(src) + 1 :]
        followed = []
        for name in sorted(dirnames + filenames):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            from_path, to_path = f"{dirpath}/{name}", f"{dest}/{rel}"
            try:
                info = os.lstat(from_path)
            except OSError as err:
                raise FetchError(f"read {from_path}", err.strerror or str(err)) from err
            mode = info.st_mode
            if guard is not None:
                guard.entry()
                guard.extracted(info.st_size if stat.S_ISREG(mode) else 0)
            refuse = f"refusing entry '{rel}'"
            if mode & (stat.S_ISUID | stat.S_ISGID):
                raise FetchError(f"copy buildpack from {source}", f"{refuse}: setuid or setgid bit")
            if stat.S_ISLNK(mode):
                link = os.readlink(from_path)
                resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), link))
                if link.startswith("/") or resolved == ".." or resolved.startswith("../"):
                    raise FetchError(
                        f"copy buildpack from {source}",
                        f"{refuse}: symbolic link '{link}' leaves the buildpack",
                    )
                os.symlink(link, to_path)
                links[rel] = link
            elif stat.S_ISDIR(mode):
                os.mkdir(to_path, 0o755)  # noqa: PTH102 (strings, as above)
                if 0o755 & masked:
                    os.chmod(to_path, 0o755)
                followed.append(name)
            elif stat.S_ISREG(mode):
                _copy_file(from_path, to_path, 0o755 if mode & 0o111 else 0o644, masked)
            else:
                raise FetchError(
                    f"copy buildpack from {source}", f"{refuse}: devices, fifos and sockets are not allowed"
                )
        # Symbolic links to directories are copied as links, never followed.
        dirnames[:] = followed
    return links


def _copy_file(
    source: str, target: str, mode: int, masked: int, cached: tuple[str, list[int]] | None = None
) -> None:
    """Copy one regular file (never through a link: ``O_NOFOLLOW`` on both ends) and give it ``mode``.

    :param cached: ``(name, record)`` of a file from the download cache: checked on the descriptor it is read
        through (:func:`preparer._fs.file_record`), and copied to exactly its recorded size.
    :raises CacheMismatch: the cached file is not what was recorded.
    """
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        left = None
        if cached is not None:
            name, kept = cached
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or file_record(info) != kept:
                raise CacheMismatch(f"{name} changed since it was cached")
            left = kept[1]
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        try:
            copy = _copy_range
            while left is None or left > 0:
                try:
                    sent = copy(fd, out, 1 << 30 if left is None else min(left, 1 << 30))
                except OSError as err:  # no copy_file_range here (another file system, an old kernel)
                    if copy is not _copy_range or err.errno not in _NO_COPY_RANGE:
                        raise
                    copy = _send
                    continue
                if not sent:
                    if cached is not None:  # it had ``left`` bytes more when it was recorded
                        raise CacheMismatch(f"{cached[0]} is shorter than when it was cached")
                    break
                if left is not None:
                    left -= sent
            if mode & masked:
                os.fchmod(out, mode)
        finally:
            os.close(out)
    finally:
        os.close(fd)


#: What copy_file_range says where it cannot copy (the bytes are then sent with sendfile).
_NO_COPY_RANGE = frozenset({errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.EPERM})


def _copy_range(source: int, target: int, count: int) -> int:
    """``copy_file_range``: the file system copies (a reflink on btrfs or XFS: no bytes read or written at all)."""
    return os.copy_file_range(source, target, count)


def _send(source: int, target: int, count: int) -> int:
    return os.sendfile(target, source, None, count)


def check_links_inside(directory: Path, relative: str, links: dict[str, str], action: str) -> None:
    """Every symbolic link below ``relative`` (``directory``'s name among the extracted ``links``) resolves
    inside ``directory``.

    :raises FetchError: naming the first link that leaves it.
    """
    root = os.path.realpath(directory)
    prefix = relative.rstrip("/") + "/"
    for name, link in links.items():
        if name.startswith(prefix) and not is_inside(root, os.path.realpath(directory / name[len(prefix) :])):
            raise FetchError(action, f"refusing entry '{name}': symbolic link '{link}' leaves the buildpack")


def install_cached(tree: CachedTree, dest: Path, *, link: bool, guard: Guard | None = None) -> None:
    """Recreate the cached ``tree`` in the empty directory ``dest`` from its manifest: directories made 0755,
    links recreated, files hard-linked (``link``) or copied.

    Every directory of the cache's tree is checked first (inode, modification time, owner, mode): an entry
    added, removed or replaced in a directory changes its modification time. Hard links share the cache's files
    with the installed buildpack: the caller asks for them only when the build cannot write those files (they
    belong to root, in root's directories, and the build runs as another user), so their content cannot change
    without root. Otherwise files are copied, each checked on the descriptor it is read through (inode, size,
    modification time, mode, owner). A filesystem that refuses links gets copies too.

    :raises CacheMismatch: naming the first entry that differs from its record.
    """
    # As many at once as there are processors. Installing is mostly time in the kernel (a link or a copy per file,
    # little Python between them), so two threads at it gain; two children (the command's way) gain more.
    if guard is not None:  # the tree as extracted: held to the same limits as an extraction
        guard.entry(len(tree.files) + len(tree.dirs) + len(tree.links))
        guard.extracted(sum(kept[1] for kept in tree.files.values()))
    with _INSTALLING:
        from preparer.fetch import workers  # deferred: a small module, for runs that install from the cache

        # Copies in a child (the command's way), two trees on two cores: 0.69x the time in threads (8 bench trees,
        # 15 alternated pairs). Links stay here: a link is one system call and a fork cost more than it saved.
        if workers.enabled() and not link:
            workers.call_in_child(
                partial(_install, tree, str(dest), link, current_umask()), f"install {dest}"
            )
        else:
            _install(tree, str(dest), link, current_umask())


_INSTALLING = threading.BoundedSemaphore(max(1, len(os.sched_getaffinity(0))))


def _installing_in_child() -> None:
    """A forked child's installs: none of its parent's are under way there, whatever the parent's threads held."""
    global _INSTALLING
    _INSTALLING = threading.BoundedSemaphore(max(1, len(os.sched_getaffinity(0))))


os.register_at_fork(after_in_child=_installing_in_child)


def _install(tree: CachedTree, out: str, link: bool, masked: int) -> None:
    base = str(tree.path)
    changed = changed_dir(tree)
    if changed is not None:
        raise CacheMismatch(f"{changed or 'the tree'} changed since it was cached")
    for rel in sorted(tree.dirs):  # a directory sorts before what is in it
        if rel:
            os.mkdir(f"{out}/{rel}", 0o755)  # noqa: PTH102 (strings: one pass over thousands of entries)
            if 0o755 & masked:
                os.chmod(f"{out}/{rel}", 0o755)
    for rel, target in tree.links.items():
        os.symlink(target, f"{out}/{rel}")
    interrupt.check()
    if link:
        try:
            _link_files(tree, base, out)
            return
        except FileExistsError:
            raise
        except OSError:  # another filesystem: copies instead (of what is not linked yet)
            pass
    for rel, kept in tree.files.items():
        interrupt.check()
        if not os.path.lexists(f"{out}/{rel}"):
            _copy_file(f"{base}/{rel}", f"{out}/{rel}", kept[3], masked, (rel, kept))


def _link_files(tree: CachedTree, base: str, out: str) -> None:
    """Hard-link every file of ``tree`` into ``out``, a directory at a time: names relative to directory
    descriptors spare the kernel two path walks per file (a quarter of the time)."""
    by_dir: dict[str, list[str]] = {}
    for rel in tree.files:
        directory, _, name = rel.rpartition("/")
        by_dir.setdefault(directory, []).append(name)
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    for directory, names in by_dir.items():
        source = os.open(f"{base}/{directory}" if directory else base, flags)
        try:
            target = os.open(f"{out}/{directory}" if directory else out, flags)
            try:
                for name in names:
                    os.link(name, name, src_dir_fd=source, dst_dir_fd=target, follow_symlinks=False)
            finally:
                os.close(target)
        finally:
            os.close(source)


def new_root(staging: Path, prefix: str) -> Path:
    """A new directory in staging for one buildpack, 0755 (``mkdtemp`` makes it 0700, which would be installed)."""
    return new_dir(staging, prefix, mode=0o755)


class Installation:
    """The buildpacks one commit moves into ``<buildpacks>``, each to ``<escaped id>/<version>``, undone together
    when a later step of the commit fails.

    ``<buildpacks>`` may be writable by the build user while the preparer runs as root, so nothing below it is
    reached by path: it is opened once, each ``<id>`` is opened relative to it, refusing a link, a non-directory and
    a directory of another user than the preparer's or root's, and the buildpack is renamed into place relative to
    that descriptor (docs/security.md).
    """

    def __init__(self, buildpacks_dir: Path) -> None:
        self.buildpacks_dir = buildpacks_dir
        self._root: int | None = None
        #: What this commit installed: ``(<id> descriptor, <id> name, version, whether <id> was made)``.
        self._done: list[tuple[int, str, str, bool]] = []
        #: What it moved aside to replace: ``(<id> descriptor, name aside, version)``.
        self._aside: list[tuple[int, str, str]] = []

    def install(self, staged: StagedBuildpack, *, by_content: bool = False) -> Path | None:
        """Move one staged buildpack into place; an existing one is left alone, unless ``by_content`` (an inline
        buildpack, whose script may have changed under the same version) and its files differ: then it is
        replaced, the old one kept aside until :meth:`finish` (or put back by :meth:`undo`).

        :returns: where it was installed, or ``None`` when it was there already.
        :raises ApplyError: when it cannot be moved into place, or ``<id>`` is not a directory that can be
            trusted (exit 1).
        """
        d = staged.descriptor
        dest = buildpack_dir(self.buildpacks_dir, d.id, d.version)
        action = f"install {d.ref} into {dest}"
        try:
            id_fd, made = open_subdir(
                self._buildpacks(), dest.parent.name, dest.parent, create=True, owned=True
            )
        except OSError as err:
            raise ApplyError(action, err.strerror or err) from err
        try:
            if _present(d.version, id_fd):
                if not (by_content and _differs(staged.path, id_fd, d.version)):
                    os.close(id_fd)
                    return None
                self._move_aside(id_fd, d.version)
            _move_into(staged.path, id_fd, d.version)
        except OSError as err:
            present = isinstance(err, FileExistsError) or _present(
                d.version, id_fd
            )  # a concurrent preparer's
            os.close(id_fd)
            if present:
                return None
            raise ApplyError(action, err.strerror or err) from err
        self._done.append((id_fd, dest.parent.name, d.version, made))  # kept open, to undo it
        return dest

    def _buildpacks(self) -> int:
        if self._root is None:
            make_dirs(self.buildpacks_dir)  # the platform's own path: created as it names it
            self._root = open_dir(self.buildpacks_dir)
        return self._root

    def _move_aside(self, id_fd: int, version: str) -> None:
        import secrets  # deferred: only a replaced inline buildpack needs a name

        aside = name_beside(version, f".replaced-{secrets.token_hex(6)}")
        os.rename(version, aside, src_dir_fd=id_fd, dst_dir_fd=id_fd)
        self._aside.append((os.dup(id_fd), aside, version))

    def undo(self) -> None:
        """Remove what this commit installed (and each ``<id>`` it made, when left empty); put back what it
        replaced."""
        for id_fd, name, version, made in reversed(self._done):
            shutil.rmtree(version, dir_fd=id_fd, ignore_errors=True)
            if made and self._root is not None:
                with contextlib.suppress(OSError):  # other versions are there
                    os.rmdir(name, dir_fd=self._root)
        for id_fd, aside, version in reversed(self._aside):
            with contextlib.suppress(OSError):
                os.rename(aside, version, src_dir_fd=id_fd, dst_dir_fd=id_fd)
        self._aside = self._close_aside()
        self.close()

    def finish(self) -> None:
        """The commit is done: what was replaced goes for good."""
        for id_fd, aside, _ in self._aside:
            shutil.rmtree(aside, dir_fd=id_fd, ignore_errors=True)
        self._aside = self._close_aside()

    def _close_aside(self) -> list[tuple[int, str, str]]:
        for id_fd, _, _ in self._aside:
            os.close(id_fd)
        return []

    def close(self) -> None:
        for fd in [*(done[0] for done in self._done), *([self._root] if self._root is not None else [])]:
            os.close(fd)
        self._aside = self._close_aside()
        self._done, self._root = [], None


def same_tree(one: Path, other: Path) -> bool:
    """Whether two buildpack trees hold the same names, kinds, link targets and file bytes (modes aside), read
    without following a link below their roots (a root that is a link is followed, as the detector follows it): a
    staged buildpack and the copy of the same id and version already in ``<buildpacks>``. A file that is the same
    inode in both (a tree linked from the download cache) is not read. Anything that cannot be read differs."""
    pending = [""]
    buffers = (bytearray(1 << 16), bytearray(1 << 16))
    try:
        while pending:
            relative = pending.pop()
            entries = [
                _listing(str(root / relative)) if relative else _listing(str(root), 0)
                for root in (one, other)
            ]
            if entries[0].keys() != entries[1].keys():
                return False
            for name, (kind, info) in entries[0].items():
                other_kind, other_info = entries[1][name]
                path = os.path.join(relative, name)
                if kind != other_kind or kind == "other" or (kind == "link" and info != other_info):
                    return False
                if kind == "dir":
                    pending.append(path)
                elif kind == "file" and not _same_file(one / path, other / path, info, other_info, buffers):
                    return False
    except OSError:
        return False
    return True


def _listing(directory: str, follow: int = os.O_NOFOLLOW) -> dict[str, tuple[str, object]]:
    """Each entry of ``directory`` (a link to one only with ``follow`` ``0``) by name: its kind (``dir``,
    ``file``, ``link``, ``other``) and, for a file its ``(device, inode, size)``, for a link its target."""
    found: dict[str, tuple[str, object]] = {}
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | follow | os.O_CLOEXEC)
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                if entry.is_symlink():
                    found[entry.name] = ("link", os.readlink(entry.name, dir_fd=fd))
                elif entry.is_dir(follow_symlinks=False):
                    found[entry.name] = ("dir", None)
                elif entry.is_file(follow_symlinks=False):
                    info = entry.stat(follow_symlinks=False)
                    found[entry.name] = ("file", (info.st_dev, info.st_ino, info.st_size))
                else:
                    found[entry.name] = ("other", None)
    finally:
        os.close(fd)
    return found


def _same_file(
    one: Path, other: Path, info: object, other_info: object, buffers: tuple[bytearray, bytearray]
) -> bool:
    assert isinstance(info, tuple) and isinstance(other_info, tuple)
    if info[2] != other_info[2]:
        return False
    if info[:2] == other_info[:2]:
        return True
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    with open(os.open(one, flags), "rb") as first, open(os.open(other, flags), "rb") as second:
        while True:
            read = first.readinto(buffers[0])
            if read != second.readinto(buffers[1]) or buffers[0][:read] != buffers[1][:read]:
                return False
            if not read:
                return True


def _differs(staged: Path, id_fd: int, version: str) -> bool:
    """Whether the installed ``version`` (in the directory ``id_fd``) holds other files than ``staged``: an inline
    buildpack is three small files, compared byte for byte."""
    for name in ("buildpack.toml", "bin/detect", "bin/build"):
        try:
            installed = os.open(f"{version}/{name}", os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=id_fd)
        except OSError:
            return True
        with os.fdopen(installed, "rb") as file:
            if file.read(1 << 20) != (staged / name).read_bytes():
                return True
    return False


def _present(version: str, id_fd: int) -> bool:
    try:
        os.lstat(version, dir_fd=id_fd)
    except FileNotFoundError:
        return False
    return True


def _move_into(tree: Path, id_fd: int, version: str) -> None:
    """Rename the staged ``tree`` to ``version`` in the directory ``id_fd``; from another file system, copy it
    beside first (into a directory made here, which no one else can write), so it appears whole."""
    try:
        os.rename(tree, version, dst_dir_fd=id_fd)
        return
    except OSError as err:
        if err.errno != errno.EXDEV:
            raise
    import secrets  # deferred: only a copy from another file system needs a name

    tmp = name_beside(version, f".{secrets.token_hex(6)}")
    tmp_fd, _ = open_subdir(id_fd, tmp, tree, create=True)
    try:
        # The kernel's name of the new directory: the copy cannot be led elsewhere by a link in the path.
        shutil.copytree(tree, f"/proc/self/fd/{tmp_fd}", symlinks=True, dirs_exist_ok=True)
        os.rename(tmp, version, src_dir_fd=id_fd, dst_dir_fd=id_fd)
    except BaseException:
        shutil.rmtree(tmp, dir_fd=id_fd, ignore_errors=True)
        raise
    finally:
        os.close(tmp_fd)
