"""What a platform engineer is told when a signature rule is written the wrong way round (issue 48): a keyless-signed
image under a rule with keys only says the signature is keyless and points to identities; a Fulcio PEM certificate
given as the trusted root says what it is and what trusted-root expects; a fifo named as a key or a trusted root is
refused at once (it held check_policy, and a run, for ever).

Real CLI, the suite's registry, a Sigstore of the tests' own (tests/keyless.py); check_policy, the library's.
"""

from __future__ import annotations

import concurrent.futures
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from preparer import check_policy
from tests.keyless import GITHUB_ISSUER, WORKFLOW, der
from tests.keyless_log import pem
from tests.keyless_sign import Signer
from tests.plugins.cli import Result
from tests.plugins.signing import Key
from tests.signed import Form, Rule, Scene


@pytest.mark.parametrize("form", ["sig", "bundle"], ids=["tag scheme", "bundle"])
def test_a_keyless_signed_image_under_a_rule_with_keys_only_is_told_to_use_identities(
    scene: Scene, signer: Signer, key: Key, form: Form
) -> None:
    image = scene.image()
    image.sign_keyless(signer, form)
    result = scene.run(scene.policy(Rule(["*"], keys=[key.public])), image.tagged)
    assert result.code == 1
    assert not scene.installed()
    last = result.stderr.strip().splitlines()[-1]
    assert (
        f"1 signature found, none verifies with the rule's key (sha256:{key.fingerprint}): the signature "
        in last
    )
    assert (
        f" is keyless (a Sigstore certificate by issuer {GITHUB_ISSUER}, subject {WORKFLOW}, not verified), which no "
        "key can verify; to trust its signer, give the rule [[image.signed-by.identities]] with its issuer and "
        "subject and the policy [sigstore] trusted-root (docs/policy.md, keyless identities); looked for signatures"
    ) in last


def identity_policy(tmp_path: Path, root: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(
        f'[sigstore]\ntrusted-root = "{root}"\n\n[[image.signed-by]]\n\n[[image.signed-by.identities]]\n'
        f'issuer = "{GITHUB_ISSUER}"\nsubject = "{WORKFLOW}"\n'
    )
    return path


def test_a_fulcio_certificate_given_as_the_trusted_root_says_what_it_is_and_what_is_expected(
    preparer: Callable[..., Result], tmp_path: Path, signer: Signer
) -> None:
    (tmp_path / "fulcio.pem").write_text(
        pem(der(signer.sigstore.intermediate)) + pem(der(signer.sigstore.root))
    )
    pol = identity_policy(tmp_path, "fulcio.pem")
    result = preparer("-policy", str(pol), "-dry-run")
    assert result.code == 3
    assert result.stderr.strip().splitlines()[-1] == (
        f"ERROR: failed to read policy {pol}: sigstore.trusted-root (line 2 of {pol}): {tmp_path}/fulcio.pem: it is "
        "a PEM certificate (such as Fulcio's CA certificate, or a Rekor or CT log key), not a trusted root: "
        "trusted-root names Sigstore's trusted_root.json, the JSON document (mediaType "
        "application/vnd.dev.sigstore.trustedroot+json;version=0.1) that lists the certificate authorities, "
        "transparency logs, CT logs and timestamp authorities with when each may be trusted, as cosign initialize, "
        "sigstore trust-instance or policy-controller's TrustRoot keep it"
    )
    assert "Expecting value" not in result.stderr


@pytest.mark.parametrize("named", ["trusted root", "key"])
def test_a_fifo_named_by_the_policy_is_refused_at_once(tmp_path: Path, named: str) -> None:
    fifo = tmp_path / "named.fifo"
    os.mkfifo(fifo)
    if named == "key":
        pol = tmp_path / "policy.toml"
        pol.write_text('[[image.signed-by]]\nkeys = ["named.fifo"]\n')
    else:
        pol = identity_policy(tmp_path, "named.fifo")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        found = pool.submit(check_policy, pol)
        try:
            [problem] = found.result(timeout=30)  # before: never returned
        finally:
            if not found.done():  # free the thread that waits for a writer, so the test can end
                with open(fifo, "wb"):
                    pass
    assert problem.exit_code == 3
    assert (
        f"{fifo}: not a regular file the preparer can read (missing, a directory, a fifo, a device, or not readable)"
        in str(problem)
    )


@pytest.mark.parametrize("named", ["trusted root", "key"])
def test_a_policy_checked_for_someone_tells_nothing_of_a_host_path_but_a_regular_file(
    tmp_path: Path, named: str
) -> None:
    """A policy given as text names host paths: nothing, a directory, a fifo, a device and a socket at one are
    told in the same words, so that ``check_policy`` says no more of the host than a run needs (a regular file to
    read). Before: "No such file or directory", "Is a directory", "(it is a fifo)", "(it is a device or socket)"."""
    import socket

    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "directory").mkdir()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "socket"))
        said = set()
        for path in ("missing", "directory", "fifo", "socket", "/dev/zero", "/dev/tty"):
            where = tmp_path / path
            if named == "key":
                text = f'[[image.signed-by]]\nkeys = ["{where}"]\n'
            else:
                text = identity_policy(tmp_path, str(where)).read_text()
            [problem] = check_policy(text=text)
            said.add(problem.message.replace(str(where), "PATH"))
    assert len(said) == 1, said
    assert said.pop().endswith(
        "PATH: not a regular file the preparer can read (missing, a directory, a fifo, a device, or not readable)"
    )
