"""Start-up of /cnb/lifecycle/preparer from the lifecycle image against `python -m preparer`, in the same run.

The image is built with `make image`'s scripts (they do nothing when up to date) and unpacked with umoci; its
preparer runs in a chroot of that root file system (where its loader path points), and `python -m preparer` from a
regular install runs through the same `chroot /` so that both pay the same exec. `-version` shows the fixed cost
of each; an env-only prepare shows a whole run. The commands take turns, run after run (every other round in
reverse order), so a busy machine slows them alike, and each ratio is the median of the rounds' pairs. Goals: the env-only run at most 1.2 x python's; its peak RSS at most 32 MiB. Also prints the image's
size and layer count. Needs root (chroot).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _util import PYTHON, ROOT, Timing, peak_tree_mib, preparer_env, report

RUNS = 15
GOAL = 1.2
RSS_GOAL_MIB = 32
BUILD = ROOT / "build"
CHROOT = shutil.which("chroot") or "/usr/sbin/chroot"
PROJECT = '[_]\nschema-version = "0.2"\n[[io.buildpacks.build.env]]\nname = "GREETING"\nvalue = "hello"\n'


def layers(layout: Path) -> list[dict[str, object]]:
    """The layers of the image tagged ``preparer`` in ``layout``."""
    index = json.loads((layout / "index.json").read_text())
    tags = {m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"] for m in index["manifests"]}
    manifest = json.loads(
        (layout / "blobs" / "sha256" / tags["preparer"].removeprefix("sha256:")).read_text()
    )
    return list(manifest["layers"])


def tree_mib(root: Path) -> float:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink()) / (1 << 20)


def main() -> None:
    if os.geteuid() != 0:
        print("image: skipped (the image's preparer runs in a chroot, which needs root)")
        return
    scripts = ROOT / "lifecycle-image"
    subprocess.run([scripts / "build-executable.sh", BUILD], check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run(
            [scripts / "build-image.sh", BUILD, work / "image"], check=True, stdout=subprocess.DEVNULL
        )
        image_layers = layers(work / "image")
        subprocess.run(["umoci", "unpack", "--image", f"{work / 'image'}:preparer", work / "bundle"],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        rootfs = work / "bundle" / "rootfs"
        print(f"image: {len(image_layers)} layers; the preparer's layer "
              f"{int(str(image_layers[-1]['size'])) / (1 << 20):.1f} MiB compressed, "
              f"/cnb/lifecycle/preparer{{,.d}} {tree_mib(rootfs / 'cnb' / 'lifecycle'):.1f} MiB on disk")  # fmt: skip

        # The build's directories inside the image's root file system, so that both sides see the same files.
        for name in ("workspace", "layers", "cnb/buildpacks"):
            (rootfs / name).mkdir(parents=True, exist_ok=True)
        (rootfs / "workspace" / "project.toml").write_text(PROJECT)
        (rootfs / "cnb" / "order.toml").write_text("[[order]]\n")
        flags = ["-layers", "/layers", "-platform", "/platform", "-buildpacks", "/cnb/buildpacks",
                 "-order", "/cnb/order.toml", "-download-cache", ""]  # fmt: skip
        in_image = [CHROOT, str(rootfs), "/cnb/lifecycle/preparer"]
        python = [CHROOT, "/", PYTHON, "-m", "preparer"]
        on_host = [
            "-app",
            str(rootfs / "workspace"),
            *(str(rootfs) + f if f.startswith("/") else f for f in flags),
        ]
        commands: dict[str, Sequence[str]] = {
            "image -version": [*in_image, "-version"],
            "python -version": [*python, "-version"],
            "image (env-only project.toml)": [*in_image, "-app", "/workspace", *flags],
            "python (env-only project.toml)": [*python, *on_host],
        }
        env = preparer_env()
        times: dict[str, list[float]] = {name: [] for name in commands}
        for number in range(
            RUNS
        ):  # every other round in reverse order: neither side always follows the other
            order = list(commands.items())
            for name, command in order if number % 2 == 0 else reversed(order):
                shutil.rmtree(rootfs / "platform", ignore_errors=True)
                start = time.perf_counter()
                subprocess.run(
                    command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                times[name].append(time.perf_counter() - start)
        median = {name: Timing(values) for name, values in times.items()}  # judged on the rounds' pairs
        print(f"(medians of {RUNS} alternated rounds, each run through chroot)")
        report("image -version", median["image -version"], "s", median["python -version"],
               "python -m preparer", GOAL)  # fmt: skip
        report("image (env-only project.toml)", median["image (env-only project.toml)"], "s",
               median["python (env-only project.toml)"], "python -m preparer", GOAL)  # fmt: skip
        shutil.rmtree(rootfs / "platform", ignore_errors=True)
        rss = peak_tree_mib(commands["image (env-only project.toml)"], env=env)
        report(
            "image (env-only project.toml): peak memory of the process tree",
            rss,
            "MiB",
            RSS_GOAL_MIB,
            f"the {RSS_GOAL_MIB} MiB budget",
            1.0,
        )


if __name__ == "__main__":
    main()
