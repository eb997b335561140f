"""The download cache: content-addressed blobs shared safely by concurrent preparers.

Layout under the cache root (``-download-cache``)::

    blobs/sha256/<hex>     verified content, never modified once renamed into place
    trees/sha256/<hex>/    a buildpack archive with that digest, extracted; reused through hard links
    http/<sha256(url)>.json  the ETag, Last-Modified and body digest a server gave for a URL
    tmp/                   partial downloads and extractions; renamed into place only after the checks
    locks/<key>.lock       inter-process locks (filelock), one per blob or URL being fetched

A blob or tree only ever appears by renaming a complete, verified temporary one, so a failed or truncated
download can never poison the cache, and readers need no lock.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from preparer._fs import temp_file
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
        from filelock import FileLock  # only runs that download take locks

        name = hashlib.sha256(key.encode()).hexdigest()
        with FileLock(str(self._dir("locks") / f"{name}.lock")):
            yield

    def temp_file(self) -> AbstractContextManager[Path]:
        """A fresh temporary file in ``tmp/``; removed on exit unless it was moved away."""
        return temp_file(self.tmp_dir(), "dl-")

    # Extracted buildpack trees, keyed by the digest of the archive they came from.

    def tree_path(self, digest: str) -> Path | None:
        """The extracted tree of the archive with ``digest``, or ``None``. Trees are never modified."""
        algorithm, hexdigest = split_digest(digest)
        path = self.root / "trees" / algorithm / hexdigest
        return path if path.is_dir() else None

    def new_tree(self) -> Path:
        """An empty directory on the cache's filesystem to extract into, before :meth:`add_tree`."""
        return Path(tempfile.mkdtemp(prefix="tree-", dir=self.tmp_dir()))

    def add_tree(self, src: Path, digest: str) -> Path:
        """Move the extracted tree ``src`` into place; when another process was first, keep theirs."""
        algorithm, hexdigest = split_digest(digest)
        dest = self._dir(f"trees/{algorithm}") / hexdigest
        try:
            os.rename(src, dest)
        except OSError:
            if not dest.is_dir():
                raise
            shutil.rmtree(src, ignore_errors=True)
        return dest

    # What an HTTP server said about a URL: its validators and the digest of the body.

    def _meta_path(self, url: str) -> Path:
        # The URL is hashed: it may carry credentials, which must not be written anywhere.
        return self._dir("http") / (hashlib.sha256(url.encode()).hexdigest() + ".json")

    def http_meta(self, url: str) -> dict[str, str] | None:
        """The stored ``etag``, ``last-modified`` and ``digest`` of ``url``, or ``None``."""
        try:
            meta = json.loads(self._meta_path(url).read_text())
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) and isinstance(meta.get("digest"), str) else None

    def put_http_meta(self, url: str, meta: dict[str, str]) -> None:
        """Record ``meta`` for ``url`` atomically."""
        path = self._meta_path(url)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".meta-")
        with os.fdopen(fd, "w") as f:
            json.dump(meta, f)
        os.replace(tmp, path)
