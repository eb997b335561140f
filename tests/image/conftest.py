"""Fixtures for the lifecycle image: built once per session by `make image`'s scripts, unpacked with umoci, run
in a chroot of its root file system with nothing else in it, as a build container would run it.

Running it needs root (chroot, mounting /proc as a container runtime does); `make test` runs as root.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from filelock import FileLock

from tests.golden import ROOT
from tests.plugins.cli import Result

BUILD = ROOT / "build"
SCRIPTS = ROOT / "lifecycle-image"
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"


def run(*args: str | Path) -> str:
    """Run a command; its stdout, or an assertion error with its output."""
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, check=False)
    if proc.returncode:
        raise AssertionError(
            f"{' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    return proc.stdout


@pytest.fixture(scope="session")
def image() -> Path:
    """build/lifecycle-image (tag `preparer`), built by the scripts `make image` runs, reused while up to date."""
    if os.geteuid() != 0:
        pytest.fail("the lifecycle image tests need root (chroot and mount); `make test` runs as root")
    BUILD.mkdir(exist_ok=True)
    layout = BUILD / "lifecycle-image"
    with FileLock(str(BUILD / ".image.lock")):
        run(SCRIPTS / "build-executable.sh", BUILD)  # does nothing when build/preparer is up to date
        made_of = [
            *sorted(p.name for p in BUILD.glob(".preparer-*")),
            (SCRIPTS / "build-image.sh").read_text(),
        ]
        stamp = BUILD / f".image-{hashlib.sha256(repr(made_of).encode()).hexdigest()[:16]}"
        if not stamp.exists() or not (layout / "index.json").exists():
            for old in BUILD.glob(".image-*"):
                old.unlink()
            run(SCRIPTS / "build-image.sh", BUILD / "preparer", layout)
            stamp.touch()
    return layout


def unpack(image: Path, bundle: Path) -> Path:
    """The image's root file system, unpacked by umoci into ``bundle``."""
    run("umoci", "unpack", "--image", f"{image}:preparer", bundle)
    return bundle / "rootfs"


@contextlib.contextmanager
def proc_mounted(root: Path) -> Iterator[Path]:
    """``root`` with /proc mounted (as a container runtime does), unmounted afterwards."""
    (root / "proc").mkdir(exist_ok=True)
    run("mount", "-t", "proc", "proc", root / "proc")
    try:
        yield root
    finally:
        subprocess.run(["umount", str(root / "proc")], check=False)


@pytest.fixture
def rootfs(image: Path, tmp_path: Path) -> Iterator[Path]:
    """The image's root file system, with /proc mounted while the test runs."""
    with proc_mounted(unpack(image, tmp_path / "bundle")) as root:
        yield root


def in_image(root: Path, *args: str, env: dict[str, str] | None = None, user: str | None = None) -> Result:
    """Run ``/cnb/lifecycle/preparer args`` chrooted in ``root`` with exactly ``env``, as ``user`` (uid:gid)."""
    command = [CHROOT, *([f"--userspec={user}"] if user else []), str(root), "/cnb/lifecycle/preparer", *args]
    proc = subprocess.run(command, capture_output=True, text=True, env=env or {}, check=False, timeout=120)
    return Result(proc.returncode, proc.stdout, proc.stderr)
