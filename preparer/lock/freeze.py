"""A plan frozen to its lock before anything is fetched (:func:`freeze`), or, for ``-update-lock``, frozen to the
entries an update keeps (:func:`update`): images pulled by the locked digest, http archives held to the locked
digest, registry ids to the locked image, a builder's buildpack to the locked version. An entry that no longer
matches the lock is exit 3, before any request."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, assert_never

from preparer._logger import log
from preparer.errors import InvalidInputsError, LockRefused, with_fields
from preparer.files.locked import Locked, Source
from preparer.files.lockfile import LockState, shown, written_of
from preparer.plan import Fetch, Plan, Present, Step

if TYPE_CHECKING:
    from preparer.fetch.locator import Fetchable
    from preparer.target import Target


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
            raise _stale(
                lock,
                f"it locks {e.entry} ({shown(e.written)}), which the project no longer has",
                entry=e.entry,
            )
    frozen: dict[int, Step] = {}
    for step in plan.steps:
        locked = by_key.get(step.entry.key)
        if locked is None:
            entry = step.entry
            raise _stale(lock, f"{entry.key} ({shown(written_of(entry))}) is not in it", entry=entry.key)
        try:
            frozen[id(step)] = _frozen(step, locked, lock, versions_of)
        except LockRefused as refused:  # each refusal of _frozen is of this entry
            with_fields(refused, entry=step.entry.key)
            raise
    return _with_steps(plan, frozen)


def missing_target(lock: Path, held: str, target: Target) -> InvalidInputsError:
    """The error of a frozen run for a target the lock holds no entries for: an image index resolves to another
    manifest on another platform, so another target's digests are not this build's. Naming the lock's targets,
    the build's, and the way to add it.
    """
    return _stale(
        lock,
        f"it holds entries for {held}, none for this build's target {target.platform} ({target.source}). To add "
        f"them, rerun with -update-lock: {target.platform}'s entries are resolved and added to the lock, "
        f"{held}'s kept as they are",
        "",
    )


def update(
    plan: Plan,
    lock: Path,
    entries: Sequence[Locked] | None,
    names: Sequence[str],
    versions_of: Callable[[str], Sequence[str]],
    also: Sequence[Locked] = (),
    setting: str = "-update-lock",
) -> Plan:
    """``plan`` for ``-update-lock``: the entries the project changed (added, edited; a removed one is dropped)
    and those ``names`` names (a buildpack id or an entry key; ``all``: every one) are resolved again, every other
    is frozen to ``entries`` (this target's; ``None``: none yet, every entry is resolved), as a frozen run is, and
    written back unchanged (:func:`updated`). ``also`` are the other targets' entries: a name may name what they
    resolved to. ``setting`` names what gave ``names`` in messages, as the user wrote it.

    :raises InvalidInputsError: a name that names no entry (exit 3), before any request.
    """
    state = LockState(lock, None if entries is None else tuple(entries), "update")
    if "all" not in names:
        _check_names(plan, lock, (*(entries or ()), *also), names, setting)
    if "all" in names:
        return replace(plan, lock=state)
    if entries is None:  # a target the lock lacks (or one not read): every entry is resolved for it
        return replace(_with_steps(plan, _through_locked_index(plan, lock, also, names)), lock=state)
    by_key = {e.entry: e for e in entries}
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


def _through_locked_index(
    plan: Plan, lock: Path, also: Sequence[Locked], names: Sequence[str]
) -> dict[int, Step]:
    """For a target the lock lacks: each image entry, written as it was locked, that the other targets all locked
    through one image index, pinned to that index, so that every target comes from the same push of the tag (as
    uv keeps the versions it locked when it adds a platform); the index leads this build to its own platform's
    manifest. An entry named (``-update-lock=<id>``) is resolved as written. Nothing else is pinned."""
    from preparer.fetch.locator import ImageLocator  # deferred, as above

    by_key: dict[str, list[Locked]] = {}
    for e in also:
        by_key.setdefault(e.entry, []).append(e)
    pinned: dict[int, Step] = {}
    for step in plan.steps:
        locked = by_key.get(step.entry.key, [])
        if not isinstance(step, Fetch) or not locked or any(_named(step, e, names) for e in locked):
            continue
        written = written_of(step.entry)
        through = {
            f"{e.pinned.rpartition('@')[0]}@{e.index}"
            for e in locked
            if e.index is not None and e.pinned is not None and e.source in ("image", "registry")
            and e.written == written
        }  # fmt: skip
        if len(through) != 1 or len(locked) != sum(1 for e in locked if e.index is not None):
            continue
        [index] = through
        if any(e.source == "image" for e in locked) and not _same_repository(step.locator, index):
            continue
        log.info(
            "Lock: %s is resolved through the image index the lock's other targets locked (%s), so that every "
            "target comes from the same push; -update-lock=%s resolves what it names now",
            step.entry.key, index, step.entry.key,
        )  # fmt: skip
        pinned[id(step)] = Fetch(step.entry, step.locator, ImageLocator(index), lock)
    return pinned


def _named(step: Step, locked: Locked | None, names: Sequence[str]) -> bool:
    """Whether ``names`` names the entry of ``step``: its key, the id written, or the id it resolved to."""
    ids = {step.entry.id, locked.id if locked else None, step.id if isinstance(step, Present) else None}
    return step.entry.key in names or bool(ids.intersection(names))


def _check_names(
    plan: Plan, lock: Path, entries: Sequence[Locked], names: Sequence[str], setting: str
) -> None:
    """:raises InvalidInputsError: ``names`` (``-update-lock=<name>``, or as ``setting`` gave them) holds a name
    that names no entry of the project (exit 3), naming every such name and listing the entries."""
    by_key: dict[str, list[Locked]] = {}
    for e in entries:
        by_key.setdefault(e.entry, []).append(e)

    def named(name: str) -> bool:
        return any(
            _named(step, locked, (name,))
            for step in plan.steps
            for locked in by_key.get(step.entry.key, [None])
        )

    unknown = [name for name in names if not named(name)]
    if not unknown:
        return
    known = ", ".join(
        f"{s.entry.key} ({', '.join(dict.fromkeys(e.id for e in by_key[s.entry.key]))})"
        if s.entry.key in by_key
        else s.entry.key
        for s in plan.steps
    )
    which = (
        f"{setting}={unknown[0]} names no entry of the project"
        if len(unknown) == 1
        else f"{setting}={','.join(unknown)}: none of {', '.join(unknown)} names an entry of the project"
    )
    error = InvalidInputsError(
        f"update lock file {lock}", f"{which}: name a buildpack id or an entry ({known or 'none'}), or all"
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


def _stale(
    lock: Path, why: str, advice: str = ": rerun with -update-lock", *, entry: str | None = None
) -> LockRefused:
    """The refusal of ``lock``, whose ``entry`` (or the lock as a whole) is ``why``."""
    error = LockRefused(f"apply lock file {lock}", f"{why}{advice}")
    return with_fields(error, lock=str(lock), entry=entry)


def _frozen(step: Step, locked: Locked, lock: Path, versions_of: Callable[[str], Sequence[str]]) -> Step:
    """The step frozen to ``locked``: a builder buildpack at the locked version, or a fetch whose ``pinned``
    locator is the locked source (the policy still decides on the written ``locator``)."""
    from preparer.fetch import locator as locators  # deferred, as in plan.py

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
    locator = step.locator if isinstance(step, Fetch) else locators.IdLocator(step.id)
    if locked.source in ("image", "registry"):
        assert locked.pinned is not None
        if locked.source == "image" and not _same_repository(locator, locked.pinned):
            raise _stale(lock, f"{entry.key} locks {locked.pinned}, which is not the image it names")
        # Through the locked index when there is one: its digest is signed as often as the manifest's (``cosign
        # sign <multi-arch tag>``), and the manifest it leads to must be the locked one (check_locked).
        frozen = (
            locked.pinned if locked.index is None else f"{locked.pinned.rpartition('@')[0]}@{locked.index}"
        )
        return Fetch(entry, locator, locators.ImageLocator(frozen), lock)
    if locked.source == "http":
        assert locked.pinned is not None and locked.digest is not None
        match locator:
            case locators.HttpLocator() if locator.shown == locked.pinned:
                pinned = locators.HttpLocator(locator.url, locked.digest.removeprefix("sha256:"))
                return Fetch(entry, locator, pinned, lock)
            case (
                locators.HttpLocator()
                | locators.PathLocator()
                | locators.ImageLocator()
                | locators.RegistryLocator()
                | locators.IdLocator()
                | locators.InlineLocator()
            ):
                raise _stale(lock, f"{entry.key} locks {locked.pinned}, which is not the URL it names")
            case _ as never:
                assert_never(never)
    # Path and inline: what is written is what is fetched; a local archive's digest is checked after.
    return step


def _sources(step: Step) -> tuple[Source, ...]:
    """The sources an entry may have resolved to."""
    from preparer.fetch import locator as locators  # deferred, as above

    if isinstance(step, Present):
        return ("builder", "registry", "image") if step.resolved == "installed" else ("builder",)
    match step.locator:
        case locators.IdLocator():
            return ("builder", "registry", "image")
        case locators.HttpLocator():
            return ("http",)
        case locators.ImageLocator():
            return ("image",)
        case locators.RegistryLocator():
            return ("registry",)
        case locators.PathLocator():
            return ("path",)
        case locators.InlineLocator():
            return ("inline",)
        case _ as never:
            assert_never(never)


def _same_repository(locator: Fetchable, pinned: str) -> bool:
    """Whether ``pinned`` is in the repository the written image reference (or bare id) names."""
    from preparer.fetch import locator as locators  # deferred, as above
    from preparer.fetch.oci.reference import parse_reference

    match locator:
        case locators.ImageLocator():
            written = parse_reference(locator.reference)
        case locators.IdLocator():
            written = parse_reference(locator.id)
        case (
            locators.PathLocator()
            | locators.HttpLocator()
            | locators.RegistryLocator()
            | locators.InlineLocator()
        ):
            return False
        case _ as never:
            assert_never(never)
    locked = parse_reference(pinned)
    return (written.registry, written.repository) == (locked.registry, locked.repository)
