"""What a plan will download, and how large, known before the first byte: so that a service's web UI shows a total
before a run starts (:attr:`preparer.plan.Plan.downloads`).

Each entry that fetches over the network is one :class:`PlannedDownload`. Its size comes from what costs no
download: for an http archive, the ``Content-Length`` of one ``HEAD`` request (conditional, when this pod's download
cache holds the archive: a 304 says the copy is current, and nothing is downloaded); for an image, its manifests
(through an index to the build's platform): the sizes of its config and layers, less the blobs the download cache
holds. An archive pinned by ``#sha256=`` (or by the lock) that the cache holds needs no request at all. Nothing is
asked when the run is offline (``-download-cache-repo-mode offline``), nor for a local path or an inline script,
which download nothing; an entry resolved through the buildpack registry (a ``urn:cnb:registry:`` or a bare id) is
of unknown size, since resolving it is a download of the index. A probe that fails leaves the size unknown: the run
itself says why.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, assert_never

from preparer import telemetry
from preparer._logger import log
from preparer._numbers import decimal
from preparer.errors import FetchError, PreparerError
from preparer.plan import Fetch, Plan, PlannedDownload

if TYPE_CHECKING:
    from preparer.fetch.base import FetchContext
    from preparer.fetch.locator import HttpLocator, ImageLocator
    from preparer.fetch.store import Store
    from preparer.fetch.url import HttpUrl
    from preparer.settings import FetchSettings


@telemetry.step("cnb.plan.downloads")
def plan_downloads(plan: Plan, settings: FetchSettings, *, probe: bool = True) -> tuple[PlannedDownload, ...]:
    """What ``plan`` will download, an entry at a time, in the plan's order (see the module's docstring); the entries
    are asked about at once, as a run fetches them (:func:`~preparer.fetch.parallel.fetch_all`).

    :param probe: whether requests may be made (a ``HEAD``, an image's manifests); without, only what the download
        cache says is known.
    :raises Cancelled: the run was stopped meanwhile (through the interrupt machinery, as every request).
    """
    # Deferred: only plans that fetch measure.
    from preparer.fetch.parallel import fetch_all

    policy = plan.rules is not None
    probes = [p for s in plan.steps if isinstance(s, Fetch) and (p := _probe(s, policy)) is not None]
    if not probes:
        return ()
    online = probe and settings.download_cache_repo_mode != "offline"
    with _probing(settings, plan, online) as (cache, ctx):
        jobs = [functools.partial(measure, cache, ctx) for measure in probes]
        measured = fetch_all(jobs) if ctx is not None else [job() for job in jobs]
    if settings.download_cache is None:  # each entry's fetch downloads its blobs, whatever another's does
        return tuple(download for download, _ in measured)
    return _once(measured)


#: What one probe measures: the entry's download, and the blobs it is made of (an image's ``(digest, size)``; none
#: for an archive).
Measured = tuple[PlannedDownload, tuple[tuple[str, int], ...]]


def _once(measured: list[Measured]) -> tuple[PlannedDownload, ...]:
    """The downloads of a run with a download cache, where a blob two entries share (a layer two buildpackages
    hold) is fetched once, by whichever entry comes first, and read from the cache by the other: each entry's size
    less the blobs an earlier entry counts, so that the sizes add up to what the run fetches."""
    seen: set[str] = set()
    downloads = []
    for download, blobs in measured:
        shared = sum(size for digest, size in blobs if digest in seen)
        seen.update(digest for digest, _ in blobs)
        if shared and download.size is not None:
            download = replace(download, size=download.size - shared)
        downloads.append(download)
    return tuple(downloads)


def _probe(step: Fetch, policy: bool) -> Callable[[Store, FetchContext | None], Measured] | None:
    """How the plan measures what ``step`` downloads, given the download cache and the probes' context; ``None`` for
    a source that downloads nothing (a path on disk, an inline script)."""
    from preparer.fetch import locator as locators  # deferred, as above

    locator = step.pinned or step.locator
    match locator:
        case locators.HttpLocator():
            return functools.partial(_http, step, locator, policy=policy)
        case locators.ImageLocator():
            return functools.partial(_image, step, locator)
        case (
            locators.RegistryLocator() | locators.IdLocator()
        ):  # resolved through the registry's index: size unknown
            shown = locators.redact(step.entry.uri or step.entry.id or "")
            return lambda _cache, _ctx: (_download(step, shown, None), ())
        case locators.PathLocator() | locators.InlineLocator():
            return None
        case _ as never:
            assert_never(never)


def _image_shown(locator: ImageLocator) -> str:
    """An image as a plan names it: its reference normalised (``docker.io/library/...``)."""
    from preparer.fetch.locator import redact  # deferred, as above
    from preparer.fetch.oci.reference import parse_reference  # deferred: only images are named so

    try:
        return str(parse_reference(locator.reference))
    except PreparerError:
        return redact(locator.reference)


def _download(step: Fetch, source: str, size: int | None, cached: bool = False) -> PlannedDownload:
    return PlannedDownload(step.entry.key, source, step.buildpack_id, size, cached)


@contextmanager
def _probing(
    settings: FetchSettings, plan: Plan, online: bool
) -> Iterator[tuple[Store, FetchContext | None]]:
    """The download cache, read only (an empty store: none, or not to be trusted), and, when requests may be made, what
    the probes send them with: the run's transport settings (the caller's session when ``Inputs.transport`` gives
    one), no retry, closed when the block ends."""
    from preparer.fetch.store import Store  # deferred, as above

    cache = Store.reading(settings.download_cache) if settings.download_cache is not None else Store()
    if not online:
        yield cache, None
        return
    # Deferred, as above: what requests are sent with, as the run sends them.
    from preparer.fetch.base import FetchContext
    from preparer.fetch.clock import RunClock
    from preparer.fetch.sink import Sink
    from preparer.staging import run_registries, run_transport

    clock = RunClock(settings.run_timeout)
    timeouts = (min(5.0, settings.http_timeout), min(10.0, settings.http_timeout))
    transport = run_transport(settings, clock, timeouts, retries=0)
    registries = run_registries(settings, plan.registry_hosts, plan.target)
    try:
        # Nothing is written: manifests are read into memory, and the staging directory is never made.
        yield (
            cache,
            FetchContext(
                sink=Sink(Path(settings.buildpacks_dir)), transport=transport, registries=registries
            ),
        )
    finally:
        transport.close()
        clock.stop()


def _http(
    step: Fetch, locator: HttpLocator, cache: Store, ctx: FetchContext | None, *, policy: bool
) -> Measured:
    return _http_size(step, locator, cache, ctx, policy=policy), ()


def _http_size(
    step: Fetch, locator: HttpLocator, cache: Store, ctx: FetchContext | None, *, policy: bool
) -> PlannedDownload:
    """An http archive: cached when the cache holds its pinned digest (no request), or when the origin answers 304
    to a conditional ``HEAD``; else the ``Content-Length`` of the ``HEAD``'s answer."""
    shown = locator.shown
    if locator.sha256 is not None and cache.holds("sha256:" + locator.sha256):
        return _download(step, shown, 0, cached=True)
    if ctx is None:
        return _download(step, shown, None)
    headers = cache.validators_of(locator.url) if locator.sha256 is None else {}
    try:
        response = ctx.transport.retrying(  # no retry: what a network error was is said as a FetchError
            f"measure {shown}",
            lambda: ctx.transport.get(
                locator.url,
                headers,
                action=f"measure {shown}",
                check=False,
                method="HEAD",
                hop=_no_redirect(policy),
            ),
        )
    except PreparerError as err:
        log.debug("The size of %s is not known: %s", shown, err)
        return _download(step, shown, None)
    response.close()
    if response.status_code == 304 and headers:
        return _download(step, shown, 0, cached=True)
    length = decimal(response.headers.get("Content-Length", ""))
    if response.status_code != 200 or length is None or length >= 1 << 63:  # more than any file: not a size
        return _download(step, shown, None)
    return _download(step, shown, length)


def _no_redirect(policy: bool) -> Callable[[HttpUrl], None] | None:
    """Under a platform policy (``policy``), a probe follows no redirect (its size is then unknown): only the run's
    own requests, each hop decided by the policy's ``http.allow``, go to hosts the entry does not name."""
    if not policy:
        return None

    def refuse(url: HttpUrl) -> None:
        raise FetchError(f"measure {url.shown}", "a redirect is not followed to measure a download")

    return refuse


def _image(step: Fetch, locator: ImageLocator, cache: Store, ctx: FetchContext | None) -> Measured:
    """An image: the sizes of its config and layers that the download cache does not hold, from its manifests;
    with those blobs."""
    shown = _image_shown(locator)
    if ctx is None:
        return _download(step, shown, None), ()
    from preparer.fetch.oci.image import image_blobs  # deferred: only plans with images read manifests

    try:
        blobs = image_blobs(locator, ctx)
    except PreparerError as err:
        log.debug("The size of %s is not known: %s", shown, err)
        return _download(step, shown, None), ()
    missing = [(digest, size) for digest, size in blobs if not cache.holds(digest)]
    if not missing:
        return _download(step, shown, 0, cached=True), ()
    known = tuple((digest, size) for digest, size in missing if size is not None)
    if len(known) < len(missing):  # not counted in the total, nor its blobs
        return _download(step, shown, None), ()
    return _download(step, shown, sum(size for _, size in known)), known


def describe_downloads(downloads: tuple[PlannedDownload, ...]) -> list[str]:
    """The dry run's lines for ``downloads``: one for each, then their total (none without a download)."""
    if not downloads:
        return []
    lines = []
    for download in downloads:
        if download.cached:
            lines.append(f"  would use {download.source} from the download cache (nothing to download)")
        else:
            size = "size unknown" if download.size is None else human_size(download.size)
            lines.append(f"  would download {download.source} ({size})")
    lines.append("  " + summary(downloads))
    return lines


def summary(downloads: tuple[PlannedDownload, ...]) -> str:
    """``3 downloads, 14.2 MiB, 1 of unknown size`` (and how many the cache holds)."""
    count = len(downloads)
    unknown = sum(1 for d in downloads if d.size is None)
    cached = sum(1 for d in downloads if d.cached)
    parts = [f"{count} download{'' if count == 1 else 's'}", human_size(total_size(downloads))]
    if unknown:
        parts.append(f"{unknown} of unknown size")
    if cached:
        parts.append(f"{cached} in the download cache")
    return ", ".join(parts)


def total_size(downloads: tuple[PlannedDownload, ...]) -> int:
    """The bytes of the downloads whose size is known."""
    return sum(d.size for d in downloads if d.size is not None)


def human_size(count: int) -> str:
    """``count`` bytes as people read them: ``512 B``, ``1.2 KiB``, ``14.2 MiB``, ``1.0 GiB``."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB"):
        value /= 1024
        if value < 1024 or unit == "GiB":
            break
    return f"{value:.1f} {unit}"
