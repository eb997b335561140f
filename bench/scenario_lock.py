"""A frozen warm run (``-lock``) against today's pinned warm run: 8 http buildpacks of the shape users have
(~2,000 small files each, bench/_shapes.py), their archives and trees in the download cache.

Side A writes each URL with ``#sha256=`` in project.toml; side B writes the URLs bare and is frozen to a lock that
pins them. Both make no request. Goal: B no slower than A (<= 1.05 x: the pairs' spread on this machine is wider
than 5%).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

from _servers import FileServer
from _shapes import make_manyfile, tgz
from _util import ROOT, build_layout, group, preparer_env, report
from scenario_manyfile import ROUNDS, SHM, alternate, preparer_side

sys.path.insert(0, str(ROOT))

COUNT = 8


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-lock-", dir=SHM) as tmp:
        work = Path(tmp)
        www = work / "www"
        www.mkdir()
        names = [tgz(make_manyfile(work / f"src{i}", f"bench/lock{i}", seed=i), www / f"bp{i}.tgz").name
                 for i in range(COUNT)]  # fmt: skip
        with FileServer(www) as server:
            urls = [server.url(n) for n in names]
            pinned = [
                f"{u}#sha256={hashlib.sha256((www / n).read_bytes()).hexdigest()}"
                for u, n in zip(urls, names, strict=True)
            ]
            cache, lock = work / "cache", work / "preparer.lock"
            for project, extra in ((group(pinned), []), (group(urls), ["-lock", str(lock)])):
                command = [*build_layout(work / "run", project), "-download-cache", str(cache), *extra]
                subprocess.run(
                    command, env=preparer_env(), check=True, stdout=subprocess.DEVNULL
                )  # warm, locked
            seen = server.requests()
            pins, frozen = alternate(
                ROUNDS * 2,
                preparer_side(work, group(pinned), cache, cold=False),
                preparer_side(work, group(urls), cache, cold=False, extra=["-lock", str(lock)]),
            )
            report("lock: frozen warm run vs pinned warm run (8)", frozen, "s", pins, "#sha256= in project.toml",
                   1.05)  # fmt: skip
            print(f"  (requests during the timed runs: {server.requests() - seen})")


if __name__ == "__main__":
    main()
