"""The golden cases of fixtures/projects: layout, expectations and comparison, shared by library and CLI runs."""

from __future__ import annotations

import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CASES_DIR = ROOT / "fixtures" / "projects"
BUILDER = ROOT / "fixtures" / "builder" / "cnb"
CASES = sorted(p.name for p in CASES_DIR.iterdir() if (p / "case.toml").is_file())


@dataclass
class Layout:
    """A build's directories in a temporary root, laid out as in a build container."""

    root: Path
    app: Path = field(init=False)
    layers: Path = field(init=False)
    platform: Path = field(init=False)
    buildpacks: Path = field(init=False)
    order: Path = field(init=False)

    def __post_init__(self) -> None:
        self.app = self.root / "workspace"
        self.layers = self.root / "layers"
        self.platform = self.root / "platform"
        self.buildpacks = self.root / "cnb" / "buildpacks"
        self.order = self.root / "cnb" / "order.toml"

    def flags(self) -> list[str]:
        """The creator-style flags naming these directories."""
        return [
            "-app", str(self.app), "-layers", str(self.layers), "-platform", str(self.platform),
            "-buildpacks", str(self.buildpacks), "-order", str(self.order),
        ]  # fmt: skip


def make_layout(root: Path, case: str) -> tuple[Layout, dict[str, Any]]:
    """Lay out ``case`` under ``root``; return the layout and the case's expectations (placeholders filled)."""
    layout = Layout(root)
    shutil.copytree(BUILDER, root / "cnb")
    source = CASES_DIR / case
    if (source / "app").is_dir():
        shutil.copytree(source / "app", layout.app, symlinks=True)
    else:
        layout.app.mkdir()
    layout.layers.mkdir()
    shutil.copy(source / "project.toml", layout.app / "project.toml")
    pack = root / "config" / "pack.toml"
    if (source / "pack.toml").exists():
        pack.parent.mkdir()
        shutil.copy(source / "pack.toml", pack)
    text = (source / "case.toml").read_text()
    for name, value in (("{app}", layout.app), ("{pack}", pack), ("{buildpacks}", layout.buildpacks)):
        text = text.replace(name, str(value))
    expected = tomllib.loads(text)
    for name in expected.get("app", []):
        path = layout.app / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    for name, value in expected.get("platform-env", {}).items():
        (layout.platform / "env").mkdir(parents=True, exist_ok=True)
        (layout.platform / "env" / name).write_text(value)
    return layout, expected


def listing(root: Path) -> list[str]:
    """Every path below ``root``, relative, directories with a trailing ``/``."""
    return sorted(
        p.relative_to(root).as_posix() + ("/" if p.is_dir() and not p.is_symlink() else "")
        for p in root.rglob("*")
    )


def env_files(layout: Layout) -> dict[str, str]:
    """The ``<platform>/env`` files and their exact contents."""
    env = layout.platform / "env"
    return {p.name: p.read_bytes().decode() for p in sorted(env.iterdir())} if env.is_dir() else {}


def check_outputs(layout: Layout, expected: dict[str, Any], before: dict[str, list[str]]) -> None:
    """Assert the files a user sees after the run, for success and failure alike."""
    order = layout.layers / "order.toml"
    if expected["exit-code"] != 0:
        # All-or-nothing: a failed run changes nothing.
        assert not order.exists()
        assert listing(layout.app) == before["app"]
        assert listing(layout.platform) == before["platform"] if layout.platform.exists() else True
        assert listing(layout.buildpacks) == before["buildpacks"]
        return
    if "order" in expected:
        assert order.read_text() == expected["order"].lstrip("\n")
    else:
        assert not order.exists()
    assert env_files(layout) == expected.get("env", {}) | expected.get("platform-env", {})
    if "app-after" in expected:
        assert listing(layout.app) == expected["app-after"]


def snapshot(layout: Layout) -> dict[str, list[str]]:
    """Listings to compare after a failed run."""
    return {
        "app": listing(layout.app),
        "platform": listing(layout.platform) if layout.platform.exists() else [],
        "buildpacks": listing(layout.buildpacks),
    }
