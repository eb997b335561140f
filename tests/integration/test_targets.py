"""The build's target through the real CLI: where it comes from, and every buildpack the order names checked
against it (``[[targets]]``, ``bin/``, ``[[stacks]]``, composites) before anything is written."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.buildpacks import buildpack_toml, make_dir
from tests.golden import Layout, listing, snapshot
from tests.integration.test_fleet_pins import two_platforms
from tests.integration.test_lock import fresh, order
from tests.plugins.cli import Result
from tests.plugins.registry import Front, Registry, add_index, build_package, push, to_cnb
from tests.projects import HEAD, group

ARM64_ONLY = '\n[[targets]]\nos = "linux"\narch = "arm64"\n\n[[targets]]\nos = "linux"\narch = "arm64"\nvariant = "v8"\n'
REFUSAL = (
    "failed to install me/arm@1.0.0: it runs on linux/arm64, linux/arm64/v8; this build is linux/amd64 "
    "(CNB_PREPARER_PLATFORM)"
)


def local(root: Path, bp_id: str, extra: str = "", version: str = "1.0.0", api: str = "0.10") -> Path:
    """A buildpack directory (bin/detect, bin/build) whose buildpack.toml ends with ``extra``."""
    make_dir(root, bp_id, version, api)
    (root / "buildpack.toml").write_text(buildpack_toml(bp_id, version, api) + extra)
    return root


def untouched(layout: Layout) -> dict[str, list[str]]:
    """What a refusal must leave as it was: ``<app>`` (but its project.toml), ``<platform>``, ``<buildpacks>``,
    ``<layers>``."""
    seen = snapshot(layout)
    seen["app"] = [name for name in seen["app"] if name != "project.toml"]
    return seen | {"layers": listing(layout.layers)}


def refused_and_untouched(result: Result, layout: Layout, before: dict[str, list[str]]) -> None:
    assert result.code == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert untouched(layout) == before
    assert not (layout.layers / "order.toml").exists()


def test_a_buildpack_for_another_architecture_is_refused_naming_the_setting(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    local(layout.app / "arm", "me/arm", ARM64_ONLY)
    before = untouched(layout)
    result = preparer(project=group("./arm"), env={"CNB_PREPARER_PLATFORM": "linux/amd64"})
    refused_and_untouched(result, layout, before)
    assert REFUSAL in result.stderr
    # The same buildpack on the architecture it names, written either way, is installed.
    for platform in ("linux/arm64", "linux/arm64/v8"):
        ok = preparer(project=group("./arm"), env={"CNB_PREPARER_PLATFORM": platform})
        assert ok.code == 0, ok.stderr
    assert (layout.buildpacks / "me_arm" / "1.0.0" / "buildpack.toml").is_file()


def test_normalised_names_match_and_empty_fields_match_anything(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    local(layout.app / "v8", "me/v8", '\n[[targets]]\nos = "linux"\narch = "arm64"\narch-variant = "v8"\n')
    local(layout.app / "amd", "me/amd", '\n[[targets]]\narch = "amd64"\nvariant = "v1"\n')
    local(layout.app / "arm7", "me/arm7", '\n[[targets]]\nos = "linux"\narch = "arm"\nvariant = "v7"\n')
    assert preparer(project=group("./v8"), env={"CNB_PREPARER_PLATFORM": "linux/arm64"}).code == 0
    assert preparer(project=group("./amd"), env={"CNB_PREPARER_PLATFORM": "linux/amd64"}).code == 0
    assert preparer(project=group("./arm7"), env={"CNB_PREPARER_PLATFORM": "linux/arm"}).code == 0
    other = preparer(project=group("./arm7"), env={"CNB_PREPARER_PLATFORM": "linux/arm/v6"})
    assert other.code == 1
    assert "it runs on linux/arm/v7; this build is linux/arm/v6 (CNB_PREPARER_PLATFORM)" in other.stderr


def test_analyzed_toml_comes_first_and_the_variables_it_overrides_are_warned_of(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    """The detector reads analyzed.toml and no CNB_TARGET_*: the preparer checks against what the detector will,
    and says which setting it did not follow."""
    local(layout.app / "arm", "me/arm", ARM64_ONLY)
    analyzed = layout.layers / "analyzed.toml"
    analyzed.write_text('[run-image.target]\nos = "linux"\narch = "amd64"\n')
    before = untouched(layout)
    env = {"CNB_TARGET_OS": "linux", "CNB_TARGET_ARCH": "arm64", "CNB_PREPARER_PLATFORM": "linux/arm64"}
    result = preparer(project=group("./arm"), env=env)
    refused_and_untouched(result, layout, before)
    assert f"this build is linux/amd64 ({analyzed} [run-image.target])" in result.stderr
    tail = "; the preparer checks the build against that, as the detector will"
    for setting, value, taken in (("CNB_TARGET_ARCH", "arm64", "amd64"),
                                  ("CNB_PREPARER_PLATFORM", "linux/arm64", "linux/amd64")):  # fmt: skip
        assert (
            f"Warning: {setting}={value} is not the target the detector reads: {taken} ({analyzed} "
            f"[run-image.target]){tail}"
        ) in result.stderr
    assert "CNB_TARGET_OS=" not in result.stderr  # it agrees
    # The other way round: the buildpack runs on what analyzed.toml says, whatever the variables say.
    analyzed.write_text('[run-image.target]\nos = "linux"\narch = "arm64"\n')
    ok = preparer(project=group("./arm"), env=env | {"CNB_TARGET_ARCH": "amd64"})
    assert ok.code == 0, ok.stderr
    assert (
        f"Warning: CNB_TARGET_ARCH=amd64 is not the target the detector reads: arm64 ({analyzed}" in ok.stderr
    )


def test_analyzed_toml_comes_before_the_preparers_setting(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    local(layout.app / "arm", "me/arm", ARM64_ONLY)
    analyzed = layout.layers / "analyzed.toml"
    analyzed.write_text('[run-image]\nreference = "x"\n[run-image.target]\nos = "linux"\narch = "amd64"\n')
    before = untouched(layout)
    result = preparer(project=group("./arm"), env={"CNB_PREPARER_PLATFORM": "linux/arm64"})
    refused_and_untouched(result, layout, before)
    assert f"this build is linux/amd64 ({analyzed} [run-image.target])" in result.stderr
    analyzed.write_text('[run-image.target]\nos = "linux"\narch = "arm64"\narch-variant = "v8"\n')
    ok = preparer(project=group("./arm"), env={"CNB_PREPARER_PLATFORM": "linux/amd64"})
    assert ok.code == 0, ok.stderr


def test_the_host_is_the_last_source(preparer: Callable[..., Result], layout: Layout) -> None:
    import os

    host = {"x86_64": "amd64", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    other = "amd64" if host != "amd64" else "s390x"
    local(layout.app / "other", "me/other", f'\n[[targets]]\nos = "linux"\narch = "{other}"\n')
    result = preparer(project=group("./other"))
    assert result.code == 1
    assert f"it runs on linux/{other}; this build is linux/{host} (the host)" in result.stderr


def test_a_distribution_listing_only_others_is_refused_naming_them(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    distros = (
        '\n[[targets]]\nos = "linux"\narch = "amd64"\n'
        '[[targets.distros]]\nname = "ubuntu"\nversion = "22.04"\n'
        '[[targets.distros]]\nname = "ubuntu"\nversion = "24.04"\n'
    )
    local(layout.app / "ubuntu", "me/ubuntu", distros)
    before = untouched(layout)
    env = {"CNB_TARGET_OS": "linux", "CNB_TARGET_ARCH": "amd64", "CNB_TARGET_DISTRO_NAME": "debian",
           "CNB_TARGET_DISTRO_VERSION": "12"}  # fmt: skip
    result = preparer(project=group("./ubuntu"), env=env)
    refused_and_untouched(result, layout, before)
    assert (
        "failed to install me/ubuntu@1.0.0: it runs on linux/amd64 (ubuntu 22.04, ubuntu 24.04); this build is "
        "linux/amd64, debian 12 (CNB_TARGET_OS, CNB_TARGET_ARCH; the distribution from CNB_TARGET_DISTRO_NAME, "
        "CNB_TARGET_DISTRO_VERSION)"
    ) in result.stderr
    ok = preparer(project=group("./ubuntu"), env=env | {"CNB_TARGET_DISTRO_NAME": "ubuntu",
                                                         "CNB_TARGET_DISTRO_VERSION": "24.04"})  # fmt: skip
    assert ok.code == 0, ok.stderr


def test_without_targets_bin_decides_and_old_stacks_map(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    windows = local(layout.app / "win", "me/win")
    (windows / "bin" / "build").rename(windows / "bin" / "build.bat")
    before = untouched(layout)
    result = preparer(project=group("./win"), env={"CNB_PREPARER_PLATFORM": "linux/amd64"})
    refused_and_untouched(result, layout, before)
    assert (
        "failed to install me/win@1.0.0: it runs on windows (inferred from bin/build.bat); this build is linux/amd64 "
        "(CNB_PREPARER_PLATFORM)"
    ) in result.stderr
    assert preparer(project=group("./win"), env={"CNB_PREPARER_PLATFORM": "windows/amd64"}).code == 0

    bionic = '\n[[stacks]]\nid = "io.buildpacks.stacks.bionic"\n'
    local(layout.app / "old", "me/old", bionic, api="0.9")
    arm = preparer(project=group("./old"), env={"CNB_PREPARER_PLATFORM": "linux/arm64"})
    assert arm.code == 1
    assert (
        "it runs on linux/amd64 (ubuntu 18.04) (inferred from [[stacks]] io.buildpacks.stacks.bionic); this build "
        "is linux/arm64 (CNB_PREPARER_PLATFORM)"
    ) in arm.stderr
    local(layout.app / "any", "me/any", '\n[[stacks]]\nid = "io.buildpacks.stacks.jammy"\n', api="0.9")
    assert preparer(project=group("./any"), env={"CNB_PREPARER_PLATFORM": "linux/arm64"}).code == 0


def test_below_platform_api_0_12_a_mismatch_is_a_warning(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    local(layout.app / "arm", "me/arm", ARM64_ONLY)
    result = preparer(
        project=group("./arm"), env={"CNB_PREPARER_PLATFORM": "linux/amd64", "CNB_PLATFORM_API": "0.11"}
    )
    assert result.code == 0, result.stderr
    assert (
        "Warning: me/arm@1.0.0 cannot run on this build: it runs on linux/arm64, linux/arm64/v8; this build is "
        "linux/amd64 (CNB_PREPARER_PLATFORM) (the detector of Platform API below 0.12 does not check targets)"
    ) in result.stderr
    assert (layout.buildpacks / "me_arm" / "1.0.0" / "buildpack.toml").is_file()


def test_a_builder_buildpack_named_by_id_is_checked_before_the_dry_run_too(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    local(layout.buildpacks / "me_arm" / "1.0.0", "me/arm", ARM64_ONLY)
    before = untouched(layout)
    project = HEAD + '[[io.buildpacks.group]]\nid = "me/arm"\nversion = "1.0.0"\n'
    for flags in ((), ("-dry-run",)):
        result = preparer(*flags, project=project, env={"CNB_PREPARER_PLATFORM": "linux/amd64"})
        refused_and_untouched(result, layout, before)
        assert REFUSAL in result.stderr


def test_a_composite_is_refused_only_when_none_of_its_groups_can_run(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    local(layout.buildpacks / "me_arm" / "1.0.0", "me/arm", ARM64_ONLY)
    local(layout.buildpacks / "me_any" / "1.0.0", "me/any")
    one_group = '\n[[order]]\n[[order.group]]\nid = "me/arm"\nversion = "1.0.0"\n'
    meta = layout.app / "meta"
    meta.mkdir()
    (meta / "buildpack.toml").write_text(buildpack_toml("me/meta", "1.0.0", order=one_group))
    before = untouched(layout)
    result = preparer(project=group("./meta"), env={"CNB_PREPARER_PLATFORM": "linux/amd64"})
    refused_and_untouched(result, layout, before)
    assert (
        "failed to install me/meta@1.0.0: none of its groups can run on this build (in group 1, me/arm@1.0.0: it "
        "runs on linux/arm64, linux/arm64/v8; this build is linux/amd64 (CNB_PREPARER_PLATFORM))"
    ) in result.stderr
    # A second group the target can run makes it acceptable; an optional entry that cannot is a warning.
    two = one_group + '\n[[order]]\n[[order.group]]\nid = "me/any"\nversion = "1.0.0"\n'
    two += '[[order.group]]\nid = "me/arm"\nversion = "1.0.0"\noptional = true\n'
    (meta / "buildpack.toml").write_text(buildpack_toml("me/meta", "1.0.0", order=two))
    ok = preparer(project=group("./meta"), env={"CNB_PREPARER_PLATFORM": "linux/amd64"})
    assert ok.code == 0, ok.stderr
    assert (
        "Warning: me/meta@1.0.0: its optional me/arm@1.0.0 cannot run on this build: it runs on linux/arm64, "
        "linux/arm64/v8; this build is linux/amd64 (CNB_PREPARER_PLATFORM)"
    ) in ok.stderr


@pytest.mark.parametrize(
    ("env", "shown"),
    [
        ({"CNB_PREPARER_PLATFORM": "linux"}, "CNB_PREPARER_PLATFORM='linux' is not os/arch[/variant]"),
        ({"CNB_PREPARER_PLATFORM": "linux/amd64/v8/x"}, "CNB_PREPARER_PLATFORM='linux/amd64/v8/x' is not"),
        ({"CNB_PREPARER_PLATFORM": "Linux/AMD64"}, "CNB_PREPARER_PLATFORM='Linux/AMD64' is not"),
        ({"CNB_TARGET_OS": "Linux", "CNB_TARGET_ARCH": "amd64"}, "CNB_TARGET_OS='Linux' is not valid"),
        (
            {"CNB_TARGET_ARCH": "amd64"},
            "CNB_TARGET_ARCH is set without CNB_TARGET_OS: an architecture needs its os",
        ),
        (
            {"CNB_TARGET_ARCH_VARIANT": "v8"},
            "CNB_TARGET_ARCH_VARIANT is set without CNB_TARGET_ARCH: a variant needs",
        ),
        (
            {"CNB_TARGET_DISTRO_VERSION": "24.04"},
            "CNB_TARGET_DISTRO_VERSION is set without CNB_TARGET_DISTRO_NAME: a version needs its distribution's name",
        ),
        (
            {"CNB_TARGET_DISTRO_NAME": "ubuntu", "CNB_TARGET_DISTRO_VERSION": "24.04 LTS"},
            "CNB_TARGET_DISTRO_VERSION='24.04 LTS' is not valid",
        ),
    ],
)
def test_an_invalid_target_is_exit_3_naming_the_setting(
    preparer: Callable[..., Result], layout: Layout, env: dict[str, str], shown: str
) -> None:
    local(layout.app / "bp", "me/bp")
    result = preparer(project=group("./bp"), env=env)
    assert result.code == 3, result.stderr
    assert shown in result.stderr
    assert "Inputs." not in result.stderr and "Traceback" not in result.stderr
    assert not (layout.layers / "order.toml").exists()


@pytest.mark.parametrize(
    ("env", "shown"),
    [
        (
            {"CNB_TARGET_OS": "", "CNB_TARGET_ARCH": "arm64"},
            "CNB_TARGET_ARCH is set without CNB_TARGET_OS (it is set, but empty): an architecture needs its os",
        ),
        (
            {"CNB_TARGET_OS": "linux", "CNB_TARGET_ARCH": "arm64", "CNB_TARGET_DISTRO_NAME": "",
             "CNB_TARGET_DISTRO_VERSION": "22.04"},
            "CNB_TARGET_DISTRO_VERSION is set without CNB_TARGET_DISTRO_NAME (it is set, but empty)",
        ),
        ({"CNB_TARGET_OS": "linux ", "CNB_TARGET_ARCH": "arm64"}, "CNB_TARGET_OS='linux ' is not valid"),
        ({"CNB_TARGET_OS": " ", "CNB_TARGET_ARCH": "arm64"}, "CNB_TARGET_OS=' ' is not valid"),
        ({"CNB_TARGET_OS": "linux", "CNB_TARGET_ARCH": "ARM64"}, "CNB_TARGET_ARCH='ARM64' is not valid"),
        (
            {"CNB_TARGET_OS": "linux", "CNB_TARGET_ARCH": "arm64", "CNB_TARGET_ARCH_VARIANT": "V8"},
            "CNB_TARGET_ARCH_VARIANT='V8' is not valid",
        ),
        (
            {"CNB_TARGET_DISTRO_NAME": "ubuntu", "CNB_TARGET_DISTRO_VERSION": " 22.04"},
            "CNB_TARGET_DISTRO_VERSION=' 22.04' is not valid",
        ),
        (
            {"CNB_TARGET_DISTRO_NAME": "Ubuntu", "CNB_TARGET_DISTRO_VERSION": "22.04"},
            "CNB_TARGET_DISTRO_NAME='Ubuntu' is not valid",
        ),
        ({"CNB_PREPARER_PLATFORM": " linux/arm64"}, "CNB_PREPARER_PLATFORM=' linux/arm64' is not os/arch"),
    ],
)  # fmt: skip
def test_held_out_spellings_are_exit_3_naming_the_variable_that_has_them(
    preparer: Callable[..., Result], layout: Layout, env: dict[str, str], shown: str
) -> None:
    """A variable set to empty is unset (the lifecycle's envOrDefault), so what needs it is refused, saying it is
    empty; whitespace and upper case are refused where they are, never blamed on another variable."""
    local(layout.app / "bp", "me/bp")
    result = preparer(project=group("./bp"), env=env)
    assert result.code == 3, result.stderr
    [error] = [line for line in result.stderr.splitlines() if line.startswith("ERROR: ")]
    assert error.startswith(f"ERROR: failed to resolve inputs: {shown}")  # the variable that has it, first
    assert not (layout.layers / "order.toml").exists()


def test_variables_set_to_empty_are_unset(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    """Every CNB_TARGET_* set to empty: the target is CNB_PREPARER_PLATFORM's; a name with an empty version is
    every version of that distribution; CNB_ANALYZED_PATH set to empty is <layers>/analyzed.toml."""
    local(layout.app / "arm", "me/arm", ARM64_ONLY)
    report = tmp_path / "report.toml"
    names = ("CNB_TARGET_OS", "CNB_TARGET_ARCH", "CNB_TARGET_ARCH_VARIANT", "CNB_TARGET_DISTRO_NAME",
             "CNB_TARGET_DISTRO_VERSION")  # fmt: skip
    empty = dict.fromkeys(names, "")
    env = empty | {"CNB_PREPARER_PLATFORM": "linux/arm64"}
    ok = preparer("-prepare-report", str(report), project=group("./arm"), env=env)
    assert ok.code == 0, ok.stderr
    assert tomllib.loads(report.read_text())["target"]["source"] == "CNB_PREPARER_PLATFORM"
    named = env | {"CNB_TARGET_DISTRO_NAME": "ubuntu"}
    ok = preparer("-prepare-report", str(report), project=group("./arm"), env=named)
    assert ok.code == 0, ok.stderr
    said = tomllib.loads(report.read_text())["target"]
    assert (said["distro-name"], said.get("distro-version", "")) == ("ubuntu", "")
    analyzed = layout.layers / "analyzed.toml"
    analyzed.write_text('[run-image.target]\nos = "linux"\narch = "amd64"\n')
    refused = preparer(project=group("./arm"), env=env | {"CNB_ANALYZED_PATH": ""})
    assert refused.code == 1, refused.stderr
    assert f"this build is linux/amd64 ({analyzed} [run-image.target])" in refused.stderr


def test_an_empty_analyzed_flag_is_exit_3(preparer: Callable[..., Result], layout: Layout) -> None:
    """The lifecycle keeps ``-analyzed ""`` as it is and reads no file: the preparer does not guess which target
    that was meant to be."""
    local(layout.app / "bp", "me/bp")
    (layout.layers / "analyzed.toml").write_text('[run-image.target]\nos = "linux"\narch = "amd64"\n')
    result = preparer("-analyzed", "", project=group("./bp"))
    assert result.code == 3, result.stderr
    assert (
        "ERROR: failed to resolve inputs: -analyzed is empty: the detector then reads no analyzed.toml, not even "
        "<layers>/analyzed.toml; name the file, or leave the flag out (CNB_ANALYZED_PATH, else "
        "<layers>/analyzed.toml)"
    ) in result.stderr
    assert not (layout.layers / "order.toml").exists()


def test_an_invalid_analyzed_target_is_exit_3_naming_the_file(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    local(layout.app / "bp", "me/bp")
    analyzed = layout.layers / "analyzed.toml"
    analyzed.write_text('[run-image.target]\nos = "linux"\narch = "ARM64"\n')
    result = preparer(project=group("./bp"))
    assert result.code == 3, result.stderr
    assert f"{analyzed} [run-image.target] arch='ARM64' is not valid" in result.stderr


def test_an_index_resolves_to_the_target_and_a_single_arch_image_is_checked(
    preparer: Callable[..., Result], layout: Layout, registry: Registry, tmp_path: Path
) -> None:
    work = tmp_path / "multi"
    amd_dir = local(work / "amd-src", "me/multi", '\n[[targets]]\nos = "linux"\narch = "amd64"\n')
    arm_dir = local(
        work / "arm-src", "me/multi", '\n[[targets]]\nos = "linux"\narch = "arm64"\nvariant = "v8"\n'
    )
    build_package(work, [("me/multi", "1.0.0", "")], ("me/multi", "1.0.0"), tag="amd64", content=amd_dir)
    build_package(work, [("me/multi", "1.0.0", "")], ("me/multi", "1.0.0"), tag="arm64", architecture="arm64",
                  layout=work / "layout", content=arm_dir)  # fmt: skip
    add_index(work / "layout", "multi", {"amd64": "amd64", "arm64": "arm64"})
    push(work / "layout", "multi", registry.ref("me/targets", "multi"), all_images=True)
    push(work / "layout", "arm64", registry.ref("me/targets", "arm64-only"))
    before = untouched(layout)
    # The single-architecture arm64 image, on an amd64 build: its config says arm64.
    single = preparer(
        project=group(f"docker://{registry.ref('me/targets', 'arm64-only')}"),
        env={"CNB_PREPARER_PLATFORM": "linux/amd64"},
    )
    refused_and_untouched(single, layout, before)
    assert (
        f"failed to pull {registry.ref('me/targets', 'arm64-only')}: the image is for linux/arm64; this build is "
        "linux/amd64 (CNB_PREPARER_PLATFORM)"
    ) in single.stderr
    # The index, resolved to the target the analyzer wrote (not CNB_PREPARER_PLATFORM): the arm64 manifest.
    (layout.layers / "analyzed.toml").write_text(
        '[run-image.target]\nos = "linux"\narch = "arm64"\narch-variant = "v8"\n'
    )
    multi = preparer(
        project=group(f"docker://{registry.ref('me/targets', 'multi')}"),
        env={"CNB_PREPARER_PLATFORM": "linux/amd64"},
    )
    assert multi.code == 0, multi.stderr
    installed = (layout.buildpacks / "me_multi" / "1.0.0" / "buildpack.toml").read_text()
    assert 'arch = "arm64"' in installed


def test_a_single_platform_image_for_another_is_refused_before_its_layers_are_pulled(
    preparer: Callable[..., Result], layout: Layout, registry: Registry, front: Front, tmp_path: Path
) -> None:
    """The image's config says what it is for; its layers are never asked for (the front logs every request)."""
    work = tmp_path / "single"
    package = build_package(work, [("me/single", "1.0.0", "")], ("me/single", "1.0.0"), tag="arm64",
                            architecture="arm64")  # fmt: skip
    push(work / "layout", "arm64", registry.ref("me/single", "arm64"))
    layer_paths = {f"/v2/me/single/blobs/{layer['digest']}" for layer in package.manifest()["layers"]}
    config_path = f"/v2/me/single/blobs/{package.manifest()['config']['digest']}"
    before = untouched(layout)
    uri = f"docker://{front.host}/me/single:arm64"
    env = {"CNB_TARGET_OS": "linux", "CNB_TARGET_ARCH": "amd64"}
    result = preparer(project=group(uri), env=env)
    refused_and_untouched(result, layout, before)
    assert (
        f"ERROR: failed to pull {front.host}/me/single:arm64: the image is for linux/arm64; this build is "
        "linux/amd64 (CNB_TARGET_OS, CNB_TARGET_ARCH)"
    ) in result.stderr
    assert config_path in front.requests
    assert not layer_paths & set(front.requests)
    # The same image on the build it is for (arm64 is arm64/v8): pulled and installed.
    ok = preparer(project=group(uri), env={"CNB_PREPARER_PLATFORM": "linux/arm64/v8"})
    assert ok.code == 0, ok.stderr
    assert layer_paths <= set(front.requests)
    assert (layout.buildpacks / "me_single" / "1.0.0" / "buildpack.toml").is_file()


def test_a_cnb_for_another_platform_is_refused_and_below_0_12_warned(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    work = tmp_path / "cnb"
    build_package(work, [("me/cnb", "1.0.0", "")], ("me/cnb", "1.0.0"), tag="arm64", architecture="arm64")
    to_cnb(work / "layout", "arm64", layout.app / "arm.cnb")
    before = untouched(layout)
    result = preparer(project=group("./arm.cnb"), env={"CNB_PREPARER_PLATFORM": "linux/amd64"})
    refused_and_untouched(result, layout, before)
    assert (
        f"failed to read {layout.app / 'arm.cnb'}: the image is for linux/arm64; this build is linux/amd64 "
        "(CNB_PREPARER_PLATFORM)"
    ) in result.stderr
    # Below Platform API 0.12 the detector checks no targets: a warning, and the buildpack is installed.
    old = preparer(
        project=group("./arm.cnb"), env={"CNB_PREPARER_PLATFORM": "linux/amd64", "CNB_PLATFORM_API": "0.11"}
    )
    assert old.code == 0, old.stderr
    assert (
        f"Warning: {layout.app / 'arm.cnb'}: the image is for linux/arm64; this build is linux/amd64 "
        "(CNB_PREPARER_PLATFORM) (the detector of Platform API below 0.12 does not check targets)"
    ) in old.stderr
    assert (layout.buildpacks / "me_cnb" / "1.0.0" / "buildpack.toml").is_file()


def test_an_index_entry_is_chosen_by_normalised_names_and_a_miss_lists_variants(
    preparer: Callable[..., Result], layout: Layout, registry: Registry, tmp_path: Path
) -> None:
    """arm is arm/v7 (not the v6 listed first), arm64 is arm64/v8, amd64 with variant v1 is amd64/v1."""
    work = tmp_path / "variants"
    members = {"amd64": "amd64/v1", "armv6": "arm/v6", "armv7": "arm/v7", "arm64": "arm64"}
    for patch, (tag, arch) in enumerate(members.items()):
        build_package(work, [("me/var", f"1.0.{patch}", "")], ("me/var", f"1.0.{patch}"), tag=tag,
                      architecture=arch.partition("/")[0])  # fmt: skip
    add_index(work / "layout", "multi", members)
    push(work / "layout", "multi", registry.ref("me/variants", "multi"), all_images=True)
    uri = f"docker://{registry.ref('me/variants', 'multi')}"
    for platform, version in [("linux/amd64/v1", "1.0.0"), ("linux/arm", "1.0.2"), ("linux/arm/v6", "1.0.1"),
                              ("linux/arm64/v8", "1.0.3")]:  # fmt: skip
        result = preparer(project=group(uri), env={"CNB_PREPARER_PLATFORM": platform})
        assert result.code == 0, result.stderr
        order = tomllib.loads((layout.layers / "order.toml").read_text())
        assert order["order"][0]["group"][0]["version"] == version, platform
    before, order_toml = untouched(layout), (layout.layers / "order.toml").read_bytes()
    none = preparer(project=group(uri), env={"CNB_PREPARER_PLATFORM": "linux/amd64/v3"})
    assert none.code == 1, none.stderr
    assert (untouched(layout), (layout.layers / "order.toml").read_bytes()) == (before, order_toml)
    assert (
        f"failed to pull {registry.ref('me/variants', 'multi')}: no image for linux/amd64/v3 (CNB_PREPARER_PLATFORM) "
        "in the index (it has: "
        "linux/amd64/v1, linux/arm/v6, linux/arm/v7, linux/arm64)"
    ) in none.stderr


def test_a_lock_records_its_target_and_a_frozen_run_for_another_is_exit_3(
    preparer: Callable[..., Result], layout: Layout, registry: Registry, tmp_path: Path
) -> None:
    index, amd = two_platforms(tmp_path, registry.ref("me/locked", "multi"))
    lock = tmp_path / "preparer.lock"
    project = group(f"docker://{registry.ref('me/locked', 'multi')}")
    first = preparer("-lock", str(lock), project=project, env={"CNB_PREPARER_PLATFORM": "linux/amd64"})
    assert first.code == 0, first.stderr
    assert tomllib.loads(lock.read_text())["target"] == {"os": "linux", "arch": "amd64"}
    fresh(layout)
    before, locked = untouched(layout), lock.read_bytes()
    arm = preparer(
        "-lock", str(lock), project=project, env={"CNB_TARGET_OS": "linux", "CNB_TARGET_ARCH": "arm64"}
    )
    assert arm.code == 3, arm.stderr
    assert (untouched(layout), lock.read_bytes()) == (before, locked)
    assert not (layout.layers / "order.toml").exists()
    assert (
        f"ERROR: failed to apply lock file {lock}: it holds entries for linux/amd64, none for this build's target "
        "linux/arm64 (CNB_TARGET_OS, CNB_TARGET_ARCH). To add them, rerun with -update-lock: linux/arm64's entries "
        "are resolved and added to the lock, linux/amd64's kept as they are"
    ) in arm.stderr
    # The same platform written otherwise is the same target.
    same = preparer("-lock", str(lock), project=project, env={"CNB_PREPARER_PLATFORM": "linux/amd64/v1"})
    assert same.code == 0, same.stderr
    assert order(layout) == [("acme/multi", "1.0.0")]
    # -update-lock on the other target adds its entries, resolved for it; the first target's stay as they were.
    fresh(layout)
    amd_entries = tomllib.loads(lock.read_text())["buildpack"]
    update = preparer(
        "-lock", str(lock), "-update-lock", project=project, env={"CNB_PREPARER_PLATFORM": "linux/arm64"}
    )
    assert update.code == 0, update.stderr
    assert (
        f"The lock file {lock} has no entries for linux/arm64 (CNB_PREPARER_PLATFORM; it holds linux/amd64): this "
        "target's entries are resolved and added, the others kept"
    ) in update.stdout + update.stderr
    written = tomllib.loads(lock.read_text())
    assert written["lock-version"] == 2
    [amd_target, arm_target] = written["target"]
    assert amd_target == {"os": "linux", "arch": "amd64", "buildpack": amd_entries}
    [entry] = arm_target.pop("buildpack")
    assert arm_target == {"os": "linux", "arch": "arm64"}
    assert (entry["version"], entry["index"]) == ("1.1.0", index)
    assert entry["digest"] != amd
    assert order(layout) == [("acme/multi", "1.1.0")]
    # Frozen runs on both targets now succeed, each installing its own, and leave the lock as it is.
    both = lock.read_bytes()
    for platform, version in (("linux/amd64", "1.0.0"), ("linux/arm64/v8", "1.1.0")):
        fresh(layout)
        frozen = preparer("-lock", str(lock), project=project, env={"CNB_PREPARER_PLATFORM": platform})
        assert frozen.code == 0, frozen.stderr
        assert f"Frozen to the lock file {lock} (1 entries)" in frozen.stdout + frozen.stderr
        assert order(layout) == [("acme/multi", version)]
        assert lock.read_bytes() == both


def test_a_frozen_run_checks_only_its_own_targets_entries_and_an_update_moves_only_its_own(
    preparer: Callable[..., Result], layout: Layout, registry: Registry, tmp_path: Path
) -> None:
    """The team's flow: one lock for amd64 and arm64; a named update on one target (-update-lock=<id>) moves that
    target's entry only, and a hand edit to one target's entry fails that target's frozen run, not the other's."""
    reference = registry.ref("me/team", "multi")
    index, amd = two_platforms(tmp_path, reference)
    lock = tmp_path / "preparer.lock"
    project = group(f"docker://{reference}")
    arm_env, amd_env = {"CNB_PREPARER_PLATFORM": "linux/arm64"}, {"CNB_PREPARER_PLATFORM": "linux/amd64"}
    assert preparer("-lock", str(lock), project=project, env=arm_env).code == 0
    fresh(layout)
    added = preparer("-lock", str(lock), "-update-lock=acme/multi", project=project, env=amd_env)
    assert added.code == 0, added.stderr
    arm_entry, amd_entry = (t["buildpack"][0] for t in reversed(tomllib.loads(lock.read_text())["target"]))
    assert (amd_entry["digest"], arm_entry["index"]) == (amd, index)
    # The tag moves on: a named update on amd64 moves amd64's entry; arm64's stays at the index it locked.
    moved, _ = two_platforms(tmp_path, reference)
    assert moved != index
    fresh(layout)
    again = preparer("-lock", str(lock), "-update-lock=acme/multi", project=project, env=amd_env)
    assert again.code == 0, again.stderr
    [amd_target, arm_target] = tomllib.loads(lock.read_text())["target"]
    assert (amd_target["buildpack"][0]["index"], arm_target["buildpack"]) == (moved, [arm_entry])
    # A hand edit to arm64's digest: arm64's frozen run refuses it, amd64's never reads it.
    text = lock.read_text()
    lock.write_text(text.replace(arm_entry["digest"], "sha256:" + "0" * 64))
    fresh(layout)
    assert preparer("-lock", str(lock), project=project, env=amd_env).code == 0
    fresh(layout)
    refused = preparer("-lock", str(lock), project=project, env=arm_env)
    assert refused.code == 1 and "Traceback" not in refused.stderr
    assert "0" * 64 in refused.stderr


def test_a_target_added_later_comes_from_the_push_the_lock_holds_unless_its_entry_is_named(
    preparer: Callable[..., Result], layout: Layout, registry: Registry, tmp_path: Path
) -> None:
    """amd64 locked a week ago; the tag has moved since. Adding arm64 resolves it through the index amd64 locked, so
    both targets build from one push (as uv keeps what it locked when a platform is added); naming the entry
    resolves what the tag names now, for arm64 alone."""
    reference = registry.ref("me/later", "multi")
    index, _ = two_platforms(tmp_path, reference)
    lock = tmp_path / "preparer.lock"
    project = group(f"docker://{reference}")
    assert (
        preparer("-lock", str(lock), project=project, env={"CNB_PREPARER_PLATFORM": "linux/amd64"}).code == 0
    )
    amd_entries = tomllib.loads(lock.read_text())["buildpack"]
    moved, _ = two_platforms(tmp_path, reference)
    assert moved != index
    arm = {"CNB_PREPARER_PLATFORM": "linux/arm64"}
    fresh(layout)
    added = preparer("-lock", str(lock), "-update-lock", project=project, env=arm)
    assert added.code == 0, added.stderr
    repository = reference.rpartition(":")[0]
    assert (
        "Lock: io.buildpacks.group[0] is resolved through the image index the lock's other targets locked "
        f"({repository}@{index}), so that every target comes from the same push; -update-lock=io.buildpacks.group[0] "
        "resolves what it names now"
    ) in added.stdout
    [amd_target, arm_target] = tomllib.loads(lock.read_text())["target"]
    assert amd_target["buildpack"] == amd_entries
    assert [(e["index"], e["version"]) for e in arm_target["buildpack"]] == [(index, "1.1.0")]
    assert order(layout) == [("acme/multi", "1.1.0")]
    fresh(layout)
    named = preparer("-lock", str(lock), "-update-lock=io.buildpacks.group[0]", project=project, env=arm)
    assert named.code == 0, named.stderr
    [amd_target, arm_target] = tomllib.loads(lock.read_text())["target"]
    assert (amd_target["buildpack"], arm_target["buildpack"][0]["index"]) == (amd_entries, moved)


def test_a_lock_without_a_target_is_read_and_a_malformed_one_is_exit_3(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    local(layout.app / "bp", "me/bp")
    lock = tmp_path / "preparer.lock"
    assert preparer("-lock", str(lock), project=group("./bp")).code == 0
    text = lock.read_text()
    assert "[target]" in text
    # A lock an older preparer wrote: no [target], frozen on any target.
    old = "\n".join(line for line in text.splitlines() if not line.startswith(("[target]", "os =", "arch =")))
    lock.write_text(old + "\n")
    frozen = preparer("-lock", str(lock), project=group("./bp"), env={"CNB_PREPARER_PLATFORM": "linux/arm64"})
    assert frozen.code == 0, frozen.stderr
    assert lock.read_text() == old + "\n"  # a frozen run does not rewrite it
    lock.write_text(text.replace('arch = "', 'arch = "X'))
    bad = preparer("-lock", str(lock), project=group("./bp"))
    assert bad.code == 3, bad.stderr
    assert f"failed to read lock file {lock}: target.arch (line " in bad.stderr
    assert (
        "must be lower case letters and digits, as in linux/amd64/v1; rerun with -update-lock" in bad.stderr
    )


def test_the_dry_run_lists_what_each_buildpack_runs_on(
    preparer: Callable[..., Result], layout: Layout, registry: Registry
) -> None:
    local(layout.app / "arm", "me/arm", ARM64_ONLY)
    local(layout.app / "old", "me/old", '\n[[stacks]]\nid = "io.buildpacks.stacks.bionic"\n', api="0.9")
    local(layout.buildpacks / "me_any" / "1.0.0", "me/any")
    meta = layout.app / "meta"
    meta.mkdir()
    (meta / "buildpack.toml").write_text(
        buildpack_toml(
            "me/meta", "1.0.0", order='\n[[order]]\n[[order.group]]\nid = "me/any"\nversion = "1.0.0"\n'
        )
    )
    project = (
        group("./arm", "./old", "./meta", f"docker://{registry.ref('me/nowhere', 'latest')}")
        + '[[io.buildpacks.group]]\nid = "me/any"\nversion = "1.0.0"\n'
    )
    dry = preparer("-dry-run", project=project, env={"CNB_PREPARER_PLATFORM": "linux/arm64"})
    assert dry.code == 0, dry.stderr
    lines = dry.stdout.splitlines()
    shown = [
        (next(group for group in reversed(lines[:n]) if group.startswith("  group:")), line)
        for n, line in enumerate(lines)
        if line.startswith("    targets:")
    ]
    assert shown == [
        ("  group: ./arm (would fetch)", "    targets: linux/arm64, linux/arm64/v8"),
        (
            "  group: ./old (would fetch)",
            "    targets: from [[stacks]]: linux/amd64 (ubuntu 18.04)",
        ),
        (
            "  group: ./meta (would fetch)",
            "    targets: those of its groups' buildpacks (a composite)",
        ),
        ("  group: me/any@1.0.0 (present)", "    targets: from bin/: linux"),
    ], dry.stdout


def test_the_dry_run_and_the_report_show_the_target(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    local(layout.app / "arm", "me/arm", ARM64_ONLY)
    env = {"CNB_TARGET_OS": "linux", "CNB_TARGET_ARCH": "arm64", "CNB_TARGET_ARCH_VARIANT": "v8",
           "CNB_TARGET_DISTRO_NAME": "ubuntu", "CNB_TARGET_DISTRO_VERSION": "24.04"}  # fmt: skip
    dry = preparer("-dry-run", project=group("./arm"), env=env)
    assert dry.code == 0, dry.stderr
    assert (
        "  target: linux/arm64/v8 (CNB_TARGET_OS, CNB_TARGET_ARCH, CNB_TARGET_ARCH_VARIANT), ubuntu 24.04 (from "
        "CNB_TARGET_DISTRO_NAME, CNB_TARGET_DISTRO_VERSION)"
    ) in dry.stdout + dry.stderr
    report = tmp_path / "report.toml"
    done = preparer("-prepare-report", str(report), project=group("./arm"), env=env)
    assert done.code == 0, done.stderr
    assert tomllib.loads(report.read_text())["target"] == {
        "os": "linux", "arch": "arm64", "variant": "v8", "distro-name": "ubuntu", "distro-version": "24.04",
        "source": "CNB_TARGET_OS, CNB_TARGET_ARCH, CNB_TARGET_ARCH_VARIANT",
        "distro-source": "CNB_TARGET_DISTRO_NAME, CNB_TARGET_DISTRO_VERSION",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("name", "value", "code", "target"),
    [
        ("CNB_TARGET_OS", "linux", 0, ("linux", "amd64", "")),
        ("CNB_TARGET_ARCH", "arm64", 3, None),
        ("CNB_TARGET_ARCH_VARIANT", "v8", 3, None),
        ("CNB_TARGET_DISTRO_NAME", "ubuntu", 0, ("linux", "amd64", "", "ubuntu", "")),
        ("CNB_TARGET_DISTRO_VERSION", "24.04", 3, None),
    ],
)
def test_each_target_variable_alone_is_read_on_its_own_or_refused(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, name: str, value: str, code: int,
    target: tuple[str, ...] | None,
) -> None:  # fmt: skip
    """Without analyzed.toml: each variable over CNB_PREPARER_PLATFORM; one without what it needs is exit 3."""
    local(layout.app / "bp", "me/bp")
    report = tmp_path / "report.toml"
    env = {"CNB_PREPARER_PLATFORM": "linux/amd64", name: value}
    result = preparer("-prepare-report", str(report), project=group("./bp"), env=env)
    assert result.code == code, result.stderr
    if target is None:
        assert f"ERROR: failed to resolve inputs: {name} is set without CNB_TARGET_" in result.stderr
        assert not (layout.layers / "order.toml").exists()
        assert tomllib.loads(report.read_text())["error"]["code"] == 3
        return
    said = tomllib.loads(report.read_text())["target"]
    shown = (said["os"], said["arch"], said["variant"], said["distro-name"], said["distro-version"])
    assert shown[: len(target)] == target  # the os alone: the distribution is this machine's os-release
    if name == "CNB_TARGET_OS":
        assert said["source"] == "CNB_TARGET_OS; the architecture from CNB_PREPARER_PLATFORM"
    else:
        assert (said["source"], said["distro-source"]) == ("CNB_PREPARER_PLATFORM", name)


def test_analyzed_toml_is_read_where_the_flag_or_the_variable_names_it(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    local(layout.app / "arm", "me/arm", ARM64_ONLY)
    flagged, named = tmp_path / "flag" / "analyzed.toml", tmp_path / "env" / "analyzed.toml"
    for path, arch in ((flagged, "arm64"), (named, "amd64"), (layout.layers / "analyzed.toml", "s390x")):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'[run-image.target]\nos = "linux"\narch = "{arch}"\n')
    env = {"CNB_ANALYZED_PATH": str(named)}
    # The flag over the variable over <layers>/analyzed.toml.
    assert preparer("-analyzed", str(flagged), project=group("./arm"), env=env).code == 0
    refused = preparer(project=group("./arm"), env=env)
    assert refused.code == 1
    assert f"this build is linux/amd64 ({named} [run-image.target])" in refused.stderr
    default = preparer(project=group("./arm"))
    assert (
        f"this build is linux/s390x ({layout.layers / 'analyzed.toml'} [run-image.target])" in default.stderr
    )
    # Named and missing: a warning (as the detector's), and the platform's own target.
    missing = tmp_path / "none" / "analyzed.toml"
    ok = preparer(
        "-analyzed", str(missing), project=group("./arm"), env={"CNB_PREPARER_PLATFORM": "linux/arm64"}
    )
    assert ok.code == 0, ok.stderr
    assert f"Warning: no analyzed.toml at {missing} (-analyzed, CNB_ANALYZED_PATH)" in ok.stderr


def test_a_distribution_table_in_analyzed_toml_fills_in_nothing(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    """With [run-image.target.distro], an os or arch left out matches anything (a windows buildpack runs on a
    run image that says only "debian 12"), os-release is not read, and a version without a name is any
    distribution's."""
    local(layout.app / "win", "me/win", '\n[[targets]]\nos = "windows"\narch = "amd64"\n')
    analyzed = layout.layers / "analyzed.toml"
    analyzed.write_text('[run-image.target]\n[run-image.target.distro]\nname = "debian"\nversion = "12"\n')
    report = tmp_path / "report.toml"
    dry = preparer("-dry-run", project=group("./win"))
    assert (
        f"  target: any os/any architecture ({analyzed} [run-image.target]), debian 12 (from {analyzed}"
        in (dry.stdout)
    )
    ok = preparer("-prepare-report", str(report), project=group("./win"))
    assert ok.code == 0, ok.stderr
    said = tomllib.loads(report.read_text())["target"]
    assert (said["os"], said["arch"], said["distro-name"], said["distro-version"]) == ("", "", "debian", "12")
    local(layout.app / "jammy", "me/jammy",
          '\n[[targets]]\nos = "linux"\n[[targets.distros]]\nname = "ubuntu"\nversion = "24.04"\n')  # fmt: skip
    analyzed.write_text(
        '[run-image.target]\nos = "linux"\narch = "amd64"\n[run-image.target.distro]\nversion = "22.04"\n'
    )
    refused = preparer(project=group("./jammy"))
    assert refused.code == 1, refused.stderr
    assert (
        "it runs on linux (ubuntu 24.04); this build is linux/amd64, version 22.04 of any distribution "
        f"({analyzed} [run-image.target]; the distribution from {analyzed} [run-image.target])"
    ) in refused.stderr


def test_an_index_without_the_builds_platform_names_where_the_target_came_from(
    preparer: Callable[..., Result], layout: Layout, registry: Registry, tmp_path: Path
) -> None:
    """Each source of the target, named in the refusal of an index that has no image for it."""
    ref = registry.ref("me/sourced", "multi")
    two_platforms(tmp_path, ref)
    project = group(f"docker://{ref}")
    has = "in the index (it has: linux/amd64, linux/arm64)"
    variables = preparer(project=project, env={"CNB_TARGET_OS": "linux", "CNB_TARGET_ARCH": "s390x"})
    assert variables.code == 1, variables.stderr
    assert f"no image for linux/s390x (CNB_TARGET_OS, CNB_TARGET_ARCH) {has}" in variables.stderr
    analyzed = tmp_path / "analyzed.toml"
    analyzed.write_text('[run-image.target]\nos = "linux"\narch = "ppc64le"\n')
    named = preparer(
        "-analyzed", str(analyzed), project=project, env={"CNB_PREPARER_PLATFORM": "linux/amd64"}
    )
    assert named.code == 1, named.stderr
    assert f"no image for linux/ppc64le ({analyzed} [run-image.target]) {has}" in named.stderr
    assert not (layout.layers / "order.toml").exists()


def test_an_analyzed_toml_below_a_file_is_refused_not_taken_for_absent(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    # The detector takes analyzed.toml for absent only when opening it says so (ENOENT); a path through a file
    # fails its start-up ("failed to read analyzed file"). Read on, it was "no analyzed.toml" and the host's target.
    (layout.root / "layers-file").write_text("")
    analyzed = layout.root / "layers-file" / "analyzed.toml"
    for dry in ([], ["-dry-run"]):
        before = untouched(layout)
        result = preparer(
            *dry, "-analyzed", str(analyzed), project=group("urn:cnb:builder:examples/node@1.2.0")
        )
        assert result.code == 3, result.stderr
        assert (
            result.stderr.splitlines()[-1]
            == f"ERROR: failed to read analyzed.toml: {analyzed}: Not a directory"
        )
        assert untouched(layout) == before
        assert not (layout.layers / "order.toml").exists()
