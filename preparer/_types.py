"""Type aliases shared across the package."""

from __future__ import annotations

from typing import Any, TypeAlias

#: A TOML table as tomli returns it; after a merge patch, ``None`` marks a deleted key.
TOMLTable: TypeAlias = dict[str, Any]
#: A key's path in a TOML document: table and key names, and the index of each array element
#: (``("io", "buildpacks", "group", 1, "uri")``).
KeyPath: TypeAlias = tuple[str | int, ...]
