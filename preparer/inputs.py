"""The preparer's inputs: the creator's, plus the preparer's own, resolved once into a frozen :class:`Inputs`.

Precedence is flag > environment variable > default (:mod:`preparer.flags` holds the one table of them), decided
in :func:`resolve_inputs` for the command and in :meth:`Inputs.from_environ` for library callers. Paths that
default to a place inside another input (``<app>/project.toml``) are filled in after the others are known, as
the lifecycle's ``UpdatePlaceholderPaths`` does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast, overload

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from preparer.fetch.transport import Transport
    from preparer.policy.rules import Policy

from preparer._logger import log
from preparer._record import field, record
from preparer.api import SUPPORTED_PLATFORM_APIS, APIVersion, platform_api_problem, verify_platform_api
from preparer.errors import InvalidInputsError, with_fields
from preparer.flags import BY_NAME, DEFAULT_REGISTRY_INDEX, default, env_default, env_of
from preparer.goflags import BOOL_SPELLINGS, parse_bool, parse_duration, parse_int
from preparer.target import (
    DEFAULT_OS_RELEASE,
    ENV_PREPARER_PLATFORM,
    Target,
    host_platform,
    parse_platform,
    target_from_environ,
)

#: Kept under this name for callers of earlier versions.
DEFAULT_BUILDPACK_REGISTRY_INDEX = DEFAULT_REGISTRY_INDEX

LOG_LEVELS = ("debug", "info", "warn", "error")
#: User and group ids run from 0 to 2^32 - 2 (2^32 - 1 is -1, "no change", to chown).
MAX_ID = (1 << 32) - 1


class _PathField:
    """A path of :class:`Inputs`, given as ``str`` or any ``os.PathLike`` and kept as an absolute :class:`Path`.

    A data descriptor, so that type checkers accept what :meth:`__set__` accepts in the constructor, and the
    attribute reads as a ``Path``.
    """

    def __init__(self, default: str | None = None) -> None:
        self.default = None if default is None else Path(default)

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot = name, f"_{name}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Path: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> Path: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> Path:
        if obj is None:
            if self.default is None:  # no default: the field is required
                raise AttributeError(self.name)
            return self.default
        return cast(Path, getattr(obj, self.slot))

    def __set__(self, obj: object, value: str | os.PathLike[str]) -> None:
        object.__setattr__(obj, self.slot, _absolute(self.name, value))


class _OptionalPathField:
    """A path of :class:`Inputs` that may be ``None``, otherwise as :class:`_PathField`."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot = name, f"_{name}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> None: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> Path | None: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> Path | None:
        return None if obj is None else cast("Path | None", getattr(obj, self.slot))

    def __set__(self, obj: object, value: str | os.PathLike[str] | None) -> None:
        object.__setattr__(obj, self.slot, None if value is None else _absolute(self.name, value))


@record(kw_only=True)
class Inputs:
    """Everything one prepare run needs, resolved and absolute.

    Library callers build it directly, with keyword arguments and ``str`` or any ``os.PathLike`` for paths (made
    absolute against the working directory when the object is built): the five directories are required (a
    forgotten one must not mean the container's ``/workspace`` on a service's host). :meth:`from_environ` gives the
    command's defaults (the container's directories, a download cache, the environment's registry credentials). A
    value of the wrong type or out of range raises :class:`~preparer.errors.InvalidInputsError` naming the field,
    when the object is built, as the command refuses it.
    """

    app_dir: _PathField = _PathField()
    layers_dir: _PathField = _PathField()
    platform_dir: _PathField = _PathField()
    buildpacks_dir: _PathField = _PathField()
    #: The builder's order, read only.
    order_path: _PathField = _PathField()
    #: ``None`` means ``<app>/project.toml``, which may be missing.
    project_descriptor: _OptionalPathField = _OptionalPathField()
    platform_namespace: str | None = None
    platform_config: _OptionalPathField = _OptionalPathField()
    #: ``None`` disables the download cache.
    download_cache: _OptionalPathField = _OptionalPathField()
    prepare_report: _OptionalPathField = _OptionalPathField()
    #: Where the run's provenance goes (docs/provenance.md): an in-toto Statement whose predicate is SLSA Provenance
    #: v1, written with the run's commit (never by a dry run); ``None``: none.
    provenance: _OptionalPathField = _OptionalPathField()
    #: The provenance's ``runDetails.builder.id``: an absolute URI naming the build platform that runs the preparer.
    provenance_builder_id: str = env_default("CNB_PREPARER_PROVENANCE_BUILDER_ID")
    #: ``None`` means ``<layers>/project-metadata.toml``; see :attr:`project_metadata_path`.
    project_metadata: _OptionalPathField = _OptionalPathField()
    #: ``False`` writes no project-metadata.toml (``-project-metadata=""``).
    write_project_metadata: bool = True
    #: The platform's policy file (docs/policy.md); ``None``: no policy, everything as without one.
    policy: _OptionalPathField = _OptionalPathField()
    #: The platform's policy as its text, or parsed (:func:`preparer.parse_policy`), instead of :attr:`policy`.
    policy_data: str | bytes | Policy | None = None
    #: The directory relative paths in :attr:`policy_data` (key files, the trusted root) are read from.
    policy_base: _OptionalPathField = _OptionalPathField()
    #: The lock file (docs/lock.md): written after a run when missing, else the run is frozen to it.
    lock: _OptionalPathField = _OptionalPathField()
    #: The lock as bytes, instead of :attr:`lock` (``b""``: none yet): the run is frozen to it, nothing is written to
    #: disk, and :attr:`Report.lock <preparer.report.Report.lock>` holds the lock to keep.
    lock_data: bytes | None = None
    #: With :attr:`lock` or :attr:`lock_data`: rewrite the lock, resolving again the entries the project changed
    #: (added, edited, removed) and keeping every other as locked.
    update_lock: bool = False
    #: With :attr:`update_lock`: the entries resolved again as well, each named by buildpack id (``acme/bp``) or
    #: by key (``io.buildpacks.group[0]``); ``("all",)``: every entry.
    update_lock_names: tuple[str, ...] = ()
    #: Refuse to run unless frozen to a lock: :attr:`lock` (else ``<app>/preparer.lock``) must exist, and
    #: :attr:`update_lock` is refused.
    require_lock: bool = False
    #: The fleet's download cache repository, ``<registry>/<repository>`` (docs/fleet.md); ``None``: none.
    download_cache_repo: str | None = None
    #: ``read-write``, ``read`` or ``offline``.
    download_cache_repo_mode: str = "read-write"
    #: Seconds a cached URL may go unchecked by its origin.
    download_cache_max_age: float = 0.0
    #: containerd's ``hosts.toml`` directory of registry mirrors; ``None``: none.
    registry_hosts_dir: _OptionalPathField = _OptionalPathField()
    dry_run: bool = False
    uid: int | None = None
    gid: int | None = None
    insecure_registries: tuple[str, ...] = ()
    exec_env: str = env_default("CNB_EXEC_ENV")
    registry_index: str = DEFAULT_REGISTRY_INDEX
    #: The build's target when the platform gives none (``CNB_PREPARER_PLATFORM``, else the host's),
    #: ``os/arch[/variant]``; see :attr:`target`.
    target_platform: str = field(default_factory=host_platform)
    #: The build's target as the platform gives it (the ``CNB_TARGET_*`` variables); ``None``: from
    #: ``<layers>/analyzed.toml`` ``[run-image.target]``, else :attr:`target_platform` (docs/targets.md).
    target: Target | None = None
    #: Where a Linux target's distribution is read from when nothing else gives it.
    os_release: _PathField = _PathField(DEFAULT_OS_RELEASE)
    #: Seconds to wait between bytes from a server (and at most 10 to connect).
    http_timeout: float = float(env_default("CNB_PREPARER_HTTP_TIMEOUT"))
    #: Seconds one download may take in all (a server trickling bytes cannot hold a run, or a lock, forever).
    download_timeout: float = float(env_default("CNB_PREPARER_DOWNLOAD_TIMEOUT"))
    #: Seconds all the run's downloads and repository reads may take together (many slow servers cannot add up).
    run_timeout: float = float(env_default("CNB_PREPARER_RUN_TIMEOUT"))
    platform_api: APIVersion = SUPPORTED_PLATFORM_APIS[-1]
    #: The environment, for registry credentials (``CNB_REGISTRY_AUTH``, ``DOCKER_CONFIG``, ``HOME``); never shown.
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: The HTTP transport the run's requests go through instead of the network (:mod:`preparer.fetch.mock`'s
    #: in-memory one, for a service's own tests); the run does not close it. ``None``: the run's own.
    transport: Transport | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_types(self)  # paths are checked and made absolute as they are set (_PathField)
        _check_values(self)

    @property
    def build_dirs(self) -> tuple[tuple[str, Path], ...]:
        """The build's directories others may write (the build user, the app's author), by the name messages give
        them: a file the run writes below one is reached from it without following a link."""
        return (("<layers>", self.layers_dir), ("<platform>", self.platform_dir), ("<app>", self.app_dir))

    @property
    def project_metadata_path(self) -> Path | None:
        """Where project-metadata.toml goes, or ``None`` when it is not written."""
        if not self.write_project_metadata:
            return None
        return self.project_metadata or self.layers_dir / "project-metadata.toml"

    @property
    def checks_targets(self) -> bool:
        """Whether a buildpack that cannot run on the target is refused: from Platform API 0.12, whose detector
        skips such buildpacks (below it, a warning)."""
        return self.platform_api >= APIVersion(0, 12)

    @property
    def descriptor_path(self) -> Path:
        """The project descriptor to read: the explicit one, else ``<app>/project.toml``."""
        return self.project_descriptor or self.app_dir / "project.toml"

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str] | None = None, **overrides: Unpack[InputsOverrides]
    ) -> Inputs:
        """The inputs the command would resolve from ``environ`` (default: ``os.environ``) and no flags, with
        ``overrides`` (field names) taking precedence: the command's defaults, for library callers.

        :raises InvalidInputsError: an invalid value in the environment or in ``overrides`` (exit 3).
        """
        environ = dict(os.environ if environ is None else environ)
        unknown = sorted(set(overrides) - {f.name for f in fields(cls)})
        if unknown:
            raise InvalidInputsError("resolve inputs", f"Inputs has no field {', '.join(unknown)}")
        return replace(resolve_inputs({}, environ), **overrides)


# For type checkers only: made at run time, a TypedDict of thirty fields costs start-up its annotations' parsing.
if TYPE_CHECKING:

    class InputsOverrides(TypedDict, total=False):
        """The fields :meth:`Inputs.from_environ` takes as overrides, with their types (a misspelled one fails a type
        checker; a test keeps this in step with :class:`Inputs`). ``environ`` is :meth:`Inputs.from_environ`'s first
        argument."""

        app_dir: str | os.PathLike[str]
        layers_dir: str | os.PathLike[str]
        platform_dir: str | os.PathLike[str]
        buildpacks_dir: str | os.PathLike[str]
        order_path: str | os.PathLike[str]
        project_descriptor: str | os.PathLike[str] | None
        platform_namespace: str | None
        platform_config: str | os.PathLike[str] | None
        download_cache: str | os.PathLike[str] | None
        prepare_report: str | os.PathLike[str] | None
        provenance: str | os.PathLike[str] | None
        provenance_builder_id: str
        project_metadata: str | os.PathLike[str] | None
        write_project_metadata: bool
        policy: str | os.PathLike[str] | None
        policy_data: str | bytes | Policy | None
        policy_base: str | os.PathLike[str] | None
        lock: str | os.PathLike[str] | None
        lock_data: bytes | None
        update_lock: bool
        update_lock_names: tuple[str, ...]
        require_lock: bool
        download_cache_repo: str | None
        download_cache_repo_mode: str
        download_cache_max_age: float
        registry_hosts_dir: str | os.PathLike[str] | None
        dry_run: bool
        uid: int | None
        gid: int | None
        insecure_registries: tuple[str, ...]
        exec_env: str
        registry_index: str
        target_platform: str
        target: Target | None
        os_release: str | os.PathLike[str]
        http_timeout: float
        download_timeout: float
        run_timeout: float
        platform_api: APIVersion
        transport: Transport | None


def _check_values(inputs: Inputs) -> None:
    """Refuse what the command refuses, naming the field: a library caller gets the same checks."""

    def refuse(name: str, why: str) -> InvalidInputsError:
        return with_fields(InvalidInputsError("resolve inputs", f"Inputs.{name} {why}"), field=name)

    for name in ("http_timeout", "download_timeout", "run_timeout"):
        if not 0 < getattr(inputs, name) < float("inf"):
            raise refuse(name, "must be a positive number of seconds")
    if not 0 <= inputs.download_cache_max_age < float("inf"):
        raise refuse("download_cache_max_age", "must be a number of seconds, 0 or more")
    for name in ("uid", "gid"):
        value = getattr(inputs, name)
        if value is not None and not 0 <= value < MAX_ID:
            raise refuse(name, f"is not a user or group id (0 to {MAX_ID - 1})")
    if inputs.lock is not None and inputs.lock_data is not None:
        raise refuse("lock_data", "and Inputs.lock cannot both be given: the lock is one or the other")
    if inputs.update_lock and inputs.lock is None and inputs.lock_data is None:
        raise refuse("update_lock", "needs Inputs.lock (the lock file to rewrite) or Inputs.lock_data")
    if inputs.update_lock and inputs.require_lock:
        raise refuse(
            "update_lock", "resolves entries unfrozen, and Inputs.require_lock requires a frozen run"
        )
    if inputs.update_lock_names and not inputs.update_lock:
        raise refuse("update_lock_names", "needs Inputs.update_lock (the names are entries it moves)")
    if not all(isinstance(name, str) and name for name in inputs.update_lock_names):
        raise refuse("update_lock_names", "must hold buildpack ids or entry keys")
    if inputs.policy is not None and inputs.policy_data is not None:
        raise refuse("policy_data", "and Inputs.policy cannot both be given: the policy is one or the other")
    if inputs.policy_base is not None and inputs.policy_data is None:
        raise refuse("policy_base", "needs Inputs.policy_data (the policy whose paths it is the base of)")
    if inputs.platform_config is not None and inputs.platform_namespace is None:
        raise refuse("platform_namespace", "is needed with Inputs.platform_config (the file's namespace)")
    api_problem = platform_api_problem(inputs.platform_api)
    if api_problem is not None:
        raise refuse("platform_api", api_problem)
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in inputs.environ.items()):
        raise refuse("environ", "must map strings to strings")
    if inputs.download_cache_repo_mode not in ("read-write", "read", "offline"):
        raise refuse("download_cache_repo_mode", "must be read-write, read or offline")
    if inputs.download_cache_repo is not None:
        try:
            _repo(inputs.download_cache_repo)
        except InvalidInputsError as err:
            raise refuse("download_cache_repo", f"is not <registry>/<repository>: {err.cause}") from err
    if not re.fullmatch(r"[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?", inputs.target_platform):
        raise refuse("target_platform", "must be os/arch[/variant], e.g. linux/amd64")
    if not all(isinstance(entry, str) for entry in inputs.insecure_registries):
        raise refuse("insecure_registries", "must hold strings")
    builder_id = _builder_id_problem(inputs.provenance_builder_id)
    if builder_id is not None:
        raise refuse("provenance_builder_id", builder_id)


def _builder_id_problem(text: str) -> str | None:
    """Why ``text`` is not an absolute URI (RFC 3986 ``absolute-URI``: a scheme, ``:``, and no fragment), or ``None``.
    SLSA's ``builder.id`` is compared by the verifier as written: a relative or mistyped one would never match."""
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9\-._~:/?\[\]@!$&'()*+,;=%]+", text):
        return None
    return f"must be an absolute URI (scheme:..., no spaces, no fragment), not {text!r}"


def _absolute(name: str, value: object) -> Path:
    if isinstance(value, str | os.PathLike):
        path = os.fspath(value)
        if isinstance(path, str) and path:
            return Path(os.path.abspath(path))
    error = InvalidInputsError(
        "resolve inputs", f"Inputs.{name} must be a path (str or os.PathLike), not {type(value).__name__}"
    )
    raise with_fields(error, field=name)


def _check_types(inputs: Inputs) -> None:
    """Refuse values of the wrong type with the library's own error, before they fail somewhere deeper."""
    expected: dict[str, tuple[type, ...]] = {
        "platform_namespace": (str, type(None)),
        "dry_run": (bool,),
        "update_lock": (bool,),
        "update_lock_names": (tuple, list),
        "require_lock": (bool,),
        "uid": (int, type(None)),
        "gid": (int, type(None)),
        "insecure_registries": (tuple, list),
        "exec_env": (str,),
        "registry_index": (str,),
        "target_platform": (str,),
        "target": (Target, type(None)),
        "http_timeout": (int, float),
        "download_timeout": (int, float),
        "run_timeout": (int, float),
        "platform_api": (APIVersion,),
        "environ": (Mapping,),
        "write_project_metadata": (bool,),
        "download_cache_repo": (str, type(None)),
        "download_cache_repo_mode": (str,),
        "download_cache_max_age": (int, float),
        "lock_data": (bytes, type(None)),
        "provenance_builder_id": (str,),
    }
    for name, types in expected.items():
        value = getattr(inputs, name)
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            error = InvalidInputsError(
                "resolve inputs", f"Inputs.{name} must be {' or '.join(t.__name__ for t in types)}, not "
                f"{type(value).__name__}",
            )  # fmt: skip
            raise with_fields(error, field=name)
    policy: object = inputs.policy_data
    if policy is not None and not isinstance(policy, str | bytes):
        from preparer.policy.rules import Policy  # deferred: only a parsed policy given needs its class

        if not isinstance(policy, Policy):
            error = InvalidInputsError(
                "resolve inputs",
                f"Inputs.policy_data must be str, bytes or Policy, not {type(policy).__name__}",
            )
            raise with_fields(error, field="policy_data")
    transport: object = inputs.transport
    if transport is not None:
        from preparer.fetch.transport import Transport  # deferred: only a transport given needs its class

        if not isinstance(transport, Transport):
            error = InvalidInputsError(
                "resolve inputs",
                "Inputs.transport must be a preparer.fetch.transport.Transport (preparer.fetch.mock.mock_transport"
                f" makes one), not {type(transport).__name__}",
            )
            raise with_fields(error, field="transport")
    for name in ("insecure_registries", "update_lock_names"):
        listed: object = getattr(inputs, name)
        if isinstance(listed, list):  # a list is what callers often pass: kept as the tuple the field is
            object.__setattr__(inputs, name, tuple(listed))


def _env_bool(
    environ: Mapping[str, str], name: str, *, strict: bool = False, warn: Callable[[str], None] | None = None
) -> bool:
    """The lifecycle's boolEnv: Go's ParseBool, and anything else counts as false, with a warning (unless it is
    empty).

    :param strict: anything else is an error instead (exit 3): for a setting whose false reading writes or deletes
        (``CNB_DRY_RUN``), a value that was meant as true must not pass for false.
    :param warn: told the warning, instead of the ``preparer`` logger.
    """
    value = environ.get(name, "")
    parsed = parse_bool(value)
    if parsed is None and value:
        if strict:
            raise InvalidInputsError(
                "resolve inputs",
                f"{name}={value!r} is not a bool (use {BOOL_SPELLINGS}): read as false it would write and remove",
            )
        (warn or log.warning)(f"{name}={value!r} is not a bool (use {BOOL_SPELLINGS}); it counts as false")
    return parsed is True


def user_cache_dir(environ: Mapping[str, str]) -> Path | None:
    """The default download cache: ``$XDG_CACHE_HOME/cnb-preparer``, else ``$HOME/.cache/cnb-preparer`` (the XDG
    base directory rule, read from ``environ`` rather than the process); ``None`` when neither is set, as in a
    bare lifecycle image."""
    xdg = environ.get("XDG_CACHE_HOME", "")
    if xdg.startswith("/"):
        return Path(xdg) / "cnb-preparer"
    home = environ.get("HOME", "")
    return Path(home) / ".cache" / "cnb-preparer" if home.startswith("/") else None


def _where_it_can_be_made(cache: Path | None) -> Path | None:
    """The default download cache, unless it does not exist and cannot be made: with ``HOME=/`` (common in build
    containers) or a read-only home, a build user has no cache there, and nothing is wrong, so the run goes on
    without one and says so only at debug level. A cache that was asked for (``-download-cache``) still gets a
    warning when it cannot be used."""
    if cache is None or cache.exists():
        return cache
    existing = next(p for p in cache.parents if p.exists())
    if os.access(existing, os.W_OK | os.X_OK):
        return cache
    log.debug("No download cache: %s cannot be made (%s is not writable); -download-cache names one", cache,
              existing)  # fmt: skip
    return None


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
    cwd = cwd or Path.cwd()
    # The CLI checked it before anything else; a library caller's environment may lack it (then: the newest).
    api = environ.get("CNB_PLATFORM_API")
    platform_api = verify_platform_api(api) if api else SUPPORTED_PLATFORM_APIS[-1]
    given = _Given(flags, environ, cwd)
    log_level_of(flags, environ, check=True)
    namespace = given.text("platform-namespace") or None
    platform_config = given.path("platform-config")
    if platform_config is not None and namespace is None:
        raise InvalidInputsError("resolve inputs", "-platform-config needs -platform-namespace")
    if "download-cache" in flags or env_of("download-cache") in environ:
        download_cache = given.path("download-cache")
    else:
        download_cache = _where_it_can_be_made(user_cache_dir(environ))
    dry_run = flags["dry-run"] if "dry-run" in flags else _env_bool(environ, env_of("dry-run"), strict=True)
    return Inputs(
        app_dir=given.path("app", default("app")) or Path(default("app")),
        layers_dir=given.path("layers", default("layers")) or Path(default("layers")),
        platform_dir=given.path("platform", default("platform")) or Path(default("platform")),
        buildpacks_dir=given.path("buildpacks", default("buildpacks")) or Path(default("buildpacks")),
        order_path=given.path("order", default("order")) or Path(default("order")),
        project_descriptor=given.path("project-descriptor"),
        platform_namespace=namespace,
        platform_config=platform_config,
        download_cache=download_cache,
        prepare_report=given.path("prepare-report"),
        provenance=given.path("provenance"),
        provenance_builder_id=_provenance_builder_id(environ),
        project_metadata=given.path("project-metadata"),
        write_project_metadata=given.text("project-metadata") != "",  # given empty: off
        policy=given.path("policy"),
        **_lock_settings(given, flags, environ),
        **_fleet_settings(given),
        dry_run=bool(dry_run),
        uid=given.number("uid"),
        gid=given.number("gid"),
        insecure_registries=_insecure_registries(flags, environ),
        exec_env=environ.get("CNB_EXEC_ENV") or env_default("CNB_EXEC_ENV"),
        registry_index=given.text("buildpack-registry-index") or DEFAULT_REGISTRY_INDEX,
        target_platform=_target_platform(environ),
        target=target_from_environ(environ),
        http_timeout=_seconds(environ, "CNB_PREPARER_HTTP_TIMEOUT"),
        download_timeout=_seconds(environ, "CNB_PREPARER_DOWNLOAD_TIMEOUT"),
        run_timeout=_seconds(environ, "CNB_PREPARER_RUN_TIMEOUT"),
        platform_api=platform_api,
        environ=dict(environ),
    )


def _provenance_builder_id(environ: Mapping[str, str]) -> str:
    """``CNB_PREPARER_PROVENANCE_BUILDER_ID``, checked and named as written, else the default naming the preparer."""
    name = "CNB_PREPARER_PROVENANCE_BUILDER_ID"
    given = environ.get(name) or env_default(name)
    problem = _builder_id_problem(given)
    if problem is not None:
        raise InvalidInputsError("resolve inputs", f"{name} {problem}")
    return given


def _target_platform(environ: Mapping[str, str]) -> str:
    """``CNB_PREPARER_PLATFORM``, checked and named as written, else the host's."""
    given = environ.get(ENV_PREPARER_PLATFORM)
    if not given:
        return host_platform()
    parse_platform(given, ENV_PREPARER_PLATFORM)
    return given


def _insecure_registries(flags: Mapping[str, object], environ: Mapping[str, str]) -> tuple[str, ...]:
    listed = flags.get("insecure-registry")
    if isinstance(listed, list | tuple):
        return tuple(str(r) for r in listed)  # repeated flags append, with no comma split (as Go)
    return tuple(r.strip() for r in environ.get(env_of("insecure-registry"), "").split(",") if r.strip())


def _lock_settings(given: _Given, flags: Mapping[str, object], environ: Mapping[str, str]) -> dict[str, Any]:
    """``-lock``, ``-update-lock`` (which needs it) and ``-require-lock`` (which refuses it)."""
    if "update-lock" in flags:
        values = flags["update-lock"]
        assert isinstance(values, list)
        update, names = _update_lock([str(v) for v in values])
    else:
        env = env_of("update-lock")
        value = environ.get(env, "")
        if parse_bool(value) is not None or not value:
            update, names = parse_bool(value) is True, ()
        else:  # names, comma-separated, as CNB_INSECURE_REGISTRIES lists registries
            update, names = _update_lock([n.strip() for n in value.split(",") if n.strip()] or ["false"])
    require = (
        flags["require-lock"]
        if "require-lock" in flags
        else _env_bool(environ, env_of("require-lock"), strict=True)
    )
    lock = given.path("lock")
    if update and lock is None:
        error = InvalidInputsError("resolve inputs", "-update-lock needs -lock FILE")
        raise with_fields(error, field="update_lock")
    if update and require:
        error = InvalidInputsError(
            "resolve inputs",
            "-update-lock resolves entries unfrozen, and the platform requires a frozen run (-require-lock, "
            "CNB_PREPARER_REQUIRE_LOCK): update the lock where it is written (a run of your own, without "
            "-require-lock) and commit it with the app",
        )
        raise with_fields(error, field="update_lock")
    return {"lock": lock, "update_lock": update, "update_lock_names": names, "require_lock": bool(require)}


def _update_lock(values: list[str]) -> tuple[bool, tuple[str, ...]]:
    """``-update-lock`` given ``values`` (``true`` for each given bare): whether the lock is rewritten, and the
    entries named to move as well. A bool spelling turns it on or, false, off (forgetting the names before it);
    anything else names an entry."""
    update, names = False, []
    for value in values:
        flag = parse_bool(value)
        if flag is None:
            update = True
            names.append(value)
        else:
            update = flag
            if not flag:
                names.clear()
    return update, tuple(dict.fromkeys(names))


class _Given:
    """A flag's value when given, else its environment variable's."""

    def __init__(self, flags: Mapping[str, object], environ: Mapping[str, str], cwd: Path) -> None:
        self.flags, self.environ, self.cwd = flags, environ, cwd

    def value(self, name: str) -> object:
        if name in self.flags:
            return self.flags[name]
        env = BY_NAME[name].env
        return self.environ.get(env) if env else None

    def text(self, name: str, fallback: str | None = None) -> str | None:
        got = self.value(name)
        return fallback if got is None else str(got)

    def path(self, name: str, fallback: str | None = None) -> Path | None:
        got = self.text(name, fallback)
        return None if got is None or got == "" else Path(os.path.normpath(self.cwd / got))

    def number(self, name: str) -> int | None:
        """A user or group id: a Go integer, from 0 to 2^32 - 2 (what the kernel takes; -1 means "unchanged")."""
        got = self.value(name)
        if got is None or got == "":
            return None
        parsed = got if isinstance(got, int) else parse_int(str(got))
        if parsed is None:
            raise InvalidInputsError("resolve inputs", f"{BY_NAME[name].env}={got!r} is not an integer")
        if not 0 <= parsed < MAX_ID:
            shown = f"-{name} {got}" if name in self.flags else f"{BY_NAME[name].env}={got}"
            raise InvalidInputsError(
                "resolve inputs", f"{shown} is not a user or group id (0 to {MAX_ID - 1})"
            )
        return parsed


def _fleet_settings(given: _Given) -> dict[str, Any]:
    """The fleet download cache's fields of :class:`Inputs`, checked."""
    max_age = given.text("download-cache-max-age") or "0"
    return {
        "download_cache_repo": _repo(given.text("download-cache-repo")),
        "download_cache_repo_mode": _repo_mode(given.text("download-cache-repo-mode")),
        "download_cache_max_age": _duration(max_age, "download-cache-max-age"),
        "registry_hosts_dir": given.path("registry-hosts-dir"),
    }


def _repo(text: str | None) -> str | None:
    if not text:
        return None
    from preparer.fetch.store import parse_repo  # deferred: only runs with a repository need fetch/

    return parse_repo(text)


def _repo_mode(text: str | None) -> str:
    mode = text or "read-write"
    if mode not in ("read-write", "read", "offline"):
        raise InvalidInputsError(
            "resolve inputs", f"-download-cache-repo-mode '{mode}' is not one of read-write, read, offline"
        )
    return mode


def _duration(text: str, flag: str) -> float:
    """A Go duration (``90s``, ``1h30m``, ``0``) in seconds.

    :raises InvalidInputsError: anything else, or a negative one.
    """
    seconds = parse_duration(text)
    if seconds is None:
        raise InvalidInputsError(
            "resolve inputs",
            f"-{flag} '{text}' is not a duration such as 90s, 15m or 1h30m (units: h, m, s, ms)",
        )
    return seconds


def _seconds(environ: Mapping[str, str], name: str) -> float:
    raw = environ.get(name) or env_default(name)
    # ASCII digits and a point only: Python's float() also takes spaces, underscores and other scripts' digits.
    plain = re.fullmatch(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+", raw)
    seconds = float(raw) if plain else -1.0
    if not 0 < seconds < float("inf"):
        raise InvalidInputsError("resolve inputs", f"{name} must be a positive number of seconds")
    return seconds


def log_level_of(flags: Mapping[str, object], environ: Mapping[str, str], check: bool = False) -> str:
    """The ``-log-level`` in force, before the other inputs are resolved (for messages about them).

    :param check: refuse a name that is not a log level (exit 3) instead of passing it on.
    """
    raw = flags.get("log-level", environ.get(env_of("log-level"), default("log-level")))
    level = str(raw).lower()
    level = "warn" if level == "warning" else level
    if check and level not in LOG_LEVELS:
        raise InvalidInputsError("parse log level", f"'{level}' is not one of {', '.join(LOG_LEVELS)}")
    return level


def no_color(
    flags: Mapping[str, object], environ: Mapping[str, str], warn: Callable[[str], None] | None = None
) -> bool:
    """``-no-color``, ``CNB_NO_COLOR``, the ``NO_COLOR`` convention (any non-empty value), or ``TERM=dumb`` (a terminal
    that shows escape codes as they are).

    :param warn: told a warning about the environment (the command asks this before its logging is set up).
    """
    if "no-color" in flags:
        return bool(flags["no-color"])
    return (
        _env_bool(environ, env_of("no-color"), warn=warn)
        or bool(environ.get("NO_COLOR"))
        or environ.get("TERM") == "dumb"
    )
