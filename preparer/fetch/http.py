"""Buildpack archives over ``http(s)``: streamed, verified, retried, cached.

The body is extracted while it arrives (one pass, memory flat), hashed on the way, and checked against the
``Content-Length`` and any ``#sha256=`` pin before the result is used. With a download cache, the extracted tree
is kept under the archive's digest; later runs revalidate it with ``If-None-Match`` / ``If-Modified-Since`` and
link it into staging, and a pinned digest already in the cache needs no request at all. The revalidation is first
asked with the standard library alone (:func:`~preparer.fetch.transport.probe_unchanged`), without a lock, so a
warm run never imports requests; only a download takes the URL's lock, and looks at the cache again under it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import IO, NamedTuple

from preparer._fs import temp_file
from preparer.errors import FetchError
from preparer.fetch.base import FetchContext, Fetched
from preparer.fetch.cache import DownloadCache
from preparer.fetch.extract import Extracted, extract_tar
from preparer.fetch.locator import HttpLocator, redact
from preparer.fetch.oci.layout import fetch_cnb
from preparer.fetch.streams import CHUNK, MAX_TRAILING, stream_body, verify_digest
from preparer.fetch.transport import probe_unchanged
from preparer.fetch.tree import link_tree, new_root, staged_buildpack


class _Known(NamedTuple):
    """What the cache holds for a URL: the extracted tree, its archive's digest, and the conditional headers."""

    tree: Path
    digest: str
    headers: dict[str, str]


def fetch_http(locator: HttpLocator, ctx: FetchContext) -> Fetched:
    """Download, verify and stage the buildpack archive at ``locator.url``.

    :raises FetchError: HTTP errors, exhausted retries, digest or length mismatch, unsafe archives (exit 1).
    """
    source = redact(locator.url)
    if locator.url.split("?", 1)[0].endswith(".cnb"):
        return _fetch_cnb(locator, ctx, source)
    if ctx.download_cache is None:
        return _download(locator, ctx, source, None, None)
    cache = DownloadCache(ctx.download_cache)
    pinned = None if locator.sha256 is None else "sha256:" + locator.sha256
    if pinned is not None and (tree := cache.tree_path(pinned)) is not None:
        return _from_tree(tree, ctx, source, pinned)
    known = _known(locator, cache)
    if known is not None and probe_unchanged(locator.url, known.headers, ctx.transport.timeouts):
        return _unchanged(locator, known, ctx, source)
    with cache.lock("http:" + locator.url):
        # Another preparer may have downloaded it meanwhile: its tree and validators are used.
        return _download(locator, ctx, source, cache, _known(locator, cache))


def _known(locator: HttpLocator, cache: DownloadCache) -> _Known | None:
    meta = cache.http_meta(locator.url)
    tree = cache.tree_path(meta["digest"]) if meta is not None else None
    if meta is None or tree is None:
        return None
    headers = {}
    if meta.get("etag"):
        headers["If-None-Match"] = meta["etag"]
    if meta.get("last-modified"):
        headers["If-Modified-Since"] = meta["last-modified"]
    return _Known(tree, meta["digest"], headers) if headers else None


def _unchanged(locator: HttpLocator, known: _Known, ctx: FetchContext, source: str) -> Fetched:
    """The server said the cached tree is current (304)."""
    _check_pin(locator, known.digest, source)
    ctx.progress(source, 0, 0)
    return _from_tree(known.tree, ctx, source, known.digest)


def _from_tree(tree: Path, ctx: FetchContext, source: str, digest: str) -> Fetched:
    root = new_root(ctx.staging, "http-")
    link_tree(tree, root)
    staged = staged_buildpack(root, source)
    return Fetched(staged.descriptor, (staged,), source, digest)


def _check_pin(locator: HttpLocator, digest: str, source: str) -> None:
    if locator.sha256 is not None:
        pin = "sha256:" + locator.sha256
        verify_digest(
            digest, pin, f"verify {source}", "sha256 mismatch: the uri pins {expected}, the download is {got}"
        )


def _download(
    locator: HttpLocator, ctx: FetchContext, source: str, cache: DownloadCache | None, known: _Known | None
) -> Fetched:
    """One conditional request (when the cache knows the URL), then, unless it is a 304, the body extracted as it
    arrives: into the cache's temporary space when there is a cache, else straight into staging."""
    action = f"download {source}"

    def attempt() -> Fetched:
        response = ctx.transport.get(locator.url, known.headers if known else None, action=action)
        if response.status_code == 304 and known is not None:
            response.close()
            return _unchanged(locator, known, ctx, source)
        dest = cache.new_tree() if cache is not None else new_root(ctx.staging, "http-")
        kept = False  # whether ``dest`` is the result (staged without a cache)
        try:

            def extract(body: IO[bytes]) -> Extracted | FetchError:
                try:
                    return extract_tar(body, dest, archive=source)
                except FetchError as err:
                    if locator.sha256 is None:
                        raise
                    # Pinned: read the rest, so a tampered or corrupt body is reported as the mismatch it is.
                    return err

            outcome, digest, _ = stream_body(response, source, ctx.progress, extract, MAX_TRAILING)
            _check_pin(locator, digest, source)
            if isinstance(outcome, FetchError):
                raise outcome
            if "oci-layout" in outcome.top_level:
                return _fetch_cnb(locator, ctx, source)
            dest.chmod(0o755)
            staged = staged_buildpack(dest, source)  # checked before it enters the cache
            if cache is None:
                kept = True
                return Fetched(staged.descriptor, (staged,), source, digest)
            tree = cache.add_tree(dest, digest)
            validators = {
                "etag": response.headers.get("ETag", ""),
                "last-modified": response.headers.get("Last-Modified", ""),
            }
            cache.put_http_meta(locator.url, validators | {"digest": digest})
            return _from_tree(tree, ctx, source, digest)
        finally:
            # A tree that is neither the result nor in the cache (a failure, or handed over) is removed.
            if not kept and dest.exists():
                shutil.rmtree(dest, ignore_errors=True)

    return ctx.transport.retrying(action, attempt)


def _fetch_cnb(locator: HttpLocator, ctx: FetchContext, source: str) -> Fetched:
    """A ``.cnb`` (OCI layout tar) over http: downloaded whole (into the cache when there is one), then read as a
    buildpackage."""
    pinned = None if locator.sha256 is None else "sha256:" + locator.sha256
    cache = DownloadCache(ctx.download_cache) if ctx.download_cache is not None else None
    if cache is not None and pinned is not None and (blob := cache.blob_path(pinned)) is not None:
        return fetch_cnb(blob, source=source, digest=pinned, ctx=ctx)
    action = f"download {source}"

    def attempt() -> tuple[Path, str]:
        response = ctx.transport.get(locator.url, action=action)
        with temp_file(cache.tmp_dir() if cache is not None else ctx.staging, "cnb-") as path:
            with open(path, "wb") as out:
                _, digest, _ = stream_body(
                    response, source, ctx.progress, lambda body: shutil.copyfileobj(body, out, CHUNK)
                )
            _check_pin(locator, digest, source)
            if cache is not None:
                return cache.add_blob(path, digest), digest
            kept = path.with_name(path.name + ".cnb")
            path.rename(kept)
            return kept, digest

    path, digest = ctx.transport.retrying(action, attempt)
    return fetch_cnb(path, source=source, digest=digest, ctx=ctx)
