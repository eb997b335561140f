"""From the effective configuration to a plan: what each group entry needs, and how the order is composed.

Pure: the one look at ``<buildpacks>`` goes through the ``versions_of`` callable, and paths are only tested
through ``exists``. Fetching and writing happen in :mod:`preparer.apply`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from preparer.config import EffectiveConfig, EnvEntry, GroupEntry, version_range_problem
from preparer.errors import DescriptorError, FetchError, InvalidInputsError

if TYPE_CHECKING:
    from preparer.fetch.locator import Locator
    from preparer.files.order import Group, Order, OrderElement


class Present(NamedTuple):
    """An entry naming a buildpack already in ``<buildpacks>``, resolved to a concrete version."""

    entry: GroupEntry
    id: str
    version: str
    #: ``"installed"`` when a bare id in ``uri`` was found in ``<buildpacks>`` (contract §7.11b), else ``None``.
    resolved: str | None = None


class Fetch(NamedTuple):
    """An entry whose buildpack comes from elsewhere (path, archive, URL, image, registry)."""

    entry: GroupEntry
    locator: Locator


class Inline(NamedTuple):
    """An inline (``script``) buildpack to generate."""

    entry: GroupEntry


Step = Present | Fetch | Inline


@dataclass(frozen=True)
class Plan:
    """What a run will do, before any fetch or write."""

    config: EffectiveConfig
    pre: tuple[Step, ...] = ()
    group: tuple[Step, ...] | None = None
    post: tuple[Step, ...] = ()

    @property
    def writes_order(self) -> bool:
        """``<layers>/order.toml`` is written only when a group, pre or post group is given (contract §7.8)."""
        c = self.config
        return c.group is not None or c.pre is not None or c.post is not None

    @property
    def needs_builder_order(self) -> bool:
        """Pre/post without a group wrap the builder's groups."""
        return self.writes_order and self.group is None

    @property
    def steps(self) -> tuple[Step, ...]:
        """Every step, in order: pre, group, post."""
        return (*self.pre, *(self.group or ()), *self.post)


def make_plan(
    config: EffectiveConfig,
    base_dir: Path,
    buildpacks_dir: Path,
    versions_of: Callable[[str], Sequence[str]],
    exists: Callable[[Path], bool] = os.path.exists,
) -> Plan:
    """Classify every group entry and resolve those naming buildpacks in ``<buildpacks>``.

    Everything that can be decided without the network is decided here, for every entry before any fetch
    starts, so a dry run and a real run exit alike for it (contract §7.11).

    :param versions_of: versions of an id installed in ``<buildpacks>``.
    :raises InvalidInputsError: a malformed ``uri``, an id that contradicts its ``uri``, a version range (exit 3).
    :raises FetchError: an id not in ``<buildpacks>``, no usable version of it, a missing local path (exit 1).
    """

    def steps(entries: tuple[GroupEntry, ...] | None) -> tuple[Step, ...]:
        return tuple(_step(e, base_dir, buildpacks_dir, versions_of, exists) for e in entries or ())

    return Plan(
        config=config,
        pre=steps(config.pre),
        group=None if config.group is None else steps(config.group),
        post=steps(config.post),
    )


def _step(
    entry: GroupEntry,
    base_dir: Path,
    buildpacks_dir: Path,
    versions_of: Callable[[str], Sequence[str]],
    exists: Callable[[Path], bool],
) -> Step:
    if entry.script is not None:
        return Inline(entry)
    if entry.uri is None:
        assert entry.id is not None  # checked by config: an entry has an id, a uri or a script
        version = None if entry.version in (None, "latest") else entry.version
        return Present(entry, entry.id, _resolve(entry.id, version, entry, buildpacks_dir, versions_of))
    # Only entries with a uri need the locators.
    from preparer.fetch.locator import BuilderLocator, IdLocator, PathLocator, parse_locator, redact

    try:
        locator = parse_locator(entry.uri, base_dir, exists)
    except InvalidInputsError as err:
        raise DescriptorError(
            f"validate {entry.file}", f"{entry.key}.uri '{redact(entry.uri)}': {err.cause}"
        ) from None
    if isinstance(locator, PathLocator):
        if not exists(locator.path):
            raise FetchError(
                f"resolve {entry.key} ({redact(entry.uri)})", f"{locator.path}: no such file or directory"
            )
        return Fetch(entry, locator)
    if not isinstance(locator, BuilderLocator | IdLocator):
        return Fetch(entry, locator)
    problem = None if locator.version is None else version_range_problem(locator.version)
    if problem:
        raise DescriptorError(f"validate {entry.file}", f"{entry.key}.uri: {problem}")
    if isinstance(locator, BuilderLocator):
        return Present(
            entry, locator.id, _resolve(locator.id, locator.version, entry, buildpacks_dir, versions_of)
        )
    if entry.id is not None and entry.id != locator.id:
        raise DescriptorError(
            f"validate {entry.file}", f"{entry.key}: id '{entry.id}' does not match uri '{entry.uri}'"
        )
    # A bare id: the buildpack installed in <buildpacks> when it is there (no request at all), else fetched.
    installed = versions_of(locator.id)
    if installed and (locator.version is None or locator.version in installed):
        version = _resolve(locator.id, locator.version, entry, buildpacks_dir, versions_of)
        return Present(entry, locator.id, version, "installed")
    return Fetch(entry, locator)


def _resolve(
    bp_id: str,
    version: str | None,
    entry: GroupEntry,
    buildpacks_dir: Path,
    versions_of: Callable[[str], Sequence[str]],
) -> str:
    """The version of ``bp_id`` to use: the one asked for, or the highest semver present."""
    versions = versions_of(bp_id)
    action = f"resolve {entry.key} ({bp_id})"
    if not versions:
        raise FetchError(action, f"buildpack '{bp_id}' was not found in {buildpacks_dir}")
    if version is not None:
        if version not in versions:
            raise FetchError(
                action,
                f"version '{version}' of '{bp_id}' was not found in {buildpacks_dir} (found: {', '.join(versions)})",
            )
        return version
    from preparer.semver import highest

    best = highest(versions)
    if best is None:
        raise FetchError(
            action,
            f"none of the versions of '{bp_id}' in {buildpacks_dir} is a semantic version "
            f"({', '.join(versions)}); give an explicit version",
        )
    return best


def compose_order(
    pre: Sequence[OrderElement],
    group: Sequence[OrderElement] | None,
    post: Sequence[OrderElement],
    builder: Order,
) -> Order:
    """The prepared order (contract §3, §7.9).

    With a group, one group ``pre + group + post``; without, ``pre`` and ``post`` wrap every builder group.
    Either way a pre or post element whose id the group already holds is skipped, so a second run changes nothing.
    The builder's ``order-extensions`` are kept.
    """
    from preparer.files.order import Order

    groups = (tuple(group),) if group is not None else builder.groups
    return Order(tuple(_wrap(pre, g, post) for g in groups), builder.extensions)


def _wrap(pre: Sequence[OrderElement], group: Group, post: Sequence[OrderElement]) -> Group:
    ids = {e.id for e in group}
    head = []
    for element in pre:
        if element.id not in ids:
            head.append(element)
            ids.add(element.id)
    tail = []
    for element in post:
        if element.id not in ids:
            tail.append(element)
            ids.add(element.id)
    return (*head, *group, *tail)


def env_actions(entries: Sequence[EnvEntry], existing: set[str]) -> list[tuple[EnvEntry, str, str | None]]:
    """What to do with each build env variable: ``(entry, action, warning)`` (contract §3).

    Names starting ``CNB_`` are reserved and skipped; a file the platform already put in ``<platform>/env``
    holds the user's explicit setting and is kept.
    """
    actions: list[tuple[EnvEntry, str, str | None]] = []
    for entry in entries:
        if entry.name.startswith("CNB_"):
            actions.append(
                (entry, "skipped", f"{entry.key}: {entry.name} is reserved (CNB_ prefix); not written")
            )
        elif entry.name in existing:
            actions.append(
                (
                    entry,
                    "kept",
                    f"{entry.key}: <platform>/env/{entry.name} already exists; keeping the platform's value",
                )
            )
        else:
            actions.append((entry, "written", None))
    return actions
