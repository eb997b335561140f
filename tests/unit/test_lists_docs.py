"""The dokku-style and CI-style invocations of docs/usage.md and docs/platforms.md are command lines the preparer
accepts as written, and give the lists they show (issue 49)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from preparer import goflags
from preparer.inputs import resolve_inputs

DOCS = Path(__file__).resolve().parents[2] / "docs"


def invocations() -> list[tuple[str, str]]:
    """Each command line of a shell block that gives lists, with the variables exported before it."""
    found = []
    for name in ("usage.md", "platforms.md"):
        for block in re.findall(r"```sh\n(.*?)```", (DOCS / name).read_text(), re.DOTALL):
            if "-buildpack" not in block and "CNB_PREPARER_BUILDPACKS" not in block:
                continue
            joined = block.replace("\\\n", " ")
            commands = [line for line in joined.splitlines() if line.strip() and not line.startswith("#")]
            found += [(name, command) for command in commands if "preparer " in command]
    return found


def test_both_docs_show_a_dokku_style_and_a_ci_style_invocation() -> None:
    by_doc = {
        name: [command for doc, command in invocations() if doc == name]
        for name in ("usage.md", "platforms.md")
    }
    for commands in by_doc.values():
        assert any(
            "-env-file" in c and "-buildpack" in c for c in commands
        )  # dokku: buildpacks:set, config:set
        assert any("CNB_PREPARER_BUILDPACKS" in c or "-env NPM_TOKEN" in c for c in commands)  # CI: variables


@pytest.mark.parametrize(("doc", "command"), invocations())
def test_each_invocation_is_accepted_as_written(doc: str, command: str, tmp_path: Path) -> None:
    words = shlex.split(command)
    environ = {"CNB_PLATFORM_API": "0.15"}
    at = next(i for i, w in enumerate(words) if w in ("preparer", "/cnb/lifecycle/preparer"))
    environ |= dict(w.split("=", 1) for w in words[:at] if re.match(r"[A-Z_][A-Z0-9_]*=", w))
    text = (DOCS / doc).read_text()
    environ |= dict(re.findall(r"^export (CNB_PREPARER_\w+)='([^']*)'", text, re.MULTILINE))
    args = words[at + 1 :]
    parsed = goflags.parse(args)
    assert not parsed.warnings
    inputs = resolve_inputs(parsed.values, environ, cwd=tmp_path)
    assert inputs.buildpacks or inputs.build_env
