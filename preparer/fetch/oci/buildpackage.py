"""Buildpackages: OCI images whose layers each hold one buildpack (spec distribution.md).

The config's labels say what is inside: ``io.buildpacks.buildpack.layers`` maps id → version → ``layerDiffID``,
and ``io.buildpacks.buildpackage.metadata`` names the top-level buildpack. A diff ID's index in
``config.rootfs.diff_ids`` is the index of its layer in the manifest; only the layers needed are fetched, and from
each only ``cnb/buildpacks/<escaped id>/<version>/`` is extracted.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from preparer import interrupt
from preparer._jsondoc import DocumentRefused, loads
from preparer.errors import FetchError, TargetRefused, with_fields
from preparer.fetch.base import FetchContext, Fetched
from preparer.fetch.extract import extract_tar
from preparer.fetch.registries import Registries
from preparer.fetch.streams import Reader, is_digest
from preparer.fetch.tree import StagedBuildpack, check_links_inside
from preparer.files.buildpack import (
    BuildpackTarget,
    check_id,
    escape_id,
    read_buildpack_toml,
    version_problem,
)
from preparer.target import Target, matches_platform

LAYERS_LABEL = "io.buildpacks.buildpack.layers"
METADATA_LABEL = "io.buildpacks.buildpackage.metadata"
_PARALLEL_LAYERS = 4
#: Image indexes may point at indexes; more levels than this are refused.
MAX_INDEX_DEPTH = 4

#: An image document as read: ``(document, "manifest" | "index", digest)``.
Document = tuple[dict[str, Any], str, str]
#: An extracted layer: the directory its ``cnb/buildpacks`` went to, and its symbolic links (name -> target).
LayerTree = tuple[Path, dict[str, str]]
#: ``read_layer(digest, extract)``: feeds the layer blob to ``extract`` and returns what it made.
ReadLayer = Callable[[str, Callable[[Reader], LayerTree]], LayerTree]


def follow_index(
    first: Document,
    read: Callable[[str], Document],
    platform: str,
    source: str,
    verb: str = "pull",
    platform_source: str = "",
) -> Document:
    """From an image document to the manifest for ``platform``, through an index and the indexes it names (at most
    :data:`MAX_INDEX_DEPTH`); ``read`` fetches a document by digest (from a registry, or from a ``.cnb``).

    :param platform_source: the setting that gave ``platform``, named when the index has no image for it.

    :raises FetchError: no image for ``platform``, an entry without a valid digest, or indexes nested too deeply.
    """
    action = f"{verb} {source}"
    document, kind, digest = first
    for _ in range(MAX_INDEX_DEPTH):
        if kind != "index":
            return document, kind, digest
        chosen = choose_platform(document, platform, source, verb, platform_source)
        if not is_digest(chosen.get("digest")):
            raise FetchError(action, f"the index entry for {platform} has no valid sha256 digest")
        document, kind, digest = read(str(chosen["digest"]))
    if kind != "index":
        return document, kind, digest
    raise FetchError(action, "image indexes nest too deeply")


def choose_platform(
    index: dict[str, Any], platform: str, source: str, verb: str = "pull", platform_source: str = ""
) -> dict[str, Any]:
    """The descriptor in an image index for ``platform`` (``os/arch[/variant]``): the first whose platform names it
    as :func:`preparer.target.matches_platform` compares (``arm64`` is ``arm64/v8``, ``arm`` is ``arm/v7``, an
    entry without a variant is for any).

    :raises FetchError: when the index has no manifest for it (the message lists what it has, variants included).
    """
    want_os, _, rest = platform.partition("/")
    want_arch, _, want_variant = rest.partition("/")
    target = Target(want_os, want_arch, want_variant)
    manifests = [m for m in _list(index.get("manifests")) if isinstance(m, dict)]
    offered = []
    for descriptor in manifests:
        plat = descriptor.get("platform")
        values = [
            plat.get(key) if isinstance(plat, dict) else None for key in ("os", "architecture", "variant")
        ]
        os_, arch, variant = (v if isinstance(v, str) else "" for v in values)
        offered.append("/".join((os_ or "?", arch or "?", *([variant] if variant else []))))
        if os_ and arch and matches_platform(BuildpackTarget(os_, arch, variant), target):
            return descriptor
    if manifests and not any(m.get("platform") for m in manifests):
        return manifests[0]  # a layout without platforms (pack writes one image): the first is the image
    shown = f"{platform} ({platform_source})" if platform_source else platform
    raise FetchError(
        f"{verb} {source}", f"no image for {shown} in the index (it has: {', '.join(offered) or 'none'})"
    )


def check_image_platform(
    config: dict[str, Any],
    registries: Registries,
    source: str,
    warn: Callable[[str], None],
    verb: str = "pull",
) -> None:
    """An image's config names the platform its files are for (``os``, ``architecture``, ``variant``; OCI image
    spec §Properties): one for another platform than the build's is refused here, before any layer is read. Names
    are compared as :func:`preparer.target.matches_platform` compares them (``arm64`` is ``arm64/v8``); a field
    the config leaves out matches anything.

    :param warn: told the finding instead when ``registries.platform_enforced`` is false (Platform API below 0.12).
    :raises TargetRefused: the image is for another platform (exit 1).
    """
    values = [config.get(key) for key in ("os", "architecture", "variant")]
    os_, arch, variant = (v.lower() if isinstance(v, str) else "" for v in values)
    want_os, _, rest = registries.platform.partition("/")
    want_arch, _, want_variant = rest.partition("/")
    if matches_platform(BuildpackTarget(os_, arch, variant), Target(want_os, want_arch, want_variant)):
        return
    image = BuildpackTarget(os_, arch, variant).shown
    build = registries.platform + (f" ({registries.platform_source})" if registries.platform_source else "")
    why = f"the image is for {image}; this build is {build}"
    if not registries.platform_enforced:
        warn(f"{source}: {why} (the detector of Platform API below 0.12 does not check targets)")
        return
    raise with_fields(
        TargetRefused(f"{verb} {source}", why),
        buildpack=_top_ref(config),
        target=registries.platform,
        source=registries.platform_source or None,
    )


def _top_ref(config: dict[str, Any]) -> str | None:
    """``id@version`` of the top-level buildpack the metadata label names, when it names one."""
    image_config = config.get("config")
    labels = image_config.get("Labels") if isinstance(image_config, dict) else None
    try:
        metadata = loads(labels[METADATA_LABEL]) if isinstance(labels, dict) else None
    except (KeyError, TypeError, ValueError):
        return None
    if not isinstance(metadata, dict):
        return None
    bp_id, version = metadata.get("id"), metadata.get("version")
    return f"{bp_id}@{version}" if isinstance(bp_id, str) and isinstance(version, str) else None


def _list(value: Any) -> list[Any]:
    """``value`` when it is a JSON array, else nothing (documents from a registry are not trusted)."""
    return value if isinstance(value, list) else []


def descriptor_size(descriptor: dict[str, Any]) -> int | None:
    """The ``size`` of an OCI descriptor, when it is a proper one (a non-negative integer, an int64 as the image spec
    says)."""
    size = descriptor.get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) and 0 <= size < 1 << 63 else None


def _label(labels: dict[str, Any], name: str, source: str) -> dict[str, Any]:
    if name not in labels:
        raise FetchError(f"read buildpackage {source}", f"not a buildpackage: it has no label '{name}'")
    try:
        value = loads(labels[name])  # bounded in what it builds: a label is a string of any shape
    except DocumentRefused as err:
        raise FetchError(f"read buildpackage {source}", f"label '{name}' is not read: {err}") from None
    except (TypeError, ValueError):
        raise FetchError(f"read buildpackage {source}", f"label '{name}' is not JSON") from None
    if not isinstance(value, dict):
        raise FetchError(f"read buildpackage {source}", f"label '{name}' is not a JSON object")
    return value


def _wanted(
    layers_label: dict[str, Any], diff_ids: list[Any], layers: list[Any], source: str
) -> list[tuple[str, str, str]]:
    """``(id, version, layer digest)`` of every buildpack the layers label lists, in the label's order."""
    action = f"read buildpackage {source}"
    wanted: list[tuple[str, str, str]] = []
    # Each diff ID's first place, found once: linear in the label and the config.
    position: dict[object, int] = {}
    for number, named in enumerate(diff_ids):
        if isinstance(named, str):
            position.setdefault(named, number)
    for bp_id, versions in layers_label.items():
        if not check_id(bp_id) or not isinstance(versions, dict):
            raise FetchError(action, f"label '{LAYERS_LABEL}' has a malformed entry for '{bp_id[:100]}'")
        for version, info in versions.items():
            diff_id = info.get("layerDiffID") if isinstance(info, dict) else None
            if version_problem(version) or "\\" in version or not isinstance(diff_id, str):
                raise FetchError(
                    action, f"label '{LAYERS_LABEL}' has a malformed entry for {bp_id}@{version[:100]}"
                )
            if position.get(diff_id, len(layers)) >= len(layers):
                raise FetchError(action, f"the layer of {bp_id}@{version} ({diff_id}) is not in the image")
            layer = layers[position[diff_id]]
            layer_digest = layer.get("digest") if isinstance(layer, dict) else None
            if not is_digest(layer_digest):
                raise FetchError(action, f"the layer of {bp_id}@{version} has no valid sha256 digest")
            wanted.append((bp_id, version, str(layer_digest)))
    if not wanted:
        raise FetchError(action, "it holds no buildpacks")
    return wanted


def install_buildpackage(
    manifest: dict[str, Any],
    config: dict[str, Any],
    read_layer: ReadLayer,
    *,
    source: str,
    digest: str | None,
    ctx: FetchContext,
) -> Fetched:
    """Extract every buildpack of the package into staging.

    Each layer that holds a wanted buildpack is read once (a flattened package keeps several in one layer), a few
    at a time, and only its ``cnb/buildpacks/`` subtree is extracted.

    :param read_layer: ``read_layer(digest, extract)`` feeds the layer blob to ``extract`` (as it downloads, or
        from the cache) and raises when the blob's digest is wrong; it returns what ``extract`` returned.
    :raises FetchError: missing or malformed labels, layers that do not match them, unsafe layers (exit 1).
    """
    wanted, metadata = _contents(manifest, config, source)
    roots = _extract_layers(wanted, read_layer, source, ctx)
    staged = [_staged(*roots[layer], bp_id, version, source) for bp_id, version, layer in wanted]
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


def _contents(
    manifest: dict[str, Any], config: dict[str, Any], source: str
) -> tuple[list[tuple[str, str, str]], dict[str, Any]]:
    """What the labels say the package holds: ``(id, version, layer digest)`` of each buildpack, and the metadata
    label (which names the top-level buildpack)."""
    image_config = config.get("config")
    labels = image_config.get("Labels") if isinstance(image_config, dict) else None
    labels = labels if isinstance(labels, dict) else {}
    layers_label = _label(labels, LAYERS_LABEL, source)
    metadata = _label(labels, METADATA_LABEL, source)
    rootfs = config.get("rootfs")
    diff_ids = _list(rootfs.get("diff_ids")) if isinstance(rootfs, dict) else []
    layers = _list(manifest.get("layers"))  # positions matter: the n-th diff ID is the n-th layer
    return _wanted(layers_label, diff_ids, layers, source), metadata


def _extract_layers(
    wanted: list[tuple[str, str, str]],
    read_layer: ReadLayer,
    source: str,
    ctx: FetchContext,
) -> dict[str, LayerTree]:
    """Extract each layer that holds a wanted buildpack once, a few at a time: layer digest -> its root."""
    holders: dict[str, list[str]] = {}  # layer digest -> the buildpacks it holds
    for bp_id, version, layer in wanted:
        holders.setdefault(layer, []).append(f"{bp_id}@{version}")

    def stage(layer: str) -> LayerTree:
        archive = f"{source} (layer of {', '.join(holders[layer])})"

        def extract(body: Reader) -> LayerTree:
            root = Path(tempfile.mkdtemp(prefix="layer-", dir=ctx.sink.staging))
            extracted = extract_tar(
                body,
                root,
                archive=archive,
                select="cnb/buildpacks",
                allow_absolute=True,
                guard=ctx.sink.guard,
            )
            return root, extracted.links

        return read_layer(layer, extract)

    # Layers are extracted while they download, a few at a time.
    with ThreadPoolExecutor(
        max_workers=min(_PARALLEL_LAYERS, len(holders)), thread_name_prefix="layer"
    ) as pool:
        staged = [pool.submit(interrupt.in_context(functools.partial(stage, holder))) for holder in holders]
        return dict(zip(holders, (future.result() for future in staged), strict=True))


def _staged(root: Path, links: dict[str, str], bp_id: str, version: str, source: str) -> StagedBuildpack:
    """The buildpack's directory in an extracted layer: ``<escaped id>/<version>`` as pack writes it, else the
    raw id as the spec's text has it. Its links must stay inside it, not only inside the layer: it is installed
    alone, at ``<buildpacks>/<escaped id>/<version>``."""
    for relative in (f"{escape_id(bp_id)}/{version}", f"{bp_id}/{version}"):
        directory = root / relative
        if (directory / "buildpack.toml").is_file() and not directory.is_symlink():
            check_links_inside(directory, relative, links, f"read buildpackage {source}")
            directory.chmod(0o755)
            descriptor = read_buildpack_toml(directory / "buildpack.toml", shown=source)
            if (descriptor.id, descriptor.version) != (bp_id, version):
                raise FetchError(
                    f"read buildpackage {source}",
                    f"the layer labelled {bp_id}@{version} holds {descriptor.ref}",
                )
            return StagedBuildpack(descriptor, directory)
    raise FetchError(
        f"read buildpackage {source}", f"the layer of {bp_id}@{version} has no buildpack.toml for it"
    )
