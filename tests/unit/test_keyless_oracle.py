"""The oracle: sigstore's own verifier (sigstore-python, a dev dependency) and the preparer's keyless verification
(evidence.from_bundle, verify.verify and the rule's identity match) give the same verdict on every Sigstore bundle of
tests/data/sigstore/ and on bundles minted with the suite's own Sigstore (tests/keyless_sign.py), given the same
trusted root file and the same identity: both accept with the same signer, or both refuse.

sigstore-python runs offline only: ``Verifier(trusted_root=TrustedRoot.from_file(...))`` and ``verify_artifact`` or
``verify_dsse``, never its TUF or Rekor clients. The network is mocked (``socket.connect`` raises), the one mock
here, so that a path of sigstore-python that would ask the network fails the test rather than run.

Where sigstore-python is laxer the verdicts differ on purpose, and :data:`LAXER` lists each case: it compares a
certificate authority's, a transparency log's or a CT log's ``validFor`` with the current time, not with the
signing time, so it accepts a signature made before an authority's window began or after it ended. The preparer
refuses these, as sigstore-go does. Each such case asserts that sigstore-python still accepts it: the day it
refuses too, the case belongs with the agreements.

The identity sigstore-python is given is the rule's: the SAN, and the OIDC issuer in the extension
1.3.6.1.4.1.57264.1.8 or in the deprecated .1.1 (its ``Identity`` policy reads only .1.1, which Fulcio no longer
needs to write; the preparer reads .1.8 first).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import pytest
from sigstore.errors import Error as SigstoreError
from sigstore.models import Bundle, TrustedRoot
from sigstore.verify import Verifier
from sigstore.verify.policy import AllOf, AnyOf, Identity, OIDCIssuer, OIDCIssuerV2

from preparer.policy.identity import Identity as RuleIdentity
from preparer.policy.keyless.evidence import from_bundle
from preparer.policy.keyless.model import KeylessProblem
from preparer.policy.keyless.root import load_root
from preparer.policy.keyless.verify import verify
from tests.keyless import GITHUB_ISSUER, T0, WORKFLOW
from tests.keyless_sign import Signer, keyless_bundle, make_signer
from tests.plugins.signing import statement

DATA = Path(__file__).parent.parent / "data" / "sigstore"
GITHUB = "https://token.actions.githubusercontent.com"
OAUTH = "https://github.com/login/oauth"
PRODUCTION, STAGING = "trusted_root.json", "tlog/trusted_root.staging.json"

Doc = dict[str, Any]


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mocked: the network. Neither verifier may ask it; a connection attempt fails the verdict loudly."""

    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("a verifier tried to connect to the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


@dataclass
class Case:
    """A bundle, the artifact it signs (``None``: a DSSE bundle), the trusted root (a file of tests/data/sigstore/,
    or a trust config holding one), and the signer it names."""

    bundle: str
    artifact: str | None
    root: str
    issuer: str
    subject: str
    #: A change to the trusted root's document before it is written.
    edit: Callable[[Doc], None] = field(default=lambda doc: None)


#: Every real bundle both verifiers accept, with its signer.
ACCEPTED = {
    "production github v0.2": Case(
        "bundle_v3_github.whl.sigstore", "bundle_v3_github.whl", PRODUCTION, GITHUB,
        "https://github.com/trailofbits/rfc8785.py/.github/workflows/release.yml@refs/tags/v0.1.2",
    ),
    "staging v0.3": Case("bundle_v3.txt.sigstore", "bundle_v3.txt", STAGING, OAUTH, "william@yossarian.net"),
    "staging v0.3 (tlog copy)": Case(
        "tlog/bundle_v3.txt.sigstore", "tlog/bundle_v3.txt", STAGING, OAUTH, "william@yossarian.net"
    ),
    "staging v0.3 alt media type": Case(
        "tlog/bundle_v3_alt.txt.sigstore", "tlog/bundle_v3_alt.txt", STAGING, OAUTH, "william@yossarian.net"
    ),
    "staging v0.1 p384": Case("tlog/bundle.txt.sigstore", "tlog/bundle.txt", STAGING, OAUTH, "a@tny.town"),
    "production dsse 0.0.1": Case(
        "tlog/dsse_v001.sigstore.json", None, "tlog/trusted_root.production.json", GITHUB,
        "https://github.com/prefix-dev/sigstore-example/.github/workflows/action.yaml@refs/heads/main",
    ),
    "staging rekor v2 (timestamp)": Case(
        "tlog/staging-rekor-v2.txt.sigstore.json", "tlog/staging-rekor-v2.txt", STAGING, OAUTH, "jku@goto.fi"
    ),
    "staging rekor v2 dsse (timestamp)": Case(
        "tlog/a.dsse.staging-rekor-v2.txt.sigstore.json", None, STAGING, GITHUB,
        "https://github.com/sigstore-conformance/extremely-dangerous-public-oidc-beacon/.github/workflows/"
        "extremely-dangerous-oidc-beacon.yml@refs/heads/main",
    ),
    # Its signed entry timestamp proves the time; its RFC 3161 timestamps are from a TSA the root does not name.
    "tsa bundle, its trust config": Case(
        "tlog/tsa/bundle.txt.sigstore", "tlog/tsa/bundle.txt", "tlog/tsa/trust_config.json",
        "https://accounts.google.com", "alexis.challande@trailofbits.com",
    ),
    # The same with the test TSA that signed its first timestamp: both count the timestamp that verifies.
    "tsa bundle, its tsa": Case(
        "tlog/tsa/bundle.txt.sigstore", "tlog/tsa/bundle.txt", "tlog/tsa/trust_config.json",
        "https://accounts.google.com", "alexis.challande@trailofbits.com",
        edit=lambda doc: doc.update(timestampAuthorities=[json.loads((DATA / "tlog/tsa/ca.json").read_bytes())]),
    ),
}  # fmt: skip

#: Real bundles both verifiers refuse, and why.
REFUSED = {
    # A bundle v0.2 whose log entry has an inclusion proof without a checkpoint.
    "no checkpoint": Case(
        "tlog/bundle_no_checkpoint.txt.sigstore", "tlog/bundle_no_checkpoint.txt", STAGING, OAUTH, "a@tny.town"
    ),
    # CVE-2022-36056: the log entry is of another signature.
    "cve-2022-36056": Case(
        "tlog/bundle_cve_2022_36056.txt.sigstore", "tlog/bundle_cve_2022_36056.txt", STAGING, OAUTH,
        "william@yossarian.net",
    ),
    # Swapped trusted roots: each instance's bundle against the other instance's root.
    "staging bundle, production root": Case(
        "bundle_v3.txt.sigstore", "bundle_v3.txt", PRODUCTION, OAUTH, "william@yossarian.net"
    ),
    "production bundle, staging root": Case(
        "bundle_v3_github.whl.sigstore", "bundle_v3_github.whl", STAGING, GITHUB,
        "https://github.com/trailofbits/rfc8785.py/.github/workflows/release.yml@refs/tags/v0.1.2",
    ),
}  # fmt: skip

#: What the preparer's refusal of each says.
REFUSED_BECAUSE = {
    "no checkpoint": "has no inclusion proof with a checkpoint",
    "cve-2022-36056": "is not for this signature: it records another signature",
    "staging bundle, production root": "which the trusted root does not name",
    "production bundle, staging root": "which the trusted root does not name",
}

#: Files of tests/data/sigstore/ that hold no Sigstore bundle sigstore-python can read, and why. cosign's ``.sig``
#: tag scheme (a layer's annotations: certificate, chain, Rekor's answer) is not a bundle, and sigstore-python has no
#: reader for it: keyless ``.sig`` signatures have no oracle here (tests/unit/test_keyless_evidence.py and
#: tests/integration/test_keyless.py check them).
UNREADABLE = {
    "tlog/cosign-bundle-annotation.json": "the value of a .sig layer's dev.sigstore.cosign/bundle annotation",
}


def root_file(directory: Path, case: Case) -> Path:
    """The case's trusted root (out of its trust config, edited) written to ``directory``: the one file both
    verifiers read."""
    doc: Doc = json.loads((DATA / case.root).read_bytes())
    doc = doc.get("trustedRoot", doc)
    case.edit(doc)
    path = directory / "trusted_root.json"
    path.write_text(json.dumps(doc))
    return path


def sigstore_says(bundle: bytes, artifact: bytes | None, root: Path, issuer: str, subject: str) -> str | None:
    """sigstore-python's verdict: ``None`` when it accepts the bundle for the identity, else its reason."""
    policy = AllOf([Identity(identity=subject), AnyOf([OIDCIssuerV2(issuer), OIDCIssuer(issuer)])])
    try:
        verifier = Verifier(trusted_root=TrustedRoot.from_file(str(root)))
        parsed = Bundle.from_json(bundle)
        if artifact is None:
            verifier.verify_dsse(parsed, policy)
        else:
            verifier.verify_artifact(artifact, parsed, policy)
    except (SigstoreError, ValueError) as err:  # pydantic's and cryptography's parse errors are ValueErrors
        return f"{type(err).__name__}: {err}"
    return None


def preparer_says(
    bundle: bytes, artifact: bytes | None, root: Path, issuer: str, subject: str
) -> tuple[str, str] | str:
    """The preparer's verdict: the signer ``(issuer, subject)`` when the bundle verifies and names the identity,
    else why not."""
    try:
        verdict = verify(from_bundle(bundle, "the bundle", artifact=artifact), load_root(root))
    except KeylessProblem as problem:
        return str(problem)
    if not RuleIdentity(issuer, None, subject, None).matches(verdict.issuer, verdict.subject):
        return f"another signer: {verdict.issuer}, {verdict.subject}"
    return verdict.issuer, verdict.subject


def both(case: Case, root: Path, *, issuer: str | None = None, subject: str | None = None) -> tuple[Any, Any]:
    bundle = (DATA / case.bundle).read_bytes()
    artifact = (DATA / case.artifact).read_bytes() if case.artifact else None
    who = (issuer or case.issuer, subject or case.subject)
    return preparer_says(bundle, artifact, root, *who), sigstore_says(bundle, artifact, root, *who)


@pytest.mark.parametrize("name", ACCEPTED)
def test_both_accept_a_real_bundle_with_the_same_signer(name: str, tmp_path: Path) -> None:
    case = ACCEPTED[name]
    ours, theirs = both(case, root_file(tmp_path, case))
    assert theirs is None
    assert ours == (case.issuer, case.subject)


#: How sigstore-python refuses a certificate of another issuer (its AnyOf over the two extensions) or subject.
IDENTITY_REFUSED = {"issuer": "0 of 2 policies succeeded", "subject": "Certificate's SANs do not match"}


@pytest.mark.parametrize("name", ACCEPTED)
@pytest.mark.parametrize("wrong", ["issuer", "subject"])
def test_both_refuse_a_real_bundle_for_another_identity(name: str, wrong: str, tmp_path: Path) -> None:
    case = ACCEPTED[name]
    other = {wrong: "https://attacker.example/" + wrong}
    ours, theirs = both(case, root_file(tmp_path, case), **other)
    assert isinstance(ours, str) and ours.startswith("another signer")
    # sigstore-python refuses it for its identity policy, not for anything else.
    assert theirs is not None and IDENTITY_REFUSED[wrong] in theirs


@pytest.mark.parametrize("name", REFUSED)
def test_both_refuse_a_real_bundle(name: str, tmp_path: Path) -> None:
    case = REFUSED[name]
    ours, theirs = both(case, root_file(tmp_path, case))
    assert isinstance(ours, str) and REFUSED_BECAUSE[name] in ours
    assert theirs is not None


def test_every_bundle_of_the_test_data_has_a_verdict_or_a_reason() -> None:
    covered = {c.bundle for c in (*ACCEPTED.values(), *REFUSED.values())} | set(UNREADABLE)
    bundles = {
        str(p.relative_to(DATA))
        for p in DATA.rglob("*")
        if p.name.endswith((".sigstore", ".sigstore.json")) or p.name.startswith("cosign-")
    }
    assert bundles, "no bundle found under tests/data/sigstore"
    assert bundles <= covered, f"bundles without an oracle case: {sorted(bundles - covered)}"


@pytest.mark.parametrize("name", UNREADABLE)
def test_what_sigstore_python_cannot_read(name: str) -> None:
    with pytest.raises((SigstoreError, ValueError)):
        Bundle.from_json((DATA / name).read_bytes())


# -- mutations ----------------------------------------------------------------------------------------------------


def _flip(b64: str) -> str:
    """``b64`` with the last byte of what it encodes flipped: still base64, still as long."""
    raw = bytearray(base64.b64decode(b64))
    raw[-1] ^= 0x01
    return base64.b64encode(bytes(raw)).decode()


def _leaf(bundle: Doc) -> Doc:
    material: Doc = bundle["verificationMaterial"]
    if "certificate" in material:  # v0.3
        leaf: Doc = material["certificate"]
        return leaf
    first: Doc = material["x509CertificateChain"]["certificates"][0]
    return first


def _signature(bundle: Doc) -> None:
    if "dsseEnvelope" in bundle:
        sig = bundle["dsseEnvelope"]["signatures"][0]
        sig["sig"] = _flip(sig["sig"])
    else:
        bundle["messageSignature"]["signature"] = _flip(bundle["messageSignature"]["signature"])


def _certificate(bundle: Doc) -> None:
    leaf = _leaf(bundle)
    leaf["rawBytes"] = _flip(leaf["rawBytes"])  # the last byte is the issuer's signature's


def _promise(bundle: Doc) -> None:
    promise = bundle["verificationMaterial"]["tlogEntries"][0]["inclusionPromise"]
    promise["signedEntryTimestamp"] = _flip(promise["signedEntryTimestamp"])


def _checkpoint(bundle: Doc) -> None:
    checkpoint = bundle["verificationMaterial"]["tlogEntries"][0]["inclusionProof"]["checkpoint"]
    note, _, signature_line = checkpoint["envelope"].rstrip("\n").rpartition("\n")
    head, _, signature = signature_line.rpartition(" ")
    checkpoint["envelope"] = f"{note}\n{head} {_flip(signature)}\n"


def _proof_hash(bundle: Doc) -> None:
    proof = bundle["verificationMaterial"]["tlogEntries"][0]["inclusionProof"]
    proof["hashes"][0] = _flip(proof["hashes"][0])


#: Each mutation, and what the preparer's refusal says (its log entry consistency check comes before the signature's).
MUTATIONS: dict[str, tuple[Callable[[Doc], None], str]] = {
    "signature": (_signature, "is not for this signature"),
    "certificate": (_certificate, "records another certificate"),
    "signed entry timestamp": (_promise, "the signed entry timestamp of log entry"),
    "checkpoint signature": (_checkpoint, "the checkpoint's signature by"),
    "inclusion proof hash": (_proof_hash, "does not lead to its root hash"),
}
#: Real bundles with a signed entry timestamp and an inclusion proof with a checkpoint, to mutate.
MUTATED = ["production github v0.2", "staging v0.3", "production dsse 0.0.1"]


def mutated_verdicts(case: Case, mutation: str | None, root: Path) -> tuple[Any, Any]:
    """Both verdicts on the case's bundle read, mutated (``None``: not), and written again."""
    bundle = json.loads((DATA / case.bundle).read_bytes())
    if mutation is not None:
        MUTATIONS[mutation][0](bundle)
    artifact = (DATA / case.artifact).read_bytes() if case.artifact else None
    data = json.dumps(bundle).encode()
    return (preparer_says(data, artifact, root, case.issuer, case.subject),
            sigstore_says(data, artifact, root, case.issuer, case.subject))  # fmt: skip


@pytest.mark.parametrize("name", MUTATED)
def test_a_real_bundle_read_and_written_again_is_still_accepted(name: str, tmp_path: Path) -> None:
    # The control of the mutations below: what refuses them is the flipped byte, not the JSON written again.
    case = ACCEPTED[name]
    assert mutated_verdicts(case, None, root_file(tmp_path, case)) == ((case.issuer, case.subject), None)


@pytest.mark.parametrize("name", MUTATED)
@pytest.mark.parametrize("mutation", MUTATIONS)
def test_both_refuse_a_mutated_real_bundle(name: str, mutation: str, tmp_path: Path) -> None:
    case = ACCEPTED[name]
    ours, theirs = mutated_verdicts(case, mutation, root_file(tmp_path, case))
    assert isinstance(ours, str) and MUTATIONS[mutation][1] in ours
    assert theirs is not None, f"sigstore-python accepts a bundle with a flipped {mutation}"


# -- bundles minted with the suite's own Sigstore -----------------------------------------------------------------


@pytest.fixture
def signer(tmp_path: Path) -> Iterator[Signer]:
    yield make_signer(tmp_path / "sigstore")


def minted(signer: Signer) -> bytes:
    """A bundle v0.3 as cosign v3 signs an image: a DSSE envelope, logged in Rekor as ``dsse`` 0.0.1."""
    return keyless_bundle(signer, statement("registry.example/acme/app", "sha256:" + "ab" * 32))


def test_both_accept_a_minted_bundle_with_the_same_signer(signer: Signer) -> None:
    bundle = minted(signer)
    assert sigstore_says(bundle, None, signer.root, GITHUB_ISSUER, WORKFLOW) is None
    assert preparer_says(bundle, None, signer.root, GITHUB_ISSUER, WORKFLOW) == (GITHUB_ISSUER, WORKFLOW)


def test_both_accept_a_minted_bundle_whose_issuer_is_in_the_deprecated_extension(signer: Signer) -> None:
    leaf = signer.sigstore.leaf(issuer_extension="v1", not_before=T0 - 60)
    bundle = keyless_bundle(signer, statement("registry.example/acme/app", "sha256:" + "ab" * 32), leaf)
    assert sigstore_says(bundle, None, signer.root, GITHUB_ISSUER, WORKFLOW) is None
    assert preparer_says(bundle, None, signer.root, GITHUB_ISSUER, WORKFLOW) == (GITHUB_ISSUER, WORKFLOW)


@pytest.mark.parametrize("wrong", ["issuer", "subject"])
def test_both_refuse_a_minted_bundle_for_another_identity(signer: Signer, wrong: str) -> None:
    bundle = minted(signer)
    who = {"issuer": GITHUB_ISSUER, "subject": WORKFLOW, wrong: "https://attacker.example/"}
    assert isinstance(preparer_says(bundle, None, signer.root, who["issuer"], who["subject"]), str)
    assert sigstore_says(bundle, None, signer.root, who["issuer"], who["subject"]) is not None


@pytest.mark.parametrize("mutation", MUTATIONS)
def test_both_refuse_a_mutated_minted_bundle(signer: Signer, mutation: str) -> None:
    bundle = json.loads(minted(signer))
    MUTATIONS[mutation][0](bundle)
    data = json.dumps(bundle).encode()
    ours = preparer_says(data, None, signer.root, GITHUB_ISSUER, WORKFLOW)
    assert isinstance(ours, str) and MUTATIONS[mutation][1] in ours
    assert sigstore_says(data, None, signer.root, GITHUB_ISSUER, WORKFLOW) is not None


def test_both_refuse_a_minted_bundle_against_another_sigstores_root(signer: Signer, tmp_path: Path) -> None:
    other = make_signer(tmp_path / "other")
    bundle = minted(signer)
    assert isinstance(preparer_says(bundle, None, other.root, GITHUB_ISSUER, WORKFLOW), str)
    assert sigstore_says(bundle, None, other.root, GITHUB_ISSUER, WORKFLOW) is not None


def test_both_refuse_a_minted_leaf_that_expired_before_it_was_logged(signer: Signer) -> None:
    leaf = signer.sigstore.leaf(
        not_before=T0 - 1200
    )  # valid for ten minutes, twenty minutes before the entry
    bundle = keyless_bundle(signer, statement("registry.example/acme/app", "sha256:" + "ab" * 32), leaf)
    assert isinstance(preparer_says(bundle, None, signer.root, GITHUB_ISSUER, WORKFLOW), str)
    assert sigstore_says(bundle, None, signer.root, GITHUB_ISSUER, WORKFLOW) is not None


# -- where sigstore-python is laxer -------------------------------------------------------------------------------

#: Trusted root windows (``validFor``) that do not hold the signing time :data:`T0`, all in the past: the preparer
#: refuses the signature (as sigstore-go does); sigstore-python compares them with the current time and accepts it.
LAXER: dict[str, tuple[dict[str, tuple[int, int | None]], str]] = {
    "CA window ended before signing": (
        {"ca_window": (T0 - 86400, T0 - 1)}, "no certificate authority of the trusted root"
    ),
    "CA window began after signing": ({"ca_window": (T0 + 1, None)}, "no certificate authority of the trusted root"),
    "log window ended before signing": ({"tlog_window": (T0 - 86400, T0 - 1)}, "was not valid at"),
    "log window began after signing": ({"tlog_window": (T0 + 1, None)}, "was not valid at"),
    "CT log window ended before the SCT": ({"ct_window": (T0 - 86400, T0 - 61)}, "CT log"),
}  # fmt: skip


@pytest.mark.parametrize("name", LAXER)
def test_where_sigstore_python_is_laxer_the_preparer_refuses(
    signer: Signer, name: str, tmp_path: Path
) -> None:
    windows, reason = LAXER[name]
    bundle = minted(signer)
    root = signer.sigstore.trusted_root(tmp_path / "windowed.json", **windows)
    ours = preparer_says(bundle, None, root, GITHUB_ISSUER, WORKFLOW)
    assert isinstance(ours, str) and reason in ours
    # The documented exception: if sigstore-python refuses too, it became as strict; move the case to the agreements.
    assert sigstore_says(bundle, None, root, GITHUB_ISSUER, WORKFLOW) is None


def test_where_sigstore_python_is_laxer_on_a_real_bundle_the_preparer_refuses(tmp_path: Path) -> None:
    # The production Fulcio CA's window edited to end before the wheel was signed (2024-03-19T22:41:16Z).
    def ended(doc: Doc) -> None:
        for authority in doc["certificateAuthorities"]:
            authority["validFor"]["end"] = "2024-03-19T00:00:00Z"

    case = dataclasses.replace(ACCEPTED["production github v0.2"], edit=ended)
    ours, theirs = both(case, root_file(tmp_path, case))
    assert isinstance(ours, str) and "no certificate authority of the trusted root" in ours
    assert theirs is None
