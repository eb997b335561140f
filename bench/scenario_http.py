"""http(s) buildpacks: cold and warm downloads, a 1 GiB buildpack's memory, and many tiny local buildpacks.

- http cold: 8 buildpacks of 32 MiB random payload as .tgz from a local server, vs `curl URL | tar -xz` for the same
  eight, four at a time. Goal <= 1.0 x the baseline.
- http warm: the same with the download cache populated and a fresh <buildpacks>. Goal <= 0.2 x the cold run.
- 1 GiB buildpack: peak RSS of the preparer. Goal <= 100 MiB.
- local: 50 vs 200 tiny buildpack directories; the cost of each one more buildpack. Goal <= 5 ms, and flat.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _servers import FileServer
from _util import PYTHON, build_layout, group, median_seconds, peak_rss_mib, preparer_env, report, timed

MIB = 1 << 20


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


def run(command: list[str], cache: Path) -> None:
    subprocess.run([*command, "-download-cache", str(cache)], env=preparer_env(), check=True,
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
        with FileServer(www) as server:
            urls = [server.url(n) for n in names]

            def curl_tar(url: str) -> None:
                dest = Path(tempfile.mkdtemp(dir=work))
                subprocess.run(f"curl -sf {url} | tar -xz -C {dest}", shell=True, check=True)

            def baseline() -> None:
                with ThreadPoolExecutor(4) as pool:
                    list(pool.map(curl_tar, urls))

            base = min(timed(baseline) for _ in range(2))
            command = build_layout(work / "run", group(urls))
            colds = []
            for attempt in range(2):
                cache = work / f"cache-cold{attempt}"
                command = build_layout(work / "run", group(urls))
                colds.append(timed(lambda: run(command, cache)))  # noqa: B023 (called at once)
            cold = min(colds)
            report("http cold (8 x 32 MiB .tgz)", cold, "s", base, "curl | tar -xz, 4 at a time", 1.0)
            warm_times = []
            for _ in range(3):
                command = build_layout(work / "run", group(urls))
                warm_times.append(timed(lambda: run(command, work / "cache-cold1")))  # noqa: B023
            report(
                "http warm (cache populated, fresh <buildpacks>)",
                min(warm_times),
                "s",
                cold,
                "the cold run",
                0.2,
            )
            floor = median_seconds([PYTHON, "-c", "import typer, requests"], 10)
            print(f"  (of which interpreter + typer + requests imports alone: {floor:.3f} s)", flush=True)
            for name in names:
                (www / name).unlink()

            big = make_buildpack(work / "big-src", "bench/big", 1024 * MIB)
            archive(big, www / "big.tar", compress=False)
            shutil.rmtree(big)
            command = build_layout(work / "run", group([server.url("big.tar")]))
            rss = peak_rss_mib([*command, "-download-cache", str(work / "cache-big")], env=preparer_env())
            report("1 GiB buildpack: peak RSS", rss, "MiB", 100, "the 100 MiB budget", 1.0)
            (www / "big.tar").unlink()
            shutil.rmtree(work / "cache-big", ignore_errors=True)

        per_count = {}
        for count in (50, 200):
            bps = work / f"local{count}"
            for i in range(count):
                make_buildpack(bps / f"bp{i}", f"tiny/bp{i}", 0)
            command = build_layout(work / "run", group([str(bps / f"bp{i}") for i in range(count)]))
            per_count[count] = min(timed(lambda: run(command, work / "cache-local")) for _ in range(2))  # noqa: B023
            command = build_layout(work / "run", group([str(bps / f"bp{i}") for i in range(count)]))
        marginal = (per_count[200] - per_count[50]) / 150
        print(
            f"local buildpacks: 50 in {per_count[50]:.2f} s, 200 in {per_count[200]:.2f} s; "
            f"per buildpack {per_count[50] / 50 * 1000:.1f} ms (50) vs {per_count[200] / 200 * 1000:.1f} ms (200)"
        )
        report("local: cost of one more buildpack", marginal * 1000, "ms", 5, "the 5 ms budget", 1.0)


if __name__ == "__main__":
    main()
