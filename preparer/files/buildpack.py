"""``buildpack.toml`` and the ``<buildpacks>`` directory layout.

Spec: buildpack.md §buildpack.toml; platform.md §Buildpacks Directory Layout. Buildpacks live in
``<buildpacks>/<id with "/" replaced by "_">/<version>/`` (lifecycle ``EscapeID``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from preparer._near import closest
from preparer._record import record
from preparer.errors import BuilderError, FetchError, PreparerError
from preparer.files import MalformedError
from preparer.files.order import Group, parse_groups
from preparer.files.toml import read_toml

if TYPE_CHECKING:
    from preparer.files.toml import Places

#: Buildpack ids may hold letters, digits, ``.``, ``/`` and ``-`` (spec buildpack.md §buildpack.toml).
_ID = r"[A-Za-z0-9./-]+"  # compiled by re's cache on the first id checked: an env-only run checks none
_RESERVED_IDS = frozenset({"app", "config", "generated", "sbom"})


@record
class BuildpackTarget:
    """One ``[[targets]]`` entry of a ``buildpack.toml`` (spec buildpack.md §Targets): a field left empty matches
    any value."""

    os: str = ""
    arch: str = ""
    #: ``variant``, the spec's key, else ``arch-variant``, the key the lifecycle (v0.21) reads.
    variant: str = ""
    #: ``[[targets.distros]]``: ``(name, version)`` pairs, either part empty for any.
    distros: tuple[tuple[str, str], ...] = ()

    @property
    def shown(self) -> str:
        """``os/arch[/variant]`` as declared, ``*`` for a field left empty, and its distributions in brackets."""
        parts = [self.os or "*", self.arch or "*", *([self.variant] if self.variant else [])]
        while len(parts) > 1 and parts[-1] == "*":
            parts.pop()
        distros = ", ".join(" ".join(p for p in d if p) or "*" for d in self.distros)
        return "/".join(parts) + (f" ({distros})" if distros else "")


@record
class BuildpackDescriptor:
    """What the preparer needs from a ``buildpack.toml``."""

    id: str
    version: str
    api: str
    #: For a composite buildpack, its groups; empty for a component buildpack.
    order: tuple[Group, ...] = ()
    #: ``[[targets]]``, as declared (Buildpack API 0.10 and later).
    targets: tuple[BuildpackTarget, ...] = ()
    #: The ids of ``[[stacks]]``, which targets replaced (Buildpack API below 0.10).
    stacks: tuple[str, ...] = ()
    #: ``[buildpack] exec-env``: the execution environments it runs in (Buildpack API 0.12), as the lifecycle reads
    #: the key, a list of strings; empty: any.
    exec_env: tuple[str, ...] = ()

    @property
    def ref(self) -> str:
        """``<id>@<version>``, as the lifecycle names buildpacks in messages."""
        return f"{self.id}@{self.version}"


def escape_id(buildpack_id: str) -> str:
    """The directory name of a buildpack id: ``/`` becomes ``_``."""
    return buildpack_id.replace("/", "_")


def buildpack_dir(buildpacks_dir: Path, buildpack_id: str, version: str) -> Path:
    """``<buildpacks>/<escaped id>/<version>``."""
    return buildpacks_dir / escape_id(buildpack_id) / version


#: The longest file name Linux filesystems take: an escaped id and a version each name one directory.
MAX_NAME = 255


def check_id(buildpack_id: str) -> bool:
    """Whether ``buildpack_id`` is a valid buildpack id (also safe as a path segment once escaped)."""
    return (
        bool(re.fullmatch(_ID, buildpack_id))
        and len(buildpack_id) <= MAX_NAME
        and buildpack_id.lower() not in _RESERVED_IDS
        and not any(part in ("", ".", "..") for part in buildpack_id.split("/"))
    )


def version_problem(version: str) -> str | None:
    """Why ``version`` cannot name ``<buildpacks>/<id>/<version>``, or ``None`` when it can.

    >>> version_problem("1.2.3") is None, version_problem("../x")
    (True, "version '../x' cannot name a buildpack directory")
    """
    if (
        not version
        or "/" in version
        or version in (".", "..")
        or len(version.encode()) > MAX_NAME
        or any(c.isspace() or not c.isprintable() for c in version)
    ):
        return f"version {version!r} cannot name a buildpack directory"
    return None


def parse_buildpack_toml(doc: dict[str, Any], places: Places | None = None) -> BuildpackDescriptor:
    """Read the fields the preparer uses from a parsed ``buildpack.toml``. Pure.

    Ids and versions are checked as strictly as the group's own (they name directories and reach order.toml).
    ``[buildpack] exec-env`` is read as the lifecycle reads it, whatever the Buildpack API (:func:`_exec_env`).

    :param places: where the document's keys are written, for the line a problem is on.
    :raises MalformedError: naming the field that is missing or malformed.
    """
    info = doc.get("buildpack")
    if not isinstance(info, dict):
        raise MalformedError("missing [buildpack] table")
    bp_id, version, api = info.get("id"), info.get("version"), doc.get("api", "0.1")
    if not isinstance(bp_id, str) or not check_id(bp_id):
        raise MalformedError(f"invalid buildpack id {bp_id!r}")
    if not isinstance(version, str) or version_problem(version):
        raise MalformedError(f"invalid buildpack version {version!r}")
    if not isinstance(api, str):
        raise MalformedError(f"invalid api {api!r}")
    groups = parse_groups(doc.get("order", []), versions=True)
    targets, stacks = _targets(doc.get("targets", [])), _stacks(doc)
    return BuildpackDescriptor(bp_id, version, api, groups, targets, stacks, _exec_env(info, places))


#: Go's names of TOML values, as the lifecycle's TOML decoder (BurntSushi/toml) says them in its messages.
_GO_TYPES = ((bool, "bool"), (int, "int64"), (float, "float64"), (str, "string"), (dict, "map[string]any"),
             (list, "[]any"))  # fmt: skip


def _go_type(value: object) -> str:
    return next((name for kind, name in _GO_TYPES if isinstance(value, kind)), "time.Time")


def _exec_env(info: dict[str, Any], places: Places | None) -> tuple[str, ...]:
    """``[buildpack] exec-env``, a list of strings: the only spelling the lifecycle (and pack) read. The buildpack
    spec's text (Buildpack API 0.12) writes ``[[buildpack.exec-env]]`` tables with a ``name``; the lifecycle's
    detector fails at start-up on any buildpack.toml of the order written so, at every Platform and Buildpack API
    (and at detection for a composite's buildpack), so it is refused here, with the spelling to write instead.

    :raises MalformedError: any other shape, naming the key, its line, the spelling to write and the detector's own
        failure.
    """
    value = info.get("exec-env")
    if value is None:
        return ()
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    line = places.line(("buildpack", "exec-env")) if places is not None else None
    at = f" (line {line})" if line else ""
    names = _names(value)
    write = "exec-env = [" + ", ".join(f'"{n}"' for n in names or ["production"]) + "]"
    is_tables = isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)
    if isinstance(value, list) and value and not is_tables:
        wrong = next(v for v in value if not isinstance(v, str))
        got, wanted = _go_type(wrong), "string"
    else:
        got, wanted = (_go_type(value[0]), "string") if is_tables else (_go_type(value), "slice")
    detector = (
        f'toml: line {line or "?"} (last key "buildpack.exec-env"): incompatible types: TOML value has type '
        f"{got}; destination has type {wanted}"
    )
    said = (
        f"[[buildpack.exec-env]]{at} is the buildpack spec's spelling, which the lifecycle does not read"
        if is_tables
        else f"buildpack.exec-env{at} must be a list of strings, as the lifecycle reads it"
    )
    raise MalformedError(
        f"{said}: write {write} in [buildpack] (the lifecycle's detector fails at start-up on this file: {detector})"
    )


def _names(value: object) -> list[str]:
    """The execution environments a misshapen ``exec-env`` names: each ``name`` of its tables, its strings."""
    items = value if isinstance(value, list) else [value]
    found = []
    for item in items:
        name = item.get("name") if isinstance(item, dict) else item
        if isinstance(name, str) and name:
            found.append(name)
    return found


def _targets(value: object) -> tuple[BuildpackTarget, ...]:
    """``[[targets]]``, each field a string (an empty one, or one left out, matches anything).

    :raises MalformedError: naming the entry that is not a table of strings.
    """
    if not isinstance(value, list):
        raise MalformedError("targets must be an array of tables ([[targets]])")
    targets = []
    for n, table in enumerate(value):
        if not isinstance(table, dict):
            raise MalformedError(f"targets[{n}] is not a table")
        fields = {key: table.get(key, "") for key in ("os", "arch", "variant", "arch-variant")}
        for key, got in fields.items():
            if not isinstance(got, str):
                raise MalformedError(f"targets[{n}].{key} must be a string")
        distros = table.get("distros", [])
        if not isinstance(distros, list) or not all(isinstance(d, dict) for d in distros):
            raise MalformedError(f"targets[{n}].distros must be an array of tables ([[targets.distros]])")
        pairs = []
        for m, distro in enumerate(distros):
            name, version = distro.get("name", ""), distro.get("version", "")
            if not isinstance(name, str) or not isinstance(version, str):
                raise MalformedError(f"targets[{n}].distros[{m}] must have string name and version")
            pairs.append((name, version))
        variant = str(fields["variant"] or fields["arch-variant"])
        targets.append(BuildpackTarget(str(fields["os"]), str(fields["arch"]), variant, tuple(pairs)))
    return tuple(targets)


def _stacks(doc: dict[str, Any]) -> tuple[str, ...]:
    """The ids of ``[[stacks]]``; entries that are not tables with a string id are left out (the field is
    deprecated, and only read to judge where the buildpack runs)."""
    stacks = doc.get("stacks", [])
    if not isinstance(stacks, list):
        return ()
    return tuple(s["id"] for s in stacks if isinstance(s, dict) and isinstance(s.get("id"), str))


def read_buildpack_toml(
    path: Path, *, shown: str | None = None, builder: bool = False
) -> BuildpackDescriptor:
    """Load and parse ``path`` (a ``buildpack.toml``).

    :param shown: how messages name the buildpack (the ``uri`` as written) instead of a staging path.
    :param builder: the file is in ``<buildpacks>``, the platform's own: errors are :class:`BuilderError`.
    :raises FetchError: when a fetched buildpack's file is missing, not TOML, or lacks required fields.
    :raises BuilderError: the same, for a buildpack already in ``<buildpacks>``.
    """
    error = BuilderError if builder else FetchError
    action = f"read buildpack.toml of {shown}" if shown else f"read {path}"
    read = read_toml(path, "buildpack.toml", error=error, action=action, named=shown is None)
    try:
        return parse_buildpack_toml(read.table, read.places)
    except MalformedError as why:
        raise error(action, str(why)) from why


def installed_versions(buildpacks_dir: Path, buildpack_id: str) -> list[str]:
    """Versions of ``buildpack_id`` installed in ``<buildpacks>`` (directories holding a buildpack.toml)."""
    root = buildpacks_dir / escape_id(buildpack_id)
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    return sorted(e.name for e in entries if (e / "buildpack.toml").is_file())


def similar_installed(buildpacks_dir: Path, buildpack_id: str) -> str | None:
    """The id of a buildpack in ``<buildpacks>`` that ``buildpack_id`` is a typo of (for "did you mean"), or
    ``None``; read from its ``buildpack.toml``, as an escaped directory name cannot tell ``a_b/c`` from ``a/b_c``."""
    try:
        names = sorted(entry.name for entry in buildpacks_dir.iterdir() if entry.is_dir())
        meant = closest(escape_id(buildpack_id), names)
        versions = sorted((buildpacks_dir / meant).iterdir()) if meant is not None else []
    except OSError:
        return None
    for version in versions:
        try:
            return read_buildpack_toml(version / "buildpack.toml", builder=True).id
        except PreparerError:
            continue
    return None
