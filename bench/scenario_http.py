"""http(s) buildpacks: cold and warm downloads, and a 1 GiB buildpack's memory (local ones: scenario_local).

- http cold: 8 buildpacks of 32 MiB random payload as .tgz from a local server, vs `curl URL | tar -xz` for the same
  eight, four at a time. Goal <= 1.0 x the baseline.
- http warm: the same with the download cache populated and a fresh <buildpacks>, run as pack runs the phase (as
  root, for the build user: installs are hard links into the cache). Goal <= 0.2 x the curl baseline; a line shows
  the warm run without a build user, whose installs are copies. (Until the fetch rebuild this was measured against
  the preparer's own cold run, a baseline that moved with every cold-run speed-up.)
  Also the warm run against an origin 50 ms away (the same server, each request waiting): its eight
  revalidations are sent together, so it costs about one round trip more, not four.
- 1 GiB buildpack: the peak memory of the preparer's whole process tree (sampled every 20 ms, a page a forked
  child shares counted once, as the pod's cgroup counts it) streaming a cold 1 GiB ``.tgz``, with the download
  cache and without, as root (installs are copies, in a child) and for the build user. Goal <= 48 MiB each (issue
  42: a build pod's memory limit is set for the lifecycle).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _servers import FileServer
from _util import (
    PYTHON,
    Timing,
    build_layout,
    group,
    median_seconds,
    peak_tree_mib,
    preparer_env,
    report,
    timed,
)

MIB = 1 << 20
#: The latency of an origin far away, in seconds (a warm run's revalidations wait for it).
FAR = 0.05


def make_buildpack(root: Path, bp_id: str, payload_bytes: int) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "buildpack.toml").write_text(f'api = "0.10"\n[buildpack]\nid = "{bp_id}"\nversion = "1.0.0"\n')
    (root / "bin" / "build").write_text("#!/bin/sh\n")
    (root / "bin" / "build").chmod(0o755)
    with open(root / "payload.bin", "wb") as f:
        left = payload_bytes
        while left:
            chunk = min(left, 16 * MIB)
            f.write(os.urandom(chunk))
            left -= chunk
    return root


def archive(source: Path, dest: Path, compress: bool) -> Path:
    # tar(1) with gzip: the archives a buildpack release pipeline publishes.
    flags = "-czf" if compress else "-cf"
    subprocess.run(["tar", flags, str(dest), "-C", str(source), "."], check=True)
    return dest


#: As pack runs the phase: as root, for the build user.
AS_BUILD_USER = ["-uid", "1000", "-gid", "1000"] if os.geteuid() == 0 else []


def run(command: list[str], cache: Path, extra: list[str] | None = None) -> None:
    subprocess.run([*command, "-download-cache", str(cache), *(extra or [])], env=preparer_env(), check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-http-") as tmp:
        work = Path(tmp)
        www = work / "www"
        www.mkdir()
        names = []
        for i in range(8):
            source = make_buildpack(work / f"src{i}", f"bench/bp{i}", 32 * MIB)
            names.append(archive(source, www / f"bp{i}.tgz", compress=True).name)
            shutil.rmtree(source)
        with FileServer(www, far=True) as server:
            urls = [server.url(n) for n in names]

            def curl_tar(url: str) -> None:
                dest = Path(tempfile.mkdtemp(dir=work / "curl"))
                subprocess.run(f"curl -sf {url} | tar -xz -C {dest}", shell=True, check=True)

            def baseline() -> None:
                with ThreadPoolExecutor(4) as pool:
                    list(pool.map(curl_tar, urls))

            # The two sides take turns, so machine load in any one moment hits them alike; the pairs' median counts.
            bases, colds = [], []
            cache = work / "cache"
            for _ in range(5):
                (work / "curl").mkdir()
                bases.append(timed(baseline))
                shutil.rmtree(work / "curl")
                shutil.rmtree(cache, ignore_errors=True)
                command = build_layout(work / "run", group(urls))
                colds.append(timed(lambda: run(command, cache)))  # noqa: B023 (called at once)
            base, cold = Timing(bases), Timing(colds)
            report("http cold (8 x 32 MiB .tgz)", cold, "s", base, "curl | tar -xz, 4 at a time", 1.0)
            warm_times, copy_times = [], []
            for _ in range(5):
                command = build_layout(work / "run", group(urls))
                warm_times.append(timed(lambda: run(command, cache, AS_BUILD_USER)))  # noqa: B023
                command = build_layout(work / "run", group(urls))
                copy_times.append(timed(lambda: run(command, cache)))  # noqa: B023
            report("http warm (cache populated, fresh <buildpacks>)", Timing(warm_times), "s", base,
                   "curl | tar -xz, 4 at a time", 0.2)  # fmt: skip
            print(
                f"  (warm without a build user, installing copies: median {Timing(copy_times):.3f} s)",
                flush=True,
            )
            # A warm run revalidates over a plain socket and never imports requests (preparer/fetch/probe.py).
            floor = median_seconds([PYTHON, "-c", "import typer"], 10)
            print(f"  (of which interpreter + typer imports alone: {floor:.3f} s)", flush=True)
            # The same warm run against an origin 50 ms away: its eight revalidations are sent together.
            server.latency = FAR
            far_times = []
            for _ in range(5):
                command = build_layout(work / "run", group(urls))
                far_times.append(timed(lambda: run(command, cache, AS_BUILD_USER)))  # noqa: B023
            server.latency = 0
            print(
                f"  (warm with the origin {FAR * 1000:.0f} ms away: median {Timing(far_times):.3f} s, "
                f"{Timing(far_times) - Timing(warm_times):+.3f} s; eight revalidations, sent together)",
                flush=True,
            )
            for name in names:
                (www / name).unlink()

            big = make_buildpack(work / "big-src", "bench/big", 1024 * MIB)
            archive(big, www / "big.tgz", compress=True)
            shutil.rmtree(big)
            for cache_on, user in ((False, False), (True, False), (False, True), (True, True)):
                if user and not AS_BUILD_USER:
                    continue
                shutil.rmtree(work / "cache-big", ignore_errors=True)
                command = build_layout(work / "run", group([server.url("big.tgz")]))
                command += [
                    "-download-cache",
                    str(work / "cache-big") if cache_on else "",
                    *(AS_BUILD_USER * user),
                ]
                peak = peak_tree_mib(command, env=preparer_env())
                how = f"{'cache' if cache_on else 'no cache'}, {'for the build user' if user else 'as root'}"
                report(f"1 GiB .tgz cold ({how}): peak memory of the process tree", peak, "MiB", 48,
                       "the 48 MiB budget", 1.0)  # fmt: skip
                print(f"  (sum of every process's resident memory: {peak.rss_sum:.1f} MiB, a page a child shares "
                      f"counted in each; largest process {peak.largest:.1f} MiB)", flush=True)  # fmt: skip
            (www / "big.tgz").unlink()
            shutil.rmtree(work / "cache-big", ignore_errors=True)


if __name__ == "__main__":
    main()
