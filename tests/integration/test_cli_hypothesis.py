"""No input of any kind ends in a traceback: random and hostile descriptors and platform files, through the CLI."""

from __future__ import annotations

import contextlib
import io
import shutil
import string
from pathlib import Path

import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preparer.cli import run
from tests.golden import BUILDER, Layout
from tests.plugins.cli import base_env, run_cli

KEYS = st.sampled_from(
    ["_", "io", "buildpacks", "schema-version", "group", "pre", "post", "build", "env", "name", "value", "id",
     "version", "uri", "script", "api", "inline", "shell", "include", "exclude", "exec-env", "builder", "defaults",
     "pack", "com", "project", "buildpacks", "x"]
)  # fmt: skip
SCALARS = st.one_of(
    st.sampled_from(["0.1", "0.2", "0.3", "0.15", "1", "v0.2", "", "..", "/", "a=b", "CNB_X", "latest",
                     "urn:cnb:builder:examples/node", "./bp", "http://127.0.0.1:9/x.tgz", "ftp://x", "http://[::1", "http://h:99999/x", "examples/node",
                     "../../etc/passwd", "*.log", "!keep", "\x00", "é"]),
    st.text(string.printable, max_size=12), st.integers(-3, 3), st.booleans(), st.floats(allow_nan=False),
)  # fmt: skip
VALUES = st.recursive(
    SCALARS,
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(KEYS, children, max_size=4)),
    max_leaves=12,
)
DOCS = st.dictionaries(KEYS, VALUES, max_size=4)
RAW = st.one_of(
    DOCS.map(tomli_w.dumps),
    st.text(max_size=200),
    st.sampled_from(['[_]\nschema-version = "0.2"\n[io.buildpacks\n', "[[a]]\n[a]\n", "x = 1\nx = 2\n"]),
)


def _layout(root: Path) -> Layout:
    layout = Layout(root)
    if not layout.order.exists():
        shutil.copytree(BUILDER, root / "cnb")
    return layout


def _fresh(root: Path) -> Layout:
    for name in ("workspace", "layers", "platform"):
        shutil.rmtree(root / name, ignore_errors=True)
    layout = _layout(root)
    layout.app.mkdir(parents=True)
    return layout


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(project=RAW, pack=st.one_of(st.none(), RAW, DOCS.map(lambda d: tomli_w.dumps({"pack": d}))))
def test_random_descriptors_exit_cleanly(tmp_path: Path, project: str, pack: str | None) -> None:
    layout = _fresh(tmp_path)
    (layout.app / "project.toml").write_text(project)
    args = [*layout.flags(), "-download-cache", "", "-dry-run"]
    if pack is not None:
        (tmp_path / "pack.toml").write_text(pack)
        args += ["-platform-namespace", "io.buildpacks.pack", "-platform-config", str(tmp_path / "pack.toml")]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(args, base_env(tmp_path))
    assert code in (0, 1, 3), err.getvalue()
    assert "Traceback" not in err.getvalue()
    if code:
        last = err.getvalue().splitlines()[-1]
        assert last.startswith("ERROR: failed to ")
        # The catch-all of the CLI says "failed to prepare: <exception type>": that would be a bug.
        assert not last.startswith("ERROR: failed to prepare: "), last


# Flags whose values cannot point the run at a directory outside the test's layout (nor turn off -dry-run).
SAFE_FLAGS = ["log-level", "no-color", "uid", "gid", "tag", "daemon", "insecure-registry", "platform-namespace",
              "skip-restore", "process-type", "run-image", "cache-image", "parallel", "layout", "version", "h"]  # fmt: skip
TOKENS = st.one_of(
    st.builds(
        lambda dashes, name, sep, value: f"{dashes}{name}{sep}{value}",
        st.sampled_from(["-", "--", "---", ""]),
        st.one_of(st.sampled_from(SAFE_FLAGS), st.text(string.ascii_letters + "-=", max_size=6)),
        st.sampled_from(["", "="]),
        st.one_of(st.sampled_from(["", "true", "false", "0x10", "debug", "WARN", "x", "1.5", "-1"]), st.text(max_size=5)),
    ),
    st.sampled_from(["--", "-", "", "img", "true", "false"]),
)  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=st.lists(TOKENS, max_size=6), env_level=st.sampled_from(["", "debug", "nope"]))
def test_random_command_lines_exit_cleanly(tmp_path: Path, argv: list[str], env_level: str) -> None:
    layout = _fresh(tmp_path)
    (layout.app / "project.toml").write_text('[_]\nschema-version = "0.2"\n[[io.buildpacks.build.env]]\nname = "A"\n'
                                             'value = "1"\n')  # fmt: skip
    args = [*layout.flags(), "-download-cache", "", "-dry-run", *argv]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run(args, base_env(tmp_path, CNB_LOG_LEVEL=env_level))
    assert code in (0, 2, 3), err.getvalue()
    assert "Traceback" not in err.getvalue() + out.getvalue()
    lines = err.getvalue().splitlines()
    if code == 2:
        assert lines[-1] == "Usage: preparer [flags] [<image>] (see -h)"
    elif code == 3:
        assert lines[-1].startswith("ERROR: failed to ")
    assert not (layout.platform / "env").exists()  # a dry run, whatever came after it


def test_hostile_examples_in_a_subprocess(tmp_path: Path) -> None:
    cases = [
        '[_]\nschema-version = "0.2"\n[[io.buildpacks.build.env]]\nname = "a/b"\nvalue = "x"\n',
        '[_]\nschema-version = "0.2"\n[[io.buildpacks.group]]\nuri = "../../../../etc"\n',
        "\x00\x01binary",
        '[_]\nschema-version = "0.2"\n[io.buildpacks]\ninclude = ["a"]\nexclude = ["b"]\n',
        '[_]\nschema-version = "0.2"\n[[io.buildpacks.group]]\nuri = "docker://"\n',
        "[io]\nbuildpacks = 1\n",
    ]
    for project in cases:
        layout = _fresh(tmp_path)
        (layout.app / "project.toml").write_text(project)
        result = run_cli([*layout.flags(), "-download-cache", ""], base_env(tmp_path))
        assert result.code in (1, 3), (project, result.stderr)
        assert "Traceback" not in result.stderr
        assert result.stderr.splitlines()[-1].startswith("ERROR: failed to ")
