"""The build's target: the os, architecture and distribution its buildpacks must run on, where that came from, and
which buildpacks can (spec buildpack.md §Targets, platform.md §Target Data; lifecycle ``platform/target_data.go``).

The detector reads the target from analyzed.toml (``-analyzed``, ``CNB_ANALYZED_PATH``, ``<layers>/analyzed.toml``)
``[run-image.target]`` and, when that has no distribution table, fills in ``linux``, its own architecture and
``/etc/os-release``; so does the preparer. Without analyzed.toml (a run before the analyzer), the target is the
platform's statement: the ``CNB_TARGET_*`` variables, each on its own, over ``CNB_PREPARER_PLATFORM`` or the host's,
and a Linux target's distribution from ``/etc/os-release``. Architectures are compared as the OCI image spec and
containerd's ``platforms`` package normalise them: ``arm64`` is ``arm64/v8``, ``amd64`` is ``amd64/v1``, ``arm``
is ``arm/v7``.
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
#: that sets them for the preparer states the target of a run that has no analyzed.toml.
ENV_TARGET_OS = "CNB_TARGET_OS"
ENV_TARGET_ARCH = "CNB_TARGET_ARCH"
ENV_TARGET_ARCH_VARIANT = "CNB_TARGET_ARCH_VARIANT"
ENV_TARGET_DISTRO_NAME = "CNB_TARGET_DISTRO_NAME"
ENV_TARGET_DISTRO_VERSION = "CNB_TARGET_DISTRO_VERSION"
#: The preparer's own setting, ``os/arch[/variant]``: the target when neither analyzed.toml nor the variables
#: give one, and the machine's architecture the detector fills in.
ENV_PREPARER_PLATFORM = "CNB_PREPARER_PLATFORM"
#: Where the distribution is read from when nothing else gives it (freedesktop os-release: ``ID``, ``VERSION_ID``).
DEFAULT_OS_RELEASE = "/etc/os-release"

# Compiled by re's cache when a setting is checked: most runs set none.
_OS = r"[a-z0-9]+"
_ARCH = r"[a-z0-9_]+"
_VARIANT = r"[a-z0-9.]+"
#: os-release's ``ID`` and ``VERSION_ID``: lower case letters, digits, ``.``, ``_`` and ``-``.
_DISTRO = r"[a-z0-9._-]+"
#: The variant an architecture has when none is written (OCI image spec §Platform Variants; containerd).
_DEFAULT_VARIANT = {"amd64": "v1", "arm64": "v8", "arm": "v7"}
#: Each variable that needs another to mean something, with the one it needs and why.
_NEEDS = (
    (ENV_TARGET_ARCH, ENV_TARGET_OS, "an architecture needs its os"),
    (ENV_TARGET_ARCH_VARIANT, ENV_TARGET_ARCH, "a variant needs its architecture"),
    (ENV_TARGET_DISTRO_VERSION, ENV_TARGET_DISTRO_NAME, "a version needs its distribution's name"),
)


def host_platform() -> str:
    """``linux/<arch>`` of this machine, in OCI's names (``amd64``, ``arm64``)."""
    import os  # deferred: only the default needs it

    machine = os.uname().machine.lower()
    arch = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)
    return f"linux/{arch}"


@record
class Target:
    """The build's target: ``os/arch[/variant]``, a distribution when known, and the settings that gave them.

    ``os`` and ``arch`` are empty only where the detector leaves them so (an analyzed.toml target with a
    distribution table and no os or arch), and an empty field matches anything; ``machine`` then says what images
    are pulled for."""

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
    #: ``os/arch[/variant]`` of the machine the build runs on (``CNB_PREPARER_PLATFORM`` or the host's): what
    #: :attr:`platform` takes where ``os`` or ``arch`` is empty.
    machine: str = ""

    @property
    def platform(self) -> str:
        """``os/arch[/variant]``: what an image index is resolved to and a lock is made for; a part the target
        leaves empty is the machine's."""
        if (not self.os or not self.arch) and self.machine:
            os_, arch, variant = [*self.machine.split("/"), ""][:3]
            if self.arch:
                arch, variant = self.arch, self.variant
            return "/".join(p for p in (self.os or os_, arch, variant) if p)
        return "/".join(p for p in (self.os, self.arch, self.variant) if p)

    @property
    def shown(self) -> str:
        """``os/arch[/variant]`` as compared, for people: a part left empty is ``any os`` or ``any
        architecture``."""
        if self.os and self.arch:
            return "/".join(p for p in (self.os, self.arch, self.variant) if p)
        parts = (self.os or "any os", self.arch or "any architecture", self.variant)
        return "/".join(p for p in parts if p)

    @property
    def distro(self) -> str:
        """``name version`` of the distribution, or empty; a version without a name is any distribution's."""
        if not self.distro_name and self.distro_version:
            return f"version {self.distro_version} of any distribution"
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
    if not 2 <= len(parts) <= 3 or not re.fullmatch(_OS, parts[0]) or not re.fullmatch(_ARCH, parts[1]) or (
        len(parts) == 3 and not re.fullmatch(_VARIANT, parts[2])
    ):  # fmt: skip
        raise InvalidInputsError(
            "resolve inputs",
            f"{setting}={text!r} is not os/arch[/variant] in lower case, such as linux/amd64 or linux/arm64/v8",
        )
    return parts[0], parts[1], parts[2] if len(parts) == 3 else ""


def _checked(value: str, pattern: str, setting: str, what: str = "lower case letters and digits") -> str:
    if not re.fullmatch(pattern, value):
        raise InvalidInputsError("resolve inputs", f"{setting}={value!r} is not valid ({what})")
    return value


def target_from_environ(environ: Mapping[str, str]) -> Target | None:
    """What the ``CNB_TARGET_*`` variables state, each read on its own, or ``None`` when none is set. A part they
    leave out is empty (:func:`build_target` takes it from ``CNB_PREPARER_PLATFORM`` or the host). Pure.

    :raises InvalidInputsError: a value that is not one, or a variable set without the one it needs (an
        architecture without its os, a variant without its architecture, a distribution's version without its
        name) (exit 3).
    """
    names = (ENV_TARGET_OS, ENV_TARGET_ARCH, ENV_TARGET_ARCH_VARIANT, ENV_TARGET_DISTRO_NAME,
             ENV_TARGET_DISTRO_VERSION)  # fmt: skip
    given = {name: environ[name] for name in names if environ.get(name)}
    if not given:
        return None
    for name, needed, why in _NEEDS:
        if name in given and needed not in given:
            empty = " (it is set, but empty)" if needed in environ else ""
            raise InvalidInputsError("resolve inputs", f"{name} is set without {needed}{empty}: {why}")
    distro = "lower case letters, digits, '.', '_' and '-', as os-release's ID and VERSION_ID"
    for name, value in given.items():
        if name in (ENV_TARGET_DISTRO_NAME, ENV_TARGET_DISTRO_VERSION):
            _checked(value, _DISTRO, name, distro)
        else:
            _checked(value, {ENV_TARGET_OS: _OS, ENV_TARGET_ARCH: _ARCH}.get(name, _VARIANT), name)
    return Target(
        given.get(ENV_TARGET_OS, ""),
        given.get(ENV_TARGET_ARCH, ""),
        given.get(ENV_TARGET_ARCH_VARIANT, ""),
        given.get(ENV_TARGET_DISTRO_NAME, ""),
        given.get(ENV_TARGET_DISTRO_VERSION, ""),
        source=", ".join(name for name in names[:3] if name in given),
        distro_source=", ".join(name for name in names[3:] if name in given),
    )


def platform_source(target_platform: str, environ: Mapping[str, str], host: str) -> str:
    """The setting that gave ``target_platform``: ``CNB_PREPARER_PLATFORM``, the host, or a library caller's own
    ``Inputs.target_platform``."""
    if environ.get(ENV_PREPARER_PLATFORM) == target_platform:
        return ENV_PREPARER_PLATFORM
    return "the host" if target_platform == host else "Inputs.target_platform"


@record
class RunImageTarget:
    """What analyzed.toml's ``[run-image.target]`` says, as written: each part empty when left out."""

    #: How messages name the file.
    file: str
    os: str = ""
    arch: str = ""
    variant: str = ""
    #: ``[run-image.target.distro]`` ``(name, version)``; ``None`` without the table.
    distro: tuple[str, str] | None = None
    #: Whether the file has the table at all (an analyzer below Platform API 0.12 writes none).
    given: bool = True

    @property
    def where(self) -> str:
        """How messages name the table: ``/layers/analyzed.toml [run-image.target]``."""
        return f"{self.file} [run-image.target]"


def parse_analyzed(doc: Mapping[str, object], shown: str) -> RunImageTarget:
    """analyzed.toml's ``[run-image.target]``: ``os``, ``arch``, ``arch-variant`` (the lifecycle's key; ``variant``,
    the spec's, too) and ``[run-image.target.distro]`` ``name``, ``version``, as the lifecycle's
    ``files.TargetMetadata`` holds them. Pure.

    :param shown: how messages name the file.
    :raises InvalidInputsError: a value that is not a string, or not one (exit 3).
    """
    run_image = doc.get("run-image")
    table = run_image.get("target") if isinstance(run_image, dict) else None
    where = f"{shown} [run-image.target]"
    if table is None:
        return RunImageTarget(shown, given=False)
    if not isinstance(table, dict):
        raise InvalidInputsError("read analyzed.toml", f"{shown} run-image.target is not a table")
    values = {}
    for key in ("os", "arch", "arch-variant", "variant"):
        value = table.get(key, "")
        if not isinstance(value, str):
            raise InvalidInputsError("read analyzed.toml", f"{where} {key} is not a string")
        values[key] = value
    variant = values["arch-variant"] or values["variant"]
    distro = None
    if "distro" in table:
        found = table["distro"]
        if not isinstance(found, dict):
            raise InvalidInputsError("read analyzed.toml", f"{where} distro is not a table")
        name, version = found.get("name", ""), found.get("version", "")
        if not isinstance(name, str) or not isinstance(version, str):
            raise InvalidInputsError(
                "read analyzed.toml", f"{where} distro's name and version must be strings"
            )
        distro = (name, version)
    return RunImageTarget(
        shown,
        _checked(values["os"], _OS, f"{where} os") if values["os"] else "",
        _checked(values["arch"], _ARCH, f"{where} arch") if values["arch"] else "",
        _checked(variant, _VARIANT, f"{where} arch-variant") if variant else "",
        distro,
    )


def parse_os_release(text: str) -> tuple[str, str]:
    """``(ID, VERSION_ID)`` of an os-release file, either empty when it is not there, read as the lifecycle reads
    it (``fsutil.GetInfo``): a line of exactly one ``=``, the key as written, the value without the quotes and
    spaces around it. Pure."""
    name = version = ""
    for line in text.split("\n"):
        parts = line.split("=")
        if len(parts) != 2:
            continue
        if parts[0] == "ID":
            name = parts[1].strip('" ')
        elif parts[0] == "VERSION_ID":
            version = parts[1].strip('" ')
        if name and version:
            break
    return name, version


def read_os_release(path: Path) -> tuple[str, str]:
    """:func:`parse_os_release` of ``path``; ``("", "")`` when it cannot be read (macOS has none) or is empty."""
    try:
        return parse_os_release(path.read_text(errors="replace"))
    except OSError:
        return "", ""


def from_run_image(stated: RunImageTarget, machine: str, machine_source: str, os_release: Path) -> Target:
    """The target the detector takes from analyzed.toml (``platform.GetTargetOSFromFileSystem``): as stated when
    it has a distribution table, even an empty one (a part left empty matches anything); else an os left empty is
    ``linux``, an architecture left empty the machine's (the detector's own), and the distribution
    ``os_release``'s."""
    if stated.distro is not None:
        name, version = stated.distro
        where = stated.where if name or version else ""
        return Target(stated.os, stated.arch, stated.variant, name, version, stated.where, where, machine)
    filled = []
    os_, arch = stated.os, stated.arch
    if not os_:
        os_ = "linux"
        filled.append("os linux")
    if not arch:
        arch = machine.split("/")[1]
        filled.append(f"arch {arch} ({machine_source})")
    source = stated.where if stated.given else f"{stated.file}, which has no [run-image.target]"
    if filled:
        source += f"; {' and '.join(filled)} as the detector fills them in"
    name, version = read_os_release(os_release)
    shown = str(os_release) if name or version else ""
    return Target(os_, arch, stated.variant, name, version, source, shown, machine)


def from_statement(given: Target | None, machine: str, machine_source: str, os_release: Path) -> Target:
    """The target of a run without analyzed.toml: the ``CNB_TARGET_*`` statement (``given``), each part it leaves
    out the machine's (``CNB_PREPARER_PLATFORM`` or the host's); a Linux target's distribution, when it gives none,
    ``os_release``'s."""
    os_, arch, variant = parse_platform(machine, machine_source)
    source = machine_source
    if given is not None and given.os:
        if given.arch:
            arch, variant, source = given.arch, given.variant, given.source
        else:
            source = f"{given.source}; the architecture from {machine_source}"
        os_ = given.os
    if given is not None and given.distro_name:
        return Target(
            os_, arch, variant, given.distro_name, given.distro_version, source, given.distro_source
        )
    name, version = read_os_release(os_release) if os_ == "linux" else ("", "")
    return Target(os_, arch, variant, name, version, source, str(os_release) if name or version else "")


def build_target(
    given: Target | None,
    target_platform: str,
    platform_source_: str,
    analyzed: Path,
    os_release: Path,
    *,
    named: bool = False,
    warnings: list[str] | None = None,
) -> Target:
    """The build's target: analyzed.toml's, as the detector reads it (:func:`from_run_image`), when the file is
    there; else ``given`` (the ``CNB_TARGET_*`` statement) over ``target_platform`` (:func:`from_statement`).

    :param analyzed: analyzed.toml's path (``-analyzed``, ``CNB_ANALYZED_PATH``, ``<layers>/analyzed.toml``).
    :param named: the platform named ``analyzed`` (a flag, a variable): its absence is told to ``warnings``, as
        the detector warns of it.
    :param warnings: told each setting analyzed.toml overrides (``given``, and ``target_platform`` when a setting
        gave it), naming both.
    :raises InvalidInputsError: analyzed.toml cannot be read, or a target is invalid (exit 3).
    """
    said = warnings if warnings is not None else []
    if _there(analyzed):
        from preparer.files.toml import read_toml  # deferred: most runs have no analyzed.toml

        doc = read_toml(analyzed, "analyzed.toml", action="read analyzed.toml").table
        stated = parse_analyzed(doc, str(analyzed))
        target = from_run_image(stated, target_platform, platform_source_, os_release)
        said += overridden(given, target_platform, platform_source_, target, str(analyzed))
        return target
    if named:
        said.append(
            f"no analyzed.toml at {analyzed} (-analyzed, CNB_ANALYZED_PATH): the detector will warn of it too, "
            "and the target is the platform's (CNB_TARGET_*, CNB_PREPARER_PLATFORM, the host)"
        )
    return from_statement(given, target_platform, platform_source_, os_release)


def _there(analyzed: Path) -> bool:
    """Whether analyzed.toml is to be read: unless opening it would say it does not exist, as the detector takes
    it for absent only then (a link loop or a path through a file fail it); a link to nothing is read, and refused."""
    try:
        analyzed.stat()
    except FileNotFoundError:
        return analyzed.is_symlink()
    except OSError:
        return True  # the read says why
    return True


def overridden(
    given: Target | None, machine: str, machine_source: str, target: Target, analyzed: str
) -> list[str]:
    """A warning for each setting that says otherwise than analyzed.toml's ``target``, which the detector reads
    and they do not: a ``CNB_TARGET_*`` variable, and ``CNB_PREPARER_PLATFORM`` (or ``Inputs.target_platform``)."""
    found = []
    said = " is not the target the detector reads: {} ({}); the preparer checks the build against that, as the detector will"
    if given is not None:
        arch, variant = normalize(target.arch, target.variant) if target.arch else ("", target.variant)
        parts = (
            (ENV_TARGET_OS, given.os, target.os, given.os == target.os, target.source),
            (ENV_TARGET_ARCH, given.arch, target.arch, normalize(given.arch, "")[0] == arch, target.source),
            (ENV_TARGET_ARCH_VARIANT, given.variant, target.variant,
             normalize(given.arch or target.arch, given.variant)[1] == variant, target.source),
            (ENV_TARGET_DISTRO_NAME, given.distro_name, target.distro_name, given.distro_name == target.distro_name,
             target.distro_source or analyzed),
            (ENV_TARGET_DISTRO_VERSION, given.distro_version, target.distro_version,
             given.distro_version == target.distro_version, target.distro_source or analyzed),
        )  # fmt: skip
        for name, value, taken, same, source in parts:
            if value and not same:
                found.append(f"{name}={value}" + said.format(taken or "none, which matches any", source))
    if (
        machine_source != "the host"
        and target.os
        and target.arch
        and not same_platform(machine, target.platform)
    ):
        found.append(f"{machine_source}={machine}" + said.format(target.platform, target.source))
    return found


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


def inferred_from(descriptor: BuildpackDescriptor, has_file: Callable[[str], bool]) -> str:
    """What :func:`runs_on` inferred a buildpack's targets from when it declares no ``[[targets]]``: its
    ``[[stacks]]`` ids, or the files of ``bin/`` that decided; empty when it declares them (or nothing)."""
    if descriptor.targets:
        return ""
    if descriptor.stacks:
        return f"[[stacks]] {', '.join(descriptor.stacks)}"
    return ", ".join(name for name in ("bin/build", "bin/build.bat", "bin/build.exe") if has_file(name))


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
    target's distribution is known (a name or a version left empty on either side matches any, as in the
    lifecycle's ``TargetSatisfiedForBuild``)."""
    if not matches_platform(declared, target):
        return False
    name, version = target.distro_name, target.distro_version
    if not declared.distros or not (name or version):
        return True
    return any(
        (not want or not name or want == name) and (not at or not version or at == version)
        for want, at in declared.distros
    )


#: Finds a buildpack the run has (fetched, or in ``<buildpacks>``): its descriptor and its ``has_file``.
Lookup = Callable[[str, str], "tuple[BuildpackDescriptor, Callable[[str], bool]] | None"]


#: How deep composites may nest in one another (the top one is 1) and how many buildpacks one check may look up:
#: more is refused, never walked (real composites nest two or three deep and name tens of buildpacks).
MAX_COMPOSITE_DEPTH = 32
MAX_CHECKED = 10_000


@record
class _Verdict:
    """Whether one buildpack can run on the target, as :class:`_Check` decided it once.

    A component's ``reason`` says why it cannot (``None``: it can). A composite's ``failures`` are, for each of
    its groups, the first non-optional member that cannot run (empty when a group can); ``fine`` and ``skipped``
    are its accepted group's members that can run and its optional ones that cannot.
    """

    runs: bool
    reason: str | None = None
    failures: tuple[tuple[int, str], ...] = ()
    fine: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()


class _Check:
    """The composites under one or more buildpacks checked against ``target``: each buildpack looked up and decided
    once (by ``id@version``), so the work and what is said are linear in the tree, however often a buildpack is
    named; nesting and the number of buildpacks are bounded (:data:`MAX_COMPOSITE_DEPTH`, :data:`MAX_CHECKED`)."""

    def __init__(self, target: Target, lookup: Lookup) -> None:
        self.target, self.lookup = target, lookup
        self.verdicts: dict[str, _Verdict] = {}
        self.found: dict[str, tuple[BuildpackDescriptor, Callable[[str], bool]] | None] = {}
        self.path: list[str] = []

    def decide(self, descriptor: BuildpackDescriptor, has_file: Callable[[str], bool]) -> _Verdict:
        """The verdict on ``descriptor``, decided on first asking. A composite already being decided (its order
        names itself, through others) counts as able to run, as the detector never runs it twice.

        :raises TargetRefused: composites nest past :data:`MAX_COMPOSITE_DEPTH`, or the tree names more than
            :data:`MAX_CHECKED` buildpacks (exit 1).
        """
        ref = descriptor.ref
        known = self.verdicts.get(ref)
        if known is not None:
            return known
        if not descriptor.order:
            verdict = _Verdict(*_component(descriptor, has_file, self.target))
        elif ref in self.path:
            return _Verdict(True)
        else:
            self.path.append(ref)
            if len(self.path) > MAX_COMPOSITE_DEPTH:
                self._refuse(
                    f"its composites nest more than {MAX_COMPOSITE_DEPTH} deep, the most the preparer checks: "
                    + " > ".join(self.path)
                )
            verdict = self._composite(descriptor)
            self.path.pop()
        self.verdicts[ref] = verdict
        return verdict

    def _composite(self, descriptor: BuildpackDescriptor) -> _Verdict:
        """A composite can run when one of its groups has every non-optional member able to, as the detector tries
        its groups in turn; a member the run does not have is left to the checks that look for it."""
        failures = []
        for number, group in enumerate(descriptor.order, 1):
            fine, skipped, failure = [], [], None
            for element in group:
                found = self._lookup(element.id, element.version)
                if found is None:
                    continue
                if self.decide(*found).runs:
                    fine.append(element.ref)
                elif element.optional:
                    skipped.append(element.ref)
                else:
                    failure = (number, element.ref)
                    break
            if failure is None:
                return _Verdict(True, fine=tuple(fine), skipped=tuple(skipped))
            failures.append(failure)
        return _Verdict(False, failures=tuple(failures))

    def _lookup(self, bp_id: str, version: str) -> tuple[BuildpackDescriptor, Callable[[str], bool]] | None:
        ref = f"{bp_id}@{version}"
        if ref not in self.found:
            if len(self.found) >= MAX_CHECKED:
                self._refuse(
                    f"its composites name more than {MAX_CHECKED} buildpacks, the most the preparer checks"
                )
            self.found[ref] = self.lookup(bp_id, version)
        return self.found[ref]

    def _refuse(self, why: str) -> None:
        top = self.path[0] if self.path else "a buildpack"
        raise with_fields(
            TargetRefused(f"install {top}", why),
            buildpack=top,
            target=self.target.platform,
            source=self.target.source,
        )

    def reason(self, ref: str, told: set[str]) -> str:
        """Why the buildpack ``ref`` (decided, unable to run) cannot: a composite's first failing member of each
        group, each said in full the first time ``told`` meets it and named "as above" after."""
        verdict = self.verdicts[ref]
        if not verdict.failures:
            return verdict.reason or ""
        said = []
        for number, member in verdict.failures:
            if member in told:
                said.append(f"in group {number}, {member} (as above)")
            else:
                told.add(member)
                said.append(f"in group {number}, {member}: {self.reason(member, told)}")
        return f"none of its groups can run on this build ({'; '.join(said)})"

    def warnings(self, ref: str, out: dict[str, None], seen: set[str]) -> None:
        """The optional members that cannot run in the groups the detector would run under ``ref``, each said once
        (``out`` is ordered, ``seen`` what was walked)."""
        if ref in seen or ref not in self.verdicts:
            return
        seen.add(ref)
        verdict = self.verdicts[ref]
        for member in verdict.skipped:
            why = self.reason(member, {member})
            out[f"{ref}: its optional {member} cannot run on this build: {why}"] = None
        for member in verdict.fine:
            self.warnings(member, out, seen)


def _component(
    descriptor: BuildpackDescriptor, has_file: Callable[[str], bool], target: Target
) -> tuple[bool, str | None]:
    """Whether a component buildpack can run on ``target``, and why not."""
    declared = runs_on(descriptor, has_file)
    if not declared or any(matches(d, target) for d in declared):
        return True, None
    build = f"{target.shown} ({target.source})"
    if any(matches_platform(d, target) for d in declared):
        build = (
            f"{target.shown}, {target.distro} ({target.source}; the distribution from {target.distro_source})"
        )
    inferred = inferred_from(descriptor, has_file)
    from_ = f" (inferred from {inferred})" if inferred else ""
    return False, f"it runs on {', '.join(d.shown for d in declared)}{from_}; this build is {build}"


def why_not(
    descriptor: BuildpackDescriptor,
    has_file: Callable[[str], bool],
    target: Target,
    lookup: Lookup,
    warnings: list[str],
) -> str | None:
    """Why ``descriptor`` cannot run on ``target``, or ``None`` when it can.

    A composite (with an ``[[order]]``) can when one of its groups has every non-optional entry able to, as the
    detector tries its groups in turn; an optional one that cannot is told to ``warnings``. A buildpack the run
    does not have is left to the checks that look for it. Each buildpack of the tree is decided once.

    :raises TargetRefused: composites nest or name past the bounds (exit 1).
    """
    return _why_not(_Check(target, lookup), descriptor, has_file, warnings)


def _why_not(
    check: _Check, descriptor: BuildpackDescriptor, has_file: Callable[[str], bool], warnings: list[str]
) -> str | None:
    check.path.clear()
    verdict = check.decide(descriptor, has_file)
    if not verdict.runs:
        return check.reason(descriptor.ref, {descriptor.ref})
    said: dict[str, None] = {}
    check.warnings(descriptor.ref, said, set())
    warnings.extend(said)
    return None


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
    """Every buildpack the order names (``tops``), checked against ``target``; returns the warnings. A buildpack
    several of them name is decided once.

    :param enforced: the Platform API is 0.12 or later, whose detector skips what cannot run on the target; below
        it, a buildpack that cannot is a warning.
    :raises TargetRefused: the first that cannot (exit 1), or composites past the bounds.
    """
    warnings: list[str] = []
    check = _Check(target, lookup)
    for descriptor, has_file in tops:
        why = _why_not(check, descriptor, has_file, warnings)
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
