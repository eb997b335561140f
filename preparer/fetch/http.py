"""Buildpack archives over ``http(s)``: a tar extracted as it arrives, or a ``.cnb`` read as a buildpackage.

The store (:mod:`~preparer.fetch.store`) decides where the bytes come from (a pinned copy, the fleet's repository,
this pod's download cache after the origin confirms it with ``If-None-Match`` / ``If-Modified-Since``, or the
origin), checks them against ``Content-Length`` and any ``#sha256=`` pin, and keeps them. This module says what
an archive is: the tar is extracted by the bounded reader (one pass, memory flat) and must hold a
``buildpack.toml`` at its top; an archive that holds an OCI layout is a ``.cnb`` after all, read as one when the
policy allows that kind.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from preparer.fetch.base import FetchContext, Fetched
from preparer.fetch.extract import Extracted, extract_tar
from preparer.fetch.guard import Guard
from preparer.fetch.locator import HttpLocator
from preparer.fetch.store.origin import Origin
from preparer.fetch.streams import Reader
from preparer.fetch.tree import staged_buildpack


def fetch_http(locator: HttpLocator, ctx: FetchContext) -> Fetched:
    """Download, verify and stage the buildpack archive at ``locator.url``.

    :raises FetchError: HTTP errors, exhausted retries, digest or length mismatch, unsafe archives (exit 1).
    """
    source, guard = locator.shown, ctx.sink.guard
    origin = Origin(locator, ctx.transport, None if guard is None else lambda url: guard.redirect(url.shown))
    if not locator.is_cnb:
        archive = ctx.store.archives.tree(origin, _Tar(source, guard), ctx.sink)
        if archive.root is not None:
            staged = staged_buildpack(archive.root, source)
            return Fetched(staged.descriptor, (staged,), source, archive.digest, via=archive.via)
        if guard is not None:  # a .cnb after all: read as one, if the policy allows that kind
            guard.revealed("cnb", f"{source} is a buildpackage (an OCI image layout)")
    from preparer.fetch.oci.layout import fetch_cnb  # deferred: only a .cnb needs the OCI reader

    fetched, via = ctx.store.archives.file(
        origin, lambda path, digest: fetch_cnb(path, source=source, digest=digest, ctx=ctx), ctx.sink
    )
    return fetched if via is None else replace(fetched, via=via)


class _Tar:
    """A buildpack's tar archive (gzipped or not): extracted by the bounded reader, ``buildpack.toml`` at its top."""

    def __init__(self, source: str, guard: Guard | None) -> None:
        self.source, self.guard = source, guard

    def unpack(self, body: Reader, dest: Path, record: bool) -> Extracted:
        return extract_tar(body, dest, archive=self.source, record=record, guard=self.guard)

    def check(self, root: Path) -> None:
        staged_buildpack(root, self.source)
