"""Safe extraction of buildpack archives and buildpackage layers (contract §4).

Owned by the fetch work (issue 3): the signature below is the interface other modules use.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO


def extract_tar(
    fileobj: BinaryIO,
    dest: Path,
    *,
    archive: str,
    select: str | None = None,
    allow_absolute: bool = False,
) -> None:
    """Extract the tar stream ``fileobj`` (gzip or plain, told apart by magic bytes) into ``dest``.

    :param dest: an existing, empty directory; nothing is written outside it.
    :param archive: names the archive in error messages (already redacted).
    :param select: only entries below this relative prefix (``cnb/buildpacks/<eid>/<version>``) are
        extracted, with the prefix stripped; the others are skipped.
    :param allow_absolute: buildpackage layers name entries from the image root, so ``/cnb/x`` is ``cnb/x``;
        buildpack archives may not hold absolute names.
    :raises FetchError: naming the archive and the entry, for ``..``, absolute names, links leaving ``dest``,
        device and fifo entries, setuid/setgid bits, and corrupt or truncated archives.
    """
    raise NotImplementedError
