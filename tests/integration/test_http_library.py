"""fetch_http in-process, against the real HTTP server on 127.0.0.1: what a library caller of the fetch seam sees
(the CLI's view of the same is in test_fetch_http.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from preparer.errors import FetchError, NotFoundError
from preparer.fetch.base import FetchContext
from preparer.fetch.cache import DownloadCache
from preparer.fetch.http import fetch_http
from preparer.fetch.locator import HttpLocator
from preparer.fetch.sink import Sink
from preparer.fetch.store import Store
from preparer.fetch.transport import Transport
from tests.buildpacks import make_tgz
from tests.plugins.http_server import FileServer


def context(tmp_path: Path, cache: bool = True) -> FetchContext:
    staging = tmp_path / "staging"
    staging.mkdir(exist_ok=True)
    return FetchContext(
        sink=Sink(staging), store=Store(DownloadCache.open(tmp_path / "cache") if cache else None),
        transport=Transport(timeouts=(2.0, 2.0), backoff=0.01),
    )  # fmt: skip


def serve(server: FileServer, name: str, bp_id: str) -> str:
    return hashlib.sha256(make_tgz(server.root / name, bp_id).read_bytes()).hexdigest()


def test_cold_then_warm_then_pinned(tmp_path: Path, http_server: FileServer) -> None:
    sha = serve(http_server, "bp.tgz", "me/lib")
    cold = fetch_http(HttpLocator(http_server.url("bp.tgz")), context(tmp_path))
    assert (cold.top.id, cold.top.version, cold.digest) == ("me/lib", "1.0.0", f"sha256:{sha}")
    (staged,) = cold.buildpacks
    assert (staged.path / "bin" / "build").read_text() == "#!/bin/sh\necho me/lib build\n"
    assert staged.path.parent == tmp_path / "staging"
    warm = fetch_http(HttpLocator(http_server.url("bp.tgz")), context(tmp_path))
    assert warm.digest == cold.digest and warm.buildpacks[0].path != staged.path
    pinned = fetch_http(HttpLocator(http_server.url("bp.tgz"), sha), context(tmp_path))
    assert pinned.digest == cold.digest
    # cold: a body; warm: one conditional request answered 304; pinned and cached: no request at all.
    assert [status for status, _ in http_server.seen("bp.tgz")] == [200, 304]


def test_retries_then_the_error_names_the_source(tmp_path: Path, http_server: FileServer) -> None:
    serve(http_server, "bp.tgz", "me/lib")
    http_server.fail("bp.tgz", "500", "500", "500", "500")
    with pytest.raises(FetchError) as info:
        fetch_http(HttpLocator(http_server.url("bp.tgz")), context(tmp_path, cache=False))
    assert str(info.value) == (
        f"failed to download {http_server.url('bp.tgz')}: HTTP 500 Internal Server Error (after 4 attempts)"
    )
    assert list((tmp_path / "staging").iterdir()) == []


def test_not_found_is_its_own_error_and_not_retried(tmp_path: Path, http_server: FileServer) -> None:
    with pytest.raises(NotFoundError):
        fetch_http(HttpLocator(http_server.url("missing.tgz")), context(tmp_path))
    assert len(http_server.seen("missing.tgz")) == 1


def test_a_pin_mismatch_leaves_the_cache_as_it_was(tmp_path: Path, http_server: FileServer) -> None:
    serve(http_server, "bp.tgz", "me/lib")
    with pytest.raises(FetchError, match="sha256 mismatch: the uri pins sha256:0000"):
        fetch_http(HttpLocator(http_server.url("bp.tgz"), "0" * 64), context(tmp_path))
    trees = tmp_path / "cache" / "trees" / "sha256"
    assert not trees.exists() or list(trees.iterdir()) == []
