"""Helpers shared by the benchmark scenarios: timing whole processes, peak memory, printing ratios."""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self

ROOT = Path(__file__).resolve().parent.parent
#: The Python that runs the preparer: a regular (non-editable) install, as users have it (see the Makefile).
PYTHON = os.environ.get("BENCH_PYTHON", sys.executable)
#: The ``preparer`` console script of that install: the command as users run it.
PREPARER = str(Path(PYTHON).with_name("preparer"))
#: The last release's figure of each row (a ratio, or MiB for memory rows), kept in the repository: every row is
#: printed beside it, and marked when it is more than :data:`WORSE_BY` worse. ``BENCH_RECORD=<release> make
#: bench`` writes the figures measured into it, when a release is measured.
LAST_RELEASE = ROOT / "bench" / "last-release.json"
#: How much worse than the last release a row may be before it is marked (a tenth: the noise of a quiet machine).
WORSE_BY = 0.10


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


def _tree(pid: int) -> list[int]:
    """``pid`` and every process below it (``/proc/<pid>/task/<tid>/children``, Linux 3.5 and later)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                with open(f"/proc/{current}/task/{task}/children") as f:
                    todo.extend(int(child) for child in f.read().split())
        except OSError:
            continue  # it ended meanwhile
    return found


def _resident(pid: int) -> tuple[int, int]:
    """``(rss, private)`` of ``pid`` in KiB: its resident pages, and those of them that no other process maps."""
    rss = private = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith(("Private_Clean:", "Private_Dirty:")):
                    private += int(line.split()[1])
    except OSError:
        pass
    return rss, private


class Peak(float):
    """The peak resident memory of a process tree in MiB, as the pod's cgroup counts it (it is that float): every
    page the command maps, and what its children map that no other process does (a child forked from it shares
    its pages until either writes them, and a page is charged once). Also the peak of the plain sum of every
    process's resident memory (:attr:`rss_sum`, which counts a shared page in each process) and the peak of its
    largest process (:attr:`largest`)."""

    rss_sum: float
    largest: float

    def __new__(cls, tree: float, rss_sum: float, largest: float) -> Self:
        peak = super().__new__(cls, tree)
        peak.rss_sum, peak.largest = rss_sum, largest
        return peak


def peak_tree_mib(command: Sequence[str], env: dict[str, str] | None = None, every: float = 0.02) -> Peak:
    """Peak resident memory of ``command`` and every process it starts, summed, sampled every ``every`` seconds
    (what an operator sizing a pod's memory limit needs: the tree is what the cgroup counts, not its largest
    process)."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    tree_peak = rss_peak = largest = 0
    while process.poll() is None:
        samples = [_resident(pid) for pid in _tree(process.pid)]
        tree_peak = max(tree_peak, samples[0][0] + sum(private for _, private in samples[1:]))
        rss_peak = max(rss_peak, sum(rss for rss, _ in samples))
        largest = max(largest, *(rss for rss, _ in samples))
        time.sleep(every)
    _, stderr = process.communicate()
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, command, stderr=stderr)
    return Peak(tree_peak / 1024, rss_peak / 1024, largest / 1024)


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


def last_release() -> dict[str, Any]:
    """The file of the last release's figures (:data:`LAST_RELEASE`): ``{"release", "rows": {name: {"figure",
    "unit", ...}}}``; empty rows when there is none."""
    try:
        data: dict[str, Any] = json.loads(LAST_RELEASE.read_text())
    except (OSError, ValueError):
        return {"release": None, "rows": {}}
    return data


def against_last_release(name: str, figure: float, unit: str) -> str:
    """The text printed beside a row: the last release's figure, and ``WORSE`` when this one is more than
    :data:`WORSE_BY` above it (every row is better lower: a time's ratio to its baseline, or MiB). With
    ``BENCH_RECORD=<release>``, the figure is written to the file instead, as that release's."""
    recording = os.environ.get("BENCH_RECORD")
    data = last_release()
    if recording:
        data["release"] = recording
        data.setdefault("rows", {})[name] = {"figure": round(figure, 3), "unit": unit,
                                             "measured": time.strftime("%Y-%m-%d")}  # fmt: skip
        LAST_RELEASE.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        return f" [recorded as {recording}'s]"
    row = data["rows"].get(name)
    if row is None:
        return f" [no figure of {data['release'] or 'a release'}]"
    last = float(row["figure"])
    change = figure / last - 1 if last else 0.0
    if change > WORSE_BY:
        marked = os.environ.get("BENCH_MARKED")
        if marked:  # bench/run.py lists the marked rows at the end
            with open(marked, "a") as f:
                f.write(
                    f"{name}: {figure:.2f} {unit} where {data['release']} had {last:.2f} ({change:+.0%})\n"
                )
        return f" [{data['release']}: {last:.2f}; {change:+.0%} WORSE]"
    return f" [{data['release']}: {last:.2f}; {change:+.0%}]"


def report(name: str, value: float, unit: str, baseline: float, baseline_name: str, goal: float) -> bool:
    """Print one line ``name: value vs baseline -> ratio (spread) (goal) MET|MISSED [last release]``; return whether
    the goal was met. Two :class:`Timing` of as many rounds are judged on the median of their pairs' ratios, the
    spread being the lowest and highest pair; otherwise on the ratio of the two values. A row in MiB is set beside
    the last release's MiB, any other by its ratio (:func:`against_last_release`)."""
    spread = ""
    if isinstance(value, Timing) and isinstance(baseline, Timing) and len(value.times) == len(baseline.times):
        ratios = sorted(v / b for v, b in zip(value.times, baseline.times, strict=True) if b)
        ratio = statistics.median(ratios) if ratios else float("inf")
        spread = f" (pairs {ratios[0]:.2f}-{ratios[-1]:.2f}, n={len(ratios)})" if ratios else ""
    else:
        ratio = value / baseline if baseline else float("inf")
        if isinstance(value, Timing):
            spread = f" (rounds {min(value.times):.3f}-{max(value.times):.3f} {unit}, n={len(value.times)})"
    beside = (
        against_last_release(name, value, unit)
        if unit == "MiB"
        else against_last_release(name, ratio, "ratio")
    )
    print(
        f"{name}: {value:.3f} {unit} vs {baseline:.3f} {unit} ({baseline_name}) -> ratio {ratio:.2f}{spread} "
        f"(goal <= {goal}) {verdict(ratio, goal)}{beside}",
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
