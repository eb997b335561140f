"""The effective configuration: the defaults overlaid with the platform's namespace, checked and typed. Pure.

``effective_config`` takes the normalised ``io.buildpacks`` properties, then the platform
namespace table of project.toml, then the platform file's table, merged per RFC 7396 (:mod:`preparer.overlay`).
It then checks every applied property (violations exit 3) and names every property it will not apply
(:class:`~preparer.report.Unapplied`), spelled as the user wrote it in the file that last set it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from preparer._near import closest
from preparer._record import field, record
from preparer._types import KeyPath, TOMLTable
from preparer.api import APIVersion
from preparer.descriptor import (
    NOT_APPLIED,
    Layer,
    ProjectDescriptor,
    Unapplied,
    kind_of,
    located,
    lookup,
)
from preparer.entries import EnvEntry, GroupEntry, Script
from preparer.errors import DescriptorError, InvalidInputsError, with_fields
from preparer.files.buildpack import check_id, version_problem
from preparer.overlay import merge, nulls_from_empty_tables
from preparer.values import (
    UriProblem,
    entry_locator,
    env_name_problem,
    pattern_problem,
    version_range_problem,
)

if TYPE_CHECKING:
    from preparer.files.toml import Document, Places

T = TypeVar("T")


@record
class EffectiveConfig:
    """What the preparer applies, and what it will not."""

    #: The merged properties, as written to the report's ``[effective]`` table.
    properties: TOMLTable = field(default_factory=dict)
    group: tuple[GroupEntry, ...] | None = None
    pre: tuple[GroupEntry, ...] | None = None
    post: tuple[GroupEntry, ...] | None = None
    env: tuple[EnvEntry, ...] | None = None
    include: tuple[str, ...] | None = None
    exclude: tuple[str, ...] | None = None
    #: The key of include/exclude as written, for messages.
    filter_key: str = ""
    unapplied: tuple[Unapplied, ...] = ()
    warnings: tuple[str, ...] = ()
    #: Debug-level notes (entries left out by ``exec-env``).
    notes: tuple[str, ...] = ()

    @property
    def writes_order(self) -> bool:
        """``<layers>/order.toml`` is written only when a group, pre or post group is given."""
        return self.group is not None or self.pre is not None or self.post is not None


def platform_layers(
    descriptor: ProjectDescriptor, namespace: str | None, platform_file: Document | None = None
) -> tuple[list[Layer], list[str]]:
    """The patches laid over the defaults, as layers: the namespace table of project.toml, then the platform
    file's table (``[pack]`` for ``io.buildpacks.pack``, or the whole dotted name); and warnings about them.

    :param platform_file: the platform file (``-platform-config``), read (:func:`preparer.files.toml.read_toml`).
    :raises InvalidInputsError: a platform file without a namespace, or a namespace that is not a table (exit 3).
    """
    layers: list[Layer] = []
    warnings: list[str] = []
    if namespace is None:
        if platform_file is not None:
            raise InvalidInputsError("read platform config", "-platform-config needs -platform-namespace")
        return layers, warnings
    table = lookup(descriptor.document, namespace)
    if table is not None:
        origin = str(descriptor.path or "project.toml")
        layers.append(_patch_layer(table, namespace, origin, descriptor.places))
    if platform_file is not None:
        short = namespace.rsplit(".", 1)[-1]
        for name in (short, namespace):
            table = lookup(platform_file.table, name)
            if table is not None:
                layers.append(_patch_layer(table, name, platform_file.name, platform_file.places))
                break
        else:
            warnings.append(
                f"{platform_file.name} has no [{short}] or [{namespace}] table; nothing to overlay"
            )
    return layers, warnings


def _patch_layer(table: object, prefix: str, origin: str, places: Places | None) -> Layer:
    if not isinstance(table, dict):
        error = with_fields(DescriptorError(f"read {origin}", f"{prefix} must be a table"), key=prefix)
        raise located(error, origin, places) if places is not None else with_fields(error, path=origin)
    # The table's own schema-version is its version, not a property.
    properties = {k: v for k, v in table.items() if k != "schema-version"}
    return Layer(nulls_from_empty_tables(properties) or {}, prefix, origin, places=places)


def effective_config(
    descriptor: ProjectDescriptor,
    patches: Sequence[Layer] = (),
    exec_env: str = "production",
    *,
    base_dir: Path | None = None,
    exists: Callable[[Path], bool] | None = None,
) -> EffectiveConfig:
    """Overlay ``patches`` onto the descriptor's defaults, then check and type the result.

    :param exec_env: the build's execution environment; schema 0.3 entries whose ``exec-env`` lacks it are left out.
    :param base_dir: where relative ``uri`` paths resolve (the descriptor's directory by default).
    :param exists: whether a path is there: a ``uri`` without a scheme names a path when one of its name is in
        ``base_dir`` (:func:`preparer.fetch.locator.parse_locator`). By default none is: nothing is read.
    :raises DescriptorError: the first problem in the files' order (the descriptor's, then the platform file's),
        line by line, with every problem found in ``problems`` (exit 3).
    """
    config, reader = _read(descriptor, patches, exec_env, base_dir, exists)
    if reader.problems:
        problems = reader.in_file_order()
        raise with_fields(problems[0], problems=problems)
    return config


def config_problems(
    descriptor: ProjectDescriptor,
    patches: Sequence[Layer] = (),
    exec_env: str = "production",
    *,
    base_dir: Path | None = None,
    exists: Callable[[Path], bool] | None = None,
) -> tuple[DescriptorError, ...]:
    """Every problem of the effective configuration (:func:`effective_config`), in the files' order."""
    return _read(descriptor, patches, exec_env, base_dir, exists)[1].in_file_order()


def _nothing_exists(_: Path) -> bool:
    return False


def _read(
    descriptor: ProjectDescriptor,
    patches: Sequence[Layer],
    exec_env: str,
    base_dir: Path | None,
    exists: Callable[[Path], bool] | None,
) -> tuple[EffectiveConfig, _Reader]:
    layers = (*descriptor.layers, *patches)
    properties: TOMLTable = merge({}, *(layer.properties for layer in layers)) if layers else {}
    if base_dir is None:
        base_dir = descriptor.path.parent if descriptor.path is not None else Path()
    reader = _Reader(layers, descriptor.exec_env, exec_env, base_dir, exists or _nothing_exists)
    config = reader.read(properties)
    return EffectiveConfig(
        properties=properties,
        group=config["group"],
        pre=config["pre"],
        post=config["post"],
        env=config["env"],
        include=config["include"],
        exclude=config["exclude"],
        filter_key=config["filter_key"],
        unapplied=(*descriptor.unapplied, *reader.unapplied),
        warnings=(*descriptor.warnings, *reader.warnings),
        notes=tuple(reader.notes),
    ), reader


_ENTRY_KEYS = frozenset({"id", "version", "uri", "script"})
#: The keys the preparer reads, by the table they are in (for "did you mean" when one is mistyped).
_KNOWN_KEYS: dict[tuple[str, ...], tuple[str, ...]] = {
    (): ("group", "include", "exclude", "build", "pre", "post", "builder"),
    ("build",): ("env",),
    ("pre",): ("group",),
    ("post",): ("group",),
}
_SCRIPT_KEYS = frozenset({"api", "inline", "shell"})
_ENV_KEYS = frozenset({"name", "value"})


class _Invalid(Exception):
    """A problem found (and recorded in the reader's ``problems``): the walk goes on with the next entry."""


class _Reader:
    """Walks the merged properties once: checks applied keys, records the others as unapplied, and every problem
    (each entry, key and pattern is checked on its own, so one problem hides no other)."""

    def __init__(
        self,
        layers: Sequence[Layer],
        exec_env_supported: bool,
        exec_env: str,
        base_dir: Path,
        exists: Callable[[Path], bool],
    ) -> None:
        self.layers = layers
        self.base_dir, self.exists = base_dir, exists
        self.exec_env_supported = exec_env_supported
        self.exec_env = exec_env
        self.unapplied: list[Unapplied] = []
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.problems: list[DescriptorError] = []

    def spell(self, path: KeyPath) -> str:
        """``path`` as written in the last layer that set it."""
        return spelled(self.layers, path)

    def origin(self, path: KeyPath) -> str:
        """The file that last set ``path``."""
        for layer in reversed(self.layers):
            if _has_path(layer.properties, path):
                return layer.origin
        return self.layers[-1].origin if self.layers else "project.toml"

    def fail(self, path: KeyPath, problem: str, *, keyed: bool = True) -> _Invalid:
        """Record a validation error naming the file and the key as written (``keyed``: the cause starts with the
        key), where it is; what is returned, raised, ends the check of this entry."""
        origin, spelled = self.origin(path), self.spell(path)
        line, column = self.where(path)
        error = DescriptorError(f"validate {origin}", f"{spelled}: {problem}" if keyed else problem)
        self.problems.append(with_fields(error, path=origin, key=spelled, line=line, column=column))
        return _Invalid()

    def lookalike(self, path: KeyPath, value: str) -> str:
        """``: its character 'о' is U+043E (CYRILLIC SMALL LETTER O), not a Latin letter (line 5)`` when ``value``
        (at ``path``) holds a character that is not ASCII, for a message; else nothing."""
        from preparer._lookalike import first_lookalike  # deferred: only a value not in ASCII needs it

        found = first_lookalike(value)
        if found is None:
            return ""
        line = self.where(path)[0]
        return f": its character {value[found[0]]!r} is {found[1]}" + (f" (line {line})" if line else "")

    def where(self, path: KeyPath) -> tuple[int | None, int | None]:
        """The line and column where ``path`` (or the nearest table or array holding it) is written."""
        for layer in reversed(self.layers):
            if _has_path(layer.properties, path):
                return layer.where(path)
        return None, None

    def in_file_order(self) -> tuple[DescriptorError, ...]:
        """The problems, the descriptor's first, each file's by line (one without a line last)."""
        files = list(dict.fromkeys(layer.origin for layer in self.layers))
        return tuple(
            sorted(
                self.problems,
                key=lambda e: (files.index(e.path) if e.path in files else len(files), e.line or 1 << 30,
                               e.column or 0),
            )
        )  # fmt: skip

    def attempt(self, check: Callable[..., T], *args: Any) -> T | None:
        """``check(*args)``, or ``None`` when it found a problem (recorded): the walk goes on."""
        try:
            return check(*args)
        except _Invalid:
            return None

    def unknown_keys(self, table: Mapping[str, Any], path: KeyPath, known: tuple[str, ...]) -> None:
        """Every key of ``table`` (at ``path``) that is not ``known`` is not applied; one a typo or two from a known
        key says which (``io.buildpacks.group[1].url``: did you mean ``...group[1].uri``?)."""
        for key in table:
            if key not in known:
                meant = closest(key, sorted(known), most=_edits(key))
                self.skip(
                    (*path, key),
                    NOT_APPLIED if meant is None else f"did you mean {self.spell(path)}.{meant}?",
                )

    def skip(self, path: KeyPath, reason: str = NOT_APPLIED) -> None:
        self.unapplied.append(Unapplied(self.spell(path), reason))

    def read(self, props: TOMLTable) -> dict[str, Any]:
        out: dict[str, Any] = {"group": None, "pre": None, "post": None, "env": None}
        for key, value in props.items():
            path: KeyPath = (key,)
            if key == "group":
                group = self.attempt(self.group, value, path)
                out["group"] = group or (None if group is None else self.empty_group(path))  # () is no group
            elif key in ("pre", "post"):
                for sub, subvalue in (self.attempt(self.table, value, path) or {}).items():
                    if sub == "group":
                        out[key] = self.attempt(self.group, subvalue, (*path, sub))
                    else:
                        self.skip((*path, sub), self.misplaced((*path, sub)))
            elif key == "build":
                for sub, subvalue in (self.attempt(self.table, value, path) or {}).items():
                    if sub == "env":
                        out["env"] = self.attempt(self.env, subvalue, (*path, sub))
                    else:
                        self.skip((*path, sub), self.misplaced((*path, sub)))
            elif key not in ("include", "exclude"):
                self.skip(path, self.misplaced(path))
        out["include"] = self.attempt(self.patterns, props, "include")
        out["exclude"] = self.attempt(self.patterns, props, "exclude")
        if out["include"] is not None and out["exclude"] is not None:
            both = f"{self.spell(('include',))} and {self.spell(('exclude',))} cannot both be set"
            self.fail(("exclude",), both, keyed=False)
        out["filter_key"] = self.spell(("include",) if out["include"] is not None else ("exclude",))
        return out

    def table(self, value: object, path: KeyPath) -> TOMLTable:
        if not isinstance(value, dict):
            raise self.fail(path, f"must be a table, not {kind_of(value)}")
        return value

    def misplaced(self, path: KeyPath) -> str:
        """The reason an unapplied key gets: where it belongs when it looks like a known key misplaced, or which
        known key it is a typo of."""
        normal = _MISPLACED.get(tuple(str(p) for p in path))
        if normal is None:
            parent = tuple(str(p) for p in path[:-1])
            meant = closest(str(path[-1]), _KNOWN_KEYS.get(parent, ()))
            return NOT_APPLIED if meant is None else f"did you mean {self.written_as((*parent, meant))}?"
        written = self.written_as(normal)
        return f"did you mean [[{written}]]?" if normal in _ARRAYS else f"did you mean {written}?"

    def written_as(self, normal: tuple[str, ...]) -> str:
        """How ``normal`` is written in the layer that set the key at hand (the last one)."""
        return self.layers[-1].spell(normal) if self.layers else ".".join(normal)

    def array_of_tables(self, value: object, path: KeyPath) -> list[TOMLTable]:
        if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
            problem = f"must be an array of tables, not {kind_of(value)}"
            if isinstance(value, dict):
                # [build.env] or [io.buildpacks.group] written as one table: show the form that works.
                fields = "name and value" if path[-1] == "env" else "id, uri or script"
                problem += f"; write one [[{self.spell(path)}]] table (with {fields}) per entry"
            raise self.fail(path, problem)
        return value

    def string(
        self, table: Mapping[str, Any], key: str, path: KeyPath, *, required: bool = False
    ) -> str | None:
        value = table.get(key)
        if value is None:
            if required:
                typo = next((k for k in table if closest(k, [key], most=_edits(k))), None)
                raise self.fail(
                    path,
                    f"{key} is required" + (f" ({typo} is written: did you mean {key}?)" if typo else ""),
                )
            return None
        if not isinstance(value, str):
            raise self.fail((*path, key), f"must be a string, not {kind_of(value)}")
        return value

    def patterns(self, props: TOMLTable, key: str) -> tuple[str, ...] | None:
        value = props.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail((key,), f"must be an array of strings, not {kind_of(value)}")
        problems = [
            self.fail((key, i), problem) for i, p in enumerate(value) if (problem := pattern_problem(p))
        ]
        if problems:
            raise problems[0]
        return tuple(value)

    def keeps(self, table: Mapping[str, Any], path: KeyPath) -> bool:
        """Whether an entry applies to this build's execution environment (``exec-env``, schema 0.3)."""
        if "exec-env" not in table:
            return True
        if not self.exec_env_supported:
            self.skip((*path, "exec-env"), "exec-env needs schema version 0.3")
            return True
        value = table["exec-env"]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail((*path, "exec-env"), f"must be an array of strings, not {kind_of(value)}")
        if self.exec_env in value or "*" in value:
            return True
        self.notes.append(f"{self.spell(path)} is left out: exec-env does not include '{self.exec_env}'")
        return False

    def group(self, value: object, path: KeyPath) -> tuple[GroupEntry, ...]:
        before = len(self.problems)
        entries = []
        for index, item in enumerate(self.array_of_tables(value, path)):
            entry_path = (*path, index)
            self.unknown_keys(item, entry_path, (*_ENTRY_KEYS, "exec-env"))
            if self.attempt(self.keeps, item, entry_path):
                entries.append(self.attempt(self.entry, item, entry_path))
        if len(self.problems) > before:
            raise _Invalid()
        return tuple(e for e in entries if e is not None)

    def empty_group(self, path: KeyPath) -> tuple[GroupEntry, ...] | None:
        """A group with no entry left is no group (``None``): the builder's order is used (as pack does), with a
        warning, for an order with one empty group would build nothing."""
        self.warnings.append(
            f"{self.spell(path)} has no entry (for this build); it is treated as absent: the builder's order is used"
        )
        return None

    def entry(self, item: TOMLTable, path: KeyPath) -> GroupEntry:
        bp_id = self.string(item, "id", path)
        version = self.string(item, "version", path)
        uri = self.string(item, "uri", path)
        script = None
        if "script" in item:
            script = self.script(item["script"], (*path, "script"))
        if uri is not None and version is not None:
            raise self.fail(path, "uri and version cannot both be set")
        if script is not None and uri is not None:
            raise self.fail(path, "script cannot be combined with uri")
        if script is not None and bp_id is None:
            raise self.fail(path, "an inline buildpack (script) needs an id")
        if bp_id is None and uri is None and script is None:
            raise self.fail(path, "an entry needs an id, a uri or a script")
        if bp_id is not None and not check_id(bp_id):
            raise self.fail(
                (*path, "id"), f"{bp_id!r} is not a valid buildpack id{self.lookalike((*path, 'id'), bp_id)}"
            )
        if version is not None:
            problem = version_range_problem(version) or version_problem(version)
            if problem:
                raise self.fail((*path, "version"), problem)
        if uri is not None:
            found = entry_locator(uri, bp_id, self.base_dir, self.exists)
            if isinstance(found, UriProblem):
                where = (*path, "uri") if found.on_uri else path
                raise self.fail(where, f"{self.spell(path)}{found.detail}", keyed=False)
        return GroupEntry(self.spell(path), bp_id, version, uri, script, self.origin(path))

    def script(self, value: object, path: KeyPath) -> Script:
        """An inline buildpack's ``script`` table, checked as far as it can be without writing anything."""
        table = self.table(value, path)
        self.unknown_keys(table, path, tuple(_SCRIPT_KEYS))
        api = self.string(table, "api", path, required=True) or ""
        inline = self.string(table, "inline", path, required=True) or ""
        shell = self.string(table, "shell", path)
        try:
            APIVersion.parse(api)
        except ValueError:
            raise self.fail((*path, "api"), f"'{api}' is not a version") from None
        if shell is not None and ("\n" in shell or not shell.strip()):
            raise self.fail((*path, "shell"), "must be a single non-empty line")
        first = inline.lstrip().partition("\n")[0]
        if (
            shell is None
            and first.startswith("#!")
            and first[2:].strip() not in ("/bin/sh", "/usr/bin/env sh")
        ):
            # The generated bin/build starts with #!/bin/sh; the script's own #! line is then a comment.
            self.warnings.append(
                f"{self.spell(path)}: the script starts with '{first.strip()}' but runs under /bin/sh "
                f'(the default shell); set shell = "{first[2:].strip()}" to run it with that interpreter'
            )
        return Script(api=api, inline=inline, shell=shell or "/bin/sh")

    def env(self, value: object, path: KeyPath) -> tuple[EnvEntry, ...]:
        before = len(self.problems)
        entries: dict[str, EnvEntry] = {}
        for index, item in enumerate(self.array_of_tables(value, path)):
            entry = self.attempt(self.env_entry, item, (*path, index))
            if entry is None:
                continue
            if entry.name in entries:
                self.warnings.append(f"{entry.key} sets {entry.name} again; the last value wins")
                del entries[entry.name]
            entries[entry.name] = entry
        if len(self.problems) > before:
            raise _Invalid()
        return tuple(entries.values())

    def env_entry(self, item: TOMLTable, path: KeyPath) -> EnvEntry | None:
        """One ``build.env`` entry; ``None`` when ``exec-env`` leaves it out."""
        self.unknown_keys(item, path, (*_ENV_KEYS, "exec-env"))
        name = self.string(item, "name", path, required=True) or ""
        raw = item.get("value")
        if raw is None:
            raise self.fail(path, "value is required")
        if not isinstance(raw, str):  # located at the value's own line, as a name's is
            raise self.fail((*path, "value"), f"must be a string, not {kind_of(raw)}")
        bad_name = env_name_problem(name)
        if bad_name:
            raise self.fail((*path, "name"), bad_name)
        if not self.keeps(item, path):
            return None
        return EnvEntry(self.spell(path), name, raw)


def spelled(layers: Sequence[Layer], path: KeyPath) -> str:
    """``path`` as written in the last of ``layers`` that sets it: ``io.buildpacks.pack.group[0]``."""
    for layer in reversed(layers):
        if _has_path(layer.properties, path):
            return layer.spell(path)
    return ".".join(str(p) for p in path)


def _edits(word: str) -> int:
    """How many edits a key may be from a known one to be called its typo: one for a short key ("x" is no typo of
    "id"), two otherwise."""
    return 1 if len(word) <= 4 else 2


#: Keys written where they are not read, and the key (in the same table's vocabulary) that is meant.
_MISPLACED: dict[tuple[str, ...], tuple[str, ...]] = {
    ("env",): ("build", "env"),
    ("buildpacks",): ("group",),
    ("build", "buildpacks"): ("group",),
    ("build", "include"): ("include",),
    ("build", "exclude"): ("exclude",),
    ("build", "group"): ("group",),
    ("pre", "buildpacks"): ("pre", "group"),
    ("post", "buildpacks"): ("post", "group"),
}
#: The keys whose values are arrays of tables, written ``[[key]]``.
_ARRAYS = frozenset({("build", "env"), ("group",), ("pre", "group"), ("post", "group")})


def _has_path(node: Any, path: KeyPath) -> bool:
    for part in path:
        if isinstance(part, int):
            if not isinstance(node, list) or part >= len(node):
                return False
        elif not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True
