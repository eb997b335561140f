"""How image references reach registries in one run: routing data, as an HTTP client's mounts are.

Kept apart from :mod:`~preparer.fetch.oci.hosts` (which reads hosts.toml files) so that a run without mirrors, or
without images at all, loads nothing of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from preparer._record import field, record
from preparer.flags import DEFAULT_REGISTRY_INDEX

if TYPE_CHECKING:
    from preparer.fetch.oci.hosts import Host, RegistryHosts


@record
class Registries:
    """How image references reach registries in one run: routing data, as an HTTP client's mounts are.

    Which registries speak plain http, the environment credentials come from (``CNB_REGISTRY_AUTH``,
    ``DOCKER_CONFIG``, ``HOME``), the mirrors hosts.toml puts in front of each registry, the mirrors that failed in
    this run (not asked again), the platform an image index resolves to and every image must be for, and the
    buildpack registry's index."""

    #: Registries reached over plain http besides loopback (``-insecure-registry``).
    insecure: tuple[str, ...] = ()
    #: The environment credentials are looked up in.
    environ: Mapping[str, str] = field(default_factory=dict)
    #: Mirrors by registry, from ``-registry-hosts-dir``; ``None`` without.
    hosts: Mapping[str, RegistryHosts] | None = None
    #: The platform to choose from an image index, ``os/arch[/variant]``; a single-platform image must be for it.
    platform: str = "linux/amd64"
    #: The setting that gave :attr:`platform` (``CNB_PREPARER_PLATFORM``), named when an image is for another.
    platform_source: str = ""
    #: Whether an image for another platform is refused (Platform API 0.12 and later, whose detector checks
    #: targets), else a warning.
    platform_enforced: bool = True
    #: The buildpack registry index for ``urn:cnb:registry:`` and bare ids.
    index: str = DEFAULT_REGISTRY_INDEX
    #: Mirrors that failed in this run (shared by every fetch of the run): not asked again.
    down: set[str] = field(default_factory=set, compare=False)
    #: Warnings given in this run about where credentials are read (``DOCKER_CONFIG`` not a directory): once each.
    warned: set[str] = field(default_factory=set, compare=False)

    def routes(self, registry: str) -> tuple[tuple[Host, ...], Host | None]:
        """The mirrors to ask first for ``registry``, in order, and the upstream that replaces it (``server``)."""
        if not self.hosts:
            return (), None
        from preparer.fetch.oci.hosts import (  # deferred: only runs with mirrors route through them
            Host,
            hosts_for,
        )

        found = hosts_for(self.hosts, registry)
        if found is None:
            return (), None
        upstream = Host(found.server, frozenset({"pull", "resolve"})) if found.server else None
        return found.hosts, upstream
