"""Finding an image's signatures in its registry, before any of its config or layers is asked for.

Two places, both looked at for each digest a signature may be for (the index's and the platform manifest's):

- cosign's tag scheme: the manifest at tag ``sha256-<hex>.sig`` of the same repository, one signature per layer of
  media type ``application/vnd.dev.cosign.simplesigning.v1+json`` (the blob is the payload, the annotation
  ``dev.cosignproject.cosign/signature`` the signature);
- Sigstore bundles attached as OCI 1.1 referrers (cosign v3's default): the registry's referrers API
  (``/v2/<name>/referrers/<digest>``, asked without a filter, since bundles come under four artifact types:
  :data:`BUNDLE_TYPES`), or on a registry without it (a 404, 400, 405 or 501) the referrers tag schema (tag
  ``sha256-<hex>``, an index); each referrer whose ``artifactType`` is a bundle's has one layer, the bundle.

What is found is handed to the policy (:class:`~preparer.fetch.guard.SignatureCheck`) one object at a time, as it is
read: a generator from here to the judge, which stops asking for more once every rule is satisfied, and keeps
nothing but the objects that satisfied a rule (for the download cache's record). This module decides nothing.

Everything read is untrusted and bounded. One image's signatures cost at most :data:`MAX_TOTAL` bytes in all
(both formats, both digests): each ``.sig`` manifest and list of referrers counts as the :data:`~preparer.fetch.
oci.client.MAX_MANIFEST` bytes it may be, each referrer manifest, payload and bundle as the size its descriptor
gives (and must be). At most :data:`MAX_OBJECTS` signatures or referrers are listed in one place. Past either bound
the image is refused, even if a valid signature is among what was read. One object that cannot be read (a
descriptor without a digest or size, one larger than :data:`MAX_OBJECT`, a missing or malformed manifest or blob, a
digest or size that does not match) is skipped with a debug line: it never refuses an image another object proves.

A run that finds every rule satisfied records the objects that satisfied them in the download cache, with the time;
a later run of the same digest within the policy's ``signature-max-age`` verifies those again and asks nothing
(:meth:`~preparer.fetch.store.signatures.SignatureRecords.recorded`); after it, the registry is asked again, so a
signature withdrawn there stops admitting the image.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from preparer import telemetry
from preparer._logger import log
from preparer.errors import FetchError, RunLimitReached
from preparer.fetch.base import FetchContext
from preparer.fetch.guard import LimitExceeded, SignatureCheck, SignatureObject, Verified, signature_tag
from preparer.fetch.oci.buildpackage import descriptor_size
from preparer.fetch.oci.client import MAX_MANIFEST
from preparer.fetch.streams import Reader, is_digest

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
#: A keyless ``.sig`` layer's material: the Fulcio certificate, its chain, and the Rekor entry with its timestamp.
KEYLESS_ANNOTATIONS = (
    "dev.sigstore.cosign/certificate",
    "dev.sigstore.cosign/chain",
    "dev.sigstore.cosign/bundle",
)
BUNDLE_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
#: Every media type producers give a Sigstore bundle referrer as its ``artifactType`` (and its layer): cosign v3's
#: ``...bundle.v0.3+json``, and the ``...bundle+json;version=0.x`` spellings GitHub's attest action and older
#: sigstore clients write for bundles v0.1 to v0.3.
BUNDLE_TYPES = frozenset({
    BUNDLE_TYPE, "application/vnd.dev.sigstore.bundle+json;version=0.3",
    "application/vnd.dev.sigstore.bundle+json;version=0.2", "application/vnd.dev.sigstore.bundle+json;version=0.1",
})  # fmt: skip
PREDICATE_ANNOTATION = "dev.sigstore.bundle.predicateType"
COSIGN_PREDICATE = "https://sigstore.dev/cosign/sign/v1"
#: At most this many signatures (layers of a ``.sig`` manifest) or referrers are looked at in one place.
MAX_OBJECTS = 1000
#: At most this many bytes are read for one signature object (a payload, a bundle).
MAX_OBJECT = 16 << 20
#: At most this many bytes are read for the signatures of one image, in all (module docstring).
MAX_TOTAL = 64 << 20
T = TypeVar("T")


class Source(Protocol):
    """Where an image's signature objects are read: its registry (or hosts.toml's hosts for it)."""

    def manifest(self, identifier: str, size: int | None = None) -> tuple[dict[str, Any], str, str]: ...

    def read_blob(
        self, digest: str, consume: Callable[[Reader], T], size: int | None = None, *, shown: bool = True
    ) -> Any:
        """The blob ``digest`` fed to ``consume``; ``shown=False``: its download is not shown as progress (a
        signature object is read about the image: it is not the buildpack being fetched)."""
        ...

    def referrers(self, digest: str, artifact_type: str) -> dict[str, Any] | None: ...


class _PastBound(Exception):
    """What the registry holds is past a bound: the image is refused."""


class _Unreadable(Exception):
    """One signature object cannot be read: it is skipped."""


@telemetry.step("cnb.signature.verify", lambda got: {"cnb.signature.count": len(got)})
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
    recorded = ctx.store.signatures.recorded(repository, shown, check.max_age)
    found = check.satisfying(recorded, digests) if recorded is not None else None
    if found is not None:
        return found
    del recorded
    kept: list[SignatureObject] = []
    objects = _objects(source, digests, _Budget())
    try:
        verified = check.verify(objects, digests, image, kept.append)
    except _PastBound as why:
        raise check.refuse(image, shown, str(why)) from None
    finally:
        objects.close()  # the judge may stop early: nothing more is asked
    ctx.store.signatures.keep(repository, shown, kept, private(), ctx.sink.staging)
    return verified


class _Budget:
    """The bytes one image's signatures may still cost (:data:`MAX_TOTAL` at first)."""

    def __init__(self) -> None:
        self.left = MAX_TOTAL

    def charge(self, count: int, what: str) -> None:
        """Count ``count`` bytes about to be read for ``what``.

        :raises _PastBound: they would go past :data:`MAX_TOTAL`.
        """
        if count > self.left:
            spent = MAX_TOTAL - self.left
            raise _PastBound(
                f"reading {what} ({count} bytes) after {spent} would go past the {MAX_TOTAL} bytes read for one "
                "image's signatures"
            )
        self.left -= count

    def refund(self, count: int) -> None:
        """Give back ``count`` bytes charged for what was not there."""
        self.left += count


def _objects(
    source: Source, digests: Sequence[str], budget: _Budget
) -> Generator[SignatureObject, None, None]:
    """Every signature object the registry holds for ``digests``, in both formats, read one at a time."""
    for digest in digests:
        yield from _cosign_objects(source, digest, budget)
        yield from _bundle_objects(source, digest, budget)


def _cosign_objects(source: Source, digest: str, budget: _Budget) -> Iterator[SignatureObject]:
    tag = signature_tag(digest)
    budget.charge(MAX_MANIFEST, f"the manifest of the tag {tag}")
    log.debug("Signatures of %s: asking for the manifest of the tag %s", digest, tag)
    try:
        manifest, kind, _ = source.manifest(tag)
    except FetchError as err:
        budget.refund(MAX_MANIFEST)
        _skippable(err)
        log.debug("No signature read from the tag %s: %s", tag, err.cause)
        return
    if kind != "manifest":
        return
    layers = manifest.get("layers")
    layers = layers if isinstance(layers, list) else []
    if len(layers) > MAX_OBJECTS:
        raise _PastBound(
            f"the tag {tag} holds {len(layers)} signatures, more than the {MAX_OBJECTS} looked at"
        )
    del manifest
    for number, layer in enumerate(layers, 1):
        if not isinstance(layer, dict) or layer.get("mediaType") != SIMPLE_SIGNING:
            continue
        annotations = layer.get("annotations")
        signature = annotations.get(SIGNATURE_ANNOTATION) if isinstance(annotations, dict) else None
        where = f"{tag} layer {number}"
        if not isinstance(signature, str) or len(signature) > MAX_OBJECT:
            log.debug(
                "Signature %s skipped: it has no signature annotation of at most %d bytes", where, MAX_OBJECT
            )
            continue
        try:
            payload = _small_blob(
                source, layer, f"the payload of signature {number} of the tag {tag}", budget
            )
        except _Unreadable as why:
            log.debug("Signature %s skipped: %s", where, why)
            continue
        # A keyless signature's material is in the manifest already read (and counted): no request more.
        keyless = tuple(
            (name, value)
            for name in KEYLESS_ANNOTATIONS
            if isinstance(value := annotations.get(name), str)  # type: ignore[union-attr]
        )
        yield SignatureObject("cosign", where, payload, signature, keyless)


def _bundle_objects(source: Source, digest: str, budget: _Budget) -> Iterator[SignatureObject]:
    budget.charge(MAX_MANIFEST, f"the list of referrers of {digest}")
    # Unfiltered: the API filters by one artifact type, and bundles come under four (BUNDLE_TYPES).
    log.debug("Signatures of %s: asking for its referrers (of every artifact type)", digest)
    index = source.referrers(digest, "")
    if index is None:
        budget.refund(MAX_MANIFEST)
        return
    listed = index.get("manifests")
    listed = listed if isinstance(listed, list) else []
    if len(listed) > MAX_OBJECTS:
        raise _PastBound(f"{digest} has {len(listed)} referrers, more than the {MAX_OBJECTS} looked at")
    del index
    for descriptor in listed:
        if not isinstance(descriptor, dict) or descriptor.get("artifactType") not in BUNDLE_TYPES:
            continue
        annotations = descriptor.get("annotations")
        predicate = annotations.get(PREDICATE_ANNOTATION) if isinstance(annotations, dict) else None
        if predicate is not None and predicate != COSIGN_PREDICATE:
            continue  # an attestation of another kind, as its index entry says: not fetched
        referrer = descriptor.get("digest")
        where = f"referrer {str(referrer)[:80]}"
        try:
            bundle = _bundle(source, descriptor, budget)
        except _Unreadable as why:
            log.debug("Signature %s of %s skipped: %s", where, digest, why)
            continue
        if bundle is not None:
            yield SignatureObject("bundle", where, bundle)


def _bundle(source: Source, descriptor: dict[str, Any], budget: _Budget) -> bytes | None:
    """The Sigstore bundle of the referrer ``descriptor`` names; ``None`` when it holds none.

    :raises _Unreadable: the referrer or its bundle cannot be read.
    """
    referrer, size = descriptor.get("digest"), descriptor_size(descriptor)
    if not is_digest(referrer):
        raise _Unreadable("its index entry has no valid sha256 digest")
    if size is None or size > MAX_MANIFEST:
        raise _Unreadable(f"its index entry gives no size of at most {MAX_MANIFEST} bytes")
    budget.charge(size, f"the manifest of referrer {referrer}")
    log.debug("Signatures: asking for the manifest of referrer %s", referrer)
    try:
        manifest, kind, _ = source.manifest(str(referrer), size)
    except FetchError as err:
        _skippable(err)
        raise _Unreadable(err.cause or str(err)) from None
    layers = manifest.get("layers")
    if kind != "manifest" or manifest.get("artifactType") not in BUNDLE_TYPES or not isinstance(layers, list):
        return None
    bundle = next((x for x in layers if isinstance(x, dict) and x.get("mediaType") in BUNDLE_TYPES), None)
    if bundle is None:
        return None
    return _small_blob(source, bundle, f"the Sigstore bundle of referrer {referrer}", budget)


def _small_blob(source: Source, descriptor: dict[str, Any], what: str, budget: _Budget) -> bytes:
    """The blob of ``descriptor``, at most :data:`MAX_OBJECT` bytes, verified against its digest and size.

    :raises _Unreadable: it cannot be read (skipped).
    :raises _PastBound: reading it would go past :data:`MAX_TOTAL`.
    """
    digest, size = descriptor.get("digest"), descriptor_size(descriptor)
    if not is_digest(digest):
        raise _Unreadable(f"{what} has no valid sha256 digest")
    if size is None or size > MAX_OBJECT:
        raise _Unreadable(f"{what} is larger than {MAX_OBJECT} bytes (or gives no size): not read")
    budget.charge(size, what)
    log.debug("Signatures: asking for blob %s, %s (%d bytes)", digest, what, size)
    try:
        _, data = source.read_blob(str(digest), lambda body: _read_up_to(body, size + 1), size, shown=False)
    except FetchError as err:
        _skippable(err)
        raise _Unreadable(f"{what}: {err.cause or err}") from None
    if not isinstance(data, bytes) or len(data) != size:
        raise _Unreadable(f"{what} is not the {size} bytes its descriptor says")
    return bytes(data)


def _skippable(err: FetchError) -> None:
    """Return when ``err`` says one object cannot be read (missing, malformed, a wrong digest or size), which is
    skipped; raise it again when it is the registry's failure or a limit (the network, a 5xx, a rate limit,
    credentials refused, the policy's limits), which fails the fetch as any other request's would."""
    refused = err.status in (401, 403)
    if err.transient or refused or isinstance(err, (LimitExceeded, RunLimitReached)):
        raise err


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
