"""Buildpackages from a local registry: 8 packages of 32 MiB, cold, against skopeo copy + extracting the layers.

The baseline does, four at a time, what a platform without the preparer would: `skopeo copy` each image into an
OCI directory, then `tar -xzf` each of its layers. Goal: the preparer in <= 0.8 x that time.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _util import ROOT, Timing, build_layout, children_cpu, group, preparer_env, report, timed

sys.path.insert(0, str(ROOT))
from tests.plugins.registry import _start, build_package, push

MIB = 1 << 20
ROUNDS = 3


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-oci-") as tmp:
        work = Path(tmp)
        (work / "registry").mkdir()
        registry = _start(work / "registry", None)
        try:
            refs = []
            for i in range(8):
                package = build_package(work / f"pkg{i}", [(f"bench/oci{i}", "1.0.0", "")], (f"bench/oci{i}", "1.0.0"),
                                        payload=_random(32 * MIB))  # fmt: skip
                push(package.layout, "latest", registry.ref(f"bench/oci{i}"))
                shutil.rmtree(package.layout.parent)
                refs.append(registry.ref(f"bench/oci{i}"))

            baseline_dir = work / "baseline"

            def skopeo_and_extract(ref: str) -> None:
                target = Path(tempfile.mkdtemp(dir=baseline_dir))
                subprocess.run(
                    ["skopeo", "copy", "--src-tls-verify=false", f"docker://{ref}", f"oci:{target}/layout:latest"],
                    check=True, capture_output=True,
                )  # fmt: skip
                index = json.loads((target / "layout" / "index.json").read_text())
                manifest = json.loads(_blob(target / "layout", index["manifests"][0]["digest"]))
                (target / "rootfs").mkdir()
                for layer in manifest["layers"]:
                    subprocess.run(["tar", "-xzf", _blob_path(target / "layout", layer["digest"]), "-C",
                                    str(target / "rootfs")], check=True)  # fmt: skip

            def baseline() -> None:
                shutil.rmtree(baseline_dir, ignore_errors=True)
                baseline_dir.mkdir()
                with ThreadPoolExecutor(4) as pool:
                    list(pool.map(skopeo_and_extract, refs))

            # The two sides take turns, round after round, so that load from elsewhere on the machine hits them
            # alike; the pairs' median counts.
            project = group([f"docker://{ref}" for ref in refs])
            bases, runs, cpu = [], [], {"baseline": 0.0, "preparer": 0.0}
            for attempt in range(ROUNDS):
                before = children_cpu()
                bases.append(timed(baseline))
                cpu["baseline"] += children_cpu() - before
                root = work / f"run{attempt}"
                command = [*build_layout(root, project), "-download-cache", str(root / "cache")]
                before = children_cpu()
                runs.append(timed(lambda c=command: subprocess.run(c, env=preparer_env(), check=True,
                                                                    stdout=subprocess.DEVNULL)))  # fmt: skip
                cpu["preparer"] += children_cpu() - before
                installed = list((root / "cnb" / "buildpacks").glob("bench_oci*/1.0.0/buildpack.toml"))
                assert len(installed) == len(refs), installed
                shutil.rmtree(root)
            report("oci cold (8 buildpackages x 32 MiB)", Timing(runs), "s", Timing(bases),
                   "skopeo copy + tar -xzf, 4 at a time", 0.8)  # fmt: skip
            print(f"  (CPU per round, registry excluded: preparer {cpu['preparer'] / ROUNDS:.2f} s, "
                  f"baseline {cpu['baseline'] / ROUNDS:.2f} s)", flush=True)  # fmt: skip
        finally:
            registry.process.terminate()
            registry.process.wait()


def _random(size: int) -> bytes:
    import os

    return os.urandom(size)


def _blob_path(layout: Path, digest: str) -> str:
    return str(layout / "blobs" / "sha256" / digest.removeprefix("sha256:"))


def _blob(layout: Path, digest: str) -> bytes:
    return Path(_blob_path(layout, digest)).read_bytes()


if __name__ == "__main__":
    main()
