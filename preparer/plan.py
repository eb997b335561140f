"""From the effective configuration to a plan: everything a run will do, as values, before anything is fetched or
written. Pure: what is on disk reaches it as arguments (the builder's order, the env files already there, the
app files to remove) and through ``versions_of`` and ``exists``; :mod:`preparer.pipeline` gathers them.

Every entry is decided here as far as it can be without the network (its form, paths, ids, versions), so a later
invalid entry is reported before any download starts, and a dry run exits as a real run would.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar, assert_never

from preparer._record import record
from preparer.config import EffectiveConfig
from preparer.entries import EnvEntry, GroupEntry
from preparer.errors import DescriptorError, FetchError
from preparer.files.order import Order, OrderElement
from preparer.semver import highest
from preparer.values import UriProblem, entry_locator, lookalike_in

#: An element of a group, as :func:`wrap` takes it.
E = TypeVar("E")

if TYPE_CHECKING:
    from preparer.appfilter import Removal
    from preparer.detection import Detection
    from preparer.fetch.locator import Fetchable
    from preparer.fetch.oci.hosts import RegistryHosts
    from preparer.files.lockfile import LockState
    from preparer.inputs import Inputs
    from preparer.metadata import MetadataWrite
    from preparer.policy.rules import Decision, Policy
    from preparer.target import Target


@record
class Present:
    """An entry naming a buildpack already in ``<buildpacks>``, resolved to a concrete version."""

    entry: GroupEntry
    id: str
    version: str
    #: ``"installed"`` when a bare id in ``uri`` was found in ``<buildpacks>``, else ``None``.
    resolved: str | None = None


@record
class Fetch:
    """An entry whose buildpack comes from elsewhere: a path, archive, URL, image, registry, or inline script.

    ``locator`` is what the entry names (what the platform policy decides on); ``pinned``, when the run is frozen
    to a lock file, is what is fetched instead: the same source, pinned to the locked bytes (:mod:`preparer.lock`).
    """

    entry: GroupEntry
    locator: Fetchable
    pinned: Fetchable | None = None
    #: The lock file ``pinned`` comes from: a failure to fetch it says that the lock decided it.
    locked_in: Path | None = None

    @property
    def buildpack_id(self) -> str | None:
        """The id of the buildpack fetched, when the entry names it before fetching: its ``id``, else a bare id's
        or an inline script's; ``None`` for the others (their ``buildpack.toml`` says it once fetched)."""
        return self.entry.id or _named_id(self.locator)


Step = Present | Fetch


def _named_id(locator: Fetchable) -> str | None:
    from preparer.fetch import locator as locators  # deferred, as in _step

    match locator:
        case locators.IdLocator() | locators.InlineLocator():
            return locator.id
        case (
            locators.PathLocator()
            | locators.HttpLocator()
            | locators.ImageLocator()
            | locators.RegistryLocator()
        ):
            return None
        case _ as never:
            assert_never(never)


@record
class EnvAction:
    """What happens to one build env variable, and the warning a user sees about it."""

    entry: EnvEntry
    action: Literal["written", "kept", "skipped"]
    warning: str | None = None


@record
class PlannedDownload:
    """One entry's download, as the plan knows it before the run (measured by :mod:`preparer.downloads`).

    Attributes:
        entry: the group entry, as written: ``io.buildpacks.group[1]``.
        source: what is fetched, canonical and without credentials: the URL (no user information, no query), or
            the image reference (``registry/repository:tag`` or ``@sha256:...``), as the lock pins it when the run is
            frozen to one.
        buildpack: the buildpack's id, when the entry names it.
        size: bytes the run will download for it, when known without downloading them (0 when ``cached``);
            ``None`` when unknown. With a download cache, a blob an earlier entry also downloads (a layer two
            buildpackages share) is counted there only: the run fetches it once.
        cached: whether this pod's download cache holds all of it (and the origin, asked, says it is current).
    """

    entry: str
    source: str
    buildpack: str | None
    size: int | None
    cached: bool = False


@record
class Plan:
    """What a run will do, before any fetch or write."""

    config: EffectiveConfig
    #: The descriptor's directory: relative ``uri`` paths resolve against it.
    base_dir: Path
    #: The descriptor read (``None`` without one) and its schema as declared, for the report.
    descriptor_path: Path | None = None
    schema_version: str | None = None
    pre: tuple[Step, ...] = ()
    #: ``None`` when no group is given (pre and post then wrap the builder's groups).
    group: tuple[Step, ...] | None = None
    post: tuple[Step, ...] = ()
    #: The builder's order when ``<layers>/order.toml`` is written (its groups, or only its extensions).
    builder_order: Order | None = None
    env: tuple[EnvAction, ...] = ()
    #: What include/exclude removes from ``<app>``; ``None`` without include or exclude.
    removal: Removal | None = None
    #: Every warning, in the order found (reading the files, then the env files), without ``Warning:``.
    warnings: tuple[str, ...] = ()
    #: project-metadata.toml: what is written (or kept); ``None`` when nothing is.
    project_metadata: MetadataWrite | None = None
    #: What the platform policy decided of every entry (empty without a policy).
    policy: tuple[Decision, ...] = ()
    #: The platform policy, whose limits hold while fetching; ``None`` without one.
    rules: Policy | None = None
    #: Registry mirrors (``-registry-hosts-dir``), read and checked before anything is fetched.
    registry_hosts: Mapping[str, RegistryHosts] | None = None
    #: The lock file (``-lock``): what the run is frozen to, or writes; ``None`` without one.
    lock: LockState | None = None
    #: The build's target, which every buildpack the order names must run on; ``None``: not checked.
    target: Target | None = None
    #: The inputs the plan was made from (:func:`preparer.plan_run`): the only ones it may be applied to.
    inputs: Inputs | None = None
    #: The files the plan was read from (descriptor, platform file, policy, lock, the builder's order, system.toml)
    #: and the SHA-256 of each (``None``: it did not exist): :func:`preparer.run_plan` refuses a plan whose files
    #: changed.
    made_from: tuple[tuple[str, str | None], ...] = ()
    #: The groups as the lifecycle's detector will run them: system buildpacks merged, what it skips on exec-env
    #: (:mod:`preparer.detector`; docs/detector.md); ``None``: not decided (a plan not made by ``plan_run``).
    detection: Detection | None = None
    #: What the run will download, an entry at a time, and how large, when known before it starts
    #: (:mod:`preparer.downloads`); empty when not measured (the plan :func:`preparer.prepare` makes and shows no one).
    downloads: tuple[PlannedDownload, ...] = ()

    @property
    def steps(self) -> tuple[Step, ...]:
        """Every step, in order: pre, group, post."""
        return (*self.pre, *(self.group or ()), *self.post)

    @property
    def download_size(self) -> int:
        """The bytes of :attr:`downloads` whose size is known (what a progress bar's total is): what the run then
        fetches, a blob that entries share counted once when the run has a download cache."""
        return sum(d.size for d in self.downloads if d.size is not None)

    @property
    def unknown_sizes(self) -> int:
        """How many of :attr:`downloads` are of unknown size (not counted in :attr:`download_size`)."""
        return sum(1 for d in self.downloads if d.size is None)


def source_of(step: Step) -> str:
    """How an entry names its buildpack, for the plan and the detector's groups (credentials removed)."""
    if isinstance(step, Present):
        return f"{step.id}@{step.version}"
    if step.entry.script is not None:
        return f"inline script ({step.entry.id})"
    from preparer.fetch.locator import redact  # deferred: the fetch package stays off runs that fetch nothing

    return redact(step.entry.uri or "")


def make_plan(
    config: EffectiveConfig,
    *,
    base_dir: Path,
    buildpacks_dir: Path,
    versions_of: Callable[[str], Sequence[str]],
    exists: Callable[[Path], bool] = os.path.exists,
    builder_order: Order | None = None,
    existing_env: Collection[str] = (),
    removal: Removal | None = None,
    warnings: Sequence[str] = (),
    descriptor_path: Path | None = None,
    schema_version: str | None = None,
) -> Plan:
    """Classify every group entry, resolve those naming buildpacks in ``<buildpacks>``, and decide the env files.

    :param versions_of: versions of an id installed in ``<buildpacks>``.
    :param builder_order: the builder's order; needed when pre/post wrap it (``config.writes_order`` and no group).
    :param existing_env: names of the files already in ``<platform>/env``.
    :param warnings: the warnings found reading the descriptor and the platform file; the plan's own follow.
    :raises DescriptorError: a malformed ``uri``, an id that contradicts its ``uri``, a version range (exit 3):
        what :func:`preparer.config.effective_config` finds first, when it is given the same ``exists``.
    :raises FetchError: an id not in ``<buildpacks>``, no usable version of it, a missing local path (exit 1).
    """

    def steps(entries: tuple[GroupEntry, ...] | None) -> tuple[Step, ...]:
        return tuple(_step(e, base_dir, buildpacks_dir, versions_of, exists) for e in entries or ())

    env = tuple(env_actions(config.env or (), existing_env))
    return Plan(
        config=config,
        base_dir=base_dir,
        descriptor_path=descriptor_path,
        schema_version=schema_version,
        pre=steps(config.pre),
        group=None if config.group is None else steps(config.group),
        post=steps(config.post),
        builder_order=builder_order if config.writes_order else None,
        env=env,
        removal=removal,
        warnings=(*warnings, *(action.warning for action in env if action.warning)),
    )


def _step(
    entry: GroupEntry,
    base_dir: Path,
    buildpacks_dir: Path,
    versions_of: Callable[[str], Sequence[str]],
    exists: Callable[[Path], bool],
) -> Step:
    # Deferred: the fetch package (and what it imports) stays off runs whose entries name no uri or script.
    from preparer.fetch import locator as locators

    if entry.script is not None:
        assert entry.id is not None  # checked by config: a script entry has an id
        script = entry.script
        return Fetch(
            entry, locators.InlineLocator(entry.id, script.api, script.inline, script.shell, entry.version)
        )
    if entry.uri is None:
        assert entry.id is not None  # checked by config: an entry has an id, a uri or a script
        version = None if entry.version in (None, "latest") else entry.version
        return Present(entry, entry.id, _resolve(entry.id, version, entry, buildpacks_dir, versions_of))
    locator = entry_locator(entry.uri, entry.id, base_dir, exists)
    if isinstance(
        locator, UriProblem
    ):  # found by the configuration's check first, when it was given ``exists``
        raise DescriptorError(f"validate {entry.file}", f"{entry.key}{locator.detail}")
    match locator:
        case locators.PathLocator():
            if not exists(locator.path):
                raise FetchError(
                    f"resolve {entry.key} ({locators.redact(entry.uri)})",
                    f"{locator.path}: no such file or directory",
                )
            return Fetch(entry, locator)
        case (
            locators.HttpLocator()
            | locators.ImageLocator()
            | locators.RegistryLocator()
            | locators.InlineLocator()
        ):
            return Fetch(entry, locator)
        case locators.BuilderLocator():
            version = _resolve(locator.id, locator.version, entry, buildpacks_dir, versions_of)
            return Present(entry, locator.id, version)
        case locators.IdLocator():
            # A bare id: the buildpack installed in <buildpacks> when it is there (no request at all), else fetched.
            installed = versions_of(locator.id)
            if installed and (locator.version is None or locator.version in installed):
                version = _resolve(locator.id, locator.version, entry, buildpacks_dir, versions_of)
                return Present(entry, locator.id, version, "installed")
            return Fetch(entry, locator)
        case _ as never:
            assert_never(never)


class NotInstalled(FetchError):
    """A buildpack the plan needs from ``<buildpacks>`` is not there (its id in ``bp_id``)."""

    def __init__(self, action: str, cause: str, bp_id: str) -> None:
        super().__init__(action, cause)
        self.bp_id = bp_id


def _resolve(
    bp_id: str,
    version: str | None,
    entry: GroupEntry,
    buildpacks_dir: Path,
    versions_of: Callable[[str], Sequence[str]],
) -> str:
    """The version of ``bp_id`` to use: the one asked for, or the highest semver present (semver 2.0
    precedence; versions that are not semver are left out of that choice)."""
    versions = versions_of(bp_id)
    action = f"resolve {entry.key} ({bp_id})"
    if not versions:
        raise NotInstalled(action, f"buildpack '{bp_id}' was not found in {buildpacks_dir}", bp_id)
    if version is not None:
        if version not in versions:
            raise FetchError(
                action,
                f"version '{version}' of '{bp_id}' was not found in {buildpacks_dir} (found: {', '.join(versions)})",
            )
        return version
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
    """The prepared order.

    With a group, one group ``pre + group + post``; without, ``pre`` and ``post`` wrap every builder group.
    Either way a pre or post element whose id the group already holds is skipped, so a second run changes nothing.
    The builder's ``order-extensions`` are kept.
    """
    groups = (tuple(group),) if group is not None else builder.groups
    return Order(tuple(wrap(pre, g, post, _id_of) for g in groups), builder.extensions)


def _id_of(element: OrderElement) -> str:
    return element.id


def wrap(
    pre: Sequence[E], group: Sequence[E], post: Sequence[E], id_of: Callable[[E], str | None]
) -> tuple[E, ...]:
    """``pre + group + post`` as the prepared order has it: a pre or post element whose id the group (after the pre
    elements kept) already holds is left out. ``id_of`` gives an element's id; ``None`` (not known yet) matches none.
    """
    ids = {found for e in group if (found := id_of(e)) is not None}
    kept: tuple[list[E], list[E]] = ([], [])
    for side, elements in zip(kept, (pre, post), strict=True):
        for element in elements:
            found = id_of(element)
            if found is None or found not in ids:
                side.append(element)
                if found is not None:
                    ids.add(found)
    return (*kept[0], *group, *kept[1])


#: The suffixes of buildpack layer env files (buildpack spec, "Environment Variable Modification Rules").
_LAYER_ENV_SUFFIXES = frozenset({"append", "prepend", "override", "default", "delim"})


def env_actions(entries: Sequence[EnvEntry], existing: Collection[str]) -> list[EnvAction]:
    """What to do with each build env variable.

    Names starting ``CNB_`` are reserved and skipped; a file the platform already put in ``<platform>/env`` holds
    the user's explicit setting and is kept. A name with a suffix such as ``.append`` is written as it is, with a
    warning: the lifecycle passes ``<platform>/env`` files on as variables of their file's name, suffix included
    (suffix actions exist only in a buildpack layer's env directory).
    """
    actions: list[EnvAction] = []
    for entry in entries:
        suffix = entry.name.rpartition(".")[2]
        if "." in entry.name and suffix in _LAYER_ENV_SUFFIXES:
            warning = (
                f"{entry.key}: {entry.name} is written as a variable named '{entry.name}': .{suffix} and the other "
                "suffix actions apply only in a buildpack layer's env directory, not in <platform>/env"
            )
            actions.append(EnvAction(entry, "written", warning))
        elif entry.name.startswith("CNB_"):
            warning = f"{entry.key}: {entry.name} is reserved (CNB_ prefix); not written"
            actions.append(EnvAction(entry, "skipped", warning))
        elif entry.name in existing:
            warning = f"{entry.key}: <platform>/env/{entry.name} already exists; keeping the platform's value"
            actions.append(EnvAction(entry, "kept", warning))
        elif not _SHELL_NAME.fullmatch(entry.name):
            warning = (
                f"{entry.key}: {entry.name} is written as <platform>/env/{entry.name}, but no shell can read a "
                f"variable of that name (letters, digits and _ only, not starting with a digit){lookalike_in(entry.name)}"
            )
            actions.append(EnvAction(entry, "written", warning))
        else:
            actions.append(EnvAction(entry, "written"))
    return actions


#: A name a POSIX shell can read as a variable.
_SHELL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
