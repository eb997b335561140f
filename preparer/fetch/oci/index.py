"""``urn:cnb:registry:<ns>/<name>[@<version>]``: a buildpack registry index entry (spec extensions/buildpack-registry.md).

The index file of ``<ns>/<name>`` is at ``<name[0:2]>/<name[2:4]>/<ns>_<name>`` (names of one to three characters
live under ``1``, ``2`` and ``3/<name[0:2]>``), one minified JSON object per line:
``{"ns", "name", "version", "yanked", "addr"}``, where ``addr`` is a digest reference.
"""

from __future__ import annotations

import json

from preparer.errors import FetchError, NotFoundError
from preparer.fetch import FetchContext
from preparer.fetch.http import NetworkError, _attempts, get
from preparer.fetch.locator import redact
from preparer.semver import highest


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
    url = f"{ctx.registry_index.rstrip('/')}/{index_path(namespace, name)}"
    action = f"look up {bp_id} in the buildpack registry {redact(ctx.registry_index)}"
    text = ""
    for _ in _attempts(ctx, url):
        try:
            text = get(ctx, url).text
            break
        except NetworkError as err:
            last = err
        except NotFoundError:
            return None
        except FetchError as err:
            raise FetchError(action, err.cause or "failed") from None
    else:
        raise FetchError(action, f"{last} (after {ctx.retries + 1} attempts)")
    live: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            version, yanked, addr = (
                str(entry["version"]),
                bool(entry.get("yanked", False)),
                str(entry["addr"]),
            )
        except (ValueError, KeyError, TypeError):
            raise FetchError(action, f"line {number} of the index file is not an entry") from None
        if not yanked:
            live[version] = addr
    return live


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


def resolve(namespace: str, name: str, version: str | None, ctx: FetchContext) -> tuple[str, str]:
    """The image address and version of ``urn:cnb:registry:<namespace>/<name>[@<version>]``.

    :raises FetchError: the index cannot be read, or has no such buildpack or version (exit 1).
    """
    bp_id = f"{namespace}/{name}"
    live = read_entries(namespace, name, ctx)
    if live is None:
        raise NotFoundError(
            f"look up {bp_id} in the buildpack registry {redact(ctx.registry_index)}",
            f"no buildpack {bp_id} in the registry",
        )
    return choose(bp_id, live, version, ctx.registry_index)
