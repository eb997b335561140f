"""Buildpackages from OCI registries, ``.cnb`` files and the buildpack registry (contract §3–4)."""

from __future__ import annotations

from pathlib import Path

from preparer.errors import FetchError
from preparer.fetch import FetchContext, Fetched
from preparer.fetch.locator import ImageLocator, RegistryLocator


def fetch_image(locator: ImageLocator, ctx: FetchContext) -> Fetched:
    """Stage every buildpack of the buildpackage image ``locator.reference`` (``docker://`` or a bare reference)."""
    from preparer.fetch.oci.buildpackage import choose_platform, install_buildpackage
    from preparer.fetch.oci.client import INDEXES, Registry
    from preparer.fetch.oci.reference import parse_reference

    ref = parse_reference(locator.reference)
    registry = Registry(ref, ctx)
    source = str(ref)
    manifest, media_type, digest = registry.manifest(ref.identifier)
    if media_type in INDEXES or "manifests" in manifest:
        chosen = choose_platform(manifest, ctx.platform, source)
        manifest, media_type, digest = registry.manifest(str(chosen.get("digest")))
    config_digest = str((manifest.get("config") or {}).get("digest"))
    import json

    try:
        config = json.loads(registry.blob(config_digest).path.read_bytes())
    except ValueError:
        raise FetchError(f"pull {source}", "the image config is not JSON") from None
    return install_buildpackage(
        manifest,
        config,
        lambda d, extract: registry.read_blob(d, extract)[1],
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

    return from_layout(path, source=source, digest=digest, ctx=ctx)
