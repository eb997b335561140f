"""The fleet download cache (docs/fleet.md) on the eight many-file buildpacks (bench/_shapes.py), on tmpfs.

The origin is a local HTTP server, the cluster's cache a local docker-registry. Each "pod" gets an empty local
download cache and a fresh layout; the URLs are pinned, so a pod served by the cache asks no origin.

- fresh pod from the cluster cache vs eight ``curl <cache>/v2/<repo>/blobs/<digest> | tar -xz``, four at a time:
  goal <= 1.15 x, with 0 origin requests (asserted).
- the same vs the preparer's cold run from the origin: goal <= 1.1 x; vs a warm local cache: goal <= 8 x.
- a cold pod that writes back vs one without a cache repository: goal <= 1.3 x. Here the registry receiving the
  write-back shares the pod's two CPUs and spends about 1 s of CPU hashing and storing the 272 MB, which a
  cluster's registry spends on its own machine: the CPU each process used is printed, with the least time two
  CPUs need for all of it. So the same pair is measured again with the pod kept to one CPU and the servers
  (origin, registry) to the other, as a pod with a one-CPU limit and a registry elsewhere see it.
- a cache that is down (connection refused): at most the cold run + 0.3 s; blackholed (iptables, as root): at
  most the cold run + 2.5 s.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from _servers import FileServer
from _shapes import make_manyfile, tgz
from _util import ROOT, children_cpu, group, report
from scenario_manyfile import ROUNDS, SHM, alternate, fresh, preparer_side

sys.path.insert(0, str(ROOT))
from tests.plugins.registry import _start

COUNT = 8


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-fleet-", dir=SHM) as tmp:
        work = Path(tmp)
        www = work / "www"
        www.mkdir()
        sources = [make_manyfile(work / f"src{i}", f"bench/many{i}", seed=i) for i in range(COUNT)]
        archives = [tgz(src, www / f"bp{i}.tgz") for i, src in enumerate(sources)]
        for src in sources:
            shutil.rmtree(src)
        digests = [hashlib.sha256(a.read_bytes()).hexdigest() for a in archives]
        (work / "registry").mkdir()
        registry = _start(work / "registry", None)
        try:
            with FileServer(www) as server:
                urls = [server.url(f"bp{i}.tgz#sha256={d}") for i, d in enumerate(digests)]
                measure(work, urls, digests, registry.host, server, registry.process.pid)
        finally:
            registry.process.terminate()
            registry.process.wait()


def measure(
    work: Path, urls: list[str], digests: list[str], registry: str, server: FileServer, registry_pid: int
) -> None:
    project = group(urls)
    repo = f"{registry}/fleet/bench"
    cache = work / "cache"
    # Seed the cluster cache once: one cold pod that writes back.
    seeding = preparer_side(work, project, cache, cold=True, extra=["-download-cache-repo", repo])
    seeding[0]()
    seeding[1]()
    out = work / "curl"

    def baseline() -> None:
        script = 'd=$(mktemp -d -p "$0"); curl -sf "$1" | tar -xz -C "$d"'
        blobs = [f"http://{registry}/v2/fleet/bench/blobs/sha256:{d}" for d in digests]
        subprocess.run(["xargs", "-P4", "-n1", "sh", "-c", script, str(out)], input="\n".join(blobs),
                       text=True, check=True)  # fmt: skip

    before = server.requests()
    from_cache = preparer_side(
        work,
        project,
        cache,
        cold=True,
        extra=["-download-cache-repo", repo, "-download-cache-repo-mode", "read"],
    )
    base, pod = alternate(ROUNDS, (fresh(out), baseline), from_cache)
    origin_requests = server.requests() - before
    assert origin_requests == 0, f"a pod served by the cluster cache asked the origin {origin_requests} times"
    report(
        "fleet: fresh pod from the cluster cache (8)",
        pod,
        "s",
        base,
        "xargs -P4 curl <cache blob> | tar -xz",
        1.15,
    )
    print(f"  (origin requests of those pods: {origin_requests})", flush=True)

    fresh_repo = {"name": ""}

    def new_repo() -> list[str]:
        fresh_repo["name"] = f"{registry}/fleet/{uuid.uuid4().hex[:8]}"
        return ["-download-cache-repo", fresh_repo["name"]]

    assert server.process is not None
    receiving = _CpuUse(
        pod=children_cpu, registry=_process_cpu(registry_pid), origin=_process_cpu(server.process.pid)
    )
    setup, action = preparer_side(work, project, cache, cold=True, extra=new_repo)
    cold, warm, writing, down = alternate(
        ROUNDS,
        preparer_side(work, project, cache, cold=True),
        preparer_side(work, project, cache, cold=False),
        (setup, receiving.around(action)),
        preparer_side(
            work, project, cache, cold=True, extra=["-download-cache-repo", "127.0.0.1:1/fleet/down"]
        ),
    )
    report(
        "fleet: fresh pod from the cluster cache vs a cold pod from the origin",
        pod,
        "s",
        cold,
        "cold run",
        1.1,
    )
    report("fleet: fresh pod from the cluster cache vs a warm local cache", pod, "s", warm, "warm run", 8.0)
    report("fleet: cold pod writing back vs without a repository", writing, "s", cold, "cold run", 1.3)
    used = receiving.per_run()
    floor = sum(used.values()) / 2
    print(
        "  (CPU per write-back run, all on the same two CPUs: "
        + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in used.items())
        + f"; two CPUs need at least {floor:.2f} s for that, {floor / cold:.2f}x the cold run)",
        flush=True,
    )
    _one_cpu_pod(work, project, cache, [registry_pid, server.process.pid], new_repo)
    report("fleet: cache down vs without a repository", down, "s", cold + 0.3, "cold run + 0.3 s", 1.0)
    blackholed = _blackholed_run(work, project, cache)
    if blackholed is not None:
        report(
            "fleet: cache blackholed vs without a repository",
            blackholed,
            "s",
            cold + 2.5,
            "cold run + 2.5 s",
            1.0,
        )
    print(f"  (work directories on {'tmpfs' if SHM else 'disk'}; {json.dumps({'buildpacks': len(urls)})})")


def _process_cpu(pid: int) -> Callable[[], float]:
    """A meter of the CPU seconds process ``pid`` has used."""

    def used() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    return used


class _CpuUse:
    """The CPU seconds some meters count while an action runs, over all its runs."""

    def __init__(self, **meters: Callable[[], float]) -> None:
        self.meters = meters
        self.seconds = dict.fromkeys(meters, 0.0)
        self.runs = 0

    def around(self, action: Callable[[], object]) -> Callable[[], None]:
        def measured() -> None:
            before = {name: meter() for name, meter in self.meters.items()}
            action()
            for name, meter in self.meters.items():
                self.seconds[name] += meter() - before[name]
            self.runs += 1

        return measured

    def per_run(self) -> dict[str, float]:
        return {name: seconds / max(self.runs, 1) for name, seconds in self.seconds.items()}


def _one_cpu_pod(
    work: Path, project: str, cache: Path, servers: list[int], new_repo: Callable[[], list[str]]
) -> None:
    """The cold run with and without write-back again, the pod kept to one CPU and the ``servers`` (the origin's and
    the registry's processes, and this one's threads) to the other: a pod with a one-CPU limit, the registry and
    the origin elsewhere."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or shutil.which("taskset") is None:
        print("  (no one-CPU pod run: fewer than two CPUs, or no taskset)")
        return
    pod_cpu, elsewhere = cpus[0], {cpus[1]}
    _move([*servers, os.getpid()], elsewhere)
    try:
        cold, writing = alternate(
            ROUNDS,
            preparer_side(work, project, cache, cold=True, cpu=pod_cpu),
            preparer_side(work, project, cache, cold=True, extra=new_repo, cpu=pod_cpu),
        )
    finally:
        _move([*servers, os.getpid()], set(cpus))
    report(
        "fleet: cold pod writing back vs without a repository, the pod on one CPU, the servers on the other",
        writing,
        "s",
        cold,
        "cold run on one CPU",
        1.3,
    )


def _move(pids: list[int], cpus: set[int]) -> None:
    """Keep the processes ``pids`` to ``cpus``: affinity is a thread's, and new threads inherit it, so every thread
    of theirs is moved."""
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(tid), cpus)


def _blackholed_run(work: Path, project: str, cache: Path) -> float | None:
    """One cold run against a repository whose packets are dropped (iptables, as root); ``None`` where that cannot
    be arranged."""
    iptables = shutil.which("iptables")
    port = 5091
    rule = ["OUTPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", str(port), "-j", "DROP"]
    if (
        iptables is None
        or subprocess.run([iptables, "-A", *rule], capture_output=True, check=False).returncode != 0
    ):
        print("  (no blackholed run: iptables cannot drop packets here)")
        return None
    try:
        setup, action = preparer_side(work, project, cache, cold=True,
                                      extra=["-download-cache-repo", f"127.0.0.1:{port}/fleet/x"])  # fmt: skip
        setup()
        start = time.perf_counter()
        action()
        return time.perf_counter() - start
    finally:
        subprocess.run([iptables, "-D", *rule], capture_output=True, check=False)


if __name__ == "__main__":
    main()
