"""The lifecycle image: unpacked with umoci, and the preparer run inside it with nothing else (chroot).

The image is built once per test session by the same scripts `make image` runs (reused while the sources are
unchanged). Running it needs root (chroot, mounting /proc as a container runtime would).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from preparer import __version__
from tests.buildpacks import make_tgz
from tests.golden import BUILDER, ROOT, Layout, env_files, listing
from tests.plugins.cli import base_env, run_cli

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chroot and mount need root")
BUILD = ROOT / "build"
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"


def _sources_digest() -> str:
    sha = hashlib.sha256()
    for path in sorted([*(ROOT / "preparer").rglob("*.py"), *(ROOT / "lifecycle-image").iterdir(),
                        ROOT / "pyproject.toml"]):  # fmt: skip
        if path.is_file():
            sha.update(path.relative_to(ROOT).as_posix().encode() + path.read_bytes())
    return sha.hexdigest()[:16]


@pytest.fixture(scope="session")
def image() -> Path:
    """build/lifecycle-image, built by `make image`'s scripts unless the build of these sources is there."""
    BUILD.mkdir(exist_ok=True)
    with FileLock(str(BUILD / ".image.lock")):
        stamp = BUILD / f".image-{_sources_digest()}"
        if not stamp.exists():
            for old in BUILD.glob(".image-*"):
                old.unlink()
            script = ROOT / "lifecycle-image"
            subprocess.run([script / "build-executable.sh", BUILD], check=True, capture_output=True)
            subprocess.run([script / "build-image.sh", BUILD / "preparer", BUILD / "lifecycle-image"], check=True,
                           capture_output=True)  # fmt: skip
            stamp.touch()
    return BUILD / "lifecycle-image"


def unpack(image: Path, bundle: Path) -> Path:
    """The image's root file system, unpacked by umoci."""
    subprocess.run(
        ["umoci", "unpack", "--image", f"{image}:preparer", str(bundle)], check=True, capture_output=True
    )
    return bundle / "rootfs"


@pytest.fixture
def rootfs(image: Path, tmp_path: Path) -> Iterator[Path]:
    """The image's root file system, with /proc mounted while the test runs (as a container runtime does)."""
    root = unpack(image, tmp_path / "bundle")
    (root / "proc").mkdir(exist_ok=True)
    subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    try:
        yield root
    finally:
        subprocess.run(["umount", str(root / "proc")], check=False)


def chroot(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([CHROOT, str(root), "/cnb/lifecycle/preparer", *args], capture_output=True, text=True,
                          env=env or {}, check=False)  # fmt: skip


def test_the_image_holds_only_the_preparer_on_top_of_the_base(image: Path, tmp_path: Path) -> None:
    rootfs = unpack(image, tmp_path / "bundle")
    assert sorted(p.relative_to(rootfs).as_posix() for p in rootfs.rglob("*")) == [
        "cnb", "cnb/lifecycle", "cnb/lifecycle/preparer", "tmp",
    ]  # fmt: skip
    assert not (rootfs / "usr").exists() and not (rootfs / "lib").exists()  # no Python, no libc


def test_version_in_the_bare_root_file_system(rootfs: Path) -> None:
    result = chroot(rootfs, "-version")
    assert (result.returncode, result.stdout) == (0, __version__ + "\n"), result.stderr


def _app(root: Path) -> Layout:
    """The sample app and builder at the paths a build container uses, with a local buildpack archive."""
    layout = Layout(root)
    shutil.copytree(ROOT / "fixtures" / "demo" / "app", layout.app)
    shutil.copytree(BUILDER, root / "cnb", dirs_exist_ok=True)
    make_tgz(layout.app / "vendor" / "local.tgz", "example/local", "0.9.0")
    shutil.rmtree(layout.app / "vendor" / "local.tgz.src")
    project = (layout.app / "project.toml").read_text()
    (layout.app / "project.toml").write_text(
        project + '\n[[io.buildpacks.group]]\nuri = "vendor/local.tgz"\n'
    )
    return layout


def test_a_full_prepare_inside_matches_the_python_package(rootfs: Path, tmp_path: Path) -> None:
    inside = _app(rootfs)
    env = {"CNB_PLATFORM_API": "0.15", "NO_COLOR": "1"}
    flags = ["-app", "/workspace", "-layers", "/layers", "-platform", "/platform", "-buildpacks", "/cnb/buildpacks",
             "-order", "/cnb/order.toml", "-download-cache", "", "my-app"]  # fmt: skip
    contained = chroot(rootfs, *flags, env=env)
    assert contained.returncode == 0, contained.stderr

    outside = _app(tmp_path / "python")
    (outside.root / "layers").mkdir()
    python = run_cli([a.replace("/workspace", str(outside.app)).replace("/layers", str(outside.layers))
                      .replace("/platform", str(outside.platform)).replace("/cnb", str(outside.root / "cnb"))
                      for a in flags], base_env(tmp_path))  # fmt: skip
    assert python.code == 0, python.stderr

    assert (inside.layers / "order.toml").read_bytes() == (outside.layers / "order.toml").read_bytes()
    assert (
        env_files(inside)
        == env_files(outside)
        == {"GREETING": "hello from project.toml", "NODE_ENV": "production"}
    )
    assert listing(inside.app) == listing(outside.app)
    assert listing(inside.buildpacks) == listing(outside.buildpacks)
    assert "example_local/0.9.0/bin/build" in listing(inside.buildpacks)
    assert contained.stdout == python.stdout.replace(str(outside.root), "")
    assert contained.stderr == python.stderr
