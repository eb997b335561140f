"""The run's report (:class:`~preparer.report.Report`) made from its plan and what carrying it out did, and the
report file of a run that failed. What the report holds, and its file's form, is :mod:`preparer.report`'s."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from preparer._logger import log
from preparer.errors import PreparerError
from preparer.files.toml import dumps_toml
from preparer.inputs import Inputs
from preparer.metadata import MetadataWrite
from preparer.outputs import failure_report_writable
from preparer.plan import Plan
from preparer.report import EnvRecord, MetadataRecord, Report, detection_fields, report_to_toml, write_report

if TYPE_CHECKING:
    from preparer.apply import Outcome


def applied_report(plan: Plan, dry_run: bool, outcome: Outcome) -> Report:
    """The report of ``plan`` carried out: :func:`plan_report` with what the commit did, what fetching warned of,
    the lock and the provenance."""
    report = plan_report(plan, dry_run, outcome.buildpacks, outcome.written, outcome.removed)
    return replace(
        report,
        warnings=(*report.warnings, *outcome.warnings),
        lock=outcome.lock,
        provenance=outcome.provenance,
        **detection_fields(outcome.detection or plan.detection),
    )


def report_file(plan: Plan, dry_run: bool, outcome: Outcome) -> bytes:
    """The report file's bytes for ``plan`` carried out, staged with the commit."""
    return dumps_toml(report_to_toml(applied_report(plan, dry_run, outcome))).encode()


def report_failure(inputs: Inputs, error: BaseException) -> None:
    """Write a failed run's report (only ``[error]``) where ``-prepare-report`` names it, when it has a place there
    (:func:`preparer.outputs.failure_report_writable`). When it cannot be written, a warning says so, unless it is
    the run's own error again (a full disk, often): the run's error is the one to tell."""
    report_path = inputs.prepare_report
    if report_path is None or not failure_report_writable(inputs):
        return
    if inputs.dry_run and report_path.exists():  # a dry run never replaces a report
        return
    try:
        error_of = (int(getattr(error, "exit_code", 1)), str(error))
        write_report(report_path, error=error_of, places=inputs.build_dirs)
    except PreparerError as unwritten:
        if unwritten.message != getattr(error, "message", None):
            log.warning("the failed run's report was not written: %s", unwritten.message)


def plan_report(
    plan: Plan,
    dry_run: bool,
    buildpacks: tuple[Any, ...] = (),
    written: tuple[str, ...] = (),
    removed: int = 0,
) -> Report:
    """The report of ``plan``: what it applies (its configuration, with credentials removed, its env, warnings,
    policy decisions and target) and, once it is carried out, what it installed, wrote and removed."""
    return Report(
        descriptor_path=str(plan.descriptor_path) if plan.descriptor_path else None,
        schema_version=plan.schema_version,
        effective=_redacted(plan.config.properties),
        buildpacks=buildpacks,
        env=tuple(EnvRecord(action.entry.name, action.action) for action in plan.env),
        app_removed=removed,
        unapplied=plan.config.unapplied,
        warnings=plan.warnings,
        dry_run=dry_run,
        written=written,
        project_metadata=_metadata_record(plan.project_metadata, dry_run),
        policy=plan.policy,
        target=plan.target,
        **detection_fields(plan.detection),
    )


def _metadata_record(write: MetadataWrite | None, dry_run: bool) -> MetadataRecord | None:
    if write is None:
        return None
    action = {"written": "would write", "kept": "would keep"}[write.action] if dry_run else write.action
    return MetadataRecord(str(write.path), action, write.metadata.document())


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


def kept_report(inputs: Inputs) -> bool:
    """Whether a dry run keeps the file at ``-prepare-report`` instead of writing its own report there: a dry run
    never replaces a report, but an earlier dry run's (``dry-run = true``), which it renews. A file that cannot be
    read as one is kept as well: it may be a run's failure report, or not a report at all."""
    path = inputs.prepare_report
    if not inputs.dry_run or path is None or not path.exists():
        return False
    from preparer.files.toml import read_toml  # deferred: only dry runs with a report read one

    try:
        return read_toml(path, "report").table.get("dry-run") is not True
    except PreparerError:
        return True
