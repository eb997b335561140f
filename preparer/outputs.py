"""The files a run writes, checked before it changes anything: each can be written where its flag names it, and none
is written over another file the run reads or writes (or into ``<platform>/env``, where it would be a build variable).
A report path with a typo fails with the other inputs, not after the commit."""

from __future__ import annotations

import os
from pathlib import Path

from preparer.errors import InvalidInputsError
from preparer.inputs import Inputs
from preparer.plan import Fetch, Plan


def check_outputs(plan: Plan, inputs: Inputs) -> None:
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
        # What the detector reads next (the platform's system.toml, analyzed.toml), the list flags' env files, and
        # the telemetry file a run appends to.
        ("-system", inputs.system_path),
        ("-analyzed", inputs.analyzed_path),
        *((f"-env-file[{n}]", path) for n, path in enumerate(inputs.env_files)),
        ("-telemetry", _telemetry_file(inputs)),
    ]
    return [(flag, path) for flag, path in named if path is not None]


def _telemetry_file(inputs: Inputs) -> Path | None:
    """The file a run's telemetry is appended to, when it records (docs/telemetry.md)."""
    if not (inputs.telemetry or inputs.traceparent):
        return None
    from preparer.telemetry.run import FILE  # deferred: only a run that records names it

    return inputs.layers_dir.joinpath(*FILE)


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


def failure_report_writable(inputs: Inputs) -> bool:
    """Whether a failed run's report can be written where ``-prepare-report`` names it: a place that can be written,
    and a file of its own."""
    path = inputs.prepare_report
    return path is not None and _unwritable(path) is None and _clash(inputs, "-prepare-report") is None
