"""Start-up: a whole preparer process on an env-only project.toml, against bare Python and `import typer`.

Every build pays the preparer's start-up, so the goal is at most 1.3 x the time of `python -c "import typer"`.
The commands take turns, run after run, so a busy machine slows them all alike and the ratio stays fair.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _util import PYTHON, build_layout, preparer_env, report

RUNS = 30
GOAL = 1.3
PROJECT = """[_]
schema-version = "0.2"
[[io.buildpacks.build.env]]
name = "GREETING"
value = "hello"
[[io.buildpacks.build.env]]
name = "MODE"
value = "production"
"""


def interleaved_medians(
    commands: dict[str, Sequence[str]], runs: int, env: dict[str, str], setup: Callable[[], None]
) -> dict[str, float]:
    """Median wall time of each command; one run of each per round (``setup`` before each, untimed)."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, command in commands.items():
            setup()
            start = time.perf_counter()
            subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        prepare = [*build_layout(root / "build", PROJECT), "-download-cache", str(root / "cache")]
        commands = {
            "python -c pass": [PYTHON, "-c", "pass"],
            "python -c 'import typer'": [PYTHON, "-c", "import typer"],
            "preparer -version": [PYTHON, "-m", "preparer", "-version"],
            "preparer (env-only project.toml)": prepare,
        }

        def clean() -> None:
            shutil.rmtree(root / "build" / "platform", ignore_errors=True)

        subprocess.run(prepare, env=preparer_env(), check=True, capture_output=True)  # warm the disk cache
        medians = interleaved_medians(commands, RUNS, preparer_env(), clean)
        for name, seconds in medians.items():
            print(f"{name}: {seconds * 1000:.1f} ms (median of {RUNS})")
        typer = medians["python -c 'import typer'"]
        report(
            "startup (env-only prepare)",
            medians["preparer (env-only project.toml)"],
            "s",
            typer,
            "import typer",
            GOAL,
        )
        print(f"(-version alone: ratio {medians['preparer -version'] / typer:.2f})")


if __name__ == "__main__":
    main()
