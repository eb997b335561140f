"""Buildpackages: OCI images whose layers each hold one buildpack (spec distribution.md).

The config's labels say what is inside: ``io.buildpacks.buildpack.layers`` maps id → version → ``layerDiffID``,
and ``io.buildpacks.buildpackage.metadata`` names the top-level buildpack. A diff ID's index in
``config.rootfs.diff_ids`` is the index of its layer in the manifest; only the layers needed are fetched, and from
each only ``cnb/buildpacks/<escaped id>/<version>/`` is extracted.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from preparer.errors import FetchError
from preparer.fetch import FetchContext, Fetched, StagedBuildpack
from preparer.fetch.archive import extract_tar
from preparer.files.buildpack import escape_id, read_buildpack_toml

LAYERS_LABEL = "io.buildpacks.buildpack.layers"
METADATA_LABEL = "io.buildpacks.buildpackage.metadata"
_PARALLEL_LAYERS = 4


def choose_platform(index: dict[str, Any], platform: str, source: str) -> dict[str, Any]:
    """The descriptor in an image index for ``platform`` (``os/arch[/variant]``).

    :raises FetchError: when the index has no manifest for it (the message lists what it has).
    """
    want_os, _, rest = platform.partition("/")
    want_arch, _, want_variant = rest.partition("/")
    manifests = [m for m in index.get("manifests", []) if isinstance(m, dict)]
    offered = []
    for descriptor in manifests:
        plat = descriptor.get("platform") or {}
        offered.append(f"{plat.get('os', '?')}/{plat.get('architecture', '?')}")
        same = plat.get("os") == want_os and plat.get("architecture") == want_arch
        if same and (not want_variant or plat.get("variant") in (None, "", want_variant)):
            return descriptor
    if manifests and not any(m.get("platform") for m in manifests):
        return manifests[0]  # a layout without platforms (pack writes one image): the first is the image
    raise FetchError(
        f"pull {source}", f"no image for {platform} in the index (it has: {', '.join(offered) or 'none'})"
    )


def _label(labels: dict[str, Any], name: str, source: str) -> Any:
    if name not in labels:
        raise FetchError(f"read buildpackage {source}", f"not a buildpackage: it has no label '{name}'")
    try:
        return json.loads(labels[name])
    except (TypeError, ValueError):
        raise FetchError(f"read buildpackage {source}", f"label '{name}' is not JSON") from None


def install_buildpackage(
    manifest: dict[str, Any],
    config: dict[str, Any],
    read_layer: Callable[[str, Callable[[IO[bytes]], Path]], Path],
    *,
    source: str,
    digest: str | None,
    ctx: FetchContext,
) -> Fetched:
    """Extract every buildpack of the package into staging.

    :param read_layer: ``read_layer(digest, extract)`` feeds the layer blob to ``extract`` (as it downloads, or
        from the cache) and raises when the blob's digest is wrong; it returns what ``extract`` returned.
    :raises FetchError: missing or malformed labels, layers that do not match them, unsafe layers (exit 1).
    """
    labels = (config.get("config") or {}).get("Labels") or {}
    layers_label = _label(labels, LAYERS_LABEL, source)
    metadata = _label(labels, METADATA_LABEL, source)
    diff_ids = list((config.get("rootfs") or {}).get("diff_ids") or [])
    layers = [layer for layer in manifest.get("layers") or [] if isinstance(layer, dict)]
    if not isinstance(layers_label, dict) or not isinstance(metadata, dict):
        raise FetchError(f"read buildpackage {source}", "its labels are not JSON objects")

    wanted: list[tuple[str, str, str]] = []  # (id, version, layer digest)
    for bp_id, versions in layers_label.items():
        for version, info in (versions or {}).items():
            diff_id = info.get("layerDiffID") if isinstance(info, dict) else None
            if diff_id not in diff_ids or diff_ids.index(diff_id) >= len(layers):
                raise FetchError(
                    f"read buildpackage {source}",
                    f"the layer of {bp_id}@{version} ({diff_id}) is not in the image",
                )
            wanted.append((bp_id, version, str(layers[diff_ids.index(diff_id)].get("digest"))))
    if not wanted:
        raise FetchError(f"read buildpackage {source}", "it holds no buildpacks")

    # Layers are extracted while they download, a few at a time.
    def stage(item: tuple[str, str, str]) -> StagedBuildpack:
        return _extract(*item, read_layer, source, ctx)

    with ThreadPoolExecutor(
        max_workers=min(_PARALLEL_LAYERS, len(wanted)), thread_name_prefix="layer"
    ) as pool:
        staged = list(pool.map(stage, wanted))
    top_id, top_version = metadata.get("id"), metadata.get("version")
    top = next(
        (s.descriptor for s in staged if (s.descriptor.id, s.descriptor.version) == (top_id, top_version)),
        None,
    )
    if top is None:
        raise FetchError(
            f"read buildpackage {source}",
            f"its top-level buildpack {top_id}@{top_version} is not among its layers",
        )
    ordered = sorted(staged, key=lambda s: s.descriptor != top)
    return Fetched(top, tuple(ordered), source, digest)


def _extract(
    bp_id: str,
    version: str,
    layer: str,
    read_layer: Callable[[str, Callable[[IO[bytes]], Path]], Path],
    source: str,
    ctx: FetchContext,
) -> StagedBuildpack:
    """Extract one buildpack's directory from its layer (pack writes the escaped id; the spec text the raw one)."""
    archive = f"{source} (layer of {bp_id}@{version})"
    for prefix in (f"cnb/buildpacks/{escape_id(bp_id)}/{version}", f"cnb/buildpacks/{bp_id}/{version}"):

        def extract(body: IO[bytes], select: str = prefix) -> Path:
            root = Path(tempfile.mkdtemp(prefix="layer-", dir=ctx.staging))
            root.chmod(0o755)
            extract_tar(body, root, archive=archive, select=select, allow_absolute=True)
            return root

        root = read_layer(layer, extract)
        if (root / "buildpack.toml").is_file():
            descriptor = read_buildpack_toml(root / "buildpack.toml")
            if (descriptor.id, descriptor.version) != (bp_id, version):
                raise FetchError(
                    f"read buildpackage {source}",
                    f"the layer labelled {bp_id}@{version} holds {descriptor.ref}",
                )
            return StagedBuildpack(descriptor, root)
    raise FetchError(
        f"read buildpackage {source}", f"the layer of {bp_id}@{version} has no buildpack.toml for it"
    )
