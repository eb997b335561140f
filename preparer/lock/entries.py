"""What the lock a run writes holds: each entry as it resolved in the run (or as an update keeps it), and what
rewriting the lock changes, entry by entry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, assert_never

from preparer.files.locked import Locked, Source, describe_locked
from preparer.files.lockfile import LockState, written_of
from preparer.plan import Present, Step

if TYPE_CHECKING:
    from preparer.fetch.base import Fetched
    from preparer.report import LockChange


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
    from preparer.fetch import locator as locators  # deferred

    entry, written = step.entry, written_of(step.entry)
    if isinstance(step, Present) or result is None:
        assert isinstance(step, Present)
        return Locked(entry.key, written, step.id, step.version, "builder")
    top = result.top
    locator = step.locator
    source: Source
    match locator:
        case locators.HttpLocator():
            return Locked(entry.key, written, top.id, top.version, "http", locator.shown, result.digest)
        case (
            locators.ImageLocator() | locators.RegistryLocator() | locators.IdLocator()
        ):  # pulled as an image: locked by its digest
            source = (
                "image"
                if isinstance(locator, locators.ImageLocator) or result.resolved == "image"
                else "registry"
            )
            return Locked(
                entry.key, written, top.id, top.version, source, result.image, result.digest, result.index
            )
        case locators.PathLocator():
            return Locked(entry.key, written, top.id, top.version, "path", None, result.digest)
        case locators.InlineLocator():
            return Locked(entry.key, written, top.id, top.version, "inline")
        case _ as never:
            assert_never(never)


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
