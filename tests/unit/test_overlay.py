"""RFC 7396 merge patch: the RFC's Appendix A vectors, plus TOML's empty-table-means-null rule."""

from __future__ import annotations

from typing import Any

import pytest

from preparer.overlay import merge, nulls_from_empty_tables

# RFC 7396, Appendix A: (original, patch, result).
APPENDIX_A: list[tuple[Any, Any, Any]] = [
    ({"a": "b"}, {"a": "c"}, {"a": "c"}),
    ({"a": "b"}, {"b": "c"}, {"a": "b", "b": "c"}),
    ({"a": "b"}, {"a": None}, {}),
    ({"a": "b", "b": "c"}, {"a": None}, {"b": "c"}),
    ({"a": ["b"]}, {"a": "c"}, {"a": "c"}),
    ({"a": "c"}, {"a": ["b"]}, {"a": ["b"]}),
    ({"a": {"b": "c"}}, {"a": {"b": "d", "c": None}}, {"a": {"b": "d"}}),
    ({"a": [{"b": "c"}]}, {"a": [1]}, {"a": [1]}),
    (["a", "b"], ["c", "d"], ["c", "d"]),
    ({"a": "b"}, ["c"], ["c"]),
    ({"a": "foo"}, None, None),
    ({"a": "foo"}, "bar", "bar"),
    ({"e": None}, {"a": 1}, {"e": None, "a": 1}),
    ([1, 2], {"a": "b", "c": None}, {"a": "b"}),
    ({}, {"a": {"bb": {"ccc": None}}}, {"a": {"bb": {}}}),
]


@pytest.mark.parametrize(("original", "patch", "result"), APPENDIX_A)
def test_rfc7396_appendix_a(original: Any, patch: Any, result: Any) -> None:
    assert merge(original, patch) == result


def test_merge_leaves_its_arguments_alone() -> None:
    target, patch = {"a": {"b": [1]}}, {"a": {"c": 2}}
    merge(target, patch)
    assert target == {"a": {"b": [1]}} and patch == {"a": {"c": 2}}


def test_patches_apply_in_order() -> None:
    assert merge({"a": 1}, {"a": 2, "b": 1}, {"a": None}) == {"b": 1}


def test_arrays_are_replaced_not_appended() -> None:
    env = {"build": {"env": [{"name": "A"}, {"name": "B"}]}}
    assert merge(env, {"build": {"env": [{"name": "C"}]}}) == {"build": {"env": [{"name": "C"}]}}


def test_empty_tables_mean_null_in_a_patch() -> None:
    patch = nulls_from_empty_tables({"builder": {}, "build": {"env": []}, "x": {"y": {}}})
    assert patch == {"builder": None, "build": {"env": []}, "x": {"y": None}}
    assert merge({"builder": "b", "x": {"y": 1, "z": 2}}, patch) == {"build": {"env": []}, "x": {"z": 2}}
