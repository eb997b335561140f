"""Fixtures for the lifecycle image: built once per session by `make image`'s scripts, unpacked with umoci, and
run under runc (Debian's package) with the runtime config of a hardened build pod: read-only root file system,
``noNewPrivileges``, no capabilities, the build user (uid/gid 1000) unless a test asks for root, no network
namespace of its own (the loopback servers of the tests are reachable), the build's directories as bind mounts,
and ``/tmp`` a ``noexec`` tmpfs or not writable at all.

Running it needs root (runc creates namespaces and mounts); `make test` runs as root.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from filelock import FileLock

from tests.golden import ROOT
from tests.plugins.cli import Result

BUILD = ROOT / "build"
SCRIPTS = ROOT / "lifecycle-image"
RUNC = shutil.which("runc") or "/usr/sbin/runc"
PREPARER = "/cnb/lifecycle/preparer"


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
        pytest.fail("the lifecycle image tests need root (runc); `make test` runs as root")
    BUILD.mkdir(exist_ok=True)
    layout = BUILD / "lifecycle-image"
    with FileLock(str(BUILD / ".image.lock")):
        run(SCRIPTS / "build-executable.sh", BUILD)  # does nothing when build/lifecycle is up to date
        made_of = [
            *sorted(p.name for p in BUILD.glob(".preparer-*")),
            (SCRIPTS / "build-image.sh").read_text(),
        ]
        stamp = BUILD / f".image-{hashlib.sha256(repr(made_of).encode()).hexdigest()[:16]}"
        if not stamp.exists() or not (layout / "index.json").exists():
            for old in BUILD.glob(".image-*"):
                old.unlink()
            run(SCRIPTS / "build-image.sh", BUILD, layout)
            stamp.touch()
    return layout


def unpack(image: Path, bundle: Path, tag: str = "preparer") -> Path:
    """The image's root file system, unpacked by umoci into ``bundle``."""
    run("umoci", "unpack", "--image", f"{image}:{tag}", bundle)
    return bundle / "rootfs"


@pytest.fixture(scope="session")
def rootfs(image: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's root file system, unpacked once per test process; containers only ever mount it read-only."""
    return unpack(image, tmp_path_factory.mktemp("image") / "bundle")


#: What a container runtime gives a container by default that a hardened pod drops; a run as root that gives
#: files to the build user (``-uid``/``-gid``) needs these back.
CHOWN_CAPABILITIES = ("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER")
_RUNS = itertools.count()


@dataclass
class Pod:
    """The runtime config of one build container, as a hardened pod has it.

    ``binds`` maps a path in the container to a host directory or file (``readonly`` names those mounted
    read-only); ``tmp`` is ``"noexec"`` (a tmpfs mounted ``noexec,nosuid,nodev``) or ``"none"`` (no mount: the
    image's ``/tmp`` on the read-only root, so nothing can be written there).
    """

    user: tuple[int, int] = (1000, 1000)
    capabilities: tuple[str, ...] = ()
    binds: dict[str, Path] = field(default_factory=dict)
    readonly: frozenset[str] = frozenset()
    tmp: str = "noexec"

    def config(self, root: Path, args: list[str], env: Mapping[str, str]) -> dict[str, object]:
        """The OCI runtime config (config.json) of a run of ``args`` with exactly ``env``."""
        caps = list(self.capabilities)
        mounts: list[dict[str, object]] = [
            {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        ]  # fmt: skip
        if self.tmp == "noexec":
            mounts.append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
                           "options": ["nosuid", "nodev", "noexec", "mode=1777", "size=65536k"]})  # fmt: skip
        for target, source in sorted(self.binds.items()):
            options = ["rbind", "nosuid", "nodev", "ro" if target in self.readonly else "rw"]
            mounts.append({"destination": target, "type": "bind", "source": str(source), "options": options})
        return {
            "ociVersion": "1.0.2",
            "process": {
                "terminal": False,
                "user": {"uid": self.user[0], "gid": self.user[1]},
                "args": args,
                "env": [f"{name}={value}" for name, value in env.items()],
                "cwd": "/",
                "capabilities": dict.fromkeys(("bounding", "effective", "permitted", "inheritable"), caps),
                "noNewPrivileges": True,
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            },
            "root": {"path": str(root), "readonly": True},
            "hostname": "build",
            "mounts": mounts,
            "linux": {
                # No network namespace: the host's, so that the tests' servers on 127.0.0.1 are reachable.
                "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount")],
                "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug"],
                "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
            },
        }


def in_image(
    root: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    pod: Pod | None = None,
    program: str = PREPARER,
) -> Result:
    """Run ``program args`` (by default ``/cnb/lifecycle/preparer``) under runc, on the image's ``root`` file
    system, with exactly ``env``, in ``pod`` (by default: the build user, no capabilities, a noexec /tmp)."""
    pod = pod or Pod()
    name = f"preparer-test-{os.getpid()}-{next(_RUNS)}"
    bundle = root.parent / "runs" / name
    bundle.mkdir(parents=True)
    try:
        (bundle / "config.json").write_text(json.dumps(pod.config(root, [program, *args], env or {})))
        state = root.parent / "runc-state"
        proc = subprocess.run([RUNC, "--root", str(state), "run", "--bundle", str(bundle), name],
                              capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
    finally:
        subprocess.run([RUNC, "--root", str(root.parent / "runc-state"), "delete", "--force", name],
                       capture_output=True, check=False)  # fmt: skip
        shutil.rmtree(bundle, ignore_errors=True)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def build_pod(
    layout_root: Path,
    user: tuple[int, int] = (1000, 1000),
    capabilities: tuple[str, ...] = (),
    tmp: str = "noexec",
) -> Pod:
    """A pod whose build directories are those of the layout at ``layout_root`` (tests.golden.Layout): /workspace,
    /layers, /platform and /cnb/buildpacks writable, /cnb/order.toml and /certs read-only; for a user other than
    root they belong to that user, as a pod's volumes do with ``fsGroup``."""
    binds = {"/workspace": layout_root / "workspace", "/layers": layout_root / "layers",
             "/platform": layout_root / "platform", "/cnb/buildpacks": layout_root / "cnb" / "buildpacks",
             "/cnb/order.toml": layout_root / "cnb" / "order.toml", "/certs": layout_root / "certs"}  # fmt: skip
    for target in ("/workspace", "/layers", "/platform", "/cnb/buildpacks", "/certs"):
        binds[target].mkdir(parents=True, exist_ok=True)
    if user != (0, 0):
        for target in ("/workspace", "/layers", "/platform", "/cnb/buildpacks"):
            for path in [binds[target], *binds[target].rglob("*")]:
                os.lchown(path, *user)
    readonly = frozenset({"/cnb/order.toml", "/certs"})
    return Pod(user=user, capabilities=capabilities, binds=binds, readonly=readonly, tmp=tmp)
