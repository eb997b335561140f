"""Which fetcher stages which kind of source: the one place that knows every source.

Each fetcher's module is imported when a source of its kind is first fetched: a run of http archives never loads
the registry client, and a warm run pays for no more than it uses.
"""

from __future__ import annotations

import importlib
from typing import Any

from preparer.fetch.base import FetchContext, Fetched, Fetcher
from preparer.fetch.locator import (
    HttpLocator,
    IdLocator,
    ImageLocator,
    InlineLocator,
    Locator,
    PathLocator,
    RegistryLocator,
)

#: Every kind of locator a fetch can start from, and its fetcher (``module:function``). (``BuilderLocator`` names a
#: buildpack already in ``<buildpacks>``: nothing to fetch.)
FETCHERS: dict[type[Any], str] = {
    PathLocator: "preparer.fetch.local:fetch_path",
    HttpLocator: "preparer.fetch.http:fetch_http",
    ImageLocator: "preparer.fetch.oci.image:fetch_image",
    RegistryLocator: "preparer.fetch.oci.index:fetch_registry",
    IdLocator: "preparer.fetch.oci.index:fetch_id",
    InlineLocator: "preparer.fetch.inline:fetch_inline",
}


def fetcher(kind: type[Any]) -> Fetcher[Any]:
    """The fetcher of one kind of locator (its module imported now, once)."""
    module, _, name = FETCHERS[kind].partition(":")
    found: Fetcher[Any] = getattr(importlib.import_module(module), name)
    return found


def fetch(locator: Locator, ctx: FetchContext) -> Fetched:
    """Stage the buildpacks ``locator`` names, with the fetcher for its kind.

    :raises FetchError: the source cannot be read, downloaded, verified or unpacked (exit 1).
    :raises InvalidInputsError: the source is malformed in a way only fetching shows (exit 3).
    """
    return fetcher(type(locator))(locator, ctx)
