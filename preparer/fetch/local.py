"""Buildpacks on local disk: a directory, or an archive (``.tgz``, ``.tar.gz``, ``.tar``, ``.cnb``).

Directories are copied into staging (the source is never modified) with the same rules as archives: no links
leaving the buildpack, no special files, no setuid/setgid bits. An archive holding an OCI image layout is a
buildpackage and is read as a ``.cnb``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from preparer.errors import FetchError
from preparer.fetch.base import FetchContext, Fetched
from preparer.fetch.extract import extract_tar
from preparer.fetch.locator import PathLocator
from preparer.fetch.streams import MAX_TRAILING, HashingReader
from preparer.fetch.tree import copy_tree, new_root, staged_buildpack


def fetch_path(locator: PathLocator, ctx: FetchContext) -> Fetched:
    """Stage the buildpack at ``locator.path``.

    :raises FetchError: a missing path, an unsafe or corrupt archive, no ``buildpack.toml`` (exit 1).
    """
    path = locator.path
    source = str(path)
    if not path.exists():
        raise FetchError(f"fetch buildpack from {source}", "no such file or directory")
    if not path.is_dir() and not path.is_file():
        raise FetchError(f"fetch buildpack from {source}", "not a directory or a regular file")
    if path.is_dir():
        root = new_root(ctx.sink.staging, "dir-")
        copy_tree(path, root, source, ctx.sink.guard, ctx.sink.above_staging)
        staged = staged_buildpack(root, source)
        return Fetched(staged.descriptor, (staged,), source)
    if locator.is_cnb:
        return _cnb(path, source, None, ctx)
    root = new_root(ctx.sink.staging, "archive-")
    try:
        with open(path, "rb") as f:
            reader = HashingReader(f)
            extracted = extract_tar(reader, root, archive=source, guard=ctx.sink.guard)
            reader.drain(MAX_TRAILING, f"extract {source}")
    except OSError as err:
        raise FetchError(f"read {source}", err.strerror or str(err)) from err
    if (
        "oci-layout" in extracted.top_level
    ):  # a buildpackage, whatever its name says: the policy decides again
        shutil.rmtree(root)
        if ctx.sink.guard is not None:
            ctx.sink.guard.revealed("cnb", f"{source} is a buildpackage (an OCI image layout)")
        return _cnb(path, source, reader.digest, ctx)
    staged = staged_buildpack(root, source)
    return Fetched(staged.descriptor, (staged,), source, reader.digest)


def _cnb(path: Path, source: str, digest: str | None, ctx: FetchContext) -> Fetched:
    """A buildpackage file (an OCI layout in a tar)."""
    from preparer.fetch.oci.layout import fetch_cnb  # deferred: the OCI client, for .cnb files only

    return fetch_cnb(path, source=source, digest=digest, ctx=ctx)
