"""The groups as the lifecycle's detector will run them, as records (:class:`Detection`, :class:`DetectorGroup`,
:class:`Member`): below the plan, so that the plan and the report name them without importing the rules that decide
them (:mod:`preparer.detector`; docs/detector.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from preparer._record import record
from preparer.files.system import SystemBuildpacks

#: Where an element of a group comes from.
Origin = Literal["system.toml", "project", "builder order"]
#: What the run does with system.toml: merged (read), none (no file), off (turned off for the build, or
#: ``-system ""``), not applied (below Platform API 0.15); ``""`` when none is given.
SystemAction = Literal["merged", "none", "off", "not applied", ""]


@record
class Member:
    """One element of a group as the detector will run it."""

    id: str
    version: str
    origin: Origin
    #: Where it is written, as a key of its file: ``io.buildpacks.group[0]`` (the project's),
    #: ``system.pre.buildpacks[0]``, ``order[1].group[0]`` (the builder's order).
    entry: str
    optional: bool = False
    #: How the project names it while its id is not known (a buildpack fetched by ``uri``, before it is).
    source: str = ""
    #: Whether its buildpack.toml was read: one the run fetches is read once fetched.
    known: bool = True
    #: Its ``[buildpack] exec-env``, as written.
    exec_env: tuple[str, ...] = ()
    #: Why the detector will not run it; ``""`` when it will (or, not read yet, may).
    skipped: str = ""
    #: For a composite: the buildpacks it holds that the detector skips, each ``<id>@<version>: why``.
    skipped_within: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        """``<id>@<version>``, or the source while its id is not known."""
        return f"{self.id}@{self.version}" if self.id and self.version else self.source or self.id

    @property
    def named(self) -> str:
        """``sys/pre@1.0.0 (system.toml, system.pre.buildpacks[0])``."""
        return f"{self.ref} ({self.origin}, {self.entry})"

    def to_dict(self) -> dict[str, Any]:
        """As the report file has it."""
        said: dict[str, Any] = {
            key: value
            for key, value in (("id", self.id), ("version", self.version), ("source", self.source))
            if value
        }
        said |= {"from": self.origin, "entry": self.entry}
        if self.optional:
            said["optional"] = True
        if self.known:
            said["runs"] = not self.skipped
        if self.exec_env:
            said["exec-env"] = list(self.exec_env)
        if self.skipped:
            said["skipped"] = self.skipped
        if self.skipped_within:
            said["skipped-within"] = list(self.skipped_within)
        return said


@record
class DetectorGroup:
    """A group as the detector will run it: its elements in order, system buildpacks merged."""

    members: tuple[Member, ...]

    @property
    def empty(self) -> bool:
        """Whether the detector would skip every element of it (each known), so that none would detect."""
        return bool(self.members) and all(m.known and m.skipped for m in self.members)

    @property
    def running(self) -> tuple[Member, ...]:
        """The elements it will run (or may: not read yet)."""
        return tuple(m for m in self.members if not m.skipped)

    def to_dict(self) -> dict[str, Any]:
        """As the report file has it."""
        return {"buildpacks": [m.to_dict() for m in self.members]}


@record
class Detection:
    """What the detector will run of a prepared build (docs/detector.md)."""

    #: The build's execution environment (``CNB_EXEC_ENV``).
    exec_env: str
    #: Whether the Platform API's detector merges system buildpacks and skips on exec-env (0.15 and later).
    applies: bool = False
    #: system.toml as given (``None``: none), what the run does with it, and what it holds when read.
    system_path: Path | None = None
    system_action: SystemAction = ""
    system: SystemBuildpacks | None = None
    #: The groups, each as it will run; empty when the run neither writes an order nor merges system buildpacks
    #: (the detector then runs the builder's order as it is).
    groups: tuple[DetectorGroup, ...] = ()
    #: The groups are the builder's order's, which the detector tries in turn; else the project's one group.
    builder: bool = False

    def system_dict(self) -> dict[str, Any] | None:
        """``[system]`` of the report file: ``path``, ``action`` and, merged, the ``pre`` and ``post`` buildpacks."""
        if not self.system_action:
            return None
        said: dict[str, Any] = {"action": self.system_action}
        if self.system_path is not None:
            said = {"path": str(self.system_path)} | said
        if self.system is not None:
            said |= {side: [b.ref for b in getattr(self.system, side)] for side in ("pre", "post")}
        return said
