"""One TOML reader for every file a run reads: what a document builds is bounded (arrays and inline tables in one
another, tables and arrays in one another, integers), each refusal a located problem with the file's exit code,
never a bare ``RecursionError`` or ``ValueError``; a path that is no regular file is refused at once, never waited
on; and the problems of every kind of file name the line they are at.

The bounds are attacked as issue 48 found them (a 500-deep array, a 5,000-digit integer), in every kind of file a
run reads, through the real CLI, and through the library (:func:`preparer.check_descriptor`,
:func:`preparer.check_policy`).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from preparer import (
    BuilderError,
    DescriptorError,
    FetchError,
    InvalidInputsError,
    check_descriptor,
    check_policy,
)
from preparer.errors import PolicyError, PreparerError
from preparer.fetch.oci.hosts import load_hosts_dir
from preparer.files.buildpack import read_buildpack_toml
from preparer.files.lockfile import parse_lock
from preparer.files.order import read_order
from preparer.target import build_target
from tests.golden import Layout
from tests.plugins.cli import Result
from tests.projects import HEAD

T = TypeVar("T")
NESTING = "nested too deeply: more than 100 arrays or inline tables in one another"
#: Each attack: a line of TOML, what the refusal says, and the column it names.
ATTACKS = {
    "deep-array": ("x = " + "[" * 500 + "]" * 500, NESTING, 105),
    "deep-inline-table": ("x = " + "{ a = " * 150 + "1" + " }" * 150, NESTING, 605),
    "long-dotted-key": (
        "x" + ".x" * 300 + " = 1",
        "nested too deeply: more than 200 tables and arrays in one another",
        1,
    ),
    "huge-integer": (
        "x = " + "9" * 5000,
        (
            "the integer 99999999999999999999… (5000 digits) is out of range: TOML integers are 64-bit, "
            "-9223372036854775808 to 9223372036854775807"
        ),
        5,
    ),
}


def located(cause: str, line: int, column: int) -> str:
    return f"{cause} (at line {line}, column {column})"


# The CLI: every kind of file a run reads, each attack at a line of its own.


def _descriptor(layout: Layout, tmp_path: Path, attack: str) -> tuple[list[str], str, int]:
    path = layout.app / "project.toml"
    path.write_text(HEAD + "[com.example]\n" + attack + "\n")
    return [], f"failed to parse project descriptor: {path}: ", 4


def _platform_file(layout: Layout, tmp_path: Path, attack: str) -> tuple[list[str], str, int]:
    path = tmp_path / "pack.toml"
    path.write_text("[pack]\n" + attack + "\n")
    flags = ["-platform-namespace", "io.buildpacks.pack", "-platform-config", str(path)]
    return flags, f"failed to parse platform config: {path}: ", 2


def _policy(layout: Layout, tmp_path: Path, attack: str) -> tuple[list[str], str, int]:
    path = tmp_path / "policy.toml"
    path.write_text('[sources]\nallow = ["builder"]\n[env]\n' + attack + "\n")
    return ["-policy", str(path)], f"failed to read policy {path}: ", 4


def _lock(layout: Layout, tmp_path: Path, attack: str) -> tuple[list[str], str, int]:
    path = layout.app / "preparer.lock"
    path.write_text("lock-version = 1\n" + attack + "\n")
    return ["-lock", str(path)], f"failed to parse lock file: {path}: ", 2


def _hosts(layout: Layout, tmp_path: Path, attack: str) -> tuple[list[str], str, int]:
    path = tmp_path / "certs.d" / "docker.io" / "hosts.toml"
    path.parent.mkdir(parents=True)
    path.write_text('server = "https://registry-1.docker.io"\n\n' + attack + "\n")
    return ["-registry-hosts-dir", str(tmp_path / "certs.d")], f"failed to read {path}: ", 3


def _buildpack(layout: Layout, tmp_path: Path, attack: str) -> tuple[list[str], str, int]:
    source = layout.app / "bp"
    (source / "bin").mkdir(parents=True)
    (source / "buildpack.toml").write_text('api = "0.10"\n' + attack + "\n")
    (layout.app / "project.toml").write_text(HEAD + '[[io.buildpacks.group]]\nuri = "./bp"\n')
    return [], f"failed to read buildpack.toml of {source}: ", 2


def _order(layout: Layout, tmp_path: Path, attack: str) -> tuple[list[str], str, int]:
    path = tmp_path / "order.toml"
    path.write_text("[[order]]\n" + attack + "\n")
    # Read when the run writes an order of its own around it.
    (layout.app / "project.toml").write_text(HEAD + '[[io.buildpacks.pre.group]]\nid = "examples/node"\n')
    return ["-order", str(path)], f"failed to read builder order: {path}: ", 2


#: Each kind of file: how the attack is put in it, and the exit code its problems have (a buildpack's own files,
#: fetched or the builder's, are not the user's input: exit 1, as every other problem with them).
KINDS: dict[str, tuple[Callable[[Layout, Path, str], tuple[list[str], str, int]], int]] = {
    "descriptor": (_descriptor, 3),
    "platform-file": (_platform_file, 3),
    "policy": (_policy, 3),
    "lock": (_lock, 3),
    "hosts.toml": (_hosts, 3),
    "buildpack.toml": (_buildpack, 1),
    "order.toml": (_order, 1),
}


@pytest.mark.parametrize("attack", ["deep-array", "huge-integer"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_document_past_a_bound_is_a_located_problem_in_every_kind_of_file(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, kind: str, attack: str
) -> None:
    make, code = KINDS[kind]
    text, cause, column = ATTACKS[attack]
    flags, said, line = make(layout, tmp_path, text)
    result = preparer(*flags)
    assert result.code == code, result.stderr
    assert result.stderr.splitlines()[-1] == "ERROR: " + said + located(cause, line, column)
    assert "Traceback" not in result.stderr and not (layout.layers / "order.toml").exists()


@pytest.mark.parametrize("attack", ["deep-inline-table", "long-dotted-key"])
@pytest.mark.parametrize("kind", ["descriptor", "policy"])
def test_every_bound_holds_through_the_command(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, kind: str, attack: str
) -> None:
    make, code = KINDS[kind]
    text, cause, column = ATTACKS[attack]
    flags, said, line = make(layout, tmp_path, text)
    result = preparer(*flags)
    assert (result.code, result.stderr.splitlines()[-1]) == (
        code,
        "ERROR: " + said + located(cause, line, column),
    )


# The library: the same problems, as data.


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_check_descriptor_and_check_policy_locate_every_bound(attack: str) -> None:
    text, cause, column = ATTACKS[attack]
    (problem,) = check_descriptor(text=HEAD + text + "\n")
    assert (problem.exit_code, problem.path, problem.line, problem.column) == (3, "project.toml", 3, column)
    assert problem.message == f"failed to parse project descriptor: project.toml: {located(cause, 3, column)}"
    (problem,) = check_descriptor(
        text=HEAD, platform_namespace="io.buildpacks.pack", platform_config_text="[pack]\n" + text + "\n"
    )
    assert (problem.path, problem.line, problem.column, problem.exit_code) == ("platform file", 2, column, 3)
    (refused,) = check_policy(text="[env]\n" + text + "\n")
    assert isinstance(refused, PolicyError)
    assert (refused.exit_code, refused.path, refused.line, refused.column) == (3, "policy data", 2, column)
    assert refused.message == f"failed to read policy policy data: {located(cause, 2, column)}"


def test_one_level_less_than_each_bound_is_read() -> None:
    assert check_descriptor(text=HEAD + "[com.example]\nx = " + "[" * 100 + "]" * 100 + "\n") == ()
    assert check_descriptor(text=HEAD + "[com.example]\n" + "x" + ".x" * 196 + " = 1\n") == ()
    for number in ("9223372036854775807", "-9223372036854775808", "0x7fffffffffffffff", "1_000_000_000_000"):
        assert check_descriptor(text=HEAD + f"[com.example]\nx = {number}\ny = [{number}, 1]\n") == ()
    for number in ("9223372036854775808", "-9223372036854775809", "0x8000000000000000"):
        (problem,) = check_descriptor(text=HEAD + f"[com.example]\ny = [1, {number}]\n")
        assert (problem.line, problem.column) == (4, 9), problem.message
        assert f"the integer {number} is out of range" in problem.message


def _in_a_thread(call: Callable[[], T]) -> T:
    """What ``call`` returns, within 10 seconds (a read that waits on a FIFO never returns)."""
    done: list[T] = []
    thread = threading.Thread(target=lambda: done.append(call()), daemon=True)
    thread.start()
    thread.join(10)
    assert done, "the read is still waiting"
    return done[0]


def test_a_fifo_as_the_policy_or_the_descriptor_is_refused_at_once(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    fifo = tmp_path / "policy.toml"
    os.mkfifo(fifo)
    start = time.monotonic()
    result = preparer("-policy", str(fifo), project=HEAD)
    assert (result.code, result.stderr.splitlines()[-1]) == (
        3,
        f"ERROR: failed to read policy {fifo}: not a regular file",
    )
    assert time.monotonic() - start < 30
    problems = _in_a_thread(lambda: check_policy(fifo))
    assert [p.message for p in problems] == [f"failed to read policy {fifo}: not a regular file"]
    found = _in_a_thread(lambda: check_descriptor(fifo))
    assert [(p.message, p.exit_code) for p in found] == [
        (f"failed to read project descriptor: {fifo}: not a regular file", 3)
    ]


def test_problems_collected_are_linear_in_the_policy() -> None:
    """3,200 unknown keys took 11 to 14 seconds when each problem searched the file's lines for its key."""
    text = "[env]\n" + "".join(f"unknown-{n} = 1\n" for n in range(3200))
    start = time.monotonic()
    problems = check_policy(text=text)
    assert len(problems) == 3200 and time.monotonic() - start < 5
    assert [(p.key, p.line) for p in problems[:2]] == [("env.unknown-0", 2), ("env.unknown-1", 3)]
    assert problems[-1].line == 3201


# Where problems are: the line (and column) of every kind of file, from the reader's own pass.


def test_the_policys_problems_are_at_their_lines_however_the_keys_are_written() -> None:
    text = (
        '"sources".allow = ["ftp"]\n'  # 1: a quoted key
        "[http]\n"  # 2
        "alow = []\n"  # 3
        "[limits]\n"  # 4
        "run = { entriez = 5 }\n"  # 5: a key in an inline table
        "[[image.signed-by]]\n"  # 6
        'images = ["registry.example/*"]\n'  # 7
        "keys = []\n"  # 8
        "[[image.signed-by]]\n"  # 9
        'images = ["registry.example/*"]\n'  # 10
        "identities = [\n"  # 11
        '  { issuer = "https://issuer.example", subject = "a@example.com" },\n'  # 12
        '  { issuer = "https://issuer.example" },\n'  # 13: an identity in an inline array
        "]\n"
    )
    found = [(p.key, p.line) for p in check_policy(text=text)]
    assert found[:5] == [
        ("sources.allow", 1),
        ("http.alow", 3),
        ("limits.run.entriez", 5),
        ("image.signed-by", 6),
        ("image.signed-by.identities", 13),
    ], found


def test_the_lock_names_the_line_of_a_key_in_its_second_entry() -> None:
    digest = "sha256:" + "0" * 64
    text = (
        "lock-version = 1\n"
        "[[buildpack]]\n"
        'entry = "io.buildpacks.group[0]"\nid = "me/a"\nversion = "1.0.0"\nsource = "path"\n'
        "[[buildpack]]\n"  # 7
        'entry = "io.buildpacks.group[1]"\nid = "me/b"\nversion = "1.0.0"\nsource = "http"\n'
        f'pinned = "https://h/b.tgz"\ndigest = "{digest[:20]}"\n'  # 12, 13
    )
    with pytest.raises(DescriptorError) as info:
        parse_lock(text.encode(), "preparer.lock")
    assert (info.value.key, info.value.line) == ("buildpack[1].digest", 13)
    assert "buildpack[1].digest (line 13): must be sha256:<64 hex digits>" in info.value.message


def _builder_files(tmp_path: Path, text: str) -> list[tuple[str, Callable[[], object], type[PreparerError]]]:
    hosts = tmp_path / "certs.d" / "docker.io" / "hosts.toml"
    hosts.parent.mkdir(parents=True)
    for path in (
        hosts,
        tmp_path / "order.toml",
        tmp_path / "bp" / "buildpack.toml",
        tmp_path / "analyzed.toml",
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return [
        ("hosts.toml", lambda: load_hosts_dir(tmp_path / "certs.d"), InvalidInputsError),
        ("order.toml", lambda: read_order(tmp_path / "order.toml"), BuilderError),
        ("buildpack.toml", lambda: read_buildpack_toml(tmp_path / "bp" / "buildpack.toml"), FetchError),
        (
            "buildpack.toml",
            lambda: read_buildpack_toml(tmp_path / "bp" / "buildpack.toml", builder=True),
            BuilderError,
        ),
        (
            "analyzed.toml",
            lambda: build_target(None, "linux/amd64", "", tmp_path / "analyzed.toml", tmp_path / "os"),
            DescriptorError,
        ),
    ]


def test_the_other_files_say_where_they_are_not_toml(tmp_path: Path) -> None:
    text = "# a comment\n[a]\nb = 1\nc = 1 2\n"
    for name, read, error in _builder_files(tmp_path, text):
        with pytest.raises(error) as info:
            read()
        assert type(info.value) is error and info.value.message.endswith("(at line 4, column 7)"), (
            name,
            info.value,
        )
        if isinstance(info.value, DescriptorError):  # analyzed.toml: the place as data too
            assert (info.value.line, info.value.column, info.value.exit_code) == (4, 7, 3)
