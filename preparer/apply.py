"""Carry out a plan: fetch into staging, check everything, then commit, all or nothing.

Nothing in ``<app>``, ``<layers>``, ``<platform>`` or ``<buildpacks>`` changes until every fetch and check has
succeeded. The commit then takes steps that can each be undone, in this order: ``order.toml`` and env files are
written under temporary names, the app's excluded files are moved aside, the buildpacks are moved into
``<buildpacks>``; only when all of that worked are the files renamed into place and the moved-aside app files
deleted. A failure in any step undoes the steps before it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from preparer import interrupt, telemetry
from preparer._fs import build_owner
from preparer._logger import CallerFailed, log
from preparer._record import record
from preparer.api import verify_buildpack_api
from preparer.appfilter import Trash
from preparer.errors import ApplyError
from preparer.files.buildpack import buildpack_dir, read_buildpack_toml
from preparer.files.order import Order, OrderElement, dumps_order
from preparer.files.toml import dumps_toml
from preparer.inputs import Inputs
from preparer.lock.modes import check_locked, committed_lock, written_entries
from preparer.plan import Fetch, NotInstalled, Plan, Present, Step, compose_order
from preparer.report import BuildpackRecord, LockRecord, SignatureRecord
from preparer.target import Lookup, Target, check_targets, directory_files, installed
from preparer.writes import PendingWrites

if TYPE_CHECKING:
    from preparer.detection import Detection
    from preparer.fetch.base import Fetched
    from preparer.fetch.tree import Installation, StagedBuildpack
    from preparer.files.locked import Locked
    from preparer.progress import ProgressCallback
    from preparer.staging import Copies


@record
class Outcome:
    """What :func:`apply_plan` did."""

    buildpacks: tuple[BuildpackRecord, ...]
    written: tuple[str, ...]
    removed: int
    #: What the fetchers warned about (a cache not used or repaired), in the order said.
    warnings: tuple[str, ...] = ()
    #: The run's lock, when it has one.
    lock: LockRecord | None = None
    #: The provenance written with the commit (:mod:`preparer.provenance`), when the run writes one.
    provenance: dict[str, Any] | None = None
    #: The groups as the detector will run them, the run's buildpacks read (:mod:`preparer.detector`).
    detection: Detection | None = None


#: A report file committed with the rest: its path, and its bytes as made from what the commit does.
ReportFile = tuple[Path, Callable[[Outcome], bytes]]


def apply_plan(
    plan: Plan, inputs: Inputs, progress: ProgressCallback | None = None, report: ReportFile | None = None
) -> Outcome:
    """Fetch, check and commit ``plan``. The only function that writes outputs.

    :param progress: given every download's events (:class:`~preparer.progress.Download`), one at a time.
    :param report: the report file, written with the commit (a disk too full for it undoes everything).
    :raises PreparerError: any failure; nothing has changed then.
    :raises Interrupted: the run was asked to stop (:mod:`preparer.interrupt`); nothing has changed, or, when the
        request came during the commit's last steps, everything has.
    """
    with interrupt.run():
        return _fetch_and_commit(plan, inputs, progress, report)


def _fetch_and_commit(
    plan: Plan, inputs: Inputs, progress: ProgressCallback | None, report: ReportFile | None
) -> Outcome:
    to_fetch = [s for s in plan.steps if isinstance(s, Fetch)]
    if not to_fetch:
        return _commit(plan, inputs, {}, [], report)
    # Deferred: fetching brings the cache, the extractor, hashlib, zlib, json, filelock, requests... and many runs
    # fetch nothing.
    from preparer.settings import fetch_settings
    from preparer.staging import check_fetched, copies_on_disk, fetch_steps, fetching, staged_lookup

    warnings: list[str] = []
    with fetching(fetch_settings(inputs), warnings.append, plan.registry_hosts, plan.target) as ctx:
        # A frozen entry's bytes that are not the locked ones fail as the lock's (preparer.lock.modes.fetch_failure).
        expected = {download.entry: download.size for download in plan.downloads}
        fetched = fetch_steps(to_fetch, ctx, plan.rules, progress, expected)
        copies = copies_on_disk(to_fetch, fetched, inputs.buildpacks_dir)
        said = check_fetched(
            to_fetch,
            fetched,
            inputs.buildpacks_dir,
            plan.target,
            enforced=inputs.checks_targets,
            copies=copies,
            lock=plan.lock.path if plan.lock is not None else None,
        )
        for warning in said:
            log.warning("%s", warning)
        warnings += said
        if plan.lock is not None:
            check_locked(to_fetch, fetched, plan.lock)
        results = dict(zip(map(id, to_fetch), fetched, strict=True))
        plan = _settled(
            plan, inputs, results, staged_lookup(fetched, inputs.buildpacks_dir, copies), warnings
        )
        # Everything is fetched and checked: commit, while the staged buildpacks still exist.
        outcome = _commit(plan, inputs, results, warnings, report, copies)
        ctx.store.commit()  # after the run's commit (the fleet's write-back): it can no longer change what it did
        return replace(outcome, warnings=tuple(warnings))


def resolve_plan(plan: Plan, inputs: Inputs, progress: ProgressCallback | None = None) -> tuple[Locked, ...]:
    """What every entry of ``plan`` resolves to now, as a lock keeps it: fetched into staging (and the download
    cache) and checked as a run does, and nothing committed. The entries an update keeps as locked are not fetched:
    they are what the lock says."""
    kept = plan.lock.kept if plan.lock is not None else frozenset()
    with interrupt.run():
        to_fetch = [s for s in plan.steps if isinstance(s, Fetch) and s.entry.key not in kept]
        if not to_fetch:
            return written_entries(plan.lock, plan.steps, {})
        # Deferred, as in _fetch_and_commit.
        from preparer.settings import fetch_settings
        from preparer.staging import check_fetched, copies_on_disk, fetch_steps, fetching

        with fetching(fetch_settings(inputs), log.warning, plan.registry_hosts, plan.target) as ctx:
            fetched = fetch_steps(to_fetch, ctx, plan.rules, progress)
            copies = copies_on_disk(to_fetch, fetched, inputs.buildpacks_dir)
            for warning in check_fetched(
                to_fetch, fetched, inputs.buildpacks_dir, plan.target, enforced=inputs.checks_targets,
                copies=copies, lock=plan.lock.path if plan.lock is not None else None,
            ):  # fmt: skip
                log.warning("%s", warning)
            return written_entries(plan.lock, plan.steps, dict(zip(map(id, to_fetch), fetched, strict=True)))


def _settled(
    plan: Plan, inputs: Inputs, results: dict[int, Fetched], lookup: Lookup, warnings: list[str]
) -> Plan:
    """``plan`` with the groups as the detector will run them once everything is fetched (:func:`preparer.detector
    .settled`); the warnings not said while planning logged, and added to ``warnings``."""
    if plan.detection is None:  # a plan not made by plan_run
        return plan
    from preparer.detector import settled  # deferred, as the fetching: only runs that fetch settle it again
    from preparer.settings import detector_settings

    detection, said = settled(plan, detector_settings(inputs), results, lookup)
    for warning in said:
        log.warning("%s", warning)
    warnings += said
    return replace(plan, detection=detection)


def check_present(
    steps: Sequence[Present], buildpacks_dir: Path, target: Target | None = None, *, enforced: bool = True
) -> list[str]:
    """The Buildpack API of buildpacks already in ``<buildpacks>`` that the order names (exit 12), and whether
    they can run on ``target`` (:func:`preparer.target.check_targets`).

    :param enforced: one that cannot is refused (Platform API 0.12 and later), else a warning.
    :returns: the warnings.
    :raises BuilderError: such a buildpack's ``buildpack.toml`` cannot be read (exit 1).
    :raises TargetRefused: one cannot run on ``target`` (exit 1).
    """
    tops = []
    for step in steps:
        with telemetry.present(step.entry.key, step.id, step.version):
            root = buildpack_dir(buildpacks_dir, step.id, step.version)
            descriptor = read_buildpack_toml(root / "buildpack.toml", builder=True)
            verify_buildpack_api(descriptor.ref, descriptor.api)
            tops.append((descriptor, directory_files(root)))
    if target is None:
        return []
    return check_targets(tops, target, partial(installed, buildpacks_dir), enforced=enforced)


def _check_still_present(steps: Sequence[Step], buildpacks_dir: Path) -> None:
    """Each buildpack the order takes from ``<buildpacks>`` is still there, now that the commit begins: a plan
    made earlier (a service plans in one request and applies in another), or a builder changed while the run
    fetched, would commit an order that names a buildpack the build cannot find.

    :raises NotInstalled: one is gone (exit 1), naming it; nothing has changed on disk.
    """
    for step in steps:
        if isinstance(step, Present):
            root = buildpack_dir(buildpacks_dir, step.id, step.version)
            if not (root / "buildpack.toml").is_file():
                raise NotInstalled(
                    f"resolve {step.entry.key} ({step.id})",
                    f"buildpack '{step.id}' {step.version}, which the plan takes from {buildpacks_dir}, is no "
                    "longer there: make a new plan with plan_run",
                    step.id,
                )


@telemetry.step(
    "cnb.commit", lambda done: {"cnb.commit.files": len(done.written), "cnb.app.removed": done.removed}
)
def _commit(
    plan: Plan,
    inputs: Inputs,
    results: dict[int, Fetched],
    warnings: list[str],
    report: ReportFile | None,
    copies: Copies | None = None,
) -> Outcome:
    """Write everything, each step undone if a later one fails (see the module's docstring)."""
    _check_still_present(plan.steps, inputs.buildpacks_dir)
    owner = build_owner(inputs.uid, inputs.gid)
    pending = PendingWrites(inputs.build_dirs)
    trash = Trash(inputs.app_dir)
    installation = _installation(inputs.buildpacks_dir) if results else None
    installed: list[Path] = []
    # A signal is taken at the checks below (everything is then undone), or after the last step (everything
    # is then done), never between.
    with interrupt.deferred():
        try:
            order = _stage_order(plan, results, inputs, owner, pending)
            env_paths = _stage_env(plan, inputs.platform_dir, owner, pending)
            metadata_path = _stage_metadata(plan, owner, pending)
            lock_path, lock = _stage_lock(plan, results, owner, pending)
            removed = trash.move(plan.removal) if plan.removal is not None else 0
            records = _records(plan.steps, results, inputs.buildpacks_dir, installation, installed, copies)
            subjects = (inputs.layers_dir / "order.toml" if order else None, *env_paths, metadata_path)
            kept = copies.kept if copies else {}
            provenance = _provenance(plan, inputs, results, records, subjects, lock, pending, kept, warnings)
            done = _done(inputs, installed, order, env_paths, metadata_path, lock_path, provenance)
            written = tuple(str(path) for _, path, _ in done)
            outcome = Outcome(
                tuple(records), written, removed, tuple(warnings), lock, provenance, plan.detection
            )
            if report is not None:
                pending.add(report[0], report[1](outcome))
            interrupt.check()  # the last moment a request to stop undoes everything
            pending.commit()
            if provenance is None and inputs.provenance is not None:
                _remove_stale(inputs.provenance)
            if installation is not None:
                installation.finish()
        except BaseException:
            if installation is not None:
                installation.undo()
            trash.restore()
            pending.abort()
            raise
        finally:
            if installation is not None:
                installation.close()
        trash.empty()
    _log_done(done, plan, inputs, removed, provenance is not None)
    return outcome


def _log_done(
    done: list[tuple[str, Path, tuple[object, ...]]],
    plan: Plan,
    inputs: Inputs,
    removed: int,
    provenance: bool,
) -> None:
    """Log what the commit wrote (:func:`_done`'s lines), the removal, and the provenance last: it names everything
    above."""
    lines = [(message, path, args) for message, path, args in done if message]
    last = lines.pop() if provenance and inputs.provenance is not None else None
    for message, path, args in lines:
        _committed(message, path, *args)
    if plan.removal is not None:
        _committed("Removed %d files from %s (%s)", removed, inputs.app_dir, plan.config.filter_key)
    if last is not None:
        _committed(last[0], last[1])


def _done(
    inputs: Inputs,
    installed: list[Path],
    order: Order | None,
    env_paths: Sequence[Path],
    metadata_path: Path | None,
    lock_path: Path | None,
    provenance: dict[str, Any] | None,
) -> list[tuple[str, Path, tuple[object, ...]]]:
    """What the commit writes, in the report's order, each with the line logged once it is done (``""``: none, as
    for the buildpacks installed) and that line's other arguments."""
    done: list[tuple[str, Path, tuple[object, ...]]] = []
    if order is not None:
        shown = "; ".join(", ".join(e.ref for e in g) for g in order.groups)
        count = len(order.groups)
        plural = "" if count == 1 else "s"
        done.append(("Wrote %s: %d group%s: %s", inputs.layers_dir / "order.toml", (count, plural, shown)))
    done += [("", path, ()) for path in installed]
    done += [("Wrote build env %s", env_path, ()) for env_path in env_paths]
    if metadata_path is not None:
        done.append(("Wrote project metadata %s", metadata_path, ()))
    if lock_path is not None:
        done.append(("Wrote the lock file %s", lock_path, ()))
    if provenance is not None and inputs.provenance is not None:
        done.append(("Wrote the provenance %s", inputs.provenance, ()))
    return done


def _provenance(
    plan: Plan,
    inputs: Inputs,
    results: dict[int, Fetched],
    records: Sequence[BuildpackRecord],
    subjects: Sequence[Path | None],
    lock: LockRecord | None,
    pending: PendingWrites,
    kept: dict[tuple[str, str], Path],
    warnings: list[str],
) -> dict[str, Any] | None:
    """Stage the provenance with the commit, when the run writes one (:mod:`preparer.provenance`). A run that
    writes none of the build's files (no project.toml: the builder's order is the build's) has nothing for a
    statement to be about: in-toto refuses a statement without a subject, so none is written, with a warning."""
    if inputs.provenance is None:
        return None
    written = [path for path in subjects if path is not None]
    if not written:
        warning = (
            f"the provenance {inputs.provenance} is not written: this run writes none of the build's files (no "
            "order.toml, env file or project-metadata.toml; without a project.toml the builder's order is the "
            "build's), and an in-toto statement must have a subject; an earlier run's provenance there is removed"
        )
        log.warning("%s", warning)
        warnings.append(warning)
        return None
    # Deferred: only runs with a provenance.
    from preparer.provenance import stage_provenance
    from preparer.settings import provenance_settings

    return stage_provenance(plan, provenance_settings(inputs), results, records, written, lock, pending, kept)


def _remove_stale(path: Path) -> None:
    """Remove an earlier run's provenance at ``path``, which this run does not replace: left there, it would pass
    for this run's. A removal that fails is a warning (the commit is whole)."""
    try:
        path.unlink(missing_ok=True)
    except OSError as err:
        log.warning("the earlier provenance %s was not removed: %s", path, err.strerror or err)


def _committed(message: str, *args: object) -> None:
    """Log a line of a run whose commit is whole. A caller's logging handler that raises cannot undo the commit:
    its error is set aside, as :meth:`logging.Handler.handleError` sets aside a handler's own, instead of turning
    the committed run into a failure."""
    try:
        log.info(message, *args)
    except CallerFailed:  # the caller's handler; the run is done
        return


def _installation(buildpacks_dir: Path) -> Installation:
    from preparer.fetch.tree import Installation  # deferred, as the fetchers: only runs that fetch install

    return Installation(buildpacks_dir)


def _records(
    steps: Sequence[Step],
    results: dict[int, Fetched],
    buildpacks_dir: Path,
    installation: Installation | None,
    installed: list[Path],
    copies: Copies | None,
) -> list[BuildpackRecord]:
    """Install every fetched buildpack (remembering each in ``installed``); a record per order entry, which
    describes the copy in ``<buildpacks>`` when that is not the one fetched (``copies.kept``)."""
    records: list[BuildpackRecord] = []
    for step in steps:
        if isinstance(step, Present):
            source = step.entry.uri or step.entry.id or ""
            records.append(BuildpackRecord(step.id, step.version, source, "present", None, step.resolved))
            log.info("Using %s@%s from %s", step.id, step.version, buildpacks_dir)
            continue
        assert installation is not None and copies is not None  # made when anything was fetched
        result = results[id(step)]
        new = []
        for bp in result.buildpacks:
            interrupt.check()
            path = installation.install(bp, by_content=step.entry.script is not None)
            if path is not None:
                installed.append(path)
                new.append(bp)
            elif step.entry.script is None:
                _check_unchanged(bp, buildpacks_dir, copies)
        records.append(_record(step, result, bool(new), copies.kept))
        top = result.top
        log.info("%s %s from %s", "Installed" if new else "Already installed:", top.ref, result.source)
        for bp in new:
            if bp.descriptor != top:
                log.debug("Installed %s (carried by %s)", bp.descriptor.ref, top.ref)
    return records


def _check_unchanged(bp: StagedBuildpack, buildpacks_dir: Path, copies: Copies) -> None:
    """A buildpack the commit found in ``<buildpacks>`` was there, as checked, when the fetches were: else another
    run installed it meanwhile, and its files must be the ones fetched, which were checked.

    :raises ApplyError: they are not (exit 1; the commit is undone).
    """
    key = (bp.descriptor.id, bp.descriptor.version)
    if key in copies.present:
        return
    from preparer.fetch.tree import same_tree  # deferred, as the fetchers

    where = buildpack_dir(buildpacks_dir, *key)
    if not same_tree(bp.path, where):
        raise ApplyError(
            f"install {bp.descriptor.ref}",
            f"another run installed other files into {where} while this one ran: run again (and give each target "
            "its own <buildpacks>)",
        )


def _record(step: Fetch, result: Fetched, new: bool, kept: dict[tuple[str, str], Path]) -> BuildpackRecord:
    """The report's record of a fetched entry: what was fetched, or the copy already in ``<buildpacks>`` that the
    build runs instead (by its files' ``dirHash``, with the digest fetched and not installed)."""
    top = result.top
    where = kept.get((top.id, top.version))
    if where is not None:
        from preparer.provenance import dir_hash  # deferred: only a copy kept is hashed here

        staged = next(bp.path for bp in result.buildpacks if bp.descriptor == top)
        fetched = result.digest or f"dirHash:{dir_hash(staged)}"  # a directory's, by its files
        return BuildpackRecord(top.id, top.version, result.source, "present", f"dirHash:{dir_hash(where)}",
                               result.resolved, not_installed=fetched)  # fmt: skip
    action: Literal["installed", "present", "inline"] = (
        "inline" if step.entry.script is not None else ("installed" if new else "present")
    )
    signatures = tuple(
        SignatureRecord(
            step.entry.key,
            result.source,
            s.digest,
            s.format,
            s.key,
            s.issuer,
            s.subject,
            s.log_index,
            s.integrated_time,
            s.line,
        )
        for s in result.signatures
    )
    return BuildpackRecord(
        top.id, top.version, result.source, action, result.digest, result.resolved, result.via, signatures
    )


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
    pending.ready(inputs.layers_dir)
    pending.add(inputs.layers_dir / "order.toml", dumps_order(order).encode(), 0o644, owner)
    return order


def _stage_metadata(plan: Plan, owner: tuple[int, int] | None, pending: PendingWrites) -> Path | None:
    """Stage project-metadata.toml, 0644 and owned like order.toml (the exporter reads it as the build user)."""
    write = plan.project_metadata
    if write is None or write.action != "written":
        return None
    pending.add(write.path, dumps_toml(write.metadata.document()).encode(), 0o644, owner)
    return write.path


def _stage_lock(
    plan: Plan,
    results: dict[int, Fetched],
    owner: tuple[int, int] | None,
    pending: PendingWrites,
) -> tuple[Path | None, LockRecord | None]:
    """Stage the lock file when the run writes one (there was none, or ``-update-lock``): committed with the rest.
    A lock given as bytes is not written: the record carries it.

    The lock usually lives in the app, whose directories its author controls: below ``<app>`` it is reached one
    directory at a time, never through a link (:meth:`PendingWrites.ready_below`), so a planted link cannot send root's
    write elsewhere."""
    path, record = committed_lock(plan, results)
    if path is not None:
        assert record is not None and record.data is not None
        pending.add(path, record.data, 0o644, owner)
    return path, record


def _stage_env(
    plan: Plan, platform_dir: Path, owner: tuple[int, int] | None, pending: PendingWrites
) -> list[Path]:
    """Stage one ``<platform>/env/<NAME>`` file per variable to write: the value's bytes, 0644."""
    to_write = [action.entry for action in plan.env if action.action == "written"]
    if not to_write:
        return []
    env_dir = pending.ready(platform_dir, "env")
    paths = []
    for entry in to_write:
        pending.add(env_dir / entry.name, entry.value.encode(), 0o644, owner)
        paths.append(env_dir / entry.name)
    return paths
