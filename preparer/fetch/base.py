"""What every source of buildpacks is given and gives back: the run's context and the staged result.

Every fetcher writes only below its sink's staging directory; nothing reaches ``<buildpacks>`` until every entry
of the group has been fetched and checked (all-or-nothing). A fetcher is any callable ``(locator, ctx) ->
Fetched`` for one kind of locator (:class:`Fetcher`); :mod:`preparer.fetch.sources` maps kinds to fetchers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, TypeVar

from preparer._record import field, record
from preparer.fetch.guard import Verified
from preparer.fetch.registries import Registries
from preparer.fetch.sink import Sink
from preparer.fetch.store import Store
from preparer.fetch.transport import Transport
from preparer.fetch.tree import StagedBuildpack
from preparer.files.buildpack import BuildpackDescriptor


@record
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
    #: The signatures that satisfied the platform policy's ``[[image.signed-by]]`` rules (an image's only).
    signatures: tuple[Verified, ...] = ()
    #: The image pulled, by digest (``registry/repository@sha256:...``, normalised); ``None`` for other sources.
    image: str | None = None
    #: The digest of the image index the image was pulled through (its platform manifest is ``digest``), if any.
    index: str | None = None
    #: A buildpackage file's (``.cnb``, on disk or downloaded): the sha256 of the file and of the image manifest it
    #: holds (``digest`` is the one of the two the report gives).
    archive: str | None = None
    manifest: str | None = None


@record
class FetchContext:
    """What every fetcher is given, in four parts; IO happens only through them."""

    #: Where the fetch writes (its staging directory) and reports (progress, warnings), and the policy's limits.
    sink: Sink
    #: Where fetched bytes are kept and found again: the download cache and the fleet's repository (either may be
    #: absent); fetchers ask it and never which tiers there are.
    store: Store = field(default_factory=Store)
    #: The HTTP client: session, timeouts, retries, the run's deadline.
    transport: Transport = field(default_factory=Transport, compare=False, repr=False)
    #: How image references reach registries: schemes, credentials, mirrors, the platform, the buildpack registry.
    registries: Registries = field(default_factory=Registries)
    #: ``<buildpacks>``, where a bare buildpack id was looked for first (named when it is found nowhere).
    buildpacks_dir: Path | None = None
    #: Whether a buildpackage file on disk is hashed whole as it is read (for the provenance, which names it by its
    #: sha256); a run without one does not pay for the extra read.
    hash_files: bool = False

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
