"""Safe extraction of buildpack archives and buildpackage layers.

Archives come from projects and registries the platform does not control, so every entry is checked before
anything is written, and nothing is ever written outside ``dest``:

- absolute names (unless the archive is a buildpackage layer, whose names start at the image root) and ``..``;
- symbolic links whose target leaves the buildpack, also through other links of the archive (``x -> .`` then
  ``y -> x/..``): each target is checked as written, and every link again, resolved, once the archive is complete;
- entries that would be written through a link, and hard links to anything but a regular file already extracted
  (never through a link either);
- device, fifo and other special entries; setuid, setgid and sticky bits.

Files are written 0644, or 0755 when any execute bit was set; directories 0755, whatever the umask. The stream is
read once, front to back, so memory stays flat whatever the archive's size.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import tarfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

from preparer._fs import make_dirs
from preparer.errors import FetchError
from preparer.fetch.streams import CHUNK, open_tar_stream


@dataclass(frozen=True, slots=True)
class Extracted:
    """What an extraction found: the names at the top of the archive (to tell buildpacks from OCI layouts)."""

    top_level: frozenset[str]
    files: int


def is_inside(root: str, path: str) -> bool:
    """Whether the resolved ``path`` is ``root`` or below it (both already ``os.path.realpath``)."""
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _clean_name(raw: str, allow_absolute: bool) -> str | None:
    """The entry's relative, normalised name; ``None`` for the root itself. Raises ``ValueError`` if unsafe."""
    name = raw
    if name.startswith("/"):
        if not allow_absolute:
            raise ValueError("absolute path")
        name = name.lstrip("/")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError("path contains '..'")
    return "/".join(parts) or None


def _check_mode(member: tarfile.TarInfo) -> None:
    if member.mode & (stat.S_ISUID | stat.S_ISGID):
        raise ValueError("setuid or setgid bit")
    if member.mode & stat.S_ISVTX and not member.isdir():
        raise ValueError("sticky bit")


def extract_tar(
    fileobj: BinaryIO | IO[bytes],
    dest: Path,
    *,
    archive: str,
    select: str | None = None,
    allow_absolute: bool = False,
) -> Extracted:
    """Extract the tar stream ``fileobj`` (gzip or plain, told apart by magic bytes) into ``dest``.

    :param dest: an existing, empty directory; nothing is written outside it.
    :param archive: names the archive in error messages (already redacted).
    :param select: only entries below this relative prefix (``cnb/buildpacks/<eid>/<version>``) are
        extracted, with the prefix stripped; the others are skipped.
    :param allow_absolute: buildpackage layers name entries from the image root, so ``/cnb/x`` is ``cnb/x``;
        buildpack archives may not hold absolute names.
    :raises FetchError: naming the archive and the entry, for ``..``, absolute names, links leaving ``dest``,
        device and fifo entries, setuid/setgid bits, and corrupt or truncated archives.
    """
    extractor = _Extractor(dest, archive, select.strip("/") if select else None, allow_absolute)
    try:
        with tarfile.open(fileobj=open_tar_stream(fileobj), mode="r|", bufsize=CHUNK) as tar:
            for member in tar:
                extractor.add(tar, member)
        extractor.check_links()
    except FetchError:
        raise
    except (tarfile.TarError, EOFError, zlib.error) as err:
        raise FetchError(
            f"extract {archive}", f"not a valid tar archive ({err or type(err).__name__})"
        ) from None
    except OSError as err:
        raise FetchError(f"extract {archive}", err.strerror or str(err)) from None
    return Extracted(frozenset(extractor.top_level), extractor.files)


class _Extractor:
    """Checks and writes one entry at a time."""

    def __init__(self, dest: Path, archive: str, select: str | None, allow_absolute: bool) -> None:
        self.dest, self.archive, self.select, self.allow_absolute = dest, archive, select, allow_absolute
        # Symbolic links written so far, with their targets: nothing may be written below one.
        self.links: dict[str, str] = {}
        self.regular: set[str] = set()  # regular files written so far: the only hard link targets
        self.top_level: set[str] = set()
        self.files = 0

    def refuse(self, member: tarfile.TarInfo | str, why: str) -> FetchError:
        name = member if isinstance(member, str) else member.name
        return FetchError(f"extract {self.archive}", f"refusing entry '{name}': {why}")

    def check_links(self) -> None:
        """Refuse the archive if any symbolic link, resolved through the others as extracted, leaves ``dest``.

        A link checked alone can look harmless (``y -> x/..``) until another entry makes ``x`` a link to ``.``,
        possibly later in the archive; the tree on disk is final here, so resolving it is exact.
        """
        if not self.links:
            return
        root = os.path.realpath(self.dest)
        for name, link in self.links.items():
            if not is_inside(root, os.path.realpath(self.dest / name)):
                raise self.refuse(name, f"symbolic link '{link}' leaves the buildpack")

    def relative(self, name: str | None) -> str | None:
        """``name`` relative to the selected subtree, ``""`` for its root, ``None`` when outside it."""
        if self.select is None:
            return name or ""
        if name == self.select:
            return ""
        if name and name.startswith(self.select + "/"):
            return name[len(self.select) + 1 :]
        return None

    def add(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        try:
            name = self.relative(_clean_name(member.name, self.allow_absolute))
            if name is None:
                return
            _check_mode(member)
        except ValueError as why:
            raise self.refuse(member, str(why)) from None
        if name:
            self.top_level.add(name.split("/", 1)[0])
        if not name:
            if not member.isdir():
                raise self.refuse(member, "the archive root must be a directory")
            return
        if any(name == link or name.startswith(link + "/") for link in self._prefixes(name)):
            raise self.refuse(member, "it would be written through a symbolic link")
        target = self.dest / name
        if member.isdir():
            self._replace_non_dir(target, name)
            if not make_dirs(target):
                target.chmod(0o755)  # an existing directory (made for an earlier entry) gets the mode too
        elif member.isreg():
            self._write_file(tar, member, name, target)
        elif member.issym():
            self._symlink(member, name, target)
        elif member.islnk():
            self._hardlink(member, name, target)
        else:
            raise self.refuse(member, "devices, fifos and other special files are not allowed")

    def _prefixes(self, name: str) -> Iterator[str]:
        parts = name.split("/")
        for i in range(1, len(parts)):
            prefix = "/".join(parts[:i])
            if prefix in self.links:
                yield prefix

    def _parent(self, target: Path) -> None:
        make_dirs(target.parent)  # archives need not have entries for the directories of their files

    def _forget(self, name: str, below: bool) -> None:
        """Forget the link or file ``name`` (and, ``below``, everything under it) once it is replaced."""
        self.links.pop(name, None)
        self.regular.discard(name)
        if below:
            prefix = name + "/"
            for link in [n for n in self.links if n.startswith(prefix)]:
                del self.links[link]
            self.regular.difference_update([n for n in self.regular if n.startswith(prefix)])

    def _replace_non_dir(self, target: Path, name: str) -> None:
        if target.is_symlink() or (target.exists() and not target.is_dir()):
            target.unlink()
            self._forget(name, below=False)

    def _clear(self, target: Path, name: str) -> None:
        # A later entry of the same name replaces the earlier one, never writes through it.
        if target.is_symlink() or target.is_file():
            target.unlink()
        elif target.is_dir():
            shutil.rmtree(target)
        self._forget(name, below=True)

    def _write_file(self, tar: tarfile.TarFile, member: tarfile.TarInfo, name: str, target: Path) -> None:
        self._parent(target)
        self._clear(target, name)
        mode = 0o755 if member.mode & 0o111 else 0o644
        source = tar.extractfile(member)
        assert source is not None  # a regular file always has data
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(source, out, CHUNK)
        os.chmod(target, mode)
        self.regular.add(name)
        self.files += 1

    def _symlink(self, member: tarfile.TarInfo, name: str, target: Path) -> None:
        link = member.linkname
        if link.startswith("/"):
            raise self.refuse(member, f"symbolic link to the absolute path '{link}'")
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), link))
        if resolved == ".." or resolved.startswith("../"):
            raise self.refuse(member, f"symbolic link '{link}' leaves the buildpack")
        self._parent(target)
        self._clear(target, name)
        os.symlink(link, target)
        self.links[name] = link
        self.files += 1

    def _hardlink(self, member: tarfile.TarInfo, name: str, target: Path) -> None:
        try:
            link = self.relative(_clean_name(member.linkname, self.allow_absolute))
        except ValueError as why:
            raise self.refuse(member, f"hard link target: {why}") from None
        if not link or link not in self.regular or any(self._prefixes(link)):
            raise self.refuse(
                member, f"hard link to '{member.linkname}', which is not a file extracted before it"
            )
        self._parent(target)
        self._clear(target, name)
        os.link(self.dest / link, target, follow_symlinks=False)
        self.regular.add(name)
        self.files += 1
