"""Buildpacks shaped like real ones (bench/_shapes.py: ~2,000 small files and a 32 MiB binary each), on tmpfs.

- http cold: eight from a local server, vs ``xargs -P4 sh -c 'curl | tar -xz'``. Goal <= 1.0 x (aim 0.7).
- scaling: the eight against eight times one. Goal <= 0.6 x.
- warm: the eight again, the download cache populated, a fresh <buildpacks>. Goal <= 0.15 x the http baseline.
  The paths that copy are headline rows too: as root without a build user, and run by the build user itself (its
  own cache: as root, the bench becomes user 1000 for it). Goal <= 1.05 x ``cp -a`` of the cached trees.
- local .tgz: one such archive from disk, vs ``tar -xzf``. Goal <= 1.3 x.
- registry cold: the same eight as buildpackages in a local registry, vs ``xargs -P4`` of ``skopeo copy`` + ``tar
  -xzf`` of the layer. Goal <= 0.8 x (aim 0.6).

Each side takes turns with its baseline, round after round, so that load from elsewhere hits both alike; the
ratio is the median of the rounds' pairs, printed with their spread. As root, the preparer runs as pack runs it: for the build user (``-uid 1000 -gid 1000``),
so that warm installs may be hard links into the cache (the build cannot write root's files); a line shows the
warm run without a build user too, whose installs are copies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from _servers import FileServer
from _shapes import make_manyfile, tgz
from _util import PYTHON, ROOT, Timing, build_layout, floor, group, preparer_env, report, timed

sys.path.insert(0, str(ROOT))
from tests.plugins.registry import _start, build_package, push

ROUNDS = 5
#: Rounds of the rows whose pairs take under a second (one local archive): their medians settle only with more.
QUICK_ROUNDS = 11
COUNT = 8
SHM = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
HERE = Path(__file__).resolve().parent


#: As pack runs the phase: as root, for the build user.
AS_BUILD_USER = ["-uid", "1000", "-gid", "1000"] if os.geteuid() == 0 else []


def run_preparer(command: list[str], build_user: bool = True, cpu: int | None = None) -> None:
    """One preparer run (``cpu``: on that CPU only, as a pod limited to one CPU)."""
    extra = AS_BUILD_USER if build_user else []
    pinned = ["taskset", "-c", str(cpu)] if cpu is not None else []
    subprocess.run([*pinned, *command, *extra], env=preparer_env(), check=True, stdout=subprocess.DEVNULL)


Side = tuple[Callable[[], object], Callable[[], object]]


def alternate(rounds: int, *sides: Side) -> list[Timing]:
    """The times of each side's action, the sides taking turns ``rounds`` times (:class:`Timing`: the median, every
    round kept); each side's setup (a fresh layout, an empty output directory) runs untimed before its action.

    Every other round runs the sides in the reverse order (A B, then B A), so that no side always runs right after
    the same other one (whose exit and freed memory the kernel may still be busy with)."""
    times: list[list[float]] = [[] for _ in sides]
    for number in range(rounds):
        order = list(enumerate(sides))
        for i, (setup, action) in order if number % 2 == 0 else reversed(order):
            setup()
            times[i].append(timed(action))
    return [Timing(t) for t in times]


def fresh(path: Path) -> Callable[[], None]:
    """A setup that empties ``path``."""

    def setup() -> None:
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir()

    return setup


def preparer_side(
    work: Path,
    project: str,
    cache: Path | None,
    *,
    cold: bool,
    build_user: bool = True,
    extra: list[str] | Callable[[], list[str]] = (),  # type: ignore[assignment]
    cpu: int | None = None,
) -> Side:
    """A preparer run on a fresh layout (and, ``cold``, an empty download cache), both made untimed; ``extra``
    flags (or a function giving them anew for each run); ``cpu``: the run kept to that CPU."""
    command: list[str] = []

    def setup() -> None:
        flags = extra() if callable(extra) else list(extra)
        command[:] = [
            *build_layout(work / "run", project),
            "-download-cache",
            str(cache) if cache else "",
            *flags,
        ]
        if cold and cache is not None:
            shutil.rmtree(cache, ignore_errors=True)

    def action() -> None:
        run_preparer(command, build_user, cpu)

    return setup, action


#: The build user, as pack runs the phase for it; its own runs are started as it with setpriv(1).
BUILD_USER = 1000


def own_side(work: Path, project: str) -> Side:
    """A warm preparer run by the build user itself (not root acting for it): its installs are copies, from its own
    download cache (``<work>/user/cache``, filled by a first run). Only as root, which can become the user."""
    home = work / "user"
    as_user = ["setpriv", f"--reuid={BUILD_USER}", f"--regid={BUILD_USER}", "--clear-groups"]
    command: list[str] = []

    def setup() -> None:
        work.chmod(0o711)  # the user passes through the run's directory to its own
        command[:] = [*as_user, *build_layout(home / "run", project), "-download-cache", str(home / "cache")]
        subprocess.run(["chown", "-R", f"{BUILD_USER}:{BUILD_USER}", str(home)], check=True)

    def action() -> None:
        subprocess.run(command, env=preparer_env(HOME=str(home)), check=True, stdout=subprocess.DEVNULL)

    setup()
    action()  # its download cache, filled
    return setup, action


def http_part(work: Path, sources: list[Path]) -> float:
    www = work / "www"
    www.mkdir()
    names = [tgz(src, www / f"bp{i}.tgz").name for i, src in enumerate(sources)]
    with FileServer(www) as server:
        urls = [server.url(n) for n in names]
        out = work / "curl"

        def baseline() -> None:
            script = 'd=$(mktemp -d -p "$0"); curl -sf "$1" | tar -xz -C "$d"'
            subprocess.run(["xargs", "-P4", "-n1", "sh", "-c", script, str(out)], input="\n".join(urls),
                           text=True, check=True)  # fmt: skip

        cache = work / "cache"
        base, eight, one = alternate(
            ROUNDS,
            (fresh(out), baseline),
            preparer_side(work, group(urls), cache, cold=True),
            preparer_side(work, group(urls[:1]), cache, cold=True),
        )
        report("manyfile http cold (8)", eight, "s", base, "xargs -P4 curl | tar -xz", 0.9)
        report("manyfile scaling (8 vs 8 x 1)", eight, "s", Timing([8 * t for t in one.times]), "eight times one",
               0.55)  # fmt: skip
        # Warm: the cache holds the eight; each run gets a fresh <buildpacks>.
        run_preparer([*build_layout(work / "run", group(urls)), "-download-cache", str(cache)])
        copied = work / "cp"

        def cp_a() -> None:  # what installing copies must do: the cached trees, copied as they are
            trees = sorted((cache / "trees" / "sha256").glob("*/root"))
            script = 'd=$1; shift; i=0; for t; do i=$((i+1)); cp -a "$t" "$d/$i"; done'
            subprocess.run(["sh", "-c", script, "sh", str(copied), *map(str, trees)], check=True)

        linked = work / "floor"

        def floor_links() -> None:  # bench/floor_warm.py: the interpreter, typer and the links, nothing else
            subprocess.run([PYTHON, str(HERE / "floor_warm.py"), str(cache), str(linked)], check=True)

        own = [own_side(work, group(urls))] if os.geteuid() == 0 else []
        warm_time, copies_time, cp_time, floor_time, *own_time = alternate(
            ROUNDS,
            preparer_side(work, group(urls), cache, cold=False),
            preparer_side(work, group(urls), cache, cold=False, build_user=False),
            (fresh(copied), cp_a),
            (fresh(linked), floor_links),
            *own,
        )
        report("manyfile http warm (8, cache populated)", warm_time, "s", base, "the http cold baseline", 0.1)
        floor("manyfile http warm floor (interpreter, typer, manifests and links only)", floor_time, base,
              "the http cold baseline")  # fmt: skip
        report("manyfile warm copying (8, no build user)", copies_time, "s", cp_time, "cp -a of the cached trees",
               1.05)  # fmt: skip
        for own_copies in own_time:
            report("manyfile warm copying (8, as the build user itself)", own_copies, "s", cp_time,
                   "cp -a of the cached trees", 1.05)  # fmt: skip
        shutil.rmtree(out, ignore_errors=True)
        return base


def local_part(work: Path, source: Path) -> None:
    archive = tgz(source, work / "local.tgz")
    out, floor_out = work / "untar", work / "floor"

    def baseline() -> None:
        subprocess.run(["tar", "-xzf", str(archive), "-C", str(out)], check=True)

    def floor_extract() -> (
        None
    ):  # bench/floor_local.py: the interpreter, typer, inflating and writing, nothing else
        subprocess.run([PYTHON, str(HERE / "floor_local.py"), str(archive), str(floor_out)], check=True)

    base, mine, least = alternate(
        QUICK_ROUNDS,
        (fresh(out), baseline),
        preparer_side(work, group([str(archive)]), None, cold=True),
        (fresh(floor_out), floor_extract),
    )
    report("manyfile local .tgz (1)", mine, "s", base, "tar -xzf", 1.1)
    floor(
        "manyfile local .tgz floor (interpreter, typer, inflating and writing only)", least, base, "tar -xzf"
    )


def registry_part(work: Path, sources: list[Path]) -> None:
    (work / "registry").mkdir()
    registry = _start(work / "registry", None)
    try:
        refs = []
        for i, src in enumerate(sources):
            layout = _package(work / f"pkg{i}", src, f"bench/many{i}")
            push(layout, "latest", registry.ref(f"bench/many{i}"))
            shutil.rmtree(layout.parent)
            refs.append(registry.ref(f"bench/many{i}"))
        out = work / "skopeo"

        def baseline() -> None:
            script = (
                'd=$(mktemp -d -p "$0"); skopeo copy -q --src-tls-verify=false "docker://$1" "oci:$d/l:latest" '
                "&& for b in $(python3 -c \"import json,sys; i=json.load(open(sys.argv[1]+'/l/index.json')); "
                "m=json.load(open(sys.argv[1]+'/l/blobs/sha256/'+i['manifests'][0]['digest'][7:])); "
                "print(' '.join(l['digest'][7:] for l in m['layers']))\" \"$d\"); do "
                'mkdir -p "$d/root"; tar -xzf "$d/l/blobs/sha256/$b" -C "$d/root"; done'
            )
            subprocess.run(["xargs", "-P4", "-n1", "sh", "-c", script, str(out)], input="\n".join(refs),
                           text=True, check=True)  # fmt: skip

        project = group([f"docker://{ref}" for ref in refs])
        base, mine = alternate(
            ROUNDS, (fresh(out), baseline), preparer_side(work, project, work / "cache", cold=True)
        )
        report(
            "manyfile registry cold (8 buildpackages)",
            mine,
            "s",
            base,
            "xargs -P4 skopeo copy + tar -xzf",
            0.6,
        )
        shutil.rmtree(out, ignore_errors=True)
    finally:
        registry.process.terminate()
        registry.process.wait()


def _package(work: Path, source: Path, bp_id: str) -> Path:
    """A buildpackage OCI layout whose one layer holds ``source`` at ``/cnb/buildpacks/<id>/1.0.0``."""
    return build_package(work, [(bp_id, "1.0.0", "")], (bp_id, "1.0.0"), content=source).layout


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-manyfile-", dir=SHM) as tmp:
        work = Path(tmp)
        sources = [make_manyfile(work / f"src{i}", f"bench/many{i}", seed=i) for i in range(COUNT)]
        http_part(work, sources)
        local_part(work, sources[0])
        registry_part(work, sources)
        print(f"  (work directories on {'tmpfs' if SHM else 'disk'}; {json.dumps({'buildpacks': COUNT})})")


if __name__ == "__main__":
    main()
