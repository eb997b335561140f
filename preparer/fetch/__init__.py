"""Fetching buildpacks named by a group entry's ``uri`` or ``script`` into a staging directory.

Every fetcher writes only below ``FetchContext.staging``; nothing reaches ``<buildpacks>`` until
``apply`` has fetched and checked every entry (contract §4, all-or-nothing).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import requests

from preparer.files.buildpack import BuildpackDescriptor


@dataclass(frozen=True, slots=True)
class StagedBuildpack:
    """One buildpack unpacked in staging, ``buildpack.toml`` at the top of ``path``."""

    descriptor: BuildpackDescriptor
    path: Path


@dataclass(frozen=True, slots=True)
class Fetched:
    """The result of fetching one ``uri``: the buildpack the order names and everything it carries."""

    #: The buildpack the order names (a buildpackage's top-level buildpack).
    top: BuildpackDescriptor
    #: Every buildpack to install, ``top`` included (composites and their children).
    buildpacks: tuple[StagedBuildpack, ...]
    #: The ``uri`` as the user wrote it, with any credentials removed.
    source: str
    #: ``sha256:<hex>`` of the archive or image manifest, when known.
    digest: str | None = None
    #: How a bare buildpack id in ``uri`` was resolved: ``"registry"`` or ``"image"`` (contract §7.11b).
    resolved: str | None = None


#: Progress callback: ``(source, bytes_done, bytes_total or None)``.
ProgressFn = Callable[[str, int, "int | None"], None]


def _no_progress(source: str, done: int, total: int | None) -> None:
    """Default progress callback: report nothing."""


class Sessions:
    """The run's one ``requests.Session``, made on first use so runs without downloads never import requests."""

    def __init__(self) -> None:
        self._session: requests.Session | None = None
        self._lock = threading.Lock()

    def get(self) -> requests.Session:
        """The shared session (thread-safe to create; requests sessions are shared by the fetch threads)."""
        with self._lock:
            if self._session is None:
                from preparer.fetch.http import new_session

                self._session = new_session()
            return self._session


@dataclass(frozen=True)
class FetchContext:
    """What every fetcher may use; IO happens only through these values."""

    #: A private directory for this run; fetchers create their own subdirectories in it.
    staging: Path
    #: The descriptor's directory: relative ``uri`` paths resolve against it.
    base_dir: Path
    #: ``<buildpacks>``, where a bare buildpack id was looked for first (named when it is found nowhere).
    buildpacks_dir: Path | None = None
    #: The download cache (``-download-cache``); ``None`` disables caching.
    download_cache: Path | None = None
    #: Registries reached over plain http besides loopback (``-insecure-registry``).
    insecure_registries: tuple[str, ...] = ()
    #: The environment, for ``CNB_REGISTRY_AUTH``, ``DOCKER_CONFIG``, ``HOME`` and proxies.
    environ: Mapping[str, str] = field(default_factory=dict)
    #: The platform to choose from an image index, ``os/arch[/variant]``.
    platform: str = "linux/amd64"
    #: The buildpack registry index for ``urn:cnb:registry:`` (contract §7.12).
    registry_index: str = "https://raw.githubusercontent.com/buildpacks/registry-index/main"
    #: Progress of downloads.
    progress: ProgressFn = _no_progress
    #: Seconds to wait for a connection and between bytes (contract §7.13: 10 and 60).
    timeouts: tuple[float, float] = (10.0, 60.0)
    #: Retries after the first attempt, on connection errors, timeouts and 5xx, with exponential backoff.
    retries: int = 3
    #: The first backoff, in seconds; it doubles with every retry.
    backoff: float = 0.5
    sessions: Sessions = field(default_factory=Sessions, compare=False, repr=False)
