"""The store behind the fetchers: where fetched bytes are kept and found again, tier after tier.

Two tiers, either of which a run may lack: this pod's download cache (:mod:`~preparer.fetch.cache`: verified blobs
and extracted trees, and the validators an origin gave for each URL) and the fleet's (:mod:`~preparer.fetch.fleet`:
an OCI repository the pods share, docs/fleet.md). A run builds one :class:`Store` from its inputs; fetchers ask it
what a key names and hand it what they fetched, and never ask which tiers exist. What a tier may be trusted with is
the store's business: the freshness of a shared record (max-age), whether a copy stands in for an origin that cannot
be reached, offline mode, which URLs are never shared, and the breaker that turns a failing repository off.
:meth:`Store.commit`, after the run's own commit, is the fleet's write-back.

This is the one module that imports the fleet's; fetchers import this one.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, TypeVar, cast

from preparer._fs import temp_file
from preparer._logger import log
from preparer.errors import FetchError
from preparer.fetch.cache import CachedTree, CacheMismatch, CacheUnusable, DownloadCache, KnownTree
from preparer.fetch.fleet import (
    CONNECT_SECONDS,
    MODES,
    READ_SECONDS,
    Fleet,
    FleetConfig,
    Hit,
    Mode,
    Upload,
    offline_miss,
    parse_repo,
    ref_tag,
    url_tag,
)
from preparer.fetch.guard import LimitExceeded
from preparer.fetch.sink import Sink
from preparer.fetch.streams import (
    CHUNK,
    MAX_TRAILING,
    HashingReader,
    Reader,
    sha256_of,
    stream_body,
    verify_digest,
    verify_file,
)
from preparer.fetch.transport import RunClock, Transport, Unreachable, probe_unchanged
from preparer.fetch.tree import install_cached, new_root

if TYPE_CHECKING:
    import requests

    from preparer.fetch.extract import Extracted
    from preparer.fetch.locator import HttpLocator
    from preparer.fetch.url import HttpUrl

T = TypeVar("T")

__all__ = [
    "MODES",
    "Archive",
    "FleetConfig",
    "Mode",
    "Origin",
    "SharedFile",
    "Store",
    "Unpacker",
    "conditional",
    "parse_repo",
]

#: What an origin says of a copy, asked with that copy's validators: ``True`` unchanged (304), ``False`` changed,
#: ``None`` it could not be asked.
Ask = Callable[[dict[str, str]], "bool | None"]


class Known(NamedTuple):
    """What this pod's cache holds for a URL: the extracted tree, and the conditional headers to revalidate it."""

    tree: CachedTree
    headers: dict[str, str]


class Shared(NamedTuple):
    """An archive the fleet holds: how to read its blob, the digest its record promises (the reader checks it),
    and the validators to keep for the URL (only those that name the blob: see :meth:`Store.shared_archive`)."""

    open: Callable[[], requests.Response]
    digest: str
    validators: dict[str, str]


class NotShared(Exception):
    """The repository could not give the blob its record names (the breaker is open): use the origin."""


def conditional(validators: Mapping[str, str]) -> dict[str, str]:
    """The conditional request headers of an origin's validators (``etag``, ``last-modified``)."""
    headers = {}
    if validators.get("etag"):
        headers["If-None-Match"] = validators["etag"]
    if validators.get("last-modified"):
        headers["If-Modified-Since"] = validators["last-modified"]
    return headers


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
) -> Iterator[Store]:
    """The run's store, for the block: the download cache at ``cache`` (opened, checked, and claimed: a directory
    of the run's own for partial downloads, removed with what runs that died left), and the fleet's repository
    ``repo`` (``-download-cache-repo``, its mode and max-age). A cache that cannot be trusted is left out with a
    warning: a store never fails a build. Uploads the run did not commit end with the block."""
    import contextlib  # deferred: only runs that fetch open a store

    with contextlib.ExitStack() as stack:
        local = _claimed_cache(stack, cache, warn) if cache is not None else None
        shared = None if repo is None else FleetConfig(repo, _mode(mode), max_age)
        transport = Transport(
            timeouts=(CONNECT_SECONDS, READ_SECONDS),
            retries=0,
            deadline=download_timeout,
            clock=clock or RunClock(),
        )
        store = Store(
            local, shared, environ=environ, insecure_registries=insecure_registries, warn=warn,
            transport=transport, link_installs=link_installs,
        )  # fmt: skip
        stack.callback(store.close)
        yield store


def _mode(mode: str) -> Mode:
    """``mode``, one of :data:`MODES` (the inputs checked it)."""
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
        self._fleet = (
            None
            if fleet is None
            else Fleet(fleet, dict(environ or {}), insecure_registries, warn, transport or Transport())
        )

    @classmethod
    def reading(cls, cache: Path) -> Store:
        """This pod's download cache at ``cache``, to read only (nothing is made or changed; absent or not to be
        trusted: an empty store)."""
        return cls(DownloadCache.existing(cache))

    def digest_of(self, url: str) -> str | None:
        """The digest of what this pod's cache last downloaded from ``url`` (a hint for pins; never trusted as one)."""
        meta = self._local.http_meta(url) if self._local is not None else None
        return meta["digest"] if meta else None

    # The run

    @property
    def offline(self) -> bool:
        """Whether no origin may be asked (the fleet's ``offline`` mode)."""
        return self._fleet is not None and self._fleet.config.mode == "offline"

    def commit(self) -> int:
        """After the run's own commit: the fleet's write-back (records, and blobs not sent yet). The number of
        records written."""
        if self._fleet is None or not self._fleet.pending:
            return 0
        written = self._fleet.write_back()
        log.debug("Wrote %d records to the download cache repository %s", written, self._fleet.config.repo)
        return written

    def close(self) -> None:
        """End the uploads of a run that did not commit them."""
        if self._fleet is not None:
            self._fleet.close()

    # Archives (http and .cnb), by digest and by URL

    def archive_tree(self, origin: Origin, unpacker: Unpacker, sink: Sink) -> Archive:
        """The archive at ``origin`` extracted into a new directory of staging, from the first tier that has it
        and may be trusted with it, else from its origin (then kept in every tier that takes it).

        :raises FetchError: it cannot be had (exit 1); offline, and no tier has it.
        """
        return _ArchiveWay(self, origin, sink).tree(unpacker)

    def archive_file(
        self, origin: Origin, read: Callable[[Path, str], T], sink: Sink
    ) -> tuple[T, str | None]:
        """What ``read`` makes of the archive at ``origin`` kept whole (a ``.cnb``: ``read(path, digest)`` before
        it is kept), and the tier it came through (``None``: its origin or this pod's cache)."""
        return _ArchiveWay(self, origin, sink).file(read)

    def tree(self, digest: str) -> CachedTree | None:
        """The extracted tree of the archive ``digest`` in this pod's cache (a pin names it)."""
        return self._local.tree(digest) if self._local is not None else None

    def known(self, url: str) -> Known | None:
        """The tree this pod's cache holds for ``url``, with the validators to ask the origin about it."""
        meta = self._local.http_meta(url) if self._local is not None else None
        tree = self._local.tree(meta["digest"]) if self._local is not None and meta is not None else None
        if meta is None or tree is None:
            return None
        headers = conditional(meta)
        return Known(tree, headers) if headers else None

    def shared_archive(
        self, locator: HttpLocator, source: str, local_copy: bool, ask: Ask, warn: Callable[[str], None]
    ) -> Shared | Literal["local"] | None:
        """What the fleet holds for ``locator`` and may be used (docs/fleet.md, "Lookup"): its blob, ``"local"``
        for this pod's own copy (offline: it stands as it is), or ``None`` (the origin, or the local copy after the
        origin confirms it, as without a repository).

        :param ask: asks the origin about a stale record (only when its validators name its blob).
        :raises FetchError: offline, and nothing can stand in (exit 1).
        """
        found = self._shared_archive(locator, source, local_copy, ask, warn)
        if found is None and self.offline:
            raise _offline_miss(locator, source)
        return found

    def _shared_archive(
        self, locator: HttpLocator, source: str, local_copy: bool, ask: Ask, warn: Callable[[str], None]
    ) -> Shared | Literal["local"] | None:
        fleet = self._fleet
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
            unchanged = ask(conditional(hit.validators))
            if unchanged is False or (unchanged is None and fleet.config.max_age == 0):
                return (
                    None  # something newer, or no answer where an unpinned URL's bytes must be the origin's
                )
            if unchanged is None:
                warn(
                    f"{source} could not be revalidated with its origin; the download cache repository's copy "
                    "is used"
                )
            else:
                fleet.remember_record(hit, locator.url)

        def opener() -> requests.Response:
            response = fleet.blob(hit.digest) if fleet.usable else None
            if response is None:
                raise NotShared
            return response

        # Validators that do not name the bytes are not kept: the local cache would revalidate a pusher's bytes.
        return Shared(opener, hit.digest, hit.validators if attested else {})

    def _attested(self, hit: Hit, url: str) -> bool:
        """Whether the record's validators name its blob, so that the origin's 304 to them vouches for its bytes:
        a strong ETag that is the blob's sha256 (what the origin says its content hashes to), or validators this
        pod's own download cache recorded from the origin for the same digest."""
        etag = hit.validators["etag"]
        if etag and not etag.startswith("W/") and etag.strip('"').removeprefix("sha256:") == hit.digest[7:]:
            return True
        meta = self._local.http_meta(url) if self._local is not None else None
        mine = conditional(meta) if meta is not None and meta.get("digest") == hit.digest else {}
        return bool(mine) and mine == conditional(hit.validators)

    def upload(self, locator: HttpLocator, length: str | None, spool: Path) -> Upload | None:
        """The upload of an archive about to be downloaded from its origin, when it is to be shared (never for a
        URL that may carry a credential: user information, or a query); its bytes wait in ``spool`` when the
        repository is slower than the origin."""
        if self._fleet is None or locator.target.private:
            return None
        expected = None if locator.sha256 is None else "sha256:" + locator.sha256
        return self._fleet.upload(spool, expected, int(length) if length and length.isdigit() else None)

    def keep_upload(
        self, upload: Upload | None, digest: str, size: int, url: str, validators: dict[str, str]
    ) -> None:
        """The archive ``digest`` (``size`` bytes) of ``url`` passed its checks: the upload under way is finished,
        and its record follows at :meth:`commit`."""
        if upload is not None and self._fleet is not None:
            self._fleet.remember_upload(upload, digest, size, url, validators)

    def archive_missing(self, locator: HttpLocator, source: str) -> FetchError:
        """The error of an offline run that has no copy of ``locator`` (it names the tag to seed)."""
        return _offline_miss(locator, source)

    # Registry blobs and manifests, by digest

    def blob(
        self,
        digest: str,
        consume: Callable[[Reader], T],
        download: Callable[[Path], tuple[Path, T]],
        sink: Sink,
        lock_wait: float,
    ) -> tuple[Path, T]:
        """The blob ``digest`` fed to ``consume``: this pod's copy, verified while it is read, else what
        ``download(directory)`` streams into a new file of ``directory`` (and through ``consume``), kept. The
        download holds the digest's lock, so concurrent preparers pull once.

        Returns where the blob is (in the cache, or in staging without one) and what ``consume`` made of it."""
        local = self._local
        if local is None:
            return download(sink.staging)
        found = self._cached_blob(local, digest, consume, sink)
        if found is not None:
            return found
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
            path, result = download(local.tmp_dir())
            return local.add_blob(path, digest), result

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
        """This pod's copy of the manifest ``digest`` of ``repository``, verified; ``None`` when absent, damaged
        (then removed, with a warning naming ``what``), or from a repository that asked for credentials: the
        registry must then confirm this run's own (a request)."""
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

    def keep_manifest(self, data: bytes, digest: str, repository: str, private: bool) -> None:
        """Keep the manifest ``data`` (its ``digest`` checked by the caller) pulled from ``repository``;
        ``private``: the registry asked for credentials, so its copies are used only after it answers a run."""
        local = self._local
        if local is None:
            return
        with local.temp_file() as tmp:
            tmp.write_bytes(data)
            local.add_blob(tmp, digest)
        if private:
            local.mark_private(repository)

    # Small files (the buildpack registry's index)

    def shared_file(self, url: str, limit: int, action: str) -> SharedFile:
        """What the fleet holds for the file at ``url``: its bytes when its record is fresh (or offline), and what
        may stand in when the origin cannot be reached (only with a max-age: with 0 an unpinned URL's bytes are the
        origin's).

        :raises FetchError: offline, and the repository does not have it (exit 1).
        """
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

    def keep_file(self, data: bytes, url: str, spool: Path) -> None:
        """The file ``data`` read from ``url`` (its origin) is shared, written back at :meth:`commit`."""
        if self._fleet is None:
            return
        import tempfile  # deferred: only runs with a repository keep files for it

        fd, name = tempfile.mkstemp(prefix="index-", dir=spool)
        with open(fd, "wb") as out:
            out.write(data)
        self._fleet.remember_archive(Path(name), sha256_of(data), url, {})

    # Images

    def image_copy(self, digest: str) -> tuple[str, dict[str, str]] | None:
        """Where the fleet holds the image manifest ``digest``: its reference there, and the environment with the
        repository's credentials to pull it with."""
        fleet = self._fleet
        if fleet is None or not fleet.usable or not fleet.image_manifest(digest.removeprefix("sha256:")):
            return None
        return f"{fleet.config.repo}@{digest}", fleet.environ

    def recorded_digest(self, reference: str) -> str | None:
        """The digest the fleet recorded for the tag (or index digest) ``reference``: offline, no origin resolves
        it."""
        return self._fleet.ref_digest(reference) if self._fleet is not None else None

    def image_missing(self, reference: str, digest: str | None) -> FetchError:
        """The error of an offline run that found no copy of the image (it names the tag to seed)."""
        seed = "sha256-" + digest.removeprefix("sha256:") if digest else ref_tag(reference)
        return offline_miss(f"pull {reference}", seed)

    def image_unreadable(self, reference: str, cause: str) -> None:
        """The fleet's copy of ``reference`` could not be read: the fleet is not asked again in this run."""
        if self._fleet is not None:
            self._fleet.give_up(f"its copy of {reference} cannot be read: {cause}")

    def keep_image(
        self, reference: str, named: str | None, digest: str, manifest: dict[str, Any], config_digest: str
    ) -> None:
        """The image ``digest`` was pulled from its origin, anonymously, by ``reference`` (which names the digest
        ``named``, or a tag): shared (when this pod's cache kept every blob), and a tag or index digest that led to
        it recorded (for offline runs)."""
        fleet, local = self._fleet, self._local
        if fleet is None:
            return
        if named != digest:
            fleet.remember_ref(reference, digest)
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


@dataclass(frozen=True)
class Origin:
    """Where an archive comes from when no tier has it: its URL, asked through the run's transport, every redirect
    decided by ``hop`` (the policy's ``http.allow``)."""

    locator: HttpLocator
    transport: Transport
    hop: Callable[[HttpUrl], None] | None = None

    @property
    def action(self) -> str:
        return f"download {self.locator.shown}"

    def get(self, headers: dict[str, str] | None = None, check: bool = True) -> requests.Response:
        """One request for the archive (conditional with ``headers``)."""
        return self.transport.get(self.locator.url, headers, action=self.action, check=check, hop=self.hop)

    def unchanged(self, headers: dict[str, str]) -> bool | None:
        """Whether the origin still serves what ``headers`` name (a 304), retried; ``None``: it cannot be asked."""
        if not headers:
            return False
        try:
            response = self.transport.retrying(self.action, lambda: self.get(headers, check=False))
        except FetchError:
            return None
        response.close()
        if response.status_code == 304:
            return True
        return None if response.status_code >= 500 else False

    def probe(self, headers: dict[str, str]) -> bool | None:
        """The same question asked with one plain request (:func:`~preparer.fetch.transport.probe_unchanged`)."""
        return probe_unchanged(self.locator.url, headers, self.transport)


class Unpacker(Protocol):
    """How a fetcher turns an archive's body into a tree; the store decides where, checks the bytes, keeps it."""

    def unpack(self, body: Reader, dest: Path, record: bool) -> Extracted:
        """Extract ``body`` into the empty directory ``dest`` (``record``: also what a cache's manifest holds).

        :raises FetchError: the archive is not one the fetcher takes.
        """

    def check(self, root: Path) -> None:
        """:raises FetchError: the tree at ``root`` is not what the fetcher takes (before it is kept)."""


class Archive(NamedTuple):
    """An archive as the store hands it over: its tree in staging, the digest of its bytes, and the tier it came
    through (``None``: its origin, this run)."""

    #: The tree in a new directory of staging; ``None`` when the archive holds an OCI layout (a ``.cnb``).
    root: Path | None
    digest: str
    via: str | None = None


class _ArchiveWay:
    """One archive's way through the tiers: a pinned copy, the fleet's (docs/fleet.md, "Lookup"), this pod's after
    the origin confirms it, and the origin (under the URL's lock, so concurrent preparers download once)."""

    def __init__(self, store: Store, origin: Origin, sink: Sink) -> None:
        self.store, self.origin, self.sink = store, origin, sink
        self.locator, self.source = origin.locator, origin.locator.shown
        self.pinned = None if self.locator.sha256 is None else "sha256:" + self.locator.sha256

    # Trees (an archive extracted)

    def tree(self, unpacker: Unpacker) -> Archive:
        local = self.store._local
        if local is not None and self.pinned is not None and (tree := local.tree(self.pinned)) is not None:
            found = self._installed(local, tree)
            if found is not None:
                return found
        known = self.store.known(self.locator.url)
        shared = self.store.shared_archive(self.locator, self.source, known is not None, self.origin.unchanged,
                                           self.sink.warn)  # fmt: skip
        if shared == "local":  # offline: this pod's copy, as it is
            assert known is not None and local is not None
            found = self._installed(local, known.tree)
            if found is None:
                raise _offline_miss(self.locator, self.source)
            return found
        if shared is not None:
            found = self._through_fleet(lambda: self._tree_attempt(unpacker, local, None, shared))
            if found is not None:
                return found._replace(via="cache repository")
        if local is None:
            return self._retrying(lambda: self._tree_attempt(unpacker, None, None))
        if known is not None and self.origin.probe(known.headers):
            found = self._unchanged(local, known)
            if found is not None:
                return found
        return self._locked(unpacker, local)

    def _locked(self, unpacker: Unpacker, local: DownloadCache) -> Archive:
        key = "http:" + self.locator.url
        with local.lock(key, 2 * self.origin.transport.timeouts[1]) as locked:
            if not locked:
                self.sink.warn(f"{local.lock_name(key)} is held by another preparer; downloading {self.source} "
                               "without the cache")  # fmt: skip
                return self._retrying(lambda: self._tree_attempt(unpacker, None, None))
            # Another preparer may have downloaded it meanwhile: its tree and validators are used.
            known = self.store.known(self.locator.url)
            try:
                return self._retrying(lambda: self._tree_attempt(unpacker, local, known))
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
        local: DownloadCache | None,
        known: Known | None,
        shared: Shared | None = None,
    ) -> Archive:
        """One request (conditional when ``known``; the fleet's blob with ``shared``) and, unless it is a 304, its
        body extracted as it arrives: into the cache's own space when there is a cache, else into staging."""
        response = shared.open() if shared is not None else self.origin.get(known.headers if known else None)
        if response.status_code == 304 and known is not None and local is not None:
            response.close()
            again = self._unchanged(local, known)
            return again if again is not None else self._tree_attempt(unpacker, local, None)
        dest = local.new_tree() if local is not None else new_root(self.sink.staging, "http-")
        try:
            return self._receive_tree(unpacker, local, dest, response, shared)
        finally:
            # A tree that is neither the result nor in the cache (a failure, or handed over) is removed.
            if local is not None and dest.exists():
                shutil.rmtree(dest, ignore_errors=True)

    def _receive_tree(
        self,
        unpacker: Unpacker,
        local: DownloadCache | None,
        dest: Path,
        response: requests.Response,
        shared: Shared | None,
    ) -> Archive:
        def extract(body: Reader) -> Extracted | FetchError:
            try:
                return unpacker.unpack(body, dest, local is not None)
            except FetchError as err:
                if self.pinned is None or isinstance(err, LimitExceeded):
                    raise
                # Pinned: read the rest, so a tampered or corrupt body is reported as the mismatch it is.
                return err

        upload = self._upload(response) if shared is None else None
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
            self.store.keep_upload(upload, digest, size, self.locator.url, validators)
        if local is None:
            return Archive(dest, digest)
        written = None if outcome.records is None else KnownTree(outcome.records, outcome.dirs, outcome.links)
        tree = local.add_tree(dest, digest, written)
        local.put_http_meta(self.locator.url, validators | {"digest": digest})
        found = self._installed(local, tree, via=None)
        if found is None:
            raise FetchError(self.origin.action, "the download cache did not keep what was just put in it")
        return found

    def _unchanged(self, local: DownloadCache, known: Known) -> Archive | None:
        """The origin said this pod's tree is current (304); ``None`` when that tree failed its check."""
        self._check_pin(known.tree.digest)
        self.sink.progress(self.source, 0, 0)
        return self._installed(local, known.tree)

    def _installed(
        self, local: DownloadCache, tree: CachedTree, via: str | None = "download cache"
    ) -> Archive | None:
        """The cached ``tree`` installed into staging; ``None`` (and the tree removed) when it is not what was
        cached."""
        root = new_root(self.sink.staging, "http-")
        try:
            install_cached(tree, root, link=self.store.link_installs, guard=self.sink.guard)
        except (CacheMismatch, OSError) as err:
            shutil.rmtree(root, ignore_errors=True)
            local.discard_tree(tree.digest)
            self.sink.warn(
                f"the download cache's copy of {self.source} was removed: {err}; downloading it again"
            )
            return None
        return Archive(root, tree.digest, via)

    # Files (an archive kept whole: a .cnb)

    def file(self, read: Callable[[Path, str], T]) -> tuple[T, str | None]:
        local = self.store._local
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
        shared = self.store.shared_archive(
            self.locator, self.source, False, self.origin.unchanged, self.sink.warn
        )
        if isinstance(shared, Shared):
            found = self._through_fleet(lambda: self._file_attempt(read, shared))
            if found is not None:
                return found, "cache repository"
        return self._retrying(lambda: self._file_attempt(read, None)), None

    def _file_attempt(self, read: Callable[[Path, str], T], shared: Shared | None) -> T:
        """The archive downloaded whole (into the cache when there is one), checked, read by ``read``, and kept."""
        local = self.store._local
        response = shared.open() if shared is not None else self.origin.get()
        upload = self._upload(response) if shared is None else None
        spool = local.tmp_dir() if local is not None else self.sink.staging
        with temp_file(spool, "cnb-") as path, upload if upload is not None else nullcontext():
            with open(path, "wb") as out:
                _, digest, size = self._stream(response, lambda body: shutil.copyfileobj(body, out, CHUNK),
                                               None, upload)  # fmt: skip
            self._check_bytes(digest, shared)
            result = read(path, digest)  # read before it is kept or shared
            if local is not None:
                local.add_blob(path, digest)
            self.store.keep_upload(upload, digest, size, self.locator.url, _validators(response, shared))
        return result

    # Both

    def _through_fleet(self, receive: Callable[[], T]) -> T | None:
        """What ``receive`` makes of the fleet's blob; ``None``: the origin is to be used."""
        try:
            found = receive()
        except NotShared:
            return None
        except LimitExceeded:
            raise
        except FetchError as err:
            self.sink.warn(f"the download cache repository's copy of {self.source} is not used: {err.cause}")
            return None
        return found

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

    def _upload(self, response: requests.Response) -> Upload | None:
        local = self.store._local
        spool = local.tmp_dir() if local is not None else self.sink.staging
        return self.store.upload(self.locator, response.headers.get("Content-Length"), spool)

    def _check_pin(self, digest: str) -> None:
        if self.pinned is not None:
            verify_digest(digest, self.pinned, f"verify {self.source}",
                          "sha256 mismatch: the uri pins {expected}, the download is {got}")  # fmt: skip

    def _check_bytes(self, digest: str, shared: Shared | None) -> None:
        """The bytes are what the pin, and the fleet's record they came through, say."""
        self._check_pin(digest)
        if shared is not None and digest != shared.digest:
            raise FetchError(self.origin.action, "the repository's blob is not the digest its record names")


def _validators(response: requests.Response, shared: Shared | None) -> dict[str, str]:
    """The validators to keep for the URL: the origin's, or those of the fleet's record."""
    if shared is not None:
        return shared.validators
    return {
        "etag": response.headers.get("ETag", ""),
        "last-modified": response.headers.get("Last-Modified", ""),
    }


class SharedFile(NamedTuple):
    """A small file as the fleet holds it (:meth:`Store.shared_file`)."""

    #: Its bytes, when they may be used without asking the origin.
    data: bytes | None
    #: Where a copy that may stand in for an unreachable origin is.
    fallback: tuple[Fleet, Hit] | None
    limit: int

    def stand_in(self) -> bytes | None:
        """The repository's copy, to use when the origin cannot be reached; ``None`` when none may be used."""
        return None if self.fallback is None else self.fallback[0].small_blob(self.fallback[1], self.limit)


def _offline_miss(locator: HttpLocator, source: str) -> FetchError:
    if locator.target.private:
        return FetchError(
            f"download {source}",
            "offline, and a URL with user information or a query is never kept in the download cache repository "
            "(it may hold a credential)",
        )
    seed = f"sha256-{locator.sha256}" if locator.sha256 else url_tag(locator.url)
    return offline_miss(f"download {source}", seed)
