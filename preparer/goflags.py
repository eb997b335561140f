"""Go ``flag``-package command lines, as every lifecycle phase parses them. Pure.

Platforms pass the creator's command line unchanged, so the preparer reads it the way Go's ``flag`` package
does:

- ``-name value``, ``-name=value``, ``--name value`` and ``--name=value`` are the same;
- a bool flag takes ``-name`` or ``-name=<bool>`` only: in ``-name false`` the ``false`` is a positional argument;
  so does a flag that may take a value (``-update-lock``, ``-update-lock=acme/bp``), which also repeats;
- repeatable flags (``-tag``, ``-insecure-registry``) append;
- a flag that also takes a comma-separated list (``-buildpack a,b``, pack's ``StringSlice``) reads each value as one
  record of Go's ``encoding/csv``, as pack's flag library does: an item holding a comma or a quote is written in
  double quotes, a quote doubled (``-buildpack '"https://host/a,b.tgz",heroku/nodejs'``);
- a flag may have a short name as well (``-b`` for ``-buildpack``, as pack has it);
- parsing stops at the first positional argument or at ``--``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from preparer._near import closest
from preparer.flags import BY_NAME, FLAGS, Flag

__all__ = [
    "BOOL_SPELLINGS",
    "BY_NAME",
    "FLAGS",
    "Flag",
    "FlagError",
    "Parsed",
    "parse",
    "parse_bool",
    "parse_int",
    "shown_list",
    "split_csv",
    "usage",
]
_TRUE = ("1", "t", "T", "TRUE", "true", "True")
_FALSE = ("0", "f", "F", "FALSE", "false", "False")
#: Go's spellings of a bool, for messages that refuse another.
BOOL_SPELLINGS = f"{', '.join(_TRUE)} or {', '.join(_FALSE)}"


class FlagError(Exception):
    """A command line Go's flag package rejects (exit 2)."""


def parse_bool(text: str) -> bool | None:
    """Go's ``strconv.ParseBool``; ``None`` when ``text`` is not one of its spellings."""
    return True if text in _TRUE else False if text in _FALSE else None


#: Compiled on first use (by ``re``'s cache), as few command lines give a duration.
_DURATION = r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)"
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float | None:
    """Go's ``time.ParseDuration`` for non-negative durations (``90s``, ``1h30m``, ``500ms``, ``0``), in seconds;
    ``None`` when Go would reject ``text`` (or it is negative)."""
    if text == "0":
        return 0.0
    parts = re.findall(_DURATION, text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(number) * _UNIT_SECONDS[unit] for number, unit in parts)


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


class CsvError(ValueError):
    """A value Go's ``encoding/csv`` refuses, in its words (``parse error on line 1, column 3: bare " in
    non-quoted-field``)."""


def split_csv(text: str) -> list[str]:
    """The items of ``text`` read as one record of Go's ``encoding/csv`` with its defaults, as pack's flag library
    (pflag's ``StringSlice``) reads each value of ``--buildpack``: items are separated by commas and kept as written
    (spaces included); an item that starts with a double quote runs to the next lone one, a quote doubled inside it
    (``"a,b",c`` is ``a,b`` and ``c``). An empty ``text`` is one empty item (pflag reads none: the caller refuses
    it by name). A line ending at the end is dropped, as Go drops it.

    :raises CsvError: a quote inside an unquoted item, a quoted item not closed or followed by anything but a comma,
        or a line break outside quotes (Go would drop what follows it).
    """
    text = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith(("\n", "\r")) else text
    items: list[str] = []
    at = 0
    while True:
        if text.startswith('"', at):
            item, at = _quoted(text, at)
            items.append(item)
            if at == len(text):
                return items
            at += 1  # the comma
            continue
        comma = text.find(",", at)
        item = text[at:] if comma < 0 else text[at:comma]
        bare = item.find('"')
        if bare >= 0:
            raise CsvError(f'parse error on line 1, column {at + bare + 1}: bare " in non-quoted-field')
        broken = re.search(r"[\r\n]", item)
        if broken is not None:
            raise CsvError(f"a line break at column {at + broken.start() + 1}, outside double quotes")
        items.append(item)
        if comma < 0:
            return items
        at = comma + 1


def _quoted(text: str, start: int) -> tuple[str, int]:
    """The quoted item of ``text`` that starts at ``start``, and where it ends (its closing quote's next
    character: a comma, or the end)."""
    parts, at = [], start + 1
    while True:
        quote = text.find('"', at)
        if quote < 0:
            raise CsvError(
                f'parse error on line 1, column {len(text) + 1}: extraneous or missing " in quoted-field'
            )
        parts.append(text[at:quote])
        at = quote + 1
        if text.startswith('"', at):
            parts.append('"')
            at += 1
        elif at == len(text) or text[at] == ",":
            return "".join(parts), at
        else:
            raise CsvError(
                f'parse error on line 1, column {quote + 1}: extraneous or missing " in quoted-field'
            )


def shown_list(value: str) -> str:
    """A list flag's ``value`` as messages show it: each comma-separated part without what may be a secret (a URL's
    user information and query, :func:`preparer.fetch.locator.redact`), however malformed the value is."""
    from preparer.fetch.locator import redact  # deferred: only a message about a list's value asks

    return ",".join(redact(part) for part in value.split(","))


def split_warning(named: str, value: str, items: Sequence[str]) -> str | None:
    """A warning when ``value``, read as a comma-separated list, splits a URL: a URL item that names no archive
    (``https://host/a`` of ``https://host/a,b.tgz``) followed by more items. pack reads it the same way; a URL with a
    comma is written in double quotes.

    :param named: how the value was given, before it: ``-buildpack `` or ``CNB_PREPARER_BUILDPACKS=``.
    """
    for index, item in enumerate(items[:-1]):
        if "://" in item and not item.lower().rsplit("#", 1)[0].endswith((".tgz", ".tar.gz", ".tar", ".cnb")):
            shown = ", ".join(shown_list(item) for item in items)
            return (
                f"{named}{shown_list(value)!r} is read as {len(items)} buildpacks ({shown}): a value is a "
                f"comma-separated list, as pack reads it; a URL with a comma is written in double quotes: "
                f"{named}'\"{shown_list(','.join(items[index : index + 2]))}\"'"
            )
    return None


class Parsed:
    """The outcome of parsing: values of the flags given, positional arguments, and warnings."""

    __slots__ = ("help", "positionals", "values", "warnings")

    def __init__(self) -> None:
        self.values: dict[str, str | bool | int | list[str]] = {}
        self.positionals: list[str] = []
        self.warnings: list[str] = []
        self.help = False


#: Other tools' words for what a preparer flag does, for "did you mean" (cargo's and uv's ``--frozen``).
_OTHER_WORDS = {
    "frozen": "-lock FILE, which freezes the run to an existing lock, or -require-lock, which refuses to run "
    "without one",
}


def _undefined(name: str) -> FlagError:
    """Go's error for a flag not defined, with the flag a typo away when there is one (``-locked``: ``-lock``), or
    the preparer's for another tool's word (``-frozen``)."""
    meant = _OTHER_WORDS.get(name)
    if meant is None:
        near = closest(name, list(BY_NAME))
        meant = f"-{near}" if near else None
    hint = f" (did you mean {meant}?)" if meant else ""
    return FlagError(f"flag provided but not defined: -{name}{hint}")


def parse(argv: Sequence[str]) -> Parsed:
    """Parse ``argv`` (without the program name) as Go's ``flag.Parse`` does.

    :raises FlagError: an unknown flag, a missing value, or a value its type rejects.
    """
    parsed = Parsed()
    args = list(argv)
    bare = None  # the flag that may take a value, given last and without one
    while args:
        arg = args[0]
        if len(arg) < 2 or not arg.startswith("-"):
            break
        args.pop(0)
        bare = None
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
            raise _undefined(name)
        if flag.kind in ("bool", "optional"):
            _set_bool_like(parsed, flag, bool(has_value), value)
            bare = name if flag.kind == "optional" and not has_value else None
            continue
        if not has_value:
            if not args:
                raise FlagError(f"flag needs an argument: -{name}")
            value = args.pop(0)
        _set_value(parsed, flag, name, value)
    parsed.positionals = args
    # As the lifecycle does, for every positional argument (the first one too, after "--").
    parsed.warnings += [
        f"unconsumed flag-like positional arg: {arg} (not a flag: flags go before the first positional argument)"
        for arg in args
        if arg.startswith("-")
    ]
    if bare is not None and args and not args[0].startswith("-"):
        parsed.warnings.insert(
            0,
            f"-{bare} {args[0]}: '{args[0]}' is an argument, not the flag's value (as in Go, a flag that may take "
            f"no value takes one only after '='): write -{bare}={args[0]}",
        )
    return parsed


def _set_value(parsed: Parsed, flag: Flag, name: str, value: str) -> None:
    """The value of a flag that takes one, kept under the flag's name (``-b`` is ``-buildpack``'s short name)."""
    key = flag.name
    assert key is not None
    if flag.kind == "int":
        number = parse_int(value)
        if number is None:
            raise FlagError(f'invalid value "{value}" for flag -{name}: parse error')
        parsed.values[key] = number
    elif flag.kind in ("list", "csv"):
        existing = parsed.values.setdefault(key, [])
        assert isinstance(existing, list)
        if flag.kind == "list":
            existing.append(value)
            return
        try:
            items = split_csv(value)
        except CsvError as err:
            raise FlagError(
                f'invalid value "{shown_list(value)}" for flag -{name}: {err} (a comma-separated list, as pack reads it: an '
                "item with a comma or a quote is written in double quotes, a quote doubled)"
            ) from None
        existing.extend(items)
        warning = split_warning(f"-{name} ", value, items)
        if warning is not None:
            parsed.warnings.append(warning)
    else:
        parsed.values[key] = value


def _set_bool_like(parsed: Parsed, flag: Flag, has_value: bool, value: str) -> None:
    """A bool flag's value, or a value of a flag that may take none (kept in a list, ``true`` when bare)."""
    name = flag.name
    assert name is not None
    if flag.kind == "optional":
        listed = parsed.values.setdefault(name, [])
        assert isinstance(listed, list)
        listed.append(value if has_value else "true")
        return
    if not has_value:
        parsed.values[name] = True
        return
    result = parse_bool(value)
    if result is None:
        raise FlagError(f'invalid boolean value "{value}" for -{name}: parse error (use {BOOL_SPELLINGS})')
    parsed.values[name] = result


def usage(program: str = "preparer") -> str:
    """A Go-style usage text listing every flag with its environment variable and default, then the settings
    read from the environment only."""
    lines = [f"Usage: {program} [flags] [<image>]", ""]
    for flag in FLAGS:
        if flag.name is not None:
            arg = {
                "string": " string", "int": " int", "list": " value", "csv": " value", "bool": "",
                "optional": "[=value]",
            }[flag.kind]  # fmt: skip
            lines.append(f"  -{flag.name}{arg}")
            lines.append(f"    \t{flag.help}{_notes(flag)}")
    lines += ["", "Environment only:"]
    for flag in FLAGS:
        if flag.name is None:
            lines.append(f"  {flag.env}")
            lines.append(f"    \t{flag.help}{_notes(flag, env=False)}")
    return "\n".join(lines) + "\n"


def _notes(flag: Flag, env: bool = True) -> str:
    notes = [f"env {flag.env}"] if flag.env and env else []
    if flag.default is not None:
        notes.append(f'default "{flag.default}"')
    return f" ({', '.join(notes)})" if notes else ""
