"""Many tiny local buildpacks: the cost of each one more buildpack stays flat and small.

50 and 200 tiny buildpack directories (buildpack.toml, bin/detect and bin/build), each run on a fresh build layout;
a run with one buildpack gives the fixed cost (interpreter, imports, the rest of the prepare phase). Goals: one more
buildpack costs <= 1 ms, and the cost per buildpack from 50 to 200 is no more than 1.5 x the cost from 1 to 50
(linear, not growing with the count).
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
from functools import partial
from pathlib import Path

from _util import build_layout, group, preparer_env, report, timed

COUNTS = (1, 50, 200)
SHM = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
RUNS = 5


def make_buildpack(root: Path, bp_id: str) -> None:
    (root / "bin").mkdir(parents=True)
    (root / "buildpack.toml").write_text(f'api = "0.10"\n[buildpack]\nid = "{bp_id}"\nversion = "1.0.0"\n')
    for script in ("detect", "build"):
        (root / "bin" / script).write_text("#!/bin/sh\n")
        (root / "bin" / script).chmod(0o755)


def best_time(work: Path, uris: list[str]) -> float:
    """The median of RUNS runs, each on a fresh layout (so every buildpack is really installed)."""
    times = []
    for _ in range(RUNS):
        command = [*build_layout(work / "run", group(uris)), "-download-cache", ""]
        run = partial(subprocess.run, command, env=preparer_env(), check=True, stdout=subprocess.DEVNULL)
        times.append(timed(run))
    shutil.rmtree(work / "run")
    return statistics.median(times)


def main() -> None:
    # On tmpfs, as the issue measured it: on a disk, writeback of earlier scenarios' gigabytes made this one's
    # per-buildpack cost swing from 0.6 to 3 ms between runs.
    with tempfile.TemporaryDirectory(prefix="bench-local-", dir=SHM) as tmp:
        work = Path(tmp)
        bps = work / "bps"
        for i in range(max(COUNTS)):
            make_buildpack(bps / f"bp{i}", f"tiny/bp{i}")
        took = {n: best_time(work, [str(bps / f"bp{i}") for i in range(n)]) for n in COUNTS}
    low = (took[50] - took[1]) / 49
    high = (took[200] - took[50]) / 150
    print(
        f"local buildpacks: 1 in {took[1]:.3f} s, 50 in {took[50]:.3f} s, 200 in {took[200]:.3f} s; "
        f"each one more: {low * 1000:.2f} ms (1 -> 50), {high * 1000:.2f} ms (50 -> 200)",
        flush=True,
    )
    report("local: cost of one more buildpack (50 -> 200)", high * 1000, "ms", 1, "the 1 ms budget", 1.0)
    report(
        "local: linearity (cost each, 50 -> 200 vs 1 -> 50)", high * 1000, "ms", low * 1000, "1 -> 50", 1.5
    )


if __name__ == "__main__":
    main()
