"""Download progress as the caller sees it: typed events, one at a time, in order for each download.

Below, a download reports ``(what, bytes done, total)`` as its bytes arrive (:data:`preparer.fetch.streams.ProgressFn`).
Each group entry's fetch turns those reports into :class:`Download` events that name the entry, and the run hands
them to the caller's callback under one lock: the callback is never entered twice at once, whichever fetch thread
reports, and the events of one download come in the order they happened (started, progress..., then finished or
failed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from preparer._record import record

#: What an event says of its download.
Kind = Literal["started", "progress", "finished", "failed", "cached"]


@record
class Download:
    """One step of one download of a run, as ``prepare(inputs, progress=callback)`` reports it.

    Attributes:
        kind: ``started`` (the first bytes are asked for), ``progress`` (about four times a second), ``finished``
            (every byte arrived and was checked as it came), ``failed`` (the download ended without its bytes:
            the run's error says why), or ``cached`` (what the download would have fetched came from a cache, with
            no bytes downloaded).
        entry: the group entry it is for, as written: ``io.buildpacks.group[1]``.
        source: the entry's ``uri`` as written (credentials removed), or its id.
        url: what is downloaded: the URL (without credentials or query), or an image's blob
            (``registry/repository@sha256:... sha256:0123``); an entry may download several (an image's layers).
        buildpack: the buildpack's id, when the entry names it.
        done: bytes received so far.
        total: bytes expected of this download, when the server said (``None`` otherwise).
        expected: bytes the plan expects the whole entry to download (:attr:`preparer.plan.PlannedDownload.size`:
            measured before the run, by :func:`preparer.plan_run` or a dry run), when known; ``None`` otherwise, and
            for the runs of :func:`preparer.prepare`, whose plan is not measured.
    """

    kind: Kind
    entry: str
    source: str
    url: str
    buildpack: str | None
    done: int
    total: int | None
    expected: int | None = None


#: A callback given download events (``prepare(inputs, progress=...)``).
ProgressCallback = Callable[[Download], None]


class EntryDownloads:
    """One entry's downloads: the reports of the fetch below made into events for ``deliver``."""

    def __init__(
        self,
        deliver: ProgressCallback,
        entry: str,
        source: str,
        buildpack: str | None,
        url: str | None = None,
        expected: int | None = None,
    ) -> None:
        self.deliver, self.entry, self.source, self.buildpack = deliver, entry, source, buildpack
        self.expected = expected
        #: What the entry downloads first, for the failure of one that failed before any byte came.
        self.url = url or source
        #: The last event of each download (by what it downloads).
        self.last: dict[str, Download] = {}

    def __call__(self, url: str, done: int, total: int | None) -> None:
        """A report from below: ``done`` of ``total`` bytes of ``url`` (``0, 0``: a cache had it)."""
        last = self.last.get(url)
        if last is not None and last.kind in ("finished", "cached"):
            return  # its end was said; a report after it (the reader's last count) says nothing new
        if done == 0 and total == 0:
            self._say("cached", url, 0, 0)
            return
        if last is None or last.kind == "failed":  # a download, or another attempt at one, begins
            self._say("started", url, done, total)
        if total is not None and done >= total:
            self._say("finished", url, done, total)
        elif last is not None and last.kind != "failed":
            self._say("progress", url, done, total)

    def failed(self) -> None:
        """The entry's fetch ended in an error: every download under way failed (or, when none had begun, the
        entry's first, refused before any byte came: a 404, a host that does not resolve)."""
        under_way = [last for last in self.last.values() if last.kind in ("started", "progress")]
        for last in under_way:
            self._say("failed", last.url, last.done, last.total)
        if not under_way and all(last.kind == "failed" for last in self.last.values()):
            self._say("failed", self.url, 0, None)

    def _say(self, kind: Kind, url: str, done: int, total: int | None) -> None:
        event = Download(kind, self.entry, self.source, url, self.buildpack, done, total, self.expected)
        self.last[url] = event
        self.deliver(event)
