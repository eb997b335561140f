"""Helpers shared by the benchmark scenarios: timing whole processes, peak memory, printing ratios."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Self

ROOT = Path(__file__).resolve().parent.parent
#: The Python that runs the preparer: a regular (non-editable) install, as users have it (see the Makefile).
PYTHON = os.environ.get("BENCH_PYTHON", sys.executable)
#: The ``preparer`` console script of that install: the command as users run it.
PREPARER = str(Path(PYTHON).with_name("preparer"))


def median_seconds(command: Sequence[str], runs: int, env: dict[str, str] | None = None,
                   setup: Callable[[], None] | None = None) -> float:  # fmt: skip
    """The median wall time of ``command`` over ``runs`` runs (``setup`` runs before each, untimed)."""
    times = []
    for _ in range(runs):
        if setup:
            setup()
        start = time.perf_counter()
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def children_cpu() -> float:
    """User + system seconds of this process's finished child processes so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(action: Callable[[], object]) -> float:
    """Seconds taken by ``action``."""
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def peak_rss_mib(command: Sequence[str], env: dict[str, str] | None = None) -> float:
    """Peak resident memory of ``command``, in MiB, measured in a fresh child process."""
    script = (
        "import resource, subprocess, sys\n"
        "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL)\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    out = subprocess.run(
        [PYTHON, "-c", script, *command], env=env, check=True, capture_output=True, text=True
    )
    return int(out.stdout.strip()) / 1024


class Timing(float):
    """The median of one side's rounds (it is that float), every round kept: a side and its baseline take turns,
    so the rounds pair up, and the ratio is judged on the pairs (their median, with their spread)."""

    times: tuple[float, ...]

    def __new__(cls, times: Sequence[float]) -> Self:
        timing = super().__new__(cls, statistics.median(times))
        timing.times = tuple(times)
        return timing


def verdict(ratio: float, goal: float) -> str:
    return "MET" if ratio <= goal else "MISSED"


def report(name: str, value: float, unit: str, baseline: float, baseline_name: str, goal: float) -> bool:
    """Print one line ``name: value vs baseline -> ratio (spread) (goal) MET|MISSED``; return whether the goal was
    met. Two :class:`Timing` of as many rounds are judged on the median of their pairs' ratios, the spread being
    the lowest and highest pair; otherwise on the ratio of the two values."""
    spread = ""
    if isinstance(value, Timing) and isinstance(baseline, Timing) and len(value.times) == len(baseline.times):
        ratios = sorted(v / b for v, b in zip(value.times, baseline.times, strict=True) if b)
        ratio = statistics.median(ratios) if ratios else float("inf")
        spread = f" (pairs {ratios[0]:.2f}-{ratios[-1]:.2f}, n={len(ratios)})" if ratios else ""
    else:
        ratio = value / baseline if baseline else float("inf")
        if isinstance(value, Timing):
            spread = f" (rounds {min(value.times):.3f}-{max(value.times):.3f} {unit}, n={len(value.times)})"
    print(
        f"{name}: {value:.3f} {unit} vs {baseline:.3f} {unit} ({baseline_name}) -> ratio {ratio:.2f}{spread} "
        f"(goal <= {goal}) {verdict(ratio, goal)}",
        flush=True,
    )
    return ratio <= goal


def floor(name: str, value: Timing, baseline: Timing, baseline_name: str) -> None:
    """Print the line of a floor: what the least program doing a row's work takes, as a ratio to the row's baseline
    (median of the pairs, with their spread), so that a goal the floor is above reads as such. It has no goal."""
    ratios = sorted(v / b for v, b in zip(value.times, baseline.times, strict=False) if b)
    spread = f" (pairs {ratios[0]:.2f}-{ratios[-1]:.2f}, n={len(ratios)})" if ratios else ""
    ratio = statistics.median(ratios) if ratios else float("inf")
    print(f"{name}: {value:.3f} s vs {baseline:.3f} s ({baseline_name}) -> ratio {ratio:.2f}{spread} (a floor: no goal)",
          flush=True)  # fmt: skip


def preparer_env(**extra: str) -> dict[str, str]:
    """The environment a build container gives the preparer."""
    return os.environ | {"CNB_PLATFORM_API": "0.15", "NO_COLOR": "1"} | extra


def build_layout(root: Path, project: str) -> list[str]:
    """A fresh build layout at ``root`` (the sample builder, an app with ``project``); the preparer command on it."""
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(ROOT / "fixtures" / "builder" / "cnb", root / "cnb")
    (root / "workspace").mkdir()
    (root / "workspace" / "project.toml").write_text(project)
    return [
        PREPARER, "-app", str(root / "workspace"), "-layers", str(root / "layers"),
        "-platform", str(root / "platform"), "-buildpacks", str(root / "cnb" / "buildpacks"),
        "-order", str(root / "cnb" / "order.toml"),
    ]  # fmt: skip


def group(uris: Sequence[str]) -> str:
    """A project.toml whose group fetches ``uris``."""
    return '[_]\nschema-version = "0.2"\n' + "".join(f'[[io.buildpacks.group]]\nuri = "{u}"\n' for u in uris)
