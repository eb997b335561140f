"""The preparer's inputs: the creator's, plus the preparer's own, as one frozen record, :class:`Inputs`, and what it
refuses whoever builds it (a value of the wrong type or out of range), as the lifecycle's
``platform/lifecycle_inputs.go`` keeps its record.

How the command's flags, the environment and the defaults resolve into it (flag > environment variable > default)
is :mod:`preparer.resolve`'s: :func:`resolve_inputs` for the command, :meth:`Inputs.from_environ` for library
callers.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast, overload

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from preparer.fetch.transport import Transport
    from preparer.policy.rules import Policy
    from preparer.resolve import InputsOverrides
    from preparer.telemetry import Tracer

from preparer._frozen import frozen
from preparer._record import field, record
from preparer.api import SUPPORTED_PLATFORM_APIS, APIVersion, platform_api_problem
from preparer.errors import InvalidInputsError, with_fields
from preparer.execenv import exec_env_problem
from preparer.flags import DEFAULT_REGISTRY_INDEX, env_default
from preparer.resolve import MAX_ID, builder_id_problem, resolve_fields
from preparer.target import (
    DEFAULT_OS_RELEASE,
    Target,
    host_platform,
)

#: Kept under this name for callers of earlier versions.
DEFAULT_BUILDPACK_REGISTRY_INDEX = DEFAULT_REGISTRY_INDEX


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


def _refused(name: str, why: str) -> InvalidInputsError:
    said = (
        f"Inputs.{name}{why}" if why.startswith("[") else f"Inputs.{name} {why}"
    )  # an item: Inputs.buildpacks[0]
    return with_fields(InvalidInputsError("resolve inputs", said), field=name)


def _strings(name: str, value: object) -> tuple[str, ...]:
    """``value`` as the tuple of strings a list field keeps: a list or tuple of ``str`` (a lone ``str`` is refused:
    it would be read as its characters)."""
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
        raise _refused(name, f"must be a list or tuple of strings, not {type(value).__name__}")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise _refused(name, f"[{index}] must be a string, not {type(item).__name__}")
    return tuple(value)


class _StringsField:
    """A list of strings of :class:`Inputs` (``buildpacks``), given as a list or tuple and kept as a tuple."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot = name, f"_{name}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> tuple[str, ...]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> tuple[str, ...]: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> tuple[str, ...]:
        return () if obj is None else cast("tuple[str, ...]", getattr(obj, self.slot))

    def __set__(self, obj: object, value: Sequence[str]) -> None:
        object.__setattr__(obj, self.slot, _strings(self.name, value))


class _EnvField(_StringsField):
    """The build env of :class:`Inputs` (``build_env``): ``NAME=VALUE`` or ``NAME`` strings, as ``-env`` takes them,
    or a mapping of names to values (kept as ``NAME=VALUE`` strings, in its order)."""

    def __set__(self, obj: object, value: Sequence[str] | Mapping[str, str]) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                if not isinstance(key, str) or not isinstance(item, str):
                    raise _refused(self.name, "must map strings to strings")
                if "=" in key:
                    raise _refused(self.name, f"has the name {key!r}, which holds '=': a name cannot")
            value = [f"{key}={item}" for key, item in value.items()]
        object.__setattr__(obj, self.slot, _strings(self.name, value))


class _PathsField:
    """Paths of :class:`Inputs` (``env_files``), each given as ``str`` or any ``os.PathLike``, kept as a tuple of
    absolute :class:`Path`."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot = name, f"_{name}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> tuple[Path, ...]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> tuple[Path, ...]: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> tuple[Path, ...]:
        return () if obj is None else cast("tuple[Path, ...]", getattr(obj, self.slot))

    def __set__(self, obj: object, value: Sequence[str | os.PathLike[str]]) -> None:
        if isinstance(value, str | bytes) or not isinstance(value, list | tuple):
            raise _refused(self.name, f"must be a list or tuple of paths, not {type(value).__name__}")
        for index, item in enumerate(value):
            if not isinstance(item, str | os.PathLike) or not os.fspath(item):
                raise _refused(self.name, f"[{index}] must be a path (str or os.PathLike), not {item!r}")
        object.__setattr__(obj, self.slot, tuple(Path(os.path.abspath(item)) for item in value))


class _DescriptorDataField:
    """The project descriptor given as data (``descriptor_data``): its TOML text (``str`` or ``bytes``), kept as
    given, or its tables (a mapping, as a TOML parser gives them), kept as a copy: a caller's later edit of its
    mapping changes no ``Inputs`` already made."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot = name, f"_{name}"

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> str | bytes | dict[str, Any] | None: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> str | bytes | dict[str, Any] | None: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> str | bytes | dict[str, Any] | None:
        return None if obj is None else cast("str | bytes | dict[str, Any] | None", getattr(obj, self.slot))

    def __set__(self, obj: object, value: str | bytes | Mapping[str, Any] | None) -> None:
        if isinstance(value, Mapping):
            import copy  # deferred: only descriptors given as tables are copied

            value = copy.deepcopy(dict(value))
        elif value is not None and not isinstance(value, str | bytes):
            raise _refused(
                self.name,
                f"must be the descriptor's TOML text or its tables (a mapping), not {type(value).__name__}",
            )
        object.__setattr__(obj, self.slot, value)


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
    #: The platform's system buildpacks (``-system``; docs/detector.md), read at Platform API 0.15 and later (below
    #: it, one given is a warning); ``None``: none. The command's default is ``/cnb/system.toml``.
    system_path: _OptionalPathField = _OptionalPathField()
    #: No system buildpacks for this build (``-disable-system-buildpacks``, as pack's flag); the detector must be
    #: given ``-system ""`` too, or it merges them all the same.
    disable_system_buildpacks: bool = False
    #: analyzed.toml, whose ``[run-image.target]`` is the build's target (as the detector reads it); ``None``:
    #: ``<layers>/analyzed.toml``. See :attr:`analyzed_path`.
    analyzed: _OptionalPathField = _OptionalPathField()
    #: ``None`` means ``<app>/project.toml``, which may be missing.
    project_descriptor: _OptionalPathField = _OptionalPathField()
    #: The project descriptor itself, instead of reading :attr:`project_descriptor`: its TOML text, or its tables
    #: (a mapping, as a TOML parser gives them; copied). Read with a file's checks; :attr:`descriptor_path` names it
    #: in messages, the report and the provenance (which records the sha256 of the text read), and relative paths
    #: in it are from that path's directory. ``None``: the file.
    descriptor_data: _DescriptorDataField = _DescriptorDataField()
    platform_namespace: str | None = None
    platform_config: _OptionalPathField = _OptionalPathField()
    #: The group, replacing the descriptor's and the platform file's (``-buildpack``): each a ``uri`` of any form
    #: (``heroku/nodejs@3.0.0``, ``docker://...``, a path from ``<app>``, a URL) or the id of a buildpack in
    #: ``<buildpacks>`` (docs/usage.md, "Lists"). Empty: the configuration's group.
    buildpacks: _StringsField = _StringsField()
    #: The pre and post groups, replacing the descriptor's (``-pre-buildpack``, ``-post-buildpack``).
    pre_buildpacks: _StringsField = _StringsField()
    post_buildpacks: _StringsField = _StringsField()
    #: Build env variables over the descriptor's and the env files' (``-env``): ``NAME=VALUE``, or ``NAME`` for the
    #: value :attr:`environ` has; a mapping of names to values is taken in its order.
    build_env: _EnvField = _EnvField()
    #: Files of build env variables (``-env-file``, pack's format), over the descriptor's and under
    #: :attr:`build_env`, in order.
    env_files: _PathsField = _PathsField()
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
    #: The build's target as the platform states it (the ``CNB_TARGET_*`` variables, each part it leaves empty
    #: :attr:`target_platform`'s), for a run without analyzed.toml: the detector reads that file and nothing
    #: else, so the file's target, when there is one, is the build's (docs/targets.md).
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
    #: The environment, for registry credentials (``CNB_REGISTRY_AUTH``, ``DOCKER_CONFIG``, ``HOME``), and the
    #: proxies and CA certificates when :attr:`transport` names none; never shown. A read-only copy of the mapping
    #: given, taken when the record is built (a :class:`~preparer._frozen.FrozenMap`).
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: The HTTP transport the run's requests go through instead of the network (:mod:`preparer.fetch.mock`'s
    #: in-memory one, for a service's own tests); the run does not close it. ``None``: the run's own.
    transport: Transport | None = field(default=None, repr=False, compare=False)
    #: Append the run's telemetry, OpenTelemetry spans, to ``<layers>/tracing/lifecycle/prepare.jsonl``
    #: (docs/telemetry.md); a :attr:`traceparent` asks for it too.
    telemetry: bool = False
    #: The W3C traceparent of the trace the run's spans continue (``CNB_OTEL_TRACEPARENT``); ``None``: a new trace.
    traceparent: str | None = None
    #: A caller's OpenTelemetry tracer: the run's spans go to it, the first a child of the caller's current span,
    #: and no file is written (docs/telemetry.md). ``None``: OpenTelemetry is not imported.
    tracer: Tracer | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check_types(self)  # paths are checked and made absolute as they are set (_PathField)
        # A copy, taken and checked once: the caller's dict may change for its next build, this record may not.
        object.__setattr__(self, "environ", frozen(self.environ))
        _check_telemetry(self)
        _check_values(self)

    @property
    def build_dirs(self) -> tuple[tuple[str, Path], ...]:
        """The build's directories others may write (the build user, the app's author), by the name messages give
        them: a file the run writes below one is reached from it without following a link."""
        return (("<layers>", self.layers_dir), ("<platform>", self.platform_dir), ("<app>", self.app_dir))

    @property
    def analyzed_path(self) -> Path:
        """analyzed.toml: :attr:`analyzed`, else ``<layers>/analyzed.toml``."""
        return self.analyzed or self.layers_dir / "analyzed.toml"

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
    if inputs.download_cache_repo:
        from preparer.fetch.store import parse_repo  # deferred: only runs with a repository need fetch/

        try:
            parse_repo(inputs.download_cache_repo)
        except InvalidInputsError as err:
            raise refuse("download_cache_repo", f"is not <registry>/<repository>: {err.cause}") from err
    if not re.fullmatch(r"[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?", inputs.target_platform):
        raise refuse("target_platform", "must be os/arch[/variant], e.g. linux/amd64")
    if not all(isinstance(entry, str) for entry in inputs.insecure_registries):
        raise refuse("insecure_registries", "must hold strings")
    if exec_env_problem(inputs.exec_env) is not None:
        raise refuse(
            "exec_env", "must be production, test, or only letters, digits, . and - (as pack checks it)"
        )
    builder_id = builder_id_problem(inputs.provenance_builder_id)
    if builder_id is not None:
        raise refuse("provenance_builder_id", builder_id)


def _absolute(name: str, value: object) -> Path:
    if isinstance(value, str | os.PathLike):
        path = os.fspath(value)
        if isinstance(path, str) and path:
            return Path(os.path.abspath(path))
    said = repr(value) if value == "" else type(value).__name__  # "not str" of an empty one says nothing
    error = InvalidInputsError(
        "resolve inputs", f"Inputs.{name} must be a path (str or os.PathLike), not {said}"
    )
    raise with_fields(error, field=name)


#: The type of each field :func:`_check_types` checks (a path field checks its own as it is set).
_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "platform_namespace": (str, type(None)),
    "dry_run": (bool,),
    "disable_system_buildpacks": (bool,),
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


def _check_types(inputs: Inputs) -> None:
    """Refuse values of the wrong type with the library's own error, before they fail somewhere deeper."""
    for name, types in _FIELD_TYPES.items():
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


def _check_telemetry(inputs: Inputs) -> None:
    """The telemetry's fields: a tracer given is one (``opentelemetry.trace.Tracer``'s ``start_span``)."""
    for name, types in (("telemetry", (bool,)), ("traceparent", (str, type(None)))):
        if not isinstance(getattr(inputs, name), types):
            shown = " or ".join(t.__name__ for t in types)
            error = InvalidInputsError(
                "resolve inputs", f"Inputs.{name} must be {shown}, not {type(getattr(inputs, name)).__name__}"
            )
            raise with_fields(error, field=name)
    tracer: object = inputs.tracer
    if tracer is not None and not callable(getattr(tracer, "start_span", None)):
        error = InvalidInputsError(
            "resolve inputs",
            f"Inputs.tracer must be an OpenTelemetry tracer (with start_span), not {type(tracer).__name__}",
        )
        raise with_fields(error, field="tracer")


def resolve_inputs(
    flags: Mapping[str, object], environ: Mapping[str, str], cwd: Path | None = None
) -> Inputs:
    """The command's inputs: the flags given, the environment and the defaults, flag > environment > default
    (:func:`preparer.resolve.resolve_fields`).

    :param flags: values of the flags that were given, by flag name (``app``, ``log-level``, ...).
    :param environ: the process environment.
    :param cwd: relative paths are made absolute against it.
    :raises InvalidInputsError: well-formed but invalid values (exit 3).
    :raises PlatformAPIError: ``CNB_PLATFORM_API`` is set but unparsable or unsupported (exit 11).
    """
    return Inputs(**resolve_fields(flags, environ, cwd), environ=dict(environ))
