"""The download cache: content-addressed blobs shared safely by concurrent preparers.

Layout under the cache root (``-download-cache``)::

    blobs/sha256/<hex>     verified content, never modified once renamed into place
    tmp/                   partial downloads; renamed into blobs/ only after the digest checks
    locks/<key>.lock       inter-process locks (filelock), one per blob or URL being fetched

A blob is only ever created by ``os.replace`` of a complete, verified temporary file, so a failed or
truncated download can never poison the cache, and readers need no lock.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from preparer.errors import FetchError


def split_digest(digest: str) -> tuple[str, str]:
    """``("sha256", hex)`` from ``sha256:<hex>``.

    :raises FetchError: for any other algorithm or a malformed digest.
    """
    algorithm, _, hexdigest = digest.partition(":")
    if algorithm != "sha256" or len(hexdigest) != 64 or any(c not in "0123456789abcdef" for c in hexdigest):
        raise FetchError("verify digest", f"unsupported or malformed digest '{digest}'")
    return algorithm, hexdigest


class DownloadCache:
    """A content-addressed store of downloaded bytes at ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _dir(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def blob_path(self, digest: str) -> Path | None:
        """The cached blob with ``digest`` (``sha256:<hex>``), or ``None`` when absent."""
        algorithm, hexdigest = split_digest(digest)
        path = self.root / "blobs" / algorithm / hexdigest
        return path if path.is_file() else None

    def tmp_dir(self) -> Path:
        """A directory on the cache's filesystem for partial downloads (so ``add_blob`` can rename)."""
        return self._dir("tmp")

    def add_blob(self, src: Path, digest: str) -> Path:
        """Move the complete file ``src``, whose sha256 the caller verified, into the store.

        Safe when another process adds the same blob at the same time: both renames hold the same bytes.
        """
        algorithm, hexdigest = split_digest(digest)
        dest = self._dir(f"blobs/{algorithm}") / hexdigest
        os.chmod(src, 0o644)
        os.replace(src, dest)
        return dest

    @contextmanager
    def lock(self, key: str) -> Iterator[None]:
        """Hold the inter-process lock named ``key`` (any string; hashed into a file name)."""
        name = hashlib.sha256(key.encode()).hexdigest()
        with FileLock(str(self._dir("locks") / f"{name}.lock")):
            yield

    @contextmanager
    def temp_file(self) -> Iterator[Path]:
        """A fresh temporary file in ``tmp/``; removed on exit unless it was moved away."""
        fd, name = tempfile.mkstemp(dir=self.tmp_dir(), prefix="dl-")
        os.close(fd)
        path = Path(name)
        try:
            yield path
        finally:
            path.unlink(missing_ok=True)
