"""The transparency log checks (preparer/policy/keyless/tlog.py): real Sigstore entries verify; what is tampered
with, from another log, signed by another key or for another signature is refused, with the reason."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json

import pytest

from preparer.policy.keyless import evidence, tlog
from preparer.policy.keyless.model import Evidence, KeylessProblem, LogEntry, Window
from tests.keyless_log import DATA, T0, Log, hashedrekord, inclusion_path, real_root, tree_root

REAL = [
    ("bundle.txt.sigstore", "bundle.txt", "trusted_root.staging.json", 1682468469),
    ("bundle_v3.txt.sigstore", "bundle_v3.txt", "trusted_root.staging.json", 1712085549),
    ("bundle_v3_alt.txt.sigstore", "bundle_v3_alt.txt", "trusted_root.staging.json", 1712085616),
    ("dsse_v001.sigstore.json", None, "trusted_root.production.json", 1756727502),
    ("tsa/bundle.txt.sigstore", "tsa/bundle.txt", "tsa/trust_config.json", 1730370219),
    ("staging-rekor-v2.txt.sigstore.json", "staging-rekor-v2.txt", "trusted_root.staging.json", None),
    ("a.dsse.staging-rekor-v2.txt.sigstore.json", None, "trusted_root.staging.json", None),
]


def real(bundle: str, artifact: str | None) -> Evidence:
    return evidence.from_bundle(
        (DATA / bundle).read_bytes(), bundle, artifact=(DATA / artifact).read_bytes() if artifact else None
    )


@pytest.mark.parametrize(("bundle", "artifact", "root", "time"), REAL)
def test_real_entries_verify(bundle: str, artifact: str | None, root: str, time: int | None) -> None:
    found, trusted = real(bundle, artifact), real_root(root)
    (entry,) = found.entries
    if time is None:
        assert entry.promise is None  # Rekor v2: a checkpoint, no promise
    else:
        assert tlog.verify_promise(entry, trusted) == time
    tlog.verify_inclusion(entry, trusted)
    tlog.check_entry(entry, found)


def test_the_cve_2022_36056_entry_is_of_another_signature() -> None:
    found, root = (
        real("bundle_cve_2022_36056.txt.sigstore", "bundle_cve_2022_36056.txt"),
        real_root("trusted_root.staging.json"),
    )
    (entry,) = found.entries
    tlog.verify_promise(entry, root)  # a genuine entry of the log...
    tlog.verify_inclusion(entry, root)
    with pytest.raises(
        KeylessProblem, match=r"log entry 26084047 is not for this signature: it records another signature"
    ):
        tlog.check_entry(entry, found)  # ...of someone else's signature


def test_a_real_entry_changed_in_any_field_fails_its_promise() -> None:
    found, root = real("bundle_v3.txt.sigstore", "bundle_v3.txt"), real_root("trusted_root.staging.json")
    (entry,) = found.entries
    for changed in (
        dataclasses.replace(entry, body=entry.body.replace(b'"sha256"', b'"sha512"')),
        dataclasses.replace(entry, integrated_time=(entry.integrated_time or 0) + 1),
        dataclasses.replace(entry, log_index=entry.log_index + 1),
    ):
        with pytest.raises(
            KeylessProblem,
            match=r"signed entry timestamp of log entry .* does not verify with the key of log https://rekor.sigstage.dev",
        ):
            tlog.verify_promise(changed, root)


def test_a_real_entry_is_refused_by_the_other_instance_s_root() -> None:
    found = real("bundle_v3.txt.sigstore", "bundle_v3.txt")
    with pytest.raises(
        KeylessProblem, match=r"from log d32f30a3c32d639c.*which the trusted root does not name"
    ):
        tlog.verify_promise(found.entries[0], real_root("trusted_root.production.json"))


def test_a_real_proof_for_a_changed_body_does_not_lead_to_its_root() -> None:
    found, root = (
        real("staging-rekor-v2.txt.sigstore.json", "staging-rekor-v2.txt"),
        real_root("trusted_root.staging.json"),
    )
    entry = dataclasses.replace(found.entries[0], body=found.entries[0].body + b" ")
    with pytest.raises(KeylessProblem, match=r"does not lead to its root hash"):
        tlog.verify_inclusion(entry, root)


# -- our own log --------------------------------------------------------------------------------------------------


def own_entry(log: Log) -> tuple[LogEntry, Evidence]:
    leaf, signature, message = b"leaf-der", b"signature-bytes", b'{"critical": {}}'
    found = Evidence(leaf=leaf, chain=(), signature=signature, message=message)
    return log.add(hashedrekord(signature, leaf, message)), found


def test_an_entry_of_our_own_log_verifies() -> None:
    log = Log()
    entry, found = own_entry(log)
    assert tlog.verify_promise(entry, log.root()) == T0
    tlog.verify_inclusion(entry, log.root())
    tlog.check_entry(entry, found)


def test_a_log_key_not_valid_at_the_integrated_time_is_refused() -> None:
    log = Log(window=Window(T0 + 1))
    entry, _ = own_entry(log)
    with pytest.raises(
        KeylessProblem, match=r"key of log https://rekor.test.example was not valid at 2024-01-01T00:00:00Z"
    ):
        tlog.verify_promise(entry, log.root())
    with pytest.raises(KeylessProblem, match=r"was not valid"):
        tlog.verify_inclusion(entry, log.root(), at=T0)  # the time its promise proves: the caller gives it
    old = Log(window=Window(T0 - 100, T0 - 1))
    with pytest.raises(KeylessProblem, match=r"was not valid"):
        tlog.verify_promise(own_entry(old)[0], old.root())


def test_a_promise_by_another_key_under_the_log_s_id_is_refused() -> None:
    log, other = Log(), Log()
    entry, _ = own_entry(log)
    forged = dataclasses.replace(entry, promise=other.promise(entry.body, entry.log_index, T0))
    with pytest.raises(KeylessProblem, match=r"does not verify"):
        tlog.verify_promise(forged, log.root(other.key))
    with pytest.raises(KeylessProblem, match=r"no signed entry timestamp"):
        tlog.verify_promise(dataclasses.replace(entry, promise=None), log.root())


def _with_checkpoint(entry: LogEntry, checkpoint: str) -> LogEntry:
    assert entry.proof is not None
    return dataclasses.replace(entry, proof=dataclasses.replace(entry.proof, checkpoint=checkpoint))


@pytest.mark.parametrize("kind", ["ecdsa", "ed25519"])
def test_checkpoints_are_signed_by_the_log_and_name_the_proof_s_tree(kind: str) -> None:
    log, other = Log(kind), Log(kind)
    entry, _ = own_entry(log)
    tlog.verify_inclusion(entry, log.root())
    assert entry.proof is not None
    size, root_hash = entry.proof.tree_size, entry.proof.root_hash
    by_other = _with_checkpoint(entry, log.checkpoint(size, root_hash, signer=other))
    with pytest.raises(KeylessProblem, match=r"no signature by the log's key"):
        tlog.verify_inclusion(by_other, log.root(other.key))
    other_tree = _with_checkpoint(entry, log.checkpoint(size + 1, root_hash))
    with pytest.raises(KeylessProblem, match=f"for another tree \\(size {size + 1}"):
        tlog.verify_inclusion(other_tree, log.root())
    other_hash = _with_checkpoint(entry, log.checkpoint(size, hashlib.sha256(b"x").digest()))
    with pytest.raises(KeylessProblem, match=r"for another tree"):
        tlog.verify_inclusion(other_hash, log.root())
    # A signature line under the log's name and key ID that does not verify refuses the note.
    note, _, line = entry.proof.checkpoint.partition("\n\n")
    raw = base64.b64decode(line.split(" ")[2])
    bad = f"{note}\n\n\u2014 {log.name} {base64.b64encode(raw[:4] + bytes(len(raw) - 4)).decode()}\n"
    with pytest.raises(KeylessProblem, match=f"signature by {log.name} does not verify"):
        tlog.verify_inclusion(_with_checkpoint(entry, bad), log.root())
    # A witness's cosignature beside the log's is ignored.
    witnessed = (
        entry.proof.checkpoint + f"\u2014 witness.example {base64.b64encode(b'1234' + bytes(64)).decode()}\n"
    )
    tlog.verify_inclusion(_with_checkpoint(entry, witnessed), log.root())


def test_a_rekor_v2_checkpoint_names_the_log_s_origin() -> None:
    log = Log("ed25519", name="log2030.rekor.test.example")
    entry, _ = own_entry(log)
    assert entry.proof is not None
    elsewhere = log.checkpoint(entry.proof.tree_size, entry.proof.root_hash, origin="other.example")
    with pytest.raises(
        KeylessProblem, match=r"checkpoint's origin is 'other.example', not the log's 'log2030"
    ):
        tlog.verify_inclusion(_with_checkpoint(entry, elsewhere), log.root())
    # Rekor v1's form, the origin and the tree ID, names the log too; other suffixes do not.
    v1_style = log.checkpoint(
        entry.proof.tree_size,
        entry.proof.root_hash,
        origin="log2030.rekor.test.example - 1193050959916656506",
    )
    tlog.verify_inclusion(_with_checkpoint(entry, v1_style), log.root())
    for origin in (
        "log2030.rekor.test.example - ",
        "log2030.rekor.test.example - 12x",
        "log2030.rekor.test.examplex",
    ):
        other = log.checkpoint(entry.proof.tree_size, entry.proof.root_hash, origin=origin)
        with pytest.raises(KeylessProblem, match=r"checkpoint's origin is .*, not the log's 'log2030"):
            tlog.verify_inclusion(_with_checkpoint(entry, other), log.root())


@pytest.mark.parametrize(("bundle", "artifact", "root", "time"), REAL)
def test_real_entries_verify_with_the_root_as_root_py_reads_it(
    bundle: str, artifact: str | None, root: str, time: int | None
) -> None:
    # root.py gives every log its baseUrl host as origin; a Rekor v1 checkpoint's origin adds the tree ID.
    from preparer.policy.keyless.root import parse_root

    doc = json.loads((DATA / root).read_bytes())
    found = real(bundle, artifact)
    tlog.verify_inclusion(found.entries[0], parse_root(json.dumps(doc.get("trustedRoot", doc)).encode()))


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        ("origin\n1\nAAAA\n", "not a signed note"),
        ("origin\n1\nAAAA\n\n\u2014 name sig", "not a signed note"),
        ("origin\n1\nAAAA\n\n- name AAAAAAAAAAAA\n", "signature line '- name AAAAAAAAAAAA' is malformed"),
        ("origin\n1\nAAAA\n\n\u2014 name !!!!\n", "by name is not base64"),
        ("origin\n1\nAAAA\n\n\u2014 name AAAA\n", "by name is too short"),
        ("origin\x07\n1\n\n\u2014 name AAAA\n", "control character"),
        ("o\n1\nh\n\n" + "\u2014 n AAAAAAAA\n" * 65, "more than 64 signatures"),
    ],
)
def test_a_malformed_checkpoint_is_refused(text: str, cause: str) -> None:
    log = Log()
    entry, _ = own_entry(log)
    with pytest.raises(KeylessProblem, match=cause):
        tlog.verify_inclusion(_with_checkpoint(entry, text), log.root())


@pytest.mark.parametrize(
    ("size", "hash_", "cause"),
    [("01", base64.b64encode(bytes(32)).decode(), "tree size '01'"), ("1", "AAAA", "root hash is not")],
)
def test_a_signed_checkpoint_with_a_malformed_body_is_refused(size: str, hash_: str, cause: str) -> None:
    log = Log()
    entry, _ = own_entry(log)
    note = f"{log.name} - 1\n{size}\n{hash_}\n"
    line = base64.b64encode(log.key_id() + log.sign(note.encode())).decode()
    with pytest.raises(KeylessProblem, match=cause):
        tlog.verify_inclusion(_with_checkpoint(entry, f"{note}\n\u2014 {log.name} {line}\n"), log.root())


def test_inclusion_paths_of_every_leaf_of_small_trees_lead_to_the_root() -> None:
    for size in range(1, 34):
        leaves = [b"%d" % i for i in range(size)]
        root_hash = tree_root(leaves)
        for index in range(size):
            path = tuple(inclusion_path(leaves, index))
            assert tlog.root_from_proof(leaves[index], index, size, path) == root_hash
            if size > 1:
                assert tlog.root_from_proof(leaves[(index + 1) % size], index, size, path) != root_hash


@pytest.mark.parametrize(
    ("index", "size", "hashes", "cause"),
    [
        (5, 5, 3, "index 5 is outside its tree of 5"),
        (0, 4, 3, "more hashes than its tree is deep"),
        (0, 4, 1, "fewer hashes than its tree is deep"),
        (0, 4, 65, "more than 64"),
    ],
)
def test_a_proof_of_the_wrong_shape_is_refused(index: int, size: int, hashes: int, cause: str) -> None:
    with pytest.raises(KeylessProblem, match=cause):
        tlog.root_from_proof(b"leaf", index, size, (bytes(32),) * hashes)


def test_an_entry_without_a_proof_is_refused() -> None:
    log = Log()
    entry, _ = own_entry(log)
    with pytest.raises(KeylessProblem, match=r"has no inclusion proof"):
        tlog.verify_inclusion(dataclasses.replace(entry, proof=None), log.root())


# -- the entry is for this signature ------------------------------------------------------------------------------


def test_a_hashedrekord_entry_of_another_certificate_or_message_is_refused() -> None:
    log = Log()
    entry, found = own_entry(log)
    with pytest.raises(KeylessProblem, match=r"not for this signature: it records another certificate"):
        tlog.check_entry(entry, dataclasses.replace(found, leaf=b"other-leaf"))
    with pytest.raises(KeylessProblem, match=r"it records the digest of another message"):
        tlog.check_entry(entry, dataclasses.replace(found, message=b"{}"))
    with pytest.raises(KeylessProblem, match=r"it records another signature"):
        tlog.check_entry(entry, dataclasses.replace(found, signature=b"other"))


def test_an_entry_of_a_kind_not_checked_is_refused_by_name() -> None:
    body = json.dumps({"apiVersion": "0.0.1", "kind": "rekord", "spec": {}}).encode()
    entry = LogEntry(1, b"id", "rekord", "0.0.1", body)
    with pytest.raises(KeylessProblem, match=r"of kind rekord 0.0.1, which is not checked"):
        tlog.check_entry(entry, Evidence(leaf=b"", chain=(), signature=b"", message=b""))
    lying = dataclasses.replace(entry, kind="hashedrekord")
    with pytest.raises(
        KeylessProblem, match=r"body of log entry 1 is of kind rekord 0.0.1, not the hashedrekord"
    ):
        tlog.check_entry(lying, Evidence(leaf=b"", chain=(), signature=b"", message=b""))
    with pytest.raises(KeylessProblem, match=r"body of log entry 1 is refused: .*given twice"):
        tlog.check_entry(
            dataclasses.replace(entry, body=b'{"kind": 1, "kind": 2}'),
            Evidence(leaf=b"", chain=(), signature=b"", message=b""),
        )


def test_dsse_entries_are_checked_against_the_envelope() -> None:
    found = real("dsse_v001.sigstore.json", None)
    (entry,) = found.entries
    assert found.envelope is not None
    other_payload = dict(found.envelope, payload=base64.b64encode(b"{}").decode())
    with pytest.raises(KeylessProblem, match=r"records the hash of another payload"):
        tlog.check_entry(entry, dataclasses.replace(found, envelope=other_payload))
    with pytest.raises(KeylessProblem, match=r"records another certificate"):
        tlog.check_entry(entry, dataclasses.replace(found, leaf=b"other"))
    with pytest.raises(KeylessProblem, match=r"the signature is no DSSE envelope"):
        tlog.check_entry(entry, dataclasses.replace(found, envelope=None))
    message = real("bundle_v3.txt.sigstore", "bundle_v3.txt")
    with pytest.raises(KeylessProblem, match=r"DSSE envelope is logged as a dsse entry"):
        tlog.check_entry(message.entries[0], dataclasses.replace(message, envelope=found.envelope))


def test_a_dsse_0_0_2_entry_is_checked_against_the_envelope() -> None:
    payload, signature, leaf = b'{"_type": "statement"}', b"sig", b"leaf-der"
    envelope = {
        "payload": base64.b64encode(payload).decode(),
        "payloadType": "t",
        "signatures": [{"sig": base64.b64encode(signature).decode()}],
    }
    found = Evidence(leaf=leaf, chain=(), signature=signature, message=b"pae", envelope=envelope)
    spec = {
        "dsseV002": {
            "payloadHash": {
                "algorithm": "SHA2_256",
                "digest": base64.b64encode(hashlib.sha256(payload).digest()).decode(),
            },
            "signatures": [
                {
                    "content": base64.b64encode(signature).decode(),
                    "verifier": {
                        "x509Certificate": {"rawBytes": base64.b64encode(leaf).decode()},
                        "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    },
                }
            ],
        }
    }
    body = json.dumps({"apiVersion": "0.0.2", "kind": "dsse", "spec": spec}).encode()
    entry = LogEntry(7, b"id", "dsse", "0.0.2", body)
    tlog.check_entry(entry, found)
    with pytest.raises(KeylessProblem, match=r"records another certificate"):
        tlog.check_entry(entry, dataclasses.replace(found, leaf=b"x"))
    with pytest.raises(KeylessProblem, match=r"records other signatures"):
        tlog.check_entry(
            entry, dataclasses.replace(found, envelope=dict(envelope, signatures=[{"sig": "AAAA"}]))
        )


def test_a_rekor_v2_hashedrekord_of_another_message_is_refused() -> None:
    found = real("staging-rekor-v2.txt.sigstore.json", "staging-rekor-v2.txt")
    with pytest.raises(KeylessProblem, match=r"records the digest of another message"):
        tlog.check_entry(found.entries[0], dataclasses.replace(found, message=b"other"))
    with pytest.raises(KeylessProblem, match=r"records another certificate"):
        tlog.check_entry(found.entries[0], dataclasses.replace(found, leaf=b"other"))
