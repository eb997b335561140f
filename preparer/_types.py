"""Type aliases shared across the package, and how a key's path is written (:func:`dotted`)."""

from __future__ import annotations

from typing import Any, TypeAlias

#: A TOML table as tomli returns it; after a merge patch, ``None`` marks a deleted key.
TOMLTable: TypeAlias = dict[str, Any]
#: A key's path in a TOML document: table and key names, and the index of each array element
#: (``("io", "buildpacks", "group", 1, "uri")``).
KeyPath: TypeAlias = tuple[str | int, ...]


def dotted(path: KeyPath) -> str:
    """``path`` as a dotted key, arrays by index: ``io.buildpacks.group[0].uri``."""
    text = ""
    for name in path:
        if isinstance(name, int):
            text += f"[{name}]"
        else:
            text = f"{text}.{name}" if text else name
    return text
