"""A build laid out for the library's calls, as the service tests make one in each request."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from preparer import Inputs
from tests.golden import BUILDER, Layout
from tests.projects import group


def build(root: Path, *uris: str, **fields: Any) -> Inputs:
    """Inputs for a build in ``root``: the builder's buildpacks, a project whose group fetches ``uris``, no download
    cache; ``fields`` sets other fields of :class:`Inputs` (or a download cache)."""
    layout = Layout(root)
    shutil.copytree(BUILDER / "buildpacks", layout.buildpacks)
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    (layout.app / "project.toml").write_text(group(*uris))
    return Inputs(
        app_dir=str(layout.app), layers_dir=str(layout.layers), platform_dir=str(layout.platform),
        buildpacks_dir=str(layout.buildpacks), order_path=str(layout.order), **({"download_cache": None} | fields),
    )  # fmt: skip
