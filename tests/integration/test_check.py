"""Every problem of a descriptor at once: the command prints each, the first in the file first; the library's
check_descriptor returns them as data (file, key, line, column) from a path or a text, touching nothing."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from preparer import DescriptorError, check_descriptor
from tests.golden import Layout, listing
from tests.plugins.cli import Result

#: Four problems, written so that the order in which the configuration is read (group, then build, then include)
#: differs from the order in the file (include first).
BROKEN = """\
[_]
schema-version = "0.2"

[io.buildpacks]
include = ["src/", "*a*a*a*b"]

[[io.buildpacks.group]]
uri = 42

[[io.buildpacks.group]]
id = "heroku/procfile"

[[io.buildpacks.group]]
id = "Not An Id"

[[io.buildpacks.build.env]]
name = "A=B"
value = "1"
"""
EXPECTED = [
    (5, 20, "io.buildpacks.include[1]", "'*a*a*a*b' has 4 '*' in one path segment; at most 2 are allowed"),
    (8, 1, "io.buildpacks.group[0].uri", "must be a string, not an integer"),
    (14, 1, "io.buildpacks.group[2].id", "'Not An Id' is not a valid buildpack id"),
    (17, 1, "io.buildpacks.build.env[0].name", "env name 'A=B' must not contain '='"),
]


def test_the_command_prints_every_problem_the_first_in_the_file_first(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    result = preparer(project=BROKEN)
    assert result.code == 3
    descriptor = layout.app / "project.toml"
    assert result.stderr.splitlines() == [
        f"ERROR: failed to validate {descriptor}: {key}: {problem}" for _, _, key, problem in EXPECTED
    ]
    assert listing(layout.layers) == [] and not layout.platform.exists()


def test_check_descriptor_returns_each_problem_as_data_from_a_path_or_a_text(tmp_path: Path) -> None:
    path = tmp_path / "project.toml"
    path.write_text(BROKEN)
    before = os.stat(tmp_path).st_mtime_ns
    for problems, name in (
        (check_descriptor(path), str(path)),
        (check_descriptor(text=BROKEN), "project.toml"),
    ):
        assert all(isinstance(p, DescriptorError) and p.exit_code == 3 and p.path == name for p in problems)
        assert [(p.line, p.column, p.key, p.cause) for p in problems] == [
            (line, column, key, f"{key}: {problem}") for line, column, key, problem in EXPECTED
        ]
    assert os.listdir(tmp_path) == ["project.toml"] and os.stat(tmp_path).st_mtime_ns == before


def test_the_first_problem_raised_carries_them_all(layout: Layout) -> None:
    from preparer import Inputs, plan_run

    (layout.app / "project.toml").write_text(BROKEN)
    inputs = Inputs(
        app_dir=layout.app, layers_dir=layout.layers, platform_dir=layout.platform,
        buildpacks_dir=layout.buildpacks, order_path=layout.order,
    )  # fmt: skip
    with pytest.raises(DescriptorError) as raised:
        plan_run(inputs)
    assert raised.value.key == EXPECTED[0][2] and len(raised.value.problems) == len(EXPECTED)
    assert raised.value.problems[0] is raised.value


@pytest.mark.parametrize(
    ("text", "line", "column", "cause"),
    [
        ('[_]\nschema-version = "0.2"\n[io.buildpacks]\ngroup = [\n', 5, 1, "Invalid value (at end of document)"),
        ('[_]\nschema-version = "0.9"\n', 2, 1, "schema-version '0.9' is not supported; supported versions: 0.1, 0.2, 0.3"),
        ('[_]\nschema-version = "0.2"\n\n[io.buildpacks]\n  exclude = "dist"\n', 5, 3,
         "io.buildpacks.exclude: must be an array of strings, not a string"),
    ],
)  # fmt: skip
def test_a_problem_that_stops_the_reading_is_the_only_one(
    text: str, line: int, column: int, cause: str
) -> None:
    (problem,) = check_descriptor(text=text)
    assert (problem.line, problem.column) == (line, column)
    assert problem.cause is not None and problem.cause.endswith(cause)


def test_a_platform_file_is_checked_after_the_descriptor_in_its_own_lines() -> None:
    problems = check_descriptor(
        text='[_]\nschema-version = "0.2"\n[[io.buildpacks.group]]\nid = 1\n',
        platform_namespace="io.buildpacks.pack",
        platform_config="pack.toml",
        platform_config_text='[pack]\n\n[[pack.build.env]]\nvalue = "x"\n',
    )
    assert [(p.path, p.key, p.line) for p in problems] == [
        ("project.toml", "io.buildpacks.group[0].id", 4),
        ("pack.toml", "pack.build.env[0]", 3),
    ]


def test_a_valid_descriptor_has_no_problem() -> None:
    assert check_descriptor(text='[_]\nschema-version = "0.2"\n[[io.buildpacks.group]]\nid = "a/b"\n') == ()
    with pytest.raises(TypeError):
        check_descriptor()


def test_a_text_over_the_bound_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    from preparer.files.toml import MAX_TOML

    # Not TOML from its first line: parsed first, it would be refused as such, with a place.
    text = "[[[\n" + "x" * MAX_TOML
    wide = "# " + "é" * (MAX_TOML // 2)  # fewer characters than the bound, more bytes
    path = tmp_path / "project.toml"
    path.write_text(text)
    for problems, name in (
        (check_descriptor(text=text), "project.toml"),
        (check_descriptor(text=text.encode()), "project.toml"),
        (check_descriptor(text=wide), "project.toml"),
        (check_descriptor(path), str(path)),
    ):
        assert [(str(p), p.line, p.column) for p in problems] == [
            (f"failed to read project descriptor: {name}: larger than {MAX_TOML} bytes", None, None)
        ]


def test_bytes_that_are_not_utf8_and_nesting_too_deep_have_their_place() -> None:
    head = '[_]\nschema-version = "0.2"\n'
    cases: list[tuple[str | bytes, int, int, str]] = [
        ((head + 'x = "ok"\ny = "caf').encode() + b"\xe9\"\n", 4, 9,
         "not UTF-8 text: invalid continuation byte (at line 4, column 9)"),
        (head + 'x = "ok"\ny = "caf\udce9"\n', 4, 9, "not UTF-8 text: surrogates not allowed (at line 4, column 9)"),
        (head + "a = [{ b = " + "[" * 99 + "]" * 99 + " }]\n", 3, 110,
         "nested too deeply: more than 100 arrays or inline tables in one another (at line 3, column 110)"),
    ]  # fmt: skip
    for text, line, column, cause in cases:
        (problem,) = check_descriptor(text=text)
        assert (problem.path, problem.line, problem.column, problem.cause) == (
            "project.toml",
            line,
            column,
            f"project.toml: {cause}",
        )
    # One level less is read, and checked as a run checks it.
    assert check_descriptor(text=head + "[io.buildpacks]\nx = " + "[" * 100 + "]" * 100 + "\n") == ()
