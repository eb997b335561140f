"""Buildpacks shaped like real ones: they vendor their dependencies.

Each holds ``buildpack.toml``, ``bin/detect``, ``bin/build``, about 2,000 files of 64 B to 2 KiB in 20
directories, and one 32 MiB binary (random, so compression gains nothing on it). The small files are made from a
seed, so every run of the benchmarks extracts the same trees.
"""

from __future__ import annotations

import os
import random
import subprocess
from pathlib import Path

MIB = 1 << 20
SMALL_FILES = 2000
DIRECTORIES = 20


def make_manyfile(root: Path, bp_id: str, seed: int, big: int = 32 * MIB, small: int = SMALL_FILES) -> Path:
    """A many-file buildpack directory at ``root``: ``small`` small files, and a binary of ``big`` bytes."""
    rng = random.Random(seed)
    (root / "bin").mkdir(parents=True)
    (root / "buildpack.toml").write_text(f'api = "0.10"\n[buildpack]\nid = "{bp_id}"\nversion = "1.0.0"\n')
    for name in ("detect", "build"):
        (root / "bin" / name).write_text("#!/bin/sh\nexit 0\n")
        (root / "bin" / name).chmod(0o755)
    for d in range(DIRECTORIES):
        (root / "vendor" / f"pkg{d:02}" / "lib").mkdir(parents=True)
    for i in range(small):
        directory = root / "vendor" / f"pkg{i % DIRECTORIES:02}" / ("lib" if i % 3 else "")
        (directory / f"file{i:04}.rb").write_bytes(rng.randbytes(rng.randint(64, 2048)))
    with open(root / "bin" / "tool", "wb") as f:
        left = big
        while left:
            chunk = min(left, 16 * MIB)
            f.write(os.urandom(chunk))
            left -= chunk
    (root / "bin" / "tool").chmod(0o755)
    return root


def tgz(source: Path, dest: Path) -> Path:
    """``tar -czf`` of ``source``'s content, as a buildpack release pipeline publishes it."""
    subprocess.run(["tar", "-czf", str(dest), "-C", str(source), "."], check=True)
    return dest
