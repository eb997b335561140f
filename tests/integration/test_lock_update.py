"""``-update-lock`` moves only what is asked (docs/lock.md), as ``uv lock`` and ``cargo update -p`` do: what the
project changed, the entries named (``=<id>``, ``=<entry>``), or all of them (``=all``). Real CLI, the suite's
real registry (a moved tag is a second push) and HTTP server.
"""

from __future__ import annotations

import shutil
import tomllib
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.buildpacks import make_tgz
from tests.golden import Layout
from tests.integration.test_lock import fresh, order, push, requests_seen
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.plugins.registry import Registry
from tests.projects import group


@pytest.fixture
def lock(tmp_path: Path) -> Path:
    return tmp_path / "preparer.lock"


def locked(lock: Path) -> dict[str, dict[str, object]]:
    """The lock's tables by entry."""
    return {t["entry"]: t for t in tomllib.loads(lock.read_text())["buildpack"]}


def lock_lines(result: Result) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith("Lock: ")]


def two_entries(
    preparer: Callable[..., Result], registry: Registry, http_server: FileServer, tmp_path: Path, lock: Path
) -> tuple[str, str, str]:
    """A project of an image by tag (``acme/img`` 1.0.0) and an archive (``acme/a`` 1.0.0), locked; then the tag is
    moved to 1.1.0, as a new release does. The image's ``uri``, the first digest, the moved one."""
    repository = f"lock/{uuid.uuid4().hex[:8]}"
    image = f"docker://{registry.host}/{repository}:latest"
    first = push(registry, tmp_path, repository, "1.0.0")
    make_tgz(http_server.root / "a.tgz", "acme/a", "1.0.0")
    make_tgz(http_server.root / "b.tgz", "acme/b", "2.0.0")
    project = group(image, http_server.url("a.tgz"))
    assert preparer("-lock", str(lock), project=project).code == 0
    moved = push(registry, tmp_path, repository, "1.1.0")
    return image, first, moved


def test_update_lock_resolves_only_the_edited_entry_and_keeps_a_moved_tag(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry,
    http_server: FileServer, lock: Path,
) -> None:  # fmt: skip
    image, first, moved = two_entries(preparer, registry, http_server, tmp_path, lock)
    edited = group(image, http_server.url("b.tgz"))  # the user changed the second entry only
    stale = preparer("-lock", str(lock), project=edited)
    assert stale.code == 3 and stale.stderr.rstrip().endswith("rerun with -update-lock")
    fresh(layout)
    result = preparer("-lock", str(lock), "-update-lock", project=edited)  # the advice, followed
    assert result.code == 0, result.stderr
    assert order(layout) == [("acme/img", "1.0.0"), ("acme/b", "2.0.0")]  # the moved tag did not move
    tables = locked(lock)
    assert tables["io.buildpacks.group[0]"]["digest"] == first != moved
    assert tables["io.buildpacks.group[1]"]["id"] == "acme/b"
    [line] = lock_lines(result)  # one line, for what changed; none for what was kept
    assert line.startswith("Lock: io.buildpacks.group[1]: acme/a@1.0.0 (") and "-> acme/b@2.0.0 (" in line


def test_an_added_and_a_removed_entry_are_the_only_changes(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry,
    http_server: FileServer, lock: Path,
) -> None:  # fmt: skip
    image, first, _ = two_entries(preparer, registry, http_server, tmp_path, lock)
    fresh(layout)
    added = preparer("-lock", str(lock), "-update-lock", project=group(image, http_server.url("a.tgz")) +
                     '[[io.buildpacks.group]]\nid = "examples/node"\n')  # fmt: skip
    assert added.code == 0, added.stderr
    assert lock_lines(added) == [
        "Lock: io.buildpacks.group[2]: (not locked) -> examples/node@1.2.0 (builder)"
    ]
    assert locked(lock)["io.buildpacks.group[0]"]["digest"] == first
    fresh(layout)
    removed = preparer("-lock", str(lock), "-update-lock", project=group(image))
    assert removed.code == 0, removed.stderr
    lines = lock_lines(removed)
    assert len(lines) == 2, lines
    assert lines[0].startswith(
        f"Lock: io.buildpacks.group[1]: acme/a@1.0.0 ({http_server.url('a.tgz')}, sha256:"
    )
    assert lines[0].endswith(" -> (removed)")
    assert lines[1] == "Lock: io.buildpacks.group[2]: examples/node@1.2.0 (builder) -> (removed)"
    assert list(locked(lock)) == ["io.buildpacks.group[0]"]
    assert locked(lock)["io.buildpacks.group[0]"]["digest"] == first


def test_an_entry_named_by_id_or_key_moves_and_all_moves_everything(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry,
    http_server: FileServer, lock: Path,
) -> None:  # fmt: skip
    image, _, moved = two_entries(preparer, registry, http_server, tmp_path, lock)
    project = group(image, http_server.url("a.tgz"))
    make_tgz(http_server.root / "v2" / "a.tgz", "acme/a", "1.1.0")
    shutil.copy(http_server.root / "v2" / "a.tgz", http_server.root / "a.tgz")  # the archive moved too
    for name in ("acme/img", "io.buildpacks.group[0]"):
        shutil.copy(lock, lock.with_suffix(".before"))
        fresh(layout)
        result = preparer("-lock", str(lock), f"-update-lock={name}", project=project)
        assert result.code == 0, result.stderr
        assert order(layout) == [
            ("acme/img", "1.1.0"),
            ("acme/a", "1.0.0"),
        ]  # the archive kept, from the cache
        [line] = lock_lines(result)
        assert (
            line.startswith("Lock: io.buildpacks.group[0]: acme/img@1.0.0 (") and "-> acme/img@1.1.0" in line
        )
        assert locked(lock)["io.buildpacks.group[0]"]["digest"] == moved
        shutil.copy(lock.with_suffix(".before"), lock)
    fresh(layout)
    everything = preparer("-lock", str(lock), "-update-lock=all", project=project)
    assert everything.code == 0, everything.stderr
    assert order(layout) == [("acme/img", "1.1.0"), ("acme/a", "1.1.0")]
    assert len(lock_lines(everything)) == 2


def test_a_name_that_names_no_entry_is_exit_3_listing_the_entries_before_any_request(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer, lock: Path
) -> None:
    make_tgz(http_server.root / "a.tgz", "acme/a", "1.0.0")
    project = group(http_server.url("a.tgz"))
    assert preparer("-lock", str(lock), project=project).code == 0
    before, seen = lock.read_bytes(), len(requests_seen(http_server))
    result = preparer("-lock", str(lock), "-update-lock=acme/typo", project=project)
    assert result.code == 3
    assert (
        f"ERROR: failed to update lock file {lock}: -update-lock=acme/typo names no entry of the project: name a "
        "buildpack id or an entry (io.buildpacks.group[0] (acme/a)), or all" in result.stderr
    )
    assert requests_seen(http_server)[seen:] == [] and lock.read_bytes() == before


def test_a_value_after_a_space_is_not_the_flags_and_is_said_so(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer, lock: Path
) -> None:
    make_tgz(http_server.root / "a.tgz", "acme/a", "1.0.0")
    project = group(http_server.url("a.tgz"))
    assert preparer("-lock", str(lock), project=project).code == 0
    result = preparer("-lock", str(lock), "-update-lock", "acme/a", project=project)  # Go reads a positional
    assert (
        "Warning: -update-lock acme/a: 'acme/a' is an argument, not the flag's value (as in Go, a flag that may "
        "take no value takes one only after '='): write -update-lock=acme/a" in result.stderr
    )


def test_the_environment_names_entries_comma_separated(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry,
    http_server: FileServer, lock: Path,
) -> None:  # fmt: skip
    image, _, moved = two_entries(preparer, registry, http_server, tmp_path, lock)
    project = group(image, http_server.url("a.tgz"))
    fresh(layout)
    result = preparer(
        "-lock", str(lock), project=project, env={"CNB_PREPARER_UPDATE_LOCK": "acme/img,acme/a"}
    )
    assert result.code == 0, result.stderr
    assert locked(lock)["io.buildpacks.group[0]"]["digest"] == moved
    unchanged = preparer(
        "-lock", str(lock), project=project, env={"CNB_PREPARER_UPDATE_LOCK": "acme/nothing"}
    )
    assert unchanged.code == 3 and "CNB_PREPARER_UPDATE_LOCK=acme/nothing names no entry" in unchanged.stderr


def test_a_dry_run_update_says_what_it_fetches_and_never_that_nothing_is(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry,
    http_server: FileServer, lock: Path,
) -> None:  # fmt: skip
    image, _, _ = two_entries(preparer, registry, http_server, tmp_path, lock)
    before = lock.read_bytes()
    fresh(layout)
    result = preparer(
        "-lock", str(lock), "-update-lock", "-dry-run", project=group(image, http_server.url("b.tgz"))
    )
    assert result.code == 0, result.stderr
    assert "nothing is fetched" not in result.stdout + result.stderr
    assert "-update-lock fetches the entries it resolves again" in result.stdout
    assert (
        f"Fetching io.buildpacks.group[1] ({http_server.url('b.tgz')}) to resolve it again" in result.stdout
    )
    assert "Fetching io.buildpacks.group[0]" not in result.stdout  # kept as locked: not fetched
    assert f"The lock file {lock} would change:" in result.stdout
    assert "  lock: io.buildpacks.group[1]: acme/a@1.0.0 (" in result.stdout
    assert "io.buildpacks.group[0]:" not in result.stdout.split("would change:")[1]
    assert lock.read_bytes() == before


def test_each_message_names_what_the_user_wrote(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer, lock: Path
) -> None:
    make_tgz(http_server.root / "a.tgz", "acme/a", "1.0.0")
    make_tgz(http_server.root / "b.tgz", "acme/b", "1.0.0")
    project = group(http_server.url("a.tgz"), http_server.url("b.tgz"))
    assert preparer("-lock", str(lock), project=project).code == 0
    # Names separated by commas, as the variable takes them: both entries are named.
    fresh(layout)
    both = preparer("-lock", str(lock), "-update-lock=acme/a,acme/b", project=project)
    assert both.code == 0, both.stderr
    assert (
        "Updating the lock file" in both.stdout
        and "0 entries kept as locked, 2 resolved again" in both.stdout
    )
    before, seen = lock.read_bytes(), len(requests_seen(http_server))
    # Names that name no entry are said as written, and only the entries are listed as valid.
    typos = preparer("-lock", str(lock), "-update-lock=x,y", project=project)
    assert typos.code == 3
    assert (
        f"ERROR: failed to update lock file {lock}: -update-lock=x,y: none of x, y names an entry of the project: "
        "name a buildpack id or an entry (io.buildpacks.group[0] (acme/a), io.buildpacks.group[1] (acme/b)), or all"
    ) in typos.stderr
    one = preparer("-lock", str(lock), "-update-lock=acme/a,acme/typo", project=project)
    assert one.code == 3 and "-update-lock=acme/typo names no entry of the project: name a" in one.stderr
    # An empty value names the flag as written, not a library field.
    empty = preparer("-lock", str(lock), "-update-lock=", project=project)
    assert empty.code == 3
    assert (
        "ERROR: failed to resolve inputs: -update-lock= gives no value: write -update-lock (the entries the project "
        "changed are resolved again), -update-lock=<buildpack id or entry> (that one as well), or -update-lock=all"
    ) in empty.stderr
    assert "Inputs." not in empty.stderr
    # A bool word Go does not read, in the variable, is the variable's.
    yes = preparer("-lock", str(lock), project=project, env={"CNB_PREPARER_UPDATE_LOCK": "yes"})
    assert yes.code == 3
    assert (
        "ERROR: failed to resolve inputs: CNB_PREPARER_UPDATE_LOCK=yes is neither a bool (true, false, 1, 0) nor "
        "the name of an entry: set CNB_PREPARER_UPDATE_LOCK=true to update the lock"
    ) in yes.stderr
    assert "-update-lock" not in yes.stderr
    # Names the variable gives that name no entry are the variable's; a flag that gives names overrides it.
    typo = preparer("-lock", str(lock), project=project, env={"CNB_PREPARER_UPDATE_LOCK": "acme/typo"})
    assert typo.code == 3
    assert "CNB_PREPARER_UPDATE_LOCK=acme/typo names no entry of the project: name a" in typo.stderr
    assert "-update-lock" not in typo.stderr
    flag = preparer(
        "-lock", str(lock), "-update-lock=x", project=project, env={"CNB_PREPARER_UPDATE_LOCK": "acme/typo"}
    )
    assert flag.code == 3 and "-update-lock=x names no entry of the project" in flag.stderr
    # cargo's and uv's word.
    frozen = preparer("-frozen", "-lock", str(lock), project=project)
    assert frozen.code == 2
    assert (
        "flag provided but not defined: -frozen (did you mean -lock FILE, which freezes the run to an existing "
        "lock, or -require-lock, which refuses to run without one?)"
    ) in frozen.stderr
    assert (
        requests_seen(http_server)[seen:] == [] and lock.read_bytes() == before
    )  # each refused before anything


def test_the_advice_of_a_missing_required_lock_works_from_any_directory(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer, tmp_path: Path
) -> None:
    make_tgz(http_server.root / "a.tgz", "acme/a", "1.0.0")
    project = group(http_server.url("a.tgz"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    default = layout.app / "preparer.lock"
    refused = preparer("-require-lock", project=project, cwd=elsewhere)
    assert refused.code == 3
    advice = f"Write it with a run of your own (-lock {default}, without -require-lock)"
    assert advice in refused.stderr
    # Following it, from the same directory, writes the lock the platform's next run reads.
    assert preparer("-lock", str(default), project=project, cwd=elsewhere).code == 0
    assert default.is_file() and not (elsewhere / "preparer.lock").exists()
    fresh(layout)
    required = preparer("-require-lock", project=project, cwd=elsewhere)
    assert required.code == 0, required.stderr
    assert order(layout) == [("acme/a", "1.0.0")]
