"""Every problem of a project descriptor (and a platform file), found without a run: for an editor, a CI lint step,
or a service checking what a user submits before it queues a build.

It reads the text given (or the one file named), changes nothing, and asks no server: what only ``<buildpacks>``,
the network or the app directory can tell (an id not installed, a path that does not exist, an archive) is the
run's to find. Everything else a run refuses from the files' text is found here, by the same functions: reading
(:func:`preparer.files.toml.load_toml_text`: size, UTF-8, TOML, nesting), the schema
(:func:`preparer.descriptor.parse_descriptor`) and the configuration (:func:`preparer.config.effective_config`:
every key, id, version, env name, pattern, and every ``uri`` by :func:`preparer.values.entry_locator`), so the
first problem listed is the one the command prints first.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from preparer.config import config_problems, platform_layers
from preparer.descriptor import located, parse_descriptor
from preparer.errors import DescriptorError, InvalidInputsError, PreparerError, with_fields
from preparer.files.toml import MAX_TOML, decode_toml, load_toml_text, parse_toml, position


def check_descriptor(
    path: str | os.PathLike[str] | None = None,
    *,
    text: str | bytes | None = None,
    platform_namespace: str | None = None,
    platform_config: str | os.PathLike[str] | None = None,
    platform_config_text: str | bytes | None = None,
    exec_env: str = "production",
) -> tuple[DescriptorError, ...]:
    """Every problem of the project descriptor at ``path``, or of its ``text`` (``path`` then only names it in
    messages, ``project.toml`` by default), with the platform's namespace and file overlaid as a run would.

    Each problem is a :class:`~preparer.errors.DescriptorError` with its message as the command prints it, the
    file (``path``), the key as written (``key``) and where it is (``line``, ``column``), in the files' order. An
    empty tuple: nothing in the files stops a run. A file that is not TOML (or not UTF-8, or nested too deeply),
    or declares a schema this preparer does not read, is one problem (nothing after it can be read); so is one
    larger than a run reads (1 MiB), refused before it is parsed, without a place.

    A ``uri`` without a scheme names a path when a file of its name is beside the descriptor, as in a run: with
    ``path`` (and no ``text``), its directory is looked in; with ``text``, nothing is there.

    >>> [p.message for p in check_descriptor(text='[_]\\nschema-version = "0.2"\\n[io.buildpacks]\\ninclude = 1\\n')]
    ['failed to validate project.toml: io.buildpacks.include: must be an array of strings, not an integer']

    :raises TypeError: neither ``path`` nor ``text`` is given.
    """
    if path is None and text is None:
        raise TypeError("check_descriptor() needs the descriptor's path or its text")
    name = Path(path if path is not None else "project.toml")
    # As a run sees the project: the file's directory, when the file is read; nothing beside a text given.
    exists = os.path.exists if text is None else None
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
        patches, _ = platform_layers(descriptor, platform_namespace, platform_file, str(config_name), texts)
    except InvalidInputsError as err:  # a DescriptorError, or a platform file without a namespace
        return (err if isinstance(err, DescriptorError) else _as_descriptor_error(err),)
    return config_problems(descriptor, patches, exec_env, texts, base_dir=name.parent, exists=exists)


def _read(name: Path, text: str | bytes | None, what: str) -> tuple[dict[str, object], str]:
    """The document and text of ``name`` (read from disk when ``text`` is ``None``), read as a run reads a file.

    :raises DescriptorError: larger than a run reads (before anything else), not UTF-8, not TOML.
    """
    if text is None:
        return load_toml_text(name, what)
    where = f"{name}: "

    def fail(verb: str, cause: str) -> PreparerError:
        return with_fields(DescriptorError(f"{verb} {what}", cause), path=str(name))

    # Measured before anything is parsed: a character is one to four bytes.
    if len(text) > MAX_TOML or (
        isinstance(text, str) and len(text.encode(errors="surrogatepass")) > MAX_TOML
    ):
        raise fail("read", f"{where}larger than {MAX_TOML} bytes")
    if isinstance(text, bytes):
        text = decode_toml(text, fail, where)
    else:
        try:
            text.encode()
        except UnicodeEncodeError as err:  # a lone surrogate: no file holds one
            line, column = position(text, err.start)
            failed = fail("parse", f"{where}not UTF-8 text ({err.reason})")
            raise with_fields(failed, line=line, column=column) from err
        text = text.removeprefix("\ufeff")  # read over, as from a file
    return parse_toml(text, fail, where), text


def _as_descriptor_error(error: InvalidInputsError) -> DescriptorError:
    return with_fields(DescriptorError(error.action, error.cause), field=error.field)
