"""Fetching a plan's buildpacks: one run's shared context, a private staging directory, every entry fetched in
parallel, and the checks that run before anything is committed (:mod:`preparer.apply` commits).

This is where the top of the package (the inputs, the plan, the policy) meets the fetch floor (``preparer/fetch/``),
which imports none of them: the policy reaches fetching only as a :class:`~preparer.fetch.guard.Guard`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, assert_never

from preparer import telemetry
from preparer._fs import claimed_dir, full_disk, shared_with_others, sweep
from preparer._logger import log
from preparer._record import field, record
from preparer.api import verify_buildpack_api
from preparer.errors import (
    BuilderError,
    FetchError,
    InvalidInputsError,
    NoSpaceError,
    TargetRefused,
    with_fields,
)
from preparer.fetch.base import FetchContext, Fetched
from preparer.fetch.clock import RunClock
from preparer.fetch.locator import (
    Fetchable,
    HttpLocator,
    IdLocator,
    ImageLocator,
    InlineLocator,
    PathLocator,
    RegistryLocator,
    redact,
)
from preparer.fetch.parallel import fetch_all
from preparer.fetch.registries import Registries
from preparer.fetch.sink import Sink
from preparer.fetch.sources import fetch
from preparer.fetch.store import opened_store
from preparer.fetch.transport import Transport, for_run
from preparer.fetch.tree import same_tree
from preparer.files.buildpack import BuildpackDescriptor, buildpack_dir, read_buildpack_toml
from preparer.plan import Fetch
from preparer.progress import EntryDownloads, ProgressCallback
from preparer.settings import FetchSettings
from preparer.target import Lookup, Target, check_targets, directory_files, installed, why_not

if TYPE_CHECKING:
    from preparer.fetch.oci.hosts import RegistryHosts
    from preparer.policy.budget import Budget, RunTotals
    from preparer.policy.rules import Policy

#: Staging directories: in ``<buildpacks>`` (hidden), or in ``$TMPDIR`` when ``<buildpacks>`` cannot be written.
STAGING_PREFIXES = (".preparer-staging-", "preparer-staging-")


@contextmanager
def fetching(
    settings: FetchSettings,
    collect: Callable[[str], None] | None = None,
    registry_hosts: Mapping[str, RegistryHosts] | None = None,
    target: Target | None = None,
) -> Iterator[FetchContext]:
    """What the fetchers of one run share, for the block: a staging directory of the run's own, and the store (the
    download cache and the fleet's repository, :func:`~preparer.fetch.store.opened_store`). Both are cleared when
    the block ends, whatever ends it; what runs that died left is removed first (:func:`preparer._fs.sweep`).

    :param collect: told every warning the fetchers have, besides the ``preparer`` logger.
    :param target: the build's target, which images must be for (else ``settings.target_platform``).
    """

    def warn(message: str) -> None:
        log.warning("%s", message)
        if collect is not None:
            collect(message)

    with contextlib.ExitStack() as stack:
        staging = _enter_staging(stack, settings.buildpacks_dir)
        clock = RunClock(settings.run_timeout)
        stack.callback(clock.stop)
        store = stack.enter_context(
            opened_store(
                settings.download_cache,
                settings.download_cache_repo,
                settings.download_cache_repo_mode,
                settings.download_cache_max_age,
                environ=settings.environ,
                insecure_registries=settings.insecure_registries,
                warn=warn,
                clock=clock,
                download_timeout=settings.download_timeout,
                link_installs=settings.link_installs,
                given=settings.transport,
            )
        )
        # The run's connections end with it: a service running many builds keeps no socket of a finished one.
        timeouts = (min(10.0, settings.http_timeout), settings.http_timeout)
        transport = stack.enter_context(run_transport(settings, clock, timeouts))
        yield FetchContext(
            sink=Sink(staging, warn=warn),
            store=store,
            transport=transport,
            registries=run_registries(settings, registry_hosts, target),
            buildpacks_dir=settings.buildpacks_dir,
            hash_files=settings.hash_files,
        )


def run_transport(
    settings: FetchSettings, clock: RunClock, timeouts: tuple[float, float], retries: int = Transport.retries
) -> Transport:
    """A transport of the run: ``timeouts`` and ``retries``, the run's clock, download deadline and environment, and
    a session of its own; with ``Inputs.transport``, that transport's environment and TLS trust, and its session
    only when it was given one (an in-memory one; the caller's to close): :func:`~preparer.fetch.transport.for_run`."""
    return for_run(
        settings.transport, settings.environ, timeouts=timeouts, retries=retries,
        deadline=settings.download_timeout, clock=clock,
    )  # fmt: skip


def run_registries(
    settings: FetchSettings, hosts: Mapping[str, RegistryHosts] | None, target: Target | None
) -> Registries:
    """The run's registries: its insecure ones, mirrors (``hosts``) and index, and the platform images must be
    for: ``target``'s, else ``settings.target_platform``."""
    return Registries(
        insecure=settings.insecure_registries,
        environ=settings.environ,
        hosts=hosts,
        platform=target.platform if target is not None else settings.target_platform,
        platform_source=target.source if target is not None else "",
        platform_enforced=settings.checks_targets,
        index=settings.registry_index,
    )


def _enter_staging(stack: contextlib.ExitStack[bool | None], buildpacks_dir: Path) -> Path:
    """A staging directory of the run's own, for as long as ``stack`` lasts: beside ``<buildpacks>`` when it can
    be written there (so that commits are renames), else in ``$TMPDIR``. Staging directories of runs that died
    are removed first.

    Fetchers write below staging by path, so its parent must be a directory no other user can change: one the
    build user can write (``<buildpacks>`` of a root preparer, in some platforms) could have the staging
    directory renamed away and a link to anywhere put in its place. Such a parent is not used."""
    temp: Path | None = None

    def candidates() -> Iterator[tuple[Path, str]]:
        nonlocal temp
        yield buildpacks_dir, STAGING_PREFIXES[0]
        temp = _temp_dir()  # only asked when <buildpacks> cannot be used: finding it writes a file there
        if temp is not None:
            yield temp, STAGING_PREFIXES[1]

    refused = []
    for parent, prefix in candidates():
        shared = shared_with_others(parent)
        if shared is not None:
            refused.append(f"{shared[0]} {shared[1]}")
            log.debug("Not staging in %s: %s %s", parent, *shared)
            continue
        removed = sweep(parent, prefix)
        if removed:
            log.debug("Removed what %d interrupted runs left in %s", len(removed), parent)
        try:
            return stack.enter_context(claimed_dir(parent, prefix))
        except OSError:
            continue
    if refused:
        raise FetchError(
            "make a staging directory",
            f"neither {buildpacks_dir} nor $TMPDIR can be written safely ({'; '.join(refused)}): set TMPDIR to a "
            "directory only the preparer's user can write",
        )
    if temp is None:
        raise FetchError(
            "make a staging directory", f"{buildpacks_dir} cannot be written and there is no $TMPDIR"
        )
    raise FetchError("make a staging directory", f"neither {buildpacks_dir} nor {temp} can be written")


def _temp_dir() -> Path | None:
    """``$TMPDIR`` (or ``/tmp``...), or ``None`` when there is none that can be written: a read-only root file system
    without a volume on ``/tmp``, as hardened pods run, is normal and only matters when ``<buildpacks>`` cannot be
    written either."""
    import tempfile  # deferred: most runs stage beside <buildpacks>

    try:
        return Path(tempfile.gettempdir())
    except OSError:
        return None


@telemetry.step("cnb.fetch", lambda got: {"cnb.fetch.count": len(got)})
def fetch_steps(
    steps: Sequence[Fetch],
    ctx: FetchContext,
    policy: Policy | None = None,
    progress: ProgressCallback | None = None,
    expected: Mapping[str, int | None] | None = None,
) -> list[Fetched]:
    """Fetch every entry in parallel, each with the fetcher for its kind of source; the first failure (in entry
    order) is raised. With a policy, each fetch is held to its limits, and all of them to the run's.

    :param progress: given each entry's download events (:class:`~preparer.progress.Download`), from the fetch
        threads: the caller makes it safe to enter from several (:func:`preparer.entrypoints.callers`).
    :param expected: the bytes each entry (by key) is expected to download, as the plan measured them.
    """
    http = [archive for s in steps if (archive := _archive(s.pinned or s.locator)) is not None]
    if len(http) > 1:  # their revalidation requests, sent together rather than one fetch thread at a time
        ctx.store.revalidate(http, ctx.transport)
    totals = None
    if policy is not None:
        from preparer.policy.budget import RunTotals  # deferred: only runs with a policy count against it

        totals = RunTotals()
    jobs = []
    for step in steps:
        guard = _budget(policy, step, totals) if policy is not None and totals is not None else None
        size = (expected or {}).get(step.entry.key)
        downloads = None if progress is None else _downloads(step, progress, size)
        sink = replace(ctx.sink, guard=guard, progress=downloads or ctx.sink.progress)
        jobs.append(partial(_fetch, step, replace(ctx, sink=sink), downloads))
    return fetch_all(jobs)


def _downloads(step: Fetch, progress: ProgressCallback, expected: int | None = None) -> EntryDownloads:
    entry = step.entry
    archive = _archive(step.locator)
    url = archive.target.shown if archive is not None else None
    return EntryDownloads(
        progress, entry.key, redact(entry.uri or entry.id or ""), step.buildpack_id, url, expected
    )


def _fetch(step: Fetch, ctx: FetchContext, downloads: EntryDownloads | None) -> Fetched:
    """One entry fetched; a failure says, as data, which entry and URL it was, and fails its downloads."""
    locator = step.pinned or step.locator
    try:
        with telemetry.fetching(step.entry.key, step.buildpack_id, locator):
            return telemetry.fetched_attributes(fetch(locator, ctx))
    except BaseException as err:
        if downloads is not None:
            downloads.failed()
        full = full_disk(err) if not isinstance(err, NoSpaceError) else None
        if (
            full is not None
        ):  # what the fetch wrote is in staging: the download cache's full disk is a warning
            raise _staging_full(step, ctx, full) from err
        if isinstance(err, FetchError):
            if err.source is None:
                err.source = redact(step.entry.uri or step.entry.id or "")
            if err.url is None and (archive := _archive(step.locator)) is not None:
                err.url = archive.target.shown
            if step.locked_in is not None:
                from preparer.lock.modes import fetch_failure  # deferred: only frozen runs fetch a pin

                said = fetch_failure(step, err)
                if said is not err:
                    raise said from err
        raise


def _staging_full(step: Fetch, ctx: FetchContext, full: OSError) -> NoSpaceError:
    """The error of a fetch that found staging's disk full: ``<buildpacks>``'s, or ``$TMPDIR``'s."""
    locator = step.pinned or step.locator
    match locator:
        case HttpLocator():
            source = locator.shown
        case ImageLocator():
            source = locator.reference
        case PathLocator() | RegistryLocator() | IdLocator() | InlineLocator():
            source = redact(step.entry.uri or step.entry.id or "")
        case _ as never:
            assert_never(never)
    return ctx.sink.staging_full(source, full)


def _archive(locator: Fetchable) -> HttpLocator | None:
    """``locator`` when it names an http archive (a URL said with its failure and progress, a copy in this pod's cache
    revalidated with the others'), else ``None``."""
    match locator:
        case HttpLocator():
            return locator
        case PathLocator() | ImageLocator() | RegistryLocator() | IdLocator() | InlineLocator():
            return None
        case _ as never:
            assert_never(never)


def _budget(policy: Policy, step: Fetch, totals: RunTotals) -> Budget:
    from preparer.policy.budget import Budget  # deferred, as in fetch_steps
    from preparer.policy.enforce import planned_image
    from preparer.policy.rules import written_as

    entry = step.entry
    source = redact(entry.uri or entry.id or "")
    written = written_as(entry.uri, entry.id, source)
    return Budget(policy, source, totals, entry.key, written, planned_image(step.locator))


@record
class Copies:
    """What ``<buildpacks>`` already holds of the buildpacks a run fetched, by ``(id, version)``. The commit never
    replaces such a copy (another build may be using it; an inline buildpack aside), so the copy on disk is the one
    the build runs, and the one checked and described."""

    #: Every such copy, the same files as fetched or not.
    present: frozenset[tuple[str, str]] = frozenset()
    #: Those whose files differ from the ones fetched (installed by another run, perhaps for another platform).
    kept: dict[tuple[str, str], Path] = field(default_factory=dict)


def copies_on_disk(steps: Sequence[Fetch], fetched: Sequence[Fetched], buildpacks_dir: Path) -> Copies:
    """The buildpacks fetched that ``<buildpacks>`` already holds (:class:`Copies`), each compared with what was
    fetched (:func:`preparer.fetch.tree.same_tree`). An inline buildpack is not among them: the commit replaces
    one whose script changed."""
    present, kept = set(), {}
    for step, result in zip(steps, fetched, strict=True):
        if step.entry.script is not None:
            continue
        for bp in result.buildpacks:
            key = (bp.descriptor.id, bp.descriptor.version)
            where = buildpack_dir(buildpacks_dir, *key)
            if key in present or not (where.exists() or where.is_symlink()):
                continue
            present.add(key)
            if not same_tree(bp.path, where):
                kept[key] = where
    return Copies(frozenset(present), kept)


@telemetry.step("cnb.check_fetched")
def check_fetched(
    steps: Sequence[Fetch],
    fetched: Sequence[Fetched],
    buildpacks_dir: Path,
    target: Target | None = None,
    *,
    enforced: bool = True,
    copies: Copies | None = None,
    lock: Path | None = None,
) -> list[str]:
    """Checks before anything is committed: ids match, Buildpack APIs are supported, composites are complete, and
    every buildpack the order names can run on ``target`` (:func:`preparer.target.check_targets`), as the build
    will have it: a copy already in ``<buildpacks>`` (``copies``) is the one checked, and one whose files differ
    from those fetched is told of (a warning), or refused when it cannot run on ``target``.

    :param enforced: a buildpack that cannot run on ``target`` is refused (Platform API 0.12 and later), else a
        warning.
    :param lock: the run's lock file, which pins or records what is fetched: a copy that differs is refused.
    :returns: the warnings.

    :raises InvalidInputsError: the id in project.toml differs from the fetched one (exit 3).
    :raises BuildpackAPIError: an unsupported Buildpack API (exit 12).
    :raises FetchError: a composite buildpack's children are neither present nor fetched (exit 1).
    :raises TargetRefused: a buildpack the order names cannot run on ``target`` (exit 1).
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
    _check_vouched(steps, fetched, copies or Copies(), lock)
    if target is None:
        return []
    return _check_targets(fetched, buildpacks_dir, target, enforced, copies or Copies())


def _check_vouched(
    steps: Sequence[Fetch], fetched: Sequence[Fetched], copies: Copies, lock: Path | None
) -> None:
    """A copy in ``<buildpacks>`` whose files are not the ones fetched is never run where the run vouches for the
    bytes: an entry a lock pins (frozen) or records (``lock``, written or updated), or one whose image's signatures
    the platform policy required. Those are for what was fetched, not for that copy.

    :raises FetchError: such a copy (exit 1).
    """
    for step, result in zip(steps, fetched, strict=True):
        if step.pinned is not None:
            vouched = f"the lock{f' {step.locked_in}' if step.locked_in else ''} pins the copy fetched"
        elif lock is not None:
            vouched = f"the lock {lock} records the copy fetched"
        elif result.signatures:
            vouched = "the platform policy required the signatures verified for the copy fetched"
        else:
            continue
        for bp in result.buildpacks:
            where = copies.kept.get((bp.descriptor.id, bp.descriptor.version))
            if where is None:
                continue
            digest = f" ({result.digest})" if result.digest else ""
            raise FetchError(
                f"install {bp.descriptor.ref}",
                f"{where} already holds {bp.descriptor.ref} with other files than the copy fetched from "
                f"{result.source}{digest}, and the build would run that copy, while {vouched}. To build, give "
                f"each target its own <buildpacks> (-buildpacks), or remove {where} so that the fetched copy is "
                "installed",
            )


def staged_lookup(fetched: Sequence[Fetched], buildpacks_dir: Path, copies: Copies) -> Lookup:
    """Finds a buildpack as the build will have it once the run commits: a copy already in ``<buildpacks>`` there,
    else among those ``fetched`` (staged), else in ``<buildpacks>``."""
    staged = {(bp.descriptor.id, bp.descriptor.version): bp for f in fetched for bp in f.buildpacks}

    def lookup(bp_id: str, version: str) -> tuple[BuildpackDescriptor, Callable[[str], bool]] | None:
        found = staged.get((bp_id, version))
        if found is not None and (bp_id, version) not in copies.present:
            return found.descriptor, directory_files(found.path)
        return installed(buildpacks_dir, bp_id, version)

    return lookup


def _check_targets(
    fetched: Sequence[Fetched], buildpacks_dir: Path, target: Target, enforced: bool, copies: Copies
) -> list[str]:
    """:func:`preparer.target.check_targets` of the fetched buildpacks as the build will have them: a copy already
    in ``<buildpacks>`` is found there, else among those fetched; a composite's children likewise."""
    lookup = staged_lookup(fetched, buildpacks_dir, copies)
    warnings = _check_kept(fetched, copies, target, lookup, enforced)
    tops = []
    for result in fetched:
        top = lookup(result.top.id, result.top.version)
        tops.append(top if top is not None else (result.top, lambda name: False))
    return warnings + check_targets(tops, target, lookup, enforced=enforced)


def _check_kept(
    fetched: Sequence[Fetched],
    copies: Copies,
    target: Target,
    lookup: Callable[[str, str], tuple[BuildpackDescriptor, Callable[[str], bool]] | None],
    enforced: bool,
) -> list[str]:
    """Each copy in ``<buildpacks>`` whose files are not the ones fetched, checked as if the run had installed it:
    refused when it cannot run on ``target`` (a warning below Platform API 0.12), else a warning that the build
    runs it, and that the report and the provenance describe it.

    :raises BuilderError: its ``buildpack.toml`` cannot be read (exit 1).
    :raises TargetRefused: it cannot run on ``target`` (exit 1).
    """
    warnings: list[str] = []
    for result in fetched:
        for bp in result.buildpacks:
            where = copies.kept.get((bp.descriptor.id, bp.descriptor.version))
            if where is None:
                continue
            ref = bp.descriptor.ref
            digest = f" ({result.digest})" if result.digest else ""
            held = f"{where} already holds {ref} with other files than the copy fetched from {result.source}{digest}"
            way_out = (
                f"give each target its own <buildpacks> (-buildpacks), or remove {where} so that the fetched copy "
                "is installed"
            )
            try:
                on_disk = read_buildpack_toml(where / "buildpack.toml", builder=True)
            except BuilderError as broken:
                raise BuilderError(
                    f"install {ref}",
                    f"{held}, and the build would run that copy, which is broken: {broken.cause}. "
                    f"To build, {way_out}",
                ) from None
            why = why_not(on_disk, directory_files(where), target, lookup, warnings)
            if why is not None and enforced:
                error = TargetRefused(
                    f"install {ref}", f"{held}, and the build would run that copy: {why}. To build, {way_out}"
                )
                raise with_fields(error, buildpack=ref, target=target.platform, source=target.source)
            said = f": {why}" if why is not None else ""
            warnings.append(
                f"{ref}: {held}; the build runs the copy on disk (perhaps installed for another platform{said}), "
                f"and the report and the provenance describe it, not the one fetched. To run the fetched copy, "
                f"{way_out}"
            )
    return warnings
