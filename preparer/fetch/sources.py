"""Which fetcher stages which kind of source: the one place that knows every source's fetcher.

Each fetcher's module is imported when a source of its kind is first fetched: a run of http archives never loads
the registry client, and a warm run pays for no more than it uses.
"""

from __future__ import annotations

import importlib
from typing import Any, assert_never

from preparer.fetch.base import FetchContext, Fetched, Fetcher
from preparer.fetch.locator import (
    Fetchable,
    HttpLocator,
    IdLocator,
    ImageLocator,
    InlineLocator,
    PathLocator,
    RegistryLocator,
)


def fetcher_of(locator: Fetchable) -> str:
    """The fetcher of ``locator``'s kind, as ``module:function`` (a kind added to :data:`Fetchable` fails
    type-checking here until it names its fetcher)."""
    match locator:
        case PathLocator():
            return "preparer.fetch.local:fetch_path"
        case HttpLocator():
            return "preparer.fetch.http:fetch_http"
        case ImageLocator():
            return "preparer.fetch.oci.image:fetch_image"
        case RegistryLocator():
            return "preparer.fetch.oci.index:fetch_registry"
        case IdLocator():
            return "preparer.fetch.oci.index:fetch_id"
        case InlineLocator():
            return "preparer.fetch.inline:fetch_inline"
        case _ as never:
            assert_never(never)


def fetcher(locator: Fetchable) -> Fetcher[Any]:
    """The fetcher of ``locator``'s kind (its module imported now, once)."""
    module, _, name = fetcher_of(locator).partition(":")
    found: Fetcher[Any] = getattr(importlib.import_module(module), name)
    return found


def fetch(locator: Fetchable, ctx: FetchContext) -> Fetched:
    """Stage the buildpacks ``locator`` names, with the fetcher for its kind.

    :raises FetchError: the source cannot be read, downloaded, verified or unpacked (exit 1).
    :raises InvalidInputsError: the source is malformed in a way only fetching shows (exit 3).
    """
    return fetcher(locator)(locator, ctx)
