"""Signing images as cosign does, offline, into the suite's real registry (no cosign binary is packaged here).

- :func:`sign_tag_scheme`: cosign's tag scheme (sigstore/cosign ``specs/SIGNATURE_SPEC.md``): a simple-signing
  payload per signature, an ECDSA (DER) signature over its bytes in the layer annotation
  ``dev.cosignproject.cosign/signature``, every signature a layer of the manifest at tag ``sha256-<hex>.sig``.
- :func:`sign_bundle`: cosign v3's default: a Sigstore bundle v0.3 whose DSSE envelope holds an in-toto statement
  of predicate type ``https://sigstore.dev/cosign/sign/v1``, signed over DSSE's PAE, pushed as an OCI 1.1 referrer
  (``subject`` = the image) and listed in the referrers tag schema's index (tag ``sha256-<hex>``), which is what
  cosign writes on a registry without the referrers API (Debian's docker-registry 2.8).

The fixture ``key`` is a new P-256 key of the test's own (:func:`make_key` in ``tmp_path/keys``).
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.plugins.registry import Registry, put_manifest, upload_blob

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
EMPTY = "application/vnd.oci.empty.v1+json"


@dataclass
class Key:
    """A key pair as ``cosign generate-key-pair`` makes one: ``public`` is ``cosign.pub`` (SPKI PEM)."""

    signing: Any
    public: Path
    curve: str

    @property
    def der(self) -> bytes:
        """The public key's DER SubjectPublicKeyInfo."""
        return spki(self.signing)

    @property
    def fingerprint(self) -> str:
        return hashlib.sha256(self.der).hexdigest()

    def sign(self, message: bytes) -> bytes:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec

        if self.curve == "ed25519":
            return bytes(self.signing.sign(message))
        hashed = hashes.SHA384() if self.curve == "p384" else hashes.SHA256()
        return bytes(self.signing.sign(message, ec.ECDSA(hashed)))  # DER, as cosign writes it


def spki(private: Any) -> bytes:
    """The DER SubjectPublicKeyInfo of the public half of ``private`` (a ``cryptography`` private key)."""
    from cryptography.hazmat.primitives import serialization

    return bytes(
        private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )


def generate(curve: str) -> Any:
    """A new ``cryptography`` private key: ``p256``, ``p384``, ``p521``, ``secp256k1``, ``ed25519`` or ``rsa``."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

    if curve == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    if curve == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    curves = {
        "p256": ec.SECP256R1(),
        "p384": ec.SECP384R1(),
        "p521": ec.SECP521R1(),
        "secp256k1": ec.SECP256K1(),
    }
    return ec.generate_private_key(curves[curve])


def pem_public_key(der: bytes) -> str:
    """``der`` as ``cosign.pub`` holds it: one PEM ``PUBLIC KEY`` block, 64 characters a line."""
    body = base64.b64encode(der).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "-----BEGIN PUBLIC KEY-----\n" + "\n".join(lines) + "\n-----END PUBLIC KEY-----\n"


def make_key(directory: Path, name: str = "cosign", curve: str = "p256") -> Key:
    """A new key; its public half written to ``directory/<name>.pub``, its private half to ``<name>.key``."""
    from cryptography.hazmat.primitives import serialization

    signing = generate(curve)
    directory.mkdir(parents=True, exist_ok=True)
    public = directory / f"{name}.pub"
    public.write_text(pem_public_key(spki(signing)))
    private = signing.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (directory / f"{name}.key").write_bytes(private)
    return Key(signing, public, curve)


@pytest.fixture
def key(tmp_path: Path) -> Key:
    return make_key(tmp_path / "keys")


def simple_signing(reference: str, digest: str, kind: str = "cosign container image signature") -> bytes:
    """The payload cosign signs for an image (its field order and ``optional: null``)."""
    return json.dumps(
        {"critical": {"identity": {"docker-reference": reference}, "image": {"docker-manifest-digest": digest},
                      "type": kind}, "optional": None},
        separators=(",", ":"),
    ).encode()  # fmt: skip


def sign_tag_scheme(
    registry: Registry,
    repository: str,
    digest: str,
    signatures: list[tuple[bytes, bytes | str]],
    annotations: list[dict[str, str]] | None = None,
) -> str:
    """Write the manifest at tag ``sha256-<hex>.sig`` with one layer per ``(payload, signature)`` (a signature
    given as bytes is base64-encoded as cosign does; a str is written as it is), each layer with the extra
    ``annotations`` given for it (a keyless signature's certificate and Rekor bundle); return its digest."""
    config = json.dumps({"architecture": "", "os": "", "config": {}, "rootfs": {"type": "layers",
                         "diff_ids": [_sha(p) for p, _ in signatures]}}).encode()  # fmt: skip
    layers = []
    extra = annotations or [{} for _ in signatures]
    for (payload, signature), more in zip(signatures, extra, strict=True):
        encoded = base64.b64encode(signature).decode() if isinstance(signature, bytes) else signature
        layers.append({"mediaType": SIMPLE_SIGNING, "size": len(payload),
                       "digest": upload_blob(registry, repository, payload),
                       "annotations": {"dev.cosignproject.cosign/signature": encoded, **more}})  # fmt: skip
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": len(config),
                           "digest": upload_blob(registry, repository, config)},
                "layers": layers}  # fmt: skip
    tag = digest.replace(":", "-") + ".sig"
    return put_manifest(registry, repository, tag, json.dumps(manifest).encode(), OCI_MANIFEST)


def cosign_sign(
    registry: Registry, repository: str, digest: str, key: Key, signed_digest: str | None = None
) -> str:
    """``cosign sign --key`` with the tag scheme: one signature, for ``signed_digest`` (default ``digest``)."""
    payload = simple_signing(f"{registry.host}/{repository}", signed_digest or digest)
    return sign_tag_scheme(registry, repository, digest, [(payload, key.sign(payload))])


def pae(payload_type: str, payload: bytes) -> bytes:
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def statement(name: str, digest: str, predicate_type: str = "https://sigstore.dev/cosign/sign/v1") -> bytes:
    return json.dumps({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": name, "digest": {"sha256": digest.removeprefix("sha256:")}}],
        "predicateType": predicate_type, "predicate": {},
    }).encode()  # fmt: skip


def bundle(key: Key, payload: bytes, signature: bytes | None = None) -> bytes:
    """A Sigstore bundle v0.3 with a DSSE envelope over ``payload`` (an in-toto statement), keyed."""
    sig = signature if signature is not None else key.sign(pae("application/vnd.in-toto+json", payload))
    return json.dumps({
        "mediaType": BUNDLE,
        "verificationMaterial": {"publicKey": {"hint": base64.b64encode(bytes.fromhex(key.fingerprint)).decode()},
                                 "tlogEntries": []},
        "dsseEnvelope": {"payload": base64.b64encode(payload).decode(),
                         "payloadType": "application/vnd.in-toto+json",
                         "signatures": [{"sig": base64.b64encode(sig).decode(), "keyid": ""}]},
    }).encode()  # fmt: skip


def attach_bundle(
    registry: Registry,
    repository: str,
    digest: str,
    data: bytes,
    subject_type: str = OCI_MANIFEST,
    predicate: str = "https://sigstore.dev/cosign/sign/v1",
    tag_schema: bool = True,
) -> tuple[str, dict[str, Any]]:
    """Push ``data`` (a bundle) as a referrer of ``digest``, and (``tag_schema``) list it in the referrers tag
    schema's index; return the referrer manifest's digest and its index entry."""
    empty = b"{}"
    layer = upload_blob(registry, repository, data)
    manifest = {
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "artifactType": BUNDLE,
        "config": {"mediaType": EMPTY, "digest": upload_blob(registry, repository, empty), "size": 2},
        "layers": [{"mediaType": BUNDLE, "digest": layer, "size": len(data),
                    "annotations": {"org.opencontainers.image.title": layer.replace(":", "-") + ".sigstore.json"}}],
        "subject": {"mediaType": subject_type, "digest": digest, "size": 0},
        "annotations": {"dev.sigstore.bundle.content": "dsse-envelope"}
        | ({"dev.sigstore.bundle.predicateType": predicate} if predicate else {}),
    }  # fmt: skip
    body = json.dumps(manifest).encode()
    referrer = _sha(body)
    put_manifest(registry, repository, referrer, body, OCI_MANIFEST)
    entry = {"mediaType": OCI_MANIFEST, "digest": referrer, "size": len(body), "artifactType": BUNDLE,
             "annotations": manifest["annotations"]}  # fmt: skip
    if tag_schema:  # cosign adds to the index the tag holds already
        tag = digest.replace(":", "-")
        listed = _existing_index(registry, repository, tag)
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [*listed, entry]}
        put_manifest(registry, repository, tag, json.dumps(index).encode(), OCI_INDEX)
    return referrer, entry


def bundle_sign(
    registry: Registry,
    repository: str,
    digest: str,
    key: Key,
    signed_digest: str | None = None,
    tag_schema: bool = True,
) -> tuple[str, dict[str, Any]]:
    """``cosign sign --key`` as cosign v3 does by default: a bundle attached as a referrer of ``digest``."""
    payload = statement(f"{registry.host}/{repository}", signed_digest or digest)
    return attach_bundle(registry, repository, digest, bundle(key, payload), tag_schema=tag_schema)


def _existing_index(registry: Registry, repository: str, tag: str) -> list[Any]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(f"http://{registry.host}/v2/{repository}/manifests/{tag}",
                                     headers={"Accept": OCI_INDEX})  # fmt: skip
    try:
        with urllib.request.urlopen(request) as response:
            return list(json.loads(response.read()).get("manifests", []))
    except urllib.error.HTTPError:
        return []


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()
