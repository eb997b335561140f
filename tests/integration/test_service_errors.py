"""A service routes on the fields of the errors it meets, never on their sentences: every error class it can meet
is exported, with the fields its message is made of, and ``dir(preparer)`` lists the public names (issue 50: "a
limit refusal has no rule/policy/line"; "DigestMismatch is raised but not exported"; "dir(preparer) lists 1 of 49
public names").

Real components: the suite's HTTP server on 127.0.0.1, real archives, a real policy file, a fresh interpreter.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import preparer
from preparer import (
    DigestMismatch,
    Download,
    FetchError,
    Inputs,
    LimitExceeded,
    LockRefused,
    NotInstalled,
    RunLimitExceeded,
    plan_run,
    prepare,
    run_plan,
)
from tests.buildpacks import make_tgz
from tests.plugins.http_server import FileServer
from tests.service import build as service_build


def build(root: Path, *uris: str, policy: Path | None = None) -> Inputs:
    return service_build(root, *uris, policy=None if policy is None else str(policy))


def test_dir_lists_every_public_name_without_importing_them() -> None:
    script = (
        "import json, sys, preparer\n"
        "names = dir(preparer)\n"
        "print(json.dumps([names, preparer.__all__, 'preparer.pipeline' in sys.modules]))\n"
    )
    names, public, imported = json.loads(subprocess.check_output([sys.executable, "-c", script], text=True))
    assert set(public) <= set(names), sorted(set(public) - set(names))
    assert not imported  # listing them imported none
    assert "DigestMismatch" in public and "NewerLockError" in public


def test_every_error_class_of_the_package_is_exported() -> None:
    """Each subclass of PreparerError the package defines is a public name of ``preparer``."""
    import importlib
    import pkgutil

    found = set()
    for module in pkgutil.walk_packages(preparer.__path__, "preparer."):
        if module.name.startswith("preparer.cli") or module.name.endswith("__main__"):
            continue
        for value in vars(importlib.import_module(module.name)).values():
            if isinstance(value, type) and issubclass(value, preparer.PreparerError):
                found.add(value.__name__)
    assert found <= set(preparer.__all__), sorted(found - set(preparer.__all__))


def test_a_pin_that_does_not_match_is_a_digest_mismatch_with_both_digests(
    http_server: FileServer, tmp_path: Path
) -> None:
    make_tgz(http_server.root / "bp.tgz", "svc/bp")
    got = "sha256:" + hashlib.sha256((http_server.root / "bp.tgz").read_bytes()).hexdigest()
    pinned = "0" * 64
    with pytest.raises(DigestMismatch) as failed:
        prepare(build(tmp_path, http_server.url("bp.tgz") + "#sha256=" + pinned))
    assert (failed.value.expected, failed.value.got) == ("sha256:" + pinned, got)
    assert failed.value.expected in failed.value.message and failed.value.got in failed.value.message


@pytest.mark.parametrize(
    ("written", "error", "rule", "line", "limit"),
    [
        (
            "[limits.buildpack]\ndownload-bytes = 100\n",
            LimitExceeded,
            "limits.buildpack.download-bytes",
            2,
            100,
        ),
        ("# the run's\n\n[limits.run]\nentries = 2\n", RunLimitExceeded, "limits.run.entries", 4, 2),
    ],
)
def test_a_limit_refusal_names_its_rule_policy_and_line(
    http_server: FileServer, tmp_path: Path, written: str, error: type[LimitExceeded], rule: str, line: int,
    limit: int,
) -> None:  # fmt: skip
    make_tgz(http_server.root / "bp.tgz", "svc/bp", payload=b"x" * 5000)
    policy = tmp_path / "policy.toml"
    policy.write_text(written)
    with pytest.raises(FetchError) as failed:
        prepare(build(tmp_path / "b", http_server.url("bp.tgz"), policy=policy))
    refused = failed.value
    assert type(refused) is error, refused
    assert (refused.rule, refused.policy, refused.line, refused.limit) == (rule, str(policy), line, limit)
    assert f"{rule}, line {line} of {policy}" in refused.message


# A stale plan's removed buildpack


def builder_build(root: Path, *uris: str) -> Inputs:
    """A build whose order takes examples/node 1.2.0 from the builder's <buildpacks>, then ``uris``."""
    inputs = build(root, *uris)
    text = Path(inputs.app_dir, "project.toml").read_text()
    Path(inputs.app_dir, "project.toml").write_text(
        text + '[[io.buildpacks.group]]\nid = "examples/node"\nversion = "1.2.0"\n'
    )
    return inputs


def test_a_plan_applied_after_its_buildpack_was_removed_commits_nothing(
    http_server: FileServer, tmp_path: Path
) -> None:
    """The service plans in one request; the builder's examples/node 1.2.0 is removed; the plan is applied in
    another request: refused before the commit, naming it, with nothing written (on main the order.toml written
    named a buildpack the build could not find)."""
    make_tgz(http_server.root / "bp.tgz", "svc/bp")
    inputs = builder_build(tmp_path, http_server.url("bp.tgz"))
    plan = plan_run(inputs)
    shutil.rmtree(inputs.buildpacks_dir / "examples_node" / "1.2.0")
    with pytest.raises(NotInstalled) as refused:
        run_plan(plan)
    assert refused.value.bp_id == "examples/node" and refused.value.exit_code == 1
    assert "buildpack 'examples/node' 1.2.0, which the plan takes from" in refused.value.message
    assert "is no longer there: make a new plan with plan_run" in refused.value.message
    assert not (inputs.layers_dir / "order.toml").exists()
    assert not (inputs.buildpacks_dir / "svc_bp").exists()  # the fetched one was not installed either


def test_a_buildpack_removed_while_the_run_fetches_is_caught_before_the_commit(
    http_server: FileServer, tmp_path: Path
) -> None:
    """The builder is changed while a run downloads: the commit that follows is refused as the stale plan's."""
    make_tgz(http_server.root / "bp.tgz", "svc/bp")
    inputs = builder_build(tmp_path, http_server.url("bp.tgz"))
    removed: list[bool] = []

    def progress(event: Download) -> None:
        if event.kind == "finished" and not removed:
            shutil.rmtree(inputs.buildpacks_dir / "examples_node" / "1.2.0")
            removed.append(True)

    with pytest.raises(NotInstalled):
        prepare(inputs, progress=progress)
    assert removed and not (inputs.layers_dir / "order.toml").exists()


def test_a_lock_refusal_names_the_lock_and_the_entry(http_server: FileServer, tmp_path: Path) -> None:
    """An entry added since the lock was written: the refusal carries the lock and the entry, not only the field
    (on main: field alone, and the entry only in the sentence)."""
    make_tgz(http_server.root / "bp.tgz", "svc/bp")
    make_tgz(http_server.root / "new.tgz", "svc/new")
    lock = tmp_path / "preparer.lock"
    inputs = dataclasses.replace(build(tmp_path / "b", http_server.url("bp.tgz")), lock=str(lock))
    prepare(inputs)
    assert lock.exists()
    descriptor = Path(inputs.app_dir, "project.toml")
    descriptor.write_text(
        descriptor.read_text() + f'[[io.buildpacks.group]]\nuri = "{http_server.url("new.tgz")}"\n'
    )
    with pytest.raises(LockRefused) as refused:
        prepare(inputs)
    error = refused.value
    assert (error.lock, error.entry, error.field, error.exit_code) == (
        str(lock), "io.buildpacks.group[1]", "lock", 3)  # fmt: skip
    assert f"{error.entry} (uri = " in error.message and str(lock) in error.message
    assert pickle.loads(pickle.dumps(error)).entry == error.entry


def test_a_lock_refusal_of_a_changed_entry_names_it(http_server: FileServer, tmp_path: Path) -> None:
    """An entry whose uri was edited since the lock was written: the refusal names that entry."""
    make_tgz(http_server.root / "bp.tgz", "svc/bp")
    make_tgz(http_server.root / "edited.tgz", "svc/bp")
    lock = tmp_path / "preparer.lock"
    inputs = dataclasses.replace(build(tmp_path / "b", http_server.url("bp.tgz")), lock=str(lock))
    prepare(inputs)
    descriptor = Path(inputs.app_dir, "project.toml")
    descriptor.write_text(descriptor.read_text().replace("bp.tgz", "edited.tgz"))
    with pytest.raises(LockRefused) as refused:
        prepare(inputs)
    assert (refused.value.lock, refused.value.entry) == (str(lock), "io.buildpacks.group[0]")
    assert "io.buildpacks.group[0] is written" in refused.value.message
