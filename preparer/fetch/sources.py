"""Which fetcher stages which kind of source: the one place that knows every source."""

from __future__ import annotations

from typing import Any

from preparer.fetch.base import FetchContext, Fetched, Fetcher
from preparer.fetch.http import fetch_http
from preparer.fetch.inline import fetch_inline
from preparer.fetch.local import fetch_path
from preparer.fetch.locator import (
    HttpLocator,
    IdLocator,
    ImageLocator,
    InlineLocator,
    Locator,
    PathLocator,
    RegistryLocator,
)
from preparer.fetch.oci.image import fetch_image
from preparer.fetch.oci.index import fetch_id, fetch_registry

#: Every kind of locator a fetch can start from, and its fetcher. (``BuilderLocator`` names a buildpack already
#: in ``<buildpacks>``: nothing to fetch.)
FETCHERS: dict[type[Any], Fetcher[Any]] = {
    PathLocator: fetch_path,
    HttpLocator: fetch_http,
    ImageLocator: fetch_image,
    RegistryLocator: fetch_registry,
    IdLocator: fetch_id,
    InlineLocator: fetch_inline,
}


def fetch(locator: Locator, ctx: FetchContext) -> Fetched:
    """Stage the buildpacks ``locator`` names, with the fetcher for its kind.

    :raises FetchError: the source cannot be read, downloaded, verified or unpacked (exit 1).
    :raises InvalidInputsError: the source is malformed in a way only fetching shows (exit 3).
    """
    return FETCHERS[type(locator)](locator, ctx)
