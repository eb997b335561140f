"""The process's entry point: the command is imported with the cycle collector paused, and run with it working."""

from __future__ import annotations

import gc
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import preparer.__main__
import preparer.cli
from tests.plugins.cli import Result
from tests.plugins.signing import make_key
from tests.projects import HEAD


def test_the_command_runs_with_the_collector_on_and_start_up_frozen(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[bool, int]] = []
    monkeypatch.setattr(preparer.cli, "entry", lambda: seen.append((gc.isenabled(), gc.get_freeze_count())))
    try:
        preparer.__main__.main()
    finally:
        gc.unfreeze()  # this process is pytest's, not the command's
    assert seen and seen[0][0] is True
    assert seen[0][1] > 0


def test_python_m_preparer_is_the_command() -> None:
    command = [sys.executable, "-m", "preparer", "-version"]
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, preparer.__version__)


def imported(result: Result) -> set[str]:
    """The modules a run imported, from the lines ``PYTHONPROFILEIMPORTTIME`` has Python write to stderr."""
    lines = result.stderr.splitlines()
    return {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")} - {"package"}


def test_only_a_run_whose_policy_names_keys_imports_cryptography(
    preparer: Callable[..., Result], tmp_path: Path
) -> None:
    """cryptography (18 ms to import) is the signature verifier's: a run that verifies nothing never loads it."""
    project = HEAD + '[[io.buildpacks.build.env]]\nname = "NODE_ENV"\nvalue = "production"\n'
    profile = {"PYTHONPROFILEIMPORTTIME": "1"}
    plain = preparer(project=project, env=profile)
    assert plain.code == 0, plain.stderr
    assert {"preparer.cli", "preparer.pipeline"} <= imported(plain)  # the profile shows the run's imports
    assert sorted(m for m in imported(plain) if m.startswith("cryptography")) == []

    make_key(tmp_path / "keys")
    policy = tmp_path / "policy.toml"
    policy.write_text('[image]\nallow = ["*"]\n\n[[image.signed-by]]\nkeys = ["keys/cosign.pub"]\n')
    keyed = preparer("-policy", str(policy), project=project, env=profile)
    assert keyed.code == 0, keyed.stderr
    assert "cryptography.hazmat.primitives.serialization" in imported(keyed)


#: What only keyless verification needs: its modules, X.509 path validation, RFC 3161 timestamps.
KEYLESS = ("preparer.policy.keyless", "cryptography.x509", "rfc3161_client")


def _keyless(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.startswith(KEYLESS))


def test_only_a_run_whose_policy_names_identities_imports_the_keyless_verifier(
    preparer: Callable[..., Result], tmp_path: Path
) -> None:
    """The keyless verifier (preparer/policy/keyless/, cryptography.x509, rfc3161_client) is imported by runs whose
    policy has identity rules, and by no other: not an env-only run, not a run whose rules name only keys."""
    from tests.keyless_sign import make_signer

    project = HEAD + '[[io.buildpacks.build.env]]\nname = "NODE_ENV"\nvalue = "production"\n'
    profile = {"PYTHONPROFILEIMPORTTIME": "1"}
    plain = preparer(project=project, env=profile)
    assert plain.code == 0, plain.stderr
    assert {"preparer.cli", "preparer.pipeline"} <= imported(plain)
    assert _keyless(imported(plain)) == []

    make_key(tmp_path / "keys")
    keyed_policy = tmp_path / "keyed.toml"
    keyed_policy.write_text('[image]\nallow = ["*"]\n\n[[image.signed-by]]\nkeys = ["keys/cosign.pub"]\n')
    keyed = preparer("-policy", str(keyed_policy), project=project, env=profile)
    assert keyed.code == 0, keyed.stderr
    assert "cryptography.hazmat.primitives.serialization" in imported(keyed)
    assert _keyless(imported(keyed)) == []

    signer = make_signer(tmp_path / "sigstore")
    keyless_policy = tmp_path / "keyless.toml"
    keyless_policy.write_text(
        f'[sigstore]\ntrusted-root = "{signer.root.relative_to(tmp_path)}"\n\n[[image.signed-by]]\n'
        '[[image.signed-by.identities]]\nissuer = "https://token.actions.githubusercontent.com"\n'
        'subject = "https://github.com/acme/buildpacks/.github/workflows/release.yml@refs/heads/main"\n'
    )
    keyless = preparer("-policy", str(keyless_policy), project=project, env=profile)
    assert keyless.code == 0, keyless.stderr
    # The control: the profile sees the keyless modules when the policy needs them (its trusted root is read).
    assert {"preparer.policy.keyless.root", "cryptography.x509"} <= imported(keyless)
