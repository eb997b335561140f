"""What a prepare run did, as data: the CLI renders it and ``-prepare-report`` writes it (contract §5, §7.17)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple


class Unapplied(NamedTuple):
    """A property of the effective configuration that the preparer did not apply."""

    #: The dotted key as the user wrote it, e.g. ``io.buildpacks.builder`` or ``pack.builder``.
    key: str
    reason: str


class BuildpackRecord(NamedTuple):
    """One order entry the preparer wrote, and where its buildpack came from."""

    id: str
    version: str
    source: str
    action: Literal["installed", "present", "inline"]
    digest: str | None = None
    #: How a bare buildpack id in ``uri`` was resolved: ``installed``, ``registry`` or ``image`` (contract §7.11b).
    resolved: str | None = None


class EnvRecord(NamedTuple):
    """One build env variable and what happened to its file."""

    name: str
    action: Literal["written", "kept", "skipped"]


@dataclass(frozen=True)
class Report:
    """The outcome of :func:`preparer.prepare`."""

    descriptor_path: str | None = None
    schema_version: str | None = None
    effective: dict[str, Any] = field(default_factory=dict)
    buildpacks: tuple[BuildpackRecord, ...] = ()
    env: tuple[EnvRecord, ...] = ()
    app_removed: int = 0
    unapplied: tuple[Unapplied, ...] = ()
    #: Every warning, in the order found (unapplied properties included), without the ``Warning:`` prefix.
    warnings: tuple[str, ...] = ()
    dry_run: bool = False
    #: Paths written, in order (order.toml, env files, installed buildpack directories).
    written: tuple[str, ...] = ()


#: The reason given when nothing more specific applies.
NOT_APPLIED = "not applied by the preparer"


def unapplied_message(item: Unapplied) -> str:
    """The warning line for ``item``, without the ``Warning: `` prefix.

    >>> unapplied_message(Unapplied("io.buildpacks.builder", NOT_APPLIED))
    'io.buildpacks.builder is not applied by the preparer'
    """
    if item.reason == NOT_APPLIED:
        return f"{item.key} is not applied by the preparer"
    return f"{item.key} is not applied by the preparer: {item.reason}"
