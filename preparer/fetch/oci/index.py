"""The buildpack registry: ``urn:cnb:registry:<ns>/<name>[@<version>]`` entries, and bare ids that are not installed.

The registry is an index of files (spec extensions/buildpack-registry.md); each entry names a buildpackage image by
digest, which :func:`~preparer.fetch.oci.image.fetch_image` then stages.

The index file of ``<ns>/<name>`` is at ``<name[0:2]>/<name[2:4]>/<ns>_<name>`` (names of one to three characters
live under ``1``, ``2`` and ``3/<name[0:2]>``), one minified JSON object per line:
``{"ns", "name", "version", "yanked", "addr"}``, where ``addr`` is a digest reference.
"""

from __future__ import annotations

from dataclasses import replace

from preparer import telemetry
from preparer._jsondoc import loads
from preparer._logger import log
from preparer.errors import FetchError, NotFoundError
from preparer.fetch.base import FetchContext, Fetched
from preparer.fetch.locator import IdLocator, ImageLocator, RegistryLocator, redact
from preparer.fetch.oci.image import fetch_image
from preparer.fetch.oci.reference import parse_reference
from preparer.fetch.transport import read_capped
from preparer.files.buildpack import installed_versions, similar_installed
from preparer.semver import highest

#: The largest index file read: one line per version of one buildpack (the largest today are a few KiB).
MAX_INDEX_FILE = 4 << 20
#: Elements one line of it may hold: an entry has six keys (a line of ``{},{},...`` is refused unparsed).
MAX_ENTRY_ITEMS = 1_000


def index_path(namespace: str, name: str) -> str:
    """Where the index keeps ``<namespace>/<name>``."""
    if len(name) <= 2:
        directory = str(len(name))
    elif len(name) == 3:
        directory = f"3/{name[:2]}"
    else:
        directory = f"{name[:2]}/{name[2:4]}"
    return f"{directory}/{namespace}_{name}"


def read_entries(namespace: str, name: str, ctx: FetchContext) -> dict[str, str] | None:
    """The versions of ``<namespace>/<name>`` that are not yanked, with their image addresses; ``None`` when the
    index has no such buildpack (no index file for it).

    :raises FetchError: the index cannot be read, or its file is malformed (exit 1).
    """
    bp_id = f"{namespace}/{name}"
    url = f"{ctx.registries.index.rstrip('/')}/{index_path(namespace, name)}"
    action = f"look up {bp_id} in the buildpack registry {redact(ctx.registries.index)}"

    try:
        text = _index_file(url, action, ctx).decode("utf-8", "replace")
    except NotFoundError:
        return None
    except FetchError as err:
        raise FetchError(action, err.cause or "failed") from None
    live: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = loads(line, MAX_ENTRY_ITEMS)  # a line is one small entry, whatever the file holds
            version, yanked, addr = (
                str(entry["version"]),
                bool(entry.get("yanked", False)),
                str(entry["addr"]),
            )
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
            raise FetchError(action, f"line {number} of the index file is not an entry") from None
        if not yanked:
            live[version] = addr
    return live


def _index_file(url: str, action: str, ctx: FetchContext) -> bytes:
    """The index file at ``url``, as the store has it (:meth:`~preparer.fetch.store.files.SmallFiles.read`), read
    from the index when it must be."""

    def attempt() -> bytes:
        response = ctx.transport.get(url, action=action)
        return read_capped(
            response, MAX_INDEX_FILE, action, "the index file", ctx.transport.download_deadline()
        )

    return ctx.store.files.read(
        url, MAX_INDEX_FILE, action, lambda: ctx.transport.retrying(action, attempt), ctx.sink
    )


def choose(bp_id: str, live: dict[str, str], version: str | None, index: str) -> tuple[str, str]:
    """The image address and version of the entry: the version asked for, else the highest not yanked.

    :raises FetchError: no such version, or an address that is not a digest reference (exit 1).
    """
    action = f"look up {bp_id} in the buildpack registry {redact(index)}"
    if version is not None:
        if version not in live:
            raise FetchError(action, f"version {version} of {bp_id} is not in the registry (or was yanked)")
    else:
        best = highest(live)
        if best is None:
            raise FetchError(action, f"{bp_id} has no version that is not yanked")
        version = best
    address = live[version]
    if "@sha256:" not in address:
        raise FetchError(
            action, f"the registry lists {address} for {bp_id}@{version}, which is not a digest reference"
        )
    return address, version


@telemetry.step("cnb.buildpack.resolve")
def resolve(namespace: str, name: str, version: str | None, ctx: FetchContext) -> tuple[str, str]:
    """The image address and version of ``urn:cnb:registry:<namespace>/<name>[@<version>]``.

    :raises FetchError: the index cannot be read, or has no such buildpack or version (exit 1).
    """
    bp_id = f"{namespace}/{name}"
    live = read_entries(namespace, name, ctx)
    if live is None:
        raise NotFoundError(
            f"look up {bp_id} in the buildpack registry {redact(ctx.registries.index)}",
            f"no buildpack {bp_id} in the registry",
        )
    return choose(bp_id, live, version, ctx.registries.index)


def fetch_registry(locator: RegistryLocator, ctx: FetchContext) -> Fetched:
    """Resolve a buildpack registry entry to its digest reference and stage that buildpackage."""
    address, version = resolve(locator.namespace, locator.name, locator.version, ctx)
    return _from_registry(f"{locator.namespace}/{locator.name}", version, address, ctx)


def _from_registry(bp_id: str, version: str, address: str, ctx: FetchContext) -> Fetched:
    fetched = fetch_image(ImageLocator(address), ctx)
    if (fetched.top.id, fetched.top.version) != (bp_id, version):
        raise FetchError(
            f"fetch urn:cnb:registry:{bp_id}@{version}",
            f"the image at {address} holds {fetched.top.ref} instead",
        )
    return replace(fetched, source=f"urn:cnb:registry:{bp_id}@{version}", via=None)


def fetch_id(locator: IdLocator, ctx: FetchContext) -> Fetched:
    """A bare buildpack id that is not installed: the buildpack registry's entry, else, when the registry has no
    such id and no version is asked for, the image reference of the same name (docs/decisions.md, "Resolving uri").

    :raises FetchError: naming the three places searched when the buildpack is in none of them (exit 1).
    """
    index = redact(ctx.registries.index)
    buildpacks_dir = ctx.buildpacks_dir or "<buildpacks>"
    wanted = locator.id if locator.version is None else f"{locator.id}@{locator.version}"
    # The versions installed, when the one asked for is not among them: named as the ``id`` + ``version`` form does.
    installed = installed_versions(ctx.buildpacks_dir, locator.id) if ctx.buildpacks_dir is not None else []
    found = f" (found: {', '.join(installed)})" if installed and locator.version is not None else ""
    try:
        live = read_entries(locator.namespace, locator.name, ctx)
    except FetchError as err:
        if not found:
            raise
        raise FetchError(
            f"find buildpack {wanted}", f"not in {buildpacks_dir}{found}; {err.message}"
        ) from None
    if live is not None:
        try:
            address, version = choose(locator.id, live, locator.version, ctx.registries.index)
        except FetchError as err:
            if not found:
                raise
            raise FetchError(err.action, f"not in {buildpacks_dir}{found}; {err.cause}") from None
        log.debug(
            "%s is not in %s; the buildpack registry %s has it: %s", wanted, buildpacks_dir, index, address
        )
        fetched = _from_registry(locator.id, version, address, ctx)
        return replace(fetched, source=locator.id if locator.version is None else wanted,
                                   resolved="registry")  # fmt: skip
    meant = None
    if ctx.buildpacks_dir is not None and not installed:
        meant = similar_installed(ctx.buildpacks_dir, locator.id)
    hint = f" (did you mean {meant}?)" if meant else found
    searched = f"not in {buildpacks_dir}{hint}, not in the buildpack registry {index}"
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
    return replace(fetched, source=locator.id, resolved="image")


def _normalised(reference: str) -> str:
    return str(parse_reference(reference))
