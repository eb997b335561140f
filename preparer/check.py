"""Every problem of a project descriptor (and a platform file), found without a run: for an editor, a CI lint step,
or a service checking what a user submits before it queues a build.

It reads the text given (or the one file named), changes nothing, and asks no server: what only ``<buildpacks>``,
the network or the app directory can tell (an id not installed, a path that does not exist, an archive) is the
run's to find. The command's exit-3 path is the same check (:func:`preparer.config.effective_config`), so the first
problem listed is the one the command prints first.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from preparer.config import config_problems, platform_layers
from preparer.descriptor import located, parse_descriptor
from preparer.errors import DescriptorError, InvalidInputsError, PreparerError, with_fields
from preparer.files._toml import load_toml_text, parse_toml


def check_descriptor(
    path: str | os.PathLike[str] | None = None,
    *,
    text: str | None = None,
    platform_namespace: str | None = None,
    platform_config: str | os.PathLike[str] | None = None,
    platform_config_text: str | None = None,
    exec_env: str = "production",
) -> tuple[DescriptorError, ...]:
    """Every problem of the project descriptor at ``path``, or of its ``text`` (``path`` then only names it in
    messages, ``project.toml`` by default), with the platform's namespace and file overlaid as a run would.

    Each problem is a :class:`~preparer.errors.DescriptorError` with its message as the command prints it, the
    file (``path``), the key as written (``key``) and where it is (``line``, ``column``), in the files' order. An
    empty tuple: nothing in the files stops a run. A file that is not TOML, or declares a schema this preparer
    does not read, is one problem (nothing after it can be read).

    >>> [p.message for p in check_descriptor(text='[_]\\nschema-version = "0.2"\\n[io.buildpacks]\\ninclude = 1\\n')]
    ['failed to validate project.toml: io.buildpacks.include: must be an array of strings, not an integer']

    :raises TypeError: neither ``path`` nor ``text`` is given.
    """
    if path is None and text is None:
        raise TypeError("check_descriptor() needs the descriptor's path or its text")
    name = Path(path if path is not None else "project.toml")
    texts: dict[str, str] = {}
    try:
        document, texts[str(name)] = _read(name, text, "project descriptor")
        try:
            descriptor = replace(parse_descriptor(document, name, platform_namespace), text=texts[str(name)])
        except DescriptorError as err:
            return (located(err, str(name), texts[str(name)]),)
        platform_file, config_name = None, Path("platform file")
        if platform_config is not None or platform_config_text is not None:
            config_name = Path(platform_config if platform_config is not None else "platform file")
            platform_file, texts[str(config_name)] = _read(
                config_name, platform_config_text, "platform config"
            )
        patches, _ = platform_layers(descriptor, platform_namespace, platform_file, str(config_name))
    except InvalidInputsError as err:  # a DescriptorError, or a platform file without a namespace
        return (err if isinstance(err, DescriptorError) else _as_descriptor_error(err),)
    return config_problems(descriptor, patches, exec_env, texts)


def _read(name: Path, text: str | None, what: str) -> tuple[dict[str, object], str]:
    """The document and text of ``name`` (read from disk when ``text`` is ``None``)."""
    if text is None:
        return load_toml_text(name, what)

    def fail(verb: str, cause: str) -> PreparerError:
        return with_fields(DescriptorError(f"{verb} {what}", cause), path=str(name))

    text = text.removeprefix("\ufeff")  # read over, as from a file
    return parse_toml(text, fail, f"{name}: "), text


def _as_descriptor_error(error: InvalidInputsError) -> DescriptorError:
    return with_fields(DescriptorError(error.action, error.cause), field=error.field)
