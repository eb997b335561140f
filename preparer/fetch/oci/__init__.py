"""Buildpackages from OCI registries, ``.cnb`` files and the buildpack registry (contract §3–4)."""

from __future__ import annotations

from pathlib import Path

from preparer.errors import FetchError
from preparer.fetch import FetchContext, Fetched
from preparer.fetch.locator import ImageLocator, RegistryLocator

#: Image indexes may point at indexes; more levels than this are refused.
_MAX_INDEX_DEPTH = 4


def fetch_image(locator: ImageLocator, ctx: FetchContext) -> Fetched:
    """Stage every buildpack of the buildpackage image ``locator.reference`` (``docker://`` or a bare reference).

    An image index is resolved to ``ctx.platform``. Returns the package's buildpacks, its top-level one named
    ``top``, the normalised reference as ``source`` and the image manifest's digest.

    :raises InvalidInputsError: a malformed reference (exit 3).
    :raises FetchError: missing image, wrong credentials, corrupt or mismatching blobs, not a buildpackage (exit 1).
    """
    import json

    from preparer.fetch.oci.buildpackage import choose_platform, descriptor_size, install_buildpackage
    from preparer.fetch.oci.client import Registry, is_digest
    from preparer.fetch.oci.memory import tune_allocator
    from preparer.fetch.oci.reference import parse_reference

    ref = parse_reference(locator.reference)
    tune_allocator()
    registry = Registry(ref, ctx)
    source = str(ref)
    manifest, kind, digest = registry.manifest(ref.identifier)
    depth = 0
    while kind == "index":
        depth += 1
        if depth > _MAX_INDEX_DEPTH:
            raise FetchError(f"pull {source}", "image indexes nest too deeply")
        chosen = choose_platform(manifest, ctx.platform, source)
        if not is_digest(chosen.get("digest")):
            raise FetchError(
                f"pull {source}", f"the index entry for {ctx.platform} has no valid sha256 digest"
            )
        manifest, kind, digest = registry.manifest(str(chosen["digest"]))
    config_descriptor = manifest.get("config")
    if not isinstance(config_descriptor, dict) or not is_digest(config_descriptor.get("digest")):
        raise FetchError(f"pull {source}", "the manifest names no image config with a valid sha256 digest")
    config_blob = registry.blob(str(config_descriptor["digest"]), descriptor_size(config_descriptor))
    try:
        config = json.loads(config_blob.path.read_bytes())
    except (OSError, ValueError):
        config = None
    if not isinstance(config, dict):
        raise FetchError(f"pull {source}", "the image config is not a JSON object")
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


def fetch_registry(locator: RegistryLocator, ctx: FetchContext) -> Fetched:
    """Resolve a buildpack registry entry to its digest reference and stage that buildpackage."""
    from preparer.fetch.oci.index import resolve

    address, version = resolve(locator, ctx)
    fetched = fetch_image(ImageLocator(address), ctx)
    bp_id = f"{locator.namespace}/{locator.name}"
    if (fetched.top.id, fetched.top.version) != (bp_id, version):
        raise FetchError(
            f"fetch urn:cnb:registry:{bp_id}@{version}",
            f"the image at {address} holds {fetched.top.ref} instead",
        )
    return Fetched(fetched.top, fetched.buildpacks, f"urn:cnb:registry:{bp_id}@{version}", fetched.digest)


def fetch_cnb(path: Path, *, source: str, digest: str | None, ctx: FetchContext) -> Fetched:
    """Stage every buildpack of the ``.cnb`` file (an OCI layout tar) at ``path``."""
    from preparer.fetch.oci.layout import fetch_cnb as from_layout
    from preparer.fetch.oci.memory import tune_allocator

    tune_allocator()
    return from_layout(path, source=source, digest=digest, ctx=ctx)
