"""The rest of issue 48's bounds, verified where main already held them, kept so that they go on holding.

- Every file a run reads by path is refused at once when it is no regular file: a fifo as the platform file, the
  lock, a ``hosts.toml``, the builder's order, a buildpack's ``buildpack.toml`` or ``<layers>/analyzed.toml``
  never holds the run (the real CLI, each within seconds).
- The issue's inputs (a 500-deep array, a 5,000-digit integer) through :func:`preparer.plan_run` as a library
  caller gives them (a descriptor, a platform file, policy data, lock data): a located problem with exit 3, never
  a bare ``RecursionError`` or ``ValueError``, nor an ``UnexpectedError``.
- Problem collection is linear in the policy: the largest policy accepted (1 MiB) of unknown keys, every one a
  problem with its line, in seconds (the issue measured 3,200 at 11-14 s, and projected hours for 1 MiB; main was
  linear, 36 s for 1 MiB under load, most of it "did you mean" measuring every key against every known one; 7 s once
  a word whose length is too far from a candidate's is not measured).
- A ``hosts.toml`` that is no regular file was passed over, its mirrors silently not used; it is refused now.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from preparer import Inputs, check_policy, plan_run
from preparer.errors import PreparerError, UnexpectedError
from tests.golden import Layout
from tests.plugins.cli import Result
from tests.projects import HEAD, group

NOT_REGULAR = "not a regular file"


def _platform_file(layout: Layout, fifo: Path) -> list[str]:
    return ["-platform-namespace", "io.buildpacks.pack", "-platform-config", str(fifo)]


def _lock(layout: Layout, fifo: Path) -> list[str]:
    return ["-lock", str(fifo)]


def _hosts(layout: Layout, fifo: Path) -> list[str]:
    hosts = fifo.parent / "certs.d" / "127.0.0.1:5999"
    hosts.mkdir(parents=True)
    os.mkfifo(hosts / "hosts.toml")
    (layout.app / "project.toml").write_text(group("docker://127.0.0.1:5999/me/x:1"))
    return ["-registry-hosts-dir", str(fifo.parent / "certs.d")]


def _order(layout: Layout, fifo: Path) -> list[str]:
    (layout.app / "project.toml").write_text(HEAD + '[[io.buildpacks.pre.group]]\nid = "examples/node"\n')
    return ["-order", str(fifo)]


def _buildpack(layout: Layout, fifo: Path) -> list[str]:
    (layout.app / "bp" / "bin").mkdir(parents=True)
    os.mkfifo(layout.app / "bp" / "buildpack.toml")
    (layout.app / "project.toml").write_text(group("./bp"))
    return []


#: Each file read by path: how a fifo is put there (the flags naming it), the exit code of its refusal and what it
#: says (a buildpack's directory is copied, and its copy refuses a fifo as any entry).
FIFOS: dict[str, tuple[Callable[[Layout, Path], list[str]], int, str]] = {
    "platform file": (_platform_file, 3, NOT_REGULAR),
    "lock": (_lock, 3, NOT_REGULAR),
    "hosts.toml": (_hosts, 3, NOT_REGULAR),
    "builder order": (_order, 1, NOT_REGULAR),
    "buildpack.toml": (
        _buildpack,
        1,
        "refusing entry 'buildpack.toml': devices, fifos and sockets are not allowed",
    ),
}


@pytest.mark.parametrize("kind", sorted(FIFOS))
def test_a_fifo_read_by_path_is_refused_at_once(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, kind: str
) -> None:
    fifo = tmp_path / "named.fifo"
    os.mkfifo(fifo)
    (layout.app / "project.toml").write_text(HEAD)
    make, code, said = FIFOS[kind]
    flags = make(layout, fifo)
    start = time.monotonic()
    result = preparer(*flags)
    assert time.monotonic() - start < 30
    assert result.code == code, result.stderr
    assert said in result.stderr.splitlines()[-1], result.stderr
    assert not (layout.layers / "order.toml").exists()


def test_a_fifo_as_analyzed_toml_is_never_waited_on(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    """The analyzer's file is read only when it is a regular file: a fifo there is refused at once (exit 3), never
    waited on. It is the detector's own input (docs/targets.md): passed over, the target would be the host's while
    the detector reads something else."""
    analyzed = layout.layers / "analyzed.toml"
    os.mkfifo(analyzed)
    start = time.monotonic()
    result = preparer(project=HEAD, env={"CNB_PREPARER_PLATFORM": "linux/amd64"})
    assert time.monotonic() - start < 30
    assert result.code == 3, result.stderr
    assert (
        result.stderr.splitlines()[-1]
        == f"ERROR: failed to read analyzed.toml: {analyzed}: not a regular file"
    )
    assert not (layout.layers / "order.toml").exists()


ATTACKS = {"deep-array": "x = " + "[" * 500 + "]" * 500, "huge-integer": "x = " + "9" * 5000}
WHERE = {"deep-array": "(at line {line}, column 105)", "huge-integer": "(at line {line}, column 5)"}


def _inputs(layout: Layout, tmp_path: Path, kind: str, attack: str) -> tuple[Inputs, int]:
    """Inputs as a library caller gives them, with ``attack`` in ``kind``; the line it is at."""
    text = ATTACKS[attack]
    (layout.app / "project.toml").write_text(HEAD)
    fields: dict[str, object] = {}
    line = 2
    if kind == "descriptor":
        (layout.app / "project.toml").write_text(HEAD + "[com.example]\n" + text + "\n")
        line = 4
    elif kind == "platform file":
        (tmp_path / "pack.toml").write_text("[pack]\n" + text + "\n")
        fields = {"platform_namespace": "io.buildpacks.pack", "platform_config": tmp_path / "pack.toml"}
    elif kind == "policy data":
        fields = {"policy_data": "[env]\n" + text + "\n"}
    else:
        fields = {"lock_data": ("lock-version = 1\n" + text + "\n").encode()}
    inputs = Inputs(
        app_dir=layout.app, layers_dir=layout.layers, platform_dir=layout.platform,
        buildpacks_dir=layout.buildpacks, order_path=layout.order, download_cache=tmp_path / "cache", **fields,  # type: ignore[arg-type]
    )  # fmt: skip
    return inputs, line


@pytest.mark.parametrize("attack", sorted(ATTACKS))
@pytest.mark.parametrize("kind", ["descriptor", "platform file", "policy data", "lock data"])
def test_plan_run_refuses_the_issues_inputs_as_located_problems(
    layout: Layout, tmp_path: Path, kind: str, attack: str
) -> None:
    inputs, line = _inputs(layout, tmp_path, kind, attack)
    with pytest.raises(PreparerError) as info:
        plan_run(inputs)
    error = info.value
    assert not isinstance(error, UnexpectedError), error
    assert error.exit_code == 3, error
    assert error.message.endswith(WHERE[attack].format(line=line)), error.message
    assert not isinstance(error.__cause__, RecursionError | ValueError) or isinstance(error, PreparerError)


def test_problems_of_the_largest_policy_accepted_are_collected_in_linear_time() -> None:
    lines = []
    size, number = len("[env]\n"), 0
    while True:
        line = f"unknown-{number} = 1\n"
        if size + len(line) > 1 << 20:
            break
        lines.append(line)
        size, number = size + len(line), number + 1
    text = "[env]\n" + "".join(lines)
    assert len(text.encode()) <= 1 << 20
    start = time.monotonic()
    problems = check_policy(text=text)
    took = time.monotonic() - start
    print(f"check_policy of a 1 MiB policy of {number} unknown keys: {took:.1f} s")
    assert len(problems) == number and took < 30, took
    assert (problems[-1].key, problems[-1].line) == (f"env.unknown-{number - 1}", number + 1)


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_check_policy_and_check_descriptor_locate_the_issues_inputs(attack: str) -> None:
    """The issue's inputs through the checking functions a service calls on what is submitted: located problems,
    never a bare ``RecursionError`` or ``ValueError``."""
    from preparer import check_descriptor

    where = WHERE[attack].format(line=2)
    [policy] = check_policy(text="[env]\n" + ATTACKS[attack] + "\n")
    assert (policy.line, str(policy).endswith(where)) == (2, True), policy
    descriptor = HEAD + "[com.example]\n" + ATTACKS[attack] + "\n"
    platform = "[pack]\n" + ATTACKS[attack] + "\n"
    [project] = check_descriptor(text=descriptor)
    [pack] = check_descriptor(
        text=HEAD, platform_namespace="io.buildpacks.pack", platform_config_text=platform
    )
    assert (project.line, pack.line) == (4, 2)
    assert str(project).endswith(WHERE[attack].format(line=4)) and str(pack).endswith(where), (project, pack)
