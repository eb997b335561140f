"""``buildpack.toml`` and the ``<buildpacks>`` directory layout.

Spec: buildpack.md §buildpack.toml; platform.md §Buildpacks Directory Layout. Buildpacks live in
``<buildpacks>/<id with "/" replaced by "_">/<version>/`` (lifecycle ``EscapeID``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from preparer._near import closest
from preparer._record import record
from preparer.errors import BuilderError, FetchError, PreparerError
from preparer.files import MalformedError
from preparer.files._toml import load_toml_text
from preparer.files.order import Group, parse_groups

#: Buildpack ids may hold letters, digits, ``.``, ``/`` and ``-`` (spec buildpack.md §buildpack.toml).
_ID = re.compile(r"^[A-Za-z0-9./-]+$")
_RESERVED_IDS = frozenset({"app", "config", "generated", "sbom"})


@record
class BuildpackDescriptor:
    """What the preparer needs from a ``buildpack.toml``."""

    id: str
    version: str
    api: str
    #: For a composite buildpack, its groups; empty for a component buildpack.
    order: tuple[Group, ...] = ()

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
        bool(_ID.match(buildpack_id))
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


def parse_buildpack_toml(doc: dict[str, Any]) -> BuildpackDescriptor:
    """Read the fields the preparer uses from a parsed ``buildpack.toml``. Pure.

    Ids and versions are checked as strictly as the group's own (they name directories and reach order.toml).

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
    return BuildpackDescriptor(bp_id, version, api, groups)


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
    doc, _ = load_toml_text(path, "buildpack.toml", error=error, action=action, named=shown is None)
    try:
        return parse_buildpack_toml(doc)
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
