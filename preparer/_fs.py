"""Directories with the modes the preparer means, whatever the process umask.

A hardened container's umask is often 027 or 077, and ``mkdir(mode=…)`` is masked by it (``Path.mkdir`` also
creates missing parents with the default mode). Everything the build user must read is created through
:func:`make_dirs`, which sets each new directory's mode explicitly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def make_dirs(path: Path, mode: int = 0o755) -> list[Path]:
    """Create ``path`` and any missing parents, each with exactly ``mode``; existing ones are left as they are.

    One ``mkdir`` call when ``path`` exists already, so it is cheap to call per file.

    :returns: the directories created, outermost first.
    :raises OSError: as ``mkdir`` does (``FileExistsError`` is not raised for an existing ``path``).
    """
    try:
        path.mkdir(mode)
    except FileExistsError:
        return []
    except FileNotFoundError:
        created = make_dirs(path.parent, mode)
        try:
            path.mkdir(mode)
        except FileExistsError:  # made meanwhile by a concurrent writer
            return created
        os.chmod(path, mode)
        return [*created, path]
    os.chmod(path, mode)
    return [path]


@contextmanager
def temp_file(directory: Path, prefix: str) -> Iterator[Path]:
    """A new empty file in ``directory``, removed on exit unless it was renamed away meanwhile."""
    import tempfile  # deferred: it brings random and hashlib, which runs that write no temporary file skip

    fd, name = tempfile.mkstemp(prefix=prefix, dir=directory)
    os.close(fd)
    path = Path(name)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)
