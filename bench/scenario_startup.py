"""Start-up: a whole preparer process on an env-only project.toml, against bare Python and `import typer`.

Every build pays the preparer's start-up, so the goal is at most 1.2 x the time of `python -c "import typer"`.
The preparer runs as users run it: the `preparer` console script of a regular install. The commands take turns,
run after run (every other round in reverse order), so a busy machine slows them all alike; the ratio is the median
of the rounds' pairs, with their spread.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from _util import PREPARER, PYTHON, Timing, build_layout, children_cpu, preparer_env, report

RUNS = 30
GOAL = 1.15
PROJECT = """[_]
schema-version = "0.2"
[[io.buildpacks.build.env]]
name = "GREETING"
value = "hello"
[[io.buildpacks.build.env]]
name = "MODE"
value = "production"
"""


def interleaved(
    commands: dict[str, Sequence[str]], runs: int, env: dict[str, str], setup: Callable[[], None]
) -> dict[str, tuple[Timing, Timing]]:
    """Wall time and CPU time (user + system) of each command's runs (:class:`Timing`: the median, every run kept),
    one run of each per round, every other round in reverse order: run ``i`` of two commands is a pair.

    ``setup`` runs before each run, untimed. CPU time hardly moves with other load on the machine, so its ratio
    is a check on the wall-time ratio when the machine is busy.
    """
    wall: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    for number in range(runs):
        order = list(commands.items())
        for name, command in order if number % 2 == 0 else reversed(order):
            setup()
            before = children_cpu()
            start = time.perf_counter()
            subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(children_cpu() - before)
    return {name: (Timing(wall[name]), Timing(cpu[name])) for name in commands}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        prepare = [*build_layout(root / "build", PROJECT), "-download-cache", str(root / "cache")]
        commands = {
            "python -c pass": [PYTHON, "-c", "pass"],
            "python -c 'import typer'": [PYTHON, "-c", "import typer"],
            "preparer -version": [PREPARER, "-version"],
            "preparer (env-only project.toml)": prepare,
        }

        def clean() -> None:
            shutil.rmtree(root / "build" / "platform", ignore_errors=True)

        subprocess.run(prepare, env=preparer_env(), check=True, capture_output=True)  # warm the disk cache
        medians = interleaved(commands, RUNS, preparer_env(), clean)
        for name, (wall, cpu) in medians.items():
            print(f"{name}: {wall * 1000:.1f} ms wall, {cpu * 1000:.1f} ms CPU (medians of {RUNS})")
        typer_wall, typer_cpu = medians["python -c 'import typer'"]
        prepare_wall, prepare_cpu = medians["preparer (env-only project.toml)"]
        report("startup (env-only prepare)", prepare_wall, "s", typer_wall, "import typer", GOAL)
        print(
            f"(CPU time ratio {prepare_cpu / typer_cpu:.2f}; -version alone: wall ratio "
            f"{medians['preparer -version'][0] / typer_wall:.2f}; load average {os.getloadavg()[0]:.1f})"
        )


if __name__ == "__main__":
    main()
