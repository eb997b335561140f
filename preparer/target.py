"""The build's target: the os, architecture and distribution its buildpacks must run on, where that came from, and
which buildpacks can (spec buildpack.md §Targets, platform.md §Target Data; lifecycle ``platform/target_data.go``).

The target comes from, first to last: the ``CNB_TARGET_*`` variables, ``<layers>/analyzed.toml``
``[run-image.target]`` (an analyzer ran first), ``CNB_PREPARER_PLATFORM``, the host. A distribution not given so
is read from ``/etc/os-release``, as the lifecycle reads it. Architectures are compared as the OCI image spec and
containerd's ``platforms`` package normalise them: ``arm64`` is ``arm64/v8``, ``amd64`` is ``amd64/v1``, ``arm`` is
``arm/v7``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from preparer import telemetry
from preparer._record import record
from preparer.errors import InvalidInputsError, TargetRefused, with_fields

if TYPE_CHECKING:  # the inputs import this module: buildpack.toml's reader is not needed to build them
    from preparer.files.buildpack import BuildpackDescriptor, BuildpackTarget

#: The variables the lifecycle gives buildpacks for the build's target (spec buildpack.md §Targets); a platform
#: that sets them for the preparer gives it the target.
ENV_TARGET_OS = "CNB_TARGET_OS"
ENV_TARGET_ARCH = "CNB_TARGET_ARCH"
ENV_TARGET_ARCH_VARIANT = "CNB_TARGET_ARCH_VARIANT"
ENV_TARGET_DISTRO_NAME = "CNB_TARGET_DISTRO_NAME"
ENV_TARGET_DISTRO_VERSION = "CNB_TARGET_DISTRO_VERSION"
#: The preparer's own setting, ``os/arch[/variant]``: the target when neither the variables nor analyzed.toml
#: give one.
ENV_PREPARER_PLATFORM = "CNB_PREPARER_PLATFORM"
#: Where the distribution is read from when nothing else gives it (freedesktop os-release: ``ID``, ``VERSION_ID``).
DEFAULT_OS_RELEASE = "/etc/os-release"

_OS = re.compile(r"[a-z0-9]+")
_ARCH = re.compile(r"[a-z0-9_]+")
_VARIANT = re.compile(r"[a-z0-9.]+")
#: The variant an architecture has when none is written (OCI image spec §Platform Variants; containerd).
_DEFAULT_VARIANT = {"amd64": "v1", "arm64": "v8", "arm": "v7"}


def host_platform() -> str:
    """``linux/<arch>`` of this machine, in OCI's names (``amd64``, ``arm64``)."""
    import os  # deferred: only the default needs it

    machine = os.uname().machine.lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    return f"linux/{arch}"


@record
class Target:
    """The build's target: ``os/arch[/variant]``, a distribution when known, and the settings that gave them."""

    os: str
    arch: str
    variant: str = ""
    distro_name: str = ""
    distro_version: str = ""
    #: The setting that gave ``os``, ``arch`` and ``variant``, as the user knows it (``CNB_PREPARER_PLATFORM``,
    #: ``/layers/analyzed.toml [run-image.target]``, ``the host``).
    source: str = "the host"
    #: Where the distribution came from; empty without one.
    distro_source: str = ""

    @property
    def platform(self) -> str:
        """``os/arch[/variant]``, as given."""
        return "/".join(p for p in (self.os, self.arch, self.variant) if p)

    @property
    def distro(self) -> str:
        """``name version`` of the distribution, or empty."""
        return " ".join(p for p in (self.distro_name, self.distro_version) if p)


def normalize(arch: str, variant: str) -> tuple[str, str]:
    """``(arch, variant)`` in OCI's names, the variant filled in where an architecture has a default (containerd's
    ``platforms.Normalize``, with the default variant written out rather than dropped, so that ``arm64`` and
    ``arm64/v8`` compare equal)."""
    arch, variant = arch.lower(), variant.lower()
    arch = {"x86_64": "amd64", "x86-64": "amd64", "aarch64": "arm64", "i386": "386"}.get(arch, arch)
    if arch in ("armhf", "armel"):
        arch, variant = "arm", "v7" if arch == "armhf" else "v6"
    if arch == "arm64" and variant in ("8", "v8.0"):
        variant = "v8"
    elif arch == "arm64" and variant in ("9", "9.0", "v9.0"):
        variant = "v9"
    elif arch == "arm" and variant in ("5", "6", "7", "8"):
        variant = "v" + variant
    return arch, variant or _DEFAULT_VARIANT.get(arch, "")


def parse_platform(text: str, setting: str) -> tuple[str, str, str]:
    """``(os, arch, variant)`` of ``os/arch[/variant]``.

    :param setting: how the user wrote the setting (``CNB_PREPARER_PLATFORM``), named when ``text`` is invalid.
    :raises InvalidInputsError: anything else, upper case included (exit 3).
    """
    parts = text.split("/")
    if not 2 <= len(parts) <= 3 or not _OS.fullmatch(parts[0]) or not _ARCH.fullmatch(parts[1]) or (
        len(parts) == 3 and not _VARIANT.fullmatch(parts[2])
    ):  # fmt: skip
        raise InvalidInputsError(
            "resolve inputs",
            f"{setting}={text!r} is not os/arch[/variant] in lower case, such as linux/amd64 or linux/arm64/v8",
        )
    return parts[0], parts[1], parts[2] if len(parts) == 3 else ""


def _checked(value: str, pattern: re.Pattern[str], setting: str) -> str:
    if not pattern.fullmatch(value):
        raise InvalidInputsError(
            "resolve inputs", f"{setting}={value!r} is not valid (lower case letters and digits)"
        )
    return value


def target_from_environ(environ: Mapping[str, str]) -> Target | None:
    """The target the ``CNB_TARGET_*`` variables give, or ``None`` when none of ``CNB_TARGET_OS``,
    ``CNB_TARGET_ARCH`` and ``CNB_TARGET_ARCH_VARIANT`` is set. Pure.

    :raises InvalidInputsError: a value that is not one, or an os without an architecture (exit 3).
    """
    names = (ENV_TARGET_OS, ENV_TARGET_ARCH, ENV_TARGET_ARCH_VARIANT)
    given = [name for name in names if environ.get(name)]
    if not given:
        return None
    missing = [name for name in names[:2] if not environ.get(name)]
    if missing:
        raise InvalidInputsError(
            "resolve inputs",
            f"{', '.join(given)} is set without {' and '.join(missing)}: the target needs both",
        )
    name, version = environ.get(ENV_TARGET_DISTRO_NAME, ""), environ.get(ENV_TARGET_DISTRO_VERSION, "")
    return Target(
        _checked(environ[ENV_TARGET_OS], _OS, ENV_TARGET_OS),
        _checked(environ[ENV_TARGET_ARCH], _ARCH, ENV_TARGET_ARCH),
        _checked(environ.get(ENV_TARGET_ARCH_VARIANT, ""), _VARIANT, ENV_TARGET_ARCH_VARIANT)
        if environ.get(ENV_TARGET_ARCH_VARIANT)
        else "",
        name,
        version,
        source=", ".join(given),
        distro_source=ENV_TARGET_DISTRO_NAME if name else "",
    )


def platform_source(target_platform: str, environ: Mapping[str, str], host: str) -> str:
    """The setting that gave ``target_platform``: ``CNB_PREPARER_PLATFORM``, the host, or a library caller's own
    ``Inputs.target_platform``."""
    if environ.get(ENV_PREPARER_PLATFORM) == target_platform:
        return ENV_PREPARER_PLATFORM
    return "the host" if target_platform == host else "Inputs.target_platform"


def parse_analyzed(doc: Mapping[str, object], shown: str) -> Target | None:
    """The target of analyzed.toml's ``[run-image.target]`` (``arch-variant``, the lifecycle's key, or
    ``variant``, the spec's), or ``None`` when it has none (an analyzer below Platform API 0.12). Pure.

    :param shown: how messages name the file.
    :raises InvalidInputsError: a target without os or arch, or with a value that is not one (exit 3).
    """
    run_image = doc.get("run-image")
    table = run_image.get("target") if isinstance(run_image, dict) else None
    if not isinstance(table, dict):
        return None
    where = f"{shown} [run-image.target]"
    values = {}
    for key in ("os", "arch", "arch-variant", "variant"):
        value = table.get(key, "")
        if not isinstance(value, str):
            raise InvalidInputsError("read analyzed.toml", f"{where} {key} is not a string")
        values[key] = value
    if not values["os"] or not values["arch"]:
        raise InvalidInputsError(
            "read analyzed.toml", f"{where} has no {'os' if not values['os'] else 'arch'}"
        )
    variant = values["arch-variant"] or values["variant"]
    distro = table.get("distro")
    distro = distro if isinstance(distro, dict) else {}
    name, version = distro.get("name", ""), distro.get("version", "")
    return Target(
        _checked(values["os"], _OS, f"{where} os"),
        _checked(values["arch"], _ARCH, f"{where} arch"),
        _checked(variant, _VARIANT, f"{where} arch-variant") if variant else "",
        name if isinstance(name, str) else "",
        version if isinstance(version, str) else "",
        source=where,
        distro_source=where if isinstance(name, str) and name else "",
    )


def parse_os_release(text: str) -> tuple[str, str]:
    """``(ID, VERSION_ID)`` of an os-release file (freedesktop.org ``os-release``; quotes removed), either empty
    when it is not there. Pure."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and not key.startswith("#"):
            values[key] = value.strip().strip("\"'")
    return values.get("ID", ""), values.get("VERSION_ID", "")


def read_os_release(path: Path) -> tuple[str, str]:
    """:func:`parse_os_release` of ``path``; ``("", "")`` when it cannot be read (macOS has none)."""
    try:
        return parse_os_release(path.read_text(errors="replace"))
    except OSError:
        return "", ""


def build_target(
    given: Target | None, target_platform: str, platform_source_: str, layers_dir: Path, os_release: Path
) -> Target:
    """The build's target: ``given`` (the ``CNB_TARGET_*`` variables), else ``<layers>/analyzed.toml``
    ``[run-image.target]``, else ``target_platform``; a Linux target's distribution, when none of them gives one,
    from ``os_release``.

    :raises InvalidInputsError: analyzed.toml cannot be read, or its target is invalid (exit 3).
    """
    target = given
    if target is None:
        analyzed = layers_dir / "analyzed.toml"
        if analyzed.is_file():
            from preparer.files.toml import read_toml  # deferred: most runs have no analyzed.toml

            doc = read_toml(analyzed, "analyzed.toml", action="read analyzed.toml").table
            target = parse_analyzed(doc, str(analyzed))
    if target is None:
        os_, arch, variant = parse_platform(target_platform, platform_source_)
        target = Target(os_, arch, variant, source=platform_source_)
    if not target.distro_name and target.os == "linux":
        name, version = read_os_release(os_release)
        if name:
            return Target(
                target.os, target.arch, target.variant, name, version, target.source, str(os_release)
            )
    return target


def runs_on(descriptor: BuildpackDescriptor, has_file: Callable[[str], bool]) -> tuple[BuildpackTarget, ...]:
    """The targets a component buildpack runs on: its ``[[targets]]``; without them, its ``[[stacks]]`` as the
    lifecycle maps them (``io.buildpacks.stacks.bionic`` is linux/amd64 ubuntu 18.04, any other id anything);
    without either, its ``bin/`` (``build`` is linux, ``build.bat`` or ``build.exe`` windows). Empty: anything.

    :param has_file: whether the buildpack has a file at a path relative to its directory.
    """
    from preparer.files.buildpack import BuildpackTarget  # deferred, as the module's imports

    if descriptor.targets:
        return descriptor.targets
    if descriptor.stacks:
        return tuple(
            BuildpackTarget("linux", "amd64", "", (("ubuntu", "18.04"),))
            if stack == "io.buildpacks.stacks.bionic"
            else BuildpackTarget()
            for stack in descriptor.stacks
        )
    found = []
    if has_file("bin/build"):
        found.append(BuildpackTarget("linux"))
    if has_file("bin/build.bat") or has_file("bin/build.exe"):
        found.append(BuildpackTarget("windows"))
    return tuple(found)


def describe_runs_on(descriptor: BuildpackDescriptor, has_file: Callable[[str], bool]) -> str:
    """What a buildpack runs on, for people: its ``[[targets]]``, else what :func:`runs_on` finds and where from
    (``from bin/: linux``); a composite's is its groups'."""
    if descriptor.order:
        return "those of its groups' buildpacks (a composite)"
    declared = runs_on(descriptor, has_file)
    shown = ", ".join(d.shown for d in declared) or "any"
    if descriptor.targets:
        return shown
    if descriptor.stacks:
        return f"from [[stacks]]: {shown}"
    return f"from bin/: {shown}" if declared else "any: it declares none"


def matches_platform(declared: BuildpackTarget, target: Target) -> bool:
    """Whether ``declared`` names ``target``'s os, architecture and variant (a field left empty on either side
    matches anything, as in the lifecycle)."""
    if declared.os and target.os and declared.os.lower() != target.os:
        return False
    want_arch, want_variant = normalize(target.arch, target.variant)
    if declared.arch and target.arch and normalize(declared.arch, "")[0] != want_arch:
        return False
    if declared.variant and want_variant:
        return normalize(declared.arch or target.arch, declared.variant)[1] == want_variant
    return True


def same_platform(one: str, other: str) -> bool:
    """Whether two ``os/arch[/variant]`` name the same platform once normalised (``linux/arm64`` is
    ``linux/arm64/v8``)."""
    (os_one, _, rest_one), (os_other, _, rest_other) = one.partition("/"), other.partition("/")
    arch_one, _, variant_one = rest_one.partition("/")
    arch_other, _, variant_other = rest_other.partition("/")
    return os_one == os_other and normalize(arch_one, variant_one) == normalize(arch_other, variant_other)


def matches(declared: BuildpackTarget, target: Target) -> bool:
    """Whether ``declared`` names ``target``: its platform, and one of its distributions when it lists some and the
    target's distribution is known."""
    if not matches_platform(declared, target):
        return False
    if not declared.distros or not target.distro_name:
        return True
    return any(
        (not name or name == target.distro_name)
        and (not version or not target.distro_version or version == target.distro_version)
        for name, version in declared.distros
    )


#: Finds a buildpack the run has (fetched, or in ``<buildpacks>``): its descriptor and its ``has_file``.
Lookup = Callable[[str, str], "tuple[BuildpackDescriptor, Callable[[str], bool]] | None"]


def why_not(
    descriptor: BuildpackDescriptor,
    has_file: Callable[[str], bool],
    target: Target,
    lookup: Lookup,
    warnings: list[str],
    seen: frozenset[str] = frozenset(),
) -> str | None:
    """Why ``descriptor`` cannot run on ``target``, or ``None`` when it can.

    A composite (with an ``[[order]]``) can when one of its groups has every non-optional entry able to, as the
    detector tries its groups in turn; an optional one that cannot is told to ``warnings``. A buildpack the run
    does not have is left to the checks that look for it.
    """
    if descriptor.order:
        if descriptor.ref in seen:
            return None
        failures = []
        for number, group in enumerate(descriptor.order, 1):
            said: list[str] = []
            failure = None
            for element in group:
                found = lookup(element.id, element.version)
                if found is None:
                    continue
                why = why_not(*found, target, lookup, said, seen | {descriptor.ref})
                if why is not None and element.optional:
                    said.append(
                        f"{descriptor.ref}: its optional {element.ref} cannot run on this build: {why}"
                    )
                elif why is not None:
                    failure = f"in group {number}, {element.ref}: {why}"
                    break
            if failure is None:
                warnings.extend(said)
                return None
            failures.append(failure)
        return f"none of its groups can run on this build ({'; '.join(failures)})"
    declared = runs_on(descriptor, has_file)
    if not declared or any(matches(d, target) for d in declared):
        return None
    build = f"{target.platform} ({target.source})"
    if any(matches_platform(d, target) for d in declared):
        build = f"{target.platform}, {target.distro} ({target.source}; the distribution from {target.distro_source})"
    return f"it runs on {', '.join(d.shown for d in declared)}; this build is {build}"


def target_attributes(target: Target) -> dict[str, str | None]:
    """What the run's telemetry says of the build's ``target`` (docs/telemetry.md): its parts, never where they were
    read."""
    return {
        "cnb.target.os": target.os,
        "cnb.target.arch": target.arch,
        "cnb.target.arch_variant": target.variant or None,
        "cnb.target.distro.name": target.distro_name or None,
        "cnb.target.distro.version": target.distro_version or None,
    }


@telemetry.step("cnb.target.check", lambda said: {"cnb.target.warnings": len(said)})
def check_targets(
    tops: Sequence[tuple[BuildpackDescriptor, Callable[[str], bool]]],
    target: Target,
    lookup: Lookup,
    *,
    enforced: bool,
) -> list[str]:
    """Every buildpack the order names (``tops``), checked against ``target``; returns the warnings.

    :param enforced: the Platform API is 0.12 or later, whose detector skips what cannot run on the target; below
        it, a buildpack that cannot is a warning.
    :raises TargetRefused: the first that cannot (exit 1).
    """
    warnings: list[str] = []
    for descriptor, has_file in tops:
        why = why_not(descriptor, has_file, target, lookup, warnings)
        if why is None:
            continue
        if not enforced:
            warnings.append(
                f"{descriptor.ref} cannot run on this build: {why} (the detector of Platform API below 0.12 "
                "does not check targets)"
            )
            continue
        raise with_fields(
            TargetRefused(f"install {descriptor.ref}", why),
            buildpack=descriptor.ref,
            target=target.platform,
            source=target.source,
        )
    return warnings


def directory_files(root: Path) -> Callable[[str], bool]:
    """``has_file`` for a buildpack unpacked at ``root``."""
    return lambda name: (root / name).is_file()


def installed(
    buildpacks_dir: Path, bp_id: str, version: str
) -> tuple[BuildpackDescriptor, Callable[[str], bool]] | None:
    """A buildpack in ``<buildpacks>``, as :data:`Lookup` finds it, or ``None`` when it is not there.

    :raises BuilderError: its ``buildpack.toml`` cannot be read (exit 1).
    """
    from preparer.files.buildpack import (  # deferred, as the module's imports
        buildpack_dir,
        read_buildpack_toml,
    )

    root = buildpack_dir(buildpacks_dir, bp_id, version)
    if not (root / "buildpack.toml").is_file():
        return None
    return read_buildpack_toml(root / "buildpack.toml", builder=True), directory_files(root)
