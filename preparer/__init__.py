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
    from preparer.aio import plan_run_async, prepare_async, run_plan_async
    from preparer.check import check_descriptor
    from preparer.descriptor import Unapplied
    from preparer.dryrun import describe_plan
    from preparer.entrypoints import committed_report
    from preparer.errors import (
        ApplyError,
        BuilderError,
        BuildpackAPIError,
        Cancelled,
        DescriptorError,
        DetectionRefused,
        DigestMismatch,
        FetchError,
        FetchErrors,
        InvalidInputsError,
        LockMismatch,
        LockRefused,
        NoSpaceError,
        NotFoundError,
        PlatformAPIError,
        PolicyError,
        PolicyRefused,
        PreparerError,
        RunLimitReached,
        SignatureRefused,
        TargetRefused,
        UnexpectedError,
    )
    from preparer.fetch.guard import LimitExceeded, RunLimitExceeded
    from preparer.fetch.transport import Unreachable
    from preparer.files.locked import Locked
    from preparer.files.lockfile import NewerLockError
    from preparer.inputs import Inputs
    from preparer.interrupt import Cancel
    from preparer.pipeline import plan_run, prepare, run_plan
    from preparer.plan import NotInstalled, Plan, PlannedDownload
    from preparer.policy.reader import check_policy, parse_policy
    from preparer.policy.rules import Policy
    from preparer.progress import Download
    from preparer.report import BuildpackRecord, EnvRecord, LockChange, LockRecord, Report, SignatureRecord

    #: Deprecated: the name :class:`Cancelled` had before; it is :class:`Cancelled` (a warning says so on use).
    Interrupted = Cancelled

__all__ = [
    "ApplyError",
    "BuilderError",
    "BuildpackAPIError",
    "BuildpackRecord",
    "Cancel",
    "Cancelled",
    "DescriptorError",
    "DetectionRefused",
    "DigestMismatch",
    "Download",
    "EnvRecord",
    "FetchError",
    "FetchErrors",
    "Inputs",
    "InvalidInputsError",
    "LimitExceeded",
    "LockChange",
    "LockMismatch",
    "LockRefused",
    "LockRecord",
    "Locked",
    "NewerLockError",
    "NoSpaceError",
    "NotFoundError",
    "NotInstalled",
    "Plan",
    "PlannedDownload",
    "PlatformAPIError",
    "Policy",
    "PolicyError",
    "PolicyRefused",
    "PreparerError",
    "Report",
    "RunLimitExceeded",
    "RunLimitReached",
    "SignatureRecord",
    "SignatureRefused",
    "TargetRefused",
    "Unapplied",
    "UnexpectedError",
    "Unreachable",
    "__version__",
    "check_descriptor",
    "check_policy",
    "committed_report",
    "describe_plan",
    "parse_policy",
    "plan_run",
    "plan_run_async",
    "prepare",
    "prepare_async",
    "run_plan",
    "run_plan_async",
]

#: Where each public name is defined. They are imported on first use, so that the command pays only for what a
#: run needs (``preparer -version`` imports none of them). ``prepare`` lives in preparer.pipeline: a submodule
#: named ``prepare`` would shadow the function.
_HOMES = {
    **dict.fromkeys(
        ("ApplyError", "BuilderError", "BuildpackAPIError", "Cancelled", "DescriptorError", "DetectionRefused", "DigestMismatch", "FetchError", "FetchErrors", "InvalidInputsError",
         "LockMismatch", "LockRefused", "NoSpaceError", "NotFoundError", "PlatformAPIError", "PolicyError", "PolicyRefused",
         "PreparerError", "RunLimitReached", "SignatureRefused", "TargetRefused",
         "UnexpectedError"),
        "preparer.errors",
    ),
    **dict.fromkeys(("LimitExceeded", "RunLimitExceeded"), "preparer.fetch.guard"),
    "Unreachable": "preparer.fetch.transport",
    "Locked": "preparer.files.locked",
    "NewerLockError": "preparer.files.lockfile",
    "NotInstalled": "preparer.plan",
    "Policy": "preparer.policy.rules",
    **dict.fromkeys(("check_policy", "parse_policy"), "preparer.policy.reader"),
    "Inputs": "preparer.inputs",
    "Cancel": "preparer.interrupt",
    "committed_report": "preparer.entrypoints",
    "describe_plan": "preparer.dryrun",
    **dict.fromkeys(("plan_run", "prepare", "run_plan"), "preparer.pipeline"),
    **dict.fromkeys(("plan_run_async", "prepare_async", "run_plan_async"), "preparer.aio"),
    "Plan": "preparer.plan",
    "PlannedDownload": "preparer.plan",
    "Download": "preparer.progress",
    **dict.fromkeys(
        ("BuildpackRecord", "EnvRecord", "LockChange", "LockRecord", "Report", "SignatureRecord"), "preparer.report"
    ),
    "Unapplied": "preparer.descriptor",
    "check_descriptor": "preparer.check",
}  # fmt: skip


if (
    not TYPE_CHECKING
):  # type checkers see the imports above, with their real types; a misspelled name fails them

    def __getattr__(name: str) -> Any:
        if name == "Interrupted":  # renamed; kept for a release
            import warnings  # deferred, as the lazy names

            warnings.warn(
                "preparer.Interrupted is deprecated: it is preparer.Cancelled",
                DeprecationWarning,
                stacklevel=2,
            )
            name = "Cancelled"
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module 'preparer' has no attribute {name!r}")
        import importlib  # deferred: most callers never reach a lazy name

        return getattr(importlib.import_module(home), name)

    def __dir__() -> list[str]:
        """The public names, imported on first use, with what the module holds already (REPL completion,
        ``help()``)."""
        return sorted(set(globals()) | set(__all__))
