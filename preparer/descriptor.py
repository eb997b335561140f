"""Project descriptors (``project.toml``) of every schema, normalised to the ``io.buildpacks`` vocabulary.

Which schema a file uses (docs/decisions.md, "Descriptor and overlay"):

- ``[_] schema-version`` decides: ``0.1``, ``0.2`` or ``0.3``; anything else exits 3.
- Otherwise ``[io.buildpacks] schema-version`` decides: ``0.2`` or ``0.3``, or a Platform API version (the draft
  RFC's form, read with the 0.2 rules and ``[io.buildpacks.defaults]``).
- Otherwise a file with ``[io.buildpacks]`` is read as 0.2 and one without as 0.1, each with a warning.

The result keeps, for every table that contributes properties, how the user spelled its keys, so that a warning
can name ``build.builder`` in a 0.1 file and ``io.buildpacks.builder`` in a 0.2 one.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from preparer._near import closest
from preparer._record import record
from preparer._types import KeyPath, TOMLTable, dotted
from preparer.api import SUPPORTED_PLATFORM_APIS
from preparer.errors import DescriptorError, with_fields
from preparer.files.toml import Document, Places, parse_toml, read_toml

#: Descriptor schemas this preparer reads, keyed to the module-level parser for each.
SUPPORTED_SCHEMAS = ("0.1", "0.2", "0.3")
_VERSION = re.compile(r"^(0|[1-9][0-9]*)(?:\.(0|[1-9][0-9]*))?\Z")


@record
class Layer:
    """One table that contributes properties to the effective configuration, and how its keys were written."""

    #: The table's properties in the ``io.buildpacks`` vocabulary (``group``, ``build.env``, ...).
    properties: TOMLTable
    #: The dotted path of the table as written: ``io.buildpacks``, ``pack``, or ``""`` for 0.1's root.
    prefix: str
    #: The file the table is in, for messages.
    origin: str
    #: ``(normalised key prefix, written key prefix)`` pairs, e.g. ``(("group",), ("build", "buildpacks"))``.
    renames: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
    #: Where the keys of the file the table is in are written (``None``: it was given as a table, not read).
    places: Places | None = None

    def where(self, path: KeyPath) -> tuple[int | None, int | None]:
        """The line and column where ``path`` (or the nearest table or array holding it) is written."""
        return (None, None) if self.places is None else self.places.nearest(self.written(path))

    def spell(self, path: KeyPath) -> str:
        """The dotted key of ``path`` as the user wrote it, arrays by index: ``io.buildpacks.group[0].foo``."""
        return dotted(self.written(path))

    def written(self, path: KeyPath) -> KeyPath:
        """``path`` as the user wrote it, from the document's root: ``("io", "buildpacks", "group", 0, "foo")``."""
        names = list(path)
        for normal, written in sorted(self.renames, key=lambda r: -len(r[0])):
            if tuple(names[: len(normal)]) == normal:
                names = [*written, *names[len(normal) :]]
                break
        return (*(self.prefix.split(".") if self.prefix else ()), *names)


@record
class ProjectDescriptor:
    """A parsed project descriptor: its schema and the tables that hold ``io.buildpacks`` properties."""

    #: The file read, or ``None`` when there was none.
    path: Path | None
    #: The schema as declared (``0.2``, or a Platform API such as ``0.15`` in the RFC form); ``None`` without a file.
    schema_version: str | None
    #: Whether ``exec-env`` on group and env entries is part of the schema (0.3).
    exec_env: bool
    #: The tables holding the defaults, in overlay order (``io.buildpacks``, then ``io.buildpacks.defaults``).
    layers: tuple[Layer, ...]
    #: The whole document, where platform namespace tables are looked up.
    document: TOMLTable
    warnings: tuple[str, ...] = ()
    unapplied: tuple[Unapplied, ...] = ()
    #: Where the file's keys are written (for messages); ``None`` without a file read.
    places: Places | None = None


def empty_descriptor() -> ProjectDescriptor:
    """The descriptor of a project without ``project.toml``: nothing to apply."""
    return ProjectDescriptor(None, None, False, (), {})


def parse_version(text: object, what: str, where: str, supported: str) -> str:
    """``<major>.<minor>`` or ``<major>`` (meaning ``<major>.0``), normalised to ``<major>.<minor>``.

    :param supported: the versions accepted, named in the message of a refusal.
    :raises DescriptorError: for anything else, e.g. ``v0.2`` or ``0.2.0`` (exit 3).
    """
    if not isinstance(text, str):
        raise with_fields(
            DescriptorError(
                f"parse {where}", f"{what} must be a string, not {kind_of(text)}; supported: {supported}"
            ),
            key=what,
        )
    match = _VERSION.match(text)
    if match is None:
        raise with_fields(
            DescriptorError(
                f"parse {where}",
                f"{what} '{text}' is not a version of the form <major>.<minor>; supported: {supported}",
            ),
            key=what,
        )
    return f"{match[1]}.{match[2] or 0}"


def kind_of(value: object) -> str:
    """How messages name the TOML type of ``value``: ``a table``, ``an array``, ``a string``, ``an integer``..."""
    names = {
        dict: "a table",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a float",
    }
    return names.get(type(value), type(value).__name__)


@record
class Unapplied:
    """A property of the effective configuration that the preparer did not apply (found while reading the
    descriptor and the platform file, or when the configuration is applied).

    Attributes:
        key: the dotted key as the user wrote it, e.g. ``io.buildpacks.builder`` or ``pack.builder``.
        reason: why it was not applied (the command's warning says it).
    """

    key: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        """As the report file has it."""
        return {"key": self.key, "reason": self.reason}


#: The reason an unapplied key is given when nothing more specific applies.
NOT_APPLIED = "not applied by the preparer"


def _namespace_typos(document: TOMLTable, platform_namespace: str | None) -> list[str]:
    """Warnings for tables whose names are a typo away from ``io.buildpacks`` or the platform's namespace
    (``[[io.buildpack.group]]``): they are not read, and the builder's defaults would run instead, silently."""
    targets = ["io.buildpacks", *([platform_namespace] if platform_namespace else [])]
    found = []
    for name in _table_names(document, max(t.count(".") for t in targets) + 1):
        if any(name == t or t.startswith(name + ".") or name.startswith(t + ".") for t in targets):
            continue
        meant = closest(name, [t for t in targets if t.count(".") == name.count(".")])
        if meant is not None:
            found.append(f"[{name}] is not read: did you mean [{meant}]?")
    return found


#: The keys of ``[_]`` (project descriptor 0.2 and 0.3): the preparer reads ``schema-version``, ``version`` and
#: ``source-url``; the others are the project's own, other tools read them.
_UNDERSCORE_KEYS = (
    "schema-version", "id", "name", "version", "authors", "documentation-url", "source-url", "licenses",
    "metadata",
)  # fmt: skip


def _underscore_typos(underscore: TOMLTable | None) -> list[str]:
    """Warnings for keys of ``[_]`` a typo away from one of the schema's (``_.schema-verison``): the one the
    preparer reads is then missing, and a descriptor without ``schema-version`` is read as schema 0.1."""
    found = []
    for key in underscore or {}:
        meant = closest(key, _UNDERSCORE_KEYS)
        if meant is not None:
            found.append(f"_.{key} is not read: did you mean _.{meant}?")
    return found


def _table_names(document: Mapping[str, Any], depth: int, prefix: str = "") -> list[str]:
    """The dotted names of the tables of ``document``, ``depth`` levels deep at most."""
    names = []
    for key, value in document.items():
        if isinstance(value, dict):
            name = f"{prefix}{key}"
            names.append(name)
            if depth > 1:
                names += _table_names(value, depth - 1, name + ".")
    return names


def lookup(document: Mapping[str, Any], dotted: str) -> Any:
    """The value at the dotted path ``dotted`` in ``document``, or ``None``."""
    node: Any = document
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _table(document: Mapping[str, Any], dotted: str, where: str) -> TOMLTable | None:
    value = lookup(document, dotted)
    if value is not None and not isinstance(value, dict):
        raise with_fields(
            DescriptorError(f"parse {where}", f"{dotted} must be a table, not {kind_of(value)}"), key=dotted
        )
    return value


def _io_version(declared: object, where: str) -> str:
    """``[io.buildpacks] schema-version``: a descriptor schema (0.2, 0.3) or a supported Platform API (the RFC)."""
    supported = f"descriptor schemas 0.2, 0.3 or a Platform API {SUPPORTED_PLATFORM_APIS[0]}..{SUPPORTED_PLATFORM_APIS[-1]}"
    version = parse_version(declared, "io.buildpacks.schema-version", where, supported)
    if version not in SUPPORTED_SCHEMAS[1:] and version not in {str(v) for v in SUPPORTED_PLATFORM_APIS}:
        cause = f"io.buildpacks.schema-version '{declared}' is not supported; supported: {supported}"
        raise with_fields(DescriptorError(f"parse {where}", cause), key="io.buildpacks.schema-version")
    return version


def parse_descriptor(
    document: TOMLTable,
    path: Path | None = None,
    platform_namespace: str | None = None,
    places: Places | None = None,
) -> ProjectDescriptor:
    """Decide the schema of ``document`` and normalise its ``io.buildpacks`` properties. Pure.

    :param path: the file, for messages only.
    :param platform_namespace: our namespace; when it is a table inside ``io.buildpacks`` it is not a default.
    :param places: where the document's keys are written, when it was read from a file (:func:`read_toml`).
    :raises DescriptorError: unknown schema versions, tables of the wrong type (exit 3).
    """
    where = f"project descriptor {path}" if path else "project descriptor"
    underscore = _table(document, "_", where)
    io = _table(document, "io.buildpacks", where)
    declared = None if underscore is None else underscore.get("schema-version")
    io_declared = None if io is None else io.get("schema-version")
    warnings: list[str] = []

    io_version = None if io_declared is None else _io_version(io_declared, where)
    if declared is not None:
        supported = ", ".join(SUPPORTED_SCHEMAS)
        schema = parse_version(declared, "_.schema-version", where, supported)
        if schema not in SUPPORTED_SCHEMAS:
            cause = f"schema-version '{declared}' is not supported; supported versions: {supported}"
            raise with_fields(DescriptorError(f"parse {where}", cause), key="_.schema-version")
        shown = str(declared)
    elif io_version is not None:
        schema = io_version if io_version in SUPPORTED_SCHEMAS else "0.2"
        shown = str(io_declared)
    elif io is not None:
        schema = shown = "0.2"
        warnings.append(
            "No schema version declared in project.toml, reading [io.buildpacks] as schema version 0.2"
        )
    else:
        schema = shown = "0.1"
        if document:
            warnings.append("No schema version declared in project.toml, defaulting to schema version 0.1")

    warnings += _namespace_typos(document, platform_namespace)
    warnings += _underscore_typos(underscore)
    origin = str(path) if path else "project.toml"
    if schema == "0.1":
        layers, unapplied = _parse_v01(document, io, origin, platform_namespace)
    else:
        layers, unapplied = _parse_v02(document, io, schema, origin, platform_namespace)
    layers = [replace(layer, places=places) for layer in layers] if places is not None else layers
    return ProjectDescriptor(
        path, shown, schema == "0.3", tuple(layers), document, tuple(warnings), tuple(unapplied), places
    )


#: How 0.1's ``[build]`` keys map onto the ``io.buildpacks`` vocabulary.
_V01_RENAMES: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = (
    (("group",), ("build", "buildpacks")),
    (("pre", "group"), ("build", "pre", "buildpacks")),
    (("post", "group"), ("build", "post", "buildpacks")),
    (("include",), ("build", "include")),
    (("exclude",), ("build", "exclude")),
    (("builder",), ("build", "builder")),
)


def _parse_v01(
    document: TOMLTable, io: TOMLTable | None, origin: str, namespace: str | None
) -> tuple[list[Layer], list[Unapplied]]:
    build = _table(document, "build", origin) or {}
    properties: TOMLTable = {}
    for normal, written in _V01_RENAMES:
        value = lookup(build, ".".join(written[1:]))
        if value is not None:
            _put(properties, normal, value)
    for key, value in build.items():
        if key in ("buildpacks", "include", "exclude", "builder"):
            continue
        if key in ("pre", "post") and isinstance(value, dict):
            rest = {k: copy.deepcopy(v) for k, v in value.items() if k != "buildpacks"}
            if rest:
                properties.setdefault("build", {})[key] = rest
            continue
        # Other keys keep their place under "build", so env applies and unknown ones warn as build.<key>.
        properties.setdefault("build", {})[key] = copy.deepcopy(value)
    unapplied = [
        Unapplied(
            f"io.buildpacks.{key}", 'schema version 0.1 reads [build]; declare [_] schema-version = "0.2"'
        )
        for key in (io or {})
        if not _is_namespace(io or {}, key, namespace)
    ]
    return [Layer(properties, "", origin, _V01_RENAMES)], unapplied


def _parse_v02(
    document: TOMLTable, io: TOMLTable | None, schema: str, origin: str, namespace: str | None
) -> tuple[list[Layer], list[Unapplied]]:
    io = copy.deepcopy(io or {})
    unapplied: list[Unapplied] = []
    direct: TOMLTable = {}
    defaults: TOMLTable | None = None
    for key, value in io.items():
        if key == "schema-version" or _is_namespace(io, key, namespace):
            continue
        if key == "defaults" and isinstance(value, dict):
            defaults = value
            continue
        direct[key] = value
    renames: tuple[tuple[tuple[str, ...], tuple[str, ...]], ...] = ()
    legacy = lookup(direct, "env.build")
    if legacy is not None:
        if schema == "0.2" and lookup(direct, "build.env") is None:
            # 0.2 renamed io.buildpacks.env.build to io.buildpacks.build.env; the old key is still read alone.
            env_table = direct.pop("env")
            rest = {k: v for k, v in env_table.items() if k != "build"}
            if rest:
                direct["env"] = rest
            build = direct.setdefault("build", {})
            if isinstance(build, dict):
                build["env"] = legacy
            renames = ((("build", "env"), ("env", "build")),)
        else:
            reason = (
                "[[io.buildpacks.build.env]] is set and takes its place"
                if schema == "0.2"
                else "schema version 0.3 reads [[io.buildpacks.build.env]]"
            )
            unapplied.append(Unapplied("io.buildpacks.env.build", reason))
            env_table = direct["env"]
            if isinstance(env_table, dict):
                env_table.pop("build")
                if not env_table:
                    del direct["env"]
    layers = [Layer(direct, "io.buildpacks", origin, renames)]
    if defaults is not None:
        layers.append(Layer(defaults, "io.buildpacks.defaults", origin))
    # A 0.1 [build] table in a newer file is a mistake worth naming, not a silent no-op (pack stays silent):
    # say which key the newer schema reads instead.
    build = _table(document, "build", origin) or {}
    for key, value in build.items():
        unapplied.append(Unapplied(f"build.{key}", f"schema version {schema} reads {_v02_key(key, value)}"))
    return layers, unapplied


def _v02_key(key: str, value: object) -> str:
    """Where schema 0.2 reads what 0.1 reads at ``[build] <key>``."""
    if key == "env":
        return "[[io.buildpacks.build.env]]"
    for normal, written in _V01_RENAMES:
        if written[1:] == (key,):
            return f"[[io.buildpacks.{normal[0]}]]" if normal == ("group",) else f"io.buildpacks.{normal[0]}"
    if key in ("pre", "post") and isinstance(value, dict) and "buildpacks" in value:
        return f"[[io.buildpacks.{key}.group]]"
    return "[io.buildpacks]"


def _is_namespace(io: TOMLTable, key: str, namespace: str | None) -> bool:
    """Whether ``io.buildpacks.<key>`` is a platform's namespace rather than a property: it has its own
    ``schema-version``, is ``io.buildpacks.pack``, or is the namespace given."""
    value = io.get(key)
    return isinstance(value, dict) and (
        "schema-version" in value or key == "pack" or namespace == f"io.buildpacks.{key}"
    )


def _put(table: TOMLTable, path: Sequence[str], value: Any) -> None:
    for name in path[:-1]:
        table = table.setdefault(name, {})
    table[path[-1]] = value


def load_descriptor(
    path: Path,
    *,
    explicit: bool,
    platform_namespace: str | None = None,
    data: str | bytes | Mapping[str, Any] | None = None,
) -> ProjectDescriptor:
    """Read and parse the descriptor at ``path``, or the one given as ``data`` (``path`` then only names it).

    :param explicit: whether the user named the file; a missing default file means nothing to apply.
    :param data: the descriptor's TOML text, or its tables (:func:`descriptor_document`).
    :raises DescriptorError: a missing explicit file, unreadable or invalid TOML, an unsupported schema (exit 3).
    """
    if data is not None:
        read = descriptor_document(data, str(path))
    elif not explicit and not path.exists():
        return empty_descriptor()
    else:
        read = read_toml(path, "project descriptor")
    try:
        return parse_descriptor(read.table, path, platform_namespace, read.places)
    except DescriptorError as err:
        raise located(err, str(path), read.places) from None


def descriptor_document(data: str | bytes | Mapping[str, Any], name: str) -> Document:
    """A descriptor given as data, read as a file is (:func:`preparer.files.toml.parse_toml`: the same bounds and
    problems): its TOML text, or its tables as a TOML parser gives them, which are written as TOML and read back
    (anything TOML cannot hold is refused). A mapping has no lines: its problems are located by key alone
    (``io.buildpacks.group[2].uri``).

    :raises DescriptorError: as reading a file (exit 3).
    """
    if isinstance(data, str | bytes):
        return parse_toml(data, name, "project descriptor")
    read = parse_toml(descriptor_text(data), name, "project descriptor")
    return Document(read.table, Places("", {}), name)


def descriptor_text(tables: Mapping[str, Any]) -> str:
    """A descriptor's tables as the TOML text read in their place.

    :raises DescriptorError: a value TOML cannot hold (``None``, a set, a key that is not a string).
    """
    from preparer.files.toml import dumps_toml  # deferred: only a descriptor given as tables is written

    try:
        return dumps_toml(dict(tables))
    except (TypeError, ValueError) as err:
        raise DescriptorError("read project descriptor", f"the tables given are not TOML: {err}") from None


def located(error: DescriptorError, path: str, places: Places) -> DescriptorError:
    """``error`` (about the key ``error.key`` of the file ``path``) with where the key is written."""
    line, column = places.nearest(tuple(error.key.split(".")) if error.key else ())
    return with_fields(error, path=path, line=line, column=column)
