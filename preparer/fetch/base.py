"""What every source of buildpacks is given and gives back: the run's context and the staged result.

Every fetcher writes only below :attr:`FetchContext.staging`; nothing reaches ``<buildpacks>`` until every entry
of the group has been fetched and checked (all-or-nothing). A fetcher is any callable ``(locator, ctx) ->
Fetched`` for one kind of locator (:class:`Fetcher`); :mod:`preparer.fetch.sources` maps kinds to fetchers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from preparer._logger import log
from preparer.fetch.guard import Guard
from preparer.fetch.oci.hosts import RegistryHosts
from preparer.fetch.sink import Sink
from preparer.fetch.store import Store
from preparer.fetch.streams import ProgressFn
from preparer.fetch.transport import Transport
from preparer.fetch.tree import StagedBuildpack
from preparer.files.buildpack import BuildpackDescriptor
from preparer.flags import DEFAULT_REGISTRY_INDEX


@dataclass(frozen=True, slots=True)
class Fetched:
    """The result of fetching one ``uri``: the buildpack the order names and everything it carries."""

    #: The buildpack the order names (a buildpackage's top-level buildpack).
    top: BuildpackDescriptor
    #: Every buildpack to install, ``top`` included (composites and their children).
    buildpacks: tuple[StagedBuildpack, ...]
    #: The ``uri`` as the user wrote it, with any credentials removed.
    source: str
    #: ``sha256:<hex>`` of the archive or image manifest, when known.
    digest: str | None = None
    #: How a bare buildpack id in ``uri`` was resolved: ``"registry"`` or ``"image"``.
    resolved: str | None = None
    #: Where the bytes came from when not from the source: ``"download cache"``, ``"cache repository"``.
    via: str | None = None


def no_progress(source: str, done: int, total: int | None) -> None:
    """The progress callback that reports nothing."""


def _log_warning(message: str) -> None:
    log.warning("%s", message)


@dataclass(frozen=True)
class FetchContext:
    """What every fetcher may use; IO happens only through these values."""

    #: A private directory for this run; fetchers create their own subdirectories in it.
    staging: Path
    #: The descriptor's directory: relative ``uri`` paths resolve against it.
    base_dir: Path
    #: ``<buildpacks>``, where a bare buildpack id was looked for first (named when it is found nowhere).
    buildpacks_dir: Path | None = None
    #: Where fetched bytes are kept and found again: the download cache and the fleet's repository (either may be
    #: absent); the fetchers ask it and never which tiers there are.
    store: Store = field(default_factory=Store)
    #: Registries reached over plain http besides loopback (``-insecure-registry``).
    insecure_registries: tuple[str, ...] = ()
    #: The environment, for ``CNB_REGISTRY_AUTH``, ``DOCKER_CONFIG`` and ``HOME``.
    environ: Mapping[str, str] = field(default_factory=dict)
    #: The platform to choose from an image index, ``os/arch[/variant]``.
    platform: str = "linux/amd64"
    #: The buildpack registry index for ``urn:cnb:registry:`` and bare ids.
    registry_index: str = DEFAULT_REGISTRY_INDEX
    #: Progress of downloads.
    progress: ProgressFn = no_progress
    #: Told every warning a fetcher has for the user (a cache entry discarded, a lock not taken).
    warn: Callable[[str], None] = _log_warning
    #: The HTTP client: session, timeouts, retries.
    transport: Transport = field(default_factory=Transport, compare=False, repr=False)
    #: The platform policy as this fetch sees it (set per fetch when there is a policy): its limits, and the
    #: decisions only fetching can ask for (redirects, revealed kinds, images found while resolving).
    guard: Guard | None = None
    #: Mirrors by registry, from ``-registry-hosts-dir`` (:mod:`preparer.fetch.oci.hosts`); ``None`` without.
    registry_hosts: Mapping[str, RegistryHosts] | None = None
    #: Mirrors that failed in this run (shared by every fetch): not asked again.
    down_mirrors: set[str] = field(default_factory=set)

    @property
    def sink(self) -> Sink:
        """Where this fetch writes and reports (:class:`~preparer.fetch.sink.Sink`)."""
        return Sink(self.staging, self.progress, self.warn, self.guard)

    @property
    def lock_wait(self) -> float:
        """How long to wait for a peer's download lock: twice the time a stalled download is given."""
        return 2 * self.transport.timeouts[1]


L_contra = TypeVar("L_contra", contravariant=True)


class Fetcher(Protocol[L_contra]):
    """Stages the buildpacks named by one kind of locator.

    :raises FetchError: the source cannot be read, downloaded, verified or unpacked (exit 1).
    :raises InvalidInputsError: the source is malformed in a way only fetching shows (exit 3).
    """

    def __call__(self, locator: L_contra, ctx: FetchContext, /) -> Fetched: ...
