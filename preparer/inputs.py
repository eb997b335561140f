"""The preparer's inputs: the creator's, plus the preparer's own (contract §1).

Precedence is flag > environment variable > default, decided once in :func:`resolve_inputs`
(the CLI passes the flags it saw and the environment). Paths that default to a place inside another
input (``<app>/project.toml``) are filled in after the others are known, as the lifecycle's
``UpdatePlaceholderPaths`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from preparer.api import APIVersion

# Inputs shared with the creator (platform spec §creator; lifecycle platform/defaults.go).
ENV_APP_DIR, DEFAULT_APP_DIR = "CNB_APP_DIR", "/workspace"
ENV_BUILDPACKS_DIR, DEFAULT_BUILDPACKS_DIR = "CNB_BUILDPACKS_DIR", "/cnb/buildpacks"
ENV_EXTENSIONS_DIR, DEFAULT_EXTENSIONS_DIR = "CNB_EXTENSIONS_DIR", "/cnb/extensions"
ENV_LAYERS_DIR, DEFAULT_LAYERS_DIR = "CNB_LAYERS_DIR", "/layers"
ENV_PLATFORM_DIR, DEFAULT_PLATFORM_DIR = "CNB_PLATFORM_DIR", "/platform"
#: The builder's order, read only; the prepared order goes to ``<layers>/order.toml``.
ENV_ORDER_PATH, DEFAULT_ORDER_PATH = "CNB_ORDER_PATH", "/cnb/order.toml"
ENV_USER_ID, ENV_GROUP_ID = "CNB_USER_ID", "CNB_GROUP_ID"
ENV_LOG_LEVEL, DEFAULT_LOG_LEVEL = "CNB_LOG_LEVEL", "info"
ENV_NO_COLOR = "CNB_NO_COLOR"
ENV_INSECURE_REGISTRIES = "CNB_INSECURE_REGISTRIES"
ENV_PLATFORM_API = "CNB_PLATFORM_API"
#: The build's execution environment, for ``exec-env`` filtering (Platform API 0.15).
ENV_EXEC_ENV, DEFAULT_EXEC_ENV = "CNB_EXEC_ENV", "production"

# Inputs of the preparer's own.
#: Default: ``<app>/project.toml``; a missing default file means nothing to apply.
ENV_PROJECT_DESCRIPTOR = "CNB_PROJECT_DESCRIPTOR_PATH"
ENV_PLATFORM_NAMESPACE = "CNB_PLATFORM_NAMESPACE"
ENV_PLATFORM_CONFIG = "CNB_PLATFORM_CONFIG_PATH"
#: Default: the user cache directory + ``/cnb-preparer``; an empty value disables the cache.
ENV_DOWNLOAD_CACHE = "CNB_DOWNLOAD_CACHE_DIR"
ENV_PREPARE_REPORT = "CNB_PREPARE_REPORT_PATH"
ENV_DRY_RUN = "CNB_DRY_RUN"
ENV_BUILDPACK_REGISTRY_INDEX = "CNB_BUILDPACK_REGISTRY_INDEX"
DEFAULT_BUILDPACK_REGISTRY_INDEX = "https://raw.githubusercontent.com/buildpacks/registry-index/main"

LOG_LEVELS = ("debug", "info", "warn", "error")


@dataclass(frozen=True)
class Inputs:
    """Everything one prepare run needs, resolved and absolute. Library callers build it directly."""

    app_dir: Path = Path(DEFAULT_APP_DIR)
    layers_dir: Path = Path(DEFAULT_LAYERS_DIR)
    platform_dir: Path = Path(DEFAULT_PLATFORM_DIR)
    buildpacks_dir: Path = Path(DEFAULT_BUILDPACKS_DIR)
    order_path: Path = Path(DEFAULT_ORDER_PATH)
    #: ``None`` means ``<app>/project.toml``, which may be missing.
    project_descriptor: Path | None = None
    platform_namespace: str | None = None
    platform_config: Path | None = None
    #: ``None`` disables the download cache.
    download_cache: Path | None = None
    prepare_report: Path | None = None
    dry_run: bool = False
    uid: int | None = None
    gid: int | None = None
    insecure_registries: tuple[str, ...] = ()
    exec_env: str = DEFAULT_EXEC_ENV
    registry_index: str = DEFAULT_BUILDPACK_REGISTRY_INDEX
    #: The target platform when choosing from an image index, ``os/arch[/variant]``.
    target_platform: str = "linux/amd64"
    platform_api: APIVersion = field(default_factory=lambda: APIVersion(0, 15))
    #: The environment, for registry credentials (``CNB_REGISTRY_AUTH``, ``DOCKER_CONFIG``, ``HOME``).
    environ: Mapping[str, str] = field(default_factory=dict)

    @property
    def descriptor_path(self) -> Path:
        """The project descriptor to read: the explicit one, else ``<app>/project.toml``."""
        return self.project_descriptor or self.app_dir / "project.toml"
