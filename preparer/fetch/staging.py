"""Fetching a plan's buildpacks: one run's shared context, a private staging directory, every entry fetched in
parallel, and the checks that run before anything is committed (:mod:`preparer.apply` commits)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from preparer._logger import log
from preparer.api import verify_buildpack_api
from preparer.errors import FetchError, InvalidInputsError
from preparer.fetch.base import FetchContext, Fetched, no_progress
from preparer.fetch.cache import CacheUnusable, DownloadCache
from preparer.fetch.parallel import fetch_all
from preparer.fetch.sources import fetch
from preparer.fetch.streams import ProgressFn
from preparer.fetch.transport import Transport
from preparer.files.buildpack import buildpack_dir
from preparer.inputs import Inputs
from preparer.plan import Fetch


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
        transport=Transport(
            timeouts=(min(10.0, inputs.http_timeout), inputs.http_timeout), deadline=inputs.download_timeout
        ),
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


def fetch_steps(steps: Sequence[Fetch], ctx: FetchContext) -> list[Fetched]:
    """Fetch every entry in parallel, each with the fetcher for its kind of source; the first failure (in entry
    order) is raised."""
    jobs: list[Callable[[], Fetched]] = [lambda step=step: fetch(step.locator, ctx) for step in steps]  # type: ignore[misc]
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
