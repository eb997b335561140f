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
from typing import IO, TYPE_CHECKING, NamedTuple

from preparer._fs import temp_file
from preparer.errors import FetchError
from preparer.fetch.base import FetchContext, Fetched
from preparer.fetch.cache import CachedTree, CacheMismatch, DownloadCache, KnownTree
from preparer.fetch.extract import Extracted, extract_tar
from preparer.fetch.fleet import Hit, Upload, offline_miss, url_tag
from preparer.fetch.guard import LimitExceeded
from preparer.fetch.locator import HttpLocator
from preparer.fetch.oci.layout import fetch_cnb
from preparer.fetch.streams import CHUNK, MAX_TRAILING, stream_body, verify_digest, verify_file
from preparer.fetch.transport import Unreachable, probe_unchanged
from preparer.fetch.tree import install_cached, new_root, staged_buildpack
from preparer.fetch.url import HttpUrl

if TYPE_CHECKING:
    import requests


class _Known(NamedTuple):
    """What the cache holds for a URL: the extracted tree and the conditional headers to revalidate it."""

    tree: CachedTree
    headers: dict[str, str]


def fetch_http(locator: HttpLocator, ctx: FetchContext) -> Fetched:
    """Download, verify and stage the buildpack archive at ``locator.url``.

    :raises FetchError: HTTP errors, exhausted retries, digest or length mismatch, unsafe archives (exit 1).
    """
    source = locator.shown
    if locator.is_cnb:
        return _fetch_cnb(locator, ctx, source)
    cache = ctx.cache
    pinned = None if locator.sha256 is None else "sha256:" + locator.sha256
    if cache is not None and pinned is not None and (tree := cache.tree(pinned)) is not None:
        staged = _from_cache(tree, ctx, source, cache)
        if staged is not None:
            return staged
    known = _known(locator, cache) if cache is not None else None
    if ctx.fleet is not None:
        receive: _Receive = lambda found: _download(locator, ctx, source, cache, None, found)
        from_fleet = _through_fleet(locator, ctx, source, receive, cache, known)
        if from_fleet is not None:
            return from_fleet
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
        known = _known(locator, cache)
        try:
            return _download(locator, ctx, source, cache, known)
        except Unreachable as err:
            stand_in = _from_cache(known.tree, ctx, source, cache) if known is not None else None
            if stand_in is None:
                raise
            ctx.warn(f"{source} could not be revalidated ({err.cause}); the download cache's copy is used")
            return stand_in


def _through_fleet(
    locator: HttpLocator,
    ctx: FetchContext,
    source: str,
    receive: _Receive,
    cache: DownloadCache | None = None,
    known: _Known | None = None,
) -> Fetched | None:
    """The archive through the fleet cache (docs/fleet.md, "Lookup"), its blob given to ``receive``; ``None``:
    the origin (or the local copy ``known``) is to be used, as without a repository.

    :raises FetchError: offline, and the repository does not have it (exit 1).
    """
    fetched = _from_fleet(locator, ctx, source, receive, cache, known)
    if fetched is None and ctx.fleet is not None and ctx.fleet.config.mode == "offline":
        if locator.target.private:
            raise FetchError(
                f"download {source}",
                "offline, and a URL with user information or a query is never kept in the download cache "
                "repository (it may hold a credential)",
            )
        seed = f"sha256-{locator.sha256}" if locator.sha256 else url_tag(locator.url)
        raise offline_miss(f"download {source}", seed)
    return fetched


def _from_fleet(
    locator: HttpLocator,
    ctx: FetchContext,
    source: str,
    receive: _Receive,
    cache: DownloadCache | None,
    known: _Known | None,
) -> Fetched | None:
    fleet = ctx.fleet
    assert fleet is not None
    offline = fleet.config.mode == "offline"
    if known is not None and cache is not None:
        # A local copy: revalidated with the origin as without a repository, or used as it is when offline.
        return _from_cache(known.tree, ctx, source, cache) if offline else None
    if locator.target.private:
        return None  # never looked up, never written back: what a credential fetched is not shared
    if locator.sha256 is not None:
        hit = fleet.archive_by_digest(locator.sha256)
    else:
        hit = fleet.archive_by_url(locator.url)
    if hit is None:
        return None
    attested = _attested(hit, cache, locator.url)
    if locator.sha256 is None and not fleet.fresh(hit):
        # The origin decides. Its 304 vouches for the repository's bytes only through validators that name them:
        # anyone who can push copies an origin's ETag onto a blob of their own with one HEAD (docs/fleet.md).
        if not attested:
            return None
        unchanged = _origin_unchanged(locator, ctx, _conditional(hit.validators))
        if unchanged is False or (unchanged is None and fleet.config.max_age == 0):
            return None  # something newer, or no answer where an unpinned URL's bytes must be the origin's
        if unchanged is None:
            ctx.warn(
                f"{source} could not be revalidated with its origin; the download cache repository's copy is used"
            )
        else:
            fleet.remember_record(hit, locator.url)
    # Validators that do not name the bytes are not kept: the local cache would revalidate a pusher's bytes.
    validators = hit.validators if attested else {}

    def opener() -> requests.Response:
        response = fleet.blob(hit.digest) if fleet.usable else None
        if response is None:
            raise _NotInFleet
        return response

    try:
        return replace(receive(_Bytes(opener, hit.digest, validators)), via="cache repository")
    except _NotInFleet:
        return None
    except LimitExceeded:
        raise
    except FetchError as err:
        ctx.warn(f"the download cache repository's copy of {source} is not used: {err.cause}")
        return None


#: What takes an archive's bytes from the fleet cache (:func:`_through_fleet`).
_Receive = Callable[["_Bytes"], Fetched]


class _NotInFleet(Exception):
    """The repository could not give the blob its record names (the breaker is open): use the origin."""


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


def _attested(hit: Hit, cache: DownloadCache | None, url: str) -> bool:
    """Whether the record's validators name its blob, so that the origin's 304 to them vouches for its bytes: a
    strong ETag that is the blob's sha256 (what the origin says its content hashes to), or validators this pod's own
    download cache recorded from the origin for the same digest."""
    etag = hit.validators["etag"]
    if etag and not etag.startswith("W/") and etag.strip('"').removeprefix("sha256:") == hit.digest[7:]:
        return True
    meta = cache.http_meta(url) if cache is not None else None
    mine = _conditional(meta) if meta is not None and meta.get("digest") == hit.digest else {}
    return bool(mine) and mine == _conditional(hit.validators)


def _known(locator: HttpLocator, cache: DownloadCache) -> _Known | None:
    meta = cache.http_meta(locator.url)
    tree = cache.tree(meta["digest"]) if meta is not None else None
    if meta is None or tree is None:
        return None
    headers = _conditional(meta)
    return _Known(tree, headers) if headers else None


def _conditional(validators: dict[str, str]) -> dict[str, str]:
    """The conditional request headers of an origin's validators (``etag``, ``last-modified``)."""
    headers = {}
    if validators.get("etag"):
        headers["If-None-Match"] = validators["etag"]
    if validators.get("last-modified"):
        headers["If-Modified-Since"] = validators["last-modified"]
    return headers


def _unchanged(
    locator: HttpLocator, known: _Known, ctx: FetchContext, source: str, cache: DownloadCache
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


class _Bytes(NamedTuple):
    """Where an archive's bytes come from when not from the origin: the fleet cache's blob (docs/fleet.md)."""

    open: Callable[[], requests.Response]
    #: The digest the repository's record promises (checked).
    digest: str
    #: The validators the record holds, stored for the URL as if the origin had sent them.
    validators: dict[str, str]


def _download(
    locator: HttpLocator,
    ctx: FetchContext,
    source: str,
    cache: DownloadCache | None,
    known: _Known | None,
    fleet_bytes: _Bytes | None = None,
) -> Fetched:
    """One conditional request (when the cache knows the URL), then, unless it is a 304, the body extracted as it
    arrives: into the cache's temporary space when there is a cache, else straight into staging. With
    ``fleet_bytes``, the body is the fleet cache's blob instead of the origin's."""
    action = f"download {source}"

    def attempt() -> Fetched:
        if fleet_bytes is not None:
            response = fleet_bytes.open()
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
            return _receive(locator, ctx, source, cache, dest, response, fleet_bytes)
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
    fleet_bytes: _Bytes | None,
) -> Fetched:
    """Extract the body into ``dest`` as it arrives, verify it, and stage it (through the cache when there is one);
    keep the origin's bytes for the fleet cache's write-back."""

    def extract(body: IO[bytes]) -> Extracted | FetchError:
        try:
            return extract_tar(body, dest, archive=source, record=cache is not None, guard=ctx.guard)
        except FetchError as err:
            if locator.sha256 is None or isinstance(err, LimitExceeded):
                raise
            # Pinned: read the rest, so a tampered or corrupt body is reported as the mismatch it is.
            return err

    upload = _upload(locator, ctx, cache, response) if fleet_bytes is None else None
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
        _check_bytes(locator, digest, source, fleet_bytes)
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
        validators = _validators(response, fleet_bytes)
        if upload is not None and ctx.fleet is not None:
            ctx.fleet.remember_upload(upload, digest, size, locator.url, validators)
    if cache is None:
        return Fetched(staged.descriptor, (staged,), source, digest)
    written = None if outcome.records is None else KnownTree(outcome.records, outcome.dirs, outcome.links)
    tree = cache.add_tree(dest, digest, written)
    cache.put_http_meta(locator.url, validators | {"digest": digest})
    fetched = _from_cache(tree, ctx, source, cache, via=None)
    if fetched is None:
        raise FetchError(f"download {source}", "the download cache did not keep what was just put in it")
    return fetched


def _check_bytes(locator: HttpLocator, digest: str, source: str, fleet_bytes: _Bytes | None) -> None:
    """The downloaded bytes are what the pin, and the fleet cache's record they came through, say."""
    _check_pin(locator, digest, source)
    if fleet_bytes is not None and digest != fleet_bytes.digest:
        raise FetchError(f"download {source}", "the repository's blob is not the digest its record names")


def _validators(response: requests.Response, fleet_bytes: _Bytes | None) -> dict[str, str]:
    """The validators to keep for the URL: the origin's, or those of the fleet cache's record."""
    if fleet_bytes is not None:
        return fleet_bytes.validators
    return {
        "etag": response.headers.get("ETag", ""),
        "last-modified": response.headers.get("Last-Modified", ""),
    }


def _upload(
    locator: HttpLocator, ctx: FetchContext, cache: DownloadCache | None, response: requests.Response
) -> Upload | None:
    """The fleet cache's upload of the origin's bytes in ``response``, when they are to be written back: never for
    a URL that may carry a credential, user information or a query (docs/fleet.md)."""
    fleet = ctx.fleet
    if fleet is None or locator.target.private:
        return None
    expected = None if locator.sha256 is None else "sha256:" + locator.sha256
    length = response.headers.get("Content-Length", "")
    spool = cache.tmp_dir() if cache is not None else ctx.staging
    return fleet.upload(spool, expected, int(length) if length.isdigit() else None)


def _hop(ctx: FetchContext) -> Callable[[HttpUrl], None] | None:
    """What decides each redirect of a download: the platform policy's ``http.allow``, when there is a policy."""
    guard = ctx.guard
    return None if guard is None else lambda url: guard.redirect(url.shown)


def _fetch_cnb(locator: HttpLocator, ctx: FetchContext, source: str) -> Fetched:
    """A ``.cnb`` (OCI layout tar) over http: a pinned one already in the download cache is checked against its
    digest and read from there; else it comes through the fleet cache, or from its origin."""
    pinned = None if locator.sha256 is None else "sha256:" + locator.sha256
    cache = ctx.cache
    if cache is not None and pinned is not None and (blob := cache.blob_path(pinned)) is not None:
        if verify_file(blob, pinned):
            return fetch_cnb(blob, source=source, digest=pinned, ctx=ctx)
        cache.discard_blob(pinned)
        ctx.warn(f"the download cache's copy of {source} did not match its digest and was removed")
    if ctx.fleet is not None:
        receive: _Receive = lambda found: _download_cnb(locator, ctx, source, found)
        from_fleet = _through_fleet(locator, ctx, source, receive)
        if from_fleet is not None:
            return from_fleet
    return _download_cnb(locator, ctx, source, None)


def _download_cnb(
    locator: HttpLocator, ctx: FetchContext, source: str, fleet_bytes: _Bytes | None
) -> Fetched:
    """The ``.cnb`` downloaded whole (into the cache when there is one; with ``fleet_bytes``, the fleet cache's
    blob), checked, then read as a buildpackage; the origin's bytes are written back."""
    cache = ctx.cache
    action = f"download {source}"

    def attempt() -> Fetched:
        if fleet_bytes is not None:
            response = fleet_bytes.open()
        else:
            response = ctx.transport.get(locator.url, action=action, hop=_hop(ctx))
        upload = _upload(locator, ctx, cache, response) if fleet_bytes is None else None
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
            _check_bytes(locator, digest, source, fleet_bytes)
            fetched = fetch_cnb(path, source=source, digest=digest, ctx=ctx)  # read before it is shared
            if cache is not None:
                cache.add_blob(path, digest)
            if upload is not None and ctx.fleet is not None:
                validators = _validators(response, fleet_bytes)
                ctx.fleet.remember_upload(upload, digest, size, locator.url, validators)
            return fetched

    return ctx.transport.retrying(action, attempt)
