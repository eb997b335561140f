"""The build's execution environment (``CNB_EXEC_ENV``, Platform API 0.15): the values it may take, and which buildpacks
the lifecycle's detector skips for it (lifecycle v0.21 ``phase/detector.go`` ``detectGroup``; docs/detector.md).

The detector reads ``CNB_EXEC_ENV`` (unset or empty: ``production``) and compares it as written with the list a
buildpack of Buildpack API 0.12 or later gives in ``[buildpack] exec-env``: a buildpack whose list is not empty and
holds neither the value nor ``*`` is skipped, optional or not, and the group goes on without it. Below Platform API
0.15 nothing is skipped.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from preparer.api import APIVersion

if TYPE_CHECKING:
    from preparer.files.buildpack import BuildpackDescriptor

#: The variable, and its value when it is unset or empty (the lifecycle's ``platform/defaults.go``).
ENV_EXEC_ENV = "CNB_EXEC_ENV"
DEFAULT_EXEC_ENV = "production"
#: The Platform API whose detector skips on exec-env, and the Buildpack API from which a buildpack's list counts.
SKIPS_FROM = APIVersion(0, 15)
LISTS_FROM = APIVersion(0, 12)
#: What pack accepts besides ``production`` and ``test`` (its ``exec-env`` check): letters, digits, ``.`` and ``-``.
_VALUE = r"[a-zA-Z0-9.-]+"  # compiled by re's cache: most builds are production or test


def exec_env_problem(value: str) -> str | None:
    """Why ``value`` cannot be the build's execution environment, or ``None``: pack's rule, ``production``, ``test``
    or letters, digits, ``.`` and ``-``. The detector itself takes any string (``te$t``, ``test,production``) and
    compares it as written, so such a value never matches a buildpack's list: it is refused before anything runs."""
    if value in ("production", "test") or re.fullmatch(_VALUE, value):
        return None
    return (
        f"{ENV_EXEC_ENV}={value!r} is not an execution environment: it must be production, test, or only letters, "
        "digits, . and - (as pack checks it); one value, compared as written with each buildpack's exec-env"
    )


def shown(values: tuple[str, ...]) -> str:
    """A buildpack's ``exec-env`` as written in its buildpack.toml: ``["test", "production"]``."""
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def skip_reason(descriptor: BuildpackDescriptor, exec_env: str, platform_api: APIVersion) -> str | None:
    """Why the detector skips the component buildpack ``descriptor`` in this build's execution environment, or
    ``None`` when it runs it: a Buildpack API 0.12 (or later) buildpack whose ``exec-env`` is not empty and holds
    neither ``exec_env`` nor ``*``, at Platform API 0.15 or later. A composite's own ``exec-env`` is never read
    (the detector expands it first): its buildpacks are asked one by one."""
    if platform_api < SKIPS_FROM or not descriptor.exec_env or descriptor.order:
        return None
    try:
        api = APIVersion.parse(descriptor.api)
    except ValueError:  # refused as unsupported where its Buildpack API is checked
        return None
    if api < LISTS_FROM or exec_env in descriptor.exec_env or "*" in descriptor.exec_env:
        return None
    why = (
        f"its exec-env = {shown(descriptor.exec_env)} does not hold {exec_env}, this build's ({ENV_EXEC_ENV})"
    )
    alike = [value for value in descriptor.exec_env if value.casefold() == exec_env.casefold()]
    if alike:  # Production for production: a value that looks right, and never matches
        why += f", only {alike[0]}, which the detector does not take for it (it compares them as written, case and all)"
    return why
