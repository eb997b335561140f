"""RFC 7396 JSON Merge Patch over TOML tables: how a platform's namespace overlays ``io.buildpacks``.

``merge`` is the only caller of ``json_merge_patch`` (whose PyPI summary cites RFC 7386; its algorithm is the one
RFC 7396 keeps). Rules, as RFC 7396 §2 and the prepare RFC state them:

- a patch that is not a table replaces the target whole;
- a key whose patch value is null is removed from the target;
- tables merge key by key, recursively; arrays are replaced, never appended.

TOML has no null, so :func:`nulls_from_empty_tables` turns an empty table (``builder = {}``) in a patch into null
before merging: in a patch, ``{}`` means "remove this key". An empty table cannot therefore be set
through a patch; no property of ``io.buildpacks`` is an empty table.
"""

from __future__ import annotations

import copy
from typing import Any


def nulls_from_empty_tables(patch: Any) -> Any:
    """A copy of ``patch`` in which every empty table, at any depth outside arrays, is ``None``."""
    if isinstance(patch, dict):
        if not patch:
            return None
        return {key: nulls_from_empty_tables(value) for key, value in patch.items()}
    return patch


def _has_null(value: Any) -> bool:
    if isinstance(value, dict):
        return any(v is None or _has_null(v) for v in value.values())
    return False


def merge(target: Any, *patches: Any) -> Any:
    """Apply ``patches`` to ``target`` in order, per RFC 7396; neither argument is modified.

    >>> merge({"a": "b", "c": {"d": "e", "f": "g"}}, {"a": "z", "c": {"f": None}})
    {'a': 'z', 'c': {'d': 'e'}}
    """
    if target == {} and len(patches) == 1 and not _has_null(patches[0]):
        # Merging onto nothing, a patch without nulls is itself (RFC 7396): the descriptor's own tables.
        return copy.deepcopy(patches[0])
    from json_merge_patch import merge as _merge_patch  # deferred: only runs with a platform patch need it

    result = copy.deepcopy(target)
    for patch in patches:
        if isinstance(patch, dict):
            # json_merge_patch keeps a non-object target when the patch is an object; RFC 7396 replaces it.
            base = result if isinstance(result, dict) else {}
            result = _merge_patch(copy.deepcopy(base), copy.deepcopy(patch))
        else:
            result = copy.deepcopy(patch)
    return result
