"""The store behind the fetchers: where fetched bytes are kept and found again, tier after tier.

Two tiers, either of which a run may lack: this pod's download cache (:mod:`~preparer.fetch.cache`: verified blobs
and extracted trees, and the validators an origin gave for each URL) and the fleet's (:mod:`~preparer.fetch.fleet`:
an OCI repository the pods share, docs/fleet.md). A run builds one :class:`Store` from its inputs; fetchers ask it
what a key names and hand it what they fetched, and never ask which tiers exist. What a tier may be trusted with is
the store's business: the freshness of a shared record (max-age), whether a copy stands in for an origin that cannot
be reached, offline mode, which URLs are never shared, and the breaker that turns a failing repository off.
:meth:`Store.commit`, after the run's own commit, is the fleet's write-back.

An http archive's way through the tiers is :mod:`~preparer.fetch.archives`, which only this module imports; with
it, this is the one module that imports the tiers. Fetchers import this one.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from preparer._fs import full_disk, full_in, no_space
from preparer._logger import log
from preparer._record import record
from preparer.errors import FetchError
from preparer.fetch.archives import Archive, ArchiveWay, Origin, Revalidations, Unpacker, conditional
from preparer.fetch.cache import CacheUnusable, DownloadCache, dumps_signature_record, signature_record
from preparer.fetch.clock import RunClock
from preparer.fetch.locator import redact
from preparer.fetch.sink import Sink
from preparer.fetch.streams import (
    HashingReader,
    Reader,
    sha256_of,
)
from preparer.fetch.transport import Transport, Unreachable

if TYPE_CHECKING:
    from preparer.fetch.fleet import Fleet, FleetConfig, Hit, Mode
    from preparer.fetch.fleet_writeback import WriteBack
    from preparer.fetch.guard import SignatureObject
    from preparer.fetch.locator import HttpLocator

T = TypeVar("T")

__all__ = [
    "Archive",
    "Origin",
    "SharedFile",
    "Store",
    "Unpacker",
    "conditional",
    "parse_repo",
]


@contextmanager
def opened_store(
    cache: Path | None,
    repo: str | None = None,
    mode: str = "read-write",
    max_age: float = 0.0,
    *,
    environ: Mapping[str, str] | None = None,
    insecure_registries: tuple[str, ...] = (),
    warn: Callable[[str], None] = log.warning,
    clock: RunClock | None = None,
    download_timeout: float = 1800.0,
    link_installs: bool = False,
    given: Transport | None = None,
) -> Iterator[Store]:
    """The run's store, for the block: the download cache at ``cache`` (opened, checked, and claimed: a directory
    of the run's own for partial downloads, removed with what runs that died left), and the fleet's repository
    ``repo`` (``-download-cache-repo``, its mode and max-age). A cache that cannot be trusted is left out with a
    warning: a store never fails a build. Uploads the run did not commit end with the block.

    :param given: the caller's transport (``Inputs.transport``): the repository's requests go through its
        session too."""
    import contextlib  # deferred: only runs that fetch open a store

    with contextlib.ExitStack() as stack:
        local = _claimed_cache(stack, cache, warn) if cache is not None else None
        shared, transport = None, None
        if repo is not None:
            from preparer.fetch import fleet  # deferred: only runs with a repository need its tier

            shared = fleet.FleetConfig(repo, _mode(mode), max_age)
            transport = stack.enter_context(
                Transport(
                    timeouts=(fleet.CONNECT_SECONDS, fleet.READ_SECONDS),
                    retries=0,
                    deadline=download_timeout,
                    clock=clock or RunClock(),
                    environ=environ or {},
                )
            )
            if given is not None:
                transport.use_session(given.session())
        store = Store(
            local, shared, environ=environ, insecure_registries=insecure_registries, warn=warn,
            transport=transport, link_installs=link_installs,
        )  # fmt: skip
        stack.callback(store.close)
        yield store


def parse_repo(value: str) -> str:
    """``-download-cache-repo``'s value, checked (:func:`preparer.fetch.fleet.parse_repo`)."""
    from preparer.fetch.fleet import parse_repo as parse  # deferred: only runs with a repository

    return parse(value)


def _mode(mode: str) -> Mode:
    """``mode``, one of the fleet's modes (the inputs checked it)."""
    from preparer.fetch.fleet import MODES  # deferred, as above

    for known in MODES:
        if known == mode:
            return known
    raise ValueError(f"not a mode of the download cache repository: {mode}")


def _claimed_cache(stack: Any, root: Path, warn: Callable[[str], None]) -> DownloadCache | None:
    try:
        cache = DownloadCache.open(root)
        removed = stack.enter_context(cache.claim())
    except CacheUnusable as why:
        warn(f"the download cache is not used: {why}")
        return None
    except OSError as err:
        warn(f"the download cache is not used: {root}: {err.strerror or err}")
        return None
    if removed:
        log.debug("Removed what %d interrupted runs left in the download cache", len(removed))
    return cache


class Store:
    """One run's store: the download cache (``local``) and the fleet's repository, each ``None`` when absent."""

    def __init__(
        self,
        local: DownloadCache | None = None,
        fleet: FleetConfig | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        insecure_registries: tuple[str, ...] = (),
        warn: Callable[[str], None] | None = None,
        transport: Transport | None = None,
        link_installs: bool = False,
    ) -> None:
        # This pod's download cache: where trees are extracted and blobs kept (``None``: into staging only).
        self._local = local
        #: Whether what is installed from this pod's cache may be hard links into it: only when the build cannot
        #: write the cache's files (the preparer runs as root, the files are root's, the build is another user).
        self.link_installs = link_installs
        self._fleet: Fleet | None = None
        #: What the run writes back to the fleet's repository (``read-write`` mode only).
        self._writeback: WriteBack | None = None
        #: The run's revalidation requests, sent together (:meth:`revalidate`).
        self._early = Revalidations()
        #: The image indexes read from the fleet in this run, by digest (verified), for the registry client.
        self._indexes: dict[str, bytes] = {}
        #: The image index each tag served offline from the fleet named, as its record says (:meth:`tag_index`).
        self._tag_indexes: dict[str, str] = {}
        #: Set once this pod's cache was found full while a blob was kept in it: the run's blobs are not kept.
        self._blobs_unkept = threading.Event()
        self._unkept_lock = threading.Lock()
        self._warn = warn or log.warning
        if fleet is not None:
            from preparer.fetch.fleet import Fleet  # deferred, as in opened_store

            self._fleet = Fleet(
                fleet, dict(environ or {}), insecure_registries, warn, transport or Transport()
            )
            if fleet.mode == "read-write":
                from preparer.fetch.fleet_writeback import WriteBack  # deferred, as the fleet

                self._writeback = WriteBack(self._fleet)

    @classmethod
    def reading(cls, cache: Path) -> Store:
        """This pod's download cache at ``cache``, to read only (nothing is made or changed; absent or not to be
        trusted: an empty store)."""
        return cls(DownloadCache.existing(cache))

    def digest_of(self, url: str) -> str | None:
        """The digest of what this pod's cache last downloaded from ``url`` (a hint for pins; never trusted as one)."""
        meta = self._local.http_meta(url) if self._local is not None else None
        return meta["digest"] if meta else None

    def holds(self, digest: str) -> bool:
        """Whether this pod's cache holds the blob, or the extracted archive, ``digest`` (a hint for what a plan will
        download: what is read back is verified, as ever)."""
        local = self._local
        return local is not None and (local.blob_path(digest) is not None or local.has_tree(digest))

    def validators_of(self, url: str) -> dict[str, str]:
        """The conditional request headers that ask the origin of ``url`` whether this pod's extracted copy is
        current (what :meth:`revalidate` sends); empty when the cache holds none."""
        local = self._local
        meta = local.http_meta(url) if local is not None else None
        if local is None or meta is None or not local.has_tree(meta["digest"]):
            return {}
        return conditional(meta)

    # The run

    @property
    def offline(self) -> bool:
        """Whether no origin may be asked (the fleet's ``offline`` mode)."""
        return self._fleet is not None and self._fleet.config.mode == "offline"

    def commit(self) -> int:
        """After the run's own commit: the fleet's write-back (records, and blobs not sent yet). The number of
        records written."""
        if self._fleet is None or self._writeback is None or not self._writeback.pending:
            return 0
        written = self._writeback.write_back()
        log.debug("Wrote %d records to the download cache repository %s", written, self._fleet.config.repo)
        return written

    def close(self) -> None:
        """End the uploads of a run that did not commit them, and the revalidations no fetch took."""
        self._early.close()
        if self._writeback is not None:
            self._writeback.close()

    # Archives (http and .cnb), by digest and by URL

    def archive_tree(self, origin: Origin, unpacker: Unpacker, sink: Sink) -> Archive:
        """The archive at ``origin`` extracted into a new directory of staging, from the first tier that has it
        and may be trusted with it, else from its origin (then kept in every tier that takes it).

        :raises FetchError: it cannot be had (exit 1); offline, and no tier has it.
        """
        way = ArchiveWay(
            self._local, self._fleet, self._writeback, self.link_installs, origin, sink, self._early
        )
        return way.tree(unpacker)

    def revalidate(self, locators: Sequence[HttpLocator], transport: Transport) -> None:
        """Ask, together and before the run's fetches start, each origin whose archive this pod's cache holds
        whether it is current: the revalidation requests :meth:`archive_tree` would send one fetch thread at a time.
        Only where that is the request it would send first: an unpinned archive (a pinned one is installed by its
        digest, with no request), kept extracted, and no fleet's repository (asked first, and only sometimes). The
        tree's manifest is only looked for here, not read: one found damaged later costs this one request for
        nothing."""
        local = self._local
        if local is None or self._fleet is not None:
            return
        for locator in locators:
            if locator.sha256 is not None or locator.is_cnb:
                continue
            headers = self.validators_of(locator.url)
            if headers:
                self._early.start(Origin(locator, transport), headers)

    def archive_file(
        self, origin: Origin, read: Callable[[Path, str], T], sink: Sink
    ) -> tuple[T, str | None]:
        """What ``read`` makes of the archive at ``origin`` kept whole (a ``.cnb``: ``read(path, digest)`` before
        it is kept), and the tier it came through (``None``: its origin or this pod's cache)."""
        return ArchiveWay(self._local, self._fleet, self._writeback, self.link_installs, origin, sink).file(
            read
        )

    # Registry blobs and manifests, by digest

    def blob(
        self,
        digest: str,
        consume: Callable[[Reader], T],
        download: Callable[[Path], tuple[Path, T]],
        sink: Sink,
        lock_wait: float,
        image: str = "",
    ) -> tuple[Path, T]:
        """The blob ``digest`` fed to ``consume``: this pod's copy, verified while it is read, else what
        ``download(directory)`` streams into a new file of ``directory`` (and through ``consume``), kept. The
        download holds the digest's lock, so concurrent preparers pull once. A cache whose disk is full is not
        used for the run's blobs from then on, with a warning naming ``image`` (the blob's).

        Returns where the blob is (in the cache, or in staging without one) and what ``consume`` made of it."""
        local = self._local
        if local is None:
            return download(sink.staging)
        found = self._cached_blob(local, digest, consume, sink)
        if found is not None:
            return found
        if self._blobs_unkept.is_set():
            return download(sink.staging)
        key = "blob:" + digest
        with local.lock(key, lock_wait) as locked:
            if not locked:
                sink.warn(
                    f"{local.lock_name(key)} is held by another preparer; pulling {digest} without the cache"
                )
                return download(sink.staging)
            found = self._cached_blob(local, digest, consume, sink)
            if found is not None:
                return found
            try:
                path, result = download(local.tmp_dir())
                return local.add_blob(path, digest), result
            except Exception as err:
                if not self._unkept(err, image or digest):
                    raise
            # What ``consume`` made of the first attempt is in staging, which the run removes.
            return download(sink.staging)

    def _unkept(self, err: BaseException, image: str, *, only_cache: bool = False) -> bool:
        """Whether ``err`` is the full disk of this pod's cache, met keeping what was pulled for ``image``: a cache
        that cannot be used is not used, so the run's blobs are no longer kept there (said once).

        :param only_cache: what failed wrote nowhere but in the cache (else the error must say it was there).
        """
        local = self._local
        full = None if local is None else full_disk(err) if only_cache else full_in(err, local.root)
        if full is None or local is None:
            return False
        with self._unkept_lock:
            first = not self._blobs_unkept.is_set()
            self._blobs_unkept.set()
        if first:
            self._warn(
                f"{no_space(full, 'the download cache', local.root)}: {image} is pulled without it (and so are "
                "the run's other images)"
            )
        return True

    @staticmethod
    def _cached_blob(
        local: DownloadCache, digest: str, consume: Callable[[Reader], T], sink: Sink
    ) -> tuple[Path, T] | None:
        """The cached blob fed to ``consume`` and verified while it is read; ``None`` when absent, or damaged
        (then removed, and whatever ``consume`` made of it is the caller's to discard)."""
        path = local.blob_path(digest)
        if path is None:
            return None
        with open(path, "rb") as f:
            reader = HashingReader(f)
            try:
                result, failure = consume(reader), None
            except FetchError as err:
                result, failure = None, err
            reader.drain()
        if reader.digest != digest:
            local.discard_blob(digest)
            sink.warn(f"the download cache's copy of blob {digest} was damaged and was removed")
            return None
        if failure is not None:
            raise failure
        return path, cast(T, result)

    def manifest(self, digest: str, repository: str, what: str, sink: Sink) -> bytes | None:
        """This run's copy of the image index ``digest`` read from the fleet (:meth:`image`), or this pod's copy of
        the manifest ``digest`` of ``repository``, verified; ``None`` when absent, damaged
        (then removed, with a warning naming ``what``), or from a repository that asked for credentials: the
        registry must then confirm this run's own (a request)."""
        index = self._indexes.get(digest)
        if index is not None and sha256_of(index) == digest:
            return index
        local = self._local
        if local is None or local.is_private(repository):
            return None
        path = local.blob_path(digest)
        if path is None:
            return None
        data = path.read_bytes()
        if sha256_of(data) == digest:
            return data
        local.discard_blob(digest)
        sink.warn(f"the download cache's copy of {what} was damaged and was removed")
        return None

    def keep_manifest(
        self, data: bytes, digest: str, repository: str, private: bool, image: str = ""
    ) -> None:
        """Keep the manifest ``data`` (its ``digest`` checked by the caller) pulled from ``repository`` for
        ``image``; ``private``: the registry asked for credentials, so its copies are used only after it answers a
        run."""
        local = self._local
        if local is None or self._blobs_unkept.is_set():
            return
        try:
            if private:  # first: a copy is never kept without its mark
                local.mark_private(repository)
            with local.temp_file() as tmp:
                tmp.write_bytes(data)
                local.add_blob(tmp, digest)
        except OSError as err:
            if not self._unkept(err, image or repository, only_cache=True):
                raise

    # Signatures of images, by digest

    def signatures(self, repository: str, digest: str, max_age: float) -> list[SignatureObject] | None:
        """The signature objects recorded for the image ``digest`` of ``repository`` at most ``max_age`` seconds
        after the registry was asked for them: this pod's record, else the fleet's; ``None`` without such a record
        (one without a time, written by an older preparer, is too old), or for a repository that asked for
        credentials (the registry must then answer the run's own). What is returned is to be verified as if the
        registry had sent it."""
        local, fleet = self._local, self._fleet
        if max_age <= 0 or (local is not None and local.is_private(repository)):
            return None
        import time  # deferred: only runs whose policy asks for signatures

        now = time.time()
        recorded = local.signatures(repository, digest) if local is not None else None
        if (recorded is None or not recorded.fresh(max_age, now)) and fleet is not None and fleet.usable:
            shared = fleet.signatures(repository, digest)
            recorded = signature_record(shared) if shared is not None else None
        if recorded is None or not recorded.fresh(max_age, now):
            return None
        import base64  # deferred, as time

        from preparer.fetch.guard import SignatureObject  # deferred, as base64

        found = []
        for obj in recorded.objects:
            payload = obj.get("payload")
            try:
                data = base64.b64decode(payload or "-", validate=True)
            except ValueError:
                return None
            found_at, signature = obj.get("found", ""), obj.get("signature")
            annotations: dict[str, str] = obj.get("annotations", {})
            if not isinstance(annotations, dict) or not all(isinstance(v, str) for v in annotations.values()):
                return None
            if obj.get("format") == "cosign":
                found.append(SignatureObject("cosign", found_at, data, signature, tuple(annotations.items())))
            elif obj.get("format") == "bundle":
                found.append(SignatureObject("bundle", found_at, data, signature))
            else:
                return None
        return found or None

    def keep_signatures(
        self, repository: str, digest: str, objects: Sequence[SignatureObject], private: bool, spool: Path
    ) -> None:
        """Record the signature objects that satisfied the policy for the image ``digest`` of ``repository``, with
        the time the registry was asked (now), in this pod's cache and (``spool``: where its file waits for the
        write-back) the fleet's (``private``: the registry asked for credentials: never shared, and not used again
        without a request)."""
        local, writeback = self._local, self._writeback
        if not objects or (local is None and writeback is None):
            return
        import base64  # deferred, as above
        import time

        objects_record: list[dict[str, Any]] = [
            {"format": o.format, "found": o.found, "payload": base64.b64encode(o.payload).decode()}
            | ({"signature": o.signature} if o.signature is not None else {})
            | ({"annotations": dict(o.annotations)} if o.annotations else {})
            for o in objects
        ]
        data = dumps_signature_record(objects_record, int(time.time()))
        if local is not None and not self._blobs_unkept.is_set():
            try:
                if private:  # first, as in keep_manifest
                    local.mark_private(repository)
                local.put_signatures(repository, digest, data)
            except OSError as err:
                if not self._unkept(err, repository, only_cache=True):
                    raise
        if writeback is not None and not private:  # what credentials fetched is never shared
            writeback.remember_signatures(
                _spooled(data, "signatures-", spool), sha256_of(data), repository, digest
            )

    # Small files (the buildpack registry's index)

    def small_file(self, url: str, limit: int, action: str, fetch: Callable[[], bytes], sink: Sink) -> bytes:
        """The file at ``url`` (at most ``limit`` bytes): the fleet's copy when it may be used without asking the
        origin (fresh, or offline), else what ``fetch()`` reads from the origin (then shared, written back at
        :meth:`commit`), else, when the origin cannot be reached and a max-age allows it, the fleet's copy with a
        warning.

        :raises FetchError: offline, and the repository does not have it; what ``fetch`` raises.
        """
        shared = self._shared_file(url, limit, action)
        if shared.data is not None:
            return shared.data
        try:
            data = fetch()
        except Unreachable:
            stand_in = shared.stand_in()
            if stand_in is None:
                raise
            sink.warn(f"{redact(url)} cannot be reached; the download cache repository's copy is used")
            return stand_in
        self._keep_file(data, url, sink.staging)
        return data

    def _shared_file(self, url: str, limit: int, action: str) -> SharedFile:
        """What the fleet holds for the file at ``url``: its bytes when its record is fresh (or offline), and what
        may stand in when the origin cannot be reached (only with a max-age: with 0 an unpinned URL's bytes are the
        origin's).

        :raises FetchError: offline, and the repository does not have it (exit 1).
        """
        from preparer.fetch.fleet import offline_miss, url_tag  # deferred: what a tier-less run never needs

        fleet = self._fleet
        hit = fleet.archive_by_url(url) if fleet is not None and fleet.usable else None
        if fleet is None or hit is None:
            if self.offline:
                raise offline_miss(action, url_tag(url))
            return SharedFile(None, None, limit)
        data = fleet.small_blob(hit, limit) if fleet.fresh(hit) else None
        if data is None and self.offline:
            raise offline_miss(action, url_tag(url))
        return SharedFile(data, (fleet, hit) if fleet.config.max_age > 0 else None, limit)

    def _keep_file(self, data: bytes, url: str, spool: Path) -> None:
        """The file ``data`` read from ``url`` (its origin) is shared, written back at :meth:`commit`."""
        if self._writeback is None:
            return
        self._writeback.remember_archive(_spooled(data, "index-", spool), sha256_of(data), url, {})

    # Images

    def image(
        self,
        reference: str,
        digest: str | None,
        pull: Callable[[str | None, Mapping[str, str]], T],
        sink: Sink,
    ) -> tuple[T, str | None]:
        """What ``pull`` makes of the image ``reference`` (which names ``digest``, or a tag) from the first tier
        that has it: the fleet's copy of that digest, or of the platform manifest its recorded index names (or,
        offline, of the digest recorded for the tag), read with ``pull(copy, its credentials)`` and verified as from
        the origin, else its origin, ``pull(None, {})``. A copy that fails is one warning, and the origin is asked. Returns what ``pull`` made and the tier it came
        through (``None``: its origin).

        :raises FetchError: offline, and no tier has it (exit 1), naming the tag to seed; what ``pull`` raises.
        """
        found = None
        if digest is not None:  # a pin is resolved through its digest only, never through a record of a name
            found = self._image_from_copy(reference, digest, pull, sink)
            if found is None:
                found = self._image_from_index(reference, digest, pull, sink)
        elif self.offline and self._fleet is not None:
            recorded = self._fleet.ref_digest(reference)  # a tag: the platform manifest it last named
            found = self._image_from_copy(reference, recorded[0], pull, sink) if recorded else None
            if found is not None and recorded is not None and recorded[1] is not None:
                self._tag_index(reference, recorded[0], recorded[1])
        if found is not None:
            return found[0], "cache repository"
        if self.offline:
            from preparer.fetch.fleet import offline_miss, ref_tag  # deferred, as in _shared_file

            seed = "sha256-" + digest.removeprefix("sha256:") if digest else ref_tag(reference)
            raise offline_miss(f"pull {reference}", seed)
        return pull(None, {}), None

    def _tag_index(self, reference: str, digest: str, index: str) -> None:
        """Keep ``index`` as the image index the tag ``reference`` named, when the fleet holds that index's bytes
        (verified against its digest) and they list the platform manifest ``digest``: an image served offline is
        described as one pulled from its origin (:meth:`tag_index`)."""
        import json  # deferred: offline runs only

        data = self._fleet.index(index) if self._fleet is not None else None
        try:
            listed = json.loads(data)["manifests"] if data is not None else []
            if any(isinstance(m, dict) and m.get("digest") == digest for m in listed):
                self._tag_indexes[reference] = index
        except (ValueError, TypeError, KeyError):
            return

    def tag_index(self, reference: str) -> str | None:
        """The image index the tag ``reference``, served offline from the fleet, was recorded to name."""
        return self._tag_indexes.get(reference)

    def _image_from_copy(
        self, reference: str, digest: str, pull: Callable[[str | None, Mapping[str, str]], T], sink: Sink
    ) -> tuple[T] | None:
        """What ``pull`` makes of the fleet's copy of the image ``digest``; ``None`` when it has none, or a bad one
        (with a warning)."""
        copy = self.image_copy(digest)
        if copy is None:
            return None
        try:
            return (pull(*copy),)
        except FetchError as err:
            sink.warn(f"the download cache repository's copy of {reference} is not used: {err.cause}")
            return None

    def _image_from_index(
        self, reference: str, digest: str, pull: Callable[[str | None, Mapping[str, str]], T], sink: Sink
    ) -> tuple[T] | None:
        """What ``pull`` makes of the image index ``digest`` the fleet records (its bytes, verified against the
        digest): ``pull`` reads it as the manifest ``digest`` of the fleet's repository (:meth:`manifest`), and
        through it the platform manifest it names, whose digest the registry client checks; ``None`` when the fleet
        records no such index."""
        fleet = self._fleet
        data = fleet.index(digest) if fleet is not None and fleet.usable else None
        if fleet is None or data is None:
            return None
        self._indexes[digest] = data
        try:
            return (pull(f"{fleet.config.repo}@{digest}", fleet.environ),)
        except FetchError as err:
            sink.warn(f"the download cache repository's copy of {reference} is not used: {err.cause}")
            return None

    def image_copy(self, digest: str) -> tuple[str, dict[str, str]] | None:
        """Where the fleet holds the image manifest ``digest``: its reference there, and the environment with the
        repository's credentials to pull it with."""
        fleet = self._fleet
        if fleet is None or not fleet.usable or not fleet.image_manifest(digest.removeprefix("sha256:")):
            return None
        return f"{fleet.config.repo}@{digest}", fleet.environ

    def image_unreadable(self, reference: str, cause: str) -> None:
        """The fleet's copy of ``reference`` could not be read: the fleet is not asked again in this run."""
        if self._fleet is not None:
            self._fleet.give_up(f"its copy of {reference} cannot be read: {cause}")

    def keep_image(
        self,
        reference: str,
        named: str | None,
        digest: str,
        manifest: dict[str, Any],
        config_digest: str,
        index: str | None = None,
    ) -> None:
        """The image ``digest`` was pulled from its origin, anonymously, by ``reference`` (which names the digest
        ``named``, or a tag), through the image index ``index`` if any: shared (when this pod's cache kept every
        blob), the index recorded (its bytes, read back by its digest), and a tag that led to it recorded (for
        offline runs). A digest is never recorded as a name: a pin is resolved through its digest only."""
        fleet, local = self._writeback, self._local
        if fleet is None:
            return
        if named is None:
            fleet.remember_ref(reference, digest, index)
        kept_index = local.blob_path(index) if local is not None and index is not None else None
        if index is not None and kept_index is not None:
            fleet.remember_index(kept_index, index, reference)
        kept = local.blob_path(digest) if local is not None else None
        if local is None or kept is None:
            return
        layers = manifest.get("layers")
        digests = [config_digest] + [
            str(layer.get("digest"))
            for layer in (layers if isinstance(layers, list) else [])
            if isinstance(layer, dict)
        ]
        fleet.remember_image(
            kept, digest, {d: local.blob_path(d) for d in digests}, str(manifest.get("mediaType") or "")
        )


def _spooled(data: bytes, prefix: str, spool: Path) -> Path:
    """``data`` in a new file of ``spool``, where it waits for the fleet's write-back."""
    import tempfile  # deferred: only runs with a repository keep files for it

    fd, name = tempfile.mkstemp(prefix=prefix, dir=spool)
    with open(fd, "wb") as out:
        out.write(data)
    return Path(name)


@record
class SharedFile:
    """A small file as the fleet holds it (:meth:`Store.small_file`)."""

    #: Its bytes, when they may be used without asking the origin.
    data: bytes | None
    #: Where a copy that may stand in for an unreachable origin is.
    fallback: tuple[Fleet, Hit] | None
    limit: int

    def stand_in(self) -> bytes | None:
        """The repository's copy, to use when the origin cannot be reached; ``None`` when none may be used."""
        return None if self.fallback is None else self.fallback[0].small_blob(self.fallback[1], self.limit)
