"""What ``[[image.signed-by]]`` costs a warm run: 8 buildpackages named by digest, each signed (half with cosign's
tag scheme, half with Sigstore bundles), their blobs and signatures in the download cache.

The same warm run with the policy's signature rule and without it (the policy otherwise the same) take turns; the
cost is the median over the pairs of the difference, per image. Goal: <= 5 ms per image. Both runs make no request.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _util import PREPARER, ROOT, build_layout, group, preparer_env, timed

sys.path.insert(0, str(ROOT))
from tests.plugins.registry import _start, buildpack_layer, push_package
from tests.plugins.signing import bundle_sign, cosign_sign, make_key

ROUNDS = 25
COUNT = 8
GOAL_MS = 5.0


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-signatures-") as tmp:
        work = Path(tmp)
        (work / "registry").mkdir()
        registry = _start(work / "registry", None)
        try:
            key = make_key(work / "keys")
            refs = []
            for i in range(COUNT):
                bp = (f"bench/signed{i}", "1.0.0")
                layer = buildpack_layer(work / f"src{i}", [(*bp, "")])
                repository = f"bench/signed{i}"
                digest, _ = push_package(registry, repository, "latest", [(layer, [(*bp, "")])], bp)
                (cosign_sign if i % 2 else bundle_sign)(registry, repository, digest, key)
                refs.append(f"docker://{registry.host}/{repository}@{digest}")
            rule = '\n[[image.signed-by]]\nkeys = ["keys/cosign.pub"]\n'
            plain, signed = work / "plain.toml", work / "signed.toml"
            plain.write_text('[image]\nallow = ["*"]\n')
            signed.write_text('[image]\nallow = ["*"]\n' + rule)
            cache = work / "cache"

            def command(policy: Path) -> list[str]:
                return [
                    *build_layout(work / "run", group(refs)),
                    "-download-cache",
                    str(cache),
                    "-policy",
                    str(policy),
                ]

            subprocess.run(command(signed), env=preparer_env(), check=True, stdout=subprocess.DEVNULL)  # fill
            times: dict[Path, list[float]] = {plain: [], signed: []}
            for _ in range(ROUNDS):
                for policy in (plain, signed):
                    args = command(policy)  # a fresh layout, untimed
                    times[policy].append(timed(lambda a=args: subprocess.run(  # type: ignore[misc]
                        a, env=preparer_env(), check=True, stdout=subprocess.DEVNULL)))  # fmt: skip
            deltas = sorted((s - p) * 1000 / COUNT for p, s in zip(times[plain], times[signed], strict=True))
            median = statistics.median(deltas)
            verdict = "MET" if median <= GOAL_MS else "MISSED"
            print(
                f"signature check, warm (8 images by digest): {statistics.median(times[signed]):.3f} s vs "
                f"{statistics.median(times[plain]):.3f} s without the rule -> {median:.1f} ms per image "
                f"(pairs {deltas[0]:.1f} to {deltas[-1]:.1f}, n={len(deltas)}) (goal <= {GOAL_MS} ms) {verdict}",
                flush=True,
            )
            shutil.rmtree(work / "run", ignore_errors=True)
            print(f"  ({PREPARER})")
        finally:
            registry.process.terminate()
            registry.process.wait()


if __name__ == "__main__":
    main()
