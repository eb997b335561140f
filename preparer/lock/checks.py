"""What a run frozen to its lock fetched, checked against it: the same digest, id and version, or the lock's error
(:class:`~preparer.errors.LockMismatch`, exit 1) naming both and the ways out; and a fetch's failure said as the
lock's decision where the lock decided it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, assert_never

from preparer.errors import FetchError, LockMismatch, with_fields
from preparer.files.locked import Locked
from preparer.files.lockfile import LOCK_DATA_NAME, shown, written_of
from preparer.plan import Fetch

if TYPE_CHECKING:
    from preparer.fetch.base import Fetched


def check_held(
    steps: Sequence[Fetch], fetched: Sequence[Fetched], lock: Path, by_key: Mapping[str, Locked]
) -> None:
    """What the entries ``by_key`` holds to ``lock`` fetched is what the lock says: the same digest, id and version.

    :raises LockMismatch: naming the lock, the entry, both digests (or both buildpacks) and the ways out (exit 1).
    """
    for step, result in zip(steps, fetched, strict=True):
        locked = by_key.get(step.entry.key)
        if locked is None:
            continue
        key = step.entry.key
        action = f"fetch {key} ({result.source})"
        if locked.digest is not None and result.digest != locked.digest:
            raise mismatch(lock, key, action, locked.digest, str(result.digest), "its bytes are")
        if (result.top.id, result.top.version) != (locked.id, locked.version):
            raise mismatch(lock, key, action, f"{locked.id}@{locked.version}", result.top.ref, "it holds")


def _ways_out(key: str) -> str:
    """The two ways out of bytes that are not the locked ones (as pip's ``--require-hashes`` gives them)."""
    return (
        f"if the source was changed on purpose, rerun with -update-lock={key}; if not, examine the source "
        "before trusting it: what was locked is not what it serves now"
    )


def the_lock(lock: Path) -> str:
    """The lock as messages name it: ``the lock file F``, or ``the lock Inputs.lock_data`` for one given as bytes."""
    return f"the lock {lock}" if lock == LOCK_DATA_NAME else f"the lock file {lock}"


def mismatch(
    lock: Path, entry: str, action: str, locked: str, actual: str, what: str, written: str | None = None
) -> LockMismatch:
    """The error of a frozen entry (or one an update keeps) that fetched ``actual`` where ``lock`` locks
    ``locked``: ``what`` says what ``actual`` is (``its bytes are``), ``written`` the entry as written."""
    spot = f" ({written})" if written else ""
    cause = f"{what} {actual}, but {the_lock(lock)} locks {locked} for {entry}{spot}: {_ways_out(entry)}"
    error = LockMismatch(action, cause)
    return with_fields(error, lock=str(lock), entry=entry, locked=locked, actual=actual, transient=False)


def locked_failure(step: Fetch, error: FetchError) -> FetchError:
    """``error`` from fetching a frozen step, said as the lock's decision when the lock decided it: bytes that are
    not the locked digest (a :class:`~preparer.errors.DigestMismatch` of the locked pin becomes a
    :class:`~preparer.errors.LockMismatch`, from its ``expected`` and ``got``), a locked image the registry no
    longer has. Other errors are returned as they are."""
    from preparer.errors import DigestMismatch, NotFoundError
    from preparer.fetch import locator as locators  # deferred, as above

    lock, pinned, key = step.locked_in, step.pinned, step.entry.key
    if lock is None or pinned is None:
        return error
    written = shown(written_of(step.entry))
    failed: FetchError
    match pinned:
        case locators.HttpLocator() if isinstance(error, DigestMismatch):
            if error.expected != f"sha256:{pinned.sha256}":
                return error
            action = f"fetch {key} ({pinned.shown})"
            failed = mismatch(lock, key, action, error.expected, error.got, "the download is", written)
        case locators.ImageLocator() if isinstance(error, NotFoundError):
            failed = NotFoundError(
                f"fetch {key} ({written})",
                f"{the_lock(lock)} locks it to {pinned.reference}, which the registry no longer has "
                f"({error.cause}): to lock what {written} names now, rerun with -update-lock={key}",
            )
        case (
            locators.HttpLocator()
            | locators.ImageLocator()
            | locators.PathLocator()
            | locators.RegistryLocator()
            | locators.IdLocator()
            | locators.InlineLocator()
        ):
            return error  # not the lock's decision
        case _ as never:
            assert_never(never)
    failed.source, failed.url, failed.status = error.source, error.url, error.status
    return failed
