"""Exit codes of the preparer, in one table.

Values come from the platform spec (every phase's Outputs table) and the lifecycle's ``cmd/exit.go``;
the draft prepare RFC lists ``0`` and the generic ``1-10, 13-19`` range for the preparer.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """How the preparer process ends."""

    #: Success; warnings are allowed.
    SUCCESS = 0
    #: A failure while applying: network, I/O, a missing buildpack (lifecycle ``CodeForFailed``).
    FAILED = 1
    #: Flag syntax: an unknown flag or a value its type rejects (Go ``flag.ExitOnError``).
    USAGE = 2
    #: Invalid inputs: TOML syntax, schema, conflicting keys, bad env names (lifecycle ``CodeForInvalidArgs``).
    INVALID_INPUTS = 3
    #: The requested Platform API is not supported (spec: all phases).
    INCOMPATIBLE_PLATFORM_API = 11
    #: A buildpack declares a Buildpack API this lifecycle does not support (spec: all phases).
    INCOMPATIBLE_BUILDPACK_API = 12
