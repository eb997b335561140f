"""What a run writes back to the fleet's repository (docs/fleet.md, "Lookup"), in ``read-write`` mode only.

While the run fetches, the store remembers what it may share (an archive, a record the origin confirmed again, an
image, the tag and the index it was pulled through, the signatures that satisfied a policy) and an archive's bytes
are uploaded while they are downloaded (:class:`Upload`). After the run's commit, :meth:`WriteBack.write_back`
uploads the blobs not sent yet and puts the records, four at a time, within :data:`WRITE_BACK_SECONDS`: a failed
run publishes nothing. Every request goes through the fleet's connection (:meth:`~preparer.fetch.fleet.Fleet.
guarded`), so a refused write is one warning and the breaker, never a failed build.
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Literal

from preparer import interrupt
from preparer._record import field, record
from preparer.fetch.fleet import (
    ARTIFACT_TYPE,
    CHECKED,
    DIGEST,
    EMPTY_CONFIG,
    ETAG,
    INDEX,
    INDEX_LAYER,
    INDEX_TYPE,
    LAST_MODIFIED,
    LAYER_TYPE,
    OCI_MANIFEST,
    READ_SECONDS,
    REF_TYPE,
    SIGNATURES_LAYER,
    SIGNATURES_TYPE,
    SOURCE,
    Fleet,
    Hit,
    canonical_url,
    index_tag,
    ref_tag,
    signatures_tag,
    url_tag,
)
from preparer.fetch.oci.remote import Sized
from preparer.fetch.spool import Abandoned, Spool

#: The write-back of one run, in all.
WRITE_BACK_SECONDS = 30.0


@record(frozen=False)
class _Pending:
    """Something to write back after the commit."""

    kind: Literal["archive", "record", "image", "ref", "signatures", "index"]
    digest: str
    url: str | None
    annotations: dict[str, str]
    path: Path | None = None
    #: The archive's size (an archive's or a URL's record).
    size: int = 0
    #: An image's blobs by digest (``None``: not kept locally), and its manifest's media type.
    blobs: dict[str, Path | None] = field(default_factory=dict)
    media_type: str = ""


class WriteBack:
    """One run's write-back to the fleet's repository: what it remembered, the uploads under way, the push."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        #: The records to put after the commit.
        self.pending: list[_Pending] = []
        self._lock = threading.Lock()
        self._uploads: Any = None
        self._live: list[Upload] = []
        self._sending: list[Any] = []
        #: The blobs this run uploaded (the repository had none of them before).
        self._uploaded: set[str] = set()

    # Remembering, while the run fetches

    def remember_archive(self, path: Path, digest: str, url: str, validators: dict[str, str]) -> None:
        """Write the origin's archive at ``path`` back after the commit."""
        annotations = archive_annotations(url, validators)
        self.pending.append(_Pending("archive", digest, url, annotations, path, path.stat().st_size))

    def remember_record(self, hit: Hit, url: str) -> None:
        """Record again that ``url`` is ``hit`` (the origin has just confirmed it)."""
        annotations = archive_annotations(url, hit.validators)
        self.pending.append(_Pending("record", hit.digest, url, annotations, size=hit.size))

    def upload(self, directory: Path, expected: str | None, length: int | None) -> Upload | None:
        """An upload of the archive about to be downloaded, under way at once (see :class:`Upload`); ``None`` when
        the repository is not used any more. ``expected``: its pinned digest; ``length``: its announced size;
        ``directory``: where its bytes wait when the repository is slower than the origin."""
        if not self.fleet.usable:
            return None
        from concurrent.futures import ThreadPoolExecutor  # deferred: only a write-back uploads

        upload = Upload(directory, expected, length)
        with self._lock:
            if self._uploads is None:
                self._uploads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="fleet-upload")
            self._live.append(upload)
            self._sending.append(self._uploads.submit(interrupt.in_context(lambda: self._stream(upload))))
        return upload

    def remember_upload(
        self, upload: Upload, digest: str, size: int, url: str, validators: dict[str, str]
    ) -> None:
        """Keep what ``upload`` sent as the archive ``digest`` (``size`` bytes) of ``url``: its record follows
        after the commit."""
        upload.keep(digest)
        annotations = archive_annotations(url, validators)
        self.pending.append(_Pending("archive", digest, url, annotations, size=size))

    def remember_ref(self, reference: str, digest: str, index: str | None = None) -> None:
        """Record that the tag ``reference`` named ``digest``, through the image index ``index`` if any (for
        offline runs)."""
        annotations = {SOURCE: reference, DIGEST: digest, CHECKED: str(int(time.time()))}
        if index is not None:
            annotations[INDEX] = index
        self.pending.append(_Pending("ref", digest, reference, annotations))

    def remember_image(
        self, manifest: Path, digest: str, blobs: dict[str, Path | None], media_type: str
    ) -> None:
        """Copy the image ``digest`` (its manifest and blobs, kept in the local cache) to the repository, when
        every blob was pulled (a buildpackage's unneeded layers are not)."""
        if all(blobs.values()):
            self.pending.append(
                _Pending("image", digest, None, {}, manifest, blobs=blobs, media_type=media_type)
            )

    def remember_index(self, path: Path, digest: str, source: str) -> None:
        """Write the image index at ``path`` (of digest ``digest``, pulled through ``source``) back after the
        commit, as a record tagged :func:`~preparer.fetch.fleet.index_tag`."""
        size = path.stat().st_size
        self.pending.append(_Pending("index", digest, index_tag(digest), {SOURCE: source}, path, size))

    def remember_signatures(self, path: Path, digest: str, repository: str, image: str) -> None:
        """Write the signature record at ``path`` (of digest ``digest``) for the image ``image`` of
        ``repository`` back after the commit."""
        annotations = {SOURCE: f"{repository}@{image}"}
        tag = signatures_tag(repository, image)
        self.pending.append(_Pending("signatures", digest, tag, annotations, path, path.stat().st_size))

    def close(self) -> None:
        """End the uploads whose archives were not kept (a run that failed, or was stopped), and stop those not
        started yet."""
        for upload in self._live:
            upload.discard()
        if self._uploads is not None:
            self._uploads.shutdown(wait=False, cancel_futures=True)

    # Pushing, after the commit

    def write_back(self) -> int:
        """Push what the run remembered, within :data:`WRITE_BACK_SECONDS`; problems are one warning.

        :returns: the number of records written.
        """
        ends = time.monotonic() + WRITE_BACK_SECONDS
        self._upload_all()
        from concurrent.futures import ThreadPoolExecutor  # deferred: only a write-back puts records

        def write(item: _Pending) -> int:
            return 0 if not self.fleet.usable or time.monotonic() > ends else self._write_record(item)

        # The blobs are in the repository now: the records follow, four at a time.
        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="fleet-record") as pool:
            written = [
                pool.submit(interrupt.in_context(functools.partial(write, item))) for item in self.pending
            ]
            return sum(future.result() for future in written)

    def _write_record(self, item: _Pending) -> int:
        if item.kind == "image":
            assert item.path is not None
            manifest, media_type = item.path.read_bytes(), item.media_type or OCI_MANIFEST
            tags = ["sha256-" + item.digest.removeprefix("sha256:")]
        elif item.kind == "ref":
            manifest, media_type = record_manifest(REF_TYPE, EMPTY_CONFIG, item.annotations), OCI_MANIFEST
            tags = [ref_tag(item.url or "")]
        elif item.kind in ("signatures", "index"):
            kind, layer_type = (
                (SIGNATURES_TYPE, SIGNATURES_LAYER)
                if item.kind == "signatures"
                else (INDEX_TYPE, INDEX_LAYER)
            )
            layer = {"mediaType": layer_type, "digest": item.digest, "size": item.size}
            manifest, media_type = record_manifest(kind, layer, item.annotations), OCI_MANIFEST
            tags = [item.url or ""]
        else:
            layer = {"mediaType": LAYER_TYPE, "digest": item.digest, "size": item.size}
            manifest, media_type = record_manifest(ARTIFACT_TYPE, layer, item.annotations), OCI_MANIFEST
            tags = [url_tag(item.url)] if item.url else []
            if item.kind == "archive":
                tags.insert(0, "sha256-" + item.digest.removeprefix("sha256:"))
        # A record naming a blob this run uploaded cannot be in the repository yet: no need to ask first.
        new = item.digest in self._uploaded or any(digest in self._uploaded for digest in item.blobs)
        return 1 if all(self._put_manifest(tag, manifest, media_type, ask=not new) for tag in tags) else 0

    def _upload_all(self) -> None:
        """Upload every blob the pending records need, four at a time, and wait for the uploads under way: the
        uploads are most of the write-back's time, and mostly time in the kernel."""
        blobs: dict[str, Path | None] = {str(EMPTY_CONFIG["digest"]): None}
        for item in self.pending:
            if item.kind in ("archive", "signatures", "index") and item.path is not None:
                blobs[item.digest] = item.path
            blobs.update(item.blobs)
        from concurrent.futures import ThreadPoolExecutor, wait  # deferred: only a write-back uploads

        with ThreadPoolExecutor(max_workers=4, thread_name_prefix="fleet-upload") as pool:
            uploads = [
                pool.submit(interrupt.in_context(functools.partial(self._upload, path, digest)))
                for digest, path in blobs.items()
            ]
            for future in uploads:
                future.result()
        wait(self._sending, timeout=WRITE_BACK_SECONDS)

    def _upload(self, path: Path | None, digest: str) -> bool:
        """Upload one blob (``None``: the empty config), unless the repository has it already."""
        present = self._has_blob(digest)
        if present is not False:
            return bool(present)
        location = self.fleet.guarded(lambda remote: remote.start_upload())
        if location is None:
            return False
        if path is None:
            return self._complete(location, digest, b"{}")
        with open(path, "rb") as file:
            chunks = iter(lambda: file.read(1 << 20), b"")
            return self._complete(location, digest, Sized(chunks, os.fstat(file.fileno()).st_size))

    def _stream(self, upload: Upload) -> bool:
        """Send ``upload``'s bytes as they arrive: one ``PATCH`` while the download lasts, then the digest."""
        try:
            if upload.expected is not None and self._has_blob(upload.expected) is not False:
                return True
            location = self.fleet.guarded(lambda remote: remote.start_upload())
            if location is None:
                return False
            pieces = upload.pieces(READ_SECONDS)
            body = pieces if upload.length is None else Sized(pieces, upload.length)
            going_on = self.fleet.guarded(lambda remote: remote.send_upload(location, body))
            if going_on is None:
                return False
            assert upload.digest is not None  # the chunks ended: the archive is kept
            return self._complete(going_on, upload.digest, b"")
        except Abandoned:
            return False
        finally:
            upload.discard()

    def _has_blob(self, digest: str) -> bool | None:
        """Whether the repository has the blob ``digest`` (``None``: it cannot be asked)."""
        return self.fleet.guarded(lambda remote: remote.has_blob(digest))

    def _complete(self, location: str, digest: str, data: Any) -> bool:
        """End the upload session at ``location`` with its last bytes, ``data``, as the blob ``digest``."""
        if self.fleet.guarded(lambda remote: remote.complete_upload(location, digest, data)) is None:
            return False
        with self._lock:
            self._uploaded.add(digest)
        return True

    def _put_manifest(self, tag: str, manifest: bytes, media_type: str, ask: bool) -> bool:
        """Tag ``manifest`` as ``tag``, unless (``ask``) the tag names it already."""
        put = self.fleet.guarded(lambda remote: remote.put_manifest(tag, manifest, media_type, ask))
        return put is not None


def archive_annotations(url: str, validators: dict[str, str]) -> dict[str, str]:
    """The annotations of an archive's record: its source, the origin's validators, when it was confirmed."""
    found = {SOURCE: canonical_url(url), CHECKED: str(int(time.time()))}
    if validators.get("etag"):
        found[ETAG] = validators["etag"]
    if validators.get("last-modified"):
        found[LAST_MODIFIED] = validators["last-modified"]
    return found


def record_manifest(artifact_type: str, layer: dict[str, Any], annotations: dict[str, str]) -> bytes:
    """A record: an OCI manifest of ``artifact_type`` with the empty config and one layer (registries refuse a
    manifest without layers), serialised the same way every time (so an unchanged record is not put again)."""
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": EMPTY_CONFIG,
        "layers": [layer],
        "annotations": annotations,
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


class Upload(Spool):
    """An archive's bytes sent to the repository while they are downloaded, so that its write-back ends with its
    download: docker's streamed upload (``POST``, one ``PATCH`` whose body grows as the bytes arrive, a ``PUT``
    naming the digest once it is known). The bytes reach the sending thread through a :class:`Spool`: a
    repository slower than the origin never holds the download back. Nothing is published until the record is
    written after the commit; an archive that is not kept (a failed download, a digest that does not match) ends
    its upload unfinished."""

    def __init__(self, directory: Path, expected: str | None, length: int | None) -> None:
        super().__init__(directory, length)
        #: The pinned digest, if any (not sent again when the repository has that blob).
        self.expected = expected
        #: The archive's digest once it is kept.
        self.digest: str | None = None

    def keep(self, digest: str) -> None:
        """The download is over and its bytes are the archive ``digest``: finish the upload."""
        self.digest = digest
        self.end(True)
