"""The README's library example, run as it is written (only its directories point at a test layout)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.golden import BUILDER, ROOT


def library_example() -> str:
    text = (ROOT / "README.md").read_text()
    section = text[text.index("## Library") :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "the README has no library example"
    return match[1]


def test_the_readme_library_example_runs(tmp_path: Path) -> None:
    shutil.copytree(BUILDER, tmp_path / "cnb")
    (tmp_path / "workspace").mkdir()
    (tmp_path / "config").mkdir()
    (tmp_path / "workspace" / "project.toml").write_text(
        '[_]\nschema-version = "0.2"\n[io.buildpacks]\nbuilder = "x"\n'
        '[[io.buildpacks.group]]\nuri = "heroku/python"\n'
    )
    (tmp_path / "config" / "pack.toml").write_text(
        '[pack]\n[[pack.build.env]]\nname = "FROM_PACK"\nvalue = "1"\n'
    )
    code = library_example()
    for directory in ("/workspace", "/layers", "/platform", "/cnb", "/config"):
        code = code.replace(f'"{directory}', f'"{tmp_path}{directory}')
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    target, *lines = proc.stdout.splitlines()
    assert re.fullmatch(r"  target: linux/[a-z0-9_]+ \(the host\)(, .+ \(from /etc/os-release\))?", target), (
        target
    )
    assert lines == [
        "  group: heroku/python@1.0.0 (installed in <buildpacks>)",
        "    from: io.buildpacks.group[0] in project.toml",
        "    targets: linux",
        f"  would write {tmp_path}/layers/order.toml",
        f"  would write {tmp_path}/platform/env/FROM_PACK",
        "    from: pack.build.env[0]",
        "io.buildpacks.builder not applied by the preparer",
    ]
    assert (tmp_path / "platform" / "env" / "FROM_PACK").read_text() == "1"
    assert "heroku/python" in (tmp_path / "layers" / "order.toml").read_text()


def test_the_public_api_is_documented_with_what_it_raises() -> None:
    import inspect

    import preparer

    for name in preparer.__all__:
        obj = getattr(preparer, name)
        doc = inspect.getdoc(obj) or ""
        assert doc, name
        # describe_plan and committed_report are pure; check_descriptor and check_policy return what they find.
        if inspect.isfunction(obj) and name not in ("describe_plan", "committed_report", "check_descriptor",
                                                    "check_policy"):  # fmt: skip
            assert ":raises PreparerError:" in doc, name
        if name in ("prepare", "run_plan"):  # the two that fetch, and so can be stopped
            assert ":raises preparer.errors.Cancelled:" in doc, name
