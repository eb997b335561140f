"""The store behind the fetchers: where fetched bytes are kept and found again, tier after tier.

Two tiers, either of which a run may lack: this pod's download cache (:mod:`~preparer.fetch.cache`: verified blobs
and extracted trees, and the validators an origin gave for each URL) and the fleet's (:mod:`~preparer.fetch.fleet`:
an OCI repository the pods share, docs/fleet.md; :mod:`~preparer.fetch.fleet_writeback` what a run writes back to
it). A run builds one :class:`Store` from its inputs; fetchers ask it what a key names and hand it what they
fetched, and never ask which tiers exist. :meth:`Store.commit`, after the run's own commit, is the fleet's
write-back.

The store is split by the kind of thing it keeps, each kind's way through the tiers a module of this room:

- :mod:`.archives`: http archives and ``.cnb`` files (a pinned copy, the fleet's, this pod's once the origin
  confirms it, the origin under a lock), with :mod:`.origin`, where an archive comes from when no tier has it;
- :mod:`.blobs`: registry blobs and manifests, by digest;
- :mod:`.images`: images (the fleet's copy of a digest, offline a tag's record);
- :mod:`.signatures`: records of the signatures that satisfied a policy;
- :mod:`.files`: small files by URL (the buildpack registry's index).

What a tier may be trusted with is the ways' business (the freshness of a shared record, whether a copy stands in
for an origin that cannot be reached, offline mode, which URLs are never shared); what they ask of a tier is a role
of :mod:`.tiers`, which the cache and the fleet play and tests fake. Only this room imports the tiers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from preparer import telemetry
from preparer._logger import log
from preparer.fetch.cache import CacheUnusable, DownloadCache
from preparer.fetch.clock import RunClock
from preparer.fetch.transport import Transport, for_run

if TYPE_CHECKING:
    from preparer.fetch.fleet import FleetConfig, Mode
    from preparer.fetch.locator import HttpLocator
    from preparer.fetch.store.archives import Archives
    from preparer.fetch.store.blobs import Blobs
    from preparer.fetch.store.files import SmallFiles
    from preparer.fetch.store.images import Images
    from preparer.fetch.store.signatures import SignatureRecords
    from preparer.fetch.store.tiers import Local, Shared, Writes

W = TypeVar("W")

__all__ = ["Store", "opened_store", "parse_repo"]


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

    :param given: the caller's transport (``Inputs.transport``): the repository's requests are sent as it says
        (:meth:`~preparer.fetch.transport.Transport.for_run`)."""
    import contextlib  # deferred: only runs that fetch open a store

    with contextlib.ExitStack() as stack:
        local = _claimed_cache(stack, cache, warn) if cache is not None else None
        shared, transport = None, None
        if repo is not None:
            from preparer.fetch import fleet  # deferred: only runs with a repository need its tier

            shared = fleet.FleetConfig(repo, _mode(mode), max_age)
            transport = stack.enter_context(
                for_run(
                    given,
                    environ or {},
                    timeouts=(fleet.CONNECT_SECONDS, fleet.READ_SECONDS),
                    retries=0,
                    deadline=download_timeout,
                    clock=clock or RunClock(),
                )
            )
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
    """One run's store: the download cache (``local``) and the fleet's repository, each ``None`` when absent; the
    ways through them by kind (:attr:`archives`, :attr:`blobs`, :attr:`images`, :attr:`signatures`,
    :attr:`files`), each made on first use."""

    def __init__(
        self,
        local: Local | None = None,
        fleet: FleetConfig | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        insecure_registries: tuple[str, ...] = (),
        warn: Callable[[str], None] | None = None,
        transport: Transport | None = None,
        link_installs: bool = False,
    ) -> None:
        # This pod's download cache: where trees are extracted and blobs kept (``None``: into staging only).
        self._local: Local | None = local
        #: Whether what is installed from this pod's cache may be hard links into it: only when the build cannot
        #: write the cache's files (the preparer runs as root, the files are root's, the build is another user).
        self.link_installs = link_installs
        self._fleet: Shared | None = None
        #: What the run writes back to the fleet's repository (``read-write`` mode only).
        self._writeback: Writes | None = None
        self._warn = warn or log.warning
        self._ways: dict[str, Any] = {}
        self._lock = threading.RLock()
        if fleet is not None:
            from preparer.fetch.fleet import Fleet  # deferred, as in opened_store

            connection = Fleet(
                fleet, dict(environ or {}), insecure_registries, warn, transport or Transport()
            )
            self._fleet = connection
            if fleet.mode == "read-write":
                from preparer.fetch.fleet_writeback import WriteBack  # deferred, as the fleet

                self._writeback = WriteBack(connection)

    @classmethod
    def with_tiers(
        cls,
        local: Local | None = None,
        shared: Shared | None = None,
        writes: Writes | None = None,
        *,
        warn: Callable[[str], None] | None = None,
        link_installs: bool = False,
    ) -> Store:
        """A store over tiers made elsewhere: a tier of one's own that plays the roles of :mod:`.tiers`, or a
        test's fakes of them. ``writes``: what the run writes back to ``shared`` (``None``: nothing)."""
        store = cls(local, warn=warn, link_installs=link_installs)
        store._fleet, store._writeback = shared, writes
        return store

    @classmethod
    def reading(cls, cache: Path) -> Store:
        """This pod's download cache at ``cache``, to read only (nothing is made or changed; absent or not to be
        trusted: an empty store)."""
        return cls(DownloadCache.existing(cache))

    # What a plan asks of this pod's cache (hints: what is read back is verified, as ever)

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
        from preparer.fetch.store.archives import validators_of  # deferred, as the archives' way

        return validators_of(self._local, url)

    # The ways, by kind of thing kept

    @property
    def archives(self) -> Archives:
        """Http archives and ``.cnb`` files (:mod:`.archives`)."""
        return self._way("archives", self._archives)

    @property
    def blobs(self) -> Blobs:
        """Registry blobs and manifests, by digest (:mod:`.blobs`)."""
        return self._way("blobs", self._blobs)

    @property
    def images(self) -> Images:
        """Images, by reference (:mod:`.images`)."""
        return self._way("images", self._images)

    @property
    def signatures(self) -> SignatureRecords:
        """Records of the signatures that satisfied a policy, by image (:mod:`.signatures`)."""
        return self._way("signatures", self._signatures)

    @property
    def files(self) -> SmallFiles:
        """Small files by URL: the buildpack registry's index (:mod:`.files`)."""
        return self._way("files", self._files)

    def _way(self, name: str, make: Callable[[], W]) -> W:
        with self._lock:  # one of each per run: they hold the run's state (an index lent, a tag's index)
            if name not in self._ways:
                self._ways[name] = make()
            return cast(W, self._ways[name])

    def _archives(self) -> Archives:
        from preparer.fetch.store.archives import Archives  # deferred: only runs with http archives

        return Archives(self._local, self._fleet, self._writeback, self.link_installs)

    def _blobs(self) -> Blobs:
        from preparer.fetch.store.blobs import Blobs, Unkept  # deferred: only runs with images

        return Blobs(self._local, Unkept(self._local, self._warn))

    def _images(self) -> Images:
        from preparer.fetch.store.images import Images  # deferred, as the blobs

        return Images(self._local, self._fleet, self._writeback, self.blobs)

    def _signatures(self) -> SignatureRecords:
        from preparer.fetch.store.signatures import (
            SignatureRecords,  # deferred: only policies with signatures
        )

        return SignatureRecords(self._local, self._fleet, self._writeback, self.blobs.unkept)

    def _files(self) -> SmallFiles:
        from preparer.fetch.store.files import SmallFiles  # deferred: only runs that read the registry index

        return SmallFiles(self._fleet, self._writeback)

    # The run

    @property
    def offline(self) -> bool:
        """Whether no origin may be asked (the fleet's ``offline`` mode)."""
        return self._fleet is not None and self._fleet.config.mode == "offline"

    def revalidate(self, locators: Sequence[HttpLocator], transport: Transport) -> None:
        """Before the run's fetches start, ask together each origin whose archive this pod's cache holds whether it
        is current (:meth:`Archives.revalidate <preparer.fetch.store.archives.Archives.revalidate>`)."""
        self.archives.revalidate(locators, transport)

    def commit(self) -> int:
        """After the run's own commit: the fleet's write-back (records, and blobs not sent yet). The number of
        records written."""
        if self._fleet is None or self._writeback is None or not self._writeback.pending:
            return 0
        with telemetry.span("cnb.fleet.write_back"):
            written = self._writeback.write_back()
        log.debug("Wrote %d records to the download cache repository %s", written, self._fleet.config.repo)
        return written

    def close(self) -> None:
        """End the uploads of a run that did not commit them, and the revalidations no fetch took."""
        archives = self._ways.get("archives")
        if archives is not None:
            archives.close()
        if self._writeback is not None:
            self._writeback.close()
