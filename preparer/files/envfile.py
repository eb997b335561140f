"""An env file (``-env-file``): build env variables, one a line, in pack's format (pack's ``parseEnvFile``, the
format of ``docker run --env-file``):

- the file is UTF-8 text (a byte order mark read over) of at most :data:`MAX_ENV_FILE` bytes, split at line feeds;
  each line is read with the white space around it removed (a carriage return included), and an empty line is
  skipped;
- ``NAME=VALUE`` sets ``NAME``: the value is everything after the first ``=``, as written (quotes included, as pack
  and docker keep them);
- ``NAME`` alone takes the value ``NAME`` has in the preparer's environment (:class:`EnvLine` ``value`` ``None``);
- a line that starts with ``#`` is a comment, as docker reads it (pack makes it a variable named after the line:
  docs/decisions.md, "Platforms that hold lists").

What a line names is checked by the list that reads the file (:mod:`preparer.lists`), as a descriptor's env entry is.
"""

from __future__ import annotations

from pathlib import Path

from preparer._record import record

#: The largest env file read (as large as a TOML file the preparer reads).
MAX_ENV_FILE = 1 << 20


@record
class EnvLine:
    """One variable of an env file: its line (from 1), its name, and its value (``None``: ``NAME`` alone, the value
    the environment has)."""

    line: int
    name: str
    value: str | None


def parse_env_file(text: str) -> list[EnvLine]:
    """The variables of an env file's ``text``, in their order.

    >>> parse_env_file("A=1\\r\\n  # a comment\\n\\nB = x=y \\nHOME\\n")
    [EnvLine(line=1, name='A', value='1'), EnvLine(line=4, name='B ', value=' x=y'), EnvLine(line=5, name='HOME', value=None)]
    """
    found = []
    for number, raw in enumerate(text.removeprefix("\ufeff").split("\n"), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, equals, value = line.partition("=")
        found.append(EnvLine(number, name, value if equals else None))
    return found


def read_env_file(path: Path) -> list[EnvLine]:
    """The variables of the env file ``path``, read bounded (:func:`preparer.files.toml.read_bytes`: a regular file,
    a FIFO or a device refused) and decoded as UTF-8.

    :raises OSError: it cannot be read (``FileNotFoundError``, ``IsADirectoryError``...).
    :raises ValueError: it is not a regular file, is larger than :data:`MAX_ENV_FILE`, or is not UTF-8 (the reason
        says where).
    """
    from preparer._fs import read_regular  # deferred: only runs with env files read one

    data = read_regular(path, MAX_ENV_FILE)
    try:
        text = data.decode()
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ValueError(f"not UTF-8 text: {err.reason} (at line {line})") from err
    return parse_env_file(text)
