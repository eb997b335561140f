"""Buildpackages from OCI registries, ``.cnb`` files and the buildpack registry (contract §3–4)."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

from preparer.errors import FetchError, NotFoundError
from preparer.fetch import FetchContext, Fetched
from preparer.fetch.locator import IdLocator, ImageLocator, RegistryLocator, redact

log = logging.getLogger("preparer")

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

    address, version = resolve(locator.namespace, locator.name, locator.version, ctx)
    return _from_registry(f"{locator.namespace}/{locator.name}", version, address, ctx)


def _from_registry(bp_id: str, version: str, address: str, ctx: FetchContext) -> Fetched:
    fetched = fetch_image(ImageLocator(address), ctx)
    if (fetched.top.id, fetched.top.version) != (bp_id, version):
        raise FetchError(
            f"fetch urn:cnb:registry:{bp_id}@{version}",
            f"the image at {address} holds {fetched.top.ref} instead",
        )
    return Fetched(fetched.top, fetched.buildpacks, f"urn:cnb:registry:{bp_id}@{version}", fetched.digest)


def fetch_id(locator: IdLocator, ctx: FetchContext) -> Fetched:
    """A bare buildpack id that is not installed (contract §7.11b): the buildpack registry's entry, else, when the
    registry has no such id and no version is asked for, the image reference of the same name.

    :raises FetchError: naming the three places searched when the buildpack is in none of them (exit 1).
    """
    from preparer.fetch.oci.index import choose, read_entries

    index = redact(ctx.registry_index)
    buildpacks_dir = ctx.buildpacks_dir or "<buildpacks>"
    wanted = locator.id if locator.version is None else f"{locator.id}@{locator.version}"
    live = read_entries(locator.namespace, locator.name, ctx)
    if live is not None:
        address, version = choose(locator.id, live, locator.version, ctx.registry_index)
        log.debug(
            "%s is not in %s; the buildpack registry %s has it: %s", wanted, buildpacks_dir, index, address
        )
        fetched = _from_registry(locator.id, version, address, ctx)
        return dataclasses.replace(fetched, source=locator.id if locator.version is None else wanted,
                                   resolved="registry")  # fmt: skip
    searched = f"not in {buildpacks_dir}, not in the buildpack registry {index}"
    action = f"find buildpack {wanted}"
    if locator.version is not None:
        raise NotFoundError(action, f"{searched}, and an image reference cannot name a version with '@'")
    log.debug("%s is %s; trying it as an image reference", wanted, searched)
    try:
        fetched = fetch_image(ImageLocator(locator.id), ctx)
    except NotFoundError:
        raise NotFoundError(action, f"{searched}, and there is no image {_normalised(locator.id)}") from None
    except FetchError as err:
        raise FetchError(action, f"{searched}, and pulling it as an image failed: {err.message}") from None
    return dataclasses.replace(fetched, source=locator.id, resolved="image")


def _normalised(reference: str) -> str:
    from preparer.fetch.oci.reference import parse_reference

    return str(parse_reference(reference))


def fetch_cnb(path: Path, *, source: str, digest: str | None, ctx: FetchContext) -> Fetched:
    """Stage every buildpack of the ``.cnb`` file (an OCI layout tar) at ``path``."""
    from preparer.fetch.oci.layout import fetch_cnb as from_layout
    from preparer.fetch.oci.memory import tune_allocator

    tune_allocator()
    return from_layout(path, source=source, digest=digest, ctx=ctx)
