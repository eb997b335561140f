"""The build's target: names normalised as containerd does, matching as the lifecycle's detector does, the files
and variables it is read from, and the distribution read from an os-release file the test names."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from preparer import Inputs, plan_run
from preparer.errors import InvalidInputsError, TargetRefused
from preparer.files.buildpack import BuildpackTarget
from preparer.target import (
    RunImageTarget,
    Target,
    build_target,
    from_run_image,
    from_statement,
    matches,
    normalize,
    parse_analyzed,
    parse_os_release,
    parse_platform,
    same_platform,
    target_from_environ,
)
from tests.buildpacks import buildpack_toml, make_dir
from tests.golden import BUILDER


@pytest.mark.parametrize(
    ("arch", "variant", "expected"),
    [
        ("arm64", "", ("arm64", "v8")),
        ("aarch64", "8", ("arm64", "v8")),
        ("arm64", "v8.0", ("arm64", "v8")),
        ("arm64", "9", ("arm64", "v9")),
        ("amd64", "", ("amd64", "v1")),
        ("x86_64", "", ("amd64", "v1")),
        ("amd64", "v3", ("amd64", "v3")),
        ("arm", "", ("arm", "v7")),
        ("arm", "6", ("arm", "v6")),
        ("armhf", "", ("arm", "v7")),
        ("armel", "", ("arm", "v6")),
        ("i386", "", ("386", "")),
        ("s390x", "", ("s390x", "")),
        ("AMD64", "", ("amd64", "v1")),
    ],
)
def test_normalize_as_containerd(arch: str, variant: str, expected: tuple[str, str]) -> None:
    assert normalize(arch, variant) == expected


AMD = Target("linux", "amd64", distro_name="ubuntu", distro_version="22.04")


@pytest.mark.parametrize(
    ("declared", "target", "expected"),
    [
        (BuildpackTarget(), AMD, True),
        (BuildpackTarget("linux"), AMD, True),
        (BuildpackTarget("windows"), AMD, False),
        (BuildpackTarget(arch="x86_64"), AMD, True),
        (BuildpackTarget("linux", "amd64", "v1"), AMD, True),
        (BuildpackTarget("linux", "amd64", "v3"), AMD, False),
        (BuildpackTarget("linux", "arm64"), AMD, False),
        (BuildpackTarget("linux", "arm64", "v8"), Target("linux", "arm64"), True),
        (BuildpackTarget("linux", "arm64"), Target("linux", "arm64", "v8"), True),
        (BuildpackTarget("linux", "arm64", "v9"), Target("linux", "arm64"), False),
        (BuildpackTarget("linux", "arm", ""), Target("linux", "arm", "v6"), True),
        (BuildpackTarget("linux", "s390x", "z15"), Target("linux", "s390x"), True),
        (BuildpackTarget("linux", distros=(("ubuntu", "22.04"),)), AMD, True),
        (BuildpackTarget("linux", distros=(("ubuntu", ""),)), AMD, True),
        (BuildpackTarget("linux", distros=(("ubuntu", "24.04"), ("debian", "12"))), AMD, False),
        (BuildpackTarget("linux", distros=(("debian", "12"),)), Target("linux", "amd64"), True),
    ],
)
def test_matching(declared: BuildpackTarget, target: Target, expected: bool) -> None:
    assert matches(declared, target) is expected


def test_platform_values_name_the_setting() -> None:
    assert parse_platform("linux/arm64/v8", "X") == ("linux", "arm64", "v8")
    for bad in ("linux", "linux/amd64/v8/x", "Linux/amd64", "linux/", "/amd64"):
        with pytest.raises(InvalidInputsError, match=f"X='{bad}' is not os/arch"):
            parse_platform(bad, "X")


def test_each_variable_is_read_on_its_own_and_one_without_what_it_needs_is_exit_3() -> None:
    assert target_from_environ({}) is None
    assert target_from_environ({"CNB_TARGET_DISTRO_NAME": "ubuntu"}) == Target(
        "", "", distro_name="ubuntu", source="", distro_source="CNB_TARGET_DISTRO_NAME"
    )
    assert target_from_environ({"CNB_TARGET_OS": "linux"}) == Target("linux", "", source="CNB_TARGET_OS")
    got = target_from_environ(
        {"CNB_TARGET_OS": "linux", "CNB_TARGET_ARCH": "arm64", "CNB_TARGET_ARCH_VARIANT": "v8",
         "CNB_TARGET_DISTRO_NAME": "ubuntu", "CNB_TARGET_DISTRO_VERSION": "24.04"}
    )  # fmt: skip
    assert got == Target(
        "linux", "arm64", "v8", "ubuntu", "24.04", source="CNB_TARGET_OS, CNB_TARGET_ARCH, CNB_TARGET_ARCH_VARIANT",
        distro_source="CNB_TARGET_DISTRO_NAME, CNB_TARGET_DISTRO_VERSION",
    )  # fmt: skip
    for env, said in [
        ({"CNB_TARGET_ARCH": "arm64"}, "CNB_TARGET_ARCH is set without CNB_TARGET_OS: an architecture needs its os"),
        ({"CNB_TARGET_OS": "linux", "CNB_TARGET_ARCH_VARIANT": "v8"},
         "CNB_TARGET_ARCH_VARIANT is set without CNB_TARGET_ARCH: a variant needs its architecture"),
        ({"CNB_TARGET_DISTRO_VERSION": "24.04"},
         "CNB_TARGET_DISTRO_VERSION is set without CNB_TARGET_DISTRO_NAME: a version needs its distribution's name"),
        ({"CNB_TARGET_DISTRO_NAME": "ubuntu", "CNB_TARGET_DISTRO_VERSION": "24 04"},
         "CNB_TARGET_DISTRO_VERSION='24 04' is not valid (lower case letters, digits, '.', '_' and '-'"),
        ({"CNB_TARGET_DISTRO_NAME": "Ubuntu", "CNB_TARGET_DISTRO_VERSION": "24.04"},
         "CNB_TARGET_DISTRO_NAME='Ubuntu' is not valid"),
    ]:  # fmt: skip
        with pytest.raises(InvalidInputsError) as refused:
            target_from_environ(env)
        assert said in refused.value.message, env


def test_analyzed_toml_reads_both_variant_keys_and_its_distro_table_as_written() -> None:
    doc = {
        "run-image": {"target": {"os": "linux", "arch": "arm64", "arch-variant": "v8",
                                 "distro": {"name": "ubuntu", "version": "24.04"}}}
    }  # fmt: skip
    assert parse_analyzed(doc, "a.toml") == RunImageTarget(
        "a.toml", "linux", "arm64", "v8", ("ubuntu", "24.04")
    )
    spec = parse_analyzed({"run-image": {"target": {"os": "linux", "arch": "arm", "variant": "v6"}}}, "a")
    assert spec.variant == "v6" and spec.distro is None
    assert parse_analyzed({"run-image": {"reference": "x"}}, "a") == RunImageTarget("a", given=False)
    assert parse_analyzed({"run-image": {"target": {"distro": {}}}}, "a") == RunImageTarget(
        "a", distro=("", "")
    )
    for bad, said in [({"arch": 1}, r"a \[run-image.target\] arch is not a string"),
                      ({"distro": "ubuntu"}, "distro is not a table"), ({"arch": "ARM64"}, "arch='ARM64'")]:  # fmt: skip
        with pytest.raises(InvalidInputsError, match=said):
            parse_analyzed({"run-image": {"target": bad}}, "a")


def test_analyzed_toml_is_filled_in_as_the_detector_fills_it_only_without_a_distro_table(
    tmp_path: Path,
) -> None:
    os_release = tmp_path / "os-release"
    os_release.write_text('ID=ubuntu\nVERSION_ID="22.04"\n')
    where = "a [run-image.target]"
    # No distro table: linux, the machine's architecture, os-release's distribution.
    filled = from_run_image(
        RunImageTarget("a", variant="v8"), "linux/arm64", "CNB_PREPARER_PLATFORM", os_release
    )
    assert filled == Target(
        "linux", "arm64", "v8", "ubuntu", "22.04",
        f"{where}; os linux and arch arm64 (CNB_PREPARER_PLATFORM) as the detector fills them in", str(os_release),
        "linux/arm64",
    )  # fmt: skip
    assert from_run_image(
        RunImageTarget("a", given=False), "linux/amd64", "the host", tmp_path / "none"
    ).source == (
        "a, which has no [run-image.target]; os linux and arch amd64 (the host) as the detector fills them in"
    )
    # windows: os-release is still read, as the detector reads it.
    assert from_run_image(RunImageTarget("a", "windows", "amd64"), "linux/amd64", "", os_release).distro == (
        "ubuntu 22.04"
    )
    # A distro table, even half or empty: nothing filled in, os-release not read; empty parts match anything.
    half = from_run_image(RunImageTarget("a", arch="arm64", distro=("", "12")), "linux/amd64", "", os_release)
    assert (half.os, half.arch, half.distro, half.distro_source) == (
        "",
        "arm64",
        "version 12 of any distribution",
        where,
    )
    assert (half.platform, half.shown) == ("linux/arm64", "any os/arm64")
    empty = from_run_image(RunImageTarget("a", distro=("", "")), "linux/amd64", "", os_release)
    assert (empty.os, empty.arch, empty.distro, empty.platform, empty.shown) == (
        "", "", "", "linux/amd64", "any os/any architecture"
    )  # fmt: skip
    assert matches(BuildpackTarget("windows", "s390x", distros=(("ubuntu", "24.04"),)), empty)
    assert not matches(BuildpackTarget("linux", "amd64"), half)
    assert matches(BuildpackTarget(distros=(("ubuntu", "12"),)), half)
    assert not matches(BuildpackTarget(distros=(("debian", "11"),)), half)


def test_without_analyzed_toml_the_statement_goes_over_the_machine(tmp_path: Path) -> None:
    os_release = tmp_path / "os-release"
    os_release.write_text("ID=debian\nVERSION_ID=12\n")
    machine = ("linux/arm64", "CNB_PREPARER_PLATFORM")
    assert from_statement(None, *machine, os_release) == Target(
        "linux", "arm64", "", "debian", "12", "CNB_PREPARER_PLATFORM", str(os_release)
    )
    os_only = from_statement(Target("windows", "", source="CNB_TARGET_OS"), *machine, os_release)
    assert (os_only.platform, os_only.source, os_only.distro) == (
        "windows/arm64", "CNB_TARGET_OS; the architecture from CNB_PREPARER_PLATFORM", ""
    )  # fmt: skip
    distro = Target("", "", distro_name="ubuntu", source="", distro_source="CNB_TARGET_DISTRO_NAME")
    assert from_statement(distro, *machine, os_release) == Target(
        "linux", "arm64", "", "ubuntu", "", "CNB_PREPARER_PLATFORM", "CNB_TARGET_DISTRO_NAME"
    )


def test_settings_analyzed_toml_overrides_are_warned_of_naming_both(tmp_path: Path) -> None:
    analyzed = tmp_path / "analyzed.toml"
    analyzed.write_text(
        '[run-image.target]\nos = "linux"\narch = "amd64"\n[run-image.target.distro]\nname = "ubuntu"\n'
    )
    stated = Target("linux", "arm64", "v8", "ubuntu", "24.04", "CNB_TARGET_OS, CNB_TARGET_ARCH, CNB_TARGET_ARCH_VARIANT",
                    "CNB_TARGET_DISTRO_NAME, CNB_TARGET_DISTRO_VERSION")  # fmt: skip
    warnings: list[str] = []
    got = build_target(
        stated, "linux/arm64", "CNB_PREPARER_PLATFORM", analyzed, tmp_path / "no", warnings=warnings
    )
    assert (got.platform, got.distro) == ("linux/amd64", "ubuntu")
    where = f"{analyzed} [run-image.target]"
    tail = "; the preparer checks the build against that, as the detector will"
    assert warnings == [
        f"CNB_TARGET_ARCH=arm64 is not the target the detector reads: amd64 ({where}){tail}",
        f"CNB_TARGET_ARCH_VARIANT=v8 is not the target the detector reads: none, which matches any ({where}){tail}",
        f"CNB_TARGET_DISTRO_VERSION=24.04 is not the target the detector reads: none, which matches any ({where}){tail}",
        f"CNB_PREPARER_PLATFORM=linux/arm64 is not the target the detector reads: linux/amd64 ({where}){tail}",
    ]
    # The same values written otherwise (arm64 is arm64/v8) are the same target; the host is no setting.
    analyzed.write_text('[run-image.target]\nos = "linux"\narch = "arm64"\n')
    warnings.clear()
    build_target(stated, "linux/amd64", "the host", analyzed, tmp_path / "no", warnings=warnings)
    assert [w.partition("=")[0] for w in warnings] == ["CNB_TARGET_DISTRO_NAME", "CNB_TARGET_DISTRO_VERSION"]
    # A named analyzed.toml that is not there: a warning, and the statement is the target.
    warnings.clear()
    missing = tmp_path / "elsewhere.toml"
    got = build_target(
        stated, "linux/amd64", "the host", missing, tmp_path / "no", named=True, warnings=warnings
    )
    assert got.platform == "linux/arm64/v8" and warnings[0].startswith(
        f"no analyzed.toml at {missing} (-analyzed, "
    )


def test_os_release() -> None:
    text = '# comment\nNAME="Ubuntu"\nID=ubuntu\nVERSION_ID="22.04"\nID_LIKE=debian\n'
    assert parse_os_release(text) == ("ubuntu", "22.04")
    assert parse_os_release("") == ("", "")
    # As the lifecycle reads it: a line of more than one "=" is skipped, the key is as written, quotes and spaces
    # around the value go; either alone is a distribution.
    assert parse_os_release("ID=a=b\nID= fedora \nVERSION_ID='40'\n") == ("fedora", "'40'")
    assert parse_os_release(" ID=x\nVERSION_ID=3.20\n") == ("", "3.20")


def test_the_distribution_comes_from_the_os_release_file_given(tmp_path: Path) -> None:
    """A library run with ``Inputs.os_release`` pointing at a file of the test's: a builder buildpack that runs
    only on debian is refused on an ubuntu build, naming where the distribution was read."""
    root = tmp_path / "build"
    shutil.copytree(BUILDER, root / "cnb")
    (root / "workspace").mkdir()
    (root / "layers").mkdir()
    bp = make_dir(root / "cnb" / "buildpacks" / "me_deb" / "1.0.0", "me/deb")
    distro = '\n[[targets]]\nos = "linux"\n[[targets.distros]]\nname = "debian"\nversion = "12"\n'
    (bp / "buildpack.toml").write_text(buildpack_toml("me/deb") + distro)
    (root / "workspace" / "project.toml").write_text(
        '[_]\nschema-version = "0.2"\n[[io.buildpacks.group]]\nid = "me/deb"\nversion = "1.0.0"\n'
    )
    os_release = tmp_path / "os-release"
    os_release.write_text('ID=ubuntu\nVERSION_ID="22.04"\n')
    inputs = Inputs(
        app_dir=root / "workspace", layers_dir=root / "layers", platform_dir=root / "platform",
        buildpacks_dir=root / "cnb" / "buildpacks", order_path=root / "cnb" / "order.toml",
        target_platform="linux/ppc64le", os_release=os_release, download_cache=None,
    )  # fmt: skip
    with pytest.raises(TargetRefused) as refused:
        plan_run(inputs)
    assert refused.value.message == (
        "failed to install me/deb@1.0.0: it runs on linux (debian 12); this build is linux/ppc64le, ubuntu 22.04 "
        f"(Inputs.target_platform; the distribution from {os_release})"
    )
    assert (refused.value.exit_code, refused.value.buildpack, refused.value.target) == (
        1,
        "me/deb@1.0.0",
        "linux/ppc64le",
    )
    os_release.write_text("ID=debian\nVERSION_ID=12\n")
    plan = plan_run(inputs)
    assert plan.target is not None and plan.target.distro == "debian 12"


@pytest.mark.parametrize(
    ("one", "other", "same"),
    [
        ("linux/arm64", "linux/arm64/v8", True),
        ("linux/amd64", "linux/amd64/v1", True),
        ("linux/arm", "linux/arm/v7", True),
        ("linux/arm", "linux/arm/v6", False),
        ("linux/amd64", "linux/arm64", False),
        ("linux/amd64", "windows/amd64", False),
    ],
)
def test_same_platform_compares_normalised_names(one: str, other: str, same: bool) -> None:
    assert same_platform(one, other) is same
    assert same_platform(other, one) is same
