"""Every wait of a run obeys its cancel handle and its deadline (issue: the library in a long-lived build service,
round 2): a service that cancels a build, or gave it a deadline, gets its thread back at once.

Real components: a credential helper is a real program (a shell script that hangs, with a child of its own), asked
by a real run against the suite's docker-registry that requires credentials.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from preparer import Cancel, Cancelled, Inputs, prepare
from tests.golden import BUILDER, Layout
from tests.plugins.registry import Registry
from tests.projects import HEAD


def hanging_helper(tmp_path: Path, registry: Registry) -> tuple[Inputs, Path]:
    """A build whose image needs credentials from a helper that never answers; where the helper's child writes
    its process id."""
    import shutil

    layout = Layout(tmp_path / "build")
    shutil.copytree(BUILDER / "buildpacks", layout.buildpacks)
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    (layout.app / "project.toml").write_text(
        HEAD + f'[[io.buildpacks.group]]\nuri = "docker://{registry.host}/private/never:1"\n'
    )
    bin_dir, config = tmp_path / "bin", tmp_path / "docker"
    bin_dir.mkdir()
    config.mkdir()
    child = tmp_path / "child.pid"
    helper = bin_dir / "docker-credential-hang"
    helper.write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {child}\nwait\n")
    helper.chmod(0o755)
    (config / "config.json").write_text(json.dumps({"credHelpers": {registry.host: "hang"}}))
    inputs = Inputs(
        app_dir=str(layout.app), layers_dir=str(layout.layers), platform_dir=str(layout.platform),
        buildpacks_dir=str(layout.buildpacks), order_path=str(layout.order), download_cache=None,
        environ={"DOCKER_CONFIG": str(config), "PATH": f"{bin_dir}:{os.environ['PATH']}"},
    )  # fmt: skip
    return inputs, child


def alive(pid_file: Path) -> bool:
    pid = int(pid_file.read_text())
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def wait_for(path: Path, seconds: float = 10) -> None:
    ends = time.monotonic() + seconds
    while not (path.exists() and path.read_text().strip()) and time.monotonic() < ends:
        time.sleep(0.01)
    assert path.exists(), "the credential helper never ran"


def test_a_cancel_stops_a_credential_helper_and_its_children_at_once(
    auth_registry: Registry, tmp_path: Path
) -> None:
    inputs, child = hanging_helper(tmp_path, auth_registry)
    handle = Cancel()
    outcome: list[BaseException] = []
    stopped_at: list[float] = []

    def build() -> None:
        try:
            prepare(inputs, cancel=handle)
        except BaseException as err:  # noqa: BLE001 - handed to the test's thread
            outcome.append(err)
        stopped_at.append(time.monotonic())

    thread = threading.Thread(target=build)
    thread.start()
    wait_for(child)
    cancelled_at = time.monotonic()
    handle.set()
    thread.join(10)
    assert isinstance(outcome[0], Cancelled), outcome
    assert stopped_at[0] - cancelled_at < 0.5, (
        stopped_at[0] - cancelled_at
    )  # 100 ms measured; a loaded machine
    assert not alive(child)  # the helper's own child went with it


def test_a_deadline_stops_a_credential_helper(auth_registry: Registry, tmp_path: Path) -> None:
    inputs, child = hanging_helper(tmp_path, auth_registry)
    began = time.monotonic()
    with pytest.raises(Cancelled) as stopped:
        prepare(inputs, deadline=1)
    took = time.monotonic() - began
    assert (stopped.value.message, stopped.value.exit_code) == (
        "failed to prepare: the run's deadline passed (1 s)",
        1,
    )
    assert took < 1.5, took  # the helper had 30 s of its own
    wait_for(child)
    assert not alive(child)
