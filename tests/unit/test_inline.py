"""Inline buildpacks: the generated files, byte for byte, and the inputs refused with exit 3."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import pytest

from preparer.errors import InvalidInputsError
from preparer.fetch.base import FetchContext
from preparer.fetch.inline import make_inline
from preparer.fetch.sink import Sink


@pytest.fixture
def ctx(tmp_path: Path) -> FetchContext:
    staging = tmp_path / "staging"
    staging.mkdir()
    return FetchContext(Sink(staging))


def test_defaults_and_generated_files(ctx: FetchContext) -> None:
    fetched = make_inline("me/inline", None, "0.10", None, "echo hi", ctx)
    (staged,) = fetched.buildpacks
    root = staged.path
    assert root.parent == ctx.sink.staging
    assert (fetched.top.id, fetched.top.version, fetched.top.api) == ("me/inline", "0.0.0", "0.10")
    assert fetched.digest is None
    assert tomllib.loads((root / "buildpack.toml").read_text()) == {
        "api": "0.10",
        "buildpack": {"id": "me/inline", "version": "0.0.0"},
    }
    assert (root / "bin" / "build").read_text() == "#!/bin/sh\n\necho hi\n"
    assert (root / "bin" / "detect").read_text() == "#!/bin/sh\n\nexit 0\n"
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == [
        "bin",
        "bin/build",
        "bin/detect",
        "buildpack.toml",
    ]
    modes = {p.relative_to(root).as_posix(): p.stat().st_mode & 0o7777 for p in [root, *root.rglob("*")]}
    assert modes == {
        ".": 0o755,
        "bin": 0o755,
        "bin/build": 0o755,
        "bin/detect": 0o755,
        "buildpack.toml": 0o644,
    }


def test_the_scripts_run(ctx: FetchContext, tmp_path: Path) -> None:
    root = (
        make_inline("me/run", "1.2.3", "0.12", "/bin/bash", "echo built > out\nexit 0\n", ctx)
        .buildpacks[0]
        .path
    )
    assert subprocess.run([root / "bin" / "detect"], cwd=tmp_path, check=False).returncode == 0
    assert subprocess.run([root / "bin" / "build"], cwd=tmp_path, check=False).returncode == 0
    assert (tmp_path / "out").read_text() == "built\n"


def test_given_version_and_shell_a_script_already_ending_in_a_newline(ctx: FetchContext) -> None:
    fetched = make_inline("me/v", "2.0.0", "0.7", "/usr/bin/env bash", "set -e\nmake\n", ctx)
    root = fetched.buildpacks[0].path
    assert fetched.top.version == "2.0.0"
    assert (root / "bin" / "build").read_text() == "#!/usr/bin/env bash\n\nset -e\nmake\n"
    assert (root / "bin" / "detect").read_text() == "#!/usr/bin/env bash\n\nexit 0\n"


def test_each_call_gets_its_own_directory(ctx: FetchContext) -> None:
    first = make_inline("me/a", None, "0.10", None, "true", ctx).buildpacks[0].path
    second = make_inline("me/a", None, "0.10", None, "false", ctx).buildpacks[0].path
    assert first != second
    assert (first / "bin" / "build").read_text().endswith("true\n")


@pytest.mark.parametrize(
    ("bp_id", "version", "api", "shell", "cause"),
    [
        ("", None, "0.10", None, "'' is not a valid buildpack id"),
        ("../evil", None, "0.10", None, "'../evil' is not a valid buildpack id"),
        ("me/x", None, "", None, "script.api '' is not a version"),
        ("me/x", None, "zero", None, "script.api 'zero' is not a version"),
        ("me/x", None, "0.10", "/bin/sh\nrm -rf /", "script.shell must be a single line"),
        ("me/x", "../../etc", "0.10", None, "version '../../etc' cannot name a buildpack directory"),
        ("me/x", "1.0\nx", "0.10", None, "version '1.0\\nx' cannot name a buildpack directory"),
        ("me/x", "..", "0.10", None, "version '..' cannot name a buildpack directory"),
    ],
)
def test_bad_inputs_exit_3(
    ctx: FetchContext, bp_id: str, version: str | None, api: str, shell: str | None, cause: str
) -> None:
    with pytest.raises(InvalidInputsError) as info:
        make_inline(bp_id, version, api, shell, "true", ctx)
    assert info.value.exit_code == 3
    assert str(info.value) == f"failed to create inline buildpack '{bp_id}': {cause}"
    assert os.listdir(ctx.sink.staging) == []
