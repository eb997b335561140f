"""The whole prepare phase as one function: inputs → descriptor → effective config → plan → apply → report."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from preparer.apply import apply_plan, check_present, source_of
from preparer.config import EffectiveConfig, effective_config, platform_layers
from preparer.descriptor import ProjectDescriptor, load_descriptor
from preparer.errors import PreparerError
from preparer.files._toml import dumps_toml, load_toml, write_atomic
from preparer.inputs import Inputs
from preparer.plan import Inline, Plan, Present, Step, env_actions, make_plan
from preparer.report import EnvRecord, Report, unapplied_message

if TYPE_CHECKING:
    from preparer.appfilter import Removal
    from preparer.fetch import ProgressFn
    from preparer.files.order import Order

log = logging.getLogger("preparer")


def prepare(inputs: Inputs, *, progress: ProgressFn | None = None) -> Report:
    """Apply the project descriptor to the build's directories, as the prepare phase does.

    Progress and warnings are logged to the ``preparer`` logger; the report holds them too. When
    ``inputs.prepare_report`` is set, the report (or, on failure, the error) is written there.

    :raises PreparerError: with the exit code of contract §5; nothing has changed on disk.
    """
    try:
        report = _prepare(inputs, progress)
    except PreparerError as err:
        if inputs.prepare_report is not None:
            _write_report(
                inputs.prepare_report, {"error": {"code": int(err.exit_code), "message": err.message}}
            )
        raise
    if inputs.prepare_report is not None:
        _write_report(inputs.prepare_report, report_to_toml(report))
    return report


def read_inputs(inputs: Inputs) -> tuple[ProjectDescriptor, EffectiveConfig, list[str]]:
    """Load the descriptor and the platform file and compute the effective configuration.

    :returns: the descriptor, the effective configuration, and every warning in the order found.
    """
    descriptor = load_descriptor(
        inputs.descriptor_path,
        explicit=inputs.project_descriptor is not None,
        platform_namespace=inputs.platform_namespace,
    )
    platform_file = None
    if inputs.platform_config is not None:
        platform_file = load_toml(inputs.platform_config, "platform config")
    patches, platform_warnings = platform_layers(
        descriptor, inputs.platform_namespace, platform_file, str(inputs.platform_config)
    )
    config = effective_config(descriptor, patches, inputs.exec_env)
    warnings = [
        *config.warnings[: len(descriptor.warnings)],
        *platform_warnings,
        *config.warnings[len(descriptor.warnings) :],
        *(unapplied_message(u) for u in config.unapplied),
    ]
    return descriptor, config, warnings


def _prepare(inputs: Inputs, progress: ProgressFn | None) -> Report:
    descriptor, config, warnings = read_inputs(inputs)
    if descriptor.path is None:
        log.info("No project descriptor at %s; nothing to apply", inputs.descriptor_path)
    else:
        log.info("Project descriptor %s (schema version %s)", descriptor.path, descriptor.schema_version)
    for warning in warnings:
        log.warning("%s", warning)
    for note in config.notes:
        log.debug("%s", note)

    base_dir = descriptor.path.parent if descriptor.path else inputs.app_dir
    plan = make_plan(
        config,
        base_dir,
        inputs.buildpacks_dir,
        lambda bp_id: _installed_versions(inputs.buildpacks_dir, bp_id),
    )
    for step in plan.steps:
        if isinstance(step, Present) and step.resolved:
            log.debug(
                "%s: %s is installed in %s: using %s@%s, no request made",
                step.entry.key, step.entry.uri, inputs.buildpacks_dir, step.id, step.version,
            )  # fmt: skip
    builder_order = _builder_order(plan, inputs.order_path)
    env = env_actions(config.env or (), _existing_env(inputs.platform_dir))
    for _, _, env_warning in env:
        if env_warning:
            log.warning("%s", env_warning)
            warnings.append(env_warning)
    removal = None
    if config.include is not None or config.exclude is not None:
        from preparer.appfilter import plan_removal

        removal = plan_removal(inputs.app_dir, config.include, config.exclude, descriptor.path)

    report = Report(
        descriptor_path=str(descriptor.path) if descriptor.path else None,
        schema_version=descriptor.schema_version,
        effective=_redacted(config.properties),
        env=tuple(EnvRecord(entry.name, action) for entry, action, _ in env),  # type: ignore[arg-type]
        unapplied=config.unapplied,
        warnings=tuple(warnings),
        dry_run=inputs.dry_run,
    )
    if inputs.dry_run:
        # The Buildpack API of buildpacks already present is known without the network: exit as a real run.
        check_present([s for s in plan.steps if isinstance(s, Present)], inputs.buildpacks_dir)
        _log_plan(plan, env, removal, inputs)
        return report
    outcome = apply_plan(plan, inputs, builder_order, env, removal, base_dir, progress)
    return Report(
        **{
            **_fields(report),
            "buildpacks": outcome.buildpacks,
            "written": outcome.written,
            "app_removed": outcome.removed,
        }
    )


def _redacted(value: Any) -> Any:
    """``value`` with credentials removed from every URL in it: the report is output too."""
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v) for v in value]
    if isinstance(value, str) and "://" in value:
        from preparer.fetch.locator import redact

        return redact(value)
    return value


def _fields(report: Report) -> dict[str, Any]:
    return {name: getattr(report, name) for name in report.__dataclass_fields__}


def _installed_versions(buildpacks_dir: Path, bp_id: str) -> list[str]:
    from preparer.files.buildpack import installed_versions  # only runs whose group names ids look

    return installed_versions(buildpacks_dir, bp_id)


def _builder_order(plan: Plan, path: Path) -> Order | None:
    """The builder's order: required when pre/post wrap it, else read only for its extensions when it exists."""
    if not plan.writes_order:
        return None
    from preparer.files.order import Order, read_order

    if plan.needs_builder_order or path.exists():
        return read_order(path)
    return Order()


def _existing_env(platform_dir: Path) -> set[str]:
    try:
        return set(os.listdir(platform_dir / "env"))
    except OSError:
        return set()


def _log_plan(plan: Plan, env: Any, removal: Removal | None, inputs: Inputs) -> None:
    log.info("Dry run: nothing is fetched, written or removed")
    if plan.writes_order:
        for label, steps in (("pre", plan.pre), ("group", plan.group or ()), ("post", plan.post)):
            for step in steps:
                log.info("  %s: %s (%s)", label, source_of(step), _dry_run_kind(step))
        log.info("  would write %s", inputs.layers_dir / "order.toml")
    for entry, action, _ in env:
        verb = {"written": "would write", "kept": "would keep", "skipped": "would skip"}[action]
        log.info("  %s %s", verb, inputs.platform_dir / "env" / entry.name)
    if removal is not None and (removal.files or removal.dirs):
        log.info("  would remove %d files from %s", len(removal.files), inputs.app_dir)


def _dry_run_kind(step: Step) -> str:
    """What a real run would do for ``step``, as the dry run says it."""
    if isinstance(step, Present):
        return "installed in <buildpacks>" if step.resolved else "present"
    if isinstance(step, Inline):
        return "inline script, would generate"
    from preparer.fetch.locator import IdLocator

    if isinstance(step.locator, IdLocator):
        return "not in <buildpacks>: would look it up in the buildpack registry, else pull it as an image"
    return "would fetch"


def report_to_toml(report: Report) -> dict[str, Any]:
    """The ``-prepare-report`` document (contract §7.17)."""
    doc: dict[str, Any] = {"dry-run": report.dry_run}
    descriptor: dict[str, Any] = {}
    if report.descriptor_path is not None:
        descriptor["path"] = report.descriptor_path
    if report.schema_version is not None:
        descriptor["schema-version"] = report.schema_version
    doc["descriptor"] = descriptor
    doc["effective"] = report.effective
    doc["buildpacks"] = [
        {"id": b.id, "version": b.version, "source": b.source, "action": b.action}
        | ({"digest": b.digest} if b.digest else {})
        | ({"resolved": b.resolved} if b.resolved else {})
        for b in report.buildpacks
    ]
    doc["env"] = [{"name": e.name, "action": e.action} for e in report.env]
    doc["app"] = {"removed": report.app_removed}
    doc["unapplied"] = [{"key": u.key, "reason": u.reason} for u in report.unapplied]
    return doc


def _write_report(path: Path, doc: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # write_atomic reports the failure
        path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, dumps_toml(doc).encode())
