"""Directories a run claims for itself (staging, the download cache's own): what a dead run left is swept by the next
run at once, whatever moment it died at, and never what a live run holds."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pytest

from preparer import _fs
from preparer._fs import claimed_dir, new_dir, sweep

PREFIX = ".preparer-staging-"


def test_a_directory_left_between_its_mkdir_and_its_lock_is_swept_at_once(tmp_path: Path) -> None:
    # A run killed right after the mkdir leaves the first name, unlocked: nobody will ever claim it.
    left = new_dir(tmp_path, PREFIX, ".new")
    assert sweep(tmp_path, PREFIX) == [left.name]
    assert list(tmp_path.iterdir()) == []


def test_a_locked_directory_is_never_swept_whatever_its_name(tmp_path: Path) -> None:
    held = []
    for suffix in ("", ".new"):
        path = new_dir(tmp_path, PREFIX, suffix)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)
        held.append(fd)
    try:
        assert sweep(tmp_path, PREFIX) == []
        assert len(list(tmp_path.iterdir())) == 2
    finally:
        for fd in held:
            os.close(fd)


def test_a_live_runs_directory_is_kept_and_a_dead_ones_removed(tmp_path: Path) -> None:
    dead = new_dir(tmp_path, PREFIX)  # unlocked: its run died
    with claimed_dir(tmp_path, PREFIX) as live:
        assert sweep(tmp_path, PREFIX) == [dead.name]
        assert live.is_dir()
    assert list(tmp_path.iterdir()) == []


def test_a_claim_whose_directory_is_swept_before_it_is_locked_makes_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sweep by another run lands between this run's mkdir and its lock, once.
    made: list[Path] = []

    def made_then_swept(parent: Path, prefix: str, suffix: str = "", mode: int = 0o700) -> Path:
        path = new_dir(parent, prefix, suffix, mode)
        made.append(path)
        if len(made) == 1:
            assert sweep(parent, prefix) == [path.name]
        return path

    monkeypatch.setattr(_fs, "new_dir", made_then_swept)
    with claimed_dir(tmp_path, PREFIX) as claimed:
        assert len(made) == 2
        assert claimed.is_dir() and claimed.name == made[1].name.removesuffix(".new")
        assert sweep(tmp_path, PREFIX) == []  # held
    assert list(tmp_path.iterdir()) == []
