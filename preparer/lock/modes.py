"""The lock's modes, and its only entry from the top: which lock a run has (``-lock``, ``Inputs.lock_data``, or
``<app>/preparer.lock`` when one is required) and what the run does with it, decided here once and asked at each
step:

- **frozen**: the lock exists (and ``-update-lock`` is not given). The plan is frozen to it (:func:`with_lock`),
  what is fetched is checked against it (:func:`check_locked`), and it is not written;
- **update** (``-update-lock``): the entries the project changed, and those named, are resolved again, the others
  frozen as they were locked; the lock is rewritten with the commit (:func:`committed_lock`);
- **write**: there is none yet; the run resolves as usual and writes it with the commit;
- **unused**: no ``-lock``, and a file at the documented place, which the run says it does not use
  (:func:`unused_lock`).

A dry run writes no lock; it says which it is frozen to, or, updating, what the update would change
(:func:`dry_lock`). Freezing is :mod:`preparer.lock.freeze`'s, the checks :mod:`preparer.lock.checks`', what the lock
written holds :mod:`preparer.lock.entries`'; each is imported only by a run with a lock.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from preparer._logger import log
from preparer.errors import FetchError, InvalidInputsError, PreparerError, with_fields
from preparer.files.buildpack import installed_versions
from preparer.inputs import Inputs
from preparer.plan import Fetch, Plan, Step
from preparer.report import LockRecord

if TYPE_CHECKING:
    from preparer.fetch.base import Fetched
    from preparer.files.locked import Locked
    from preparer.files.lockfile import LockFile, LockState

# Planning


def lock_path(inputs: Inputs) -> Path | None:
    """The lock file the run reads or writes: ``-lock``, else, when a lock is required, ``<app>/preparer.lock``;
    ``None`` without one, or with a lock given as bytes (``Inputs.lock_data``: none on disk)."""
    if inputs.lock is not None:
        return inputs.lock
    if inputs.lock_data is not None or not inputs.require_lock:
        return None
    from preparer.files.lockfile import DEFAULT_LOCK_NAME  # deferred: only runs with a lock read one

    return inputs.app_dir / DEFAULT_LOCK_NAME


def unused_lock(inputs: Inputs) -> str | None:
    """The warning for a lock at the documented place that this run does not use (no ``-lock``), or ``None``. A
    run given its lock as bytes (``Inputs.lock_data``) uses that one: it says nothing of a file."""
    if inputs.lock is not None or inputs.lock_data is not None or inputs.require_lock:
        return None
    unused = inputs.app_dir / "preparer.lock"  # lockfile.DEFAULT_LOCK_NAME, without importing the module
    if not unused.is_file():
        return None
    return (
        f"{unused} is not used: this run is not frozen to it, since -lock is not given; to install what it "
        f"locks, add -lock {unused} (CNB_PREPARER_LOCK)"
    )


def _no_lock(path: Path, in_memory: bool) -> InvalidInputsError:
    """The error of a run that requires a lock (``-require-lock``) and has none: no file at ``path``, or an
    empty ``Inputs.lock_data``."""
    if in_memory:
        error = InvalidInputsError(
            "apply lock",
            "Inputs.lock_data is empty (no lock yet), and the platform requires a lock (Inputs.require_lock): "
            "nothing is resolved without one. Make it with a run without require_lock (Report.lock.data) and "
            "keep it",
        )
        return with_fields(error, field="lock_data")
    error = InvalidInputsError(
        "apply lock file",
        f"{path} does not exist, and the platform requires a lock (-require-lock, CNB_PREPARER_REQUIRE_LOCK): "
        f"nothing is resolved without one. Write it with a run of your own (-lock {path}, without "
        "-require-lock) and commit it with the app",
    )
    return with_fields(error, field="lock")


def with_lock(plan: Plan, inputs: Inputs) -> Plan:
    """``plan`` with the run's lock, when it has one: frozen to it when the file exists (and ``-update-lock`` is not
    given), else with the lock to write after the run (and, to update, what it locked before and the entries it
    keeps). A lock given as bytes (``Inputs.lock_data``) is read the same way; ``b""`` is one not made yet.

    :raises InvalidInputsError: a required lock that is missing, an entry that no longer matches it (exit 3).
    """
    if inputs.lock is None and inputs.lock_data is None and not inputs.require_lock:
        return plan
    from preparer.files.lockfile import LOCK_DATA_NAME, LockState, parse_lock, read_lock  # deferred, as below
    from preparer.lock.freeze import freeze, missing_target  # (only runs with a lock read one)

    in_memory = inputs.lock_data is not None
    data = inputs.lock_data
    path = LOCK_DATA_NAME if in_memory else lock_path(inputs)
    assert path is not None
    if (not data) if in_memory else not path.exists():
        if inputs.require_lock:
            raise _no_lock(path, in_memory)
        mode: Literal["update", "write"] = "update" if inputs.update_lock else "write"
        return replace(plan, lock=LockState(path, None, mode, in_memory))

    def read() -> LockFile:
        return parse_lock(data, str(path)) if data is not None else read_lock(path)

    def versions_of(bp_id: str) -> list[str]:
        return installed_versions(inputs.buildpacks_dir, bp_id)

    if inputs.update_lock:
        names = inputs.update_lock_names
        return _updating(plan, path, read, (names, _names_setting(inputs)), versions_of, in_memory, data)
    lock_file = read()
    platform = plan.target.platform if plan.target is not None else None
    own = lock_file.of(platform)
    if own is None:
        assert plan.target is not None
        raise missing_target(path, lock_file.platforms, plan.target)
    frozen = freeze(plan, path, own.entries, versions_of)
    log.info("Frozen to the lock file %s (%d entries)", path, len(own.entries))
    state = LockState(
        path, own.entries, "frozen", in_memory, data, target=own.target, others=lock_file.besides(platform)
    )
    return replace(frozen, lock=_made_in(state, lock_file.exec_env, inputs.exec_env))


def _made_in(state: LockState, made_in: str | None, exec_env: str) -> LockState:
    """``state`` with the execution environment its lock was made with. A frozen run in another one is the same
    build's: what is locked (the buildpacks and their bytes) does not depend on it, only which of them the detector
    skips (docs/decisions.md), so it is said, not refused."""
    path = state.path
    if made_in is not None and made_in != exec_env:
        log.info(
            "The lock file %s was made with exec-env %s; this build's is %s (CNB_EXEC_ENV): the same buildpacks "
            "are installed, and the detector skips those that do not run in %s", path, made_in, exec_env, exec_env,
        )  # fmt: skip
    return replace(state, exec_env=made_in)


def _names_setting(inputs: Inputs) -> str:
    """What gave ``-update-lock``'s names, for messages: ``CNB_PREPARER_UPDATE_LOCK`` when they are the
    variable's (a flag that gives them overrides it), else the flag."""
    from preparer.flags import env_of  # deferred: only an update names its entries

    env = env_of("update-lock")
    given = tuple(n.strip() for n in inputs.environ.get(env, "").split(",") if n.strip())
    return env if given and given == inputs.update_lock_names else "-update-lock"


def _updating(
    plan: Plan,
    path: Path,
    read: Callable[[], LockFile],
    named: tuple[tuple[str, ...], str],
    versions_of: Callable[[str], Sequence[str]],
    in_memory: bool,
    data: bytes | None,
) -> Plan:
    """``plan`` for ``-update-lock`` (``named``: the names it moves, and the setting that gave them): this target's
    entries updated (:func:`preparer.lock.freeze.update`), every other target's kept as they are. A lock that cannot be read is rewritten, every entry resolved again."""
    from preparer.files.lockfile import NewerLockError  # deferred, as in with_lock
    from preparer.lock.freeze import update

    try:
        read_before: LockFile | None = read()
    except NewerLockError:
        raise  # never rewritten in the old format
    except PreparerError as err:  # rewritten anyway: every entry is resolved again
        log.warning("the lock file %s is rewritten, every entry resolved again: %s", path, err.cause)
        read_before = None
    platform = plan.target.platform if plan.target is not None else None
    own = read_before.of(platform) if read_before is not None else None
    others = read_before.besides(platform) if read_before is not None else ()
    if read_before is not None and own is None:
        log.info(
            "The lock file %s has no entries for %s (%s; it holds %s): this target's entries are resolved and "
            "added, the others kept",
            path, platform, plan.target.source if plan.target else "", read_before.platforms,
        )  # fmt: skip
    before = own.entries if own is not None else None
    also = tuple(e for t in others for e in t.entries)
    names, setting = named
    updating = update(plan, path, before, names, versions_of, also, setting)
    if updating.lock is not None:
        state = replace(updating.lock, in_memory=in_memory, data=data, others=others)
        updating = replace(updating, lock=state)
    if before is not None and updating.lock is not None:
        log.info(
            "Updating the lock file %s: %d entries kept as locked, %d resolved again",
            path, len(updating.lock.kept), len(plan.steps) - len(updating.lock.kept),
        )  # fmt: skip
    return updating


# After fetching


def check_locked(steps: Sequence[Fetch], fetched: Sequence[Fetched], state: LockState) -> None:
    """What a frozen run (or the entries an update keeps) fetched is what the lock says: the same digest, id and
    version. A lock to write holds nothing yet to check.

    :raises LockMismatch: naming the lock, the entry, both digests (or both buildpacks) and the ways out (exit 1).
    """
    if state.entries is None or state.mode == "write":
        return
    from preparer.lock.checks import check_held  # deferred: only runs with a lock

    held = {e.entry: e for e in state.entries if state.mode == "frozen" or e.entry in state.kept}
    check_held(steps, fetched, state.path, held)


def fetch_failure(step: Fetch, error: FetchError) -> FetchError:
    """``error`` from fetching a step the lock pins, said as the lock's decision when the lock decided it
    (:func:`preparer.lock.checks.locked_failure`); other errors as they are."""
    from preparer.lock.checks import locked_failure  # deferred: only frozen runs fetch what a lock pins

    return locked_failure(step, error)


def written_entries(
    state: LockState | None, steps: Sequence[Step], results: Mapping[int, Fetched]
) -> tuple[Locked, ...]:
    """The entries of the lock a run writes: those an update keeps exactly as they were locked, the others as they
    resolved in this run (``results``, by the ``id`` of their step)."""
    from preparer.lock.entries import updated  # deferred: only runs with a lock

    return updated(state, steps, results)


# The commit, and a dry run


def committed_lock(plan: Plan, results: Mapping[int, Fetched]) -> tuple[Path | None, LockRecord | None]:
    """The lock file the commit writes (``None``: none, as for a frozen run or a lock given as bytes) and the run's
    lock as the report has it; the lines an update changes are logged. Its bytes are the record's ``data``."""
    state = plan.lock
    if state is None:
        return None, None
    if state.mode == "frozen":
        return None, _frozen(state)
    from preparer.lock.entries import changes  # deferred: only runs with a lock

    entries = written_entries(state, plan.steps, results)
    for line in changes(state.entries, entries) if state.mode == "update" else ():
        log.info("Lock: %s", line)
    return (None if state.in_memory else state.path), _rewritten(plan, state, entries, "written")


def dry_lock(plan: Plan, resolve: Callable[[], tuple[Locked, ...]]) -> LockRecord | None:
    """A dry run's lock: the one it is frozen to; with ``-update-lock``, the entries ``resolve()`` gives (the ones
    it moves resolved again, into staging and the download cache, as a run fetches), and what the lock would change
    said, a line per entry, and returned; nothing else is written. A lock that would be written for the first time
    is not resolved."""
    state = plan.lock
    if state is None:
        return None
    if state.mode == "frozen":
        return _frozen(state)
    if state.mode != "update":
        return LockRecord(_shown(state), "not written")
    from preparer.lock.entries import changes  # deferred: only runs with a lock

    entries = resolve()
    lines = changes(state.entries, entries)
    log.info("The lock file %s would %s", state.path, "change:" if lines else "not change")
    for line in lines:
        log.info("  lock: %s", line)
    return _rewritten(plan, state, entries, "would write")


def _shown(state: LockState) -> str | None:
    """The lock's path as the report shows it: ``None`` for a lock given as bytes."""
    return None if state.in_memory else str(state.path)


def _frozen(state: LockState) -> LockRecord:
    """The record of the lock a run is frozen to: its bytes as given, else as its entries are written."""
    from preparer.files.lockfile import dumps_lock  # deferred: only runs with a lock

    assert state.entries is not None
    return LockRecord(
        _shown(state),
        "frozen",
        state.data or dumps_lock(state.entries, state.target, state.others, state.exec_env),
    )


def _rewritten(
    plan: Plan, state: LockState, entries: Sequence[Locked], action: Literal["written", "would write"]
) -> LockRecord:
    """The record of the lock ``entries`` make, for the plan's target, and what it changes of ``state``'s."""
    from preparer.files.lockfile import dumps_lock  # deferred: only runs with a lock
    from preparer.lock.entries import lock_changes

    made_for = plan.target.platform if plan.target is not None else None
    detection = plan.detection  # the exec-env decides what runs from Platform API 0.15: recorded there
    made_in = detection.exec_env if detection is not None and detection.applies else None
    return LockRecord(
        _shown(state),
        action,
        dumps_lock(entries, made_for, state.others, made_in),
        lock_changes(state.entries, entries),
    )
