"""Fixtures: the real CLI in a subprocess, on a temporary build layout made from fixtures/builder."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
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
