"""What a stage takes of the inputs: small records made from :class:`~preparer.inputs.Inputs` where the stage is
entered, so that fetching and the provenance each see the few settings they use, not the whole record.

- :class:`FetchSettings`: what fetching needs (the caches and the fleet's repository, the transport's timeouts and
  session, the registries): :mod:`preparer.staging` (the run's fetching) and :mod:`preparer.downloads` (a plan's
  probes) take it, :mod:`preparer.apply` and the pipeline make it.
- :class:`ProvenanceSettings`: what the provenance records of the run's inputs (:mod:`preparer.provenance`); the
  commit makes it (:mod:`preparer.apply`).
- :class:`DetectorSettings`: what the groups as the detector will run them depend on (:mod:`preparer.detector`):
  the pipeline makes it while planning, :mod:`preparer.apply` once the run's buildpacks are fetched.

A stage that needs another setting gets a field here, filled in its ``*_settings`` function.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from preparer._record import field, record
from preparer.lists import Lists, lists_of

if TYPE_CHECKING:
    from preparer.api import APIVersion
    from preparer.fetch.transport import Transport
    from preparer.inputs import Inputs


@record(kw_only=True)
class FetchSettings:
    """What a run's fetching is given of the inputs (the fields are named as :class:`~preparer.inputs.Inputs`'s)."""

    #: Where buildpacks are installed, and bare ids looked for; staging is made beside it.
    buildpacks_dir: Path
    #: This pod's download cache (``None``: none), and the fleet's repository with its mode and freshness.
    download_cache: Path | None
    download_cache_repo: str | None
    download_cache_repo_mode: str
    download_cache_max_age: float
    #: Seconds between bytes, for one download, and for the run's downloads together.
    http_timeout: float
    download_timeout: float
    run_timeout: float
    #: Registry credentials, CA certificates and proxies are found in it; never shown.
    environ: Mapping[str, str] = field(repr=False)
    #: The caller's transport (``Inputs.transport``), whose session the run's requests go through.
    transport: Transport | None = field(default=None, repr=False, compare=False)
    insecure_registries: tuple[str, ...] = ()
    registry_index: str
    #: The platform images must be for when the plan has no target, and whether one for another is refused.
    target_platform: str
    checks_targets: bool
    #: Installs are hard links into the download cache (a root preparer building for another user).
    link_installs: bool = False
    #: Fetchers hash each file they stage (the provenance names them by their digests).
    hash_files: bool = False


def fetch_settings(inputs: Inputs) -> FetchSettings:
    """What fetching takes of ``inputs``."""
    return FetchSettings(
        buildpacks_dir=inputs.buildpacks_dir,
        download_cache=inputs.download_cache,
        download_cache_repo=inputs.download_cache_repo,
        download_cache_repo_mode=inputs.download_cache_repo_mode,
        download_cache_max_age=inputs.download_cache_max_age,
        http_timeout=inputs.http_timeout,
        download_timeout=inputs.download_timeout,
        run_timeout=inputs.run_timeout,
        environ=inputs.environ,
        transport=inputs.transport,
        insecure_registries=inputs.insecure_registries,
        registry_index=inputs.registry_index,
        target_platform=inputs.target_platform,
        checks_targets=inputs.checks_targets,
        # Hard links into the cache only where the build cannot write them: the cache's files are root's.
        link_installs=os.geteuid() == 0 and inputs.uid not in (None, 0),
        hash_files=inputs.provenance is not None,
    )


@record(kw_only=True)
class ProvenanceSettings:
    """What the provenance records of the run's inputs (docs/provenance.md)."""

    #: Where the statement is written, and the ``runDetails.builder.id`` it names.
    path: Path
    builder_id: str
    #: The build's directories: subjects are named relative to ``<layers>`` and ``<platform>``, paths in the app
    #: relative to ``<app>``, installed buildpacks found in ``<buildpacks>``; the builder's order is an input file.
    app_dir: Path
    layers_dir: Path
    platform_dir: Path
    buildpacks_dir: Path
    order_path: Path
    platform_namespace: str | None
    platform_config: Path | None
    exec_env: str
    #: The Platform API, as written (``0.15``).
    platform_api: str
    #: The policy's file, or its text when given as data (a parsed ``Policy`` has no bytes to name).
    policy: Path | None
    policy_text: str | bytes | None
    #: The lock given as bytes (``Inputs.lock_data``), whose sha256 a frozen run records.
    lock_data: bytes | None
    #: The platform's lists (``-buildpack`` and the others), recorded as given, credentials removed.
    lists: Lists = field(default_factory=Lists)


def provenance_settings(inputs: Inputs) -> ProvenanceSettings:
    """What the provenance takes of ``inputs``, for a run that writes one (``Inputs.provenance``)."""
    assert inputs.provenance is not None
    policy_data = inputs.policy_data
    return ProvenanceSettings(
        path=inputs.provenance,
        builder_id=inputs.provenance_builder_id,
        app_dir=inputs.app_dir,
        layers_dir=inputs.layers_dir,
        platform_dir=inputs.platform_dir,
        buildpacks_dir=inputs.buildpacks_dir,
        order_path=inputs.order_path,
        platform_namespace=inputs.platform_namespace,
        platform_config=inputs.platform_config,
        exec_env=inputs.exec_env,
        platform_api=str(inputs.platform_api),
        policy=inputs.policy,
        policy_text=policy_data if isinstance(policy_data, str | bytes) else None,
        lock_data=inputs.lock_data,
        lists=lists_of(inputs),
    )


@record(kw_only=True)
class DetectorSettings:
    """What the groups as the detector will run them depend on (docs/detector.md)."""

    #: Where system and builder buildpacks are looked up; the builder's order, run when the project sets no group.
    buildpacks_dir: Path
    order_path: Path
    #: system.toml (``None``: none), and whether the platform turned system buildpacks off for the build.
    system_path: Path | None
    disabled: bool
    #: The build's execution environment and the Platform API, which decide what the detector skips.
    exec_env: str
    platform_api: APIVersion
    #: Whether a system buildpack that cannot run on the target is refused (Platform API 0.12 and later).
    checks_targets: bool


def detector_settings(inputs: Inputs) -> DetectorSettings:
    """What the groups as the detector will run them take of ``inputs``."""
    return DetectorSettings(
        buildpacks_dir=inputs.buildpacks_dir,
        order_path=inputs.order_path,
        system_path=inputs.system_path,
        disabled=inputs.disable_system_buildpacks,
        exec_env=inputs.exec_env,
        platform_api=inputs.platform_api,
        checks_targets=inputs.checks_targets,
    )
