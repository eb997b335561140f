"""The preparer's inputs: the creator's, plus the preparer's own (contract §1).

Precedence is flag > environment variable > default, decided once in :func:`resolve_inputs`
(the CLI passes the flags it saw and the environment). Paths that default to a place inside another
input (``<app>/project.toml``) are filled in after the others are known, as the lifecycle's
``UpdatePlaceholderPaths`` does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from preparer.api import SUPPORTED_PLATFORM_APIS, APIVersion, verify_platform_api

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
#: The platform to choose from a multi-platform image, ``os/arch[/variant]``; default the host's.
ENV_TARGET_PLATFORM = "CNB_PREPARER_PLATFORM"
#: Seconds to wait for bytes from a server (and at most 10 to connect); default 60 (contract §7.13).
ENV_HTTP_TIMEOUT, DEFAULT_HTTP_TIMEOUT = "CNB_PREPARER_HTTP_TIMEOUT", 60.0
DEFAULT_BUILDPACK_REGISTRY_INDEX = "https://raw.githubusercontent.com/buildpacks/registry-index/main"

LOG_LEVELS = ("debug", "info", "warn", "error")
#: The defaults shown by ``-h``, by flag name.
USAGE_DEFAULTS = {
    "app": DEFAULT_APP_DIR,
    "buildpacks": DEFAULT_BUILDPACKS_DIR,
    "extensions": DEFAULT_EXTENSIONS_DIR,
    "layers": DEFAULT_LAYERS_DIR,
    "platform": DEFAULT_PLATFORM_DIR,
    "order": DEFAULT_ORDER_PATH,
    "log-level": DEFAULT_LOG_LEVEL,
    "download-cache": "<user cache directory>/cnb-preparer",
    "buildpack-registry-index": DEFAULT_BUILDPACK_REGISTRY_INDEX,
}


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
    #: Seconds to wait between bytes from a server (and at most 10 to connect).
    http_timeout: float = DEFAULT_HTTP_TIMEOUT
    platform_api: APIVersion = SUPPORTED_PLATFORM_APIS[-1]
    #: The environment, for registry credentials (``CNB_REGISTRY_AUTH``, ``DOCKER_CONFIG``, ``HOME``); never shown.
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def descriptor_path(self) -> Path:
        """The project descriptor to read: the explicit one, else ``<app>/project.toml``."""
        return self.project_descriptor or self.app_dir / "project.toml"


def _env_bool(environ: Mapping[str, str], name: str) -> bool:
    # The lifecycle's boolEnv: Go's ParseBool, and anything else counts as false.
    from preparer.goflags import parse_bool

    return parse_bool(environ.get(name, "")) is True


def _path(value: str, cwd: Path) -> Path:
    return Path(os.path.normpath(cwd / value))


def _host_platform() -> str:
    import platform

    machine = platform.machine().lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    return f"linux/{arch}"


def user_cache_dir(environ: Mapping[str, str]) -> Path | None:
    """The default download cache: ``$XDG_CACHE_HOME/cnb-preparer``, else ``$HOME/.cache/cnb-preparer`` (the XDG
    base directory rule, which is all platformdirs does on Linux, here read from ``environ`` rather than the process
    and without its import on every run); ``None`` when neither is set, as in a bare lifecycle image."""
    xdg = environ.get("XDG_CACHE_HOME", "")
    if xdg.startswith("/"):
        return Path(xdg) / "cnb-preparer"
    home = environ.get("HOME", "")
    return Path(home) / ".cache" / "cnb-preparer" if home.startswith("/") else None


def resolve_inputs(
    flags: Mapping[str, object], environ: Mapping[str, str], cwd: Path | None = None
) -> Inputs:
    """Combine the flags given, the environment and the defaults: flag > environment > default.

    :param flags: values of the flags that were given, by flag name (``app``, ``log-level``, ...).
    :param environ: the process environment.
    :param cwd: relative paths are made absolute against it.
    :raises InvalidInputsError: well-formed but invalid values (exit 3).
    :raises PlatformAPIError: ``CNB_PLATFORM_API`` is set but unparsable or unsupported (exit 11).
    """
    from preparer.errors import InvalidInputsError
    from preparer.goflags import BY_NAME, parse_int

    cwd = cwd or Path.cwd()
    # The CLI checked it before anything else; a library caller's environment may lack it (then: the newest).
    api = environ.get(ENV_PLATFORM_API)
    platform_api = verify_platform_api(api) if api else SUPPORTED_PLATFORM_APIS[-1]

    def value(name: str) -> object:
        if name in flags:
            return flags[name]
        env = BY_NAME[name].env
        return environ.get(env) if env else None

    def text(name: str, default: str | None = None) -> str | None:
        got = value(name)
        return default if got is None else str(got)

    def path(name: str, default: str | None = None) -> Path | None:
        got = text(name, default)
        return None if got is None or got == "" else _path(got, cwd)

    def number(name: str) -> int | None:
        got = value(name)
        if got is None or got == "" or isinstance(got, int):
            return got if isinstance(got, int) else None
        parsed = parse_int(str(got))
        if parsed is None:
            raise InvalidInputsError("resolve inputs", f"{BY_NAME[name].env}={got!r} is not an integer")
        return parsed

    log_level = (text("log-level", DEFAULT_LOG_LEVEL) or DEFAULT_LOG_LEVEL).lower()
    if log_level == "warning":
        log_level = "warn"
    if log_level not in LOG_LEVELS:
        raise InvalidInputsError("parse log level", f"'{log_level}' is not one of {', '.join(LOG_LEVELS)}")
    namespace = text("platform-namespace") or None
    platform_config = path("platform-config")
    if platform_config is not None and namespace is None:
        raise InvalidInputsError("resolve inputs", "-platform-config needs -platform-namespace")

    if "download-cache" in flags or ENV_DOWNLOAD_CACHE in environ:
        download_cache = path("download-cache")
    else:
        download_cache = user_cache_dir(environ)
    given = flags.get("insecure-registry")
    if isinstance(given, list | tuple):
        registries = [str(r) for r in given]  # repeated flags append, with no comma split (as Go)
    else:
        registries = [r.strip() for r in environ.get(ENV_INSECURE_REGISTRIES, "").split(",") if r.strip()]
    dry_run = flags["dry-run"] if "dry-run" in flags else _env_bool(environ, ENV_DRY_RUN)
    try:
        http_timeout = float(environ.get(ENV_HTTP_TIMEOUT) or DEFAULT_HTTP_TIMEOUT)
    except ValueError:
        http_timeout = -1.0
    if not 0 < http_timeout < float("inf"):
        raise InvalidInputsError("resolve inputs", f"{ENV_HTTP_TIMEOUT} must be a positive number of seconds")
    return Inputs(
        app_dir=path("app", DEFAULT_APP_DIR) or Path(DEFAULT_APP_DIR),
        layers_dir=path("layers", DEFAULT_LAYERS_DIR) or Path(DEFAULT_LAYERS_DIR),
        platform_dir=path("platform", DEFAULT_PLATFORM_DIR) or Path(DEFAULT_PLATFORM_DIR),
        buildpacks_dir=path("buildpacks", DEFAULT_BUILDPACKS_DIR) or Path(DEFAULT_BUILDPACKS_DIR),
        order_path=path("order", DEFAULT_ORDER_PATH) or Path(DEFAULT_ORDER_PATH),
        project_descriptor=path("project-descriptor"),
        platform_namespace=namespace,
        platform_config=platform_config,
        download_cache=download_cache,
        prepare_report=path("prepare-report"),
        dry_run=bool(dry_run),
        uid=number("uid"),
        gid=number("gid"),
        insecure_registries=tuple(registries),
        exec_env=environ.get(ENV_EXEC_ENV) or DEFAULT_EXEC_ENV,
        registry_index=text("buildpack-registry-index") or DEFAULT_BUILDPACK_REGISTRY_INDEX,
        target_platform=environ.get(ENV_TARGET_PLATFORM) or _host_platform(),
        http_timeout=http_timeout,
        platform_api=platform_api,
        environ=dict(environ),
    )


def log_level_of(flags: Mapping[str, object], environ: Mapping[str, str]) -> str:
    """The ``-log-level`` in force, before the other inputs are resolved (for messages about them)."""
    raw = flags.get("log-level", environ.get(ENV_LOG_LEVEL, DEFAULT_LOG_LEVEL))
    level = str(raw).lower()
    return "warn" if level == "warning" else level


def no_color(flags: Mapping[str, object], environ: Mapping[str, str]) -> bool:
    """``-no-color``, ``CNB_NO_COLOR`` or the ``NO_COLOR`` convention (any non-empty value)."""
    if "no-color" in flags:
        return bool(flags["no-color"])
    return _env_bool(environ, ENV_NO_COLOR) or bool(environ.get("NO_COLOR"))
