"""A full disk as a user meets it: small tmpfs file systems mounted where the build's directories are, so that the
preparer's writes fail with a real ENOSPC; through the CLI.

Mounting needs root (or CAP_SYS_ADMIN): where it is not permitted, these tests are skipped, saying so. EDQUOT (a
quota) is not made here: tmpfs quotas need Linux 6.6 and a mount option this machine may lack, and the preparer
treats it as ENOSPC by its errno alone (:func:`preparer._fs.full_disk`), which the unit test below checks."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from preparer._fs import full_disk, no_space
from tests.buildpacks import make_tgz
from tests.golden import Layout, listing
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.plugins.registry import Registry, build_package, push, to_cnb
from tests.projects import group

#: A buildpack of about 200 KiB that does not compress: larger than what is left on the small disks below.
PAYLOAD = os.urandom(200_000)


Mount = Callable[[Path, str], None]


@pytest.fixture
def mount_tmpfs() -> Iterator[Mount]:
    """Mount a tmpfs of ``size`` on a directory, keeping what was in it (copied in); unmounted after the test."""
    mounted: list[Path] = []

    def mount(directory: Path, size: str) -> None:
        saved = directory.with_name(directory.name + ".saved")
        directory.mkdir(parents=True, exist_ok=True)
        shutil.move(directory, saved)
        directory.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(directory)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            pytest.skip(f"a tmpfs cannot be mounted here ({done.stderr.strip()}): a full disk is not made")
        mounted.append(directory)
        shutil.copytree(saved, directory, dirs_exist_ok=True, symlinks=True)
        shutil.rmtree(saved)

    yield mount
    for directory in reversed(mounted):
        subprocess.run(["umount", str(directory)], check=False)


def fill(directory: Path) -> None:
    """Use up what is left of the file system of ``directory`` (with a file outside what the preparer reads)."""
    with (directory / ".filler").open("wb", buffering=0) as out:  # unbuffered: closing it writes nothing more
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError as err:
            assert err.errno == errno.ENOSPC


def served(server: FileServer) -> str:
    make_tgz(server.root / "bp.tgz", "me/big", payload=PAYLOAD)
    return group(server.url("bp.tgz"))


def cached_trees(cache: Path) -> list[str]:
    return [
        p for p in listing(cache) if p.startswith("trees/sha256/") and p.count("/") == 3 and p.endswith("/")
    ]


def test_a_full_buildpacks_disk_keeps_the_cached_copy_and_says_the_disk_is_full(
    preparer: Callable[..., Result],
    http_server: FileServer,
    layout: Layout,
    tmp_path: Path,
    mount_tmpfs: Mount,
) -> None:
    project = served(http_server)
    assert preparer(project=project).code == 0  # the download cache is warm
    shutil.rmtree(layout.buildpacks / "me_big")
    trees = cached_trees(tmp_path / "cache")
    assert len(trees) == 1
    mount_tmpfs(layout.buildpacks, "1m")
    fill(layout.buildpacks)
    before = listing(layout.root)

    result = preparer()

    assert result.code == 1, result.stderr
    assert (
        f"ERROR: failed to install {http_server.url('bp.tgz')}: no space left on device in <buildpacks> "
        f"({layout.buildpacks})"
    ) in result.stderr
    assert "download cache" not in result.stderr  # never blamed, never emptied
    assert cached_trees(tmp_path / "cache") == trees
    assert listing(layout.root) == before


def test_a_full_buildpacks_disk_without_a_cached_copy(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout, mount_tmpfs: Mount
) -> None:
    mount_tmpfs(layout.buildpacks, "1m")
    fill(layout.buildpacks)
    (layout.app / "project.toml").write_text(served(http_server))
    before = listing(layout.root)
    result = preparer("-download-cache", "")
    assert result.code == 1, result.stderr
    assert f"no space left on device in <buildpacks> ({layout.buildpacks})" in result.stderr
    assert listing(layout.root) == before


@pytest.mark.parametrize(("flag", "place"), [("layers", "<layers>"), ("platform", "<platform>")])
def test_a_full_layers_or_platform_disk_names_it(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout, mount_tmpfs: Mount,
    flag: str, place: str,
) -> None:  # fmt: skip
    directory = getattr(layout, flag)
    mount_tmpfs(directory, "64k")
    fill(directory)
    project = served(http_server) + "[[io.buildpacks.build.env]]\nname = 'A'\nvalue = 'a'\n"
    (layout.app / "project.toml").write_text(project)
    before = listing(layout.root)
    result = preparer()
    assert result.code == 1, result.stderr
    assert f"no space left on device in {place} ({directory})" in result.stderr
    assert listing(layout.root) == before  # the buildpack is not installed either: all or nothing


def test_a_full_download_cache_is_a_warning_and_the_run_goes_on(
    preparer: Callable[..., Result],
    http_server: FileServer,
    layout: Layout,
    tmp_path: Path,
    mount_tmpfs: Mount,
) -> None:
    cache = tmp_path / "cache"
    mount_tmpfs(cache, "100k")
    result = preparer(project=served(http_server))
    assert result.code == 0, result.stderr
    warning = (
        f"Warning: no space left on device in the download cache ({cache}): {http_server.url('bp.tgz')} is "
        "downloaded without it"
    )
    assert result.warnings == [warning]
    assert (layout.buildpacks / "me_big" / "1.0.0" / "data.bin").read_bytes() == PAYLOAD


# A .cnb over http is kept whole in the cache, and an image's blobs are kept as they are pulled: the same rules.


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory, registry: Registry) -> tuple[Path, str]:
    """me/big as a buildpackage of about 200 KiB that does not compress: a .cnb file, and an image pushed."""
    work = tmp_path_factory.mktemp("packaged")
    package = build_package(work, [("me/big", "1.0.0", "")], ("me/big", "1.0.0"), payload=PAYLOAD)
    push(package.layout, "latest", registry.ref("me/big", "1"))
    return to_cnb(package.layout, "latest", work / "big.cnb"), registry.ref("me/big", "1")


def package_source(kind: str, packaged: tuple[Path, str], server: FileServer) -> tuple[str, str]:
    """The project's ``uri`` for the .cnb over http or the image, and how a message names it."""
    cnb, image = packaged
    if kind == "cnb":
        shutil.copy(cnb, server.root / "big.cnb")
        return server.url("big.cnb"), server.url("big.cnb")
    return f"docker://{image}", image


def without_cache_warning(kind: str, cache: Path, source: str) -> str:
    if kind == "cnb":
        return f"Warning: no space left on device in the download cache ({cache}): {source} is downloaded without it"
    return (
        f"Warning: no space left on device in the download cache ({cache}): {source} is pulled without it (and so "
        "are the run's other images)"
    )


@pytest.mark.parametrize("filled", [False, True], ids=["too-small", "already-full"])
@pytest.mark.parametrize("kind", ["cnb", "image"])
def test_a_full_download_cache_is_a_warning_for_a_cnb_and_an_image_too(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout, tmp_path: Path,
    mount_tmpfs: Mount, packaged: tuple[Path, str], kind: str, filled: bool,
) -> None:  # fmt: skip
    uri, source = package_source(kind, packaged, http_server)
    cache = tmp_path / "cache"
    mount_tmpfs(cache, "100k")
    if filled:  # nothing more fits: not even the image's manifest
        fill(cache)
    result = preparer(project=group(uri))
    assert result.code == 0, result.stderr
    assert result.warnings == [
        without_cache_warning(kind, cache, source)
    ]  # once, for every blob of the image
    assert (layout.buildpacks / "me_big" / "1.0.0" / "data.bin").read_bytes() == PAYLOAD
    assert "ERROR" not in result.stderr


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
@pytest.mark.parametrize("kind", ["cnb", "image"])
def test_a_full_buildpacks_disk_names_it_for_a_cnb_and_an_image_too(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout, tmp_path: Path,
    mount_tmpfs: Mount, packaged: tuple[Path, str], kind: str, warm: bool,
) -> None:  # fmt: skip
    uri, source = package_source(kind, packaged, http_server)
    (layout.app / "project.toml").write_text(group(uri))
    cache = tmp_path / "cache"
    if warm:  # the download cache holds the package: it is kept, never blamed
        assert preparer().code == 0
        shutil.rmtree(layout.buildpacks / "me_big")
    cached = listing(cache)
    mount_tmpfs(layout.buildpacks, "1m")
    fill(layout.buildpacks)
    before = listing(layout.root)
    result = preparer() if warm else preparer("-download-cache", "")
    assert result.code == 1, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to install {source}: no space left on device in <buildpacks> ({layout.buildpacks})"
    )
    assert "download cache" not in result.stderr
    assert listing(layout.root) == before
    assert listing(cache) == cached


def test_buildpacks_that_cannot_be_written_is_exit_3_before_any_request(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout, mount_tmpfs: Mount
) -> None:
    mount_tmpfs(layout.buildpacks, "1m")
    subprocess.run(["mount", "-o", "remount,ro", str(layout.buildpacks)], check=True)
    result = preparer(project=served(http_server))
    assert result.code == 3, result.stderr
    assert (
        f"ERROR: failed to resolve inputs: -buildpacks {layout.buildpacks}: {layout.buildpacks} cannot be written, "
        "and the buildpacks the run fetches are installed there"
    ) in result.stderr
    assert http_server.requests == []


def test_buildpacks_that_cannot_be_written_is_fine_when_nothing_is_fetched(
    preparer: Callable[..., Result], layout: Layout, mount_tmpfs: Mount
) -> None:
    mount_tmpfs(layout.buildpacks, "1m")
    subprocess.run(["mount", "-o", "remount,ro", str(layout.buildpacks)], check=True)
    bp_id = "examples/procfile"  # in fixtures/builder
    result = preparer(project=group(bp_id))
    assert result.code == 0, result.stderr


def test_a_quota_is_a_full_disk_too() -> None:
    """EDQUOT is not made for real here (see the module's docstring): the error is built as the kernel gives it."""
    quota = OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), "/cnb/buildpacks/x")
    try:
        try:
            raise quota
        except OSError as err:
            raise RuntimeError("wrapped") from err
    except RuntimeError as wrapped:
        assert full_disk(wrapped) is quota
    assert no_space(quota, "<buildpacks>", "/cnb/buildpacks") == (
        f"no space left on device in <buildpacks> (/cnb/buildpacks): the disk quota of uid {os.geteuid()} is used up"
    )
    assert full_disk(OSError(errno.EACCES, "denied")) is None
