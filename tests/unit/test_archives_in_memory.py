"""An http archive's way through the store, with every answer given from memory (preparer.fetch.mock).

What these check needs no server: which requests are made, in which order and with which headers, and what the
fetch makes of each answer. The same behaviours against a real server on 127.0.0.1 are the integration tests
(tests/integration/test_fetch_http.py, test_http_library.py); this is the unit level below them.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import pytest

from preparer.errors import FetchError, InvalidInputsError
from preparer.fetch.base import FetchContext, Fetched
from preparer.fetch.cache import DownloadCache
from preparer.fetch.http import fetch_http
from preparer.fetch.locator import HttpLocator
from preparer.fetch.mock import Answer, Request, Script, mock_transport
from preparer.fetch.sink import Sink
from preparer.fetch.store import Store
from preparer.fetch.transport import Unreachable
from tests.buildpacks import make_tgz

URL = "http://buildpacks.example/bp.tgz"


@pytest.fixture
def archive(tmp_path: Path) -> bytes:
    return make_tgz(tmp_path / "src" / "bp.tgz", "me/mem", payload=b"m" * 1000).read_bytes()


def fetch(tmp_path: Path, server: Script, url: str = URL, sha: str | None = None) -> Fetched:
    staging = tmp_path / "staging"
    staging.mkdir(exist_ok=True)
    store = Store(DownloadCache.open(tmp_path / "cache"))
    transport = mock_transport(server, backoff=0.01, retries=2)
    return fetch_http(HttpLocator(url, sha), FetchContext(Sink(staging), store, transport))


def test_a_warm_fetch_asks_with_the_validators_and_a_304_installs_the_cached_tree(
    tmp_path: Path, archive: bytes
) -> None:
    server = Script(Answer(200, {"ETag": '"v1"'}, archive), Answer(304))
    cold = fetch(tmp_path, server)
    warm = fetch(tmp_path, server)
    assert [r.headers.get("If-None-Match") for r in server.seen] == [None, '"v1"']
    assert (cold.via, warm.via) == (None, "download cache")
    assert cold.digest == warm.digest == "sha256:" + hashlib.sha256(archive).hexdigest()
    assert (warm.buildpacks[0].path / "data.bin").read_bytes() == b"m" * 1000


def test_a_5xx_is_retried_and_each_retry_announced_with_its_standard_phrase(
    tmp_path: Path, archive: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    server = Script(Answer(503), Answer(200, {}, archive))  # no reason phrase, as HTTP/2 has none
    with caplog.at_level(logging.WARNING, logger="preparer"):
        fetched = fetch(tmp_path, server)
    assert fetched.top.id == "me/mem" and len(server.seen) == 2
    assert caplog.messages == [
        f"download {URL}: HTTP 503 Service Unavailable; trying again in 0.01 s (attempt 2 of 3)"
    ]


def test_a_body_cut_short_is_named_and_retried(
    tmp_path: Path, archive: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    short = Answer(200, {}, archive[:100], length=len(archive))
    with caplog.at_level(logging.WARNING, logger="preparer"), pytest.raises(Unreachable) as failed:
        fetch(tmp_path, Script(short))
    assert (
        failed.value.cause
        == f"buildpacks.example closed the connection after 100 of {len(archive)} bytes (after 3 attempts)"
    )
    assert len(caplog.messages) == 2
    assert not any((tmp_path / "cache" / "trees").rglob("manifest.json"))  # nothing half-read is kept


def test_a_refused_connection_names_host_and_port(tmp_path: Path) -> None:
    server = Script(ConnectionRefusedError(111, "Connection refused"))
    with pytest.raises(Unreachable) as failed:
        fetch(tmp_path, server, "http://buildpacks.example:8080/bp.tgz")
    assert failed.value.cause == "connection refused by buildpacks.example port 8080 (after 3 attempts)"
    assert len(server.seen) == 3


class RefusingRedirects:
    """A policy that allows everything but a redirect to another host."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def redirect(self, url: str) -> None:
        self.asked.append(url)
        if not url.startswith("http://buildpacks.example/"):
            raise InvalidInputsError("download", f"{url} is not allowed by http.allow")

    def downloaded(self, count: int) -> None: ...
    def extracted(self, count: int) -> None: ...
    def entry(self, count: int = 1) -> None: ...
    def revealed(self, kind: str, what: str) -> None: ...
    def image(self, reference: str, repository: str, digest: str | None) -> None: ...
    def signatures(self, repository: str) -> None:
        return None


def test_each_redirect_hop_is_decided_before_it_is_requested(tmp_path: Path, archive: bytes) -> None:
    hops = {
        URL: Answer(302, {"Location": "/moved.tgz"}),
        "http://buildpacks.example/moved.tgz": Answer(302, {"Location": "http://elsewhere.example/bp.tgz"}),
    }
    server = Script(Answer(200, {}, archive))
    seen: list[str] = []

    def answer(request: Request) -> Answer:
        seen.append(request.url)
        return hops.get(request.url) or server(request)

    staging = tmp_path / "staging"
    staging.mkdir()
    guard = RefusingRedirects()
    ctx = FetchContext(Sink(staging, guard=guard), Store(), mock_transport(answer))
    with pytest.raises(InvalidInputsError, match=r"elsewhere\.example/bp\.tgz is not allowed"):
        fetch_http(HttpLocator(URL), ctx)
    assert seen == [URL, "http://buildpacks.example/moved.tgz"]  # the refused hop was never asked
    assert guard.asked == ["http://buildpacks.example/moved.tgz", "http://elsewhere.example/bp.tgz"]


def test_a_pin_that_does_not_match_fails_and_nothing_is_kept(tmp_path: Path, archive: bytes) -> None:
    wrong = "0" * 64
    with pytest.raises(
        FetchError, match=r"sha256 mismatch: the uri pins sha256:0{64}, the download is sha256:"
    ):
        fetch(tmp_path, Script(Answer(200, {}, archive)), sha=wrong)
    assert not any((tmp_path / "cache" / "trees").rglob("manifest.json"))
    assert not any((tmp_path / "staging").iterdir())
