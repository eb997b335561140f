"""The platform's lists, the configuration's last layer: ``-buildpack``, ``-pre-buildpack``, ``-post-buildpack``,
``-env`` and ``-env-file`` (``Inputs.buildpacks``, ``pre_buildpacks``, ``post_buildpacks``, ``build_env``,
``env_files``), as pack takes them (docs/decisions.md, "Platforms that hold lists"):

- the ``-buildpack`` entries together replace the group the files give (the descriptor's, its platform namespace's,
  the platform file's); ``-pre-buildpack`` and ``-post-buildpack`` replace the pre and post groups, which wrap the
  group, or each group of the builder's order, as the files' do;
- the build env: the files' first, then each env file in order, then ``-env``; a later value of a name wins;
- every entry of the files that a list replaces is a warning naming the list (an
  :class:`~preparer.descriptor.Unapplied`), and what a list replaces is not checked, as a patch's overlay does.

An entry is named by its list and position (``-buildpack[1]``, ``-env[0]``; an env file's line as
``<path>:<line>``) wherever a file's entry is named by its key: messages, the plan, the lock, the report, the
provenance. Each is checked as a file's entry is (:func:`preparer.values.entry_locator`,
:func:`preparer.values.env_name_problem`); a problem is a :class:`~preparer.errors.DescriptorError` whose ``field`` is
the ``Inputs`` field and ``key`` the entry, said with the form the list takes.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from preparer._record import record
from preparer._types import KeyPath, TOMLTable
from preparer.config import EffectiveConfig, config_problems, effective_config, spelled
from preparer.descriptor import Layer, ProjectDescriptor, Unapplied, lookup
from preparer.entries import EnvEntry, GroupEntry
from preparer.errors import DescriptorError, with_fields
from preparer.files.buildpack import check_id, version_problem
from preparer.overlay import merge
from preparer.values import UriProblem, entry_locator, env_name_problem, version_range_problem

if TYPE_CHECKING:
    from preparer.inputs import Inputs

#: Each list of buildpacks: the group it gives (the configuration's name), the key it replaces, its flag, its
#: ``Inputs`` field.
GROUPS: tuple[tuple[str, KeyPath, str, str], ...] = (
    ("group", ("group",), "-buildpack", "buildpacks"),
    ("pre", ("pre", "group"), "-pre-buildpack", "pre_buildpacks"),
    ("post", ("post", "group"), "-post-buildpack", "post_buildpacks"),
)
#: What a buildpack list takes, for messages.
FORMS = (
    "<id>[@<version>], urn:cnb:builder:<id>, urn:cnb:registry:<id>, docker://<image>, an image, an http(s) or "
    "file URL, or a path from <app>"
)
ENV_FORMS = "NAME=VALUE, or NAME for the value the preparer's environment has"
#: A buildpack named by its id alone (no ``/``, scheme or tag), as pack takes a builder's buildpack: ``my-bp@1.0``.
_BUILDER_ID = r"([A-Za-z0-9._-]+)(?:@(.*))?"  # compiled by re's cache: most runs have no list flag


@record
class Lists:
    """The lists a run is given (:func:`lists_of`); each empty when not given."""

    buildpacks: tuple[str, ...] = ()
    pre_buildpacks: tuple[str, ...] = ()
    post_buildpacks: tuple[str, ...] = ()
    #: ``NAME=VALUE`` or ``NAME`` (the value the environment has), as ``-env`` takes them.
    build_env: tuple[str, ...] = ()
    env_files: tuple[Path, ...] = ()

    @property
    def given(self) -> bool:
        """Whether any list is given."""
        return any(
            (self.buildpacks, self.pre_buildpacks, self.post_buildpacks, self.build_env, self.env_files)
        )


def lists_of(inputs: Inputs) -> Lists:
    """The lists ``inputs`` give."""
    return Lists(
        inputs.buildpacks, inputs.pre_buildpacks, inputs.post_buildpacks, inputs.build_env, inputs.env_files
    )


@record
class ListsRead:
    """The lists read: their entries, in order, and what is wrong with them."""

    #: The entries of each buildpack list given, by the configuration's name (``group``, ``pre``, ``post``).
    groups: dict[str, tuple[GroupEntry, ...]]
    #: The env files' variables, then ``-env``'s, in order (a name may come more than once).
    env: tuple[EnvEntry, ...] = ()
    problems: tuple[DescriptorError, ...] = ()
    warnings: tuple[str, ...] = ()


def read_lists(
    lists: Lists, base_dir: Path, environ: Mapping[str, str], exists: Callable[[Path], bool]
) -> ListsRead:
    """Every entry of ``lists``, and every problem of them (each list's in its order; an env file is read).

    :param base_dir: where a relative path in a buildpack list is (``<app>``).
    :param environ: where ``NAME`` alone takes its value from (the run's environment).
    :param exists: whether a path is there (a ``uri`` without a scheme names a path when one of its name is).
    """
    groups: dict[str, tuple[GroupEntry, ...]] = {}
    problems: list[DescriptorError] = []
    warnings: list[str] = []
    for name, _, flag, field in GROUPS:
        refs: tuple[str, ...] = getattr(lists, field)
        if refs:
            groups[name] = _buildpacks(flag, field, refs, base_dir, exists, problems, warnings)
    env: list[EnvEntry] = []
    for index, file in enumerate(lists.env_files):
        if file in lists.env_files[:index]:
            warnings.append(
                f"-env-file[{index}] {file} is given again (as -env-file[{lists.env_files.index(file)}])"
            )
        env += _env_file(index, file, environ, problems, warnings)
    for index, item in enumerate(lists.build_env):
        name, equals, value = item.partition("=")
        entry = _variable(
            f"-env[{index}]", item, name, value if equals else None, environ, problems, warnings
        )
        if entry is not None:
            env.append(entry)
    return ListsRead(groups, tuple(env), tuple(problems), tuple(warnings))


def _buildpacks(
    flag: str, field: str, refs: Sequence[str], base_dir: Path, exists: Callable[[Path], bool],
    problems: list[DescriptorError], warnings: list[str],
) -> tuple[GroupEntry, ...]:  # fmt: skip
    """The entries of one buildpack list; its problems and warnings added to theirs."""
    entries = []
    first: dict[str, int] = {}
    for index, ref in enumerate(refs):
        key = f"{flag}[{index}]"
        found = _entry(flag, key, ref, base_dir, exists)
        if isinstance(found, str):
            problems.append(_refusal(flag, field, key, ref, found))
            continue
        if ref in first:
            warnings.append(
                f"{key} names {_shown(ref)} again (as {flag}[{first[ref]}]): the group holds it twice"
            )
        first.setdefault(ref, index)
        entries.append(found)
    return tuple(entries)


def _entry(flag: str, key: str, ref: str, base_dir: Path, exists: Callable[[Path], bool]) -> GroupEntry | str:
    """The entry ``ref`` makes (a ``uri``; an ``id`` and ``version`` for a builder's buildpack named by its id), or why
    it is refused."""
    # Deferred: only runs given a list need the fetch package.
    from preparer.fetch.locator import ARCHIVE_SUFFIXES

    if not ref.strip():
        return "is empty: name a buildpack, or leave the flag out"
    if ref == "from=builder" or ref.rstrip(":") == "urn:cnb:builder":
        return (
            "pack's splice of the builder's order, which the preparer does not read: without -buildpack, "
            "-pre-buildpack and -post-buildpack wrap every group of the builder's order"
        )
    local = ref.startswith((".", "/")) or ref.endswith(("/", *ARCHIVE_SUFFIXES)) or exists(base_dir / ref)
    bare = re.fullmatch(_BUILDER_ID, ref)
    if bare is not None and not local:
        bp_id, version = bare[1], bare[2]
        if not check_id(bp_id):
            return f"'{bp_id}' is not a valid buildpack id"
        problem = None if version is None else version_range_problem(version) or version_problem(version)
        return problem or GroupEntry(key, bp_id, version, None, None, flag)
    found = entry_locator(ref, None, base_dir, exists)
    if not isinstance(found, UriProblem):
        return GroupEntry(key, None, None, ref, None, flag)
    if ref != ref.strip():
        return f"{found.cause} (it has spaces around it: items are kept as written, as pack keeps them)"
    if "," in ref and flag != "-buildpack":
        return f"{found.cause} ({flag} takes one buildpack, as pack's: repeat the flag for each)"
    return found.cause


def _shown(ref: str) -> str:
    """``ref`` as messages show it (credentials removed)."""
    from preparer.fetch.locator import redact  # deferred, as in _entry

    return redact(ref)


def _refusal(flag: str, field: str, key: str, ref: str, cause: str) -> DescriptorError:
    """The problem of the entry ``key`` of a buildpack list: the value, why, and the forms the list takes (in place
    of the forms a descriptor's ``uri`` takes, when the cause lists those)."""
    from preparer.fetch.locator import ACCEPTED  # deferred, as in _entry

    cause = cause.removesuffix(f" (a uri is {ACCEPTED})")
    said = f"{key} {cause}" if not ref.strip() else f"{key} '{_shown(ref)}': {cause}"
    error = DescriptorError(f"validate {flag}", f"{said}; {flag} takes {FORMS}")
    return with_fields(error, field=field, key=key)


def _env_file(
    index: int, file: Path, environ: Mapping[str, str], problems: list[DescriptorError], warnings: list[str]
) -> list[EnvEntry]:
    """The variables of one env file; a file that cannot be read is a problem naming it (and the file meant, when
    one of a near name is beside it)."""
    from preparer.files.envfile import read_env_file  # deferred: only runs given an env file read one

    try:
        lines = read_env_file(file)
    except FileNotFoundError:
        problems.append(
            _file_problem(file, f"{file} does not exist{_near_file(file)}", f"-env-file[{index}]")
        )
        return []
    except (OSError, ValueError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        problems.append(_file_problem(file, f"{file}: {why}", f"-env-file[{index}]"))
        return []
    entries = []
    for line in lines:
        key = f"{file}:{line.line}"
        entry = _variable(key, None, line.name, line.value, environ, problems, warnings, line.line, file)
        if entry is not None:
            entries.append(entry)
    return entries


def _near_file(file: Path) -> str:
    """``; did you mean <name>?`` when a file of a name a typo or two away is beside ``file``."""
    from preparer._near import closest  # deferred: only a missing file asks

    try:
        names = sorted(entry.name for entry in file.parent.iterdir() if entry.is_file())
    except OSError:
        return ""
    meant = closest(file.name, names)
    return f"; did you mean {file.parent / meant}?" if meant else ""


def _file_problem(file: Path, cause: str, key: str, line: int | None = None) -> DescriptorError:
    """A problem of the env file ``file`` (of the entry ``key``: ``-env-file[0]``, or a line's ``<path>:<line>``)."""
    error = DescriptorError(f"read -env-file {file.name}", cause)
    return with_fields(error, field="env_files", key=key, path=str(file), line=line)


def _variable(
    key: str, given: str | None, name: str, value: str | None, environ: Mapping[str, str],
    problems: list[DescriptorError], warnings: list[str], line: int | None = None, file: Path | None = None,
) -> EnvEntry | None:  # fmt: skip
    """The variable ``NAME=VALUE`` (or ``NAME`` alone, ``value`` ``None``: the environment's value) of ``-env``
    (``given`` as written) or an env file's line; its problem, or the warning it gets, added to theirs."""
    problem = (
        env_name_problem(name) if given != "" else "is empty: give NAME=VALUE or NAME, or leave the flag out"
    )
    if problem is None and re.search(r"\s", name):
        head, _, rest = name.partition(" ")
        problem = (
            f"the name {name!r} holds white space: write {rest.strip() or 'NAME'}=VALUE ('{head}' is a shell's word)"
            if head in ("export", "set", "declare")
            else f"the name {name!r} holds white space: write NAME=VALUE, with no space around '='"
        )
    if problem is not None:
        if file is not None:
            problems.append(_file_problem(file, f"{key}: {problem}; a line is {ENV_FORMS}", key, line))
        else:
            shown = name if value is None else f"{name}=…"  # a value may be a credential: never shown
            said = f"{key} {problem}" if given == "" else f"{key} {shown!r}: {problem}"
            cause = f"{said}; -env takes {ENV_FORMS}"
            problems.append(with_fields(DescriptorError("validate -env", cause), field="build_env", key=key))
        return None
    if value is None:
        if name not in environ:
            warnings.append(
                f"{key}: {name} is not set in the preparer's environment: it is written empty, as pack does"
            )
        value = environ.get(name, "")
    elif len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        warnings.append(
            f"{key}: the value of {name} is written with its quotes ({value[0]}...{value[0]}), as pack and docker "
            "read env files and -env: no shell reads them"
        )
    return EnvEntry(key, name, value)


def configure(
    descriptor: ProjectDescriptor, patches: Sequence[Layer], inputs: Inputs, base_dir: Path,
    exists: Callable[[Path], bool],
) -> EffectiveConfig:  # fmt: skip
    """The effective configuration (:func:`preparer.config.effective_config`) with the lists of ``inputs`` laid over
    it: every problem of the lists and the files together, the lists' first.

    :param base_dir: where relative ``uri`` paths of the files resolve (the descriptor's directory).
    :raises DescriptorError: the first problem, with every one in ``problems`` (exit 3).
    """
    lists = lists_of(inputs)
    if not lists.given:
        return effective_config(descriptor, patches, inputs.exec_env, base_dir=base_dir, exists=exists)
    read = read_lists(lists, inputs.app_dir, inputs.environ, exists)
    try:
        config = effective_config(
            descriptor, [*patches, _masks(read)], inputs.exec_env, base_dir=base_dir, exists=exists
        )
    except DescriptorError as err:
        problems = (*read.problems, *(err.problems or (err,)))
        raise with_fields(problems[0], problems=problems) from None
    if read.problems:
        raise with_fields(read.problems[0], problems=read.problems)
    return laid_over(config, read, (*descriptor.layers, *patches))


def list_problems(
    descriptor: ProjectDescriptor, patches: Sequence[Layer], lists: Lists, exec_env: str, base_dir: Path,
    exists: Callable[[Path], bool] | None,
) -> tuple[DescriptorError, ...]:  # fmt: skip
    """Every problem of ``lists`` and of the files under them, as :func:`configure` finds them, without a run: the
    lists' first (an env file is read; ``-env NAME`` is not looked up). What a list replaces is not checked.

    :param base_dir: where relative paths resolve, the lists' and the files' (the descriptor's directory).
    :param exists: whether a path is there; ``None``: nothing is.
    """
    read = read_lists(lists, base_dir, {}, exists or _nothing)
    patch = [_masks(read)] if lists.given else []
    found = config_problems(descriptor, [*patches, *patch], exec_env, base_dir=base_dir, exists=exists)
    return (*read.problems, *found)


def _nothing(_: Path) -> bool:
    return False


def _masks(read: ListsRead) -> Layer:
    """A patch removing what the lists replace, so that the files' entries a list replaces are not read."""
    properties: TOMLTable = {}
    for name, path, _, _ in GROUPS:
        if name in read.groups:
            _put(properties, path, None)
    return Layer(properties, "", "the platform's lists")


def _put(table: TOMLTable, path: KeyPath, value: Any) -> None:
    for name in path[:-1]:
        table = table.setdefault(str(name), {})
    table[str(path[-1])] = value


def laid_over(config: EffectiveConfig, read: ListsRead, layers: Sequence[Layer]) -> EffectiveConfig:
    """``config`` (read with what the lists replace removed) with the lists' entries in force: their groups, the env
    merged by name, and a warning for each entry of ``layers`` (the files) that a list replaced."""
    from dataclasses import replace  # deferred, as the rest of this: only runs given a list lay one over

    merged: TOMLTable = merge({}, *(layer.properties for layer in layers)) if layers else {}
    unapplied: list[Unapplied] = []
    properties = copy.deepcopy(config.properties)
    groups: dict[str, tuple[GroupEntry, ...] | None] = {
        "group": config.group,
        "pre": config.pre,
        "post": config.post,
    }
    for name, path, flag, _ in GROUPS:
        entries = read.groups.get(name)
        if entries is None:
            continue
        unapplied += _replaced(layers, lookup(merged, ".".join(map(str, path))), path, flag)
        groups[name] = entries
        _put(properties, path, [_table(entry) for entry in entries])
    env, env_unapplied, warnings, notes = _merged_env(config.env, read.env)
    if read.env:
        listed = {entry.key for entry in read.env}
        _put(properties, ("build", "env"), [_env_table(entry, entry.key in listed) for entry in env])
    return replace(
        config, properties=properties, group=groups["group"], pre=groups["pre"], post=groups["post"],
        env=env if env or config.env is not None else None,
        unapplied=(*config.unapplied, *unapplied, *env_unapplied),
        warnings=(*config.warnings, *read.warnings, *warnings), notes=(*config.notes, *notes),
    )  # fmt: skip


def _replaced(layers: Sequence[Layer], value: object, path: KeyPath, flag: str) -> list[Unapplied]:
    """Each entry of ``value`` (the files' array at ``path``) that ``flag`` replaces, named as written."""
    if value is None:
        return []
    whole = spelled(layers, path)
    reason = f"{flag} replaces {whole}, as pack's does"
    if not isinstance(value, list) or not value:
        return [Unapplied(whole, reason)]
    return [Unapplied(spelled(layers, (*path, index)), reason) for index in range(len(value))]


def _table(entry: GroupEntry) -> dict[str, str]:
    """How the report's ``[effective]`` shows an entry of a list."""
    if entry.uri is not None:
        return {"uri": entry.uri}
    assert entry.id is not None
    return {"id": entry.id} | ({"version": entry.version} if entry.version is not None else {})


def _env_table(entry: EnvEntry, listed: bool) -> dict[str, str]:
    """How the report's ``[effective]`` shows an env variable: a list's without its value (``-env NPM_TOKEN`` may be a
    credential; ``[[env]]`` says what was written), the files' as written."""
    return {"name": entry.name, "from": entry.key} if listed else {"name": entry.name, "value": entry.value}


def _merged_env(
    files: tuple[EnvEntry, ...] | None, listed: Sequence[EnvEntry]
) -> tuple[tuple[EnvEntry, ...], list[Unapplied], list[str], list[str]]:
    """The env in force: the files' variables, then the lists', a later one of a name in place of the earlier. A
    file's variable a list sets again is unapplied; a list's set again by the same list (``-env A=1 -env A=2``, one env
    file twice) a warning, as in a file; by a later list (``-env`` over an env file), a note, as pack means it."""
    entries = {entry.name: entry for entry in files or ()}
    keys = {entry.key for entry in listed}
    unapplied: list[Unapplied] = []
    warnings: list[str] = []
    notes: list[str] = []
    for entry in listed:
        before = entries.pop(entry.name, None)
        if before is not None and before.key not in keys:
            unapplied.append(Unapplied(before.key, f"{entry.key} sets {entry.name} over it"))
        elif before is not None and _source(before.key) == _source(entry.key):
            warnings.append(f"{entry.key} sets {entry.name} again (as {before.key}); the last value wins")
        elif before is not None:
            notes.append(f"{entry.key} sets {entry.name} over {before.key}")
        entries[entry.name] = entry
    return tuple(entries.values()), unapplied, warnings, notes


def _source(key: str) -> str:
    """The list an env variable's key names: ``-env``, or the env file (``<path>:<line>``)."""
    return "-env" if key.startswith("-env[") else key.rpartition(":")[0]
