"""Every problem of a project descriptor (and a platform file), found without a run: for an editor, a CI lint step,
or a service checking what a user submits before it queues a build.

It reads the text given (or the one file named), changes nothing, and asks no server: what only ``<buildpacks>``,
the network or the app directory can tell (an id not installed, a path that does not exist, an archive) is the
run's to find. Everything else a run refuses from the files' text is found here, by the same functions: reading
(:func:`preparer.files.toml.read_toml`: size, UTF-8, TOML, its bounds), the schema
(:func:`preparer.descriptor.parse_descriptor`) and the configuration (:func:`preparer.config.effective_config`:
every key, id, version, env name, pattern, and every ``uri`` by :func:`preparer.values.entry_locator`), so the
first problem listed is the one the command prints first.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from preparer.config import config_problems, platform_layers
from preparer.descriptor import descriptor_document, located, parse_descriptor
from preparer.errors import DescriptorError, InvalidInputsError, with_fields
from preparer.files.toml import Document, parse_toml, read_toml

if TYPE_CHECKING:
    from preparer.lists import Lists


def check_descriptor(
    path: str | os.PathLike[str] | None = None,
    *,
    text: str | bytes | Mapping[str, Any] | None = None,
    platform_namespace: str | None = None,
    platform_config: str | os.PathLike[str] | None = None,
    platform_config_text: str | bytes | None = None,
    exec_env: str = "production",
    buildpacks: Sequence[str] = (),
    pre_buildpacks: Sequence[str] = (),
    post_buildpacks: Sequence[str] = (),
    build_env: Sequence[str] | Mapping[str, str] = (),
    env_files: Sequence[str | os.PathLike[str]] = (),
) -> tuple[DescriptorError, ...]:
    """Every problem of the project descriptor at ``path``, or of its ``text`` (``path`` then only names it in
    messages, ``project.toml`` by default), with the platform's namespace and file overlaid as a run would.

    Each problem is a :class:`~preparer.errors.DescriptorError` with its message as the command prints it, the
    file (``path``), the key as written (``key``) and where it is (``line``, ``column``), in the files' order. An
    empty tuple: nothing in the files stops a run. A file that is not TOML (or not UTF-8, or nested too deeply),
    or declares a schema this preparer does not read, is one problem (nothing after it can be read); so is one
    larger than a run reads (1 MiB), refused before it is parsed, without a place.

    A ``uri`` without a scheme names a path when a file of its name is beside the descriptor, as in a run: with
    ``path`` (and no ``text``), its directory is looked in; with ``text``, nothing is there. ``text`` may be the
    descriptor's tables (a mapping, as ``Inputs.descriptor_data``): problems are then located by key alone. The
    platform's lists, as ``Inputs`` takes them (``buildpacks``, ``build_env``...), are checked as a run checks them,
    each entry named by its list and position (``-buildpack[1]``), first; what a list replaces is not checked.

    :raises TypeError: neither ``path`` nor ``text`` is given.
    """
    if path is None and text is None:
        raise TypeError("check_descriptor() needs the descriptor's path or its text")
    name = Path(path if path is not None else "project.toml")
    # As a run sees the project: the file's directory, when the file is read; nothing beside a text given.
    exists = os.path.exists if text is None else None
    try:
        read = (
            descriptor_document(text, str(name))
            if text is not None
            else read_toml(name, "project descriptor")
        )
        try:
            descriptor = parse_descriptor(read.table, name, platform_namespace, read.places)
        except DescriptorError as err:
            return (located(err, str(name), read.places),)
        platform_file = None
        if platform_config is not None or platform_config_text is not None:
            config_name = Path(platform_config if platform_config is not None else "platform file")
            platform_file = _read(config_name, platform_config_text, "platform config")
        patches, _ = platform_layers(descriptor, platform_namespace, platform_file)
        lists = _lists(buildpacks, pre_buildpacks, post_buildpacks, build_env, env_files)
    except InvalidInputsError as err:  # a DescriptorError, a platform file without a namespace, a list's type
        return (err if isinstance(err, DescriptorError) else _as_descriptor_error(err),)
    if not lists.given:
        return config_problems(descriptor, patches, exec_env, base_dir=name.parent, exists=exists)
    from preparer.lists import list_problems  # deferred: only a check given lists reads them

    return list_problems(descriptor, patches, lists, exec_env, name.parent, exists)


def _lists(
    buildpacks: Sequence[str], pre_buildpacks: Sequence[str], post_buildpacks: Sequence[str],
    build_env: Sequence[str] | Mapping[str, str], env_files: Sequence[str | os.PathLike[str]],
) -> Lists:  # fmt: skip
    """The lists given, taken as ``Inputs`` takes them (each refused as it refuses it)."""
    from preparer.inputs import Inputs  # deferred, as above
    from preparer.lists import lists_of

    inputs = Inputs.from_environ(
        {}, buildpacks=buildpacks, pre_buildpacks=pre_buildpacks, post_buildpacks=post_buildpacks,
        build_env=build_env, env_files=env_files,
    )  # fmt: skip
    return lists_of(inputs)


def _read(name: Path, text: str | bytes | None, what: str) -> Document:
    """The file ``name`` (read from disk when ``text`` is ``None``), read as a run reads a file.

    :raises DescriptorError: larger than a run reads (before anything else), not UTF-8, not TOML, past a bound.
    """
    return read_toml(name, what) if text is None else parse_toml(text, str(name), what)


def _as_descriptor_error(error: InvalidInputsError) -> DescriptorError:
    return with_fields(DescriptorError(error.action, error.cause), field=error.field)
