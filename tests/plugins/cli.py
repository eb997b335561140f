"""Fixtures: the real CLI in a subprocess, on a temporary build layout made from fixtures/builder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.golden import BUILDER, Layout


@dataclass(frozen=True)
class Result:
    """What a user sees of one run."""

    code: int
    stdout: str
    stderr: str

    @property
    def warnings(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.startswith("Warning: ")]


def base_env(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment for the CLI: Platform API set, no colour, home and cache in the test's directory."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "CNB_PLATFORM_API": "0.15",
        "NO_COLOR": "1",
    }
    return env | extra


def run_cli(args: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 120) -> Result:
    """Run ``python -m preparer`` with ``args``."""
    proc = subprocess.run(
        [sys.executable, "-m", "preparer", *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout, check=False,
    )  # fmt: skip
    return Result(proc.returncode, proc.stdout, proc.stderr)


def measured(
    layout: Layout, tmp_path: Path, *args: str, env: Mapping[str, str] | None = None, seconds: float = 120
) -> tuple[Result, float, float]:
    """The CLI on ``layout`` (``args`` after its flags, a download cache in ``tmp_path``): what it shows, its peak RSS
    in MiB (of the preparer's process alone: a parent that only waits for it) and the seconds it took; a run past
    ``seconds`` is stopped, and says so."""
    script = (
        "import resource, subprocess, sys\n"
        "try:\n"
        f"    p = subprocess.run(sys.argv[1:], capture_output=True, text=True, timeout={seconds})\n"
        "    code, err = p.returncode, p.stderr\n"
        "except subprocess.TimeoutExpired as e:\n"
        f"    code, err = -1, 'still running after {seconds} s'\n"
        "sys.stderr.write(err)\n"
        "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", script, sys.executable, "-m", "preparer", *layout.flags(),
         "-download-cache", str(tmp_path / "cache"), *args],
        capture_output=True, text=True, env=base_env(tmp_path, **(env or {})), timeout=seconds + 60, check=True,
    )  # fmt: skip
    took = time.monotonic() - start
    code, rss_kib = proc.stdout.split()
    return Result(int(code), "", proc.stderr), int(rss_kib) / 1024, took


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    """A build layout with the sample builder and an empty app."""
    built = Layout(tmp_path / "build")
    shutil.copytree(BUILDER, built.root / "cnb")
    built.app.mkdir(parents=True)
    built.layers.mkdir()
    return built


@pytest.fixture
def preparer(layout: Layout, tmp_path: Path) -> Callable[..., Result]:
    """Run the CLI against ``layout``: ``preparer(*flags, project=..., env={...}, cwd=...)``.

    The layout's directory flags come first, so ``flags`` may override them; ``project`` is written to
    ``<app>/project.toml``; ``env`` adds to :func:`base_env`; ``cwd`` is the process's working directory.
    """

    def run(
        *args: str, project: str | None = None, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> Result:
        if project is not None:
            (layout.app / "project.toml").write_text(project)
        flags = [*layout.flags(), "-download-cache", str(tmp_path / "cache")]
        return run_cli([*flags, *args], base_env(tmp_path, **(env or {})), cwd=cwd)

    return run
