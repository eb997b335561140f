"""Buildpack trees on disk: copying a local directory with the archive rules, linking a cached tree into staging,
and installing a staged buildpack into ``<buildpacks>``.

Directories are 0755 and files 0644, or 0755 when any execute bit was set, whatever the umask. Symbolic links
are kept as links (never followed) and must stay inside the buildpack; special files and setuid/setgid bits are
refused.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from preparer import interrupt
from preparer._fs import PER_FILE_WORK, current_umask, dir_record, file_record, make_dirs
from preparer.errors import ApplyError, FetchError
from preparer.fetch.base import StagedBuildpack
from preparer.fetch.cache import CachedTree, CacheMismatch
from preparer.fetch.extract import is_inside
from preparer.files.buildpack import buildpack_dir, read_buildpack_toml

if TYPE_CHECKING:
    from preparer.policy import Budget


def staged_buildpack(root: Path, source: str) -> StagedBuildpack:
    """The buildpack unpacked at ``root``, whose ``buildpack.toml`` must be at the top.

    :param source: the ``uri`` as the user wrote it (redacted), named in errors instead of the staging path.
    :raises FetchError: no ``buildpack.toml`` at the top, or one that cannot be read.
    """
    if not (root / "buildpack.toml").is_file():
        raise FetchError(f"fetch buildpack from {source}", "no buildpack.toml at the root of the buildpack")
    return StagedBuildpack(read_buildpack_toml(root / "buildpack.toml", shown=source), root)


def copy_tree(src: Path, dest: Path, source: str, budget: Budget | None = None) -> None:
    """Copy the buildpack directory ``src`` into the existing empty ``dest``, checking every entry.

    Like extraction, the copy is per-file work: it holds ``PER_FILE_WORK``, so that parallel fetches copy one
    tree at a time instead of trading the interpreter lock at every system call.

    :raises FetchError: for links leaving the buildpack, special files, setuid/setgid bits.
    """
    with PER_FILE_WORK:
        links = _copy_entries(str(src), str(dest), source, current_umask(), budget)
    # Each target was checked alone; resolved through each other (``x -> .``, ``y -> x/..``) they must stay too.
    root = os.path.realpath(dest)
    for rel, link in links.items():
        if not is_inside(root, os.path.realpath(dest / rel)):
            raise FetchError(
                f"copy buildpack from {source}",
                f"refusing entry '{rel}': symbolic link '{link}' leaves the buildpack",
            )


def _copy_entries(src: str, dest: str, source: str, masked: int, budget: Budget | None) -> dict[str, str]:
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
                raise FetchError(f"read {from_path}", err.strerror or str(err)) from None
            mode = info.st_mode
            if budget is not None:
                budget.entry()
                budget.extracted(info.st_size if stat.S_ISREG(mode) else 0)
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
            name, record = cached
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or file_record(info) != record:
                raise CacheMismatch(f"{name} changed since it was cached")
            left = record[1]
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        try:
            while left is None or left > 0:
                sent = os.sendfile(out, fd, None, 1 << 30 if left is None else min(left, 1 << 30))
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


def install_cached(tree: CachedTree, dest: Path, *, link: bool, budget: Budget | None = None) -> None:
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
    # As many at once as there are processors. Unlike extraction, installing is mostly time in the kernel (a link
    # or a copy per file, little Python between them), so two threads at it do gain.
    if budget is not None:  # the tree as extracted: held to the same limits as an extraction
        budget.entry(len(tree.files) + len(tree.dirs) + len(tree.links))
        budget.extracted(sum(record[1] for record in tree.files.values()))
    with _INSTALLING:
        _install(tree, str(dest), link, current_umask())


_INSTALLING = threading.BoundedSemaphore(max(1, len(os.sched_getaffinity(0))))


def _install(tree: CachedTree, out: str, link: bool, masked: int) -> None:
    base = str(tree.path)
    for rel, recorded in tree.dirs.items():
        info = os.lstat(f"{base}/{rel}" if rel else base)
        if recorded != dir_record(info):
            raise CacheMismatch(f"{rel or 'the tree'} changed since it was cached")
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
    for rel, record in tree.files.items():
        interrupt.check()
        if not os.path.lexists(f"{out}/{rel}"):
            _copy_file(f"{base}/{rel}", f"{out}/{rel}", record[3], masked, (rel, record))


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
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=staging))
    root.chmod(0o755)
    return root


def install(staged: StagedBuildpack, buildpacks_dir: Path) -> bool:
    """Move one staged buildpack to ``<buildpacks>/<escaped id>/<version>``; an existing one is left alone.

    :returns: whether it was installed (``False``: it was already there).
    :raises ApplyError: when it cannot be moved into place (exit 1).
    """
    d = staged.descriptor
    dest = buildpack_dir(buildpacks_dir, d.id, d.version)
    if dest.exists():
        return False
    try:
        if not make_dirs(dest.parent):
            os.chmod(dest.parent, 0o755)
        try:
            os.rename(staged.path, dest)
        except OSError:
            # Another filesystem: copy beside the destination, then rename, so the directory appears whole.
            tmp = new_root(dest.parent, f".{dest.name}.")
            shutil.copytree(staged.path, tmp, symlinks=True, dirs_exist_ok=True)
            os.rename(tmp, dest)
    except FileExistsError:
        return False  # a concurrent preparer installed the same buildpack
    except OSError as err:
        if dest.exists():
            return False
        raise ApplyError(f"install {d.ref} into {dest}", err.strerror or err) from None
    return True
