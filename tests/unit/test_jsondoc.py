"""Documents from outside are bounded in what their parse builds (preparer/_jsondoc.py), on every keyless parse
(policy/payload.py ``read_json``: bundles, payloads, Rekor bodies, trusted roots): refused in words before anything
is built, memory measured with tracemalloc; deep nesting and huge numbers are refusals, never bare Python errors."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from preparer._jsondoc import MAX_ITEMS, DocumentRefused, items, loads
from preparer.policy.keyless.model import RootProblem
from preparer.policy.keyless.root import MAX_ROOT_BYTES, parse_root
from preparer.policy.payload import PayloadProblem, read_json

MIB = 1 << 20


def empty_objects(size: int) -> bytes:
    count = (size - 1) // 3
    return b"[" + b"{}," * (count - 1) + b"{}]"


def test_sixteen_mib_of_empty_objects_is_refused_before_anything_is_built() -> None:
    data = empty_objects(16 * MIB)
    tracemalloc.start()
    try:
        with pytest.raises(PayloadProblem) as caught:
            read_json(data)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(caught.value) == (
        f"it holds {items(data)} commas, objects and arrays, more than the {MAX_ITEMS} a document read here may"
    )
    assert peak < MIB, peak  # before: the parse built 5.6 million dictionaries (over 400 MiB)


def test_a_document_within_the_bound_is_read() -> None:
    data = json.dumps({"entries": [{} for _ in range(MAX_ITEMS // 2 - 1)]}).encode()
    assert items(data) == MAX_ITEMS - 1  # 2n + 1 for n empty objects in an object
    assert len(read_json(data)["entries"]) == MAX_ITEMS // 2 - 1
    assert loads(b"[" + b"0," * (MAX_ITEMS - 1) + b"0]") == [0] * MAX_ITEMS


def test_the_count_is_of_what_can_open_an_element() -> None:
    assert items(b'{"a": [1, 2, {"b": "c"}]}') == 5
    assert items('{"a": "x"}') == 1
    with pytest.raises(DocumentRefused):
        loads("[" * 5 + "]" * 5, most=4)


@pytest.mark.parametrize("depth", [34, 500, 5000, 100_000])
def test_deep_nesting_is_a_refusal_in_words(depth: int) -> None:
    with pytest.raises(PayloadProblem, match="nested deeper than"):
        read_json(b"[" * depth + b"]" * depth)


def test_deep_nesting_past_the_interpreters_limit_is_refused_by_the_reader_itself() -> None:
    with pytest.raises(DocumentRefused, match="nested deeper than a document read here may be"):
        loads(b"[" * 50_000 + b"]" * 50_000, most=10**6)


def test_a_five_thousand_digit_integer_is_a_refusal_in_words() -> None:
    with pytest.raises(PayloadProblem, match=r"^it is not JSON \("):
        read_json(b'{"logIndex": ' + b"9" * 5000 + b"}")


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (
            empty_objects(MAX_ROOT_BYTES - 10),
            "not a trusted root: it holds 699042 commas, objects and arrays",
        ),
        (b"[" * 5000 + b"]" * 5000, "not a trusted root: it is nested deeper than 32 levels"),
        (b'{"mediaType": ' + b"1" * 5000 + b"}", "not a trusted root: it is not JSON ("),
    ],
    ids=["empty objects", "deep", "huge number"],
)
def test_a_hostile_trusted_root_is_a_root_problem_in_words(data: bytes, says: str) -> None:
    with pytest.raises(RootProblem) as caught:
        parse_root(data, "trusted_root.json")
    assert str(caught.value).startswith(says)
