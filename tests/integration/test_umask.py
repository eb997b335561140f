"""A hardened container's umask (077) must not make installed buildpacks unreadable for the build user.

The real CLI runs as root under umask 077, installing buildpacks of every kind of source (inline, a local
archive and an http archive without directory entries, a local directory, a buildpackage from the registry);
then, as the build user (uid/gid 1000), every installed file is read and every ``bin/detect`` run, as the
lifecycle's detector would.
"""

from __future__ import annotations

import gzip
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.buildpacks import buildpack_toml, entry, make_dir, make_tar
from tests.golden import BUILDER, Layout
from tests.plugins.cli import base_env
from tests.plugins.http_server import FileServer
from tests.plugins.registry import Registry, build_package, push

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switching to the build user needs root")
BUILD_USER = 1000


def flat_tgz(bp_id: str) -> bytes:
    """A buildpack archive with no directory entries at all: its directories are implied by its files."""
    script = b"#!/bin/sh\nexit 0\n"
    tar = make_tar([
        (entry("buildpack.toml"), buildpack_toml(bp_id).encode()),
        (entry("bin/detect", mode=0o755), script),
        (entry("bin/build", mode=0o755), script),
        (entry("lib/deep/data.txt"), b"data\n"),
    ])  # fmt: skip
    return gzip.compress(tar)


def test_everything_installed_under_umask_077_is_usable_by_the_build_user(
    world: Path, http_server: FileServer, registry: Registry, tmp_path: Path
) -> None:
    layout = Layout(world / "build")
    shutil.copytree(BUILDER, layout.root / "cnb")
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    for path in (layout.root, layout.app, layout.layers):
        path.chmod(0o755)
    (layout.app / "local.tgz").write_bytes(flat_tgz("me/local-archive"))
    make_dir(layout.app / "local-dir", "me/local-dir")
    (http_server.root / "remote.tgz").write_bytes(flat_tgz("me/remote"))
    package = build_package(tmp_path / "pkg", [("me/packaged", "1.0.0", "")], ("me/packaged", "1.0.0"))
    push(package.layout, "latest", registry.ref("me/packaged", "1"))
    (layout.app / "project.toml").write_text(
        '[_]\nschema-version = "0.2"\n'
        '[[io.buildpacks.group]]\nuri = "local.tgz"\n'
        '[[io.buildpacks.group]]\nuri = "./local-dir"\n'
        f'[[io.buildpacks.group]]\nuri = "{http_server.url("remote.tgz")}"\n'
        f'[[io.buildpacks.group]]\nuri = "docker://{registry.ref("me/packaged", "1")}"\n'
        '[[io.buildpacks.group]]\nid = "me/inline"\n'
        '[io.buildpacks.group.script]\napi = "0.10"\ninline = "echo built"\n'
        '[[io.buildpacks.build.env]]\nname = "GREETING"\nvalue = "hi"\n'
    )

    def umask_077() -> None:
        os.umask(0o077)

    proc = subprocess.run(
        [sys.executable, "-m", "preparer", *layout.flags(), "-download-cache", str(world / "cache"),
         "-uid", str(BUILD_USER), "-gid", str(BUILD_USER)],
        env=base_env(tmp_path), capture_output=True, text=True, preexec_fn=umask_077, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr

    installed = [layout.buildpacks / d / "1.0.0" for d in ("me_local-archive", "me_local-dir", "me_remote",
                                                          "me_packaged")] + [layout.buildpacks / "me_inline" / "0.0.0"]  # fmt: skip
    for root in installed:
        for path in [root, *root.rglob("*")]:
            mode = path.lstat().st_mode
            if stat.S_ISDIR(mode):
                assert mode & 0o777 == 0o755, path
            elif stat.S_ISREG(mode):
                assert mode & 0o777 in (0o644, 0o755), path

    # As the build user: read everything installed and written, run every bin/detect.
    check = (
        "set -e\n"
        'for bp in "$@"; do\n'
        '  find "$bp" -type f -exec cat {} + > /dev/null\n'
        '  (cd "$bp" && ./bin/detect)\n'
        "done\n"
        f"cat {layout.layers}/order.toml {layout.platform}/env/GREETING > /dev/null\n"
    )
    as_user = subprocess.run(
        ["sh", "-c", check, "check", *map(str, installed)],
        user=BUILD_USER, group=BUILD_USER, extra_groups=[], capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert as_user.returncode == 0, as_user.stderr
    assert (layout.layers / "order.toml").stat().st_uid == BUILD_USER
