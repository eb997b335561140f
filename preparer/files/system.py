"""``system.toml``: the platform's system buildpacks, which the lifecycle's detector merges before and after every
group (Platform API 0.15; platform.md §system.toml; lifecycle v0.21 ``platform/files/system.go``, ``ReadSystem``).

It is read as the detector reads it: ``[system]`` with ``[[system.pre.buildpacks]]`` and
``[[system.post.buildpacks]]``, each ``id`` and ``version`` a string. A missing file is no system buildpacks; a
value of the wrong type is refused (exit 1: the detector fails at start-up on it), located. What the detector does
not read changes nothing, and each is a warning: ``optional`` (the spec's key, which lifecycle v0.21 ignores: every
system buildpack is required), a key it does not know (``uri``, a typo, with the key meant when it is near), tables
outside ``[system]``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from preparer._near import closest
from preparer._record import record
from preparer._types import KeyPath, dotted
from preparer.errors import BuilderError
from preparer.files.toml import Places, read_toml

#: Where the detector looks when neither ``-system`` nor ``CNB_SYSTEM_PATH`` says (lifecycle ``CNBSystemPath``).
DEFAULT_SYSTEM_PATH = Path("/cnb/system.toml")
#: The keys the detector reads, by the table they are in.
_KEYS: dict[str, tuple[str, ...]] = {
    "": ("system",),
    "system": ("pre", "post"),
    "system.pre": ("buildpacks",),
    "system.post": ("buildpacks",),
    "buildpack": ("id", "version", "optional"),
}


@record
class SystemBuildpack:
    """One system buildpack, as system.toml writes it."""

    id: str
    version: str
    #: Where it is written: ``system.pre.buildpacks[0]``.
    key: str
    #: Its line in system.toml, when known.
    line: int | None = None
    #: ``optional = true`` as written, which lifecycle v0.21 does not read: it is required all the same.
    optional: bool = False

    @property
    def ref(self) -> str:
        """``<id>@<version>``."""
        return f"{self.id}@{self.version}"

    @property
    def where(self) -> str:
        """Its key and line, for messages: ``system.pre.buildpacks[0], line 2``."""
        return f"{self.key}, line {self.line}" if self.line else self.key


@record
class SystemBuildpacks:
    """A system.toml read: where it is, its pre and post buildpacks in the file's order, and what it writes that the
    detector does not read (warnings, without ``Warning:``)."""

    path: Path
    pre: tuple[SystemBuildpack, ...] = ()
    post: tuple[SystemBuildpack, ...] = ()
    warnings: tuple[str, ...] = ()


def read_system(path: Path) -> SystemBuildpacks | None:
    """The system.toml at ``path``, or ``None`` when there is none (the detector then merges nothing).

    :raises BuilderError: it cannot be read (a directory, not TOML), or a key the detector reads is of the wrong
        type (exit 1, located).
    """
    try:
        path.stat()
    except (
        FileNotFoundError
    ):  # only its absence is none, as for the detector (a link loop, a path through a file fail)
        return None
    except OSError:
        pass  # said by the read, located
    read = read_toml(path, "system.toml", error=BuilderError, action="read system buildpacks")
    return parse_system(read.table, read.places, path)


def parse_system(doc: dict[str, Any], places: Places, path: Path) -> SystemBuildpacks:
    """The system buildpacks of a parsed system.toml (``path`` names it). Pure.

    :raises BuilderError: a key the detector reads is of the wrong type (exit 1, located).
    """
    warnings: list[str] = []
    _unknown(doc, (), "", places, path, warnings)
    system = _table(doc, ("system",), places, path)
    _unknown(system, ("system",), "system", places, path, warnings)
    found: dict[str, tuple[SystemBuildpack, ...]] = {}
    for side in ("pre", "post"):
        table = _table(system, ("system", side), places, path)
        _unknown(table, ("system", side), f"system.{side}", places, path, warnings)
        found[side] = _buildpacks(
            table.get("buildpacks", []), ("system", side, "buildpacks"), places, path, warnings
        )
    return SystemBuildpacks(path, found["pre"], found["post"], tuple(warnings))


def _buildpacks(
    value: object, at: KeyPath, places: Places, path: Path, warnings: list[str]
) -> tuple[SystemBuildpack, ...]:
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise _wrong(at, value, "an array of tables ([[system.pre.buildpacks]])", places, path)
    found = []
    for n, item in enumerate(value):
        where = (*at, n)
        _unknown(item, where, "buildpack", places, path, warnings)
        bp_id, version = (_string(item, (*where, key), places, path) for key in ("id", "version"))
        key = dotted(where)
        optional = item.get("optional", False)
        buildpack = SystemBuildpack(bp_id, version, key, places.line(where), optional is True)
        if optional is not False:
            said = "optional = true, which" if optional is True else "optional, a key"
            warnings.append(
                f"{path}: {buildpack.where} ({buildpack.ref}) has {said} the lifecycle (v0.21) does not read: its "
                "detector requires the buildpack in every group it is merged into, as every system buildpack (it "
                "must be in <buildpacks>, and a group fails when it does not detect)"
            )
        found.append(buildpack)
    return tuple(found)


def _table(parent: dict[str, Any], at: KeyPath, places: Places, path: Path) -> dict[str, Any]:
    value = parent.get(str(at[-1]), {})
    if not isinstance(value, dict):
        raise _wrong(at, value, f"a table ([{dotted(at)}])", places, path)
    return value


def _string(item: dict[str, Any], at: KeyPath, places: Places, path: Path) -> str:
    value = item.get(str(at[-1]), "")
    if not isinstance(value, str):
        raise _wrong(at, value, "a string", places, path)
    return value


def _wrong(at: KeyPath, value: object, wanted: str, places: Places, path: Path) -> BuilderError:
    """The error of a value of the wrong type: located, naming the type wanted; the detector fails on it too."""
    line, column = places.nearest(at)
    spot = f" (at line {line}, column {column})" if line else ""
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array"}.get(
        type(value), "a table" if isinstance(value, dict) else "a date"
    )
    return BuilderError(
        "read system buildpacks",
        f"{path}: {dotted(at)} must be {wanted}, not {kind}{spot}; the lifecycle's detector fails at start-up on "
        "this file",
    )


def _unknown(
    table: dict[str, Any], at: KeyPath, kind: str, places: Places, path: Path, warnings: list[str]
) -> None:
    """A warning for each key of ``table`` the detector does not read, with the one meant when it is near."""
    known = _KEYS[kind]
    for key in table:
        if key in known:
            continue
        line = places.line((*at, key))
        spot = f" (line {line})" if line else ""
        name = dotted((*at, key))
        if kind == "" and key in ("pre", "post"):
            hint = f": system buildpacks are written under [system], as [[system.{key}.buildpacks]]"
        elif kind == "buildpack" and key == "uri":
            hint = ": a system buildpack is not fetched, it must already be in <buildpacks>"
        else:
            near = closest(key, known)
            hint = f" (did you mean {dotted((*at, near))}?)" if near else ""
        warnings.append(f"{path}: {name}{spot} is not read by the lifecycle{hint}")
