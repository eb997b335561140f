"""Identity patterns cannot hold a build, nor through the library a service's other builds (issue 48).

The issue's attack, as it was found: a platform's ordinary email rule ``^([a-z0-9]+[._-]?)+@corp\\.example$`` and a
valid keyless certificate whose subject is 34 characters chosen to make a backtracking matcher run for an hour
(Python's ``re`` did, holding the interpreter lock: a second 0.02 s build in the same process had not finished after
45 s). Real components: the suite's registry, a Sigstore of the tests' own (tests/keyless.py), the library's
``prepare`` in two threads of one process, the first with a deadline.
"""

from __future__ import annotations

import concurrent.futures
import shutil
import time
from pathlib import Path

import pytest

from preparer import Inputs, prepare
from preparer.errors import SignatureRefused
from tests.buildpacks import make_tgz
from tests.golden import BUILDER, Layout
from tests.keyless import GITHUB_ISSUER, T0
from tests.keyless_sign import Signer
from tests.plugins.registry import Registry
from tests.projects import group
from tests.signed import push_image

EMAIL = r"^([a-z0-9]+[._-]?)+@corp\.example$"
ADVERSARIAL = "a" * 33 + "!"


def build(root: Path, project: str, policy: Path | None = None) -> Inputs:
    layout = Layout(root)
    shutil.copytree(BUILDER, layout.root / "cnb")
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    (layout.app / "project.toml").write_text(project)
    return Inputs(
        app_dir=str(layout.app), layers_dir=str(layout.layers), platform_dir=str(layout.platform),
        buildpacks_dir=str(layout.buildpacks), order_path=str(layout.order), download_cache=None,
        policy=None if policy is None else str(policy),
    )  # fmt: skip


def test_the_issues_pattern_holds_neither_its_build_past_the_deadline_nor_another_build(
    registry: Registry, tmp_path: Path, signer: Signer
) -> None:
    image = push_image(registry, tmp_path)
    leaf = signer.sigstore.leaf(subject=ADVERSARIAL, subject_kind="email", not_before=T0 - 60)
    image.sign_keyless(signer, "sig", leaf)
    policy = tmp_path / "policy.toml"
    policy.write_text(
        f'[sigstore]\ntrusted-root = "{signer.root.relative_to(tmp_path)}"\n\n[[image.signed-by]]\n\n'
        f"[[image.signed-by.identities]]\nissuer = \"{GITHUB_ISSUER}\"\nsubject-regexp = '{EMAIL}'\n"
    )
    attacked = build(tmp_path / "attacked", group(f"docker://{image.tagged}"), policy)
    other_root = tmp_path / "other"
    other = build(other_root, group("bp.tgz"))
    make_tgz(Path(other.app_dir) / "bp.tgz", "svc/other")

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        began = time.monotonic()
        first = pool.submit(prepare, attacked, deadline=60)
        second = pool.submit(prepare, other)
        report = second.result(timeout=60)
        second_took = time.monotonic() - began
        with pytest.raises(SignatureRefused) as refused:
            first.result(timeout=60)
        first_took = time.monotonic() - began

    print(f"attacked build refused in {first_took:.2f} s; the other build done in {second_took:.2f} s")
    assert [b.id for b in report.buildpacks] == ["svc/other"]
    assert second_took < 20, second_took  # seconds on a loaded machine; before: not done after 45 s
    assert first_took < 30, first_took  # refused on its own, well before its deadline; before: an hour
    assert (
        f"is by issuer {GITHUB_ISSUER}, subject {ADVERSARIAL}, which no identity of the rule matches"
        in str(refused.value)
    )
