"""``FrozenMap``: a mapping copied when it is made and never changed after, for an environment a caller hands the
library (``Inputs(environ=d)``, ``Transport(environ=d)``): the caller goes on editing ``d`` for its next build,
and what was checked when the record was built is what its runs read. It pickles (a plan made in one process is
applied in another) and hashes, as the frozen records that hold it do.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any


class FrozenMap(Mapping[str, str]):
    """A read-only copy of a mapping of strings (``dict(mapping)`` taken once); equal to any mapping of the same
    items, as a ``dict`` is."""

    __slots__ = ("_items",)
    _items: dict[str, str]

    def __init__(self, items: Mapping[str, str] | None = None) -> None:
        object.__setattr__(self, "_items", dict(items) if items is not None else {})

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: str, default: Any = None) -> Any:  # the dict's own, without Mapping's try/except
        return self._items.get(key, default)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._items == other._items
        return self._items == other if isinstance(other, dict) else super().__eq__(other)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __repr__(self) -> str:
        return f"FrozenMap({self._items!r})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"FrozenMap is read-only: cannot set {name!r}")

    def __reduce__(self) -> tuple[type[FrozenMap], tuple[dict[str, str]]]:
        return FrozenMap, (self._items,)


def frozen(items: Mapping[str, str]) -> FrozenMap:
    """``items`` as a :class:`FrozenMap` (itself when it is one already: nothing can change it)."""
    return items if isinstance(items, FrozenMap) else FrozenMap(items)
