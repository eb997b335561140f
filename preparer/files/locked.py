"""One entry of the lock file (:mod:`preparer.files.lockfile` reads and writes the file): a record of its own, so
that the report can name it without importing what reads lock files."""

from __future__ import annotations

from typing import Literal

from preparer._record import record

Source = Literal["builder", "path", "http", "image", "registry", "inline"]


@record
class Locked:
    """One entry of the lock.

    ``written`` is the entry as written (``uri`` without credentials, ``id``, ``version``, and a ``script``'s
    sha256): what tells a changed entry. ``pinned`` is what the entry is frozen to: an image by digest
    (``registry/repository@sha256:...``, for ``image`` and ``registry``), the URL (``http``); ``None`` for
    ``builder``, ``path`` and ``inline``. ``digest`` is the content's: the image manifest's, the archive's. ``index``
    is the digest of the image index the image was pulled through (``None``: none, or a lock written before it was
    recorded).
    """

    entry: str
    written: dict[str, str]
    id: str
    version: str
    source: Source
    pinned: str | None = None
    digest: str | None = None
    index: str | None = None


def describe_locked(e: Locked) -> str:
    """What an entry locks, for people: ``id@version (where, digest)``."""
    where = e.pinned or e.source
    return f"{e.id}@{e.version} ({where}{', ' + e.digest if e.digest and e.digest not in where else ''})"
