"""Buildpack archives over ``http(s)``: streamed, verified, retried, cached.

The body is extracted while it arrives (one pass, memory flat), hashed on the way, and checked against the
``Content-Length`` and any ``#sha256=`` pin before the result is used. With a download cache, the extracted tree
is kept under the archive's digest with a manifest; later runs revalidate it with ``If-None-Match`` /
``If-Modified-Since`` and install it from the cache in one pass over its manifest (hard links or copies, every
file checked), and a pinned digest already in the cache needs no request at all. The revalidation is first asked
with one plain request (:func:`~preparer.fetch.transport.probe_unchanged`), without a lock, so a warm run
never imports requests; only a download takes the URL's lock, and looks at the cache again under it. A cached tree
that fails its check is removed, with a warning, and downloaded again.
"""

from __future__ import annotations

import shutil
from typing import IO, NamedTuple

from preparer._fs import temp_file
from preparer.errors import FetchError
from preparer.fetch.base import FetchContext, Fetched
from preparer.fetch.cache import CachedTree, CacheMismatch, DownloadCache, KnownTree
from preparer.fetch.extract import Extracted, extract_tar
from preparer.fetch.locator import HttpLocator, redact
from preparer.fetch.oci.layout import fetch_cnb
from preparer.fetch.streams import CHUNK, MAX_TRAILING, stream_body, verify_digest, verify_file
from preparer.fetch.transport import probe_unchanged
from preparer.fetch.tree import install_cached, new_root, staged_buildpack
from preparer.policy import LimitExceeded


class _Known(NamedTuple):
    """What the cache holds for a URL: the extracted tree and the conditional headers to revalidate it."""

    tree: CachedTree
    headers: dict[str, str]


def fetch_http(locator: HttpLocator, ctx: FetchContext) -> Fetched:
    """Download, verify and stage the buildpack archive at ``locator.url``.

    :raises FetchError: HTTP errors, exhausted retries, digest or length mismatch, unsafe archives (exit 1).
    """
    source = redact(locator.url)
    if locator.url.split("?", 1)[0].endswith(".cnb"):
        return _fetch_cnb(locator, ctx, source)
    cache = ctx.cache
    if cache is None:
        return _download(locator, ctx, source, None, None)
    pinned = None if locator.sha256 is None else "sha256:" + locator.sha256
    if pinned is not None and (tree := cache.tree(pinned)) is not None:
        staged = _from_cache(tree, ctx, source, cache)
        if staged is not None:
            return staged
    known = _known(locator, cache)
    if known is not None and probe_unchanged(locator.url, known.headers, ctx.transport.timeouts):
        staged = _unchanged(locator, known, ctx, source, cache)
        if staged is not None:
            return staged
    key = "http:" + locator.url
    with cache.lock(key, ctx.lock_wait) as locked:
        if not locked:
            ctx.warn(
                f"{cache.lock_name(key)} is held by another preparer; downloading {source} without the cache"
            )
            return _download(locator, ctx, source, None, None)
        # Another preparer may have downloaded it meanwhile: its tree and validators are used.
        return _download(locator, ctx, source, cache, _known(locator, cache))


def _known(locator: HttpLocator, cache: DownloadCache) -> _Known | None:
    meta = cache.http_meta(locator.url)
    tree = cache.tree(meta["digest"]) if meta is not None else None
    if meta is None or tree is None:
        return None
    headers = {}
    if meta.get("etag"):
        headers["If-None-Match"] = meta["etag"]
    if meta.get("last-modified"):
        headers["If-Modified-Since"] = meta["last-modified"]
    return _Known(tree, headers) if headers else None


def _unchanged(
    locator: HttpLocator, known: _Known, ctx: FetchContext, source: str, cache: DownloadCache
) -> Fetched | None:
    """The server said the cached tree is current (304); ``None`` when that tree failed its check."""
    _check_pin(locator, known.tree.digest, source)
    ctx.progress(source, 0, 0)
    return _from_cache(known.tree, ctx, source, cache)


def _from_cache(tree: CachedTree, ctx: FetchContext, source: str, cache: DownloadCache) -> Fetched | None:
    """The cached tree installed into staging; ``None`` (and the tree removed) when it is not what was cached."""
    root = new_root(ctx.staging, "http-")
    try:
        install_cached(tree, root, link=ctx.link_installs, budget=ctx.budget)
    except (CacheMismatch, OSError) as err:
        shutil.rmtree(root, ignore_errors=True)
        cache.discard_tree(tree.digest)
        ctx.warn(f"the download cache's copy of {source} was removed: {err}; downloading it again")
        return None
    staged = staged_buildpack(root, source)
    return Fetched(staged.descriptor, (staged,), source, tree.digest)


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
        if response.status_code == 304 and known is not None and cache is not None:
            response.close()
            again = _unchanged(locator, known, ctx, source, cache)
            return again if again is not None else _download(locator, ctx, source, cache, None)
        dest = cache.new_tree() if cache is not None else new_root(ctx.staging, "http-")
        kept = False  # whether ``dest`` is the result (staged without a cache)
        try:

            def extract(body: IO[bytes]) -> Extracted | FetchError:
                try:
                    return extract_tar(
                        body, dest, archive=source, record=cache is not None, budget=ctx.budget
                    )
                except FetchError as err:
                    if locator.sha256 is None or isinstance(err, LimitExceeded):
                        raise
                    # Pinned: read the rest, so a tampered or corrupt body is reported as the mismatch it is.
                    return err

            outcome, digest, _ = stream_body(
                response, source, ctx.progress, extract, MAX_TRAILING, ctx.transport.deadline, ctx.budget
            )
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
            written = (
                None if outcome.records is None else KnownTree(outcome.records, outcome.dirs, outcome.links)
            )
            tree = cache.add_tree(dest, digest, written)
            validators = {
                "etag": response.headers.get("ETag", ""),
                "last-modified": response.headers.get("Last-Modified", ""),
            }
            cache.put_http_meta(locator.url, validators | {"digest": digest})
            fetched = _from_cache(tree, ctx, source, cache)
            if fetched is None:
                raise FetchError(action, "the download cache did not keep what was just put in it")
            return fetched
        finally:
            # A tree that is neither the result nor in the cache (a failure, or handed over) is removed.
            if not kept and dest.exists():
                shutil.rmtree(dest, ignore_errors=True)

    return ctx.transport.retrying(action, attempt)


def _fetch_cnb(locator: HttpLocator, ctx: FetchContext, source: str) -> Fetched:
    """A ``.cnb`` (OCI layout tar) over http: downloaded whole (into the cache when there is one), then read as a
    buildpackage. A pinned one already in the cache is checked against its digest before it is read."""
    pinned = None if locator.sha256 is None else "sha256:" + locator.sha256
    cache = ctx.cache
    if cache is not None and pinned is not None and (blob := cache.blob_path(pinned)) is not None:
        if verify_file(blob, pinned):
            return fetch_cnb(blob, source=source, digest=pinned, ctx=ctx)
        cache.discard_blob(pinned)
        ctx.warn(f"the download cache's copy of {source} did not match its digest and was removed")
    action = f"download {source}"

    def attempt() -> Fetched:
        response = ctx.transport.get(locator.url, action=action)
        with temp_file(cache.tmp_dir() if cache is not None else ctx.staging, "cnb-") as path:
            with open(path, "wb") as out:
                _, digest, _ = stream_body(
                    response,
                    source,
                    ctx.progress,
                    lambda body: shutil.copyfileobj(body, out, CHUNK),
                    deadline=ctx.transport.deadline,
                    budget=ctx.budget,
                )
            _check_pin(locator, digest, source)
            fetched = fetch_cnb(path, source=source, digest=digest, ctx=ctx)  # read before it is shared
            if cache is not None:
                cache.add_blob(path, digest)
            return fetched

    return ctx.transport.retrying(action, attempt)
