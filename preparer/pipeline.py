"""The prepare phase as functions: inputs → descriptor → effective config → plan → apply → report.

:func:`plan_run` reads and checks everything and returns the :class:`~preparer.plan.Plan` (nothing is fetched or
written); :func:`run_plan` carries a plan out; :func:`prepare` does both, as the command does.
"""

from __future__ import annotations

import os
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from preparer import interrupt, telemetry
from preparer._logger import log, named_run
from preparer.appfilter import Removal, plan_removal
from preparer.apply import apply_plan, check_present
from preparer.config import EffectiveConfig, platform_layers
from preparer.descriptor import ProjectDescriptor, load_descriptor
from preparer.detector import with_detection
from preparer.entrypoints import TypeError_, callers, check_arguments, depth, typed
from preparer.errors import InvalidInputsError, PreparerError
from preparer.files.buildpack import installed_versions, similar_installed
from preparer.files.order import Order, read_order
from preparer.files.toml import read_toml
from preparer.inputs import Inputs
from preparer.interrupt import Cancel, Interrupted
from preparer.lists import configure, lists_of
from preparer.lock.modes import lock_path, unused_lock, with_lock
from preparer.metadata import plan_metadata
from preparer.outputs import check_outputs
from preparer.plan import NotInstalled, Plan, Present, make_plan
from preparer.report import Report, unapplied_message, write_report
from preparer.reporting import applied_report, kept_report, report_failure, report_file
from preparer.settings import detector_settings
from preparer.target import Target, build_target, host_platform, platform_source, target_attributes

if TYPE_CHECKING:
    from preparer.policy.rules import Policy
    from preparer.progress import ProgressCallback


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
    check_arguments(inputs, None, cancel, deadline, run_id)
    if progress is not None and not callable(progress):
        raise TypeError_(f"progress= takes a callable, not {type(progress).__name__}")
    called = callers(progress)  # in the caller's context, taken before the run begins
    with interrupt.run(cancel, deadline), named_run(run_id), telemetry.traced(inputs, "prepare"):
        return _prepare(inputs, called)


def _prepare(inputs: Inputs, progress: ProgressCallback | None) -> Report:
    try:
        plan = plan_run(inputs)
        if not inputs.dry_run:  # the report is written with the commit: a disk too full for it undoes the run
            return _applied(plan, inputs, progress, inputs.prepare_report)
        from preparer.dryrun import dry_run  # deferred: only dry runs describe a plan

        report = dry_run(plan, inputs, progress)
    except (PreparerError, Interrupted, interrupt.Stopped) as err:
        report_failure(inputs, err.error if isinstance(err, interrupt.Stopped) else err)
        raise
    if inputs.prepare_report is not None and not kept_report(inputs):
        write_report(inputs.prepare_report, report, places=inputs.build_dirs)
    return report


@telemetry.step("cnb.target.read", target_attributes)
def target_of(inputs: Inputs, warnings: list[str] | None = None) -> Target:
    """The build's target for ``inputs`` (:func:`preparer.target.build_target`): analyzed.toml's, as the detector
    reads it, else the ``CNB_TARGET_*`` variables over ``CNB_PREPARER_PLATFORM`` or the host's.

    :param warnings: told each setting analyzed.toml overrides, and a named analyzed.toml that is not there.
    :raises InvalidInputsError: analyzed.toml cannot be read, or a target is invalid (exit 3).
    """
    source = platform_source(inputs.target_platform, inputs.environ, host_platform())
    return build_target(
        inputs.target, inputs.target_platform, source, inputs.analyzed_path, inputs.os_release,
        named=inputs.analyzed is not None, warnings=warnings,
    )  # fmt: skip


def _check_app_dir(app_dir: Path) -> None:
    """The app directory exists and is one: an ``-app`` mistyped must not pass for an app with nothing to apply.

    :raises InvalidInputsError: naming the flag and the path (exit 3).
    """
    if not app_dir.exists():
        raise InvalidInputsError("resolve inputs", f"the app directory (-app) {app_dir} does not exist")
    if not app_dir.is_dir():
        raise InvalidInputsError("resolve inputs", f"the app directory (-app) {app_dir} is not a directory")


@telemetry.step("cnb.read_inputs", lambda got: {"cnb.warnings": len(got[2])})
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
        data=inputs.descriptor_data,
    )
    platform_file = None
    if inputs.platform_config is not None:
        platform_file = read_toml(inputs.platform_config, "platform config")
    patches, platform_warnings = platform_layers(descriptor, inputs.platform_namespace, platform_file)
    base_dir = descriptor.path.parent if descriptor.path else inputs.app_dir  # as the plan resolves paths
    config = configure(descriptor, patches, inputs, base_dir, os.path.exists)
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


@telemetry.step("cnb.plan", lambda plan: {"cnb.plan.steps": len(plan.steps)})
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
    check_arguments(inputs, None, cancel, deadline, run_id)
    with interrupt.run(cancel, deadline), named_run(run_id), telemetry.traced(inputs, "plan_run"):
        return _plan_run(inputs)


def _plan_run(inputs: Inputs) -> Plan:
    interrupt.check()  # a handle set before the run began
    # Before they are read, so that a change while planning is seen when the plan runs; only for a plan handed to
    # the caller (prepare's own runs a moment later, in the same call, and is not checked again).
    # A provenance gives the sha256 of the files as the plan read them.
    handed_out = depth() <= 1
    made_from: tuple[tuple[str, str | None], ...] = ()
    if handed_out or inputs.provenance is not None:
        from preparer.stale import fingerprints  # deferred: only plans handed out or attested keep them

        made_from = fingerprints(inputs)
    descriptor, config, warnings = read_inputs(inputs)
    target = target_of(inputs, warnings)
    log.debug("The build's target: %s (%s)", target.platform, target.source)
    interrupt.check()
    if descriptor.path is None:
        lists = "the platform's lists apply" if lists_of(inputs).given else "nothing to apply"
        log.info("No project descriptor at %s; %s", inputs.descriptor_path, lists)
    else:
        log.info("Project descriptor %s (schema version %s)", descriptor.path, descriptor.schema_version)
    for warning in warnings:
        log.warning("%s", warning)
    for note in config.notes:
        log.debug("%s", note)
    # Before anything in <app> changes: excluding .git must not lose what it says.
    metadata, metadata_warnings = plan_metadata(descriptor, inputs.app_dir, inputs.project_metadata_path)
    interrupt.check()
    unused = unused_lock(inputs)
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
        # Deferred: only plans handed out or shown are measured.
        from preparer.downloads import plan_downloads
        from preparer.settings import fetch_settings

        plan = replace(plan, downloads=plan_downloads(plan, fetch_settings(inputs), probe=not inputs.dry_run))
    return plan


@telemetry.step("cnb.platform_decisions")
def _platform_decisions(plan: Plan, inputs: Inputs, filter_key: str) -> Plan:
    """``plan`` as the platform lets it run: its policy's decisions, include/exclude's checks on what it still
    removes, its registry mirrors, the Buildpack API of what the builder has, and the groups as the detector will
    run them (its system buildpacks, what it skips on exec-env)."""
    if inputs.policy is not None or inputs.policy_data is not None:
        from preparer.policy.enforce import enforce  # deferred: only runs with a policy need it

        plan = enforce(plan, _policy(inputs), inputs.download_cache)
    if plan.removal is not None:  # what the policy lets apply
        found = _check_removal(plan.removal, filter_key, plan.descriptor_path)
        plan = replace(plan, warnings=(*plan.warnings, *found))
    if inputs.registry_hosts_dir is not None:
        from preparer.fetch.oci.hosts import load_hosts_dir  # deferred: only runs with mirrors read them

        plan = replace(plan, registry_hosts=load_hosts_dir(inputs.registry_hosts_dir))
    plan = with_lock(plan, inputs)
    present = [s for s in plan.steps if isinstance(s, Present)]
    said = check_present(present, inputs.buildpacks_dir, plan.target, enforced=inputs.checks_targets)
    for warning in said:
        log.warning("%s", warning)
    if said:
        plan = replace(plan, warnings=(*plan.warnings, *said))
    plan = with_detection(plan, detector_settings(inputs))
    check_outputs(plan, inputs)
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
    check_arguments(inputs, plan, cancel, deadline, run_id)
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
    called = callers(progress)  # in the caller's context, taken before the run begins
    with interrupt.run(cancel, deadline), named_run(run_id), telemetry.traced(inputs, "run_plan"):
        if depth() == 1:  # a saved plan (prepare's own was made a moment ago, in the same call)
            from preparer.stale import check_not_stale  # deferred: only saved plans are checked

            check_not_stale(plan, inputs)
        return _applied(plan, inputs, called)


def _applied(
    plan: Plan, inputs: Inputs, progress: ProgressCallback | None, report_path: Path | None = None
) -> Report:
    """Carry ``plan`` out (:func:`~preparer.apply.apply_plan`) and report it; with ``report_path``, the report
    file is written with the commit."""
    dry = inputs.dry_run
    report = None if report_path is None else (report_path, partial(report_file, plan, dry))
    return applied_report(plan, dry, apply_plan(plan, inputs, progress, report))


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
