"""Start-up of the self-contained executable (build/preparer) against `python -m preparer`, in the same run.

`-version` shows the fixed cost of each (the executable unpacks its bundle into $TMPDIR on every start); an
env-only prepare shows a whole run. The commands take turns, run after run, so a busy machine slows them alike.
Also prints the executable's size and the image layer it adds. Builds both first (`make image`'s scripts; they
do nothing when up to date).
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from _util import PYTHON, ROOT, build_layout, preparer_env, report

RUNS = 15
#: Needing no Python in the image costs start-up (two unpackings per run); at most this much of a regular install's.
GOAL = 3.0
BUILD = ROOT / "build"
EXECUTABLE = BUILD / "preparer"
PROJECT = '[_]\nschema-version = "0.2"\n[[io.buildpacks.build.env]]\nname = "GREETING"\nvalue = "hello"\n'


def image_layer_mib(layout: Path) -> float:
    """The compressed size of the layer the image adds on top of its base."""
    index = json.loads((layout / "index.json").read_text())
    tags = {m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"] for m in index["manifests"]}
    manifest = json.loads(
        (layout / "blobs" / "sha256" / tags["preparer"].removeprefix("sha256:")).read_text()
    )
    return int(manifest["layers"][-1]["size"]) / (1 << 20)


def main() -> None:
    scripts = ROOT / "lifecycle-image"
    subprocess.run([scripts / "build-executable.sh", BUILD], check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        subprocess.run(
            [scripts / "build-image.sh", EXECUTABLE, root / "image"], check=True, stdout=subprocess.DEVNULL
        )
        print(f"executable: {EXECUTABLE.stat().st_size / (1 << 20):.1f} MiB; "
              f"image layer: {image_layer_mib(root / 'image'):.1f} MiB compressed")  # fmt: skip

        flags = [*build_layout(root / "build", PROJECT)[1:], "-download-cache", str(root / "cache")]
        python_run = [PYTHON, "-m", "preparer", *flags]
        commands: dict[str, Sequence[str]] = {
            "executable -version": [str(EXECUTABLE), "-version"],
            "python -m preparer -version": [PYTHON, "-m", "preparer", "-version"],
            "executable (env-only project.toml)": [str(EXECUTABLE), *flags],
            "python -m preparer (env-only project.toml)": python_run,
        }
        shm = Path("/dev/shm")
        if shm.is_dir():
            commands["executable -version, TMPDIR on tmpfs"] = [
                "env", f"TMPDIR={shm}", str(EXECUTABLE), "-version"
            ]  # fmt: skip
        env = preparer_env()
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(RUNS):
            for name, command in commands.items():
                shutil.rmtree(root / "build" / "platform", ignore_errors=True)
                start = time.perf_counter()
                subprocess.run(
                    command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                times[name].append(time.perf_counter() - start)
        median = {name: statistics.median(values) for name, values in times.items()}
        print(f"(medians of {RUNS} runs)")
        for what in ("-version", "(env-only project.toml)"):
            report(f"executable {what}", median[f"executable {what}"], "s",
                   median[f"python -m preparer {what}"], "python -m preparer", GOAL)  # fmt: skip
        if "executable -version, TMPDIR on tmpfs" in median:
            print(
                f"executable -version with TMPDIR on tmpfs: {median['executable -version, TMPDIR on tmpfs']:.3f} s"
            )


if __name__ == "__main__":
    main()
