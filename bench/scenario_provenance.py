"""What ``-provenance`` costs a warm run (issue 39): a builder whose buildpack holds 5,000 small files (the shape of
bench/_shapes.py, without its large binary), named by id in project.toml, so that nothing is fetched.

The run installs nothing; with ``-provenance`` it hashes the builder's buildpack with in-toto's ``dirHash``,
reading every file of it. The two runs take turns (bench/scenario_manyfile.py's :func:`alternate`); the ratio is
the median of the pairs', with their spread, and the milliseconds the provenance adds are printed below it.
Goal <= 1.5 x: reading 5,000 files is about 15,000 system calls, some 17 ms of the kernel's time here on a run of
about 57 ms (1.3 x) however little the program does besides, and the provenance is asked for on every build of a
platform that keeps it.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from _shapes import make_manyfile
from _util import build_layout, report
from scenario_manyfile import QUICK_ROUNDS, SHM, alternate, run_preparer

#: Small files of the builder's buildpack.
FILES = 5000
#: The app's project.toml: the builder's buildpack, by id.
PROJECT = '[_]\nschema-version = "0.2"\n[[io.buildpacks.group]]\nid = "bench/many0"\nversion = "1.0.0"\n'


def side(
    command: list[str], layers: Path, provenance: Path | None
) -> tuple[Callable[[], None], Callable[[], None]]:
    """A warm run on the one layout (with ``-provenance``, when given), its outputs removed untimed before it."""
    extra = ["-provenance", str(provenance)] if provenance else []

    def setup() -> None:
        shutil.rmtree(layers, ignore_errors=True)
        if provenance:
            provenance.unlink(missing_ok=True)

    def action() -> None:
        run_preparer([*command, *extra])

    return setup, action


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-provenance-", dir=SHM) as tmp:
        work = Path(tmp)
        root = work / "run"
        command = build_layout(root, PROJECT)
        make_manyfile(root / "cnb" / "buildpacks" / "bench_many0" / "1.0.0", "bench/many0", seed=0, big=0,
                      small=FILES)  # fmt: skip
        command += ["-download-cache", ""]
        provenance = work / "provenance.json"
        # A first run: it works, and the files are in memory, as in a builder's pod once its image is pulled.
        run_preparer([*command, "-provenance", str(provenance)])
        plain, with_provenance = alternate(
            QUICK_ROUNDS, side(command, root / "layers", None), side(command, root / "layers", provenance)
        )
        report(f"provenance: warm builder run (1 buildpack of {FILES:,} small files)", with_provenance, "s",
               plain, "the same run without -provenance", 1.5)  # fmt: skip
        added = sorted((p - b) * 1000 for p, b in zip(with_provenance.times, plain.times, strict=True))
        print(f"  (the provenance adds {statistics.median(added):.0f} ms, pairs {added[0]:.0f} to "
              f"{added[-1]:.0f}; the run without it: {plain * 1000:.0f} ms)")  # fmt: skip


if __name__ == "__main__":
    main()
