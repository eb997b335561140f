"""Prepare a Cloud Native Buildpacks build from ``project.toml``: the prepare phase, as a library and a command.

Platform implementers call :func:`prepare` with :class:`Inputs` and read the :class:`Report`; the steps of the
pipeline (load, parse, overlay, plan, apply) are exported too.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from preparer.errors import (
    ApplyError,
    BuildpackAPIError,
    DescriptorError,
    FetchError,
    InvalidInputsError,
    PlatformAPIError,
    PreparerError,
)
from preparer.inputs import Inputs
from preparer.report import BuildpackRecord, EnvRecord, Report, Unapplied

if TYPE_CHECKING:
    from preparer.pipeline import prepare

__version__ = "0.1.0"

# The library logs to "preparer" and never prints: without a handler of the caller's, records go nowhere.
logging.getLogger("preparer").addHandler(logging.NullHandler())

__all__ = [
    "ApplyError",
    "BuildpackAPIError",
    "BuildpackRecord",
    "DescriptorError",
    "EnvRecord",
    "FetchError",
    "Inputs",
    "InvalidInputsError",
    "PlatformAPIError",
    "PreparerError",
    "Report",
    "Unapplied",
    "__version__",
    "prepare",
]


def __getattr__(name: str) -> Any:
    # The pipeline is imported on first use, so `preparer -version` stays fast. It lives in
    # preparer.pipeline: a submodule named `prepare` would shadow this function once imported.
    if name == "prepare":
        from preparer.pipeline import prepare

        return prepare
    raise AttributeError(name)
