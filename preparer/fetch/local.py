"""Buildpacks on local disk: a directory, or an archive (``.tgz``, ``.tar.gz``, ``.tar``, ``.cnb``).

Directories are copied into staging (the source is never modified) with the same rules as archives: no links
leaving the buildpack, no special files, no setuid/setgid bits. An archive holding an OCI image layout is a
buildpackage and goes to :func:`preparer.fetch.oci.fetch_cnb`.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import shutil
import stat
import tempfile
from pathlib import Path
from typing import IO

from preparer.errors import FetchError
from preparer.fetch import FetchContext, Fetched, StagedBuildpack
from preparer.fetch.archive import extract_tar, is_inside
from preparer.fetch.locator import PathLocator
from preparer.files.buildpack import read_buildpack_toml


class HashingReader:
    """Reads ``stream`` while computing the sha256 of everything read."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.sha256 = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.sha256.update(data)
        self.size += len(data)
        return data

    def drain(self) -> None:
        """Read to the end (tar streams may stop before trailing padding), so the digest covers every byte."""
        while self.read(1 << 20):
            pass

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha256.hexdigest()


def is_oci_layout(path: Path) -> bool:
    """Whether the archive at ``path`` is an OCI image layout (a ``.cnb`` buildpackage)."""
    return path.name.endswith(".cnb")


def staged_buildpack(root: Path, source: str) -> StagedBuildpack:
    """The buildpack unpacked at ``root``, whose ``buildpack.toml`` must be at the top."""
    if not (root / "buildpack.toml").is_file():
        raise FetchError(f"fetch buildpack from {source}", "no buildpack.toml at the root of the buildpack")
    return StagedBuildpack(read_buildpack_toml(root / "buildpack.toml"), root)


def fetch_path(locator: PathLocator, ctx: FetchContext) -> Fetched:
    """Stage the buildpack at ``locator.path``.

    :raises FetchError: a missing path, an unsafe or corrupt archive, no ``buildpack.toml`` (exit 1).
    """
    path = locator.path
    source = str(path)
    if not path.exists():
        raise FetchError(f"fetch buildpack from {source}", "no such file or directory")
    if path.is_dir():
        root = Path(tempfile.mkdtemp(prefix="dir-", dir=ctx.staging))
        copy_tree(path, root, source)
        staged = staged_buildpack(root, source)
        return Fetched(staged.descriptor, (staged,), source)
    if is_oci_layout(path):
        from preparer.fetch.oci import fetch_cnb

        return fetch_cnb(path, source=source, digest=None, ctx=ctx)
    root = Path(tempfile.mkdtemp(prefix="archive-", dir=ctx.staging))
    try:
        with open(path, "rb") as f:
            reader = HashingReader(f)
            extracted = extract_tar(reader, root, archive=source)  # type: ignore[arg-type]
            reader.drain()
    except OSError as err:
        raise FetchError(f"read {source}", err.strerror or str(err)) from None
    if "oci-layout" in extracted.top_level:
        shutil.rmtree(root)
        from preparer.fetch.oci import fetch_cnb

        return fetch_cnb(path, source=source, digest=reader.digest, ctx=ctx)
    root.chmod(0o755)
    staged = staged_buildpack(root, source)
    return Fetched(staged.descriptor, (staged,), source, reader.digest)


def copy_tree(src: Path, dest: Path, source: str) -> None:
    """Copy the buildpack directory ``src`` into the existing empty ``dest``, checking every entry.

    :raises FetchError: for links leaving the buildpack, special files, setuid/setgid bits.
    """
    dest.chmod(0o755)
    links: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(src):
        rel_dir = os.path.relpath(dirpath, src)
        for name in sorted(dirnames + filenames):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            from_path, to_path = Path(dirpath) / name, dest / rel
            try:
                info = from_path.lstat()
            except OSError as err:
                raise FetchError(f"read {from_path}", err.strerror or str(err)) from None
            refuse = FetchError(f"copy buildpack from {source}", f"refusing entry '{rel}'")
            if info.st_mode & (stat.S_ISUID | stat.S_ISGID):
                raise FetchError(refuse.action, f"{refuse.cause}: setuid or setgid bit")
            if stat.S_ISLNK(info.st_mode):
                link = os.readlink(from_path)
                resolved = posixpath.normpath(posixpath.join(posixpath.dirname(rel), link))
                if link.startswith("/") or resolved == ".." or resolved.startswith("../"):
                    raise FetchError(
                        refuse.action, f"{refuse.cause}: symbolic link '{link}' leaves the buildpack"
                    )
                os.symlink(link, to_path)
                links[rel] = link
            elif stat.S_ISDIR(info.st_mode):
                to_path.mkdir(mode=0o755)
                to_path.chmod(0o755)
            elif stat.S_ISREG(info.st_mode):
                shutil.copyfile(from_path, to_path)
                to_path.chmod(0o755 if info.st_mode & 0o111 else 0o644)
            else:
                raise FetchError(refuse.action, f"{refuse.cause}: devices, fifos and sockets are not allowed")
        # Symbolic links to directories are copied as links, never followed.
        dirnames[:] = [d for d in dirnames if not (Path(dirpath) / d).is_symlink()]
    # Each target was checked alone; resolved through each other (``x -> .``, ``y -> x/..``) they must stay too.
    root = os.path.realpath(dest)
    for rel, link in links.items():
        if not is_inside(root, os.path.realpath(dest / rel)):
            raise FetchError(
                f"copy buildpack from {source}",
                f"refusing entry '{rel}': symbolic link '{link}' leaves the buildpack",
            )
