"""Every setting of the command, in one table: its flag, its ``CNB_*`` variable, its type, default and help.

The Go-style parser (:mod:`preparer.goflags`), ``-h``, :func:`preparer.inputs.resolve_inputs`,
:meth:`preparer.inputs.Inputs.from_environ` and docs/usage.md's settings table all come from this table or are checked
against it by a test. Precedence is flag > environment variable > default, as in every lifecycle phase.

The shared inputs and their defaults are the creator's (platform spec §creator; lifecycle
``platform/defaults.go``); a creator flag the preparer does not use is accepted, so a creator command line works
unchanged.
"""

from __future__ import annotations

from typing import Literal

from preparer._record import record

#: ``optional`` is a flag that takes no value (as a bool) or ``=value``, and repeats: ``-update-lock``,
#: ``-update-lock=acme/bp -update-lock=io.buildpacks.group[2]`` (a Go ``flag.Value`` whose ``IsBoolFlag`` is true).
#: ``list`` repeats, each value one item; ``csv`` repeats, each value a comma-separated list of items, as pack's
#: ``StringSlice`` flags (``-buildpack a,b``; :func:`preparer.goflags.split_csv`).
Kind = Literal["string", "bool", "int", "list", "csv", "optional"]


@record
class Flag:
    """One setting: a flag (``name``), its environment variable, or both."""

    #: The flag's name without the dash; ``None`` for a setting read from the environment only.
    name: str | None
    kind: Kind
    help: str
    #: The environment variable, when there is one.
    env: str | None = None
    #: The default as ``-h`` shows it; ``None`` when unset by default.
    default: str | None = None
    #: Whether the preparer uses it (``False``: a creator flag, accepted so that its command line works).
    used: bool = True
    #: Other names of the flag (pack's short ones: ``b`` for ``buildpack``).
    aliases: tuple[str, ...] = ()


def _creator(name: str, kind: Kind = "string") -> Flag:
    return Flag(name, kind, "accepted so that a creator command line works unchanged", used=False)


#: The public buildpack registry index (``urn:cnb:registry:``, and bare ids that are not installed).
DEFAULT_REGISTRY_INDEX = "https://raw.githubusercontent.com/buildpacks/registry-index/main"

#: Every setting, in help order: the inputs the preparer uses, its own, the creator's it only accepts, and those
#: read from the environment only.
# fmt: off
FLAGS: tuple[Flag, ...] = (
    Flag("app", "string", "application directory", "CNB_APP_DIR", "/workspace"),
    Flag("buildpacks", "string", "buildpacks directory", "CNB_BUILDPACKS_DIR", "/cnb/buildpacks"),
    Flag(
        "layers", "string", "layers directory; the prepared order.toml goes here", "CNB_LAYERS_DIR", "/layers"
    ),
    Flag(
        "platform",
        "string",
        "platform directory; build env files go to <platform>/env",
        "CNB_PLATFORM_DIR",
        "/platform",
    ),
    Flag("order", "string", "the builder's order.toml (read only)", "CNB_ORDER_PATH", "/cnb/order.toml"),
    Flag(
        "system",
        "string",
        "system buildpacks the detector merges into every group, read at Platform API 0.15 and later; empty: none "
        "(docs/detector.md)",
        "CNB_SYSTEM_PATH",
        "/cnb/system.toml",
    ),
    Flag(
        "analyzed",
        "string",
        "analyzed.toml: the run image's target, read as the detector reads it (default <layers>/analyzed.toml; "
        "docs/targets.md)",
        "CNB_ANALYZED_PATH",
    ),
    Flag("uid", "int", "user that owns the files the build reads", "CNB_USER_ID"),
    Flag("gid", "int", "group that owns the files the build reads", "CNB_GROUP_ID"),
    Flag("log-level", "string", "debug, info, warn or error", "CNB_LOG_LEVEL", "info"),
    Flag("no-color", "bool", "disable colour in output (NO_COLOR too)", "CNB_NO_COLOR"),
    Flag(
        "insecure-registry",
        "list",
        "registry reached over plain http (repeatable)",
        "CNB_INSECURE_REGISTRIES",
    ),
    Flag(
        "project-descriptor",
        "string",
        "project descriptor (default <app>/project.toml)",
        "CNB_PROJECT_DESCRIPTOR_PATH",
    ),
    Flag(
        "platform-namespace",
        "string",
        "the platform's table, e.g. io.buildpacks.pack",
        "CNB_PLATFORM_NAMESPACE",
    ),
    Flag("platform-config", "string", "platform file such as pack.toml", "CNB_PLATFORM_CONFIG_PATH"),
    Flag(
        "download-cache",
        "string",
        "download cache directory; empty disables it",
        "CNB_DOWNLOAD_CACHE_DIR",
        "<user cache directory>/cnb-preparer",
    ),
    Flag(
        "download-cache-repo",
        "string",
        "an OCI repository shared as a download cache, <registry>/<repository> (docs/fleet.md)",
        "CNB_DOWNLOAD_CACHE_REPO",
    ),
    Flag(
        "download-cache-repo-mode",
        "string",
        "read-write, read or offline",
        "CNB_DOWNLOAD_CACHE_REPO_MODE",
        "read-write",
    ),
    Flag(
        "download-cache-max-age",
        "string",
        "how long a cached URL goes unchecked by its origin (Go duration)",
        "CNB_DOWNLOAD_CACHE_MAX_AGE",
        "0",
    ),
    Flag(
        "registry-hosts-dir",
        "string",
        "registry mirrors, containerd's <dir>/<registry>/hosts.toml (docs/fleet.md)",
        "CNB_REGISTRY_HOSTS_DIR",
    ),
    Flag("prepare-report", "string", "write a TOML report of what was applied", "CNB_PREPARE_REPORT_PATH"),
    Flag(
        "provenance",
        "string",
        "write the run's SLSA v1 provenance (an in-toto Statement, JSON) with its commit (docs/provenance.md)",
        "CNB_PREPARER_PROVENANCE",
    ),
    Flag(
        "project-metadata",
        "string",
        "where the source came from, for the image label; empty disables it",
        "CNB_PROJECT_METADATA_PATH",
        "<layers>/project-metadata.toml",
    ),
    Flag("dry-run", "bool", "resolve and print the plan; change nothing", "CNB_DRY_RUN"),
    Flag(
        "disable-system-buildpacks",
        "bool",
        "no system buildpacks for this build, as pack's --disable-system-buildpacks (give the detector -system \"\" "
        "too)",
        "CNB_PREPARER_DISABLE_SYSTEM_BUILDPACKS",
    ),
    Flag(
        "telemetry",
        "bool",
        "append the run's OpenTelemetry spans to <layers>/tracing/lifecycle/prepare.jsonl (docs/telemetry.md)",
        "CNB_PREPARER_TELEMETRY",
    ),
    Flag("policy", "string", "the platform's policy file (docs/policy.md)", "CNB_PREPARER_POLICY"),
    Flag(
        "lock",
        "string",
        "lock file: written after a run when missing, else every buildpack is frozen to it (docs/lock.md)",
        "CNB_PREPARER_LOCK",
    ),
    Flag(
        "update-lock",
        "optional",
        "with -lock: rewrite the lock, resolving again what the project changed; =<id> or =<entry> moves that "
        "one too (repeatable), =all moves every entry",
        "CNB_PREPARER_UPDATE_LOCK",
    ),
    Flag(
        "require-lock",
        "bool",
        "refuse to run unless frozen to a lock: -lock, else <app>/preparer.lock, must exist (docs/lock.md)",
        "CNB_PREPARER_REQUIRE_LOCK",
    ),
    Flag(
        "buildpack",
        "csv",
        "a buildpack of the group, which the flags replace (the descriptor's and the platform file's): <id>[@<version>], "
        "a path (from <app>), an http(s) or file URL, docker://<image>, urn:cnb:builder:<id>, urn:cnb:registry:<id> "
        "(repeatable, or comma-separated as pack's; -b for short)",
        "CNB_PREPARER_BUILDPACKS",
        aliases=("b",),
    ),
    Flag(
        "pre-buildpack",
        "list",
        "a buildpack before the group, or before each group of the builder's order; the flags replace the "
        "descriptor's pre group (repeatable)",
        "CNB_PREPARER_PRE_BUILDPACKS",
    ),
    Flag(
        "post-buildpack",
        "list",
        "a buildpack after the group, or after each group of the builder's order; the flags replace the "
        "descriptor's post group (repeatable)",
        "CNB_PREPARER_POST_BUILDPACKS",
    ),
    Flag(
        "env",
        "list",
        "a build env variable, NAME=VALUE, or NAME for the preparer's own value; over the descriptor's and the env "
        "files' (repeatable; -e for short)",
        aliases=("e",),
    ),
    Flag(
        "env-file",
        "list",
        "a file of build env variables, a NAME=VALUE or NAME line each (pack's format); over the descriptor's, "
        "under -env (repeatable)",
        "CNB_PREPARER_ENV_FILES",
    ),
    Flag(
        "buildpack-registry-index",
        "string",
        "buildpack registry index URL",
        "CNB_BUILDPACK_REGISTRY_INDEX",
        DEFAULT_REGISTRY_INDEX,
    ),
    Flag("version", "bool", "print the version and exit"),
    Flag(
        "extensions",
        "string",
        "extensions directory (accepted)",
        "CNB_EXTENSIONS_DIR",
        "/cnb/extensions",
        False,
    ),
    _creator("build-config"),
    _creator("cache-dir"),
    _creator("cache-image"),
    _creator("daemon", "bool"),
    _creator("group"),
    _creator("launch-cache"),
    _creator("launcher"),
    _creator("launcher-sbom"),
    _creator("layout", "bool"),
    _creator("layout-dir"),
    _creator("parallel", "bool"),
    _creator("plan"),
    _creator("previous-image"),
    _creator("process-type"),
    _creator("report"),
    _creator("run"),
    _creator("run-image"),
    _creator("skip-restore", "bool"),
    _creator("stack"),
    _creator("tag", "list"),
    Flag(None, "string", "the Platform API, checked before anything else", "CNB_PLATFORM_API"),
    Flag(
        None,
        "string",
        "the build's execution environment: production, test, or letters, digits, . and - (docs/detector.md)",
        "CNB_EXEC_ENV",
        "production",
    ),
    Flag(
        None,
        "string",
        "the provenance's runDetails.builder.id: an absolute URI naming the build platform",
        "CNB_PREPARER_PROVENANCE_BUILDER_ID",
        "urn:cnb:preparer",
    ),
    Flag(
        None,
        "string",
        "the build's target when neither analyzed.toml nor CNB_TARGET_* give one, and the machine's architecture "
        "the detector fills in, os/arch[/variant] (docs/targets.md)",
        "CNB_PREPARER_PLATFORM",
        "the host's",
    ),
    Flag(
        None,
        "string",
        "a W3C traceparent: the run's telemetry continues its trace, and is written (docs/telemetry.md)",
        "CNB_OTEL_TRACEPARENT",
    ),
    Flag(None, "string", "the build's target os, without analyzed.toml (docs/targets.md)", "CNB_TARGET_OS"),
    Flag(None, "string", "the build's target architecture (needs CNB_TARGET_OS)", "CNB_TARGET_ARCH"),
    Flag(None, "string", "the build's target architecture variant (needs CNB_TARGET_ARCH)", "CNB_TARGET_ARCH_VARIANT"),
    Flag(None, "string", "the build's distribution, else /etc/os-release's ID", "CNB_TARGET_DISTRO_NAME"),
    Flag(None, "string", "the distribution's version (needs CNB_TARGET_DISTRO_NAME)", "CNB_TARGET_DISTRO_VERSION"),
    Flag(
        None,
        "string",
        "seconds to wait between bytes from a server (at most 10 to connect)",
        "CNB_PREPARER_HTTP_TIMEOUT",
        "60",
    ),
    Flag(
        None,
        "string",
        "seconds one download may take in all, however steadily bytes arrive",
        "CNB_PREPARER_DOWNLOAD_TIMEOUT",
        "1800",
    ),
    Flag(
        None,
        "string",
        "seconds all the run's downloads and repository reads may take together",
        "CNB_PREPARER_RUN_TIMEOUT",
        "3600",
    ),
)
# fmt: on

#: The settings that have a flag, by flag name (and by each other name it has).
BY_NAME = {name: flag for flag in FLAGS if flag.name is not None for name in (flag.name, *flag.aliases)}
#: Every setting that has an environment variable, by variable.
BY_ENV = {flag.env: flag for flag in FLAGS if flag.env is not None}


def default(name: str) -> str:
    """The default of the flag ``name``, which must have one."""
    value = BY_NAME[name].default
    assert value is not None, name
    return value


def env_default(env: str) -> str:
    """The default of the setting read from the environment variable ``env``, which must have one."""
    value = BY_ENV[env].default
    assert value is not None, env
    return value


def env_of(name: str) -> str:
    """The environment variable of the flag ``name``, which must have one."""
    value = BY_NAME[name].env
    assert value is not None, name
    return value
