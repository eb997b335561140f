"""What ``[[image.signed-by]]`` costs a warm run: 8 buildpackages named by digest, each signed (half with cosign's
tag scheme, half with Sigstore bundles), their blobs and signatures in the download cache.

The same warm run with the policy's signature rule and without it (the policy otherwise the same) take turns; the
cost is the median over the pairs of the difference, per image. Both runs make no request. Two variants, each with
8 repositories of its own:

- **keyed**: a rule with a key, signatures by that key. Goal: <= 5 ms per image.
- **keyless**: a rule with an identity and a ``[sigstore] trusted-root``, signatures by a Fulcio certificate of the
  tests' own Sigstore (tests/keyless_sign.py), logged in its Rekor. Goal: <= 10 ms per image.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from _util import PREPARER, ROOT, build_layout, group, preparer_env, timed

sys.path.insert(0, str(ROOT))
from tests.keyless import GITHUB_ISSUER, WORKFLOW
from tests.keyless_sign import bundle_keyless, cosign_keyless, make_signer
from tests.plugins.registry import Registry, _start, buildpack_layer, push_package
from tests.plugins.signing import bundle_sign, cosign_sign, make_key

ROUNDS = 25
COUNT = 8
GOALS_MS = {"keyed": 5.0, "keyless": 10.0}


def signed_refs(
    work: Path, registry: Registry, variant: str, sign: Callable[[int, str, str], object]
) -> list[str]:
    """:data:`COUNT` buildpackages of their own pushed for ``variant``, each signed by ``sign(i, repository,
    digest)``; their references by digest."""
    refs = []
    for i in range(COUNT):
        bp = (f"bench/{variant}{i}", "1.0.0")
        layer = buildpack_layer(work / f"src-{variant}{i}", [(*bp, "")])
        repository = f"bench/{variant}{i}"
        digest, _ = push_package(registry, repository, "latest", [(layer, [(*bp, "")])], bp)
        sign(i, repository, digest)
        refs.append(f"docker://{registry.host}/{repository}@{digest}")
    return refs


def measure(work: Path, variant: str, refs: list[str], rules: str) -> None:
    """Warm runs of ``refs`` with ``rules`` in the policy and without, in turns; print the cost per image."""
    plain, signed = work / f"{variant}-plain.toml", work / f"{variant}-signed.toml"
    plain.write_text('[image]\nallow = ["*"]\n')
    signed.write_text('[image]\nallow = ["*"]\n\n' + rules)
    cache = work / f"cache-{variant}"

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
    median, goal = statistics.median(deltas), GOALS_MS[variant]
    verdict = "MET" if median <= goal else "MISSED"
    name = "signature check" if variant == "keyed" else "signature check, keyless"
    print(
        f"{name}, warm (8 images by digest): {statistics.median(times[signed]):.3f} s vs "
        f"{statistics.median(times[plain]):.3f} s without the rule -> {median:.1f} ms per image "
        f"(pairs {deltas[0]:.1f} to {deltas[-1]:.1f}, n={len(deltas)}) (goal <= {goal} ms) {verdict}",
        flush=True,
    )
    shutil.rmtree(work / "run", ignore_errors=True)


def main() -> None:
    variants = sys.argv[1:] or list(GOALS_MS)
    with tempfile.TemporaryDirectory(prefix="bench-signatures-") as tmp:
        work = Path(tmp)
        (work / "registry").mkdir()
        registry = _start(work / "registry", None)
        try:
            if "keyed" in variants:
                key = make_key(work / "keys")
                refs = signed_refs(work, registry, "signed", lambda i, repository, digest: (
                    cosign_sign if i % 2 else bundle_sign)(registry, repository, digest, key))  # fmt: skip
                measure(work, "keyed", refs, '[[image.signed-by]]\nkeys = ["keys/cosign.pub"]\n')
            if "keyless" in variants:
                signer = make_signer(work / "sigstore")
                refs = signed_refs(work, registry, "keyless", lambda i, repository, digest: (
                    cosign_keyless if i % 2 else bundle_keyless)(registry, repository, digest, signer))  # fmt: skip
                rules = (
                    f'[[image.signed-by]]\n[[image.signed-by.identities]]\nissuer = "{GITHUB_ISSUER}"\n'
                    f'subject = "{WORKFLOW}"\n\n[sigstore]\ntrusted-root = "{signer.root.relative_to(work)}"\n'
                )
                measure(work, "keyless", refs, rules)
            print(f"  ({PREPARER})")
        finally:
            registry.process.terminate()
            registry.process.wait()


if __name__ == "__main__":
    main()
