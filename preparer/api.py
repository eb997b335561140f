"""API versions: the Platform API and Buildpack API ranges this preparer supports.

Versions are ``<major>.<minor>`` or ``<major>`` (meaning ``<major>.0``), as in the platform spec's
"Platform API Version" section. A 0.x version must match exactly; for 1.x and later the major
must be equal and the supported minor at least the requested one.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from preparer.errors import BuildpackAPIError, PlatformAPIError

_VERSION = re.compile(r"^v?([0-9]+)\.?([0-9]*)\Z")


class APIVersion(NamedTuple):
    """A ``<major>.<minor>`` API version."""

    major: int
    minor: int

    @classmethod
    def parse(cls, text: str) -> APIVersion:
        """Parse a version the way the lifecycle does (``v0.15``, ``0.15`` and ``1`` are accepted).

        :raises ValueError: when ``text`` is not a version.
        """
        match = _VERSION.match(text.strip())
        if match is None:
            raise ValueError(f"could not parse '{text}' as version")
        return cls(int(match[1]), int(match[2] or 0))

    def is_superset_of(self, other: APIVersion) -> bool:
        """Whether an implementation of ``self`` can serve a request for ``other``."""
        if self.major == 0:
            return self == other
        return self.major == other.major and self.minor >= other.minor

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"


#: Platform APIs this preparer implements: the lifecycle's 0.7 … 0.15.
SUPPORTED_PLATFORM_APIS: tuple[APIVersion, ...] = tuple(APIVersion(0, m) for m in range(7, 16))
#: Buildpack APIs the lifecycle supports: 0.7 … 0.12.
SUPPORTED_BUILDPACK_APIS: tuple[APIVersion, ...] = tuple(APIVersion(0, m) for m in range(7, 13))


def _range(versions: tuple[APIVersion, ...]) -> str:
    return f"{versions[0]} to {versions[-1]}"


def _supported(requested: APIVersion, supported: tuple[APIVersion, ...]) -> bool:
    return any(s.is_superset_of(requested) for s in supported)


def platform_api_problem(version: APIVersion) -> str | None:
    """Why ``version`` cannot be used as the Platform API (``Inputs.platform_api``), or ``None``."""
    if _supported(version, SUPPORTED_PLATFORM_APIS):
        return None
    return f"{version} is not a supported Platform API (supported: {_range(SUPPORTED_PLATFORM_APIS)})"


def verify_platform_api(value: str | None) -> APIVersion:
    """Check ``CNB_PLATFORM_API`` before anything else, with the lifecycle's messages.

    :raises PlatformAPIError: unset, unparsable or unsupported (exit 11).
    """
    if value is None or not value.strip():
        raise PlatformAPIError(
            "get platform API version; please set 'CNB_PLATFORM_API' to specify the desired platform API version"
            f" (supported: {_range(SUPPORTED_PLATFORM_APIS)})"
        )
    try:
        requested = APIVersion.parse(value)
    except ValueError:
        raise PlatformAPIError(
            f"parse platform API '{value}'", f"supported: {_range(SUPPORTED_PLATFORM_APIS)}"
        ) from None
    if not _supported(requested, SUPPORTED_PLATFORM_APIS):
        raise PlatformAPIError(
            "set platform API",
            f"platform API version '{value}' is incompatible with the lifecycle; supported: "
            + _range(SUPPORTED_PLATFORM_APIS),
        )
    return requested


def verify_buildpack_api(buildpack: str, value: str) -> APIVersion:
    """Check a buildpack's ``api`` as the detector does for every order element.

    :param buildpack: ``<id>@<version>``, for the message, which is the lifecycle's byte for byte (its module kind
        ``Buildpack`` capitalised, as the detector prints it).
    :raises BuildpackAPIError: unparsable or outside 0.7 … 0.12 (exit 12).
    """
    try:
        requested = APIVersion.parse(value)
    except ValueError:
        requested = None
    if requested is None or not _supported(requested, SUPPORTED_BUILDPACK_APIS):
        raise BuildpackAPIError(
            f"set API for Buildpack '{buildpack}'",
            f"buildpack API version '{value}' is incompatible with the lifecycle",
        )
    return requested
