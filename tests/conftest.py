"""Shared fixtures. Services (HTTP server, registry) live in tests/plugins and start on 127.0.0.1."""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

import pytest
from hypothesis import settings

# The suite runs two workers beside real servers: an example's time says nothing about the code under test, and
# Hypothesis's 200 ms deadline made property tests fail at random on a loaded machine.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

pytest_plugins = [
    "tests.plugins.cli",
    "tests.plugins.http_server",
    "tests.plugins.registry",
    "tests.plugins.signing",
    "tests.signed",  # the signed-image scenario: fixtures scene and signer
]

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"


@pytest.fixture
def world() -> Iterator[Path]:
    """A directory every user can traverse, for tests that switch to the build user (pytest's own temporary root
    is private to root)."""
    root = Path(tempfile.mkdtemp(prefix="preparer-world-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def fixtures_dir() -> Path:
    """The repository's ``fixtures/`` directory."""
    return FIXTURES


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep tests away from the real user's cache and docker config."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.delenv("DOCKER_CONFIG", raising=False)
    monkeypatch.delenv("CNB_REGISTRY_AUTH", raising=False)
    for name in list(os.environ):
        if name.startswith("CNB_"):
            monkeypatch.delenv(name, raising=False)


@pytest.fixture
def own_handler() -> Iterator[Callable[[Callable[[int, FrameType | None], object]], None]]:
    """Install a SIGINT handler of the test's with ``signal.signal``, as a service does; the previous one comes
    back after the test."""
    previous = signal.getsignal(signal.SIGINT)

    def install(handler: Callable[[int, FrameType | None], object]) -> None:
        signal.signal(signal.SIGINT, handler)

    try:
        yield install
    finally:
        signal.signal(signal.SIGINT, previous)
