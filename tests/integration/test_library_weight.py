"""A service that imports the library pays for the library only: the command's own dependencies (typer, and what
it pulls: pydantic, shellingham; rich, for the command's progress bars) are never imported by ``import preparer``
nor by a library build, in a fresh interpreter as a service has it (docs/decisions.md, "Weight").

Real components: the http file server on 127.0.0.1, a real layout, the public API only; the modules are read from
``sys.modules`` of the interpreter that ran the build.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.buildpacks import make_tgz
from tests.golden import BUILDER, Layout
from tests.plugins.http_server import FileServer
from tests.projects import HEAD

#: The command's dependencies and what they pull in; none may be imported by a library build.
COMMAND_ONLY = (
    "typer",
    "click",
    "rich",
    "pydantic",
    "pydantic_core",
    "shellingham",
    "pygments",
    "markdown_it",
)

#: A service's process: import the library, run one build that downloads, extracts and writes the order, with
#: progress and a cache, then say which modules of the command's dependencies were imported.
SERVICE = """
import json, sys
import preparer
imported_by_import = sorted(m for m in sys.modules if m.split(".")[0] in COMMAND_ONLY)
from preparer import Inputs, prepare
events = []
inputs = Inputs(
    app_dir=sys.argv[1], layers_dir=sys.argv[2], platform_dir=sys.argv[3], buildpacks_dir=sys.argv[4],
    order_path=sys.argv[5], download_cache=sys.argv[6],
)
report = prepare(inputs, progress=events.append)
print(json.dumps({
    "import": imported_by_import,
    "build": sorted(m for m in sys.modules if m.split(".")[0] in COMMAND_ONLY),
    "installed": [f"{b.id}@{b.version}" for b in report.buildpacks],
    "events": len(events),
}))
"""


def run_service(tmp_path: Path, uri: str) -> dict[str, object]:
    layout = Layout(tmp_path / "build")
    shutil.copytree(BUILDER, layout.root / "cnb")
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    (layout.app / "project.toml").write_text(HEAD + f'[[io.buildpacks.group]]\nuri = "{uri}"\n')
    script = f"COMMAND_ONLY = {COMMAND_ONLY!r}\n" + SERVICE
    paths = [layout.app, layout.layers, layout.platform, layout.buildpacks, layout.order, tmp_path / "cache"]
    done = subprocess.run(
        [sys.executable, "-c", script, *map(str, paths)],
        capture_output=True, text=True, timeout=120, check=False,
        env=os.environ | {"CNB_PLATFORM_API": "0.15"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_importing_the_library_and_running_a_build_imports_nothing_of_the_command(
    http_server: FileServer, tmp_path: Path
) -> None:
    make_tgz(http_server.root / "bp.tgz", "svc/weight", payload=os.urandom(200_000))
    result = run_service(tmp_path, http_server.url("bp.tgz"))
    assert result["installed"] == ["svc/weight@1.0.0"]  # the build ran: downloaded, extracted, installed
    assert isinstance(result["events"], int) and result["events"] > 0  # with progress, as a service shows it
    assert result["import"] == []
    assert result["build"] == []


def test_the_command_still_has_its_dependencies_installed() -> None:
    """``pip install preparer`` gives a command-line user the command, whole: typer and rich are installed with
    the library (a dependency each), so that the command needs no extra."""
    script = (
        "import importlib.util as u; print(u.find_spec('typer') is not None, u.find_spec('rich') is not None)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split() == ["True", "True"]
