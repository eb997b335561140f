"""Prepare a Cloud Native Buildpacks build from ``project.toml``: the prepare phase, as a library and a command.

Platform implementers call :func:`prepare` with :class:`Inputs` and read the :class:`Report`, or take it in two
steps: :func:`plan_run` (read and check everything, change nothing) returns a :class:`~preparer.plan.Plan` to
inspect, and :func:`run_plan` carries it out. Every error is a :class:`PreparerError` carrying the command's
``exit_code``; a run stopped (its :class:`Cancel` handle, its deadline, a signal, or
:func:`preparer.interrupt.stop`) raises :class:`Cancelled`, one of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from preparer._version import __version__

if TYPE_CHECKING:
    from preparer.check import check_descriptor
    from preparer.descriptor import Unapplied
    from preparer.errors import (
        ApplyError,
        BuilderError,
        BuildpackAPIError,
        Cancelled,
        DescriptorError,
        FetchError,
        FetchErrors,
        InvalidInputsError,
        NoSpaceError,
        NotFoundError,
        PlatformAPIError,
        PolicyRefused,
        PreparerError,
        SignatureRefused,
        TargetRefused,
        UnexpectedError,
    )
    from preparer.inputs import Inputs
    from preparer.interrupt import Cancel
    from preparer.pipeline import describe_plan, plan_run, prepare, run_plan
    from preparer.plan import Plan
    from preparer.progress import Download
    from preparer.report import BuildpackRecord, EnvRecord, Report, SignatureRecord

__all__ = [
    "ApplyError",
    "BuilderError",
    "BuildpackAPIError",
    "BuildpackRecord",
    "Cancel",
    "Cancelled",
    "DescriptorError",
    "Download",
    "EnvRecord",
    "FetchError",
    "FetchErrors",
    "Inputs",
    "InvalidInputsError",
    "NoSpaceError",
    "NotFoundError",
    "Plan",
    "PlatformAPIError",
    "PolicyRefused",
    "PreparerError",
    "Report",
    "SignatureRecord",
    "SignatureRefused",
    "TargetRefused",
    "Unapplied",
    "UnexpectedError",
    "__version__",
    "check_descriptor",
    "describe_plan",
    "plan_run",
    "prepare",
    "run_plan",
]

#: Where each public name is defined. They are imported on first use, so that the command pays only for what a
#: run needs (``preparer -version`` imports none of them). ``prepare`` lives in preparer.pipeline: a submodule
#: named ``prepare`` would shadow the function.
_HOMES = {
    **dict.fromkeys(
        ("ApplyError", "BuilderError", "BuildpackAPIError", "Cancelled", "DescriptorError", "FetchError", "FetchErrors", "InvalidInputsError",
         "NoSpaceError", "NotFoundError", "PlatformAPIError", "PolicyRefused", "PreparerError", "SignatureRefused", "TargetRefused", "UnexpectedError"),
        "preparer.errors",
    ),
    "Inputs": "preparer.inputs",
    "Cancel": "preparer.interrupt",
    **dict.fromkeys(("describe_plan", "plan_run", "prepare", "run_plan"), "preparer.pipeline"),
    "Plan": "preparer.plan",
    "Download": "preparer.progress",
    **dict.fromkeys(("BuildpackRecord", "EnvRecord", "Report", "SignatureRecord"), "preparer.report"),
    "Unapplied": "preparer.descriptor",
    "check_descriptor": "preparer.check",
}  # fmt: skip


if (
    not TYPE_CHECKING
):  # type checkers see the imports above, with their real types; a misspelled name fails them

    def __getattr__(name: str) -> Any:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module 'preparer' has no attribute {name!r}")
        import importlib  # deferred: most callers never reach a lazy name

        return getattr(importlib.import_module(home), name)
