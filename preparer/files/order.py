"""``order.toml``: the builder's order (read from ``-order``) and the prepared one (``<layers>/order.toml``).

Spec: platform.md §order.toml. Every element has ``id`` and ``version``; ``optional`` defaults to false and is
written only when true. ``[[order-extensions]]`` of the builder's order are carried over unchanged.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from preparer._record import record
from preparer.errors import BuilderError
from preparer.files import MalformedError
from preparer.files.toml import dumps_toml, read_toml


@record
class OrderElement:
    """One buildpack of a group."""

    id: str
    version: str
    optional: bool = False

    @property
    def ref(self) -> str:
        """``<id>@<version>``."""
        return f"{self.id}@{self.version}"


Group = tuple[OrderElement, ...]


@record
class Order:
    """An order: groups of buildpacks, tried in turn, plus the extensions' order kept as read."""

    groups: tuple[Group, ...] = ()
    extensions: tuple[Any, ...] = ()


def parse_groups(order: object, *, versions: bool) -> tuple[Group, ...]:
    """The groups of an ``[[order]]`` array, the one parser of ``[[order.group]]`` (a builder's ``order.toml``
    and a composite buildpack's ``buildpack.toml`` alike). Pure.

    :param versions: every element must have a version (a composite's); otherwise a missing one is ``""``.
    :raises MalformedError: naming what is malformed.
    """
    if not isinstance(order, list):
        raise MalformedError("[[order]] must be an array of tables")
    groups = []
    for item in order:
        group = item.get("group", []) if isinstance(item, dict) else None
        if not isinstance(group, list):
            raise MalformedError("[[order.group]] must be an array of tables")
        elements = []
        for element in group:
            version = element.get("version", None if versions else "") if isinstance(element, dict) else None
            if not isinstance(element, dict) or not isinstance(element.get("id"), str):
                raise MalformedError(
                    "every [[order.group]] entry needs an id and a version"
                    if versions
                    else "every [[order.group]] element needs an id"
                )
            if versions and not isinstance(version, str):
                raise MalformedError("every [[order.group]] entry needs an id and a version")
            elements.append(
                OrderElement(
                    element["id"],
                    version if isinstance(version, str) else "",
                    element.get("optional") is True,
                )
            )
        groups.append(tuple(elements))
    return tuple(groups)


def parse_order(doc: dict[str, Any], where: str) -> Order:
    """Read ``[[order]]`` and keep ``[[order-extensions]]`` as tables.

    :raises BuilderError: when an element lacks ``id`` (exit 1; the builder's files are the platform's, not the
        user's).
    """
    try:
        groups = parse_groups(doc.get("order", []), versions=False)
    except MalformedError as why:
        raise BuilderError(f"read builder order {where}", str(why)) from why
    extensions = doc.get("order-extensions", [])
    return Order(groups, tuple(extensions) if isinstance(extensions, list) else ())


def read_order(path: Path) -> Order:
    """Load the order at ``path``.

    :raises BuilderError: when it is missing, unreadable or malformed (exit 1).
    """
    return parse_order(
        read_toml(path, "builder order", error=BuilderError, action="read builder order").table, str(path)
    )


def dumps_order(order: Order) -> str:
    """The text of ``order.toml``, laid out as the spec shows it; equal orders give equal bytes."""
    lines: list[str] = []
    for group in order.groups:
        lines.append("[[order]]")
        for element in group:
            lines += ["", "  [[order.group]]"]
            lines += ["  " + line for line in dumps_toml(_element(element)).splitlines()]
        lines.append("")
    for item in order.extensions:
        # Extensions are carried over as read: keep every key of each element.
        lines.append("[[order-extensions]]")
        group = item.get("group", []) if isinstance(item, dict) else []
        for element in group if isinstance(group, list) else []:
            lines += ["", "  [[order-extensions.group]]"]
            lines += ["  " + line for line in dumps_toml(dict(element)).splitlines()]
        lines.append("")
    return "\n".join(lines)


def _element(element: OrderElement) -> dict[str, Any]:
    table: dict[str, Any] = {"id": element.id, "version": element.version}
    if element.optional:
        table["optional"] = True
    return table
