"""The dry run (``-dry-run``, ``Inputs.dry_run``): its account of a plan (:func:`describe_plan`), what a real run
would fetch, write and remove, a line each, read from the plan and the ``buildpack.toml`` files already on disk; and
its report. Nothing is fetched, unless ``-update-lock`` asks what the lock would become."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, assert_never

from preparer._logger import log
from preparer.detector import describe_detection
from preparer.errors import PreparerError
from preparer.files.buildpack import installed_versions
from preparer.inputs import Inputs
from preparer.lock.modes import dry_lock
from preparer.metadata import describe_metadata
from preparer.plan import Plan, Present, Step, source_of
from preparer.report import LockRecord, Report
from preparer.reporting import kept_report, plan_report
from preparer.target import describe_runs_on, directory_files

if TYPE_CHECKING:
    from preparer.entries import GroupEntry
    from preparer.files.locked import Locked
    from preparer.progress import ProgressCallback


def dry_run(plan: Plan, inputs: Inputs, progress: ProgressCallback | None) -> Report:
    """Say what ``plan`` would do (:func:`describe_plan`), a line each to the ``preparer`` logger, and report it:
    nothing is installed, written or removed."""
    if plan.lock is not None and plan.lock.mode == "update":
        log.info(
            "Dry run: nothing is installed, written or removed; -update-lock fetches the entries it "
            "resolves again (into a temporary directory and the download cache), to say what would change"
        )
    elif inputs.prepare_report is None:
        log.info("Dry run: nothing is fetched, written or removed")
    elif kept_report(inputs):
        log.info("Dry run: nothing is fetched, written or removed")
        log.warning(
            "the report %s is kept: a dry run never replaces a run's report; give the dry run a -prepare-report "
            "of its own",
            inputs.prepare_report,
        )
    else:
        log.info("Dry run: nothing is fetched, written or removed but the report, %s", inputs.prepare_report)
    for line in describe_plan(plan, inputs):
        log.info("%s", line)
    return replace(plan_report(plan, inputs.dry_run), lock=_lock(plan, inputs, progress))


def _lock(plan: Plan, inputs: Inputs, progress: ProgressCallback | None) -> LockRecord | None:
    """The dry run's lock (:func:`preparer.lock.modes.dry_lock`): with ``-update-lock``, the entries it moves are
    fetched to resolve them again."""

    def resolve() -> tuple[Locked, ...]:
        from preparer.apply import resolve_plan  # deferred: a dry run fetches only to update a lock

        kept = plan.lock.kept if plan.lock is not None else frozenset()
        for step in plan.steps:
            if step.entry.key not in kept and not isinstance(step, Present):
                log.info("Fetching %s (%s) to resolve it again", step.entry.key, source_of(step))
        return resolve_plan(plan, inputs, progress)

    return dry_lock(plan, resolve)


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
        lines.append(f"  target: {target.shown} ({target.source}){distro}")
    if plan.config.writes_order:
        for label, steps in (("pre", plan.pre), ("group", plan.group or ()), ("post", plan.post)):
            if label == "group" and plan.group is None and plan.builder_order is not None:
                groups = len(plan.builder_order.groups)
                lines.append(
                    f"  group: each of the {groups} groups of the builder's order (from {inputs.order_path})"
                )
            for step in steps:
                lines.append(f"  {label}: {source_of(step)} ({_what_happens(step, inputs.buildpacks_dir)})")
                lines.append(f"    from: {entry_source(step.entry)}")
                runs_on = _runs_on(step, inputs)
                if runs_on is not None:
                    lines.append(f"    targets: {runs_on}")
        lines.append(f"  would write {inputs.layers_dir / 'order.toml'}")
    lines += describe_detection(plan.detection)
    if plan.downloads:
        from preparer.downloads import describe_downloads  # deferred, as plan_downloads

        lines += describe_downloads(plan.downloads)
    for action in plan.env:
        verb = {"written": "would write", "kept": "would keep", "skipped": "would skip"}[action.action]
        lines.append(f"  {verb} {inputs.platform_dir / 'env' / action.entry.name}")
        lines.append(f"    from: {action.entry.key}")
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
    if inputs.telemetry or inputs.traceparent is not None:
        from preparer.telemetry.run import trace_file  # deferred: only runs asked for telemetry

        traces = trace_file(inputs)
        if traces is not None:
            lines.append(f"  telemetry: would append to {traces} (a run writes it; a dry run does not)")
    return lines


def _runs_on(step: Step, inputs: Inputs) -> str | None:
    """What the buildpack of ``step`` declares it runs on (:func:`preparer.target.describe_runs_on`), when it can be
    read without fetching: one in ``<buildpacks>``, or a local directory; ``None`` for the others (an image, an
    archive, an inline script), whose ``buildpack.toml`` is read once fetched."""
    from preparer.fetch import locator as locators  # deferred, as in plan.source_of
    from preparer.files.buildpack import buildpack_dir, read_buildpack_toml  # deferred, as in check_present

    if isinstance(step, Present):
        root, builder = buildpack_dir(inputs.buildpacks_dir, step.id, step.version), True
    else:
        match step.locator:
            case locators.PathLocator():
                if not step.locator.path.is_dir():
                    return None
                root, builder = step.locator.path, False
            case (
                locators.HttpLocator()
                | locators.ImageLocator()
                | locators.RegistryLocator()
                | locators.IdLocator()
                | locators.InlineLocator()
            ):
                return None
            case _ as never:
                assert_never(never)
    try:
        return describe_runs_on(
            read_buildpack_toml(root / "buildpack.toml", builder=builder), directory_files(root)
        )
    except PreparerError:  # said by the run that needs it: a dry run only describes
        return None


def entry_source(entry: GroupEntry) -> str:
    """Where an entry comes from, for the plan: its list and position (``-buildpack[0]``), or its key and the file
    that gives it (``io.buildpacks.pack.group[0] in pack.toml``)."""
    if entry.key.startswith("-"):
        return entry.key
    return f"{entry.key} in {Path(entry.file).name}"


def _what_happens(step: Step, buildpacks_dir: Path) -> str:
    if isinstance(step, Present):
        return "installed in <buildpacks>" if step.resolved else "present"
    if step.entry.script is not None:
        return "inline script, would generate"
    from preparer.fetch import (
        locator as locators,
    )  # deferred: the fetch package stays off runs that fetch nothing

    pinned = step.pinned
    match pinned:
        case locators.ImageLocator():
            return f"would fetch {pinned.reference}, as locked"
        case locators.HttpLocator():
            return f"would fetch, locked to sha256:{pinned.sha256}"
        case (
            None
            | locators.PathLocator()
            | locators.RegistryLocator()
            | locators.IdLocator()
            | locators.InlineLocator()
        ):
            pass  # not frozen to a lock (which pins an archive's bytes or an image's digest)
        case _ as never:
            assert_never(never)
    locator = step.locator
    match locator:
        case locators.IdLocator(version=None):
            return "not in <buildpacks>: would look it up in the buildpack registry, else pull it as an image"
        case locators.IdLocator():  # an image reference cannot name a version with '@': the registry only
            installed = installed_versions(buildpacks_dir, locator.id)
            found = f" (found: {', '.join(installed)})" if installed else ""
            return f"not in <buildpacks>{found}: would look it up in the buildpack registry"
        case (
            locators.PathLocator()
            | locators.HttpLocator()
            | locators.ImageLocator()
            | locators.RegistryLocator()
            | locators.InlineLocator()
        ):
            return "would fetch"
        case _ as never:
            assert_never(never)
