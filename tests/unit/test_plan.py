"""Order composition (docs/decisions.md, "Order") and the env actions."""

from __future__ import annotations

from preparer.entries import EnvEntry
from preparer.files.order import Order, OrderElement
from preparer.plan import compose_order, env_actions, wrap

A, B, C = OrderElement("a", "1"), OrderElement("b", "1"), OrderElement("c", "1", optional=True)
P1, P2, Q = OrderElement("p1", "1"), OrderElement("p2", "1"), OrderElement("q", "1")
BUILDER = Order(((A, C), (B,)), ({"group": [{"id": "ext", "version": "1"}]},))


def test_group_replaces_the_builder_order_but_keeps_extensions() -> None:
    assert compose_order([], [B], [], BUILDER) == Order(((B,),), BUILDER.extensions)


def test_pre_and_post_wrap_every_builder_group_in_declared_order() -> None:
    assert compose_order([P1, P2], None, [Q], BUILDER).groups == ((P1, P2, A, C, Q), (P1, P2, B, Q))


def test_ids_already_in_the_group_are_skipped_so_a_second_run_changes_nothing() -> None:
    once = compose_order([A, P1], None, [C, P1, Q], BUILDER)
    assert once.groups == ((P1, A, C, Q), (A, P1, B, C, Q))
    twice = compose_order([A, P1], None, [C, P1, Q], once)
    assert twice.groups == once.groups


def test_env_actions() -> None:
    entries = [EnvEntry("k0", "CNB_X", "1"), EnvEntry("k1", "SET", "2"), EnvEntry("k2", "NEW", "3")]
    actions = [(each.entry.name, each.action) for each in env_actions(entries, {"SET"})]
    assert actions == [("CNB_X", "skipped"), ("SET", "kept"), ("NEW", "written")]


def test_an_element_whose_id_is_not_known_yet_matches_none() -> None:
    # A buildpack fetched by uri has its id once fetched: until then it neither leaves out nor is left out.
    def id_of(element: tuple[str | None, str]) -> str | None:
        return element[0]

    pre = [(None, "./a"), ("p", "p"), (None, "./b")]
    group = [(None, "./c"), ("p", "g")]
    assert wrap(pre, group, [(None, "./d"), ("q", "q"), ("q", "q2")], id_of) == (
        (None, "./a"), (None, "./b"), (None, "./c"), ("p", "g"), (None, "./d"), ("q", "q"),
    )  # fmt: skip
