"""How the command's settings resolve into the fields of :class:`~preparer.inputs.Inputs`: flag > environment
variable > default (:mod:`preparer.flags` holds the one table of them), as the lifecycle's
``platform/resolve_inputs.go`` resolves its record. Paths that default to a place inside another input
(``<app>/project.toml``) are filled in after the others are known, as the lifecycle's ``UpdatePlaceholderPaths``
does. The command's own settings read before the others (the log level, colour) are read here too.

The record, and what it refuses whoever builds it, is :mod:`preparer.inputs`'s; this module imports none of it, so
that :meth:`Inputs.from_environ <preparer.inputs.Inputs.from_environ>` can resolve the command's defaults.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from preparer._logger import log
from preparer.api import SUPPORTED_PLATFORM_APIS, verify_platform_api
from preparer.errors import InvalidInputsError, with_fields
from preparer.execenv import ENV_EXEC_ENV, exec_env_problem
from preparer.flags import BY_NAME, DEFAULT_REGISTRY_INDEX, default, env_default, env_of
from preparer.goflags import (
    BOOL_SPELLINGS,
    CsvError,
    parse_bool,
    parse_duration,
    parse_int,
    shown_list,
    split_csv,
    split_warning,
)
from preparer.target import ENV_PREPARER_PLATFORM, host_platform, parse_platform, target_from_environ

if TYPE_CHECKING:
    from preparer.api import APIVersion
    from preparer.fetch.transport import Transport
    from preparer.policy.rules import Policy
    from preparer.target import Target
    from preparer.telemetry import Tracer

LOG_LEVELS = ("debug", "info", "warn", "error")
#: User and group ids run from 0 to 2^32 - 2 (2^32 - 1 is -1, "no change", to chown).
MAX_ID = (1 << 32) - 1


# For type checkers only: made at run time, a TypedDict of thirty fields costs start-up its annotations' parsing.
if TYPE_CHECKING:

    class InputsOverrides(TypedDict, total=False):
        """The fields of :class:`~preparer.inputs.Inputs` with the types they are given as: what
        :meth:`Inputs.from_environ <preparer.inputs.Inputs.from_environ>` takes as overrides (a misspelled one fails a
        type checker; a test keeps this in step with the record), and what :func:`resolve_fields` resolves. ``environ``
        is ``from_environ``'s first argument."""

        app_dir: str | os.PathLike[str]
        layers_dir: str | os.PathLike[str]
        platform_dir: str | os.PathLike[str]
        buildpacks_dir: str | os.PathLike[str]
        order_path: str | os.PathLike[str]
        system_path: str | os.PathLike[str] | None
        disable_system_buildpacks: bool
        analyzed: str | os.PathLike[str] | None
        project_descriptor: str | os.PathLike[str] | None
        descriptor_data: str | bytes | Mapping[str, Any] | None
        platform_namespace: str | None
        platform_config: str | os.PathLike[str] | None
        buildpacks: Sequence[str]
        pre_buildpacks: Sequence[str]
        post_buildpacks: Sequence[str]
        build_env: Sequence[str] | Mapping[str, str]
        env_files: Sequence[str | os.PathLike[str]]
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
        telemetry: bool
        traceparent: str | None
        tracer: Tracer | None


def builder_id_problem(text: str) -> str | None:
    """Why ``text`` is not an absolute URI (RFC 3986 ``absolute-URI``: a scheme, ``:``, and no fragment), or ``None``.
    SLSA's ``builder.id`` is compared by the verifier as written: a relative or mistyped one would never match."""
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*:[A-Za-z0-9\-._~:/?\[\]@!$&'()*+,;=%]+", text):
        return None
    return f"must be an absolute URI (scheme:..., no spaces, no fragment), not {text!r}"


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


def resolve_fields(
    flags: Mapping[str, object], environ: Mapping[str, str], cwd: Path | None = None
) -> InputsOverrides:
    """Combine the flags given, the environment and the defaults: flag > environment > default, into the fields of
    :class:`~preparer.inputs.Inputs` but ``environ`` (:func:`preparer.inputs.resolve_inputs` makes the record).

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
    namespace, platform_config = given.text("platform-namespace") or None, given.path("platform-config")
    if platform_config is not None and namespace is None:
        raise InvalidInputsError("resolve inputs", "-platform-config needs -platform-namespace")
    if "download-cache" in flags or env_of("download-cache") in environ:
        download_cache = given.path("download-cache")
    else:
        download_cache = _where_it_can_be_made(user_cache_dir(environ))
    dry_run = flags["dry-run"] if "dry-run" in flags else _env_bool(environ, env_of("dry-run"), strict=True)
    return {
        "app_dir": given.path("app", default("app")) or Path(default("app")),
        "layers_dir": given.path("layers", default("layers")) or Path(default("layers")),
        "platform_dir": given.path("platform", default("platform")) or Path(default("platform")),
        "buildpacks_dir": given.path("buildpacks", default("buildpacks")) or Path(default("buildpacks")),
        "order_path": given.path("order", default("order")) or Path(default("order")),
        **_system_settings(given, flags, environ),
        "analyzed": _analyzed(given),
        "project_descriptor": given.path("project-descriptor"),
        "platform_namespace": namespace,
        "platform_config": platform_config,
        "download_cache": download_cache,
        "prepare_report": given.path("prepare-report"),
        "provenance": given.path("provenance"),
        "provenance_builder_id": _provenance_builder_id(environ),
        "project_metadata": given.path("project-metadata"),
        "write_project_metadata": given.text("project-metadata") != "",  # given empty: off
        "policy": given.path("policy"),
        **_list_settings(given, flags, environ),
        **_lock_settings(given, flags, environ),
        **_fleet_settings(given),
        "dry_run": bool(dry_run),
        "uid": given.number("uid"),
        "gid": given.number("gid"),
        "insecure_registries": _insecure_registries(flags, environ),
        "exec_env": _exec_env(environ),
        "registry_index": given.text("buildpack-registry-index") or DEFAULT_REGISTRY_INDEX,
        "target_platform": _target_platform(environ),
        "target": target_from_environ(environ),
        **_timeouts(environ),
        "platform_api": platform_api,
        **_telemetry(flags, environ),
    }


def _timeouts(environ: Mapping[str, str]) -> InputsOverrides:
    """The seconds a run waits: between bytes, for one download, for all of them."""
    return {
        "http_timeout": _seconds(environ, "CNB_PREPARER_HTTP_TIMEOUT"),
        "download_timeout": _seconds(environ, "CNB_PREPARER_DOWNLOAD_TIMEOUT"),
        "run_timeout": _seconds(environ, "CNB_PREPARER_RUN_TIMEOUT"),
    }


def _system_settings(
    given: _Given, flags: Mapping[str, object], environ: Mapping[str, str]
) -> InputsOverrides:
    """``-system`` (an empty flag: none; an empty ``CNB_SYSTEM_PATH``: the default, as the lifecycle reads them) and
    ``-disable-system-buildpacks``."""
    name = "disable-system-buildpacks"
    disabled = flags[name] if name in flags else _env_bool(environ, env_of(name))
    path = given.path("system") if "system" in flags else given.path("system") or Path(default("system"))
    return {"system_path": path, "disable_system_buildpacks": bool(disabled)}


def _exec_env(environ: Mapping[str, str]) -> str:
    """``CNB_EXEC_ENV``, checked as pack checks it and named as written; unset or empty, ``production`` (the
    lifecycle's default)."""
    value = environ.get(ENV_EXEC_ENV) or env_default(ENV_EXEC_ENV)
    problem = exec_env_problem(value)
    if problem is not None:
        raise with_fields(InvalidInputsError("resolve inputs", problem), field="exec_env")
    return value


def _telemetry(flags: Mapping[str, object], environ: Mapping[str, str]) -> InputsOverrides:
    """``-telemetry``, else ``CNB_PREPARER_TELEMETRY`` (the lifecycle's boolEnv); ``CNB_OTEL_TRACEPARENT``."""
    asked = flags["telemetry"] if "telemetry" in flags else _env_bool(environ, env_of("telemetry"))
    return {"telemetry": bool(asked), "traceparent": environ.get("CNB_OTEL_TRACEPARENT") or None}


def _provenance_builder_id(environ: Mapping[str, str]) -> str:
    """``CNB_PREPARER_PROVENANCE_BUILDER_ID``, checked and named as written, else the default naming the preparer."""
    name = "CNB_PREPARER_PROVENANCE_BUILDER_ID"
    given = environ.get(name)
    if not given:
        return env_default(name)  # the preparer's own, an absolute URI (tests hold it to builder_id_problem)
    problem = builder_id_problem(given)
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


def _list_settings(given: _Given, flags: Mapping[str, object], environ: Mapping[str, str]) -> InputsOverrides:
    """The lists (``-buildpack``, ``-pre-buildpack``, ``-post-buildpack``, ``-env``, ``-env-file``): the flags given
    (``-buildpack`` values already split at their commas), else each list's variable, one comma-separated list (an
    item with a comma or a quote in double quotes, as ``-buildpack`` takes one); ``-env`` has none. Env files are
    paths from the working directory, as every path flag's.

    :raises InvalidInputsError: a list's variable that is no list, an empty ``-env-file`` (exit 3).
    """

    def listed(flag: str) -> tuple[str, ...]:
        values = flags.get(flag)
        if isinstance(values, list):
            return tuple(str(v) for v in values)
        return () if flag == "env" else _env_list(environ, flag)

    files = listed("env-file")
    for index, name in enumerate(files):
        if not name:
            error = InvalidInputsError(
                "resolve inputs", f"-env-file[{index}] is empty: name a file, or leave the flag out"
            )
            raise with_fields(error, field="env_files")
    return {
        "buildpacks": listed("buildpack"),
        "pre_buildpacks": listed("pre-buildpack"),
        "post_buildpacks": listed("post-buildpack"),
        "build_env": listed("env"),
        "env_files": tuple(Path(os.path.normpath(given.cwd / name)) for name in files),
    }


def _env_list(environ: Mapping[str, str], flag: str) -> tuple[str, ...]:
    """The items of the variable of the list ``flag`` (``CNB_PREPARER_BUILDPACKS``): one comma-separated list, read as
    ``-buildpack`` reads a value (:func:`preparer.goflags.split_csv`); none when it is unset or empty.

    :raises InvalidInputsError: it is no such list (exit 3).
    """
    name = env_of(flag)
    value = environ.get(name, "")
    if not value:
        return ()
    try:
        items = split_csv(value)
    except CsvError as err:
        raise InvalidInputsError(
            "resolve inputs",
            f"{name}={shown_list(value)!r} is not a comma-separated list: {err} (an item with a comma or a quote is written in "
            "double quotes, a quote doubled)",
        ) from None
    if (
        "" in items
    ):  # "$BASE,$EXTRA" with EXTRA unset: named here, where the variable is known, not as a flag's
        what = "a file" if flag == "env-file" else "a buildpack"
        error = InvalidInputsError(
            "resolve inputs",
            f"{name}={shown_list(value)!r}: item {items.index('') + 1} is empty: name {what} in each item "
            "(comma-separated), or leave the variable unset",
        )
        raise with_fields(
            error, field=flag.replace("-", "_") + "s"
        )  # the Inputs field: pre_buildpacks, env_files
    warning = split_warning(f"{name}=", value, items)
    if warning is not None:
        log.warning("%s", warning)
    return tuple(items)


def _lock_settings(given: _Given, flags: Mapping[str, object], environ: Mapping[str, str]) -> InputsOverrides:
    """``-lock``, ``-update-lock`` (which needs it) and ``-require-lock`` (which refuses it)."""
    if "update-lock" in flags:
        values = flags["update-lock"]
        assert isinstance(values, list)
        if "" in values:
            error = InvalidInputsError(
                "resolve inputs",
                "-update-lock= gives no value: write -update-lock (the entries the project changed are resolved "
                "again), -update-lock=<buildpack id or entry> (that one as well), or -update-lock=all",
            )
            raise with_fields(error, field="update_lock")
        # Names, comma-separated as the variable takes them (an id or an entry never holds a comma).
        update, names = _update_lock([n.strip() for v in values for n in str(v).split(",") if n.strip()])
    else:
        env = env_of("update-lock")
        value = environ.get(env, "")
        if value.strip().lower() in _NOT_GO_BOOLS:
            error = InvalidInputsError(
                "resolve inputs",
                f"{env}={value} is neither a bool (true, false, 1, 0) nor the name of an entry: set {env}=true to "
                "update the lock, or name the entries to move (acme/bp,io.buildpacks.group[0])",
            )
            raise with_fields(error, field="update_lock")
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


def _analyzed(given: _Given) -> Path | None:
    """``-analyzed`` (else ``CNB_ANALYZED_PATH``, empty: unset, as the lifecycle's ``envOrDefault``).

    :raises InvalidInputsError: the flag is given empty (exit 3): the detector then reads no analyzed.toml at all
        (the lifecycle keeps an empty path as it is), which ``<layers>/analyzed.toml`` would contradict.
    """
    if given.flags.get("analyzed") == "":
        raise InvalidInputsError(
            "resolve inputs",
            "-analyzed is empty: the detector then reads no analyzed.toml, not even <layers>/analyzed.toml; "
            "name the file, or leave the flag out (CNB_ANALYZED_PATH, else <layers>/analyzed.toml)",
        )
    return given.path("analyzed")


#: Words read as bools elsewhere that Go's ``strconv.ParseBool`` does not take: said as such, not taken for the
#: name of an entry.
_NOT_GO_BOOLS = frozenset({"yes", "no", "y", "n", "on", "off", "enable", "enabled", "disable", "disabled"})


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


def _fleet_settings(given: _Given) -> InputsOverrides:
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
    raw = environ.get(name)
    if not raw:
        return float(env_default(name))
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
