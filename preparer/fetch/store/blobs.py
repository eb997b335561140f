"""The store's registry blobs and manifests, by digest: this pod's copy, verified while it is read, else one
download under the digest's lock (so that concurrent preparers pull once), kept. A manifest from a repository that
asked for credentials is used again only after the registry answers the run's own (a request).

This pod's cache is the only tier of blobs: the fleet's copy of an image is another repository of the same
registry client (:mod:`.images`). A cache whose disk is found full keeps nothing more of the run's blobs or records
(:class:`Unkept`), with one warning: a cache never fails a build.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar, cast

from preparer._fs import full_disk, full_in, no_space
from preparer.errors import FetchError
from preparer.fetch.sink import Sink
from preparer.fetch.streams import HashingReader, Reader, sha256_of

if TYPE_CHECKING:
    from preparer.fetch.store.tiers import Local

T = TypeVar("T")


class Unkept:
    """Whether this pod's cache was found full while the run kept something in it: from then on the run keeps no
    blob or record there (said once)."""

    def __init__(self, local: Local | None, warn: Callable[[str], None]) -> None:
        self.local, self._warn = local, warn
        self._set = threading.Event()
        self._lock = threading.Lock()

    def is_set(self) -> bool:
        return self._set.is_set()

    def met(self, err: BaseException, image: str, *, only_cache: bool = False) -> bool:
        """Whether ``err`` is the full disk of this pod's cache, met keeping what was pulled for ``image``: a cache
        that cannot be used is not used, so the run's blobs are no longer kept there (said once).

        :param only_cache: what failed wrote nowhere but in the cache (else the error must say it was there).
        """
        local = self.local
        full = None if local is None else full_disk(err) if only_cache else full_in(err, local.root)
        if full is None or local is None:
            return False
        with self._lock:
            first = not self._set.is_set()
            self._set.set()
        if first:
            self._warn(
                f"{no_space(full, 'the download cache', local.root)}: {image} is pulled without it (and so are "
                "the run's other images)"
            )
        return True


class Blobs:
    """The store's registry blobs and manifests for one run (see the module)."""

    def __init__(self, local: Local | None, unkept: Unkept) -> None:
        self.local, self.unkept = local, unkept
        #: The image indexes read from the fleet in this run, by digest (verified), for the registry client.
        self._indexes: dict[str, bytes] = {}

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
        local = self.local
        if local is None:
            return download(sink.staging)
        found = _cached_blob(local, digest, consume, sink)
        if found is not None:
            return found
        if self.unkept.is_set():
            return download(sink.staging)
        key = "blob:" + digest
        with local.lock(key, lock_wait) as locked:
            if not locked:
                sink.warn(
                    f"{local.lock_name(key)} is held by another preparer; pulling {digest} without the cache"
                )
                return download(sink.staging)
            found = _cached_blob(local, digest, consume, sink)
            if found is not None:
                return found
            try:
                path, result = download(local.tmp_dir())
                return local.add_blob(path, digest), result
            except Exception as err:
                if not self.unkept.met(err, image or digest):
                    raise
            # What ``consume`` made of the first attempt is in staging, which the run removes.
            return download(sink.staging)

    def manifest(self, digest: str, repository: str, what: str, sink: Sink) -> bytes | None:
        """This run's copy of the image index ``digest`` read from the fleet (:meth:`lend_index`), or this pod's
        copy of the manifest ``digest`` of ``repository``, verified; ``None`` when absent, damaged (then removed,
        with a warning naming ``what``), or from a repository that asked for credentials: the registry must then
        confirm this run's own (a request)."""
        index = self._indexes.get(digest)
        if index is not None and sha256_of(index) == digest:
            return index
        local = self.local
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
        local = self.local
        if local is None or self.unkept.is_set():
            return
        try:
            if private:  # first: a copy is never kept without its mark
                local.mark_private(repository)
            with local.temp_file() as tmp:
                tmp.write_bytes(data)
                local.add_blob(tmp, digest)
        except OSError as err:
            if not self.unkept.met(err, image or repository, only_cache=True):
                raise

    def lend_index(self, digest: str, data: bytes) -> None:
        """The image index ``digest`` the fleet records (its bytes, verified by :meth:`manifest` as they are
        served): the registry client reads it as the manifest ``digest`` of the fleet's repository, which holds
        only the platform manifest it names."""
        self._indexes[digest] = data


def _cached_blob(
    local: Local, digest: str, consume: Callable[[Reader], T], sink: Sink
) -> tuple[Path, T] | None:
    """The cached blob fed to ``consume`` and verified while it is read; ``None`` when absent, or damaged (then
    removed, and whatever ``consume`` made of it is the caller's to discard)."""
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
