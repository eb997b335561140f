"""The groups as the lifecycle's detector will run them (Platform API 0.15; docs/detector.md).

The detector reads the prepared order (or the builder's, when the project sets no group), merges the platform's
system buildpacks (system.toml) before and after every group, looks every buildpack of every group up in
``<buildpacks>`` at start-up, and, running a group, skips each buildpack whose ``exec-env`` does not hold the
build's. This module says the same of a run before anything is written: each group as it will run, each element
marked with where it came from (``system.toml``, the project, the builder's order) and whether it will be skipped;
and it refuses what the detector would fail on at start-up, or find nothing to run in.

:func:`with_detection` decides it while planning (a buildpack the run fetches is read once fetched, not before);
:func:`settled` decides it again once everything is fetched, before the commit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from preparer._logger import log
from preparer._record import field, record
from preparer.api import verify_buildpack_api
from preparer.detection import Detection, DetectorGroup, Member, SystemAction
from preparer.errors import DetectionRefused, TargetRefused, with_fields
from preparer.execenv import ENV_EXEC_ENV, SKIPS_FROM, shown, skip_reason
from preparer.files.buildpack import check_id, installed_versions, version_problem
from preparer.files.system import DEFAULT_SYSTEM_PATH, SystemBuildpack, SystemBuildpacks, read_system
from preparer.plan import Plan, Present, Step, source_of, wrap

if TYPE_CHECKING:
    from preparer.api import APIVersion
    from preparer.fetch.base import Fetched
    from preparer.files.buildpack import BuildpackDescriptor
    from preparer.files.order import Order
    from preparer.settings import DetectorSettings
    from preparer.target import Lookup, Target


def with_detection(plan: Plan, settings: DetectorSettings) -> Plan:
    """``plan`` with the groups as the detector will run them (:attr:`Plan.detection`), decided while planning:
    its system buildpacks and the builder's checked as the detector checks them at start-up, its warnings logged
    and kept with the plan's.

    :raises DetectionRefused: a system buildpack or one of the builder's order not in ``<buildpacks>``, or every
        group left empty by exec-env skips (exit 1).
    :raises BuildpackAPIError: such a buildpack's Buildpack API is not supported (exit 12).
    :raises TargetRefused: a system buildpack cannot run on the build's target (exit 1).
    :raises BuilderError: system.toml, the builder's order or such a buildpack.toml cannot be read (exit 1).
    """
    from preparer.target import installed  # deferred, as everywhere a buildpack.toml is read

    lookup = _cached(lambda bp_id, version: installed(settings.buildpacks_dir, bp_id, version))
    detection, warnings = detect(plan, settings, lookup)
    _say_system(detection)
    for warning in warnings:
        log.warning("%s", warning)
    return replace(plan, detection=detection, warnings=(*plan.warnings, *warnings))


def settled(
    plan: Plan, settings: DetectorSettings, results: Mapping[int, Fetched], lookup: Lookup
) -> tuple[Detection, list[str]]:
    """The groups once every buildpack of the run is fetched (``results``, by the ``id`` of their step; ``lookup``
    finds the staged ones first), and the warnings not said while planning.

    :raises: as :func:`with_detection`.
    """
    detection, warnings = detect(plan, settings, _cached(lookup), results)
    said = set(plan.warnings)
    return detection, [w for w in warnings if w not in said]


def detect(
    plan: Plan, settings: DetectorSettings, lookup: Lookup, results: Mapping[int, Fetched] | None = None
) -> tuple[Detection, list[str]]:
    """The groups as the detector will run them, and the warnings to give: what :func:`with_detection` and
    :func:`settled` decide, with ``lookup`` finding each buildpack (``None``: not there) and ``results`` what the
    run fetched (none while planning)."""
    warnings: list[str] = []
    applies = settings.platform_api >= SKIPS_FROM
    system, action = _system(settings, applies, warnings)
    base, builder = _base_groups(plan, settings, results or {}, system is not None)
    groups = [_merged(group, system) for group in base]
    checked: set[str] = set()
    for group in groups:
        if applies:
            _require(group, settings, lookup, plan.target, checked, warnings)
    context = _Context(lookup, settings.exec_env, settings.platform_api, applies)
    found = tuple(_group(group, context, warnings) for group in groups)
    detection = Detection(settings.exec_env, applies, settings.system_path, action, system, found, builder)
    _refuse_empty(detection, settings)
    return detection, warnings


def _cached(lookup: Lookup) -> Lookup:
    """``lookup`` asked once per buildpack: a group names many more than once, and each is read from disk."""
    seen: dict[tuple[str, str], Any] = {}

    def cached(bp_id: str, version: str) -> Any:
        if (bp_id, version) not in seen:
            seen[bp_id, version] = lookup(bp_id, version)
        return seen[bp_id, version]

    return cached


# system.toml


def _system(
    settings: DetectorSettings, applies: bool, warnings: list[str]
) -> tuple[SystemBuildpacks | None, SystemAction]:
    """The system buildpacks the detector will merge, and what the run does with system.toml; warnings for a file
    given that it will not read."""
    path = settings.system_path
    if not applies:
        if path is not None and path != DEFAULT_SYSTEM_PATH:
            warnings.append(
                f"the system buildpacks of {path} (-system, CNB_SYSTEM_PATH) are not applied: the detector reads "
                f"system.toml from Platform API 0.15, and this build's is {settings.platform_api} (whose detector "
                "refuses a -system flag, and ignores CNB_SYSTEM_PATH)"
            )
        return None, "" if path is None else "not applied"
    if settings.disabled or path is None:
        return None, "off"
    system = read_system(path)
    if system is None:
        if path != DEFAULT_SYSTEM_PATH:
            warnings.append(
                f"no system buildpacks: {path} (-system, CNB_SYSTEM_PATH) does not exist (the detector, given the "
                "same path, merges none either)"
            )
        return None, "none"
    warnings.extend(system.warnings)
    return (system if system.pre or system.post else None), "merged"


def _say_system(detection: Detection) -> None:
    """What the run does with system.toml, logged once while planning."""
    path, action = detection.system_path, detection.system_action
    if action == "off" and path is not None:
        log.info(
            "System buildpacks are off for this build (-disable-system-buildpacks): give the detector -system \"\" "
            "too, or it merges those of %s all the same", path,
        )  # fmt: skip
    elif action in ("off", "none"):
        log.debug('No system buildpacks found at path "%s"', path or "")
    elif action == "not applied":
        log.debug("System buildpacks (%s) are read from Platform API 0.15", path)
    elif detection.system is not None:
        system = detection.system
        log.debug(
            "System buildpacks of %s: %d before and %d after every group",
            path,
            len(system.pre),
            len(system.post),
        )


# The groups before system buildpacks are merged


def _base_groups(
    plan: Plan, settings: DetectorSettings, results: Mapping[int, Fetched], merging: bool
) -> tuple[list[tuple[Member, ...]], bool]:
    """The groups the detector reads (the prepared order.toml, or the builder's), and whether they are the
    builder's. None when the run writes no order and merges no system buildpacks: it changes nothing of them."""
    pre = [_project(step, results) for step in plan.pre]
    post = [_project(step, results) for step in plan.post]
    if plan.config.writes_order and plan.group is not None:
        group = [_project(step, results) for step in plan.group]
        return [wrap(pre, group, post, _id_of)], False
    if plan.config.writes_order:
        return [wrap(pre, group, post, _id_of) for group in _builder(plan.builder_order)], True
    if not merging or not settings.order_path.is_file():
        return [], False
    from preparer.files.order import (
        read_order,
    )  # deferred: only a run merging system buildpacks reads it here

    return list(_builder(read_order(settings.order_path))), True


def _id_of(member: Member) -> str | None:
    return member.id or None


def _builder(order: Order | None) -> list[tuple[Member, ...]]:
    groups = order.groups if order is not None else ()
    return [
        tuple(
            Member(e.id, e.version, "builder order", f"order[{n}].group[{m}]", e.optional)
            for m, e in enumerate(group)
        )
        for n, group in enumerate(groups)
    ]


def _project(step: Step, results: Mapping[int, Fetched]) -> Member:
    """The element a project's entry becomes: its buildpack, or, fetched and not yet, what names it."""
    key = step.entry.key
    if isinstance(step, Present):
        return Member(step.id, step.version, "project", key)
    fetched = results.get(id(step))
    if fetched is not None:
        return Member(fetched.top.id, fetched.top.version, "project", key)
    return Member(step.buildpack_id or "", "", "project", key, source=source_of(step), known=False)


def _merged(group: tuple[Member, ...], system: SystemBuildpacks | None) -> tuple[Member, ...]:
    """``group`` with the system buildpacks merged as the detector merges them: pre before, post after, each left out
    of a group that already has its id (whatever the version)."""
    if system is None:
        return group
    ids = {m.id for m in group if m.id}

    def members(side: Sequence[SystemBuildpack]) -> list[Member]:
        return [Member(b.id, b.version, "system.toml", b.key) for b in side if b.id not in ids]

    return (*members(system.pre), *group, *members(system.post))


# What the detector checks at start-up


def _require(
    group: tuple[Member, ...],
    settings: DetectorSettings,
    lookup: Lookup,
    target: Target | None,
    checked: set[str],
    warnings: list[str],
) -> None:
    """The system buildpacks and the builder's of ``group``, as the detector looks them up at start-up: in
    ``<buildpacks>``, readable, of a supported Buildpack API; a system buildpack able to run on ``target``. A group
    whose elements are not all known yet (one the run fetches by ``uri``) may still leave a system buildpack out:
    one not there is a warning until they are known, and checked again then (before anything is written)."""
    certain = all(m.id for m in group if m.origin == "project")  # a system.toml's without an id is refused
    for member in group:
        if member.origin == "project" or member.ref in checked:
            continue
        if member.origin == "system.toml" and not certain:
            if _nameable(member) and lookup(member.id, member.version) is None:
                warnings.append(_unless_fetched(member, settings, group))
            continue
        checked.add(member.ref)
        found = lookup(member.id, member.version) if _nameable(member) else None
        if found is None:
            raise _not_there(member, settings)
        descriptor, has_file = found
        verify_buildpack_api(descriptor.ref, descriptor.api)
        if member.origin == "system.toml" and target is not None and settings.checks_targets:
            _on_target(member, descriptor, has_file, target, lookup, settings)


def _unless_fetched(member: Member, settings: DetectorSettings, group: tuple[Member, ...]) -> str:
    """The warning for a system buildpack not in ``<buildpacks>`` that an entry not fetched yet may stand for."""
    unknown = ", ".join(m.ref for m in group if not m.id)
    return (
        f"{member.named} is not in {settings.buildpacks_dir}: the detector fails at start-up without it unless "
        f"{unknown} turns out to be {member.id}, which is known once fetched (the run refuses then, before anything "
        "is written)"
    )


def _nameable(member: Member) -> bool:
    """Whether ``member``'s id and version can name a directory of ``<buildpacks>``."""
    return check_id(member.id) and version_problem(member.version) is None


def _not_there(member: Member, settings: DetectorSettings) -> DetectionRefused:
    """The refusal of a system buildpack, or one of the builder's order, that the detector will not find."""
    buildpacks = settings.buildpacks_dir
    ref = (member.ref if member.version else member.id) or member.entry
    has = installed_versions(buildpacks, member.id) if check_id(member.id) else []
    found = f"; {buildpacks} has {member.id} {', '.join(has)}" if has else ""
    if member.origin == "system.toml":
        file, action = settings.system_path, f"use system buildpack {ref}"
        fix = (
            f"install it into {buildpacks}, name a version it has in system.toml, or turn system buildpacks off for "
            'this build (-disable-system-buildpacks, and -system "" for the detector)'
        )
    else:
        file, action = settings.order_path, f"use the builder's order {settings.order_path}"
        fix = f"install it into {buildpacks}, or give the order of the buildpacks there (-order)"
    if not member.id:
        why = f"{member.entry} of {file} has no id"
        fix = f"write the id and version of a buildpack in {buildpacks} there"
    elif not member.version:
        looked = buildpacks / member.id.replace("/", "_") / "buildpack.toml"
        why = f"{member.entry} of {file} names {member.id} without a version, and the detector looks for {looked}{found}"
    elif not _nameable(member):
        why = f"{member.entry} of {file} names {member.ref}, which is not a buildpack id and version"
        fix = f"write the id and version of a buildpack in {buildpacks} there"
    elif member.origin == "system.toml":
        why = f"{member.entry} of {file} names it, and it is not in {buildpacks}{found}"
    else:
        why = f"{member.entry} of {file} names {member.ref}, which is not in {buildpacks}{found}"
    cause = f"{why}: the detector fails at start-up without it; {fix}"
    return with_fields(DetectionRefused(action, cause), buildpack=ref, file=str(file))


def _on_target(
    member: Member,
    descriptor: BuildpackDescriptor,
    has_file: Callable[[str], bool],
    target: Target,
    lookup: Lookup,
    settings: DetectorSettings,
) -> None:
    """A system buildpack runs on the build's target (the detector checks it as any other; as required)."""
    from preparer.target import why_not  # deferred, as the target's checks everywhere

    why = why_not(descriptor, has_file, target, lookup, [])
    if why is None:
        return
    error = TargetRefused(
        f"use system buildpack {member.ref}", f"{why}; {settings.system_path} ({member.entry}) names it"
    )
    raise with_fields(error, buildpack=member.ref, target=target.platform, source=target.source)


# Each group as it runs


@record
class _Context:
    lookup: Lookup
    exec_env: str
    api: APIVersion
    applies: bool
    #: Each composite decided once for the ids before it and the composites above it: a chain of composites whose
    #: groups name the same next one would otherwise be walked once per path, exponential in its depth.
    held: dict[tuple[str, frozenset[str], frozenset[str]], _Held] = field(default_factory=dict)


def _group(members: tuple[Member, ...], context: _Context, warnings: list[str]) -> DetectorGroup:
    """The group as the detector runs it: each element skipped on its exec-env, or because its id runs earlier in
    the group (the detector runs an id once in a group, the first it reaches)."""
    runs: dict[str, str] = {}  # id -> what runs it
    may: dict[str, str] = {}  # id -> the composite that holds it in some of its groups
    found = []
    for member in members:
        if member.id in runs:
            member = replace(member, skipped=f"{member.id} runs earlier in this group ({runs[member.id]})")
        elif member.id and member.known and context.applies:
            if member.id in may:
                warnings.append(
                    f"{member.named} may not run: {may[member.id]} holds {member.id} in some of its groups, and the "
                    "detector runs an id once in a group (the first it reaches)"
                )
            member = _read(member, context, runs, may)
        if member.id and member.known and not member.skipped and member.id not in runs:
            runs[member.id] = member.ref
        found.append(member)
        _warn_project(member, context.exec_env, warnings)
    return DetectorGroup(tuple(found))


def _read(member: Member, context: _Context, runs: dict[str, str], may: dict[str, str]) -> Member:
    """``member`` with what its buildpack.toml says: its exec-env and whether the detector skips it; a composite's
    buildpacks asked one by one."""
    # Not nameable: refused where it is required (a group known whole); else once the run's entries are fetched.
    found = context.lookup(member.id, member.version) if _nameable(member) else None
    if found is None:  # a project's, refused where it is looked for
        return member
    descriptor = found[0]
    if not descriptor.order:
        why = skip_reason(descriptor, context.exec_env, context.api)
        return replace(member, exec_env=descriptor.exec_env, skipped=why or "")
    held = _composite(descriptor, context, frozenset(runs), frozenset())
    runs.update(dict.fromkeys(held.always, f"held by {member.ref}"))
    may.update(dict.fromkeys(held.sometimes, member.ref))
    skipped = "" if held.runs else "the detector skips every buildpack it holds"
    return replace(member, skipped=skipped, skipped_within=held.within)


@record
class _Held:
    """What a composite runs: whether anything (``runs``), the ids every group of it that can run runs
    (``always``), those only some do (``sometimes``), and what it skips (``within``)."""

    runs: bool
    always: frozenset[str]
    sometimes: frozenset[str]
    within: tuple[str, ...]


def _composite(
    descriptor: BuildpackDescriptor, context: _Context, seen: frozenset[str], stack: frozenset[str]
) -> _Held:
    """A composite's groups, tried in turn by the detector: each of its buildpacks skipped on its exec-env or because
    its id runs earlier in the group (``seen``); a group left empty is passed over. Decided once for each ``seen``
    and ``stack`` (:attr:`_Context.held`)."""
    key = (descriptor.ref, seen, stack)
    if key not in context.held:
        context.held[key] = _decided(descriptor, context, seen, stack)
    return context.held[key]


def _decided(
    descriptor: BuildpackDescriptor, context: _Context, seen: frozenset[str], stack: frozenset[str]
) -> _Held:
    within: list[str] = []
    viable: list[set[str]] = []
    for inner in descriptor.order:
        ran: set[str] = set()
        runs_any = False
        for child in inner:
            ids, runs = _child(child.id, child.version, context, seen | ran, stack | {descriptor.ref}, within)
            ran |= ids
            runs_any = runs_any or runs
        if runs_any:
            viable.append(ran)
    always = set.intersection(*viable) if viable else set()
    every = set.union(*viable) if viable else set()
    return _Held(bool(viable), frozenset(always), frozenset(every - always), tuple(dict.fromkeys(within)))


def _child(
    bp_id: str,
    version: str,
    context: _Context,
    seen: frozenset[str],
    stack: frozenset[str],
    within: list[str],
) -> tuple[set[str], bool]:
    """The ids a composite's buildpack runs, and whether it runs anything."""
    ref = f"{bp_id}@{version}"
    if bp_id in seen:
        within.append(f"{ref}: {bp_id} runs earlier in the group")
        return set(), False
    found = context.lookup(bp_id, version)
    if (
        found is None or ref in stack
    ):  # missing: the detector fails when it reaches it; a cycle is not followed
        return {bp_id}, True
    descriptor = found[0]
    if descriptor.order:
        held = _composite(descriptor, context, seen, stack)
        within.extend(held.within)
        return set(held.always), held.runs
    why = skip_reason(descriptor, context.exec_env, context.api)
    if why is not None:
        within.append(f"{ref}: {why}")
        return set(), False
    return {bp_id}, True


def _warn_project(member: Member, exec_env: str, warnings: list[str]) -> None:
    """A warning for a buildpack the project named that the detector will skip, or skip buildpacks of, or run
    although its exec-env does not hold the build's (it is below Buildpack API 0.12, which the detector reads it from).
    """
    if member.origin != "project":
        return
    if (
        member.exec_env
        and not member.skipped
        and exec_env not in member.exec_env
        and "*" not in member.exec_env
    ):
        warnings.append(
            f"{member.named} runs although its exec-env = {shown(member.exec_env)} does not hold {exec_env}, this "
            f"build's ({ENV_EXEC_ENV}): the detector reads exec-env from Buildpack API 0.12, and its api is older"
        )
    if member.skipped and member.exec_env:
        warnings.append(
            f"{member.named} will not run: {member.skipped}; the detector skips it (set {ENV_EXEC_ENV} to one it "
            "lists to run it)"
        )
    elif member.skipped and member.skipped_within:  # a composite every buildpack of which is skipped
        warnings.append(f"{member.named} will not run: {member.skipped} ({'; '.join(member.skipped_within)})")
    elif member.skipped_within:
        warnings.append(f"{member.named}: the detector skips {'; '.join(member.skipped_within)}")


def _refuse_empty(detection: Detection, settings: DetectorSettings) -> None:
    """A run whose every group the detector would find empty (each element skipped) is refused: none would detect.
    The builder's order is refused only when all of its groups are (the detector tries the next)."""
    groups = detection.groups
    if not groups or not all(group.empty for group in groups):
        return
    what = f"every group of the builder's order ({settings.order_path})" if detection.builder else "the group"
    skipped = "; ".join(_skips(groups))
    raise DetectionRefused(
        "prepare the group" if not detection.builder else "prepare the order",
        f"the detector would skip every buildpack of {what}, so none would detect ({skipped}): set {ENV_EXEC_ENV} to "
        f"an execution environment they run in, or add a buildpack that runs in {settings.exec_env}",
    )


def _skips(groups: Iterable[DetectorGroup]) -> list[str]:
    return list(dict.fromkeys(f"{m.ref}: {m.skipped}" for group in groups for m in group.members))


# What a dry run says


def describe_detection(detection: Detection | None) -> list[str]:
    """The dry run's lines: the build's exec-env, system.toml, each group as the detector will run it and what it
    skips; none when the detector runs the groups as the plan's lines show them (no system.toml merged, turned off
    or not applied, nothing skipped)."""
    if detection is None or not _differs(detection):
        return []
    lines = [f"  exec-env: {detection.exec_env} ({ENV_EXEC_ENV})"]
    action, path = detection.system_action, detection.system_path
    if action == "merged" and detection.system is not None:
        system = detection.system
        pre, post = (", ".join(b.ref for b in side) or "none" for side in (system.pre, system.post))
        lines.append(f"  system buildpacks: {path}: before every group {pre}; after {post}")
    elif action:
        said = {
            "merged": "none",
            "none": "none (no file)",
            "off": "off",
            "not applied": "not applied below 0.15",
        }
        where = path if path is not None else '-system ""'
        lines.append(f"  system buildpacks: {where}: {said[action]}")
    many = len(detection.groups) > 1
    for number, group in enumerate(detection.groups, 1):
        label = f"detector group {number}" if many else "detector group"
        shown = ", ".join(_shown(m) for m in group.running) or "nothing"
        lines.append(f"  {label}: {shown}")
        for member in group.members:
            if member.skipped:
                lines.append(f"    skips {member.named}: {member.skipped}")
            for within in member.skipped_within:
                lines.append(f"    skips, within {member.ref}, {within}")
    return lines


def _differs(detection: Detection) -> bool:
    """Whether the detector runs something other than the groups the dry run already shows."""
    if detection.system_action in ("merged", "off", "not applied"):
        return True
    return any(m.skipped or m.skipped_within for group in detection.groups for m in group.members)


def _shown(member: Member) -> str:
    unread = "" if member.known else "; read once fetched"
    return f"{member.ref} ({member.origin}{unread})"
