"""The store's images: an image's way through the tiers (docs/fleet.md, "Lookup").

The fleet's copy of the image's digest, or of the platform manifest its recorded image index names (or, offline,
of the digest recorded for its tag), pulled with the same registry client as the origin and verified as the
origin's; a copy that fails is one warning, and the origin is asked; offline without a copy, an error naming the
tag to seed. A pin is resolved through its digest only, never through a record of a name. An image pulled from its
origin anonymously is written back (when this pod's cache kept every blob), with the tag and index it came through.
The image fetcher hands the way a ``pull(copy or None, credentials)`` and never asks whether a fleet exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from preparer.errors import FetchError
from preparer.fetch.sink import Sink
from preparer.fetch.store.blobs import Blobs

if TYPE_CHECKING:
    from preparer.fetch.store.tiers import Local, Shared, Writes

T = TypeVar("T")
#: What an image fetcher hands the way: what it makes of the image pulled from ``copy`` (a reference in the
#: fleet's repository, with that repository's credentials), or from its origin (``None``, ``{}``).
Pull = Callable[[str | None, Mapping[str, str]], T]


class Images:
    """The store's images for one run: this pod's cache (whose blobs an image's write-back reads), the fleet's
    repository and what the run writes back to it (each ``None``: absent), and the run's blobs and manifests
    (which serve an index read from the fleet)."""

    def __init__(
        self, local: Local | None, fleet: Shared | None, writeback: Writes | None, blobs: Blobs
    ) -> None:
        self.local, self.fleet, self.writeback, self.blobs = local, fleet, writeback, blobs
        #: The image index each tag served offline from the fleet named, as its record says (:meth:`tag_index`).
        self._tag_indexes: dict[str, str] = {}

    @property
    def offline(self) -> bool:
        return self.fleet is not None and self.fleet.config.mode == "offline"

    def pull(self, reference: str, digest: str | None, pull: Pull[T], sink: Sink) -> tuple[T, str | None]:
        """What ``pull`` makes of the image ``reference`` (which names ``digest``, or a tag) from the first tier
        that has it: the fleet's copy of that digest, or of the platform manifest its recorded index names (or,
        offline, of the digest recorded for the tag), read with ``pull(copy, its credentials)`` and verified as from
        the origin, else its origin, ``pull(None, {})``. A copy that fails is one warning, and the origin is
        asked. Returns what ``pull`` made and the tier it came through (``None``: its origin).

        :raises FetchError: offline, and no tier has it (exit 1), naming the tag to seed; what ``pull`` raises.
        """
        found = None
        if digest is not None:  # a pin is resolved through its digest only, never through a record of a name
            found = self._from_copy(reference, digest, pull, sink)
            if found is None:
                found = self._from_index(reference, digest, pull, sink)
        elif self.offline and self.fleet is not None:
            recorded = self.fleet.ref_digest(reference)  # a tag: the platform manifest it last named
            found = self._from_copy(reference, recorded[0], pull, sink) if recorded else None
            if found is not None and recorded is not None and recorded[1] is not None:
                self._tag_index(reference, recorded[0], recorded[1])
        if found is not None:
            return found[0], "cache repository"
        if self.offline:
            from preparer.fetch.fleet import offline_miss, ref_tag  # deferred: only an offline run misses

            seed = "sha256-" + digest.removeprefix("sha256:") if digest else ref_tag(reference)
            raise offline_miss(f"pull {reference}", seed)
        return pull(None, {}), None

    def _tag_index(self, reference: str, digest: str, index: str) -> None:
        """Keep ``index`` as the image index the tag ``reference`` named, when the fleet holds that index's bytes
        (verified against its digest) and they list the platform manifest ``digest``: an image served offline is
        described as one pulled from its origin (:meth:`tag_index`)."""
        from preparer._jsondoc import loads  # deferred: offline runs only; bounded: a fleet pusher writes it

        data = self.fleet.index(index) if self.fleet is not None else None
        try:
            listed = loads(data)["manifests"] if data is not None else []
            if any(isinstance(m, dict) and m.get("digest") == digest for m in listed):
                self._tag_indexes[reference] = index
        except (ValueError, TypeError, KeyError):
            return

    def tag_index(self, reference: str) -> str | None:
        """The image index the tag ``reference``, served offline from the fleet, was recorded to name."""
        return self._tag_indexes.get(reference)

    def _from_copy(self, reference: str, digest: str, pull: Pull[T], sink: Sink) -> tuple[T] | None:
        """What ``pull`` makes of the fleet's copy of the image ``digest``; ``None`` when it has none, or a bad one
        (with a warning)."""
        copy = self.copy(digest)
        if copy is None:
            return None
        try:
            return (pull(*copy),)
        except FetchError as err:
            sink.warn(f"the download cache repository's copy of {reference} is not used: {err.cause}")
            return None

    def _from_index(self, reference: str, digest: str, pull: Pull[T], sink: Sink) -> tuple[T] | None:
        """What ``pull`` makes of the image index ``digest`` the fleet records (its bytes, verified against the
        digest): ``pull`` reads it as the manifest ``digest`` of the fleet's repository (:meth:`Blobs.manifest
        <preparer.fetch.store.blobs.Blobs.manifest>`), and through it the platform manifest it names, whose digest
        the registry client checks; ``None`` when the fleet records no such index."""
        fleet = self.fleet
        data = fleet.index(digest) if fleet is not None and fleet.usable else None
        if fleet is None or data is None:
            return None
        self.blobs.lend_index(digest, data)
        try:
            return (pull(f"{fleet.config.repo}@{digest}", fleet.environ),)
        except FetchError as err:
            sink.warn(f"the download cache repository's copy of {reference} is not used: {err.cause}")
            return None

    def copy(self, digest: str) -> tuple[str, dict[str, str]] | None:
        """Where the fleet holds the image manifest ``digest``: its reference there, and the environment with the
        repository's credentials to pull it with."""
        fleet = self.fleet
        if fleet is None or not fleet.usable or not fleet.image_manifest(digest.removeprefix("sha256:")):
            return None
        return f"{fleet.config.repo}@{digest}", fleet.environ

    def unreadable(self, reference: str, cause: str) -> None:
        """The fleet's copy of ``reference`` could not be read: the fleet is not asked again in this run."""
        if self.fleet is not None:
            self.fleet.give_up(f"its copy of {reference} cannot be read: {cause}")

    def keep(
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
        writeback, local = self.writeback, self.local
        if writeback is None:
            return
        if named is None:
            writeback.remember_ref(reference, digest, index)
        kept_index = local.blob_path(index) if local is not None and index is not None else None
        if index is not None and kept_index is not None:
            writeback.remember_index(kept_index, index, reference)
        kept = local.blob_path(digest) if local is not None else None
        if local is None or kept is None:
            return
        layers = manifest.get("layers")
        digests = [config_digest] + [
            str(layer.get("digest"))
            for layer in (layers if isinstance(layers, list) else [])
            if isinstance(layer, dict)
        ]
        writeback.remember_image(
            kept, digest, {d: local.blob_path(d) for d in digests}, str(manifest.get("mediaType") or "")
        )
