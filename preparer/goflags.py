"""Go ``flag``-package command lines, as every lifecycle phase parses them. Pure.

Platforms pass the creator's command line unchanged, so the preparer reads it the way Go does
(lifecycle-reference §1.4):

- ``-name value``, ``-name=value``, ``--name value`` and ``--name=value`` are the same;
- a bool flag takes ``-name`` or ``-name=<bool>`` only: in ``-name false`` the ``false`` is a positional argument;
- repeatable flags (``-tag``, ``-insecure-registry``) append;
- parsing stops at the first positional argument or at ``--``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

Kind = Literal["string", "bool", "int", "list"]


class Flag(NamedTuple):
    """One flag of the command line."""

    name: str
    kind: Kind
    help: str
    #: The input this flag overrides, when the preparer uses it; ``None`` for creator flags only accepted.
    env: str | None = None
    used: bool = True


def _creator(name: str, kind: Kind = "string") -> Flag:
    return Flag(name, kind, "accepted so that a creator command line works unchanged", used=False)


#: Every flag, in help order: the inputs the preparer uses, its own, then the creator's it only accepts.
FLAGS: tuple[Flag, ...] = (
    Flag("app", "string", "application directory", "CNB_APP_DIR"),
    Flag("buildpacks", "string", "buildpacks directory", "CNB_BUILDPACKS_DIR"),
    Flag("layers", "string", "layers directory; the prepared order.toml goes here", "CNB_LAYERS_DIR"),
    Flag(
        "platform", "string", "platform directory; build env files go to <platform>/env", "CNB_PLATFORM_DIR"
    ),
    Flag("order", "string", "the builder's order.toml (read only)", "CNB_ORDER_PATH"),
    Flag("uid", "int", "user that owns the files the build reads", "CNB_USER_ID"),
    Flag("gid", "int", "group that owns the files the build reads", "CNB_GROUP_ID"),
    Flag("log-level", "string", "debug, info, warn or error", "CNB_LOG_LEVEL"),
    Flag("no-color", "bool", "disable colour in output", "CNB_NO_COLOR"),
    Flag(
        "insecure-registry",
        "list",
        "registry reached over plain http (repeatable)",
        "CNB_INSECURE_REGISTRIES",
    ),
    Flag(
        "project-descriptor",
        "string",
        "project descriptor (default <app>/project.toml)",
        "CNB_PROJECT_DESCRIPTOR_PATH",
    ),
    Flag(
        "platform-namespace",
        "string",
        "the platform's table, e.g. io.buildpacks.pack",
        "CNB_PLATFORM_NAMESPACE",
    ),
    Flag("platform-config", "string", "platform file such as pack.toml", "CNB_PLATFORM_CONFIG_PATH"),
    Flag("download-cache", "string", "download cache directory; empty disables it", "CNB_DOWNLOAD_CACHE_DIR"),
    Flag("prepare-report", "string", "write a TOML report of what was applied", "CNB_PREPARE_REPORT_PATH"),
    Flag("dry-run", "bool", "resolve and print the plan; change nothing", "CNB_DRY_RUN"),
    Flag(
        "buildpack-registry-index", "string", "buildpack registry index URL", "CNB_BUILDPACK_REGISTRY_INDEX"
    ),
    Flag("version", "bool", "print the version and exit"),
    Flag("extensions", "string", "extensions directory (accepted)", "CNB_EXTENSIONS_DIR", used=False),
    _creator("analyzed"),
    _creator("build-config"),
    _creator("cache-dir"),
    _creator("cache-image"),
    _creator("daemon", "bool"),
    _creator("group"),
    _creator("launch-cache"),
    _creator("launcher"),
    _creator("launcher-sbom"),
    _creator("layout", "bool"),
    _creator("layout-dir"),
    _creator("parallel", "bool"),
    _creator("plan"),
    _creator("previous-image"),
    _creator("process-type"),
    _creator("project-metadata"),
    _creator("report"),
    _creator("run"),
    _creator("run-image"),
    _creator("skip-restore", "bool"),
    _creator("stack"),
    _creator("system"),
    _creator("tag", "list"),
)
BY_NAME = {flag.name: flag for flag in FLAGS}
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class FlagError(Exception):
    """A command line Go's flag package rejects (exit 2)."""


def parse_bool(text: str) -> bool | None:
    """Go's ``strconv.ParseBool``; ``None`` when ``text`` is not one of its spellings."""
    return True if text in _TRUE else False if text in _FALSE else None


def parse_int(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 0, 64)``; ``None`` when Go would reject ``text``.

    Decimal, ``0x``, ``0o`` or a leading ``0`` (octal) and ``0b`` prefixes, an optional sign, and underscores
    between digits.
    """
    sign, digits = (text[0], text[1:]) if text[:1] in ("+", "-") else ("", text)
    if not digits or not all(c.isascii() and (c.isalnum() or c == "_") for c in digits):
        return None  # Python's int() also takes spaces and non-ASCII digits; Go does not
    if len(digits) > 1 and digits[0] == "0" and digits[1] not in "xXoObB":
        digits = "0o" + digits[1:]  # Go's legacy octal; Python's int() refuses leading zeros
    try:
        number = int(sign + digits, 0)
    except ValueError:
        return None
    return number if -(1 << 63) <= number < 1 << 63 else None


@dataclass
class Parsed:
    """The outcome of parsing: values of the flags given, positional arguments, and warnings."""

    values: dict[str, str | bool | int | list[str]] = field(default_factory=dict)
    positionals: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    help: bool = False


def parse(argv: Sequence[str]) -> Parsed:
    """Parse ``argv`` (without the program name) as Go's ``flag.Parse`` does.

    :raises FlagError: an unknown flag, a missing value, or a value its type rejects.
    """
    parsed = Parsed()
    args = list(argv)
    while args:
        arg = args[0]
        if len(arg) < 2 or not arg.startswith("-"):
            break
        args.pop(0)
        if arg == "--":
            break
        name = arg[2:] if arg.startswith("--") else arg[1:]
        if not name or name.startswith(("-", "=")):
            raise FlagError(f"bad flag syntax: {arg}")
        name, has_value, value = name.partition("=")
        if name in ("h", "help"):
            # Go stops at -h with flag.ErrHelp: the usage is printed and the rest is not looked at.
            parsed.help = True
            return parsed
        flag = BY_NAME.get(name)
        if flag is None:
            raise FlagError(f"flag provided but not defined: -{name}")
        if flag.kind == "bool":
            if not has_value:
                parsed.values[name] = True
                continue
            result = parse_bool(value)
            if result is None:
                raise FlagError(f'invalid boolean value "{value}" for -{name}: parse error')
            parsed.values[name] = result
            continue
        if not has_value:
            if not args:
                raise FlagError(f"flag needs an argument: -{name}")
            value = args.pop(0)
        if flag.kind == "int":
            number = parse_int(value)
            if number is None:
                raise FlagError(f'invalid value "{value}" for flag -{name}: parse error')
            parsed.values[name] = number
        elif flag.kind == "list":
            existing = parsed.values.setdefault(name, [])
            assert isinstance(existing, list)
            existing.append(value)
        else:
            parsed.values[name] = value
    parsed.positionals = args
    # As the lifecycle does, for every positional argument (the first one too, after "--").
    parsed.warnings = [
        f"unconsumed flag-like positional arg: {arg} (not a flag: flags go before the first positional argument)"
        for arg in args
        if arg.startswith("-")
    ]
    return parsed


def usage(program: str = "preparer", defaults: Mapping[str, str] | None = None) -> str:
    """A Go-style usage text listing every flag, with its environment variable and default (by flag name)."""
    lines = [f"Usage: {program} [flags] [<image>]", ""]
    for flag in FLAGS:
        arg = {"string": " string", "int": " int", "list": " value", "bool": ""}[flag.kind]
        notes = [f"env {flag.env}"] if flag.env else []
        if defaults and flag.name in defaults:
            notes.append(f'default "{defaults[flag.name]}"')
        lines.append(f"  -{flag.name}{arg}")
        lines.append(f"    \t{flag.help}" + (f" ({', '.join(notes)})" if notes else ""))
    return "\n".join(lines) + "\n"
