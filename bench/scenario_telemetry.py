"""What build telemetry (``-telemetry``, docs/telemetry.md) costs the cold and warm http runs (issue 51): eight
buildpacks shaped like real ones (bench/_shapes.py) from a local server, on tmpfs, each run with and without
``-telemetry``, taking turns (bench/scenario_manyfile.py's :func:`alternate`). Goal <= 1.03 x the same run without
it: a run records some thirty spans and appends one line. A run not asked pays nothing: its start-up is
bench/scenario_startup.py's, unchanged.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from _servers import FileServer
from _shapes import make_manyfile, tgz
from _util import group, report
from scenario_manyfile import COUNT, ROUNDS, SHM, alternate, preparer_side

GOAL = 1.03


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-telemetry-", dir=SHM) as tmp:
        work = Path(tmp)
        www = work / "www"
        www.mkdir()
        for i in range(COUNT):
            source = make_manyfile(work / f"src{i}", f"bench/tel{i}", seed=i)
            tgz(source, www / f"tel{i}.tgz")
            shutil.rmtree(source)
        with FileServer(www) as server:
            project = group([server.url(f"tel{i}.tgz") for i in range(COUNT)])
            cache = work / "cache"
            for cold in (True, False):
                plain, traced = alternate(
                    ROUNDS,
                    preparer_side(work / "plain", project, cache, cold=cold),
                    preparer_side(work / "traced", project, cache, cold=cold, extra=["-telemetry"]),
                )
                how = "cold" if cold else "warm"
                report(f"telemetry: http {how} ({COUNT} buildpacks) with -telemetry", traced, "s", plain,
                       "the same run without it", GOAL)  # fmt: skip


if __name__ == "__main__":
    main()
