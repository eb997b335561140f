"""Copies already in ``<buildpacks>``: when a fetched buildpack's copy there holds the same files (names, kinds,
link targets, bytes; modes aside), and a copy another run installs between the checks and the commit."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from preparer import Inputs, prepare
from preparer.errors import ApplyError
from preparer.fetch.tree import same_tree
from tests.buildpacks import make_dir
from tests.golden import BUILDER


def tree(root: Path) -> Path:
    make_dir(root, "me/tree")
    (root / "lib").mkdir()
    (root / "lib" / "data").write_bytes(b"x" * 200_000)
    (root / "lib" / "link").symlink_to("data")
    return root


def test_the_same_files_are_the_same_tree_whatever_their_modes(tmp_path: Path) -> None:
    one, other = tree(tmp_path / "one"), tree(tmp_path / "other")
    assert same_tree(one, other)
    (other / "lib" / "data").chmod(0o600)
    assert same_tree(one, other)
    os.link(one / "bin" / "build", tmp_path / "linked")  # one inode in both trees: equal without reading
    (other / "bin" / "build").unlink()
    os.link(tmp_path / "linked", other / "bin" / "build")
    assert same_tree(one, other)


@pytest.mark.parametrize(
    "change",
    [
        lambda root: (root / "lib" / "data").write_bytes(b"x" * 199_999 + b"y"),  # same size, one byte
        lambda root: (root / "lib" / "extra").write_text(""),
        lambda root: (root / "lib" / "data").unlink(),
        lambda root: ((root / "lib" / "link").unlink(), (root / "lib" / "link").symlink_to("../bin/build")),
        lambda root: ((root / "lib" / "link").unlink(), (root / "lib" / "link").write_text("data")),
        lambda root: ((root / "bin" / "build").unlink(), (root / "bin" / "build").mkdir()),
        lambda root: os.mkfifo(root / "lib" / "fifo"),
    ],
)
def test_any_other_name_kind_link_or_byte_is_another_tree(tmp_path: Path, change: object) -> None:
    one, other = tree(tmp_path / "one"), tree(tmp_path / "other")
    assert callable(change)
    change(other)
    assert not same_tree(one, other)
    assert not same_tree(other, one)


def test_a_tree_that_cannot_be_read_differs_and_only_a_root_link_is_followed(tmp_path: Path) -> None:
    one = tree(tmp_path / "one")
    assert not same_tree(one, tmp_path / "missing")
    (tmp_path / "link").symlink_to(
        one
    )  # the copy in <buildpacks> a link: followed, as the detector follows it
    assert same_tree(one, tmp_path / "link")
    other = tree(tmp_path / "other")
    shutil.copytree(other / "lib", tmp_path / "lib", symlinks=True)
    shutil.rmtree(other / "lib")
    (other / "lib").symlink_to(tmp_path / "lib")  # below the root, a link is a link, whatever it points to
    assert not same_tree(one, other)


class _OtherRun(logging.Handler):
    """Installs ``copy`` as ``<buildpacks>/me_local/1.0.0`` the moment the commit says it uses the builder's
    buildpack, which it does before installing the fetched ones: another run, between the checks and the commit."""

    def __init__(self, buildpacks: Path, copy: Path) -> None:
        super().__init__()
        self.buildpacks, self.copy = buildpacks, copy

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("Using heroku/procfile@"):
            shutil.copytree(self.copy, self.buildpacks / "me_local" / "1.0.0")


@pytest.mark.parametrize("same", [True, False])
def test_a_copy_another_run_installs_meanwhile_must_be_the_files_checked(tmp_path: Path, same: bool) -> None:
    root = tmp_path / "build"
    shutil.copytree(BUILDER, root / "cnb")
    app, layers = root / "workspace", root / "layers"
    app.mkdir(parents=True)
    layers.mkdir()
    local = make_dir(app / "local", "me/local")
    other = tmp_path / "other"
    shutil.copytree(local, other)
    if not same:
        (other / "bin" / "build").write_text("#!/bin/sh\necho another\n")
    (app / "project.toml").write_text(
        '[_]\nschema-version = "0.2"\n[[io.buildpacks.group]]\nid = "heroku/procfile"\nversion = "1.0.1"\n'
        '[[io.buildpacks.group]]\nuri = "./local"\n'
    )
    buildpacks = root / "cnb" / "buildpacks"
    inputs = Inputs(
        app_dir=app, layers_dir=layers, platform_dir=root / "platform", buildpacks_dir=buildpacks,
        order_path=root / "cnb" / "order.toml", download_cache=None,
    )  # fmt: skip
    handler = _OtherRun(buildpacks, other)
    logger = logging.getLogger("preparer")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.INFO)
    try:
        if same:
            report = prepare(inputs)
            assert [(b.id, b.action) for b in report.buildpacks] == [("heroku/procfile", "present"),
                                                                     ("me/local", "present")]  # fmt: skip
            return
        with pytest.raises(ApplyError) as failed:
            prepare(inputs)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    where = buildpacks / "me_local" / "1.0.0"
    assert failed.value.message == (
        f"failed to install me/local@1.0.0: another run installed other files into {where} while this one ran: run "
        "again (and give each target its own <buildpacks>)"
    )
    assert not (layers / "order.toml").exists()
    assert (where / "bin" / "build").read_text() == "#!/bin/sh\necho another\n"  # the other run's, left alone
