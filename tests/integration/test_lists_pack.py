"""The platform's lists held to pack: for each case, the group, pre/post and build env that pack would build, read
from pack's code and tests (shared/spec/pack-reference.md §2.1, §2.2, §2.6; the case names the place), against the
``order.toml`` and ``<platform>/env`` the real command writes.

Where the preparer does otherwise, the case says which decision of docs/decisions.md ("Platforms that hold lists")
it follows, and what the preparer writes instead; the test holds both: the difference is real, and it is documented.

The builder is fixtures/builder: its order is ``[[examples/node, examples/npm, examples/procfile],
[examples/python, examples/procfile]]`` (pack's tests use ``[[A], [B]]``; the rule is the same).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.buildpacks import make_dir
from tests.golden import Layout, env_files
from tests.plugins.cli import Result
from tests.projects import HEAD

DECISIONS = Path(__file__).resolve().parents[2] / "docs" / "decisions.md"

NODE, NPM, EX_PROCFILE = "examples/node@1.2.0", "examples/npm@0.3.1", "examples/procfile@5.0.0"
PYTHON = "examples/python@2.0.0"
BUILDER = [[NODE, NPM, EX_PROCFILE], [PYTHON, EX_PROCFILE]]
H_NODE, H_PROCFILE, H_PYTHON = "heroku/nodejs@3.0.0", "heroku/procfile@2.0.0", "heroku/python@1.0.0"


@dataclass(frozen=True)
class Differs:
    """Where the preparer does otherwise than pack: the decision (a phrase of docs/decisions.md) and what it writes."""

    decision: str
    order: list[list[str]] | None = None
    env: dict[str, str] | None = None


@dataclass(frozen=True)
class Case:
    """A build: the descriptor, the command line's lists, the environment; what pack builds from them, and where."""

    pack: str  # where pack decides it: its code and tests, as pack-reference.md records them
    args: list[str]
    order: list[list[str]] | None  # pack's order; None: no order.toml (the builder's own)
    env: dict[str, str] = field(default_factory=dict)
    project: str = HEAD
    environ: dict[str, str] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # env files, by name, written in the test's directory
    differs: Differs | None = None


GROUP_NODE = '[[io.buildpacks.group]]\nid = "examples/node"\n'
PRE_PYTHON = '[[io.buildpacks.pre.group]]\nuri = "heroku/python"\n'
ENV_AB = '[[io.buildpacks.build.env]]\nname = "A"\nvalue = "1"\n[[io.buildpacks.build.env]]\nname = "B"\nvalue = "1"\n'

CASES = {
    "flags-replace-the-descriptor-group": Case(
        "pkg/client/build.go:1233-1247 (processBuildpacks: --buildpack overrides the descriptor's group)",
        ["-buildpack", "heroku/nodejs", "-buildpack", "heroku/procfile"],
        [[H_NODE, H_PROCFILE]],
        project=HEAD + GROUP_NODE,
    ),
    "one-value-comma-separated": Case(
        "internal/commands/build.go:258 (StringSliceVarP: 'or supply once by comma-separated list')",
        ["-buildpack", "heroku/nodejs,heroku/procfile"],
        [[H_NODE, H_PROCFILE]],
    ),
    "short-flag-and-a-list-per-value": Case(
        "internal/commands/build.go:258 (-b, the short name; each value a list, values appended)",
        ["-b", "heroku/nodejs,heroku/procfile", "-b", "heroku/python"],
        [[H_NODE, H_PROCFILE, H_PYTHON]],
    ),
    "csv-quotes-keep-a-comma": Case(
        "pflag string_slice.go readAsCSV (encoding/csv: a quoted item keeps its comma)",
        ["-buildpack", '"./bp,1",heroku/procfile'],
        [["acme/comma@1.0.0", H_PROCFILE]],
    ),
    "no-flag-the-descriptor-group": Case(
        "pkg/client/build.go:1233 (no --buildpack: the descriptor's group)",
        [],
        [[NODE]],
        project=HEAD + GROUP_NODE,
    ),
    "id-at-version": Case(
        "pkg/buildpack/locator_type.go:56-112 (an <id>@<version> of the builder's is an IDLocator)",
        ["-buildpack", "heroku/python@0.9.0"],
        [["heroku/python@0.9.0"]],
    ),
    "id-without-a-slash": Case(
        "pkg/buildpack/locator_type.go:56-112 (a bare id found on the builder, whatever its form)",
        ["-buildpack", "plainbp", "-buildpack", "plainbp@1.0.0"],
        [["plainbp@1.0.0", "plainbp@1.0.0"]],
    ),
    "pre-wraps-each-builder-group": Case(
        "pkg/client/build.go:1284-1313; build_test.go:1379-1527 (pre applies with no group, to every group)",
        ["-pre-buildpack", "heroku/procfile"],
        [[H_PROCFILE, *BUILDER[0]], [H_PROCFILE, *BUILDER[1]]],
    ),
    "post-wraps-each-builder-group": Case(
        "pkg/client/build.go:1284-1313; build_test.go:1379-1527 (post appended to every group)",
        ["-post-buildpack", "heroku/procfile"],
        [[*BUILDER[0], H_PROCFILE], [*BUILDER[1], H_PROCFILE]],
    ),
    "two-pre-buildpacks": Case(
        "pkg/client/build.go:1317-1324 (prependBuildpackToOrder, one at a time: pre = [P1, P2] gives [P2, P1])",
        ["-pre-buildpack", "heroku/procfile", "-pre-buildpack", "heroku/python"],
        [[H_PYTHON, H_PROCFILE, *BUILDER[0]], [H_PYTHON, H_PROCFILE, *BUILDER[1]]],
        differs=Differs(
            "Pre buildpacks keep their declared order",
            order=[[H_PROCFILE, H_PYTHON, *BUILDER[0]], [H_PROCFILE, H_PYTHON, *BUILDER[1]]],
        ),
    ),
    "pre-flag-replaces-the-descriptor-pre": Case(
        "pkg/client/build.go:1287-1289 (--pre-buildpack overrides the descriptor's pre group)",
        ["-pre-buildpack", "heroku/procfile"],
        [[H_PROCFILE, *BUILDER[0]], [H_PROCFILE, *BUILDER[1]]],
        project=HEAD + PRE_PYTHON,
    ),
    "descriptor-pre-and-a-post-flag": Case(
        "pkg/client/build.go:1287-1313 (each of pre and post replaced only by its own flag)",
        ["-post-buildpack", "heroku/procfile"],
        [[H_PYTHON, *BUILDER[0], H_PROCFILE], [H_PYTHON, *BUILDER[1], H_PROCFILE]],
        project=HEAD + PRE_PYTHON,
    ),
    "a-group-flag-and-a-pre-flag": Case(
        "pkg/client/build.go:1276 (pre and post apply only when the order is still empty)",
        ["-buildpack", "heroku/nodejs", "-pre-buildpack", "heroku/procfile"],
        [[H_NODE]],
        differs=Differs(
            "Pre and post wrap a group as they wrap the builder's order", order=[[H_PROCFILE, H_NODE]]
        ),
    ),
    "a-descriptor-group-and-a-pre-flag": Case(
        "pkg/client/build.go:1276 (pre and post apply only when the order is still empty)",
        ["-pre-buildpack", "heroku/procfile"],
        [[NODE]],
        project=HEAD + GROUP_NODE,
        differs=Differs(
            "Pre and post wrap a group as they wrap the builder's order", order=[[H_PROCFILE, NODE]]
        ),
    ),
    "env-descriptor-then-files-then-flags": Case(
        "pkg/client/build.go:558-565; internal/commands/build.go:365-382 (descriptor, env files, --env; later wins)",
        ["-env-file", "{a.env}", "-env", "C=3"],
        None,
        {"A": "2", "B": "1", "C": "3"},
        project=HEAD + ENV_AB,
        files={"a.env": "A=2\nC=2\n"},
    ),
    "env-files-in-order": Case(
        "internal/commands/build.go:368-376 (each env file in order, later wins)",
        ["-env-file", "{a.env}", "-env-file", "{b.env}"],
        None,
        {"A": "2", "B": "1"},
        files={"a.env": "A=1\nB=1\n", "b.env": "A=2\n"},
    ),
    "env-name-from-the-environment": Case(
        "internal/commands/build.go:400-407 (addEnvVar: NAME alone is os.Getenv(NAME))",
        ["-env", "FROM_HOST", "-env", "UNSET_HERE"],
        None,
        {"FROM_HOST": "host value", "UNSET_HERE": ""},
        environ={"FROM_HOST": "host value"},
    ),
    "env-file-line-format": Case(
        "internal/commands/build.go:384-398 (lines split at \\n, TrimSpace, SplitN at the first =, NAME alone)",
        ["-env-file", "{a.env}"],
        None,
        {"K": "V=W", "EMPTY": "", "FROM_HOST": "h", "SPACED": "inner  space"},
        environ={"FROM_HOST": "h"},
        files={"a.env": "  K=V=W  \r\n\nEMPTY=\nFROM_HOST\nSPACED=inner  space\t\n"},
    ),
    "env-file-comment": Case(
        "internal/commands/build.go:384-398 (every non-empty line is a variable; '#' is not special)",
        ["-env-file", "{a.env}"],
        None,
        {"# a note": "", "A": "1"},
        files={"a.env": "# a note\nA=1\n"},
        differs=Differs("A line that starts with `#` is a comment", env={"A": "1"}),
    ),
}


def order_of(layout: Layout) -> list[list[str]] | None:
    path = layout.layers / "order.toml"
    if not path.exists():
        return None
    doc = tomllib.loads(path.read_text())
    return [[f"{e['id']}@{e['version']}" for e in group["group"]] for group in doc["order"]]


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_preparer_builds_what_pack_builds_or_what_a_decision_says(
    name: str, preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    case = CASES[name]
    make_dir(layout.app / "bp,1", "acme/comma")
    make_dir(layout.buildpacks / "plainbp" / "1.0.0", "plainbp")
    args = []
    for arg in case.args:
        for file, text in case.files.items():
            (tmp_path / file).write_text(text)
            arg = arg.replace("{" + file + "}", str(tmp_path / file))
        args.append(arg)
    result = preparer(*args, project=case.project, env=case.environ)
    assert result.code == 0, result.stderr
    written = (order_of(layout), env_files(layout))
    pack = (case.order, case.env)
    if case.differs is None:
        assert written == pack
        return
    differs = case.differs
    expected = (differs.order or case.order, case.env if differs.env is None else differs.env)
    assert written == expected != pack
    assert differs.decision in DECISIONS.read_text(), (
        "each difference from pack is a decision of docs/decisions.md"
    )


def test_the_table_covers_every_list_and_each_rule_of_pack_s_precedence() -> None:
    given = {arg for case in CASES.values() for arg in case.args if arg.startswith("-")}
    assert {"-buildpack", "-b", "-pre-buildpack", "-post-buildpack", "-env", "-env-file"} <= given
    assert len(CASES) >= 19
