"""Buildpackage images in a registry (``docker://<ref>`` and image references)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from preparer.errors import FetchError, NotFoundError
from preparer.fetch.base import FetchContext, Fetched
from preparer.fetch.guard import Verified
from preparer.fetch.locator import ImageLocator
from preparer.fetch.oci import memory
from preparer.fetch.oci.buildpackage import (
    check_image_platform,
    descriptor_size,
    follow_index,
    install_buildpackage,
)
from preparer.fetch.oci.client import Registry
from preparer.fetch.oci.reference import Reference, parse_reference
from preparer.fetch.streams import Reader, is_digest

T = TypeVar("T")


def fetch_image(locator: ImageLocator, ctx: FetchContext) -> Fetched:
    """Stage every buildpack of the buildpackage image ``locator.reference`` (``docker://`` or a bare reference).

    An image index is resolved to ``ctx.registries.platform``. Returns the package's buildpacks, its top-level one named
    ``top``, the normalised reference as ``source`` and the image manifest's digest.

    :raises InvalidInputsError: a malformed reference, or an image the platform policy refuses (exit 3).
    :raises FetchError: missing image, wrong credentials, corrupt or mismatching blobs, not a buildpackage (exit 1).
    """
    ref = parse_reference(locator.reference)
    guard = ctx.sink.guard
    if guard is not None:  # an image found while fetching (a registry entry, a bare id) meets the rules too
        guard.image(str(ref), ref.name, ref.digest)
    memory.when_allowed()  # the command's process only

    def pull(copy: str | None, environ: Mapping[str, str]) -> Fetched:
        """From its origin (``copy`` ``None``), or from the store's copy ``copy`` with that copy's credentials
        (its signatures are still the origin's)."""
        if copy is None:
            return _pull(ref, ctx)
        copy_ctx = replace(ctx, registries=replace(ctx.registries, environ=environ))
        return _pull(parse_reference(copy), copy_ctx, signed=(ref, ctx))

    fetched, via = ctx.store.images.pull(str(ref), ref.digest, pull, ctx.sink)
    pinned = f"{ref.registry}/{ref.repository}@{fetched.digest}" if fetched.digest else None
    if via is not None and fetched.index is None:  # a tag served offline: the index its record names
        fetched = replace(fetched, index=ctx.store.images.tag_index(str(ref)))
    return (
        replace(fetched, image=pinned)
        if via is None
        else replace(fetched, source=str(ref), via=via, image=pinned)
    )


def _pull(ref: Reference, ctx: FetchContext, signed: tuple[Reference, FetchContext] | None = None) -> Fetched:
    """``signed``: the image's origin and its context, when ``ref`` is a copy: signatures are looked for there."""
    registry = _registry(ref, ctx)
    source = str(ref)
    first = registry.manifest(ref.identifier)
    platform = ctx.registries.platform
    manifest, _, digest = follow_index(
        first, registry.manifest, platform, source, platform_source=ctx.registries.platform_source
    )
    # The signatures, before any config or layer: an index's digest or the platform manifest's may be signed.
    signatures = _signatures(signed or (ref, ctx), registry if signed is None else None, (first[2], digest))
    config_descriptor = manifest.get("config")
    if not isinstance(config_descriptor, dict) or not is_digest(config_descriptor.get("digest")):
        raise FetchError(f"pull {source}", "the manifest names no image config with a valid sha256 digest")
    copy = _shared_copy(digest, ctx) if ref.digest != digest else None
    blobs_from = Registry(*copy) if copy is not None else None
    try:
        fetched = _install(manifest, config_descriptor, blobs_from or registry, source, digest, ctx)
    except FetchError as err:
        if blobs_from is None:
            raise
        ctx.store.images.unreadable(source, err.cause or "")
        return _pull(ref, ctx)
    if signatures:
        fetched = replace(fetched, signatures=signatures)
    if first[2] != digest:
        fetched = replace(fetched, index=first[2])
    if blobs_from is not None:
        return replace(fetched, via="cache repository")
    if not registry.used_credential:  # what credentials pulled is never shared
        index = first[2] if first[2] != digest else None
        ctx.store.images.keep(source, ref.digest, digest, manifest, str(config_descriptor["digest"]), index)
    return fetched


def image_blobs(locator: ImageLocator, ctx: FetchContext) -> tuple[tuple[str, int | None], ...]:
    """What pulling ``locator`` downloads, read from its manifests alone: the digest and size (``None``: its
    descriptor gives none) of the image config and of each layer of the manifest for ``ctx.registries.platform``
    (through an index). The manifests are asked for as a pull asks (mirrors, credentials); no blob is.

    :raises InvalidInputsError: a malformed reference (exit 3).
    :raises FetchError: the manifests cannot be had (exit 1).
    """
    ref = parse_reference(locator.reference)
    registry = _registry(ref, ctx)
    manifest = follow_index(
        registry.manifest(ref.identifier), registry.manifest, ctx.registries.platform, str(ref),
        platform_source=ctx.registries.platform_source,
    )[0]  # fmt: skip
    layers = manifest.get("layers")
    descriptors = [manifest.get("config"), *(layers if isinstance(layers, list) else [])]
    return tuple(
        (str(d.get("digest")), descriptor_size(d))
        for d in descriptors
        if isinstance(d, dict) and is_digest(d.get("digest"))
    )


def _signatures(
    origin: tuple[Reference, FetchContext], registry: Any, digests: tuple[str, str]
) -> tuple[Verified, ...]:
    """The signatures the platform policy requires of the image ``origin`` names, verified (none without a rule
    for it); ``registry``: where to read them, else the origin's registry."""
    ref, ctx = origin
    guard = ctx.sink.guard
    repository = f"{ref.registry}/{ref.repository}"
    check = guard.signatures(ref.name) if guard is not None else None
    if check is None:
        return ()
    from preparer.fetch.oci.signatures import (
        verify_signatures,  # deferred: only policies with signature rules
    )

    source = registry if registry is not None else _registry(ref, ctx)
    accepted = tuple(dict.fromkeys(digests))
    return verify_signatures(
        check, source, repository, str(ref), accepted, ctx, lambda: bool(source.used_credential)
    )


def _registry(ref: Reference, ctx: FetchContext) -> Any:
    """Where to ask for ``ref``: hosts.toml's hosts for its registry when there are any, else the registry."""
    return _Hosts(ref, ctx) if ctx.registries.hosts else Registry(ref, ctx)


class _Hosts:
    """The hosts to ask for one image, in order: hosts.toml's mirrors (each for what its capabilities allow: a tag
    is resolved only by ``resolve`` hosts), then the registry (or its ``server``). A mirror that fails is one
    warning and is not asked again in the run; what any host serves is verified alike."""

    def __init__(self, ref: Reference, ctx: FetchContext) -> None:
        self.ref, self.ctx = ref, ctx
        mirrors, upstream = ctx.registries.routes(ref.registry)
        self.mirrors = [Registry(ref, ctx, host) for host in mirrors]
        self.origin = Registry(ref, ctx, upstream)

    @property
    def used_credential(self) -> bool:
        return any(r.used_credential for r in (*self.mirrors, self.origin))

    def _ask(self, capability: str, call: Callable[[Registry], T]) -> T:
        for mirror in self.mirrors:
            assert mirror.endpoint is not None
            url = mirror.endpoint.url
            if capability not in mirror.endpoint.capabilities or url in self.ctx.registries.down:
                continue
            try:
                return call(mirror)
            except NotFoundError:
                continue  # not there (a mirror seeded with only some images): the next host
            except FetchError as err:
                self.ctx.registries.down.add(url)
                self.ctx.sink.warn(f"the mirror {url} is not used: {err.cause}; the next host is asked")
        return call(self.origin)

    def manifest(self, identifier: str, size: int | None = None) -> tuple[dict[str, Any], str, str]:
        capability = "pull" if identifier.startswith("sha256:") else "resolve"
        return self._ask(capability, lambda r: r.manifest(identifier, size))

    def document(self, digest: str, size: int | None, what: str) -> dict[str, Any]:
        return self._ask("pull", lambda r: r.document(digest, size, what))

    def read_blob(
        self, digest: str, consume: Callable[[Reader], T], size: int | None = None, *, shown: bool = True
    ) -> tuple[Path, T]:
        return self._ask("pull", lambda r: r.read_blob(digest, consume, size, shown=shown))

    def referrers(self, digest: str, artifact_type: str) -> dict[str, Any] | None:
        return self._ask("pull", lambda r: r.referrers(digest, artifact_type))


def _shared_copy(digest: str, ctx: FetchContext) -> tuple[Reference, FetchContext] | None:
    """Where the store shares the image ``digest`` (its reference there, and the context with the credentials to
    read it), when it does."""
    copy = ctx.store.images.copy(digest)
    if copy is None:
        return None
    reference, environ = copy
    return parse_reference(reference), replace(ctx, registries=replace(ctx.registries, environ=environ))


def _install(
    manifest: dict[str, Any], config_descriptor: dict[str, Any], registry: Any, source: str, digest: str,
    ctx: FetchContext,
) -> Fetched:  # fmt: skip
    config = registry.document(
        str(config_descriptor["digest"]), descriptor_size(config_descriptor), "image config"
    )
    check_image_platform(config, ctx.registries, source, ctx.sink.warn)  # before any layer
    layers = manifest.get("layers")
    sizes = {
        str(layer.get("digest")): descriptor_size(layer)
        for layer in (layers if isinstance(layers, list) else [])
        if isinstance(layer, dict)
    }
    return install_buildpackage(
        manifest,
        config,
        lambda d, extract: registry.read_blob(d, extract, sizes.get(d))[1],
        source=source,
        digest=digest,
        ctx=ctx,
    )
