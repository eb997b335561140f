"""Carry out a plan: fetch into staging, check everything, then commit, all or nothing.

Nothing in ``<app>``, ``<layers>``, ``<platform>`` or ``<buildpacks>`` changes until every fetch and check has
succeeded. The commit then takes steps that can each be undone, in this order: ``order.toml`` and env files are
written under temporary names, the app's excluded files are moved aside, the buildpacks are moved into
``<buildpacks>``; only when all of that worked are the files renamed into place and the moved-aside app files
deleted. A failure in any step undoes the steps before it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, NamedTuple

from preparer.api import verify_buildpack_api
from preparer.appfilter import Trash
from preparer.errors import FetchError, InvalidInputsError
from preparer.fetch.base import FetchContext, Fetched, no_progress
from preparer.fetch.cache import CacheUnusable, DownloadCache
from preparer.fetch.locator import InlineLocator, redact
from preparer.fetch.streams import ProgressFn
from preparer.fetch.transport import Transport
from preparer.files._toml import PendingWrites
from preparer.files.buildpack import buildpack_dir, read_buildpack_toml
from preparer.files.order import Order, OrderElement, dumps_order
from preparer.inputs import Inputs
from preparer.plan import Fetch, Plan, Present, Step, compose_order
from preparer.report import BuildpackRecord

log = logging.getLogger("preparer")


class Outcome(NamedTuple):
    """What :func:`apply_plan` did."""

    buildpacks: tuple[BuildpackRecord, ...]
    written: tuple[str, ...]
    removed: int
    #: What the fetchers warned about (a cache not used or repaired), in the order said.
    warnings: tuple[str, ...] = ()


def apply_plan(plan: Plan, inputs: Inputs, progress: ProgressFn | None = None) -> Outcome:
    """Fetch, check and commit ``plan``. The only function that writes outputs.

    :param progress: told of every download's progress, ``(source, done, total)``.
    :raises PreparerError: any failure; nothing has changed then.
    """
    to_fetch = [s for s in plan.steps if isinstance(s, Fetch)]
    if not to_fetch:
        return _commit(plan, inputs, {}, [])
    warnings: list[str] = []
    with staging_dir(inputs.buildpacks_dir) as staging:
        ctx = fetch_context(inputs, staging, plan.base_dir, progress, warnings.append)
        fetched = fetch_steps(to_fetch, ctx)
        check_fetched(to_fetch, fetched, inputs.buildpacks_dir)
        # Everything is fetched and checked: commit, while the staged buildpacks still exist.
        return _commit(plan, inputs, dict(zip(map(id, to_fetch), fetched, strict=True)), warnings)


def fetch_context(
    inputs: Inputs,
    staging: Path,
    base_dir: Path,
    progress: ProgressFn | None = None,
    collect: Callable[[str], None] | None = None,
) -> FetchContext:
    """What the fetchers of one run share. The download cache is opened here; one that cannot be trusted is
    left out, with a warning (a cache never fails a build).

    :param collect: told every warning the fetchers have, besides the ``preparer`` logger.
    """

    def warn(message: str) -> None:
        log.warning("%s", message)
        if collect is not None:
            collect(message)

    cache = None
    if inputs.download_cache is not None:
        try:
            cache = DownloadCache.open(inputs.download_cache)
        except CacheUnusable as why:
            warn(f"the download cache is not used: {why}")
    return FetchContext(
        staging=staging,
        base_dir=base_dir,
        buildpacks_dir=inputs.buildpacks_dir,
        cache=cache,
        # Hard links into the cache only where the build cannot write them: the cache's files are root's.
        link_installs=os.geteuid() == 0 and inputs.uid not in (None, 0),
        insecure_registries=inputs.insecure_registries,
        environ=inputs.environ,
        platform=inputs.target_platform,
        registry_index=inputs.registry_index,
        progress=progress or no_progress,
        warn=warn,
        transport=Transport(timeouts=(min(10.0, inputs.http_timeout), inputs.http_timeout)),
    )


@contextmanager
def staging_dir(buildpacks_dir: Path) -> Iterator[Path]:
    """A private staging directory, beside ``<buildpacks>`` when possible so that commits are renames."""
    try:
        path = Path(tempfile.mkdtemp(prefix=".preparer-staging-", dir=buildpacks_dir))
    except OSError:
        path = Path(tempfile.mkdtemp(prefix="preparer-staging-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def fetch_step(step: Fetch, ctx: FetchContext) -> Fetched:
    """Fetch one entry's buildpack into staging, with the fetcher for its kind of source."""
    # Deferred: the sources (tarfile, the registry client, ...) cost start-up, and many runs fetch nothing.
    from preparer.fetch.sources import fetch

    return fetch(step.locator, ctx)


def fetch_steps(steps: Sequence[Fetch], ctx: FetchContext) -> list[Fetched]:
    """Fetch every entry in parallel; the first failure (in entry order) is raised."""
    from preparer.fetch.parallel import fetch_all  # deferred: concurrent.futures, for runs that fetch

    jobs: list[Callable[[], Fetched]] = [lambda step=step: fetch_step(step, ctx) for step in steps]  # type: ignore[misc]
    return fetch_all(jobs)


def check_fetched(steps: Sequence[Fetch], fetched: Sequence[Fetched], buildpacks_dir: Path) -> None:
    """Checks before anything is committed: ids match, Buildpack APIs are supported, composites are complete.

    :raises InvalidInputsError: the id in project.toml differs from the fetched one (exit 3).
    :raises BuildpackAPIError: an unsupported Buildpack API (exit 12).
    :raises FetchError: a composite buildpack's children are neither present nor fetched (exit 1).
    """
    carried = {(bp.descriptor.id, bp.descriptor.version) for f in fetched for bp in f.buildpacks}
    for step, result in zip(steps, fetched, strict=True):
        want = step.entry.id
        if want is not None and want != result.top.id:
            raise InvalidInputsError(
                f"check {step.entry.key}",
                f"id '{want}' does not match the buildpack fetched from {result.source} ('{result.top.id}')",
            )
        for bp in result.buildpacks:
            verify_buildpack_api(bp.descriptor.ref, bp.descriptor.api)
            missing = [
                f"{ref.id}@{ref.version}"
                for group in bp.descriptor.order
                for ref in group
                if (ref.id, ref.version) not in carried
                and not (buildpack_dir(buildpacks_dir, ref.id, ref.version) / "buildpack.toml").is_file()
            ]
            if missing:
                raise FetchError(
                    f"install composite buildpack {bp.descriptor.ref} from {result.source}",
                    f"its order names buildpacks that are neither in {buildpacks_dir} nor fetched: "
                    + ", ".join(sorted(set(missing))),
                )


def check_present(steps: Sequence[Present], buildpacks_dir: Path) -> None:
    """The Buildpack API of buildpacks already in ``<buildpacks>`` that the order names (exit 12).

    :raises BuilderError: such a buildpack's ``buildpack.toml`` cannot be read (exit 1).
    """
    for step in steps:
        path = buildpack_dir(buildpacks_dir, step.id, step.version) / "buildpack.toml"
        descriptor = read_buildpack_toml(path, builder=True)
        verify_buildpack_api(descriptor.ref, descriptor.api)


def _owner(inputs: Inputs) -> tuple[int, int] | None:
    """``(uid, gid)`` for files the build reads, when running as root and they were given."""
    if os.geteuid() != 0 or (inputs.uid is None and inputs.gid is None):
        return None
    return (inputs.uid if inputs.uid is not None else -1, inputs.gid if inputs.gid is not None else -1)


def _commit(plan: Plan, inputs: Inputs, results: dict[int, Fetched], warnings: list[str]) -> Outcome:
    """Write everything, each step undone if a later one fails (see the module's docstring)."""
    from preparer.fetch.tree import install  # deferred: it brings tarfile, for runs that install

    owner = _owner(inputs)
    pending = PendingWrites()
    trash = Trash(inputs.app_dir)
    installed: list[Path] = []
    try:
        order = _stage_order(plan, results, inputs, owner, pending)
        env_paths = _stage_env(plan, inputs.platform_dir, owner, pending)
        removed = trash.move(plan.removal) if plan.removal is not None else 0
        records = _records(plan.steps, results, inputs.buildpacks_dir, install, installed)
        pending.commit()
    except BaseException:
        _uninstall(installed)
        trash.restore()
        pending.abort()
        raise
    trash.empty()
    written = [str(p) for p in installed]
    if order is not None:
        shown = "; ".join(", ".join(e.ref for e in g) for g in order.groups)
        count = len(order.groups)
        log.info(
            "Wrote %s: %d group%s: %s",
            inputs.layers_dir / "order.toml",
            count,
            "" if count == 1 else "s",
            shown,
        )
        written.insert(0, str(inputs.layers_dir / "order.toml"))
    for env_path in env_paths:
        log.info("Wrote build env %s", env_path)
        written.append(str(env_path))
    if plan.removal is not None:
        log.info("Removed %d files from %s (%s)", removed, inputs.app_dir, plan.config.filter_key)
    return Outcome(tuple(records), tuple(written), removed, tuple(warnings))


def _records(
    steps: Sequence[Step],
    results: dict[int, Fetched],
    buildpacks_dir: Path,
    install: Callable[..., bool],
    installed: list[Path],
) -> list[BuildpackRecord]:
    """Install every fetched buildpack (remembering each in ``installed``); a record per order entry."""
    records: list[BuildpackRecord] = []
    for step in steps:
        if isinstance(step, Present):
            source = step.entry.uri or step.entry.id or ""
            records.append(BuildpackRecord(step.id, step.version, source, "present", None, step.resolved))
            log.info("Using %s@%s from %s", step.id, step.version, buildpacks_dir)
            continue
        result = results[id(step)]
        new = []
        for bp in result.buildpacks:
            if install(bp, buildpacks_dir):
                installed.append(buildpack_dir(buildpacks_dir, bp.descriptor.id, bp.descriptor.version))
                new.append(bp)
        top = result.top
        action: Literal["installed", "present", "inline"] = (
            "inline" if isinstance(step.locator, InlineLocator) else ("installed" if new else "present")
        )
        records.append(
            BuildpackRecord(top.id, top.version, result.source, action, result.digest, result.resolved)
        )
        log.info("%s %s from %s", "Installed" if new else "Already installed:", top.ref, result.source)
        for bp in new:
            if bp.descriptor != top:
                log.debug("Installed %s (carried by %s)", bp.descriptor.ref, top.ref)
    return records


def _uninstall(installed: Sequence[Path]) -> None:
    """Remove what this run installed (its ``<buildpacks>/<id>/<version>``, and ``<id>`` when left empty)."""
    for path in reversed(installed):
        shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(OSError):  # other versions are there
            path.parent.rmdir()


def order_element(step: Step, results: dict[int, Fetched]) -> OrderElement:
    """The order element an entry becomes: its concrete id and version."""
    if isinstance(step, Present):
        return OrderElement(step.id, step.version)
    top = results[id(step)].top
    return OrderElement(top.id, top.version)


def _stage_order(
    plan: Plan,
    results: dict[int, Fetched],
    inputs: Inputs,
    owner: tuple[int, int] | None,
    pending: PendingWrites,
) -> Order | None:
    """Stage ``<layers>/order.toml`` when the plan writes one."""
    if not plan.config.writes_order:
        return None
    builder = plan.builder_order or Order()

    def elements(steps: Sequence[Step]) -> list[OrderElement]:
        return [order_element(s, results) for s in steps]

    group = None if plan.group is None else elements(plan.group)
    order = compose_order(elements(plan.pre), group, elements(plan.post), builder)
    pending.mkdir(inputs.layers_dir)
    pending.add(inputs.layers_dir / "order.toml", dumps_order(order).encode(), 0o644, owner)
    return order


def _stage_env(
    plan: Plan, platform_dir: Path, owner: tuple[int, int] | None, pending: PendingWrites
) -> list[Path]:
    """Stage one ``<platform>/env/<NAME>`` file per variable to write: the value's bytes, 0644."""
    to_write = [action.entry for action in plan.env if action.action == "written"]
    if not to_write:
        return []
    env_dir = platform_dir / "env"
    pending.mkdir(env_dir)
    paths = []
    for entry in to_write:
        pending.add(env_dir / entry.name, entry.value.encode(), 0o644, owner)
        paths.append(env_dir / entry.name)
    return paths


def source_of(step: Step) -> str:
    """How an entry names its buildpack, for the plan and the report (credentials removed)."""
    if isinstance(step, Present):
        return f"{step.id}@{step.version}"
    if isinstance(step.locator, InlineLocator):
        return f"inline script ({step.locator.id})"
    return redact(step.entry.uri or "")
