"""Inputs and outcomes as data, as a build service holds them: a lock kept in its database (``lock_data``, the
written lock in the report), a policy kept as text or parsed once (``policy_data``, ``parse_policy``,
``check_policy``), and an in-memory transport for its own tests (``Inputs.transport``).

Real components: real layouts, real archives, the http file server on 127.0.0.1, the CLI in a subprocess; the
public API only. The in-memory transport is itself the thing under test where it is used.
"""

from __future__ import annotations

import dataclasses
import io
import shutil
import tarfile
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

import preparer
from preparer import InvalidInputsError, PolicyError, PolicyRefused, check_policy, parse_policy, prepare
from preparer.fetch.mock import Answer, Request, mock_transport
from tests.buildpacks import buildpack_toml, make_tgz
from tests.golden import BUILDER, Layout
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.projects import HEAD, group

KEY = (Path(__file__).parents[1] / "data" / "cosign-keyed" / "cosign.pub").read_bytes()


def build(root: Path, project: str, **settings: object) -> tuple[Layout, preparer.Inputs]:
    layout = Layout(root)
    shutil.copytree(BUILDER, layout.root / "cnb")
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    (layout.app / "project.toml").write_text(project)
    inputs = preparer.Inputs(
        app_dir=layout.app, layers_dir=layout.layers, platform_dir=layout.platform,
        buildpacks_dir=layout.buildpacks, order_path=layout.order, download_cache=None,
        **settings,  # type: ignore[arg-type]
    )  # fmt: skip
    return layout, inputs


# The lock as bytes


def test_a_lock_kept_as_bytes_is_made_then_frozen_to_and_never_written(
    http_server: FileServer, tmp_path: Path
) -> None:
    make_tgz(http_server.root / "bp.tgz", "svc/locked", "1.0.0")
    layout, inputs = build(tmp_path / "a", group(http_server.url("bp.tgz")), lock_data=b"")

    first = prepare(inputs)  # no lock in the database yet: the run resolves and hands one back

    assert first.lock is not None and first.lock.path is None and first.lock.action == "written"
    assert first.lock.data is not None and b'id = "svc/locked"' in first.lock.data
    assert [(c.entry, c.old, c.new is not None and c.new.version) for c in first.lock.changes] == [
        ("io.buildpacks.group[0]", None, "1.0.0")
    ]
    # Never written to disk: not in the layout, not where its name would put it, not among what the run wrote.
    assert not [p for p in layout.root.rglob("*") if p.is_file() and p.read_bytes() == first.lock.data]
    assert not Path("Inputs.lock_data").exists()
    assert first.written == (
        str(layout.layers / "order.toml"),
        str(layout.buildpacks / "svc_locked" / "1.0.0"),
    )
    assert "lock" in first.to_dict() and "data" not in first.to_dict()["lock"]

    # The archive changes at its URL; a run frozen to the stored lock refuses the new bytes.
    make_tgz(tmp_path / "v2.tgz", "svc/locked", "2.0.0").replace(http_server.root / "bp.tgz")
    _, frozen = build(tmp_path / "b", group(http_server.url("bp.tgz")), lock_data=first.lock.data)
    with pytest.raises(preparer.LockMismatch) as refused:
        prepare(frozen)
    mismatch = refused.value
    assert mismatch.exit_code == 1 and not mismatch.transient
    assert (mismatch.lock, mismatch.entry) == ("Inputs.lock_data", "io.buildpacks.group[0]")
    assert mismatch.locked == first.lock.changes[0].new.digest  # type: ignore[union-attr]
    assert (
        mismatch.actual is not None
        and mismatch.actual.startswith("sha256:")
        and mismatch.actual != mismatch.locked
    )
    assert (
        "uri pins" not in mismatch.message
        and f"the lock Inputs.lock_data locks {mismatch.locked}" in mismatch.message
    )

    # A bare update keeps what the project did not change: still frozen to the locked bytes, it refuses them too.
    with pytest.raises(preparer.LockMismatch) as kept:
        prepare(replace(frozen, update_lock=True))
    assert kept.value.entry == "io.buildpacks.group[0]"
    assert "rerun with -update-lock=io.buildpacks.group[0]" in kept.value.message

    # Updating the entry named reports what changed, entry by entry, and gives the new lock; a dry run says the same.
    moving = replace(frozen, update_lock=True, update_lock_names=("io.buildpacks.group[0]",))
    dry = prepare(replace(moving, dry_run=True))
    assert dry.lock is not None and dry.lock.action == "would write"
    updated = prepare(moving)
    assert updated.lock is not None and updated.lock.action == "written"
    for report in (dry, updated):
        assert report.lock is not None
        [change] = report.lock.changes
        assert change.entry == "io.buildpacks.group[0]"
        assert change.old is not None and change.old.version == "1.0.0"
        assert change.new is not None and change.new.version == "2.0.0"
        assert report.to_dict()["lock"]["changes"][0]["old"].startswith("svc/locked@1.0.0 (")
    assert updated.lock.data == dry.lock.data and updated.lock.data != first.lock.data

    again = prepare(replace(frozen, lock_data=updated.lock.data))
    assert again.lock is not None and again.lock.action == "frozen" and again.lock.changes == ()
    assert again.lock.data == updated.lock.data


def test_a_lock_given_as_bytes_is_checked_as_a_file_is(tmp_path: Path) -> None:
    project = HEAD + '[[io.buildpacks.group]]\nuri = "urn:cnb:builder:examples/node"\n'
    _, inputs = build(tmp_path, project, lock_data=b"lock-version = 1\n[[buildpack]]\nentry = 3\n")
    with pytest.raises(preparer.DescriptorError) as bad:
        prepare(inputs)
    assert (bad.value.path, bad.value.key, bad.value.line) == ("Inputs.lock_data", "buildpack[0].entry", 3)
    assert bad.value.message.startswith(
        "failed to read lock file Inputs.lock_data: buildpack[0].entry (line 3)"
    )


def test_a_lock_given_as_bytes_is_read_as_the_lock_file_reader_reads_one(tmp_path: Path) -> None:
    """The hand-edit checks of lock files (conflict markers, a newer lock-version) hold for bytes as well."""
    project = HEAD + '[[io.buildpacks.group]]\nuri = "urn:cnb:builder:examples/node"\n'
    merged = b"lock-version = 1\n<<<<<<< ours\n[[buildpack]]\n=======\n>>>>>>> theirs\n"
    _, conflicted = build(tmp_path / "a", project, lock_data=merged)
    with pytest.raises(preparer.DescriptorError) as marker:
        prepare(conflicted)
    assert (marker.value.path, marker.value.line) == ("Inputs.lock_data", 2)
    assert "a git merge conflict marker (<<<<<<<)" in marker.value.message
    _, newer = build(tmp_path / "b", project, lock_data=b"lock-version = 99\n", update_lock=True)
    with pytest.raises(preparer.DescriptorError, match="newer than this preparer reads"):
        prepare(newer)  # never rewritten in the old format, even to update it


def test_a_lock_given_as_bytes_is_the_runs_lock_and_can_be_required(tmp_path: Path) -> None:
    project = HEAD + '[[io.buildpacks.group]]\nuri = "urn:cnb:builder:examples/node"\n'
    layout, inputs = build(tmp_path / "a", project, lock_data=b"")
    (layout.app / "preparer.lock").write_text(
        "lock-version = 1\n"
    )  # a file the run does not use, said otherwise
    report = prepare(inputs)
    assert not [w for w in report.warnings if "is not used" in w]
    assert report.lock is not None and report.lock.data is not None
    assert (layout.app / "preparer.lock").read_text() == "lock-version = 1\n"

    _, required = build(tmp_path / "b", project, lock_data=b"", require_lock=True)
    with pytest.raises(InvalidInputsError) as none_yet:
        prepare(required)
    assert none_yet.value.field == "lock_data" and "requires a lock" in none_yet.value.message
    _, frozen = build(tmp_path / "c", project, lock_data=report.lock.data, require_lock=True)
    assert prepare(frozen).lock.action == "frozen"  # type: ignore[union-attr]


# The policy as text, or parsed once


def test_a_policy_given_as_text_refuses_as_its_file_would(http_server: FileServer, tmp_path: Path) -> None:
    make_tgz(http_server.root / "bp.tgz", "svc/http")
    text = '# the platform\'s rules\n[sources]\nallow = ["builder"]\n'
    for given in (text, text.encode(), parse_policy(text)):
        layout, inputs = build(tmp_path / str(type(given).__name__), group(http_server.url("bp.tgz")),
                               policy_data=given)  # fmt: skip
        with pytest.raises(PolicyRefused) as refused:
            prepare(inputs)
        assert (refused.value.rule, refused.value.policy, refused.value.line) == (
            "sources.allow",
            "policy data",
            3,
        )
        assert not (layout.layers / "order.toml").exists()


def test_keys_as_pem_bytes_by_name_or_written_in_the_policy(tmp_path: Path) -> None:
    by_name = parse_policy('[[image.signed-by]]\nkeys = ["team.pub"]\n', keys={"team.pub": KEY})
    inline = parse_policy(f"[[image.signed-by]]\nkeys = ['''\n{KEY.decode()}''']\n")
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "team.pub").write_bytes(KEY)
    from_base = parse_policy('[[image.signed-by]]\nkeys = ["keys/team.pub"]\n', base=tmp_path)
    fingerprints = {p.signed_by[0].keys[0].fingerprint for p in (by_name, inline, from_base)}
    assert len(fingerprints) == 1
    # Without a base, a relative key path has nothing to be relative to.
    [problem] = check_policy(text='[[image.signed-by]]\nkeys = ["keys/team.pub"]\n')
    assert problem.line == 1 and "without a base directory" in problem.message


BAD_POLICY = """\
[sources]
allow = ["builder", "ftp"]

[limits.run]
entries = -1
download-bytes = "lots"

[env]
deny = "PATH"
colour = "red"
"""


def test_check_policy_finds_every_problem_with_its_line_in_file_order(tmp_path: Path) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(BAD_POLICY)
    for problems in (check_policy(policy), check_policy(text=BAD_POLICY)):
        assert [(p.key, p.line) for p in problems] == [
            ("sources.allow", 2), ("limits.run.entries", 5), ("limits.run.download-bytes", 6), ("env.deny", 9),
            ("env.colour", 10),
        ]  # fmt: skip
        assert all(isinstance(p, PolicyError) and p.exit_code == 3 and p.field == "policy" for p in problems)
    assert check_policy(text='[sources]\nallow = ["builder"]\n') == ()
    with pytest.raises(PolicyError) as first:
        parse_policy(BAD_POLICY)
    assert [p.message for p in first.value.problems] == [p.message for p in check_policy(text=BAD_POLICY)]
    assert first.value.message == (
        "failed to read policy policy data: sources.allow (line 2 of policy data): unknown kind 'ftp' (kinds: "
        "builder, path, http, image, cnb, registry, inline)"
    )


def test_the_command_reports_every_problem_of_a_policy_in_one_run(
    preparer: Callable[..., Result], tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(BAD_POLICY)
    result = preparer("-policy", str(policy), project=HEAD)
    assert result.code == 3
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR: ")]
    assert [e.split(": ")[2].split(" (")[0] for e in errors] == [
        "sources.allow", "limits.run.entries", "limits.run.download-bytes", "env.deny", "env.colour",
    ]  # fmt: skip
    assert all(f"line {n} of {policy}" in e for e, n in zip(errors, (2, 5, 6, 9, 10), strict=True))


# A transport given to the run


def _archive(bp_id: str) -> bytes:
    data, buffer = buildpack_toml(bp_id).encode(), io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("buildpack.toml")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_run_sends_every_request_through_the_transport_given(tmp_path: Path) -> None:
    asked: list[Request] = []

    def answer(request: Request) -> Answer:
        asked.append(request)
        if request.url == "https://buildpacks.example/bp.tgz":
            return Answer(200, {"Content-Type": "application/gzip"}, _archive("svc/memory"))
        return Answer(404)

    transport = mock_transport(answer)
    layout, inputs = build(tmp_path, group("https://buildpacks.example/bp.tgz"), transport=transport)
    report = prepare(inputs)
    assert [(b.id, b.action) for b in report.buildpacks] == [("svc/memory", "installed")]
    assert [(r.method, r.url) for r in asked] == [("GET", "https://buildpacks.example/bp.tgz")]
    assert 'id = "svc/memory"' in (layout.layers / "order.toml").read_text()
    transport.session()  # the caller's session is the caller's: the run did not close it
    _, missing = build(tmp_path / "404", group("https://buildpacks.example/gone.tgz"), transport=transport)
    with pytest.raises(preparer.NotFoundError) as gone:
        prepare(missing)
    assert gone.value.status == 404


# Every wrong Inputs value, named when Inputs is built


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"platform_api": preparer.Inputs.__dataclass_fields__["platform_api"].default._replace(minor=2)},
         "platform_api"),
        ({"platform_config": "/etc/platform.toml"}, "platform_namespace"),
        ({"lock": "/app/preparer.lock", "lock_data": b""}, "lock_data"),
        ({"lock_data": "lock-version = 1"}, "lock_data"),
        ({"policy": "/etc/policy.toml", "policy_data": ""}, "policy_data"),
        ({"policy_data": 3}, "policy_data"),
        ({"policy_base": "/etc"}, "policy_base"),
        ({"transport": object()}, "transport"),
        ({"download_cache_max_age": "1h"}, "download_cache_max_age"),
        ({"download_cache_repo_mode": None}, "download_cache_repo_mode"),
        ({"write_project_metadata": "no"}, "write_project_metadata"),
        ({"environ": {"HOME": 1}}, "environ"),
        ({"app_dir": 5}, "app_dir"),
        ({"http_timeout": "60"}, "http_timeout"),
        ({"update_lock": True}, "update_lock"),
    ],
)  # fmt: skip
def test_every_wrong_inputs_value_names_its_field(
    tmp_path: Path, settings: dict[str, object], field: str
) -> None:
    given: dict[str, object] = {
        "app_dir": tmp_path, "layers_dir": tmp_path, "platform_dir": tmp_path, "buildpacks_dir": tmp_path,
        "order_path": tmp_path / "order.toml",
    } | settings  # fmt: skip
    with pytest.raises(InvalidInputsError) as wrong:
        preparer.Inputs(**given)  # type: ignore[arg-type]
    assert wrong.value.field == field
    assert wrong.value.exit_code == 3
    assert f"Inputs.{field}" in wrong.value.message


# Errors as data at the call


def test_a_wrong_cancel_is_the_callers_type_error_before_anything_runs(tmp_path: Path) -> None:
    layout, inputs = build(tmp_path, group("urn:cnb:builder:examples/node"))
    for call in (prepare, preparer.plan_run):
        with pytest.raises(TypeError, match=r"cancel= takes a preparer\.Cancel, not Event"):
            call(inputs, cancel=threading.Event())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="deadline= takes a number of seconds, not str"):
        prepare(inputs, deadline="60")  # type: ignore[arg-type]
    assert not (layout.layers / "order.toml").exists()


def test_interrupted_is_kept_as_a_deprecated_name_of_cancelled() -> None:
    with pytest.warns(
        DeprecationWarning, match="preparer.Interrupted is deprecated: it is preparer.Cancelled"
    ):
        old = preparer.Interrupted
    assert old is preparer.Cancelled


# A saved plan, applied later


def test_a_plan_whose_files_changed_is_refused_naming_them(tmp_path: Path) -> None:
    project = group("urn:cnb:builder:examples/node") + '[io.buildpacks]\nexclude = ["*.log"]\n'
    layout, inputs = build(tmp_path, project)
    (layout.app / "debug.log").write_text("x")
    (layout.app / "main.py").write_text("print()")

    saved = preparer.plan_run(inputs)
    (layout.app / "project.toml").write_text(project.replace("examples/node", "examples/java"))
    with pytest.raises(InvalidInputsError) as stale:
        preparer.run_plan(saved)
    assert stale.value.exit_code == 3
    assert stale.value.message == (
        f"failed to run the plan: {layout.app / 'project.toml'} changed since it was made: make a new plan with "
        "plan_run"
    )
    assert not (layout.layers / "order.toml").exists() and (layout.app / "debug.log").exists()

    (layout.app / "project.toml").write_text(project)
    saved = preparer.plan_run(inputs)
    (layout.app / "trace.log").write_text("y")  # include/exclude now selects another file
    with pytest.raises(
        InvalidInputsError, match=r"the files of .* that io\.buildpacks\.exclude selects changed"
    ):
        preparer.run_plan(saved)

    saved = preparer.plan_run(inputs)
    assert preparer.run_plan(saved).app_removed == 2
    with pytest.raises(InvalidInputsError, match="changed since it was made"):  # applied twice
        preparer.run_plan(saved)


def test_a_report_counts_only_the_removals_its_run_made(tmp_path: Path) -> None:
    project = group("urn:cnb:builder:examples/node") + '[io.buildpacks]\nexclude = ["*.log"]\n'
    layout, inputs = build(tmp_path, project)
    for name in ("a.log", "b.log", "main.py"):
        (layout.app / name).write_text(name)
    plan = preparer.plan_run(inputs)
    (layout.app / "a.log").unlink()  # gone before the run: another process removed it
    # The plan is made to be carried out as it is (a service that owns the app knows): its own inputs, no check
    # of staleness asked by prepare's own path; run through run_plan with the removal already half done.
    report = preparer.run_plan(dataclasses.replace(plan, made_from=(), inputs=None), inputs)
    assert report.app_removed == 1
    assert sorted(p.name for p in layout.app.iterdir()) == ["main.py", "project.toml"]


@pytest.mark.parametrize("base", [None, "policies"])
def test_a_key_name_near_one_given_with_the_policy_is_named(tmp_path: Path, base: str | None) -> None:
    """A service gives its keys by name (``keys={"Team.pub": ...}``) and the policy writes ``team.pub``: it was
    read as a path ("a relative path, and the policy was given without a base directory", or a missing file),
    never pointing at the name given. ``check_policy`` and ``parse_policy`` say it alike."""
    text = '[[image.signed-by]]\nimages = ["*"]\nkeys = ["team.pub"]\n'
    directory = None if base is None else tmp_path / base
    problems = check_policy(text=text, base=directory, keys={"Team.pub": KEY})
    assert [(p.line, p.key) for p in problems] == [(1, "image.signed-by")]
    assert str(problems[0]).endswith("; did you mean 'Team.pub', a key given with the policy?")
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, base=directory, keys={"Team.pub": KEY})
    assert str(caught.value) == str(problems[0])
    assert parse_policy(text.replace("team.pub", "Team.pub"), keys={"Team.pub": KEY}).signed_by
