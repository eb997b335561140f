"""The store's small files by URL (the buildpack registry's index files): the fleet's copy when it may be used
without asking the origin (its record fresh within max-age, or offline), else the origin's (then shared, written
back after the commit), else, when the origin cannot be reached and a max-age allows it, the fleet's copy with a
warning. This pod's cache keeps no small file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from preparer._record import record
from preparer.fetch.locator import redact
from preparer.fetch.sink import Sink
from preparer.fetch.streams import sha256_of
from preparer.fetch.transport import Unreachable

if TYPE_CHECKING:
    from preparer.fetch.fleet import Hit
    from preparer.fetch.store.tiers import Shared, Writes


class SmallFiles:
    """The store's small files for one run: the fleet's repository and what the run writes back to it (either
    ``None``: absent)."""

    def __init__(self, fleet: Shared | None, writeback: Writes | None) -> None:
        self.fleet, self.writeback = fleet, writeback

    def read(self, url: str, limit: int, action: str, fetch: Callable[[], bytes], sink: Sink) -> bytes:
        """The file at ``url`` (at most ``limit`` bytes): the fleet's copy when it may be used without asking the
        origin (fresh, or offline), else what ``fetch()`` reads from the origin (then shared, written back after
        the commit), else, when the origin cannot be reached and a max-age allows it, the fleet's copy with a
        warning.

        :raises FetchError: offline, and the repository does not have it; what ``fetch`` raises.
        """
        shared = self._shared(url, limit, action)
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
        if self.writeback is not None:  # the origin's bytes are shared
            self.writeback.remember_archive(spooled(data, "index-", sink.staging), sha256_of(data), url, {})
        return data

    def _shared(self, url: str, limit: int, action: str) -> SharedFile:
        """What the fleet holds for the file at ``url``: its bytes when its record is fresh (or offline), and what
        may stand in when the origin cannot be reached (only with a max-age: with 0 an unpinned URL's bytes are the
        origin's).

        :raises FetchError: offline, and the repository does not have it (exit 1).
        """
        from preparer.fetch.fleet import offline_miss, url_tag  # deferred: what a tier-less run never needs

        fleet = self.fleet
        offline = fleet is not None and fleet.config.mode == "offline"
        hit = fleet.archive_by_url(url) if fleet is not None and fleet.usable else None
        if fleet is None or hit is None:
            if offline:
                raise offline_miss(action, url_tag(url))
            return SharedFile(None, None, limit)
        data = fleet.small_blob(hit, limit) if fleet.fresh(hit) else None
        if data is None and offline:
            raise offline_miss(action, url_tag(url))
        return SharedFile(data, (fleet, hit) if fleet.config.max_age > 0 else None, limit)


@record
class SharedFile:
    """A small file as the fleet holds it (:meth:`SmallFiles.read`)."""

    #: Its bytes, when they may be used without asking the origin.
    data: bytes | None
    #: Where a copy that may stand in for an unreachable origin is.
    fallback: tuple[Shared, Hit] | None
    limit: int

    def stand_in(self) -> bytes | None:
        """The repository's copy, to use when the origin cannot be reached; ``None`` when none may be used."""
        return None if self.fallback is None else self.fallback[0].small_blob(self.fallback[1], self.limit)


def spooled(data: bytes, prefix: str, spool: Path) -> Path:
    """``data`` in a new file of ``spool``, where it waits for the fleet's write-back."""
    import tempfile  # deferred: only runs with a repository keep files for it

    fd, name = tempfile.mkstemp(prefix=prefix, dir=spool)
    with open(fd, "wb") as out:
        out.write(data)
    return Path(name)
