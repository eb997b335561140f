"""The lock file (``-lock FILE``): what each buildpack entry resolved to, so that every rebuild installs the same bytes.

A run with a lock that does not exist yet resolves as usual and writes it with the commit (docs/lock.md). A run
with an existing lock is *frozen* to it before anything is fetched (:func:`freeze`): images are pulled by the
locked digest, http archives must hash to the locked digest (a warm cache serves them with no request), registry
ids use the locked image without asking the registry's index, a builder's buildpack stays at the locked version. An
image locked through an index is pulled by the index's digest, and must lead to the locked manifest.
An entry that no longer matches the lock is exit 3, before any request; bytes that differ from the locked digest are
exit 1 (:func:`check_locked`), said as the lock's decision (:func:`locked_failure`). ``-update-lock`` rewrites it,
resolving again only what the project changed and the entries named (:func:`update`), as ``uv lock`` does.

A lock is the app's input, like ``project.toml``: it narrows what an entry may resolve to and never widens what the
platform allows. A locked image must be in the repository the entry names, a locked URL must be the URL it names;
the platform policy and its signature rules apply to what is locked exactly as to what is written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from preparer.errors import FetchError, InvalidInputsError, LockMismatch, with_fields
from preparer.files.locked import Locked, Source, describe_locked
from preparer.files.lockfile import LOCK_DATA_NAME, LockState, shown, written_of
from preparer.plan import Fetch, Plan, Present, Step

if TYPE_CHECKING:
    from preparer.fetch.base import Fetched
    from preparer.fetch.locator import Locator
    from preparer.report import LockChange
    from preparer.target import Target

# Freezing a plan to its lock


def freeze(
    plan: Plan, lock: Path, entries: Sequence[Locked], versions_of: Callable[[str], Sequence[str]]
) -> Plan:
    """``plan`` with every entry frozen to what ``entries`` lock.

    :raises InvalidInputsError: an entry added, removed or changed since the lock was written, a locked source that
        is not what the entry names, a locked builder version the builder no longer has (exit 3).
    """
    by_key = {e.entry: e for e in entries}
    planned = {s.entry.key for s in plan.steps}
    for e in entries:
        if e.entry not in planned:
            raise _stale(lock, f"it locks {e.entry} ({shown(e.written)}), which the project no longer has")
    frozen: dict[int, Step] = {}
    for step in plan.steps:
        locked = by_key.get(step.entry.key)
        if locked is None:
            entry = step.entry
            raise _stale(lock, f"{entry.key} ({shown(written_of(entry))}) is not in it")
        frozen[id(step)] = _frozen(step, locked, lock, versions_of)
    return _with_steps(plan, frozen)


def check_target(lock: Path, made_for: str | None, target: Target | None) -> None:
    """A frozen run is for the target its lock was made for: an image index resolves to another manifest on
    another platform, so the locked digests are not this build's. A lock that records no target (written before it
    was recorded) is not checked.

    :raises InvalidInputsError: the lock was made for another target (exit 3), naming both.
    """
    from preparer.target import same_platform  # deferred, as the fetchers

    if made_for is None or target is None or same_platform(made_for, target.platform):
        return
    raise _stale(
        lock,
        f"it was made for {made_for}; this build is {target.platform} ({target.source}). To lock this build, "
        f"rerun with -update-lock (every entry is resolved again for {target.platform}), or give the lock made "
        "for it (-lock)",
        "",
    )


def update(
    plan: Plan,
    lock: Path,
    entries: Sequence[Locked] | None,
    names: Sequence[str],
    versions_of: Callable[[str], Sequence[str]],
) -> Plan:
    """``plan`` for ``-update-lock``: the entries the project changed (added, edited; a removed one is dropped)
    and those ``names`` names (a buildpack id or an entry key; ``all``: every one) are resolved again, every other
    is frozen to ``entries``, as a frozen run is, and written back unchanged (:func:`updated`).

    :raises InvalidInputsError: a name that names no entry (exit 3), before any request.
    """
    state = LockState(lock, None if entries is None else tuple(entries), "update")
    if entries is None or "all" in names:
        return replace(plan, lock=state)
    by_key = {e.entry: e for e in entries}
    _check_names(plan, lock, entries, names)
    frozen: dict[int, Step] = {}
    for step in plan.steps:
        locked = by_key.get(step.entry.key)
        if locked is None or _named(step, locked, names):
            continue
        try:
            frozen[id(step)] = _frozen(step, locked, lock, versions_of)
        except InvalidInputsError:  # changed since it was locked (or the builder moved on): resolved again
            continue
    kept = frozenset(s.entry.key for s in plan.steps if id(s) in frozen)
    return replace(_with_steps(plan, frozen), lock=replace(state, kept=kept))


def _named(step: Step, locked: Locked | None, names: Sequence[str]) -> bool:
    """Whether ``names`` names the entry of ``step``: its key, the id written, or the id it resolved to."""
    ids = {step.entry.id, locked.id if locked else None, step.id if isinstance(step, Present) else None}
    return step.entry.key in names or bool(ids.intersection(names))


def _check_names(plan: Plan, lock: Path, entries: Sequence[Locked], names: Sequence[str]) -> None:
    by_key = {e.entry: e for e in entries}
    for name in names:
        if not any(_named(step, by_key.get(step.entry.key), (name,)) for step in plan.steps):
            known = ", ".join(
                f"{s.entry.key} ({by_key[s.entry.key].id})" if s.entry.key in by_key else s.entry.key
                for s in plan.steps
            )
            error = InvalidInputsError(
                f"update lock file {lock}",
                f"-update-lock={name} names no entry of the project: name a buildpack id or an entry "
                f"({known or 'none'}), or all",
            )
            raise with_fields(error, field="update_lock_names")


def _with_steps(plan: Plan, frozen: Mapping[int, Step]) -> Plan:
    """``plan`` with the steps of ``frozen`` (by the ``id`` of the step they replace) in place of theirs."""

    def swapped(steps: Sequence[Step]) -> tuple[Step, ...]:
        return tuple(frozen.get(id(s), s) for s in steps)

    return replace(
        plan,
        pre=swapped(plan.pre),
        group=None if plan.group is None else swapped(plan.group),
        post=swapped(plan.post),
    )


def _stale(lock: Path, why: str, advice: str = ": rerun with -update-lock") -> InvalidInputsError:
    error = InvalidInputsError(f"apply lock file {lock}", f"{why}{advice}")
    return with_fields(error, field="lock")


def _frozen(step: Step, locked: Locked, lock: Path, versions_of: Callable[[str], Sequence[str]]) -> Step:
    """The step frozen to ``locked``: a builder buildpack at the locked version, or a fetch whose ``pinned``
    locator is the locked source (the policy still decides on the written ``locator``)."""
    from preparer.fetch.locator import HttpLocator, IdLocator, ImageLocator  # deferred, as in plan.py

    entry = step.entry
    written = written_of(entry)
    if written != locked.written:
        raise _stale(lock, f"{entry.key} is written {shown(written)}, but it locks {shown(locked.written)}")
    if locked.source not in _sources(step):
        raise _stale(lock, f"{entry.key} cannot come from a {locked.source} source, as it locks")
    if locked.source == "builder":
        installed = versions_of(locked.id)
        if locked.version not in installed:
            found = f" (it has: {', '.join(installed)})" if installed else ""
            raise _stale(
                lock,
                f"{entry.key} locks {locked.id}@{locked.version}, which the builder no longer has{found}",
            )
        return Present(entry, locked.id, locked.version, step.resolved if isinstance(step, Present) else None)
    # A bare id the builder has now, locked from elsewhere: fetched as the lock says, decided as a bare id.
    locator = step.locator if isinstance(step, Fetch) else IdLocator(step.id)
    if locked.source in ("image", "registry"):
        assert locked.pinned is not None
        if locked.source == "image" and not _same_repository(locator, locked.pinned):
            raise _stale(lock, f"{entry.key} locks {locked.pinned}, which is not the image it names")
        # Through the locked index when there is one: its digest is signed as often as the manifest's (``cosign
        # sign <multi-arch tag>``), and the manifest it leads to must be the locked one (check_locked).
        frozen = (
            locked.pinned if locked.index is None else f"{locked.pinned.rpartition('@')[0]}@{locked.index}"
        )
        return Fetch(entry, locator, ImageLocator(frozen), lock)
    if locked.source == "http":
        assert locked.pinned is not None and locked.digest is not None
        if not isinstance(locator, HttpLocator) or locator.shown != locked.pinned:
            raise _stale(lock, f"{entry.key} locks {locked.pinned}, which is not the URL it names")
        return Fetch(entry, locator, HttpLocator(locator.url, locked.digest.removeprefix("sha256:")), lock)
    # Path and inline: what is written is what is fetched; a local archive's digest is checked after.
    return step


def _sources(step: Step) -> tuple[Source, ...]:
    """The sources an entry may have resolved to."""
    from preparer.fetch.locator import (  # deferred, as above
        HttpLocator,
        IdLocator,
        ImageLocator,
        InlineLocator,
        PathLocator,
        RegistryLocator,
    )

    if isinstance(step, Present):
        return ("builder", "registry", "image") if step.resolved == "installed" else ("builder",)
    locator = step.locator
    if isinstance(locator, IdLocator):
        return ("builder", "registry", "image")
    kinds: dict[type, tuple[Source, ...]] = {
        HttpLocator: ("http",), ImageLocator: ("image",), RegistryLocator: ("registry",), PathLocator: ("path",),
        InlineLocator: ("inline",),
    }  # fmt: skip
    return kinds.get(type(locator), ())


def _same_repository(locator: Locator, pinned: str) -> bool:
    """Whether ``pinned`` is in the repository the written image reference (or bare id) names."""
    from preparer.fetch.locator import IdLocator, ImageLocator  # deferred, as above
    from preparer.fetch.oci.reference import parse_reference

    if isinstance(locator, ImageLocator):
        written = parse_reference(locator.reference)
    elif isinstance(locator, IdLocator):
        written = parse_reference(locator.id)
    else:
        return False
    locked = parse_reference(pinned)
    return (written.registry, written.repository) == (locked.registry, locked.repository)


# After fetching


def check_locked(steps: Sequence[Fetch], fetched: Sequence[Fetched], state: LockState) -> None:
    """What a frozen run (or the entries an update keeps) fetched is what the lock says: the same digest, id and
    version.

    :raises LockMismatch: naming the lock, the entry, both digests (or both buildpacks) and the ways out (exit 1).
    """
    if state.entries is None or state.mode == "write":
        return
    by_key = {e.entry: e for e in state.entries if state.mode == "frozen" or e.entry in state.kept}
    for step, result in zip(steps, fetched, strict=True):
        locked = by_key.get(step.entry.key)
        if locked is None:
            continue
        key = step.entry.key
        action = f"fetch {key} ({result.source})"
        if locked.digest is not None and result.digest != locked.digest:
            raise mismatch(state.path, key, action, locked.digest, str(result.digest), "its bytes are")
        if (result.top.id, result.top.version) != (locked.id, locked.version):
            raise mismatch(
                state.path, key, action, f"{locked.id}@{locked.version}", result.top.ref, "it holds"
            )


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
    from preparer.fetch.locator import HttpLocator, ImageLocator  # deferred, as above

    lock, pinned, key = step.locked_in, step.pinned, step.entry.key
    if lock is None or pinned is None:
        return error
    written = shown(written_of(step.entry))
    failed: FetchError
    if isinstance(pinned, HttpLocator) and isinstance(error, DigestMismatch):
        if error.expected != f"sha256:{pinned.sha256}":
            return error
        action = f"fetch {key} ({pinned.shown})"
        failed = mismatch(lock, key, action, error.expected, error.got, "the download is", written)
    elif isinstance(pinned, ImageLocator) and isinstance(error, NotFoundError):
        failed = NotFoundError(
            f"fetch {key} ({written})",
            f"{the_lock(lock)} locks it to {pinned.reference}, which the registry no longer has "
            f"({error.cause}): to lock what {written} names now, rerun with -update-lock={key}",
        )
    else:
        return error
    failed.source, failed.url, failed.status = error.source, error.url, error.status
    return failed


def resolved(steps: Sequence[Step], results: Mapping[int, Fetched]) -> tuple[Locked, ...]:
    """What each entry resolved to in this run, as the lock keeps it."""
    return tuple(_resolved(step, results.get(id(step))) for step in steps)


def updated(
    state: LockState | None, steps: Sequence[Step], results: Mapping[int, Fetched]
) -> tuple[Locked, ...]:
    """The entries of the lock a run writes: those an update keeps exactly as they were locked, the others as
    they resolved in this run (``results``, by the ``id`` of their step)."""
    before = {e.entry: e for e in state.entries or ()} if state is not None else {}
    kept = state.kept if state is not None else frozenset()
    return tuple(
        before[s.entry.key] if s.entry.key in kept else _resolved(s, results.get(id(s))) for s in steps
    )


def _resolved(step: Step, result: Fetched | None) -> Locked:
    from preparer.fetch.locator import HttpLocator, ImageLocator, PathLocator  # deferred

    entry, written = step.entry, written_of(step.entry)
    if isinstance(step, Present) or result is None:
        assert isinstance(step, Present)
        return Locked(entry.key, written, step.id, step.version, "builder")
    top = result.top
    locator = step.locator
    source: Source
    if isinstance(locator, HttpLocator):
        return Locked(entry.key, written, top.id, top.version, "http", locator.shown, result.digest)
    if result.image is not None:
        source = "image" if isinstance(locator, ImageLocator) or result.resolved == "image" else "registry"
        return Locked(
            entry.key, written, top.id, top.version, source, result.image, result.digest, result.index
        )
    if isinstance(locator, PathLocator):
        return Locked(entry.key, written, top.id, top.version, "path", None, result.digest)
    return Locked(entry.key, written, top.id, top.version, "inline")


def lock_changes(old: Sequence[Locked] | None, new: Sequence[Locked]) -> tuple[LockChange, ...]:
    """What rewriting the lock changes, entry by entry: the entries of ``new`` that differ (added or changed), in
    its order, then those only ``old`` has (removed)."""
    from preparer.report import LockChange  # deferred: report imports what a run reports

    before = {e.entry: e for e in old or ()}
    found = []
    for e in new:
        was = before.pop(e.entry, None)
        if was is None or describe_locked(was) != describe_locked(e) or was.written != e.written:
            found.append(LockChange(e.entry, was, e))
    found += [LockChange(key, e, None) for key, e in before.items()]
    return tuple(found)


def changes(old: Sequence[Locked] | None, new: Sequence[Locked]) -> list[str]:
    """What rewriting the lock would change, a line per entry: ``entry: old -> new``."""
    return [
        f"{c.entry}: {describe_locked(c.old) if c.old else '(not locked)'} -> "
        f"{describe_locked(c.new) if c.new else '(removed)'}"
        for c in lock_changes(old, new)
    ]


__all__ = [
    "LockState",
    "Locked",
    "changes",
    "check_locked",
    "describe_locked",
    "freeze",
    "lock_changes",
    "locked_failure",
    "resolved",
    "update",
    "updated",
]
