"""An archive's way through the store's tiers: the store's http archives and ``.cnb`` files.

An http archive (or ``.cnb``) is looked for in order: a copy this pod's download cache holds under its pinned
digest; the fleet's repository (docs/fleet.md, "Lookup": a fresh record, or a stale one the origin confirms through
validators that name its blob); this pod's tree for the URL once the origin answers 304 (asked first with one plain
request); else the origin, under the URL's lock so that concurrent preparers download once, its bytes checked
against ``Content-Length``, the pin and the fleet's record, kept in each tier that takes them (the fleet's upload
runs beside the download; its record is written at the store's commit). An origin that cannot be reached is stood
in for by this pod's copy, with a warning; offline, nothing but the tiers is asked.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, TypeVar

from preparer._fs import full_disk, full_in, keeping_copy, no_space, temp_file
from preparer._numbers import decimal
from preparer._record import record
from preparer.errors import FetchError, NoSpaceError
from preparer.fetch.cache import CachedTree, CacheMismatch, KnownTree
from preparer.fetch.guard import LimitExceeded
from preparer.fetch.sink import Sink
from preparer.fetch.store.origin import Origin, Revalidations, conditional
from preparer.fetch.streams import CHUNK, MAX_TRAILING, Reader, stream_body, verify_digest, verify_file
from preparer.fetch.transport import Transport, Unreachable
from preparer.fetch.tree import install_cached, new_root

if TYPE_CHECKING:
    import requests

    from preparer.fetch.extract import Extracted
    from preparer.fetch.fleet import Hit
    from preparer.fetch.fleet_writeback import Upload
    from preparer.fetch.locator import HttpLocator
    from preparer.fetch.store.tiers import Local, Shared, Writes

T = TypeVar("T")


@record
class Known:
    """What this pod's cache holds for a URL: the extracted tree, and the conditional headers to revalidate it."""

    tree: CachedTree
    headers: dict[str, str]


@record
class SharedCopy:
    """An archive the fleet holds: how to read its blob, the digest its record promises (the reader checks it),
    and the validators to keep for the URL (only those that name the blob: see :meth:`ArchiveWay.shared`)."""

    open: Callable[[], requests.Response]
    digest: str
    validators: dict[str, str]


class CacheFull(Exception):
    """The download cache's file system is full (or the quota on it used up): the download goes on without it."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class NotShared(Exception):
    """The repository could not give the blob its record names (the breaker is open): use the origin."""


class Unpacker(Protocol):
    """How a fetcher turns an archive's body into a tree; the store decides where, checks the bytes, keeps it."""

    def unpack(self, body: Reader, dest: Path, record: bool) -> Extracted:
        """Extract ``body`` into the empty directory ``dest`` (``record``: also what a cache's manifest holds).

        :raises FetchError: the archive is not one the fetcher takes.
        """

    def check(self, root: Path) -> None:
        """:raises FetchError: the tree at ``root`` is not what the fetcher takes (before it is kept)."""


@record
class Archive:
    """An archive as the store hands it over: its tree in staging, the digest of its bytes, and the tier it came
    through (``None``: its origin, this run)."""

    #: The tree in a new directory of staging; ``None`` when the archive holds an OCI layout (a ``.cnb``).
    root: Path | None
    digest: str
    via: str | None = None


class Archives:
    """The store's archives (http and ``.cnb``) for one run: the tiers they take (either may be ``None``: absent),
    and the run's revalidations, sent together before its fetches start."""

    def __init__(
        self, local: Local | None, fleet: Shared | None, writeback: Writes | None, link: bool = False
    ) -> None:
        #: This pod's download cache, the fleet's repository and what the run writes back to it (``None``: nothing,
        #: as in ``read`` and ``offline`` modes); ``link``: whether what is installed from this pod's cache may be
        #: hard links into it.
        self.local, self.fleet, self.writeback, self.link = local, fleet, writeback, link
        self.early = Revalidations()

    def tree(self, origin: Origin, unpacker: Unpacker, sink: Sink) -> Archive:
        """The archive at ``origin`` extracted into a new directory of staging, from the first tier that has it
        and may be trusted with it, else from its origin (then kept in every tier that takes it).

        :raises FetchError: it cannot be had (exit 1); offline, and no tier has it.
        """
        return ArchiveWay(self, origin, sink).tree(unpacker)

    def file(self, origin: Origin, read: Callable[[Path, str], T], sink: Sink) -> tuple[T, str | None]:
        """What ``read`` makes of the archive at ``origin`` kept whole (a ``.cnb``: ``read(path, digest)`` before
        it is kept), and the tier it came through (``None``: its origin or this pod's cache)."""
        return ArchiveWay(self, origin, sink).file(read)

    def revalidate(self, locators: Sequence[HttpLocator], transport: Transport) -> None:
        """Ask, together and before the run's fetches start, each origin whose archive this pod's cache holds
        whether it is current: the revalidation requests :meth:`tree` would send one fetch thread at a time. Only
        where that is the request it would send first: an unpinned archive (a pinned one is installed by its
        digest, with no request), kept extracted, and no fleet's repository (asked first, and only sometimes). The
        tree's manifest is only looked for here, not read: one found damaged later costs this one request for
        nothing."""
        local = self.local
        if local is None or self.fleet is not None:
            return
        for locator in locators:
            if locator.sha256 is not None or locator.is_cnb:
                continue
            headers = validators_of(local, locator.url)
            if headers:
                self.early.start(Origin(locator, transport), headers)

    def close(self) -> None:
        """The revalidations no fetch took are shut down."""
        self.early.close()


def validators_of(local: Local | None, url: str) -> dict[str, str]:
    """The conditional request headers that ask the origin of ``url`` whether this pod's extracted copy is current
    (what a revalidation sends); empty when the cache holds none."""
    meta = local.http_meta(url) if local is not None else None
    if local is None or meta is None or not local.has_tree(meta["digest"]):
        return {}
    return conditional(meta)


class ArchiveWay:
    """One archive's way through the store's tiers: a pinned copy, the fleet's (docs/fleet.md, "Lookup"), this
    pod's after the origin confirms it, and the origin (under the URL's lock, so concurrent preparers download
    once); what came from the origin is kept in each tier that takes it."""

    def __init__(self, tiers: Archives, origin: Origin, sink: Sink) -> None:
        self.local, self.fleet, self.writeback, self.link = (
            tiers.local,
            tiers.fleet,
            tiers.writeback,
            tiers.link,
        )
        self.origin, self.sink, self.early = origin, sink, tiers.early
        self.locator, self.source = origin.locator, origin.locator.shown
        self.pinned = None if self.locator.sha256 is None else "sha256:" + self.locator.sha256

    @property
    def offline(self) -> bool:
        """Whether no origin may be asked (the fleet's ``offline`` mode)."""
        return self.fleet is not None and self.fleet.config.mode == "offline"

    # Trees (an archive extracted)

    def tree(self, unpacker: Unpacker) -> Archive:
        local = self.local
        if local is not None and self.pinned is not None and (tree := local.tree(self.pinned)) is not None:
            found = self._installed(local, tree)
            if found is not None:
                return found
        known = self._known(self.locator.url)
        shared = self.shared(known is not None)
        if shared == "local":  # offline: this pod's copy, as it is
            assert known is not None and local is not None
            found = self._installed(local, known.tree)
            if found is None:
                raise _offline_miss(self.locator, self.source)
            return found
        if shared is not None:
            found = self._through_fleet(lambda: self._tree_attempt(unpacker, local, None, shared))
            if found is not None:
                return replace(found, via="cache repository")
        if local is None:
            return self._retrying(lambda: self._tree_attempt(unpacker, None, None))
        if known is not None and self._current(known):
            found = self._unchanged(local, known)
            if found is not None:
                return found
        return self._locked(unpacker, local)

    def _current(self, known: Known) -> bool | None:
        """Whether the origin says this pod's copy is current: the answer to the request sent with the run's others
        (:class:`Revalidations`), or to one sent now."""
        early = self.early.take(self.locator.url, known.headers)
        return early.wait() if early is not None else self.origin.probe(known.headers)

    def _locked(self, unpacker: Unpacker, local: Local) -> Archive:
        key = "http:" + self.locator.url
        with local.lock(key, 2 * self.origin.transport.timeouts[1]) as locked:
            if not locked:
                self.sink.warn(f"{local.lock_name(key)} is held by another preparer; downloading {self.source} "
                               "without the cache")  # fmt: skip
                return self._retrying(lambda: self._tree_attempt(unpacker, None, None))
            # Another preparer may have downloaded it meanwhile: its tree and validators are used.
            known = self._known(self.locator.url)
            try:
                return self._retrying(lambda: self._tree_attempt(unpacker, local, known))
            except CacheFull as full:  # the cache's disk: a cache that cannot be used is not used
                self.sink.warn(
                    f"{no_space(full.error, 'the download cache', local.root)}: {self.source} is downloaded "
                    "without it"
                )
                return self._retrying(lambda: self._tree_attempt(unpacker, None, None))
            except Unreachable as err:
                stand_in = self._installed(local, known.tree) if known is not None else None
                if stand_in is None:
                    raise
                self.sink.warn(f"{self.source} could not be revalidated ({err.cause}); the download cache's copy "
                               "is used")  # fmt: skip
                return stand_in

    def _tree_attempt(
        self,
        unpacker: Unpacker,
        local: Local | None,
        known: Known | None,
        shared: SharedCopy | None = None,
    ) -> Archive:
        """One request (conditional when ``known``; the fleet's blob with ``shared``) and, unless it is a 304, its
        body extracted as it arrives: into the cache's own space when there is a cache, else into staging."""
        response = shared.open() if shared is not None else self.origin.get(known.headers if known else None)
        if response.status_code == 304 and known is not None and local is not None:
            response.close()
            again = self._unchanged(local, known)
            return again if again is not None else self._tree_attempt(unpacker, local, None)
        try:
            dest = local.new_tree() if local is not None else new_root(self.sink.staging, "http-")
        except OSError as err:
            response.close()
            full = self._full(err, local)
            if full is None:
                raise
            raise full from err
        try:
            return self._receive_tree(unpacker, local, dest, response, shared)
        except (FetchError, OSError) as err:
            full = self._full(err, local)
            if full is None:
                raise
            raise full from err
        finally:
            # A tree that is neither the result nor in the cache (a failure, or handed over) is removed.
            if local is not None and dest.exists():
                shutil.rmtree(dest, ignore_errors=True)

    def _receive_tree(
        self,
        unpacker: Unpacker,
        local: Local | None,
        dest: Path,
        response: requests.Response,
        shared: SharedCopy | None,
    ) -> Archive:
        def extract(body: Reader) -> Extracted | FetchError:
            try:
                return unpacker.unpack(body, dest, local is not None)
            except FetchError as err:
                if self.pinned is None or isinstance(err, LimitExceeded):
                    raise
                # Pinned: read the rest, so a tampered or corrupt body is reported as the mismatch it is.
                return err

        upload = self._upload(response, local) if shared is None else None
        with upload if upload is not None else nullcontext():
            outcome, digest, size = self._stream(response, extract, MAX_TRAILING, upload)
            self._check_bytes(digest, shared)
            if isinstance(outcome, FetchError):
                raise outcome
            if "oci-layout" in outcome.top_level:  # a .cnb after all: not a tree, and not shared as one
                if upload is not None:
                    upload.discard()
                return Archive(None, digest)
            dest.chmod(0o755)
            unpacker.check(dest)  # before it enters the cache
            validators = _validators(response, shared)
            self._keep_upload(upload, digest, size, validators)
        if local is None:
            return Archive(dest, digest)
        written = None if outcome.records is None else KnownTree(outcome.records, outcome.dirs, outcome.links)
        try:
            tree = local.add_tree(dest, digest, written)
            local.put_http_meta(self.locator.url, validators | {"digest": digest})
        except OSError as err:
            if full_disk(err) is None:
                raise
            raise CacheFull(err) from err
        found = self._installed(local, tree, via=None)
        if found is None:
            raise FetchError(self.origin.action, "the download cache did not keep what was just put in it")
        return found

    def _unchanged(self, local: Local, known: Known) -> Archive | None:
        """The origin said this pod's tree is current (304); ``None`` when that tree failed its check."""
        self._check_pin(known.tree.digest)
        self.sink.progress(self.source, 0, 0)
        return self._installed(local, known.tree)

    def _installed(
        self, local: Local, tree: CachedTree, via: str | None = "download cache"
    ) -> Archive | None:
        """The cached ``tree`` installed into staging; ``None`` (and the tree removed) when it is not what was
        cached."""
        root = new_root(self.sink.staging, "http-")
        try:
            install_cached(tree, root, link=self.link, guard=self.sink.guard)
        except (CacheMismatch, OSError) as err:
            shutil.rmtree(root, ignore_errors=True)
            full = self._full(err, None)
            if full is not None:  # staging's disk is full, not the copy damaged: it is kept
                raise full from err
            local.discard_tree(tree.digest)
            self.sink.warn(
                f"the download cache's copy of {self.source} was removed: {err}; downloading it again"
            )
            return None
        return Archive(root, tree.digest, via)

    # Files (an archive kept whole: a .cnb)

    def file(self, read: Callable[[Path, str], T]) -> tuple[T, str | None]:
        local = self.local
        if (
            local is not None
            and self.pinned is not None
            and (blob := local.blob_path(self.pinned)) is not None
        ):
            if verify_file(blob, self.pinned):
                return read(blob, self.pinned), None
            local.discard_blob(self.pinned)
            self.sink.warn(
                f"the download cache's copy of {self.source} did not match its digest and was removed"
            )
        try:
            return self._file_from(read, local)
        except Exception as err:
            full = full_in(err, local.root) if local is not None else None
            if full is None:
                raise
        assert local is not None
        # The cache's disk is full (what ``read`` made of the first attempt is in staging, which the run removes).
        self.sink.warn(
            f"{no_space(full, 'the download cache', local.root)}: {self.source} is downloaded without it"
        )
        return self._file_from(read, None)

    def _file_from(self, read: Callable[[Path, str], T], local: Local | None) -> tuple[T, str | None]:
        """The archive from the fleet's repository, else its origin, kept in ``local`` (``None``: not kept)."""
        shared = self.shared(False)
        if isinstance(shared, SharedCopy):
            found = self._through_fleet(lambda: self._file_attempt(read, local, shared))
            if found is not None:
                return found, "cache repository"
        return self._retrying(lambda: self._file_attempt(read, local, None)), None

    def _file_attempt(
        self, read: Callable[[Path, str], T], local: Local | None, shared: SharedCopy | None
    ) -> T:
        """The archive downloaded whole (into ``local`` when it is given, else staging), checked, read by ``read``,
        and kept."""
        response = shared.open() if shared is not None else self.origin.get()
        upload = self._upload(response, local) if shared is None else None
        spool = local.tmp_dir() if local is not None else self.sink.staging
        with temp_file(spool, "cnb-") as path, upload if upload is not None else nullcontext():
            with keeping_copy(), open(path, "wb") as out:  # the network is read, and nothing else
                _, digest, size = self._stream(response, lambda body: shutil.copyfileobj(body, out, CHUNK),
                                               None, upload)  # fmt: skip
            self._check_bytes(digest, shared)
            result = read(path, digest)  # read before it is kept or shared
            if local is not None:
                local.add_blob(path, digest)
            self._keep_upload(upload, digest, size, _validators(response, shared))
        return result

    # The fleet

    def _known(self, url: str) -> Known | None:
        """The tree this pod's cache holds for ``url``, with the validators to ask the origin about it."""
        meta = self.local.http_meta(url) if self.local is not None else None
        tree = self.local.tree(meta["digest"]) if self.local is not None and meta is not None else None
        if meta is None or tree is None:
            return None
        headers = conditional(meta)
        return Known(tree, headers) if headers else None

    def shared(self, local_copy: bool) -> SharedCopy | Literal["local"] | None:
        """What the fleet holds for ``locator`` and may be used (docs/fleet.md, "Lookup"): its blob, ``"local"``
        for this pod's own copy (offline: it stands as it is), or ``None`` (the origin, or the local copy after the
        origin confirms it, as without a repository).

        A stale record is used only after the origin confirms it, and only when its validators name its blob.

        :raises FetchError: offline, and nothing can stand in (exit 1).
        """
        found = self._shared(local_copy)
        if found is None and self.offline:
            raise _offline_miss(self.locator, self.source)
        return found

    def _shared(self, local_copy: bool) -> SharedCopy | Literal["local"] | None:
        fleet, locator = self.fleet, self.locator
        if fleet is None:
            return None
        if local_copy:
            return "local" if self.offline else None
        if locator.target.private:
            return None  # never looked up, never written back: what a credential fetched is not shared
        hit = fleet.archive_by_digest(locator.sha256) if locator.sha256 else fleet.archive_by_url(locator.url)
        if hit is None:
            return None
        attested = self._attested(hit, locator.url)
        if locator.sha256 is None and not fleet.fresh(hit):
            # The origin decides. Its 304 vouches for the repository's bytes only through validators that name
            # them: anyone who can push copies an origin's ETag onto a blob of their own with one HEAD.
            if not attested:
                return None
            unchanged = self.origin.unchanged(conditional(hit.validators))
            if unchanged is False or (unchanged is None and fleet.config.max_age == 0):
                return (
                    None  # something newer, or no answer where an unpinned URL's bytes must be the origin's
                )
            if unchanged is None:
                self.sink.warn(
                    f"{self.source} could not be revalidated with its origin; the download cache repository's copy "
                    "is used"
                )
            elif self.writeback is not None:
                self.writeback.remember_record(hit, locator.url)

        def opener() -> requests.Response:
            response = fleet.blob(hit.digest) if fleet.usable else None
            if response is None:
                raise NotShared
            return response

        # Validators that do not name the bytes are not kept: the local cache would revalidate a pusher's bytes.
        return SharedCopy(opener, hit.digest, hit.validators if attested else {})

    def _attested(self, hit: Hit, url: str) -> bool:
        """Whether the record's validators name its blob, so that the origin's 304 to them vouches for its bytes:
        a strong ETag that is the blob's sha256 (what the origin says its content hashes to), or validators this
        pod's own download cache recorded from the origin for the same digest."""
        etag = hit.validators["etag"]
        if etag and not etag.startswith("W/") and etag.strip('"').removeprefix("sha256:") == hit.digest[7:]:
            return True
        meta = self.local.http_meta(url) if self.local is not None else None
        mine = conditional(meta) if meta is not None and meta.get("digest") == hit.digest else {}
        return bool(mine) and mine == conditional(hit.validators)

    def _upload(self, response: requests.Response, local: Local | None) -> Upload | None:
        """The upload of an archive about to be downloaded from its origin, when it is to be shared (never for a
        URL that may carry a credential: user information, or a query). Its bytes wait, when the repository is
        slower than the origin, where the download itself is written: in ``local``'s temporary directory when the
        attempt keeps it there, else in staging (so a full download cache, which the next attempt goes without, is
        not written to again)."""
        if self.writeback is None or self.locator.target.private:
            return None
        spool = local.tmp_dir() if local is not None else self.sink.staging
        length = response.headers.get("Content-Length")
        return self.writeback.upload(spool, self.pinned, decimal(length or ""))

    def _keep_upload(self, upload: Upload | None, digest: str, size: int, validators: dict[str, str]) -> None:
        """The archive ``digest`` (``size`` bytes) passed its checks: the upload under way is finished, and its
        record follows at the store's commit."""
        if upload is not None and self.writeback is not None:
            self.writeback.remember_upload(upload, digest, size, self.locator.url, validators)

    # Both

    def _through_fleet(self, receive: Callable[[], T]) -> T | None:
        """What ``receive`` makes of the fleet's blob; ``None``: the origin is to be used."""
        try:
            found = receive()
        except (NotShared, CacheFull):  # a full cache: the origin's download says so, and goes on without it
            return None
        except LimitExceeded:
            raise
        except FetchError as err:
            if full_disk(err) is not None:  # a disk of this pod's is full, not the repository's copy bad
                raise
            self.sink.warn(f"the download cache repository's copy of {self.source} is not used: {err.cause}")
            return None
        return found

    def _full(self, err: BaseException, local: Local | None) -> Exception | None:
        """What a full disk met while writing a download is: the cache's (:class:`CacheFull`, when the tree was
        written there) or staging's (:class:`~preparer.errors.NoSpaceError`); ``None`` for any other error."""
        full = full_disk(err)
        if full is None or isinstance(err, (CacheFull, NoSpaceError)):
            return None
        if local is not None:
            return CacheFull(full)
        return self.sink.staging_full(self.source, full)

    def _retrying(self, attempt: Callable[[], T]) -> T:
        return self.origin.transport.retrying(self.origin.action, attempt)

    def _stream(
        self,
        response: requests.Response,
        consume: Callable[[Reader], T],
        trailing: int | None,
        upload: Upload | None,
    ) -> tuple[T, str, int]:
        deadline = self.origin.transport.download_deadline()
        sink = self.sink
        return stream_body(
            response, self.source, sink.progress, consume, trailing, deadline, sink.guard, upload
        )

    def _check_pin(self, digest: str) -> None:
        if self.pinned is not None:
            verify_digest(digest, self.pinned, f"verify {self.source}",
                          "sha256 mismatch: the uri pins {expected}, the download is {got}")  # fmt: skip

    def _check_bytes(self, digest: str, shared: SharedCopy | None) -> None:
        """The bytes are what the pin, and the fleet's record they came through, say."""
        self._check_pin(digest)
        if shared is not None and digest != shared.digest:
            raise FetchError(self.origin.action, "the repository's blob is not the digest its record names")


def _validators(response: requests.Response, shared: SharedCopy | None) -> dict[str, str]:
    """The validators to keep for the URL: the origin's, or those of the fleet's record."""
    if shared is not None:
        return shared.validators
    return {
        "etag": response.headers.get("ETag", ""),
        "last-modified": response.headers.get("Last-Modified", ""),
    }


def _offline_miss(locator: HttpLocator, source: str) -> FetchError:
    if locator.target.private:
        return FetchError(
            f"download {source}",
            "offline, and a URL with user information or a query is never kept in the download cache repository "
            "(it may hold a credential)",
        )
    from preparer.fetch.fleet import offline_miss, url_tag  # deferred: only an offline run misses

    seed = f"sha256-{locator.sha256}" if locator.sha256 else url_tag(locator.url)
    return offline_miss(f"download {source}", seed)
