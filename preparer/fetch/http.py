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

import contextlib
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from preparer._fs import temp_file
from preparer.errors import FetchError
from preparer.fetch.base import FetchContext, Fetched
from preparer.fetch.cache import CachedTree, CacheMismatch, DownloadCache, KnownTree
from preparer.fetch.extract import Extracted, extract_tar
from preparer.fetch.guard import LimitExceeded
from preparer.fetch.locator import HttpLocator
from preparer.fetch.oci.layout import fetch_cnb
from preparer.fetch.store import Ask, Known, NotShared, Shared, Upload
from preparer.fetch.streams import CHUNK, MAX_TRAILING, Reader, stream_body, verify_digest, verify_file
from preparer.fetch.transport import Unreachable, probe_unchanged
from preparer.fetch.tree import install_cached, new_root, staged_buildpack
from preparer.fetch.url import HttpUrl

if TYPE_CHECKING:
    import requests


def fetch_http(locator: HttpLocator, ctx: FetchContext) -> Fetched:
    """Download, verify and stage the buildpack archive at ``locator.url``.

    :raises FetchError: HTTP errors, exhausted retries, digest or length mismatch, unsafe archives (exit 1).
    """
    source = locator.shown
    if locator.is_cnb:
        return _fetch_cnb(locator, ctx, source)
    store, cache = ctx.store, ctx.store.local
    pinned = None if locator.sha256 is None else "sha256:" + locator.sha256
    if cache is not None and pinned is not None and (tree := store.tree(pinned)) is not None:
        staged = _from_cache(tree, ctx, source, cache)
        if staged is not None:
            return staged
    known = store.known(locator.url)
    receive: _Receive = lambda found: _download(locator, ctx, source, cache, None, found)
    shared = _through_store(locator, ctx, source, receive, known)
    if shared is not None:
        return shared
    if cache is None:
        return _download(locator, ctx, source, None, None)
    if known is not None and probe_unchanged(locator.url, known.headers, ctx.transport):
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
        known = store.known(locator.url)
        try:
            return _download(locator, ctx, source, cache, known)
        except Unreachable as err:
            stand_in = _from_cache(known.tree, ctx, source, cache) if known is not None else None
            if stand_in is None:
                raise
            ctx.warn(f"{source} could not be revalidated ({err.cause}); the download cache's copy is used")
            return stand_in


def _through_store(
    locator: HttpLocator, ctx: FetchContext, source: str, receive: _Receive, known: Known | None
) -> Fetched | None:
    """The archive as the store shares it (docs/fleet.md, "Lookup"), its blob given to ``receive``; ``None``: the
    origin (or the local copy ``known``) is to be used, as without a shared copy.

    :raises FetchError: offline, and nothing can stand in (exit 1).
    """
    ask: Ask = lambda headers: _origin_unchanged(locator, ctx, headers)
    found = ctx.store.shared_archive(locator, source, known is not None, ask, ctx.warn)
    if found == "local":  # offline: this pod's copy, as it is
        assert known is not None and ctx.store.local is not None
        staged = _from_cache(known.tree, ctx, source, ctx.store.local)
        if staged is None:
            raise ctx.store.archive_missing(locator, source)
        return staged
    if found is None:
        return None
    try:
        return replace(receive(found), via="cache repository")
    except NotShared:
        return None
    except LimitExceeded:
        raise
    except FetchError as err:
        ctx.warn(f"the download cache repository's copy of {source} is not used: {err.cause}")
        return None


#: What takes an archive's bytes from the store (:func:`_through_store`).
_Receive = Callable[[Shared], Fetched]


def _origin_unchanged(locator: HttpLocator, ctx: FetchContext, headers: dict[str, str]) -> bool | None:
    """Whether the origin still serves what the record names (a 304 to the conditional ``headers``); ``None`` when
    it cannot be asked."""
    if not headers:
        return False
    try:
        action = f"download {locator.shown}"
        response = ctx.transport.retrying(
            action, lambda: ctx.transport.get(locator.url, headers, action=action, check=False, hop=_hop(ctx))
        )
    except FetchError:
        return None
    response.close()
    if response.status_code == 304:
        return True
    return None if response.status_code >= 500 else False


def _unchanged(
    locator: HttpLocator, known: Known, ctx: FetchContext, source: str, cache: DownloadCache
) -> Fetched | None:
    """The server said the cached tree is current (304); ``None`` when that tree failed its check."""
    _check_pin(locator, known.tree.digest, source)
    ctx.progress(source, 0, 0)
    return _from_cache(known.tree, ctx, source, cache)


def _from_cache(
    tree: CachedTree, ctx: FetchContext, source: str, cache: DownloadCache, via: str | None = "download cache"
) -> Fetched | None:
    """The cached tree installed into staging; ``None`` (and the tree removed) when it is not what was cached.

    :param via: what the report says the bytes came through (``None`` for a tree just downloaded).
    """
    root = new_root(ctx.staging, "http-")
    try:
        install_cached(tree, root, link=ctx.link_installs, guard=ctx.guard)
    except (CacheMismatch, OSError) as err:
        shutil.rmtree(root, ignore_errors=True)
        cache.discard_tree(tree.digest)
        ctx.warn(f"the download cache's copy of {source} was removed: {err}; downloading it again")
        return None
    staged = staged_buildpack(root, source)
    return Fetched(staged.descriptor, (staged,), source, tree.digest, via=via)


def _check_pin(locator: HttpLocator, digest: str, source: str) -> None:
    if locator.sha256 is not None:
        pin = "sha256:" + locator.sha256
        verify_digest(
            digest, pin, f"verify {source}", "sha256 mismatch: the uri pins {expected}, the download is {got}"
        )


def _download(
    locator: HttpLocator,
    ctx: FetchContext,
    source: str,
    cache: DownloadCache | None,
    known: Known | None,
    shared: Shared | None = None,
) -> Fetched:
    """One conditional request (when the cache knows the URL), then, unless it is a 304, the body extracted as it
    arrives: into the cache's temporary space when there is a cache, else straight into staging. With
    ``shared``, the body is the fleet cache's blob instead of the origin's."""
    action = f"download {source}"

    def attempt() -> Fetched:
        if shared is not None:
            response = shared.open()
        else:
            response = ctx.transport.get(
                locator.url, known.headers if known else None, action=action, hop=_hop(ctx)
            )
        if response.status_code == 304 and known is not None and cache is not None:
            response.close()
            again = _unchanged(locator, known, ctx, source, cache)
            return again if again is not None else _download(locator, ctx, source, cache, None)
        dest = cache.new_tree() if cache is not None else new_root(ctx.staging, "http-")
        try:
            return _receive(locator, ctx, source, cache, dest, response, shared)
        finally:
            # A tree that is neither the result nor in the cache (a failure, or handed over) is removed.
            if cache is not None and dest.exists():
                shutil.rmtree(dest, ignore_errors=True)

    return ctx.transport.retrying(action, attempt)


def _receive(
    locator: HttpLocator,
    ctx: FetchContext,
    source: str,
    cache: DownloadCache | None,
    dest: Path,
    response: requests.Response,
    shared: Shared | None,
) -> Fetched:
    """Extract the body into ``dest`` as it arrives, verify it, and stage it (through the cache when there is one);
    keep the origin's bytes for the fleet cache's write-back."""

    def extract(body: Reader) -> Extracted | FetchError:
        try:
            return extract_tar(body, dest, archive=source, record=cache is not None, guard=ctx.guard)
        except FetchError as err:
            if locator.sha256 is None or isinstance(err, LimitExceeded):
                raise
            # Pinned: read the rest, so a tampered or corrupt body is reported as the mismatch it is.
            return err

    upload = _upload(locator, ctx, response) if shared is None else None
    with upload if upload is not None else contextlib.nullcontext():
        outcome, digest, size = stream_body(
            response,
            source,
            ctx.progress,
            extract,
            MAX_TRAILING,
            ctx.transport.download_deadline(),
            ctx.guard,
            upload,
        )
        _check_bytes(locator, digest, source, shared)
        if isinstance(outcome, FetchError):
            raise outcome
        if "oci-layout" in outcome.top_level:  # a .cnb after all: read as one, if the policy allows that kind
            if upload is not None:
                upload.discard()
            if ctx.guard is not None:
                ctx.guard.revealed("cnb", f"{source} is a buildpackage (an OCI image layout)")
            return _fetch_cnb(locator, ctx, source)
        dest.chmod(0o755)
        staged = staged_buildpack(dest, source)  # checked before it enters the cache
        validators = _validators(response, shared)
        ctx.store.keep_upload(upload, digest, size, locator.url, validators)
    if cache is None:
        return Fetched(staged.descriptor, (staged,), source, digest)
    written = None if outcome.records is None else KnownTree(outcome.records, outcome.dirs, outcome.links)
    tree = cache.add_tree(dest, digest, written)
    cache.put_http_meta(locator.url, validators | {"digest": digest})
    fetched = _from_cache(tree, ctx, source, cache, via=None)
    if fetched is None:
        raise FetchError(f"download {source}", "the download cache did not keep what was just put in it")
    return fetched


def _check_bytes(locator: HttpLocator, digest: str, source: str, shared: Shared | None) -> None:
    """The downloaded bytes are what the pin, and the fleet cache's record they came through, say."""
    _check_pin(locator, digest, source)
    if shared is not None and digest != shared.digest:
        raise FetchError(f"download {source}", "the repository's blob is not the digest its record names")


def _validators(response: requests.Response, shared: Shared | None) -> dict[str, str]:
    """The validators to keep for the URL: the origin's, or those of the fleet cache's record."""
    if shared is not None:
        return shared.validators
    return {
        "etag": response.headers.get("ETag", ""),
        "last-modified": response.headers.get("Last-Modified", ""),
    }


def _upload(locator: HttpLocator, ctx: FetchContext, response: requests.Response) -> Upload | None:
    """The store's upload of the origin's bytes in ``response``, when they are to be shared."""
    spool = ctx.store.local.tmp_dir() if ctx.store.local is not None else ctx.staging
    return ctx.store.upload(locator, response.headers.get("Content-Length"), spool)


def _hop(ctx: FetchContext) -> Callable[[HttpUrl], None] | None:
    """What decides each redirect of a download: the platform policy's ``http.allow``, when there is a policy."""
    guard = ctx.guard
    return None if guard is None else lambda url: guard.redirect(url.shown)


def _fetch_cnb(locator: HttpLocator, ctx: FetchContext, source: str) -> Fetched:
    """A ``.cnb`` (OCI layout tar) over http: a pinned one already in the download cache is checked against its
    digest and read from there; else it comes through the fleet cache, or from its origin."""
    pinned = None if locator.sha256 is None else "sha256:" + locator.sha256
    cache = ctx.store.local
    if cache is not None and pinned is not None and (blob := cache.blob_path(pinned)) is not None:
        if verify_file(blob, pinned):
            return fetch_cnb(blob, source=source, digest=pinned, ctx=ctx)
        cache.discard_blob(pinned)
        ctx.warn(f"the download cache's copy of {source} did not match its digest and was removed")
    receive: _Receive = lambda found: _download_cnb(locator, ctx, source, found)
    return _through_store(locator, ctx, source, receive, None) or _download_cnb(locator, ctx, source, None)


def _download_cnb(locator: HttpLocator, ctx: FetchContext, source: str, shared: Shared | None) -> Fetched:
    """The ``.cnb`` downloaded whole (into the cache when there is one; with ``shared``, the fleet cache's
    blob), checked, then read as a buildpackage; the origin's bytes are written back."""
    cache = ctx.store.local
    action = f"download {source}"

    def attempt() -> Fetched:
        if shared is not None:
            response = shared.open()
        else:
            response = ctx.transport.get(locator.url, action=action, hop=_hop(ctx))
        upload = _upload(locator, ctx, response) if shared is None else None
        keeping = upload if upload is not None else contextlib.nullcontext()
        with temp_file(cache.tmp_dir() if cache is not None else ctx.staging, "cnb-") as path, keeping:
            with open(path, "wb") as out:
                _, digest, size = stream_body(
                    response,
                    source,
                    ctx.progress,
                    lambda body: shutil.copyfileobj(body, out, CHUNK),
                    deadline=ctx.transport.download_deadline(),
                    guard=ctx.guard,
                    copy_to=upload,
                )
            _check_bytes(locator, digest, source, shared)
            fetched = fetch_cnb(path, source=source, digest=digest, ctx=ctx)  # read before it is shared
            if cache is not None:
                cache.add_blob(path, digest)
            ctx.store.keep_upload(upload, digest, size, locator.url, _validators(response, shared))
            return fetched

    return ctx.transport.retrying(action, attempt)
