"""The prepare phase as functions: inputs → descriptor → effective config → plan → apply → report.

:func:`plan_run` reads and checks everything and returns the :class:`~preparer.plan.Plan` (nothing is fetched or
written); :func:`run_plan` carries a plan out; :func:`prepare` does both, as the command does.
"""

from __future__ import annotations

import contextvars
import functools
import os
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypeVar

from preparer import interrupt
from preparer._fs import full_disk, no_space, read_regular
from preparer._logger import CallerFailed, log, named_run
from preparer.appfilter import Removal, plan_removal
from preparer.apply import Outcome, apply_plan, check_present
from preparer.config import EffectiveConfig, effective_config, platform_layers
from preparer.descriptor import ProjectDescriptor, load_descriptor
from preparer.errors import (
    Cancelled,
    InvalidInputsError,
    NoSpaceError,
    PreparerError,
    UnexpectedError,
    with_fields,
)
from preparer.files.buildpack import installed_versions, similar_installed
from preparer.files.order import Order, read_order
from preparer.files.toml import dumps_toml, read_toml
from preparer.inputs import Inputs
from preparer.interrupt import Cancel, Interrupted
from preparer.metadata import MetadataWrite, describe_metadata, plan_metadata
from preparer.plan import Fetch, NotInstalled, Plan, Present, Step, make_plan
from preparer.report import (
    EnvRecord,
    LockRecord,
    MetadataRecord,
    Report,
    report_to_toml,
    unapplied_message,
    write_report,
)
from preparer.target import (
    Target,
    build_target,
    describe_runs_on,
    directory_files,
    host_platform,
    platform_source,
)

if TYPE_CHECKING:
    from preparer.files.lockfile import LockFile
    from preparer.policy.rules import Policy
    from preparer.progress import Download, ProgressCallback


P = ParamSpec("P")
R = TypeVar("R")


class TypeError_(TypeError):
    """An argument of the wrong type given to an entry point."""


def callers(progress: ProgressCallback | None) -> ProgressCallback | None:
    """``progress`` as the run calls it: one event at a time, and whatever it raises is the caller's
    (:class:`CallerFailed`)."""
    if progress is None:
        return None
    callback, lock = progress, threading.Lock()

    def called(event: Download) -> None:
        with lock:  # the run's fetch threads report at once: the callback is entered by one at a time
            try:
                callback(event)
            except Exception as err:
                raise CallerFailed(err) from err

    return called


def _check_arguments(
    inputs: object, plan: object = None, cancel: object = None, deadline: object = None, run_id: object = None
) -> None:
    """:raises TypeError: an argument that is not what the function takes (the caller's mistake, not a run's)."""
    if not isinstance(inputs, Inputs) and inputs is not None:
        raise TypeError_(f"expected preparer.Inputs, got {type(inputs).__name__}: build one with Inputs(...)")
    if plan is not None and not isinstance(plan, Plan):
        raise TypeError_(f"expected a preparer.Plan (from plan_run), got {type(plan).__name__}")
    if cancel is not None and not isinstance(cancel, Cancel):
        raise TypeError_(f"cancel= takes a preparer.Cancel, not {type(cancel).__name__}")
    if deadline is not None and (not isinstance(deadline, int | float) or isinstance(deadline, bool)):
        raise TypeError_(f"deadline= takes a number of seconds, not {type(deadline).__name__}")
    if run_id is not None and not isinstance(run_id, str):
        raise TypeError_(f"run_id= takes a str, not {type(run_id).__name__}")


def typed(function: Callable[P, R]) -> Callable[P, R]:
    """The library's promise for ``function``: every error it raises is a :class:`PreparerError` (one it did not
    foresee becomes :class:`UnexpectedError`, exit 1, naming the original), except the caller's own: an argument
    of the wrong type is a :class:`TypeError` before anything runs, and what a callback raises comes back as
    itself."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        # A Ctrl-C held during the commit reaches the caller's SIGINT handler once the call is over; what that
        # handler raises is the caller's own, and carries the report (committed_report).
        return interrupt.until_returned(functools.partial(checked, *args, **kwargs))

    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        token = _entered.set(_entered.get() + 1)
        try:
            return function(*args, **kwargs)
        except (PreparerError, TypeError_):
            raise
        except CallerFailed as failed:
            if (
                _entered.get() > 1
            ):  # inside another entry point (prepare calls run_plan): the outer one says it
                raise
            raise failed.error from None
        except interrupt.Interrupted as stopped:  # a signal, or interrupt.stop(): an ordinary error out here
            raise Cancelled.by_signal(stopped.signum) from None
        except interrupt.Stopped as stopped:  # the run's handle, or its deadline
            raise stopped.error from None
        except Exception as err:
            full = full_disk(err)
            if full is not None:  # a write that no edge named: its file's directory is
                where = str(Path(full.filename).parent) if isinstance(full.filename, str) else None
                cause = no_space(full, "the directory", where) if where else "no space left on device"
                raise with_fields(NoSpaceError("prepare", cause), directory=where) from err
            raise UnexpectedError(
                "prepare", f"an error the preparer does not foresee ({err or 'no words'})"
            ) from err
        finally:
            _entered.reset(token)

    return wrapper


def committed_report(error: BaseException) -> Report | None:
    """The report of a run that was complete when ``error`` was raised by the caller's own SIGINT handler (Python's
    :class:`KeyboardInterrupt`, or one installed with :func:`signal.signal`), given a Ctrl-C that came during the
    commit and was held until :func:`prepare` or :func:`run_plan` was done: the outputs are written, as the report
    says. ``None`` for any other error: the run failed, and nothing changed."""
    found = getattr(error, interrupt.RESULT_ATTRIBUTE, None)
    return found if isinstance(found, Report) else None


#: How deep the current thread is in the entry points (:func:`typed`).
_entered: contextvars.ContextVar[int] = contextvars.ContextVar("preparer_entered", default=0)


@typed
def prepare(
    inputs: Inputs,
    *,
    progress: ProgressCallback | None = None,
    cancel: Cancel | None = None,
    deadline: float | None = None,
    run_id: str | None = None,
) -> Report:
    """Apply the project descriptor to the build's directories, as the prepare phase does.

    Progress and warnings are logged to the ``preparer`` logger; the report holds them too. When
    ``inputs.prepare_report`` is set, the report (or, on failure, the error) is written there. With
    ``inputs.dry_run``, the plan is logged and nothing is fetched, written or removed.

    :param progress: given every download's events (:class:`preparer.progress.Download`: started, progress,
        finished, failed, cached), one call at a time, from the run's fetch threads.
    :param cancel: a handle that stops this run alone (:class:`preparer.interrupt.Cancel`).
    :param deadline: seconds this run may take in all, planning included.
    :param run_id: set as ``run_id`` on every log record of the run (a new id when left out).
    :raises PreparerError: with the exit code the command uses; nothing has changed on disk then.
    :raises preparer.errors.Cancelled: the run was stopped (its handle, its deadline, SIGINT, SIGTERM, or
        :func:`preparer.interrupt.stop`); see :func:`preparer.apply.apply_plan`.
    """
    _check_arguments(inputs, None, cancel, deadline, run_id)
    if progress is not None and not callable(progress):
        raise TypeError_(f"progress= takes a callable, not {type(progress).__name__}")
    with interrupt.run(cancel, deadline), named_run(run_id):
        return _prepare(inputs, callers(progress))


def _prepare(inputs: Inputs, progress: ProgressCallback | None) -> Report:
    try:
        plan = plan_run(inputs)
        if inputs.dry_run:
            updating = plan.lock is not None and plan.lock.mode == "update"
            if updating:
                log.info(
                    "Dry run: nothing is installed, written or removed; -update-lock fetches the entries it "
                    "resolves again (into a temporary directory and the download cache), to say what would change"
                )
            else:
                log.info("Dry run: nothing is fetched, written or removed")
            for line in describe_plan(plan, inputs):
                log.info("%s", line)
            report = replace(_report(plan, inputs), lock=_dry_lock(plan, inputs, progress))
        else:  # the report is written with the commit: a disk too full for it undoes the run
            return _applied(plan, inputs, progress, inputs.prepare_report)
    except (PreparerError, Interrupted, interrupt.Stopped) as err:
        error = err.error if isinstance(err, interrupt.Stopped) else err
        report_path = inputs.prepare_report
        if (
            report_path is not None
            and _unwritable(report_path) is None
            and _clash(inputs, "-prepare-report") is None
        ):
            try:
                error_of = (int(getattr(error, "exit_code", 1)), str(error))
                write_report(report_path, error=error_of, places=inputs.build_dirs)
            except PreparerError as unwritten:  # the run's own error is the one to tell (a full disk, often)
                if unwritten.message != getattr(error, "message", None):
                    log.warning("the failed run's report was not written: %s", unwritten.message)
        raise
    if inputs.prepare_report is not None:
        write_report(inputs.prepare_report, report, places=inputs.build_dirs)
    return report


def _dry_lock(plan: Plan, inputs: Inputs, progress: ProgressCallback | None) -> LockRecord | None:
    """A dry run's lock: the one it is frozen to; with ``-update-lock``, the entries it moves resolved again (into
    staging and the download cache, as a run fetches), and what the lock would change said, a line per entry, and
    returned; nothing else is written. A lock that would be written for the first time is not resolved."""
    state = plan.lock
    if state is None:
        return None
    from preparer.files.lockfile import dumps_lock  # deferred: only runs with a lock
    from preparer.lock import changes, lock_changes

    shown = None if state.in_memory else str(state.path)
    if state.mode == "frozen":
        assert state.entries is not None
        return LockRecord(shown, "frozen", state.data or dumps_lock(state.entries, state.target))
    if state.mode != "update":
        return LockRecord(shown, "not written")
    from preparer.apply import resolve_plan  # deferred: a dry run fetches only to update a lock

    for step in plan.steps:
        if step.entry.key not in state.kept and not isinstance(step, Present):
            log.info("Fetching %s (%s) to resolve it again", step.entry.key, source_of(step))
    entries = resolve_plan(plan, inputs, progress)
    lines = changes(state.entries, entries)
    log.info("The lock file %s would %s", state.path, "change:" if lines else "not change")
    for line in lines:
        log.info("  lock: %s", line)
    made_for = plan.target.platform if plan.target is not None else None
    return LockRecord(
        shown, "would write", dumps_lock(entries, made_for), lock_changes(state.entries, entries)
    )


def target_of(inputs: Inputs) -> Target:
    """The build's target for ``inputs`` (:func:`preparer.target.build_target`): the ``CNB_TARGET_*`` variables,
    else ``<layers>/analyzed.toml``, else ``CNB_PREPARER_PLATFORM`` or the host's.

    :raises InvalidInputsError: analyzed.toml cannot be read, or a target is invalid (exit 3).
    """
    source = platform_source(inputs.target_platform, inputs.environ, host_platform())
    return build_target(inputs.target, inputs.target_platform, source, inputs.layers_dir, inputs.os_release)


def _check_app_dir(app_dir: Path) -> None:
    """The app directory exists and is one: an ``-app`` mistyped must not pass for an app with nothing to apply.

    :raises InvalidInputsError: naming the flag and the path (exit 3).
    """
    if not app_dir.exists():
        raise InvalidInputsError("resolve inputs", f"the app directory (-app) {app_dir} does not exist")
    if not app_dir.is_dir():
        raise InvalidInputsError("resolve inputs", f"the app directory (-app) {app_dir} is not a directory")


def read_inputs(inputs: Inputs) -> tuple[ProjectDescriptor, EffectiveConfig, list[str]]:
    """Load the descriptor and the platform file and compute the effective configuration.

    :returns: the descriptor, the effective configuration, and every warning in the order found.
    :raises InvalidInputsError: unreadable or invalid files, or an app directory that is not one (exit 3).
    """
    _check_app_dir(inputs.app_dir)
    descriptor = load_descriptor(
        inputs.descriptor_path,
        explicit=inputs.project_descriptor is not None,
        platform_namespace=inputs.platform_namespace,
    )
    platform_file = None
    if inputs.platform_config is not None:
        platform_file = read_toml(inputs.platform_config, "platform config")
    patches, platform_warnings = platform_layers(descriptor, inputs.platform_namespace, platform_file)
    base_dir = descriptor.path.parent if descriptor.path else inputs.app_dir  # as the plan resolves paths
    config = effective_config(descriptor, patches, inputs.exec_env, base_dir=base_dir, exists=os.path.exists)
    warnings = [
        *config.warnings[: len(descriptor.warnings)],
        *platform_warnings,
        *config.warnings[len(descriptor.warnings) :],
        *(unapplied_message(u) for u in config.unapplied),
    ]
    return descriptor, config, warnings


@typed
def _check_removal(removal: Removal, key: str, descriptor: Path | None) -> list[str]:
    """What include/exclude would do that is likely a mistake: an include pattern that matches nothing is a warning;
    removing every file of the app but the descriptor is refused before anything is removed.

    :raises InvalidInputsError: it would leave the app with nothing but its descriptor (exit 3).
    """
    if removal.files and not removal.keeps_any:
        but = f" but {descriptor.name}" if descriptor is not None else ""
        raise InvalidInputsError(
            f"validate {descriptor or key}",
            f"{key} would remove every file of the app{but} ({len(removal.files)} files): check its patterns",
        )
    found = [f"{key}: '{pattern}' matches no file of the app" for pattern in removal.unmatched]
    for warning in found:
        log.warning("%s", warning)
    return found


def _make_plan(
    inputs: Inputs, config: EffectiveConfig, descriptor: ProjectDescriptor, removal: Removal | None,
    warnings: list[str],
) -> Plan:  # fmt: skip
    try:
        return make_plan(
            config,
            base_dir=descriptor.path.parent if descriptor.path else inputs.app_dir,
            buildpacks_dir=inputs.buildpacks_dir,
            versions_of=lambda bp_id: installed_versions(inputs.buildpacks_dir, bp_id),
            builder_order=_builder_order(config, inputs.order_path),
            existing_env=_existing_env(inputs.platform_dir),
            removal=removal,
            warnings=warnings,
            descriptor_path=descriptor.path,
            schema_version=descriptor.schema_version,
        )
    except (
        NotInstalled
    ) as err:  # a typo of an installed id, perhaps (plan.py reads no disk: it is looked for here)
        meant = similar_installed(inputs.buildpacks_dir, err.bp_id)
        if meant is None:
            raise
        raise NotInstalled(err.action, f"{err.cause}; did you mean '{meant}'?", err.bp_id) from None


@typed
def plan_run(
    inputs: Inputs, *, cancel: Cancel | None = None, deadline: float | None = None, run_id: str | None = None
) -> Plan:
    """Read the descriptor and the platform file, and plan everything the run would do; change nothing.

    Everything that can be decided without the network is decided here: the descriptor, every entry's form, path,
    id and version, the Buildpack API of buildpacks already in ``<buildpacks>``, what include/exclude removes.

    :param cancel: a handle that stops this planning (:class:`preparer.interrupt.Cancel`).
    :param deadline: seconds it may take.
    :param run_id: set as ``run_id`` on every log record (a new id when left out).
    :raises PreparerError: invalid inputs (exit 3), missing buildpacks or paths (exit 1), an unsupported Buildpack
        API (exit 12); :class:`~preparer.errors.Cancelled` when it was stopped.
    """
    _check_arguments(inputs, None, cancel, deadline, run_id)
    with interrupt.run(cancel, deadline), named_run(run_id):
        return _plan_run(inputs)


def _plan_run(inputs: Inputs) -> Plan:
    interrupt.check()  # a handle set before the run began
    # Before they are read, so that a change while planning is seen when the plan runs; only for a plan handed to
    # the caller (prepare's own runs a moment later, in the same call, and is not checked again).
    # A provenance gives the sha256 of the files as the plan read them.
    handed_out = _entered.get() <= 1
    made_from = _fingerprints(inputs) if handed_out or inputs.provenance is not None else ()
    descriptor, config, warnings = read_inputs(inputs)
    target = target_of(inputs)
    log.debug("The build's target: %s (%s)", target.platform, target.source)
    interrupt.check()
    if descriptor.path is None:
        log.info("No project descriptor at %s; nothing to apply", inputs.descriptor_path)
    else:
        log.info("Project descriptor %s (schema version %s)", descriptor.path, descriptor.schema_version)
    for warning in warnings:
        log.warning("%s", warning)
    for note in config.notes:
        log.debug("%s", note)
    # Before anything in <app> changes: excluding .git must not lose what it says.
    metadata, metadata_warnings = plan_metadata(descriptor, inputs.app_dir, inputs.project_metadata_path)
    interrupt.check()
    unused = _unused_lock(inputs)
    if unused is not None:
        metadata_warnings.append(unused)
    for warning in metadata_warnings:
        log.warning("%s", warning)
    warnings += metadata_warnings
    removal = None
    if config.include is not None or config.exclude is not None:
        keep = (descriptor.path, lock_path(inputs))  # as buildpacks read the one, the run reads the other
        removal = plan_removal(inputs.app_dir, config.include, config.exclude, *keep)
        interrupt.check()
    plan = replace(
        _make_plan(inputs, config, descriptor, removal, warnings), project_metadata=metadata, target=target
    )
    for warning in plan.warnings[len(warnings) :]:
        log.warning("%s", warning)
    for step in plan.steps:
        if isinstance(step, Present) and step.resolved:
            log.debug(
                "%s: %s is installed in %s: using %s@%s, no request made",
                step.entry.key, step.entry.uri, inputs.buildpacks_dir, step.id, step.version,
            )  # fmt: skip
    plan = replace(_platform_decisions(plan, inputs, config.filter_key), inputs=inputs, made_from=made_from)
    if handed_out or inputs.dry_run:  # a plan someone sees: what it downloads, and how large
        from preparer.downloads import plan_downloads  # deferred: only plans handed out or shown are measured

        plan = replace(plan, downloads=plan_downloads(plan, inputs, probe=not inputs.dry_run))
    return plan


def _fingerprints(inputs: Inputs) -> tuple[tuple[str, str | None], ...]:
    """The SHA-256 of each file a plan is made from (``None``: it does not exist, or is not a file)."""
    import hashlib  # deferred: only plans are fingerprinted

    paths = (
        inputs.descriptor_path,
        inputs.platform_config,
        inputs.policy,
        lock_path(inputs),
        inputs.order_path,
    )
    found = []
    for path in paths:
        if path is None:
            continue
        try:  # read as every input file is: a FIFO or a device is refused, never waited on or read forever
            digest: str | None = hashlib.sha256(read_regular(path, FINGERPRINTED_BYTES)).hexdigest()
        except (OSError, ValueError):
            digest = None  # what reads it says why, in the run
        found.append((str(path), digest))
    return tuple(found)


#: A file a plan is made from is fingerprinted up to this size (each has its own, smaller bound where it is read).
FINGERPRINTED_BYTES = 16 << 20


def _check_not_stale(plan: Plan, inputs: Inputs) -> None:
    """``plan`` still says what its files say: none of them changed since :func:`plan_run` read them, and
    include/exclude selects the same files of the app. A saved plan is refused otherwise, as ``terraform apply``
    refuses a stale one: carrying out what the files no longer say would surprise.

    :raises InvalidInputsError: naming what changed (exit 3); nothing has changed on disk.
    """
    if plan.inputs is None:
        return
    changed = [path for (path, digest), (_, now) in zip(plan.made_from, _fingerprints(inputs), strict=False)
               if digest != now]  # fmt: skip
    if not changed and plan.removal is not None:
        config = plan.config
        keep = (plan.descriptor_path, lock_path(inputs))  # as _plan_run keeps them
        now_removed = plan_removal(inputs.app_dir, config.include, config.exclude, *keep)
        if (now_removed.files, now_removed.dirs) != (plan.removal.files, plan.removal.dirs):
            changed.append(f"the files of {inputs.app_dir} that {config.filter_key} selects")
    if changed:
        raise InvalidInputsError(
            "run the plan", f"{', '.join(changed)} changed since it was made: make a new plan with plan_run"
        )


def _platform_decisions(plan: Plan, inputs: Inputs, filter_key: str) -> Plan:
    """``plan`` as the platform lets it run: its policy's decisions, include/exclude's checks on what it still
    removes, its registry mirrors, and the Buildpack API of what the builder has."""
    if inputs.policy is not None or inputs.policy_data is not None:
        from preparer.policy.enforce import enforce  # deferred: only runs with a policy need it

        plan = enforce(plan, _policy(inputs), inputs.download_cache)
    if plan.removal is not None:  # what the policy lets apply
        found = _check_removal(plan.removal, filter_key, plan.descriptor_path)
        plan = replace(plan, warnings=(*plan.warnings, *found))
    if inputs.registry_hosts_dir is not None:
        from preparer.fetch.oci.hosts import load_hosts_dir  # deferred: only runs with mirrors read them

        plan = replace(plan, registry_hosts=load_hosts_dir(inputs.registry_hosts_dir))
    if inputs.lock is not None or inputs.lock_data is not None or inputs.require_lock:
        plan = _locked(plan, inputs)
    present = [s for s in plan.steps if isinstance(s, Present)]
    said = check_present(present, inputs.buildpacks_dir, plan.target, enforced=inputs.checks_targets)
    for warning in said:
        log.warning("%s", warning)
    if said:
        plan = replace(plan, warnings=(*plan.warnings, *said))
    _check_outputs(plan, inputs)
    return plan


def _policy(inputs: Inputs) -> Policy:
    """The run's policy: its file read, its text parsed, or the :class:`~preparer.policy.rules.Policy` given."""
    from preparer.policy.reader import load_policy, parse_policy  # deferred: only runs with a policy need it

    if inputs.policy is not None:
        return load_policy(inputs.policy)
    given = inputs.policy_data
    if isinstance(given, str | bytes):
        return parse_policy(given, base=inputs.policy_base)
    assert given is not None
    return given


def lock_path(inputs: Inputs) -> Path | None:
    """The lock file the run reads or writes: ``-lock``, else, when a lock is required, ``<app>/preparer.lock``;
    ``None`` without one, or with a lock given as bytes (``Inputs.lock_data``: none on disk)."""
    if inputs.lock is not None:
        return inputs.lock
    if inputs.lock_data is not None or not inputs.require_lock:
        return None
    from preparer.files.lockfile import DEFAULT_LOCK_NAME  # deferred: only runs with a lock read one

    return inputs.app_dir / DEFAULT_LOCK_NAME


def _unused_lock(inputs: Inputs) -> str | None:
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
        f"nothing is resolved without one. Write it with a run of your own (-lock {path.name}, without "
        "-require-lock) and commit it with the app",
    )
    return with_fields(error, field="lock")


def _locked(plan: Plan, inputs: Inputs) -> Plan:
    """``plan`` with its lock: frozen to it when the file exists (and ``-update-lock`` is not given), else with
    the lock to write after the run (and, to update, what it locked before and the entries it keeps). A lock
    given as bytes (``Inputs.lock_data``) is read the same way; ``b""`` is a lock that does not exist yet."""
    from preparer.files.lockfile import (  # deferred: only runs with a lock read one
        LOCK_DATA_NAME,
        LockState,
        NewerLockError,
        parse_lock,
        read_lock,
    )
    from preparer.lock import check_target, freeze, update

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
        try:
            read_before: LockFile | None = read()
        except NewerLockError:
            raise  # never rewritten in the old format
        except PreparerError as err:  # rewritten anyway: every entry is resolved again
            log.warning("the lock file %s is rewritten, every entry resolved again: %s", path, err.cause)
            read_before = None
        before = read_before.entries if read_before is not None else None
        names = _update_names(plan, path, read_before, inputs.update_lock_names)
        updating = update(plan, path, before, names, versions_of)
        if updating.lock is not None:
            updating = replace(updating, lock=replace(updating.lock, in_memory=in_memory, data=data))
        if before is not None and updating.lock is not None:
            log.info(
                "Updating the lock file %s: %d entries kept as locked, %d resolved again",
                path, len(updating.lock.kept), len(plan.steps) - len(updating.lock.kept),
            )  # fmt: skip
        return updating
    lock_file = read()
    check_target(path, lock_file.target, plan.target)
    entries = lock_file.entries
    frozen = freeze(plan, path, entries, versions_of)
    log.info("Frozen to the lock file %s (%d entries)", path, len(entries))
    return replace(frozen, lock=LockState(path, entries, "frozen", in_memory, data, target=lock_file.target))


def _update_names(plan: Plan, path: Path, before: LockFile | None, names: tuple[str, ...]) -> tuple[str, ...]:
    """The entries ``-update-lock`` resolves again: ``names``, or every one (``all``) when the lock was made for
    another target, since what it locks was resolved for another platform (an index's other manifest)."""
    from preparer.target import same_platform  # deferred, as the lock's modules

    made_for = before.target if before is not None else None
    if made_for is None or plan.target is None or same_platform(made_for, plan.target.platform):
        return names
    log.info(
        "The lock file %s was made for %s; this build is %s (%s): every entry is resolved again",
        path, made_for, plan.target.platform, plan.target.source,
    )  # fmt: skip
    return ("all",)


def _check_outputs(plan: Plan, inputs: Inputs) -> None:
    """Every file the run will write can be written: checked with the other inputs, so that a report path with a
    typo fails before the run changes anything, not after.

    :raises InvalidInputsError: naming the flag and why (exit 3).
    """
    outputs = [("-prepare-report", inputs.prepare_report), ("-provenance", inputs.provenance)]
    if plan.lock is not None and plan.lock.mode != "frozen" and not plan.lock.in_memory:
        outputs.append(("-lock", plan.lock.path))
    if plan.config.writes_order:
        outputs.append(("-layers", inputs.layers_dir / "order.toml"))
    if any(action.action == "written" for action in plan.env):
        outputs.append(("-platform", inputs.platform_dir / "env" / "_"))
    if plan.project_metadata is not None and plan.project_metadata.action == "written":
        outputs.append(("-project-metadata", plan.project_metadata.path))
    for flag, path in outputs:
        problem = None if path is None else _unwritable(path)
        if problem is not None:
            raise InvalidInputsError("resolve inputs", f"{flag} {path}: {problem}")
    for flag in ("-prepare-report", "-provenance"):
        problem = _clash(inputs, flag)
        if problem is not None:
            raise InvalidInputsError("resolve inputs", problem)
    if any(isinstance(step, Fetch) for step in plan.steps):
        problem = _unwritable_dir(inputs.buildpacks_dir)
        if problem is not None:
            raise InvalidInputsError(
                "resolve inputs",
                f"-buildpacks {inputs.buildpacks_dir}: {problem}, and the buildpacks the run fetches are "
                "installed there",
            )


def _files_named(inputs: Inputs) -> list[tuple[str, Path]]:
    """Every file a run reads or may write, by the flag that names it."""
    named: list[tuple[str, Path | None]] = [
        ("-project-descriptor", inputs.project_descriptor or inputs.app_dir / "project.toml"),
        ("-platform-config", inputs.platform_config),
        ("-policy", inputs.policy),
        ("-order", inputs.order_path),
        ("-lock", inputs.lock),
        ("-layers", inputs.layers_dir / "order.toml"),
        ("-project-metadata", inputs.project_metadata_path),
        ("-prepare-report", inputs.prepare_report),
        ("-provenance", inputs.provenance),
    ]
    return [(flag, path) for flag, path in named if path is not None]


def _clash(inputs: Inputs, flag: str) -> str | None:
    """Why the file ``flag`` names (the report or the provenance, files of the preparer's own) cannot be written
    where it is: over another file the run reads or writes, one of the two would be lost; in ``<platform>/env`` the
    lifecycle would read it as a build variable. ``None`` when it has a place of its own."""
    named = _files_named(inputs)
    path = dict(named).get(flag)
    if path is None:
        return None
    real = Path(os.path.realpath(path))
    if real.parent == Path(os.path.realpath(inputs.platform_dir / "env")):
        return (
            f"{flag} {path}: it is in <platform>/env, where the lifecycle reads every file as a build variable: "
            "give it a place outside"
        )
    for other, other_path in named:
        if other != flag and Path(os.path.realpath(other_path)) == real:
            return f"{flag} and {other} name the same file {path}: give each its own"
    return None


def _unwritable_dir(directory: Path) -> str | None:
    """Why files cannot be made in ``directory`` (or, when it is missing, in the directory it would be made in),
    or ``None``."""
    existing = next(p for p in (directory, *directory.parents) if p.exists() or p == p.parent)
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{existing} cannot be written"
    return None


def _unwritable(path: Path) -> str | None:
    """Why the file ``path`` cannot be written (it is a directory; the directory it would be made in is not one,
    or cannot be written), or ``None``."""
    return "is a directory" if path.is_dir() else _unwritable_dir(path.parent)


@typed
def run_plan(
    plan: Plan,
    inputs: Inputs | None = None,
    progress: ProgressCallback | None = None,
    *,
    cancel: Cancel | None = None,
    deadline: float | None = None,
    run_id: str | None = None,
) -> Report:
    """Carry ``plan`` out: fetch, check, and commit all or nothing.

    :param inputs: the inputs ``plan`` was made from (its own when left out); other inputs are refused, since a
        plan names the files of its own app, layers and buildpacks.
    :param progress: as :func:`prepare`'s.
    :param cancel: a handle that stops this run alone (:class:`preparer.interrupt.Cancel`).
    :param deadline: seconds it may take in all.
    :param run_id: set as ``run_id`` on every log record (a new id when left out).
    :raises PreparerError: any failure; nothing has changed on disk then.
    :raises preparer.errors.Cancelled: the run was stopped; see :func:`preparer.apply.apply_plan`.
    """
    _check_arguments(inputs, plan, cancel, deadline, run_id)
    made_for = plan.inputs
    if inputs is None:
        if made_for is None:
            raise TypeError_("a plan not made by plan_run needs its inputs: run_plan(plan, inputs)")
        inputs = made_for
    elif made_for is not None and made_for != inputs:
        raise InvalidInputsError(
            "run the plan", f"it was made for other inputs (app {made_for.app_dir}, not {inputs.app_dir}): "
            "make a plan for these with plan_run",
        )  # fmt: skip
    with interrupt.run(cancel, deadline), named_run(run_id):
        if _entered.get() == 1:  # a saved plan (prepare's own was made a moment ago, in the same call)
            _check_not_stale(plan, inputs)
        return _applied(plan, inputs, callers(progress))


def _applied(
    plan: Plan, inputs: Inputs, progress: ProgressCallback | None, report_path: Path | None = None
) -> Report:
    """Carry ``plan`` out (:func:`~preparer.apply.apply_plan`) and report it; with ``report_path``, the report
    file is written with the commit."""

    def reported(outcome: Outcome) -> Report:
        report = _report(plan, inputs, outcome.buildpacks, outcome.written, outcome.removed)
        return replace(
            report,
            warnings=(*report.warnings, *outcome.warnings),
            lock=outcome.lock,
            provenance=outcome.provenance,
        )

    def report_file(outcome: Outcome) -> bytes:
        return dumps_toml(report_to_toml(reported(outcome))).encode()

    report = None if report_path is None else (report_path, report_file)
    return reported(apply_plan(plan, inputs, progress, report))


def _report(
    plan: Plan,
    inputs: Inputs,
    buildpacks: tuple[Any, ...] = (),
    written: tuple[str, ...] = (),
    removed: int = 0,
) -> Report:
    return Report(
        descriptor_path=str(plan.descriptor_path) if plan.descriptor_path else None,
        schema_version=plan.schema_version,
        effective=_redacted(plan.config.properties),
        buildpacks=buildpacks,
        env=tuple(EnvRecord(action.entry.name, action.action) for action in plan.env),
        app_removed=removed,
        unapplied=plan.config.unapplied,
        warnings=plan.warnings,
        dry_run=inputs.dry_run,
        written=written,
        project_metadata=_metadata_record(plan.project_metadata, inputs.dry_run),
        policy=plan.policy,
        target=plan.target,
    )


def _metadata_record(write: MetadataWrite | None, dry_run: bool) -> MetadataRecord | None:
    if write is None:
        return None
    action = {"written": "would write", "kept": "would keep"}[write.action] if dry_run else write.action
    return MetadataRecord(str(write.path), action, write.metadata.document())


def describe_plan(plan: Plan, inputs: Inputs) -> list[str]:
    """The dry run's account of ``plan``: what a real run would fetch, write and remove, a line each, and what each
    buildpack on disk (in ``<buildpacks>``, or a local directory) says it runs on.

    It reads those ``buildpack.toml`` and nothing else, and raises nothing of its own (``plan`` was checked by
    :func:`plan_run`).
    """
    lines = []
    if plan.target is not None:
        target = plan.target
        distro = f", {target.distro} (from {target.distro_source})" if target.distro else ""
        lines.append(f"  target: {target.platform} ({target.source}){distro}")
    if plan.config.writes_order:
        for label, steps in (("pre", plan.pre), ("group", plan.group or ()), ("post", plan.post)):
            for step in steps:
                lines.append(f"  {label}: {source_of(step)} ({_what_happens(step, inputs.buildpacks_dir)})")
                runs_on = _runs_on(step, inputs)
                if runs_on is not None:
                    lines.append(f"    targets: {runs_on}")
        lines.append(f"  would write {inputs.layers_dir / 'order.toml'}")
    if plan.downloads:
        from preparer.downloads import describe_downloads  # deferred, as plan_downloads

        lines += describe_downloads(plan.downloads)
    for action in plan.env:
        verb = {"written": "would write", "kept": "would keep", "skipped": "would skip"}[action.action]
        lines.append(f"  {verb} {inputs.platform_dir / 'env' / action.entry.name}")
    if plan.removal is not None and (plan.removal.files or plan.removal.dirs):
        lines.append(f"  would remove {len(plan.removal.files)} files from {inputs.app_dir}")
    for decision in plan.policy:
        verdict = "allowed" if decision.allowed else "refused"
        lines.append(f"  policy: {decision.key} ({decision.written}): {verdict}: {decision.rule}")
    if plan.rules is not None and plan.rules.signed_by:
        from preparer.policy.enforce import describe_signatures  # deferred, as enforce itself

        lines += describe_signatures(plan)
    if plan.lock is not None:
        verb = {"frozen": "frozen to", "write": "would write", "update": "would rewrite"}[plan.lock.mode]
        lines.append(f"  lock: {verb} {plan.lock.path}")
    if plan.project_metadata is not None:
        write = plan.project_metadata
        verb = "would write" if write.action == "written" else "would keep the platform's"
        lines.append(f"  {verb} {write.path} ({describe_metadata(write.metadata)})")
    if inputs.provenance is not None:
        lines.append(f"  provenance: would write {inputs.provenance} (a run writes it; a dry run does not)")
    return lines


def _runs_on(step: Step, inputs: Inputs) -> str | None:
    """What the buildpack of ``step`` declares it runs on (:func:`preparer.target.describe_runs_on`), when it can be
    read without fetching: one in ``<buildpacks>``, or a local directory; ``None`` for the others (an image, an
    archive, an inline script), whose ``buildpack.toml`` is read once fetched."""
    from preparer.fetch.locator import PathLocator  # deferred, as in source_of
    from preparer.files.buildpack import buildpack_dir, read_buildpack_toml  # deferred, as in check_present

    if isinstance(step, Present):
        root, builder = buildpack_dir(inputs.buildpacks_dir, step.id, step.version), True
    elif step.entry.script is None and isinstance(step.locator, PathLocator) and step.locator.path.is_dir():
        root, builder = step.locator.path, False
    else:
        return None
    try:
        return describe_runs_on(
            read_buildpack_toml(root / "buildpack.toml", builder=builder), directory_files(root)
        )
    except PreparerError:  # said by the run that needs it: a dry run only describes
        return None


def source_of(step: Step) -> str:
    """How an entry names its buildpack, for the plan (credentials removed)."""
    if isinstance(step, Present):
        return f"{step.id}@{step.version}"
    if step.entry.script is not None:
        return f"inline script ({step.entry.id})"
    from preparer.fetch.locator import redact  # deferred: the fetch package stays off runs that fetch nothing

    return redact(step.entry.uri or "")


def _what_happens(step: Step, buildpacks_dir: Path) -> str:
    if isinstance(step, Present):
        return "installed in <buildpacks>" if step.resolved else "present"
    if step.entry.script is not None:
        return "inline script, would generate"
    from preparer.fetch.locator import (  # deferred: the fetch package stays off runs that fetch nothing
        HttpLocator,
        IdLocator,
        ImageLocator,
    )

    pinned = step.pinned
    if isinstance(pinned, ImageLocator):
        return f"would fetch {pinned.reference}, as locked"
    if isinstance(pinned, HttpLocator):
        return f"would fetch, locked to sha256:{pinned.sha256}"
    locator = step.locator
    if isinstance(locator, IdLocator) and locator.version is None:
        return "not in <buildpacks>: would look it up in the buildpack registry, else pull it as an image"
    if isinstance(locator, IdLocator):  # an image reference cannot name a version with '@': the registry only
        installed = installed_versions(buildpacks_dir, locator.id)
        found = f" (found: {', '.join(installed)})" if installed else ""
        return f"not in <buildpacks>{found}: would look it up in the buildpack registry"
    return "would fetch"


def _redacted(value: Any) -> Any:
    """``value`` with credentials removed from every URL in it: the report is output too."""
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    if isinstance(value, str) and "://" in value:
        from preparer.fetch.locator import redact  # deferred: the fetch package stays off runs without URLs

        return redact(value)
    return value


def _builder_order(config: EffectiveConfig, path: Path) -> Order | None:
    """The builder's order: required when pre/post wrap it, else read only for its extensions when it exists."""
    if not config.writes_order:
        return None
    if config.group is None or path.exists():
        return read_order(path)
    return Order()


def _existing_env(platform_dir: Path) -> set[str]:
    try:
        return set(os.listdir(platform_dir / "env"))
    except OSError:
        return set()
