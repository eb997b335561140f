"""``trusted_root.json`` is read into a TrustedRoot, or refused naming the value at fault
(preparer/policy/keyless/root.py)."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from preparer.policy.keyless.model import RootProblem, Window
from preparer.policy.keyless.root import MAX_ROOT_BYTES, load_root
from tests.keyless import T0, Sigstore, der, make_sigstore, new_key, spki

DATA = Path(__file__).resolve().parent.parent / "data" / "sigstore"


@pytest.fixture(scope="module")
def sigstore() -> Sigstore:
    return make_sigstore()


def _write(tmp_path: Path, doc: Any) -> Path:
    path = tmp_path / "trusted_root.json"
    path.write_text(json.dumps(doc))
    return path


def test_the_production_root_loads() -> None:
    path = DATA / "trusted_root.json"
    root = load_root(path)
    assert root.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert root.path == str(path)
    assert [(log.url, log.origin) for log in root.tlogs] == [
        ("https://rekor.sigstore.dev", "rekor.sigstore.dev"),
        ("https://log2025-1.rekor.sigstore.dev", "log2025-1.rekor.sigstore.dev"),
    ]
    assert root.tlogs[0].log_id == base64.b64decode("wNI9atQGlz+VWfO6LRygH4QUfY/8W4RFwiT5i5WRgB0=")
    assert root.tlogs[0].window == Window(1610452407)  # 2021-01-12T11:53:27Z
    assert type(root.tlogs[1].key).__name__ == "Ed25519PublicKey"
    assert [log.url for log in root.ctlogs] == [
        "https://ctfe.sigstore.dev/test",
        "https://ctfe.sigstore.dev/2022",
    ]
    # 2021-03-14T00:00:00Z to 2022-10-31T23:59:59.999Z: the fraction keeps the end inside its second.
    assert root.ctlogs[0].window == Window(1615680000, 1667260799)
    assert [len(ca.chain) for ca in root.authorities] == [1, 2]
    assert root.authorities[0].window == Window(1615087229, 1672531199)
    assert root.authorities[1].uri == "https://fulcio.sigstore.dev"
    assert len(root.timestamp_authorities) == 1


def test_the_staging_root_loads_with_its_rsa_ct_key() -> None:
    root = load_root(DATA / "trusted_root.staging.json")
    assert type(root.ctlogs[0].key).__name__ == "RSAPublicKey"
    assert root.tlogs[3].origin == "log2025-alpha3.rekor.sigstage.dev"


def test_the_minted_root_loads_as_written(sigstore: Sigstore, tmp_path: Path) -> None:
    path = sigstore.trusted_root(tmp_path / "root.json", ca_window=(T0 - 100, T0 + 100))
    root = load_root(path)
    assert root.authorities[0].chain == sigstore.chain
    assert root.authorities[0].window == Window(T0 - 100, T0 + 100)
    assert root.ctlogs[0].log_id == sigstore.ct_log_id
    assert root.ctlogs[0].spki == spki(sigstore.ct_key)
    assert [log.log_id for log in root.tlogs] == [sigstore.rekor_log_id, sigstore.rekor2_log_id]
    assert root.tlogs[1].origin == "log2025-1.rekor.sigstore.test"
    assert root.timestamp_authorities[0].chain == (der(sigstore.tsa), der(sigstore.tsa_root))


def test_timestamp_authorities_are_optional_and_a_log_id_defaults_to_the_key_hash(
    sigstore: Sigstore, tmp_path: Path
) -> None:
    doc = sigstore.trusted_root_doc(timestamp_authorities=False)
    del doc["ctlogs"][0]["logId"]
    del doc["timestampAuthorities"]
    root = load_root(_write(tmp_path, doc))
    assert root.timestamp_authorities == ()
    assert root.ctlogs[0].log_id == hashlib.sha256(spki(sigstore.ct_key)).digest()


def test_times_with_offsets_and_fractions(sigstore: Sigstore, tmp_path: Path) -> None:
    doc = sigstore.trusted_root_doc()
    # T0 + 0.5 s, given in another zone, and T0 + 10.9 s: the window is the whole seconds inside them.
    window = {"start": "2023-11-15T00:13:20.5+02:00", "end": "2023-11-14T22:13:30.9Z"}
    doc["certificateAuthorities"][0]["validFor"] = window
    root = load_root(_write(tmp_path, doc))
    assert root.authorities[0].window == Window(T0 + 1, T0 + 10)


def _set(*path_and_value: Any) -> Callable[[dict[str, Any]], None]:
    *path, value = path_and_value

    def change(doc: dict[str, Any]) -> None:
        target = doc
        for key in path[:-1]:
            target = target[key]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value

    return change


_DELETE = object()
_P521 = base64.b64encode(spki(ec.generate_private_key(ec.SECP521R1()))).decode()
_ED25519 = base64.b64encode(spki(new_key("ed25519"))).decode()
_CERT = "certificateAuthorities"


@pytest.mark.parametrize(
    ("change", "where", "cause"),
    [
        (_set("mediaType", "application/vnd.dev.sigstore.bundle.v0.3+json"), "mediaType", "mediaType is"),
        (_set("mediaType", _DELETE), "mediaType", "mediaType is missing"),
        (_set(_CERT, []), _CERT, "no certificate authority"),
        (_set(_CERT, _DELETE), _CERT, "no certificate authority"),
        (_set("tlogs", []), "tlogs", "no transparency log"),
        (_set("ctlogs", []), "ctlogs", "no certificate transparency log"),
        (_set("ctlogs", {}), "ctlogs", "not a list"),
        (_set("tlogs", 0, "publicKey", "rawBytes", "MFkw"), "tlogs[0].publicKey.rawBytes", "not a DER public key"),
        (_set("tlogs", 0, "publicKey", "rawBytes", "not base64!"), "tlogs[0].publicKey.rawBytes", "not base64"),
        (_set("tlogs", 0, "publicKey", _DELETE), "tlogs[0].publicKey", "not an object"),
        (_set("ctlogs", 0, "publicKey", "rawBytes", _P521), "ctlogs[0].publicKey.rawBytes", "secp521r1"),
        (_set("ctlogs", 0, "publicKey", "rawBytes", _ED25519), "ctlogs[0].publicKey.keyDetails", "but the key is"),
        (_set("tlogs", 1, "publicKey", "keyDetails", "LMS_SHA256"), "tlogs[1].publicKey.keyDetails", "not supported"),
        (_set("tlogs", 0, "logId", "keyId", 7), "tlogs[0].logId.keyId", "not a string"),
        (_set("tlogs", 0, "baseUrl", "https://"), "tlogs[0].baseUrl", "not a URL"),
        (_set(_CERT, 0, "certChain", "certificates", 1, "rawBytes", "MIIB"),
         "certificateAuthorities[0].certChain.certificates[1]", "not a DER X.509 certificate"),
        (_set(_CERT, 0, "certChain", "certificates", []), "certificateAuthorities[0].certChain.certificates",
         "not a list of certificates"),
        (_set("timestampAuthorities", 0, "certChain", "certificates", 0, "rawBytes", _ED25519),
         "timestampAuthorities[0].certChain.certificates[0]", "not a DER X.509 certificate"),
        (_set(_CERT, 0, "validFor", _DELETE), "certificateAuthorities[0].validFor", "is missing"),
        (_set(_CERT, 0, "validFor", {"end": "2030-01-01T00:00:00Z"}), "certificateAuthorities[0].validFor.start",
         "is missing"),
        (_set(_CERT, 0, "validFor", {"start": "2023-01-01"}), "certificateAuthorities[0].validFor.start",
         "not an RFC 3339 time"),
        (_set(_CERT, 0, "validFor", {"start": 1700000000}), "certificateAuthorities[0].validFor.start",
         "not an RFC 3339 time"),
        (_set(_CERT, 0, "validFor", {"start": "2023-02-30T00:00:00Z"}), "certificateAuthorities[0].validFor.start",
         "not a valid time"),
        (_set(_CERT, 0, "validFor", {"start": "2016-12-31T23:59:60Z"}), "certificateAuthorities[0].validFor.start",
         "leap second"),
        (_set(_CERT, 0, "validFor", {"start": "2024-01-01T00:00:00Z", "end": "2023-01-01T00:00:00Z"}),
         "certificateAuthorities[0].validFor", "ends before it starts"),
        (_set("ctlogs", 0, "publicKey", "validFor", {"start": "2023-01-01T00:00:00Z", "end": "soon"}),
         "ctlogs[0].publicKey.validFor.end", "not an RFC 3339 time"),
    ],
)  # fmt: skip
def test_a_root_that_cannot_be_used_is_refused_naming_the_value(
    sigstore: Sigstore, tmp_path: Path, change: Callable[[dict[str, Any]], None], where: str, cause: str
) -> None:
    doc = copy.deepcopy(sigstore.trusted_root_doc())
    change(doc)
    with pytest.raises(RootProblem, match=cause) as caught:
        load_root(_write(tmp_path, doc))
    assert caught.value.where == where


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (b"{", "not a trusted root: it is not JSON"),
        (b'{"mediaType": 1, "mediaType": 2}', "given twice"),
        (b"[]", "not a JSON object"),
        (b"\xef\xbb\xbf{}", "byte order mark"),
    ],
)
def test_a_file_that_is_not_a_trusted_root_is_refused(tmp_path: Path, data: bytes, cause: str) -> None:
    path = tmp_path / "trusted_root.json"
    path.write_bytes(data)
    with pytest.raises(RootProblem, match=cause) as caught:
        load_root(path)
    assert caught.value.where == ""


def test_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RootProblem, match="not a regular file the preparer can read"):
        load_root(tmp_path / "absent.json")


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(RootProblem, match="not a regular file the preparer can read"):
        load_root(tmp_path)


def test_a_file_over_the_bound_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "trusted_root.json"
    with open(path, "wb") as f:
        f.truncate(MAX_ROOT_BYTES + 1)  # sparse: nothing in it would parse, and it is never read
    with pytest.raises(RootProblem, match="larger than 1048576 bytes"):
        load_root(path)


def test_tufs_own_root_json_is_named_as_such(tmp_path: Path) -> None:
    """The usual mistake: the TUF root that signs the trusted root, given in its place."""
    path = tmp_path / "root.json"
    path.write_text('{"signed": {"_type": "root", "spec_version": "1.0"}, "signatures": []}')
    with pytest.raises(RootProblem, match=r"it is TUF's root\.json: give the trusted_root\.json target"):
        load_root(path)
