"""The lock with every layer of the configuration (issue 49, and issue 50's "a lock written by any run is accepted by
the same run again"): each entry is named by the layer and position that gave it (the descriptor, a 0.1 descriptor,
its platform namespace, the platform file, a list flag), and a lock a run writes is the lock the same run is frozen to
next, through the real command. A changed flag makes the lock stale, naming the flag's entry; ``-update-lock`` moves
an entry by that name.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.buildpacks import make_tgz
from tests.golden import Layout
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.projects import HEAD

NODE = '[[io.buildpacks.group]]\nid = "heroku/nodejs"\n'
PACK = ("-platform-namespace", "io.buildpacks.pack")

#: For each layer: the descriptor, the flags (``{pack}`` is the platform file, ``{url}`` the HTTP server's
#: buildpack), the platform file's text, and the entries the lock names, in order.
LAYERS: dict[str, tuple[str, tuple[str, ...], str, list[str]]] = {
    "descriptor": (HEAD + NODE, (), "", ["io.buildpacks.group[0]"]),
    "descriptor 0.1": (
        '[[build.buildpacks]]\nid = "heroku/nodejs"\n[[build.buildpacks]]\nuri = "{url}"\n',
        (),
        "",
        ["build.buildpacks[0]", "build.buildpacks[1]"],
    ),
    "namespace": (
        HEAD
        + '[[io.buildpacks.pack.group]]\nid = "heroku/nodejs"\n[[io.buildpacks.pack.pre.group]]\nuri = "{url}"\n',
        PACK,
        "",
        ["io.buildpacks.pack.pre.group[0]", "io.buildpacks.pack.group[0]"],
    ),
    "platform file": (
        HEAD + NODE,
        (*PACK, "-platform-config", "{pack}"),
        '[[pack.group]]\nid = "heroku/python"\n[[pack.post.group]]\nuri = "{url}"\n',
        ["pack.group[0]", "pack.post.group[0]"],
    ),
    "flags": (
        HEAD + NODE,
        (
            "-buildpack",
            "heroku/python,{url}",
            "-pre-buildpack",
            "heroku/procfile",
            "-post-buildpack",
            "heroku/nodejs",
        ),
        "",
        ["-pre-buildpack[0]", "-buildpack[0]", "-buildpack[1]", "-post-buildpack[0]"],
    ),
    "flags over a namespace": (
        HEAD
        + '[[io.buildpacks.pack.group]]\nid = "heroku/nodejs"\n[[io.buildpacks.pack.post.group]]\nuri = "{url}"\n',
        (*PACK, "-buildpack", "heroku/python"),
        "",
        ["-buildpack[0]", "io.buildpacks.pack.post.group[0]"],
    ),
}


def locked_entries(lock: Path) -> list[str]:
    return [entry["entry"] for entry in tomllib.loads(lock.read_text())["buildpack"]]


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_a_lock_written_by_a_run_is_accepted_by_the_same_run_again_whichever_layer_gave_each_entry(
    name: str, preparer: Callable[..., Result], layout: Layout, tmp_path: Path, http_server: FileServer
) -> None:
    project, flags, platform_file, entries = LAYERS[name]
    make_tgz(http_server.root / "bp.tgz", "acme/http", "1.0.0")
    url = http_server.url("bp.tgz")
    pack = tmp_path / "pack.toml"
    pack.write_text(platform_file.replace("{url}", url))
    args = [arg.replace("{pack}", str(pack)).replace("{url}", url) for arg in flags]
    lock = tmp_path / "preparer.lock"
    written = preparer(*args, "-lock", str(lock), project=project.replace("{url}", url))
    assert written.code == 0, written.stderr
    assert locked_entries(lock) == entries
    before = lock.read_bytes()
    order = (layout.layers / "order.toml").read_bytes()
    frozen = preparer(*args, "-lock", str(lock), "-require-lock")
    assert frozen.code == 0, frozen.stderr
    assert lock.read_bytes() == before
    assert (layout.layers / "order.toml").read_bytes() == order


def test_a_changed_flag_makes_the_lock_stale_naming_its_entry_and_update_lock_moves_it_by_that_name(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    lock = tmp_path / "preparer.lock"
    assert preparer("-b", "heroku/nodejs", "-b", "heroku/procfile", "-lock", str(lock)).code == 0
    stale = preparer("-b", "heroku/python", "-b", "heroku/procfile", "-lock", str(lock))
    assert stale.code == 3
    assert stale.stderr.splitlines()[-1].startswith(
        f'ERROR: failed to apply lock file {lock}: -buildpack[0] is written uri = "heroku/python", but it locks '
        'uri = "heroku/nodejs": rerun with -update-lock'
    ), stale.stderr
    before = lock.read_bytes()
    unknown = preparer("-b", "heroku/nodejs", "-lock", str(lock), "-update-lock=-buildpack[7]")
    assert unknown.code == 3
    assert "-update-lock=-buildpack[7] names no entry of the project: name a buildpack id or an entry " in (
        unknown.stderr
    )
    assert "-buildpack[0] (heroku/nodejs)" in unknown.stderr
    assert lock.read_bytes() == before
    moved = preparer(
        "-b", "heroku/python", "-b", "heroku/procfile", "-lock", str(lock), "-update-lock=-buildpack[0]"
    )
    assert moved.code == 0, moved.stderr
    doc = tomllib.loads(lock.read_text())
    assert [(e["entry"], e["id"]) for e in doc["buildpack"]] == [
        ("-buildpack[0]", "heroku/python"),
        ("-buildpack[1]", "heroku/procfile"),
    ]


def test_a_hand_written_entry_that_names_no_place_is_exit_3_saying_the_forms(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    lock = tmp_path / "preparer.lock"
    assert preparer("-b", "heroku/nodejs", "-lock", str(lock)).code == 0
    lines = lock.read_text().splitlines()
    line = lines.index('entry = "-buildpack[0]"') + 1
    lock.write_text(lock.read_text().replace('entry = "-buildpack[0]"', 'entry = "the first one"'))
    result = preparer("-b", "heroku/nodejs", "-lock", str(lock))
    assert result.code == 3
    assert result.stderr.splitlines()[-1].endswith(
        f"buildpack[0].entry (line {line}): must name an entry by where it is, as io.buildpacks.group[0], "
        "io.buildpacks.pack.pre.group[1] or -buildpack[0] do; rerun with -update-lock"
    ), result.stderr
