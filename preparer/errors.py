"""Errors raised by the preparer's library code.

Every error carries the exit code the CLI uses and formats as ``failed to <action>: <cause>``,
the lifecycle's message shape.
"""

from __future__ import annotations

from preparer.exit import ExitCode


class PreparerError(Exception):
    """All errors raised by this package: an action that failed and why."""

    exit_code: int = ExitCode.FAILED

    def __init__(self, action: str, cause: str | BaseException | None = None) -> None:
        self.action = action
        self.cause = None if cause is None else str(cause)
        super().__init__(f"failed to {action}" if self.cause is None else f"failed to {action}: {self.cause}")

    @property
    def message(self) -> str:
        """The whole ``failed to <action>: <cause>`` sentence."""
        return str(self)


class InvalidInputsError(PreparerError):
    """Inputs that are well formed but invalid: flags, environment, a missing explicit file."""

    exit_code = ExitCode.INVALID_INPUTS


class DescriptorError(InvalidInputsError):
    """A project descriptor or platform file that cannot be read or violates its schema."""


class PlatformAPIError(PreparerError):
    """``CNB_PLATFORM_API`` is unset, unparsable or unsupported."""

    exit_code = ExitCode.INCOMPATIBLE_PLATFORM_API


class BuildpackAPIError(PreparerError):
    """A buildpack's ``api`` is outside the supported Buildpack API range."""

    exit_code = ExitCode.INCOMPATIBLE_BUILDPACK_API


class FetchError(PreparerError):
    """A buildpack could not be resolved, downloaded, verified or unpacked."""


class RunLimitReached(FetchError):
    """A limit of the whole run (its time, or the platform policy's totals) was reached: said once for the run,
    not once for each buildpack it stopped."""


class FetchErrors(FetchError):
    """Several entries of a group failed to fetch: each error, in the group's order; the exit code is the first's.

    Its message is ``failed to fetch N buildpacks:`` and each error's own message on a line of its own.
    """

    def __init__(self, errors: tuple[PreparerError, ...]) -> None:
        self.errors = errors
        self.exit_code = errors[0].exit_code
        super().__init__(f"fetch {len(errors)} buildpacks")
        self.cause = "\n" + "\n".join("  " + error.message for error in errors)
        self.args = (f"failed to fetch {len(errors)} buildpacks:{self.cause}",)


class BuilderError(PreparerError):
    """The builder's own files (``-order``, a ``buildpack.toml`` in ``<buildpacks>``) are missing or malformed."""


class NotFoundError(FetchError):
    """What was asked for does not exist where it was looked for (an HTTP 404, a missing image or index entry)."""


class UnexpectedError(PreparerError):
    """Something the preparer does not foresee went wrong (the system refused an operation, or a bug): the cause
    names the original error, and nothing has changed on disk."""


class ApplyError(PreparerError):
    """Writing the prepared outputs failed."""
