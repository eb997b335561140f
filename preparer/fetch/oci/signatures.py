"""Finding an image's signatures in its registry, before any of its config or layers is asked for.

Two places, both looked at for each digest a signature may be for (the index's and the platform manifest's):

- cosign's tag scheme: the manifest at tag ``sha256-<hex>.sig`` of the same repository, one signature per layer of
  media type ``application/vnd.dev.cosign.simplesigning.v1+json`` (the blob is the payload, the annotation
  ``dev.cosignproject.cosign/signature`` the signature);
- Sigstore bundles attached as OCI 1.1 referrers (cosign v3's default): the registry's referrers API
  (``/v2/<name>/referrers/<digest>``), or on a registry without it (a 404) the referrers tag schema (tag
  ``sha256-<hex>``, an index); each referrer whose ``artifactType`` is the bundle's has one layer, the bundle.

What is found is handed to the policy (:class:`~preparer.fetch.guard.SignatureCheck`), which judges it; this module
decides nothing. Everything read is untrusted and bounded: at most :data:`MAX_OBJECTS` signatures or referrers per
image and :data:`MAX_OBJECT` bytes per object (manifests at most the client's 4 MiB); past a bound the image is
refused, even if a valid signature is among what was read. Blobs and manifests are verified against their digests.

A run that finds every rule satisfied records the objects that satisfied them in the download cache, with the time;
a later run of the same digest within the policy's ``signature-max-age`` verifies those again and asks nothing
(:meth:`~preparer.fetch.store.Store.signatures`); after it, the registry is asked again, so a signature withdrawn
there stops admitting the image.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from preparer.errors import NotFoundError
from preparer.fetch.base import FetchContext
from preparer.fetch.guard import SignatureCheck, SignatureObject, Verified
from preparer.fetch.oci.buildpackage import descriptor_size
from preparer.fetch.streams import Reader, is_digest

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
BUNDLE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PREDICATE_ANNOTATION = "dev.sigstore.bundle.predicateType"
COSIGN_PREDICATE = "https://sigstore.dev/cosign/sign/v1"
#: At most this many signatures (layers of a ``.sig`` manifest) or referrers are looked at per image.
MAX_OBJECTS = 1000
#: At most this many bytes are read for one signature object (a payload, a bundle).
MAX_OBJECT = 16 << 20
T = TypeVar("T")


class Source(Protocol):
    """Where an image's signature objects are read: its registry (or hosts.toml's hosts for it)."""

    def manifest(self, identifier: str) -> tuple[dict[str, Any], str, str]: ...

    def read_blob(self, digest: str, consume: Callable[[Reader], T], size: int | None = None) -> Any: ...

    def referrers(self, digest: str, artifact_type: str) -> dict[str, Any] | None: ...


class _PastBound(Exception):
    """What the registry holds is past a bound: the image is refused."""


def verify_signatures(
    check: SignatureCheck,
    source: Source,
    repository: str,
    image: str,
    digests: Sequence[str],
    ctx: FetchContext,
    private: Callable[[], bool],
) -> tuple[Verified, ...]:
    """The signatures of ``image`` that satisfy ``check``, for one of ``digests`` (the index's, then the platform
    manifest's): from this pod's (or the fleet's) record of them when it is within the policy's
    ``signature-max-age`` and still satisfies every rule (no request), else from the registry (then recorded, with
    the time). ``private()``: whether the registry asked for credentials.

    :raises SignatureRefused: a rule that nothing satisfies, or objects past a bound (exit 1).
    :raises FetchError: the registry fails (exit 1).
    """
    shown = digests[-1]
    recorded = ctx.store.signatures(repository, shown, check.max_age)
    found = check.satisfying(recorded, digests) if recorded is not None else None
    if found is not None:
        return found
    try:
        objects = [obj for digest in digests for obj in _find(source, digest)]
    except _PastBound as why:
        raise check.refuse(image, shown, str(why)) from None
    verified = check.verify(objects, digests, image)
    used = {v.found for v in verified}
    kept = [o for o in objects if o.found in used]
    ctx.store.keep_signatures(repository, shown, kept, private(), ctx.sink.staging)
    return verified


def _find(source: Source, digest: str) -> list[SignatureObject]:
    """Every signature object the registry holds for ``digest``, in both formats."""
    return _cosign_objects(source, digest) + _bundle_objects(source, digest)


def _cosign_objects(source: Source, digest: str) -> list[SignatureObject]:
    tag = digest.replace(":", "-") + ".sig"
    try:
        manifest, kind, _ = source.manifest(tag)
    except NotFoundError:
        return []
    if kind != "manifest":
        return []
    layers = manifest.get("layers")
    layers = layers if isinstance(layers, list) else []
    if len(layers) > MAX_OBJECTS:
        raise _PastBound(
            f"the tag {tag} holds {len(layers)} signatures, more than the {MAX_OBJECTS} looked at"
        )
    found = []
    for number, layer in enumerate(layers, 1):
        if not isinstance(layer, dict) or layer.get("mediaType") != SIMPLE_SIGNING:
            continue
        annotations = layer.get("annotations")
        signature = annotations.get(SIGNATURE_ANNOTATION) if isinstance(annotations, dict) else None
        if not isinstance(signature, str) or len(signature) > MAX_OBJECT:
            continue
        payload = _small_blob(source, layer, f"signature {number} of the tag {tag}")
        found.append(SignatureObject("cosign", f"{tag} layer {number}", payload, signature))
    return found


def _bundle_objects(source: Source, digest: str) -> list[SignatureObject]:
    index = source.referrers(digest, BUNDLE_TYPE)
    if index is None:
        return []
    listed = index.get("manifests")
    listed = listed if isinstance(listed, list) else []
    if len(listed) > MAX_OBJECTS:
        raise _PastBound(f"{digest} has {len(listed)} referrers, more than the {MAX_OBJECTS} looked at")
    found = []
    for descriptor in listed:
        if not isinstance(descriptor, dict) or descriptor.get("artifactType") != BUNDLE_TYPE:
            continue
        annotations = descriptor.get("annotations")
        predicate = annotations.get(PREDICATE_ANNOTATION) if isinstance(annotations, dict) else None
        if predicate is not None and predicate != COSIGN_PREDICATE:
            continue  # an attestation of another kind, as its index entry says: not fetched
        referrer = descriptor.get("digest")
        if not is_digest(referrer):
            continue
        manifest, kind, _ = source.manifest(str(referrer))
        layers = manifest.get("layers")
        if kind != "manifest" or manifest.get("artifactType") != BUNDLE_TYPE or not isinstance(layers, list):
            continue
        bundle = next((x for x in layers if isinstance(x, dict) and x.get("mediaType") == BUNDLE_TYPE), None)
        if bundle is None:
            continue
        payload = _small_blob(source, bundle, f"the Sigstore bundle of referrer {referrer}")
        found.append(SignatureObject("bundle", f"referrer {referrer}", payload))
    return found


def _small_blob(source: Source, descriptor: dict[str, Any], what: str) -> bytes:
    """The blob of ``descriptor``, at most :data:`MAX_OBJECT` bytes, verified against its digest."""
    digest, size = descriptor.get("digest"), descriptor_size(descriptor)
    if not is_digest(digest):
        raise _PastBound(f"{what} has no valid sha256 digest")
    if size is None or size > MAX_OBJECT:
        raise _PastBound(f"{what} is larger than {MAX_OBJECT} bytes (or gives no size)")
    _, data = source.read_blob(str(digest), lambda body: _read_up_to(body, size + 1), size)
    if not isinstance(data, bytes) or len(data) != size:
        raise _PastBound(f"{what} is not the {size} bytes its descriptor says")
    return data


def _read_up_to(body: Reader, limit: int) -> bytes:
    """At most ``limit`` bytes of ``body``, however it splits them."""
    chunks, count = [], 0
    while count < limit:
        chunk = body.read(limit - count)
        if not chunk:
            break
        chunks.append(chunk)
        count += len(chunk)
    return b"".join(chunks)
