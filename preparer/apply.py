"""Carry out a plan: fetch into staging, check everything, then commit (contract §4, all-or-nothing).

Nothing in ``<app>``, ``<layers>``, ``<platform>`` or ``<buildpacks>`` changes until every fetch and check has
succeeded. Then buildpack directories are moved into place, ``order.toml`` and env files are written atomically,
and ``<app>`` is filtered last.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Literal, NamedTuple

from preparer._fs import make_dirs
from preparer.api import verify_buildpack_api
from preparer.config import EnvEntry
from preparer.errors import ApplyError, FetchError, InvalidInputsError
from preparer.inputs import Inputs
from preparer.plan import Fetch, Inline, Plan, Present, Step, compose_order
from preparer.report import BuildpackRecord

if TYPE_CHECKING:
    from preparer.appfilter import Removal

    # The fetchers are imported when a run fetches something: start-up is paid by every build.
    from preparer.fetch import FetchContext, Fetched, ProgressFn, StagedBuildpack
    from preparer.files._toml import PendingWrites
    from preparer.files.order import Order, OrderElement

log = logging.getLogger("preparer")


class Outcome(NamedTuple):
    """What :func:`apply_plan` did."""

    buildpacks: tuple[BuildpackRecord, ...]
    written: tuple[str, ...]
    removed: int


def fetch_step(step: Fetch | Inline, ctx: FetchContext) -> Fetched:
    """Fetch one entry's buildpack into staging, by the kind of its source."""
    from preparer.fetch.locator import HttpLocator, IdLocator, ImageLocator, PathLocator, RegistryLocator

    if isinstance(step, Inline):
        from preparer.fetch.inline import make_inline

        script, entry = step.entry.script, step.entry
        assert script is not None and entry.id is not None  # checked by config
        return make_inline(entry.id, entry.version, script.api, script.shell, script.inline, ctx)
    locator = step.locator
    if isinstance(locator, PathLocator):
        from preparer.fetch.local import fetch_path

        return fetch_path(locator, ctx)
    if isinstance(locator, HttpLocator):
        from preparer.fetch.http import fetch_http

        return fetch_http(locator, ctx)
    if isinstance(locator, ImageLocator):
        from preparer.fetch.oci import fetch_image

        return fetch_image(locator, ctx)
    if isinstance(locator, RegistryLocator):
        from preparer.fetch.oci import fetch_registry

        return fetch_registry(locator, ctx)
    if isinstance(locator, IdLocator):
        from preparer.fetch.oci import fetch_id

        return fetch_id(locator, ctx)
    raise FetchError(f"fetch {step.entry.key}", f"no fetcher for {locator!r}")


@contextmanager
def staging_dir(buildpacks_dir: Path) -> Iterator[Path]:
    """A private staging directory, beside ``<buildpacks>`` when possible so that commits are renames."""
    import tempfile

    try:
        path = Path(tempfile.mkdtemp(prefix=".preparer-staging-", dir=buildpacks_dir))
    except OSError:
        path = Path(tempfile.mkdtemp(prefix="preparer-staging-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def fetch_steps(steps: Sequence[Fetch | Inline], ctx: FetchContext) -> list[Fetched]:
    """Fetch every entry in parallel; the first failure (in entry order) is raised."""
    if not steps:
        return []
    from preparer.fetch.parallel import fetch_all

    jobs: list[Callable[[], Fetched]] = [lambda step=step: fetch_step(step, ctx) for step in steps]  # type: ignore[misc]
    return fetch_all(jobs)


def check_fetched(steps: Sequence[Fetch | Inline], fetched: Sequence[Fetched], buildpacks_dir: Path) -> None:
    """Checks before anything is committed: ids match, Buildpack APIs are supported, composites are complete.

    :raises InvalidInputsError: the id in project.toml differs from the fetched one (exit 3).
    :raises BuildpackAPIError: an unsupported Buildpack API (exit 12).
    :raises FetchError: a composite buildpack's children are neither present nor fetched (exit 1).
    """
    from preparer.files.buildpack import buildpack_dir

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
                ref.id + "@" + ref.version
                for group in bp.descriptor.order
                for ref in group
                if (ref.id, ref.version) not in carried
                and not buildpack_dir(buildpacks_dir, ref.id, ref.version)
                .joinpath("buildpack.toml")
                .is_file()
            ]
            if missing:
                raise FetchError(
                    f"install composite buildpack {bp.descriptor.ref} from {result.source}",
                    f"its order names buildpacks that are neither in {buildpacks_dir} nor fetched: "
                    + ", ".join(sorted(set(missing))),
                )


def check_present(steps: Sequence[Present], buildpacks_dir: Path) -> None:
    """The Buildpack API of buildpacks already in ``<buildpacks>`` that the order names (exit 12)."""
    if not steps:
        return
    from preparer.files.buildpack import buildpack_dir, read_buildpack_toml

    for step in steps:
        descriptor = read_buildpack_toml(
            buildpack_dir(buildpacks_dir, step.id, step.version) / "buildpack.toml"
        )
        verify_buildpack_api(descriptor.ref, descriptor.api)


def install(staged: StagedBuildpack, buildpacks_dir: Path) -> bool:
    """Move one staged buildpack to ``<buildpacks>/<escaped id>/<version>``; an existing one is left alone.

    :returns: whether it was installed (``False``: it was already there).
    :raises ApplyError: when it cannot be moved into place (exit 1).
    """
    from preparer.files.buildpack import buildpack_dir

    d = staged.descriptor
    dest = buildpack_dir(buildpacks_dir, d.id, d.version)
    if dest.exists():
        return False
    try:
        if not make_dirs(dest.parent):
            os.chmod(dest.parent, 0o755)
        try:
            os.rename(staged.path, dest)
        except OSError:
            # Another filesystem: copy beside the destination, then rename, so the directory appears whole.
            import tempfile

            tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
            tmp.chmod(0o755)  # mkdtemp's 0700 would become the buildpack directory's mode
            shutil.copytree(staged.path, tmp, symlinks=True, dirs_exist_ok=True)
            os.rename(tmp, dest)
    except FileExistsError:
        return False  # a concurrent preparer installed the same buildpack
    except OSError as err:
        if dest.exists():
            return False
        raise ApplyError(f"install {d.ref} into {dest}", err.strerror or err) from None
    return True


def _owner(inputs: Inputs) -> tuple[int, int] | None:
    """``(uid, gid)`` for files the build reads, when running as root and they were given (contract §7.18)."""
    if os.geteuid() != 0 or (inputs.uid is None and inputs.gid is None):
        return None
    return (inputs.uid if inputs.uid is not None else -1, inputs.gid if inputs.gid is not None else -1)


def apply_plan(
    plan: Plan,
    inputs: Inputs,
    builder_order: Order | None,
    env: Sequence[tuple[EnvEntry, str, str | None]],
    removal: Removal | None,
    base_dir: Path,
    progress: ProgressFn | None = None,
) -> Outcome:
    """Fetch, check and commit ``plan``. The only function that writes outputs.

    :raises PreparerError: any failure; before the commit step nothing has changed.
    """
    to_fetch = [s for s in plan.steps if isinstance(s, Fetch | Inline)]
    check_present([s for s in plan.steps if isinstance(s, Present)], inputs.buildpacks_dir)
    if not to_fetch:
        return _commit(plan, inputs, builder_order, env, removal, {})
    from preparer.fetch import FetchContext

    with staging_dir(inputs.buildpacks_dir) as staging:
        ctx = FetchContext(
            staging=staging,
            base_dir=base_dir,
            buildpacks_dir=inputs.buildpacks_dir,
            download_cache=inputs.download_cache,
            insecure_registries=inputs.insecure_registries,
            environ=inputs.environ,
            platform=inputs.target_platform,
            registry_index=inputs.registry_index,
            progress=progress or (lambda source, done, total: None),
            timeouts=(min(10.0, inputs.http_timeout), inputs.http_timeout),
        )
        fetched = fetch_steps(to_fetch, ctx)
        check_fetched(to_fetch, fetched, inputs.buildpacks_dir)
        # Everything is fetched and checked: commit, while the staged buildpacks still exist.
        return _commit(
            plan, inputs, builder_order, env, removal, dict(zip(map(id, to_fetch), fetched, strict=True))
        )


def _commit(
    plan: Plan,
    inputs: Inputs,
    builder_order: Order | None,
    env: Sequence[tuple[EnvEntry, str, str | None]],
    removal: Removal | None,
    results: dict[int, Fetched],
) -> Outcome:
    """Write everything: order.toml and env files to temporary names first (what can fail with them, such as
    ``chown``, fails before any buildpack is installed), then install the buildpacks, rename the files into place,
    and filter ``<app>`` last."""
    from preparer.files._toml import PendingWrites

    owner = _owner(inputs)
    pending = PendingWrites()
    try:
        staged_order = _stage_order(plan, results, builder_order, inputs, owner, pending)
        env_paths = _stage_env(env, inputs.platform_dir, owner, pending)
        records, written = _commit_buildpacks(plan.steps, results, inputs.buildpacks_dir)
        pending.commit()
    except BaseException:
        pending.abort()
        raise
    if staged_order is not None:
        path, order = staged_order
        shown = "; ".join(", ".join(e.ref for e in g) for g in order.groups)
        count = len(order.groups)
        log.info("Wrote %s: %d group%s: %s", path, count, "" if count == 1 else "s", shown)
        written.append(str(path))
    for env_path in env_paths:
        log.info("Wrote build env %s", env_path)
        written.append(str(env_path))
    removed = 0
    if removal is not None:
        from preparer.appfilter import remove

        removed = remove(removal)
        log.info("Removed %d files from %s (%s)", removed, inputs.app_dir, plan.config.filter_key)
    return Outcome(tuple(records), tuple(written), removed)


def _commit_buildpacks(
    steps: Sequence[Step], results: dict[int, Fetched], buildpacks_dir: Path
) -> tuple[list[BuildpackRecord], list[str]]:
    records: list[BuildpackRecord] = []
    written: list[str] = []
    for step in steps:
        if isinstance(step, Present):
            source = step.entry.uri or step.entry.id or ""
            records.append(BuildpackRecord(step.id, step.version, source, "present", None, step.resolved))
            log.info("Using %s@%s from %s", step.id, step.version, buildpacks_dir)
            continue
        result = results[id(step)]
        from preparer.files.buildpack import buildpack_dir

        installed = [bp for bp in result.buildpacks if install(bp, buildpacks_dir)]
        for bp in installed:
            written.append(str(buildpack_dir(buildpacks_dir, bp.descriptor.id, bp.descriptor.version)))
        top = result.top
        action: Literal["installed", "present", "inline"] = (
            "inline" if isinstance(step, Inline) else ("installed" if installed else "present")
        )
        records.append(
            BuildpackRecord(top.id, top.version, result.source, action, result.digest, result.resolved)
        )
        verb = "Installed" if installed else "Already installed:"
        log.info("%s %s from %s", verb, top.ref, result.source)
        for bp in installed:
            if bp.descriptor != top:
                log.debug("Installed %s (carried by %s)", bp.descriptor.ref, top.ref)
    return records, written


def order_element(step: Step, results: dict[int, Fetched]) -> OrderElement:
    """The order element an entry becomes: its concrete id and version."""
    from preparer.files.order import OrderElement

    if isinstance(step, Present):
        return OrderElement(step.id, step.version)
    top = results[id(step)].top
    return OrderElement(top.id, top.version)


def _stage_order(
    plan: Plan,
    results: dict[int, Fetched],
    builder: Order | None,
    inputs: Inputs,
    owner: tuple[int, int] | None,
    pending: PendingWrites,
) -> tuple[Path, Order] | None:
    """Stage ``<layers>/order.toml`` when the plan writes one (contract §7.8)."""
    if not plan.writes_order:
        return None
    assert builder is not None  # the pipeline reads it whenever an order is written
    from preparer.files.order import dumps_order

    def elements(steps: Sequence[Step]) -> list[OrderElement]:
        return [order_element(s, results) for s in steps]

    group = None if plan.group is None else elements(plan.group)
    order = compose_order(elements(plan.pre), group, elements(plan.post), builder)
    path = inputs.layers_dir / "order.toml"
    pending.mkdir(inputs.layers_dir)
    pending.add(path, dumps_order(order).encode(), 0o644, owner)
    return path, order


def _stage_env(
    env: Sequence[tuple[EnvEntry, str, str | None]],
    platform_dir: Path,
    owner: tuple[int, int] | None,
    pending: PendingWrites,
) -> list[Path]:
    """Stage one ``<platform>/env/<NAME>`` file per variable to write: the value's bytes, 0644."""
    to_write = [entry for entry, action, _ in env if action == "written"]
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
    if isinstance(step, Inline):
        return f"inline script ({step.entry.id})"

    from preparer.fetch.locator import redact

    return redact(step.entry.uri or "")
