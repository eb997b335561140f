"""The process's entry point: the command is imported with the cycle collector paused, and run with it working."""

from __future__ import annotations

import gc
import subprocess
import sys

import pytest

import preparer.__main__
import preparer.cli


def test_the_command_runs_with_the_collector_on_and_start_up_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[bool, int]] = []
    monkeypatch.setattr(preparer.cli, "entry", lambda: seen.append((gc.isenabled(), gc.get_freeze_count())))
    try:
        preparer.__main__.main()
    finally:
        gc.unfreeze()  # this process is pytest's, not the command's
    assert seen and seen[0][0] is True
    assert seen[0][1] > 0


def test_python_m_preparer_is_the_command() -> None:
    command = [sys.executable, "-m", "preparer", "-version"]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, preparer.__version__)
