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
    Target,
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


def test_the_variables_give_a_target_only_with_os_and_arch() -> None:
    assert target_from_environ({"CNB_TARGET_DISTRO_NAME": "ubuntu"}) is None
    got = target_from_environ(
        {"CNB_TARGET_OS": "linux", "CNB_TARGET_ARCH": "arm64", "CNB_TARGET_ARCH_VARIANT": "v8"}
    )
    assert got == Target(
        "linux", "arm64", "v8", source="CNB_TARGET_OS, CNB_TARGET_ARCH, CNB_TARGET_ARCH_VARIANT"
    )
    with pytest.raises(InvalidInputsError, match="CNB_TARGET_OS is set without CNB_TARGET_ARCH"):
        target_from_environ({"CNB_TARGET_OS": "linux"})


def test_analyzed_toml_reads_both_variant_keys_and_its_distro() -> None:
    doc = {
        "run-image": {"target": {"os": "linux", "arch": "arm64", "arch-variant": "v8",
                                 "distro": {"name": "ubuntu", "version": "24.04"}}}
    }  # fmt: skip
    got = parse_analyzed(doc, "a.toml")
    assert got is not None
    assert (got.platform, got.distro, got.source) == (
        "linux/arm64/v8",
        "ubuntu 24.04",
        "a.toml [run-image.target]",
    )
    spec = parse_analyzed({"run-image": {"target": {"os": "linux", "arch": "arm", "variant": "v6"}}}, "a")
    assert spec is not None and spec.variant == "v6"
    assert parse_analyzed({"run-image": {"reference": "x"}}, "a") is None
    with pytest.raises(InvalidInputsError, match=r"a \[run-image.target\] has no arch"):
        parse_analyzed({"run-image": {"target": {"os": "linux"}}}, "a")


def test_os_release() -> None:
    text = '# comment\nNAME="Ubuntu"\nID=ubuntu\nVERSION_ID="22.04"\nID_LIKE=debian\n'
    assert parse_os_release(text) == ("ubuntu", "22.04")
    assert parse_os_release("") == ("", "")


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
