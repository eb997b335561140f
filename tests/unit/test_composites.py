"""The target check of composites in memory (issue 48): each buildpack looked up and decided once, what is said
linear in the tree however many paths reach a buildpack, and the tree's nesting and size bounded with a refusal
that names them. The real path (a ``.cnb``, the CLI) is tests/integration/test_composite_expansion.py."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable

import pytest

from preparer.errors import TargetRefused
from preparer.files.buildpack import BuildpackDescriptor, BuildpackTarget
from preparer.files.order import OrderElement
from preparer.target import MAX_CHECKED, MAX_COMPOSITE_DEPTH, Lookup, Target, check_targets, why_not

AMD64 = Target("linux", "amd64", source="CNB_PREPARER_PLATFORM")
ARM64 = (BuildpackTarget("linux", "arm64"),)
Found = tuple[BuildpackDescriptor, Callable[[str], bool]]


def component(bp_id: str, targets: tuple[BuildpackTarget, ...] = ()) -> BuildpackDescriptor:
    return BuildpackDescriptor(bp_id, "1", "0.10", targets=targets or (BuildpackTarget("linux"),))


def composite(
    bp_id: str, *groups: tuple[str, ...], optional: frozenset[str] = frozenset()
) -> BuildpackDescriptor:
    order = tuple(tuple(OrderElement(m, "1", m in optional) for m in group) for group in groups)
    return BuildpackDescriptor(bp_id, "1", "0.10", order=order)


def counting(buildpacks: list[BuildpackDescriptor]) -> tuple[Lookup, Counter[str]]:
    """A lookup over ``buildpacks`` that counts what it is asked."""
    by_ref = {(bp.id, bp.version): bp for bp in buildpacks}
    asked: Counter[str] = Counter()

    def lookup(bp_id: str, version: str) -> Found | None:
        asked[bp_id] += 1
        found = by_ref.get((bp_id, version))
        return None if found is None else (found, lambda name: False)

    return lookup, asked


def diamonds(levels: int, bottom: BuildpackDescriptor, apart: bool = False) -> list[BuildpackDescriptor]:
    """``c0`` ... ``c<levels>``: each ``c<n>`` has one group naming ``a<n>`` and ``b<n>`` (or, ``apart``, a group
    for each), each of which has one group naming ``c<n+1>``; 2^levels paths reach ``bottom``, which the last ``c``
    names."""
    buildpacks = [bottom, composite(f"c{levels}", (bottom.id,))]
    for n in range(levels):
        buildpacks += [
            composite(f"c{n}", (f"a{n}",), (f"b{n}",)) if apart else composite(f"c{n}", (f"a{n}", f"b{n}")),
            composite(f"a{n}", (f"c{n + 1}",)),
            composite(f"b{n}", (f"c{n + 1}",)),
        ]
    return buildpacks


def test_a_buildpack_reached_by_two_to_the_fifteen_paths_is_looked_up_and_told_once() -> None:
    # Within the depth bound: c0 > a0 > c1 > ... > c15 is 31 composites.
    buildpacks = diamonds(15, component("leaf", ARM64), apart=True)
    lookup, asked = counting(buildpacks)
    start = time.monotonic()
    why = why_not(buildpacks[2], lambda name: False, AMD64, lookup, [])
    assert time.monotonic() - start < 1
    assert set(asked.values()) == {1}, asked.most_common(3)
    assert why is not None and why.count("it runs on linux/arm64") == 1 and len(why) < 5_000
    none = "none of its groups can run on this build"
    told = f"{none} (in group 1, leaf@1: it runs on linux/arm64; this build is linux/amd64 (CNB_PREPARER_PLATFORM))"
    for n in range(14, -1, -1):
        told = (
            f"{none} (in group 1, a{n}@1: {none} (in group 1, c{n + 1}@1: {told}); "
            f"in group 2, b{n}@1: {none} (in group 1, c{n + 1}@1 (as above)))"
        )
    assert why == told


def test_an_optional_member_that_cannot_run_is_warned_of_once_however_many_paths_reach_it() -> None:
    bottom = composite("bottom", ("any", "arm"), optional=frozenset({"arm"}))
    buildpacks = [*diamonds(15, bottom), component("any"), component("arm", ARM64)]
    lookup, asked = counting(buildpacks)
    warnings = check_targets([(buildpacks[2], lambda name: False)], AMD64, lookup, enforced=True)
    said = "bottom@1: its optional arm@1 cannot run on this build: it runs on linux/arm64; this build is linux/amd64"
    assert warnings == [f"{said} (CNB_PREPARER_PLATFORM)"]
    assert set(asked.values()) == {1}


def test_tops_that_share_a_tree_look_it_up_once() -> None:
    buildpacks = diamonds(10, component("leaf"))
    lookup, asked = counting(buildpacks)
    tops = [(bp, lambda name: False) for bp in buildpacks if bp.id.startswith("c")]
    assert check_targets(tops, AMD64, lookup, enforced=True) == []
    assert set(asked.values()) == {1}


def test_composites_nested_one_past_the_bound_are_refused_naming_the_chain() -> None:
    def chain(depth: int) -> list[BuildpackDescriptor]:
        return [component("leaf")] + [
            composite(f"c{n}", (f"c{n + 1}" if n < depth else "leaf",)) for n in range(1, depth + 1)
        ]

    lookup, _ = counting(chain(MAX_COMPOSITE_DEPTH))
    assert why_not(chain(MAX_COMPOSITE_DEPTH)[1], lambda name: False, AMD64, lookup, []) is None
    deeper = chain(MAX_COMPOSITE_DEPTH + 1)
    lookup, _ = counting(deeper)
    with pytest.raises(TargetRefused) as info:
        check_targets([(deeper[1], lambda name: False)], AMD64, lookup, enforced=False)
    names = " > ".join(f"c{n}@1" for n in range(1, MAX_COMPOSITE_DEPTH + 2))
    assert info.value.message == (
        f"failed to install c1@1: its composites nest more than {MAX_COMPOSITE_DEPTH} deep, the most the preparer "
        f"checks: {names}"
    )
    assert (info.value.exit_code, info.value.buildpack) == (1, "c1@1")


def test_a_tree_naming_more_buildpacks_than_the_bound_is_refused() -> None:
    members = tuple(f"m{n}" for n in range(MAX_CHECKED + 1))
    top = composite("top", members)
    lookup, asked = counting([top, *(component(m) for m in members)])
    with pytest.raises(TargetRefused) as info:
        why_not(top, lambda name: False, AMD64, lookup, [])
    assert info.value.message == (
        f"failed to install top@1: its composites name more than {MAX_CHECKED} buildpacks, the most the preparer "
        "checks"
    )
    assert sum(asked.values()) == MAX_CHECKED
    # One fewer is checked.
    lookup, _ = counting([composite("top", members[:-1]), *(component(m) for m in members)])
    assert why_not(composite("top", members[:-1]), lambda name: False, AMD64, lookup, []) is None
