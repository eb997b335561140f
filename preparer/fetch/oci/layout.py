"""``.cnb`` files: an OCI image layout in an uncompressed tar (spec distribution.md §Buildpackage).

``index.json`` names the image (an index is resolved to the build's platform); every blob read from the tar is
checked against its digest.
"""

from __future__ import annotations

import os
import tarfile
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from preparer._jsondoc import DocumentRefused, loads
from preparer.errors import FetchError
from preparer.fetch.base import FetchContext, Fetched
from preparer.fetch.oci import memory
from preparer.fetch.oci.buildpackage import (
    Document,
    check_image_platform,
    follow_index,
    install_buildpackage,
)
from preparer.fetch.oci.client import MAX_MANIFEST, kind_of
from preparer.fetch.streams import HashingReader, Reader, sha256_of, verify_digest

T = TypeVar("T")
#: Entries a ``.cnb`` may hold: a layout holds a blob per buildpack and a few documents (every header read is kept,
#: so a file of millions of empty entries would be as large in memory as on disk).
MAX_LAYOUT_ENTRIES = 10_000


class Layout:
    """Random access to the blobs of an OCI layout tar."""

    def __init__(self, path: Path, source: str, staging: Path) -> None:
        self.path, self.source, self.staging = path, source, staging
        self.lock = threading.Lock()
        try:
            # One open file for the tar and its digest, so that the digest is of the bytes read.
            self.file = open(path, "rb")  # noqa: SIM115 (closed by fetch_cnb's with block)
            self.tar = tarfile.open(fileobj=self.file, mode="r:")  # noqa: SIM115 (as the file)
            self.members = {}
            for count, member in enumerate(self.tar, 1):  # each header read is kept: bounded in number
                if count > MAX_LAYOUT_ENTRIES:
                    self.file.close()
                    raise FetchError(
                        f"read {source}",
                        f"it holds more than {MAX_LAYOUT_ENTRIES} entries, more than a layout has",
                    )
                if member.isfile():
                    self.members[member.name.removeprefix("./").lstrip("/")] = member
        except (OSError, tarfile.TarError) as err:
            if hasattr(self, "file"):
                self.file.close()
            raise FetchError(f"read {source}", f"not an OCI layout tar ({err})") from err

    def sha256(self) -> str:
        """``sha256:<hex>`` of the whole file, read from the descriptor the tar is read from (its position kept).

        :raises FetchError: the file cannot be read (exit 1).
        """
        import hashlib  # deferred: only a .cnb on disk is hashed whole

        digest, offset, fd = hashlib.sha256(), 0, self.file.fileno()
        try:
            while chunk := os.pread(fd, 1 << 20, offset):
                digest.update(chunk)
                offset += len(chunk)
        except OSError as err:
            raise FetchError(f"read {self.source}", err.strerror or str(err)) from err
        return f"sha256:{digest.hexdigest()}"

    def read(self, name: str) -> bytes:
        member = self.members.get(name)
        if member is None:
            raise FetchError(f"read {self.source}", f"'{name}' is missing from the layout")
        if member.size > MAX_MANIFEST:
            raise FetchError(f"read {self.source}", f"'{name}' is larger than {MAX_MANIFEST} bytes")
        try:
            stream = self.tar.extractfile(member)
            assert stream is not None
            return stream.read()
        except (OSError, tarfile.TarError) as err:
            raise FetchError(f"read {self.source}", f"'{name}' cannot be read ({err})") from err

    def blob(self, digest: str) -> bytes:
        """A small blob (manifest, config), checked."""
        data = self.read(self._blob_name(digest))
        verify_digest(
            sha256_of(data), digest, f"read {self.source}", f"blob {digest} does not match its digest"
        )
        return data

    def document(self, digest: str) -> Document:
        """An image document (manifest or index) by digest, checked."""
        doc = self.json(self.blob(digest), "manifest")
        try:
            return doc, kind_of(doc), digest
        except ValueError as err:
            raise FetchError(f"read {self.source}", str(err)) from err

    def read_layer(self, digest: str, extract: Callable[[Reader], T]) -> T:
        """Feed a layer blob to ``extract`` straight from the tar, checking its digest (one thread at a time)."""
        with self.lock:
            member = self.members.get(self._blob_name(digest))
            if member is None:
                raise FetchError(
                    f"read {self.source}", f"'{self._blob_name(digest)}' is missing from the layout"
                )
            stream = self.tar.extractfile(member)
            assert stream is not None
            reader = HashingReader(stream)
            try:
                result, failure = extract(reader), None
            except FetchError as err:
                result, failure = None, err
            try:
                reader.drain()
            except (OSError, tarfile.TarError) as err:
                raise FetchError(f"read {self.source}", f"blob {digest} cannot be read ({err})") from err
        verify_digest(
            reader.digest, digest, f"read {self.source}", f"blob {digest} does not match its digest"
        )
        if failure is not None or result is None:
            raise failure or FetchError(f"read {self.source}", f"blob {digest} could not be read")
        return result

    @staticmethod
    def _blob_name(digest: str) -> str:
        algorithm, _, hexdigest = digest.partition(":")
        if algorithm != "sha256" or len(hexdigest) != 64:
            raise FetchError("read OCI layout", f"unsupported digest '{digest}'")
        return f"blobs/{algorithm}/{hexdigest}"

    def json(self, data: bytes, what: str) -> dict[str, Any]:
        try:
            doc = loads(data)  # bounded in what it builds, as a registry's documents
        except DocumentRefused as err:
            raise FetchError(f"read {self.source}", f"{what} is not read: {err}") from None
        except ValueError:
            raise FetchError(f"read {self.source}", f"{what} is not JSON") from None
        if not isinstance(doc, dict):
            raise FetchError(f"read {self.source}", f"{what} is not a JSON object")
        return doc


def fetch_cnb(path: Path, *, source: str, digest: str | None, ctx: FetchContext) -> Fetched:
    """Stage every buildpack of the ``.cnb`` at ``path``; the order names its top-level buildpack.

    :param digest: the file's ``sha256:<hex>`` when the caller hashed it as it read it (a download, an archive
        found to be a layout): the result's ``digest``; else (a ``.cnb`` on disk) the result's ``digest`` is the
        image manifest's, and the file is hashed here when ``ctx.hash_files`` asks (for the provenance). Both are
        the result's ``archive`` and ``manifest``.
    :raises FetchError: not a layout, missing or corrupt blobs, not a buildpackage (exit 1).
    """
    memory.when_allowed()  # the command's process only
    layout = Layout(path, source, ctx.sink.staging)
    with layout.file, layout.tar:
        archive = digest or (layout.sha256() if ctx.hash_files else None)
        # index.json is an index: follow it (and any nested index) to the image for the build's platform.
        index = layout.json(layout.read("index.json"), "index.json")
        manifest, _, manifest_digest = follow_index(
            (index, "index", ""), layout.document, ctx.registries.platform, source, verb="read",
            platform_source=ctx.registries.platform_source,
        )  # fmt: skip
        config_descriptor = manifest.get("config")
        if not isinstance(config_descriptor, dict):
            raise FetchError(f"read {source}", "the manifest names no image config")
        config = layout.json(layout.blob(str(config_descriptor.get("digest"))), "config")
        check_image_platform(config, ctx.registries, source, ctx.sink.warn, verb="read")
        fetched = install_buildpackage(
            manifest, config, layout.read_layer, source=source, digest=digest or manifest_digest, ctx=ctx
        )
    return replace(fetched, archive=archive, manifest=manifest_digest)
