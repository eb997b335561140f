"""A service plans in its web process and applies the plan in a worker process: plans (under a policy with
``[[image.signed-by]]`` keys and identities), the ``Policy`` a service reads from its database with
``parse_policy``, and the reports pickle, and a plan made here is applied there (issue 50: "A plan under a policy
with signed-by keys, and the Policy from parse_policy, do not pickle").

Real components: the suite's HTTP server on 127.0.0.1, a real cosign public key and Sigstore's trusted root from the
suite's data, a real process pool (spawned workers, which share nothing with this process but what is pickled).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import pickle
import shutil
from pathlib import Path

from preparer import Inputs, Plan, Policy, Report, parse_policy, plan_run, run_plan
from tests.buildpacks import make_tgz
from tests.plugins.http_server import FileServer
from tests.service import build as service_build

DATA = Path(__file__).parent.parent / "data"

POLICY = """\
[sigstore]
trusted-root = "trusted_root.json"

[[image.signed-by]]
images = ["docker.io/buildpacksio/*"]
[[image.signed-by.identities]]
issuer = "https://token.actions.githubusercontent.com"
subject-regexp = '^https://github\\.com/buildpacks/lifecycle/.*$'

[[image.signed-by]]
images = ["registry.corp.example/*"]
keys = ["cosign.pub"]
"""


def policy_dir(root: Path) -> Path:
    root.mkdir()
    shutil.copy(DATA / "cosign-keyed" / "cosign.pub", root / "cosign.pub")
    shutil.copy(DATA / "sigstore" / "trusted_root.staging.json", root / "trusted_root.json")
    (root / "policy.toml").write_text(POLICY)
    return root


def build(root: Path, uri: str, policy: Path) -> Inputs:
    return service_build(root, uri, policy=str(policy))


def apply_in_worker(plan: Plan, inputs: Inputs) -> Report:
    return run_plan(plan, inputs)


def test_a_plan_under_a_signed_by_policy_is_applied_in_a_worker(
    http_server: FileServer, tmp_path: Path
) -> None:
    make_tgz(http_server.root / "bp.tgz", "svc/bp")
    policy = policy_dir(tmp_path / "policy") / "policy.toml"
    inputs = build(tmp_path / "b", http_server.url("bp.tgz"), policy)
    plan = plan_run(inputs)
    assert plan.rules is not None and [
        rule.keys for rule in plan.rules.signed_by if rule.keys
    ]  # keys were read
    again = pickle.loads(pickle.dumps(plan))
    assert again == plan
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        report = pool.submit(apply_in_worker, plan, inputs).result(120)
    assert [(bp.id, bp.action) for bp in report.buildpacks] == [("svc/bp", "installed")]
    assert (inputs.layers_dir / "order.toml").read_text().count('id = "svc/bp"') == 1
    assert pickle.loads(pickle.dumps(report)) == report


def test_a_policy_from_the_database_pickles_and_keeps_its_keys(tmp_path: Path) -> None:
    """What a service reads with parse_policy is handed to its workers: the copy verifies with the same key and
    trusts the same root."""
    base = policy_dir(tmp_path / "policy")
    policy = parse_policy(POLICY, base=base)
    assert isinstance(policy, Policy)
    copy = pickle.loads(pickle.dumps(policy))
    assert copy == policy
    keyed = next(rule for rule in copy.signed_by if rule.keys)
    original = next(rule for rule in policy.signed_by if rule.keys)
    assert [k.fingerprint for k in keyed.keys] == [k.fingerprint for k in original.keys]
    assert keyed.keys[0].verify(b"\x30\x06\x02\x01\x01\x02\x01\x01", b"payload") is False  # a key, not a stub
    assert copy.signed_by[0].root == policy.signed_by[0].root is not None
