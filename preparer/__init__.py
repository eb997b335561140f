"""Prepare a Cloud Native Buildpacks build from ``project.toml``: the prepare phase, as a library and a command.

Platform implementers call :func:`prepare` with :class:`Inputs` and read the :class:`Report`, or take it in two
steps: :func:`plan_run` (read and check everything, change nothing) returns a :class:`~preparer.plan.Plan` to
inspect, and :func:`run_plan` carries it out. Every error is a :class:`PreparerError` carrying the command's
``exit_code``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from preparer.errors import (
    ApplyError,
    BuilderError,
    BuildpackAPIError,
    DescriptorError,
    FetchError,
    InvalidInputsError,
    NotFoundError,
    PlatformAPIError,
    PreparerError,
)
from preparer.inputs import Inputs
from preparer.report import BuildpackRecord, EnvRecord, Report, Unapplied

if TYPE_CHECKING:
    from preparer.pipeline import describe_plan, plan_run, prepare, run_plan
    from preparer.plan import Plan

from preparer._version import __version__

# The library logs to "preparer" and never prints: without a handler of the caller's, records go nowhere.
logging.getLogger("preparer").addHandler(logging.NullHandler())

__all__ = [
    "ApplyError",
    "BuilderError",
    "BuildpackAPIError",
    "BuildpackRecord",
    "DescriptorError",
    "EnvRecord",
    "FetchError",
    "Inputs",
    "InvalidInputsError",
    "NotFoundError",
    "Plan",
    "PlatformAPIError",
    "PreparerError",
    "Report",
    "Unapplied",
    "__version__",
    "describe_plan",
    "plan_run",
    "prepare",
    "run_plan",
]

#: The names the pipeline defines, imported on first use so that ``preparer -version`` stays fast.
_LAZY = {"prepare", "plan_run", "run_plan", "describe_plan"}


def __getattr__(name: str) -> Any:
    # The pipeline lives in preparer.pipeline: a submodule named `prepare` would shadow the function.
    if name in _LAZY:
        from preparer import pipeline  # deferred: the pipeline's imports cost every start-up (-version, -h)

        return getattr(pipeline, name)
    if name == "Plan":
        from preparer.plan import Plan  # deferred, as the pipeline

        return Plan
    raise AttributeError(f"module 'preparer' has no attribute {name!r}")
