"""The canonical URL (preparer/fetch/url.py): what the policy and the caches decide on is what requests sends."""

from __future__ import annotations

import pytest
import requests
from hypothesis import given, settings
from hypothesis import strategies as st
from urllib3.util import parse_url

from preparer.fetch.url import UrlError, parse_http_url, resolve_redirect


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("HTTPS://Example.COM:443", "https://example.com/"),
        ("http://h:80/a/./b/../c", "http://h/a/c"),
        ("https://h/buildpacks/%2e%2E/private/bp.tgz", "https://h/private/bp.tgz"),
        ("https://h/%7euser/%41%2f", "https://h/~user/A%2F"),
        ("https://h/a b/é", "https://h/a%20b/%C3%A9"),
        ("https://h:8443/x?b=1&a=%7e#frag", "https://h:8443/x?b=1&a=~"),
        ("http://[::1]:80/x", "http://[::1]/x"),
        (
            "https://h/api/v4/projects/group%2Fproject/bp.tgz",
            "https://h/api/v4/projects/group%2Fproject/bp.tgz",
        ),
        ("https://h/100%/a%zz%4", "https://h/100%25/a%25zz%254"),
    ],
)
def test_the_canonical_form(written: str, canonical: str) -> None:
    assert parse_http_url(written).without_userinfo == canonical


@pytest.mark.parametrize(
    ("written", "why"),
    [
        ("http://evil:1/x@allowed.example/bp.tgz", "it reads two ways"),
        ("https://user:Pa#SS/word@host/bp.tgz", "it reads two ways"),
        ("https://token@host/bp@1.0.tgz", "it reads two ways"),
        ("https://host/a/..%2Fb", "a path segment is '.' or '..'"),
        ("https://host\\@evil/", "a backslash"),
        ("https://h\x00/", "a control character"),
        ("https://:80/", "its host is empty"),
        ("https://h%41/", "holds an escape"),
        ("https://é.example/", "not ASCII"),
        ("https://h:0/", "its port"),
        ("https://h:99999/", "its port"),
        ("ftp://h/", "not an http or https URL"),
    ],
)
def test_urls_that_read_two_ways_are_refused(written: str, why: str) -> None:
    with pytest.raises(UrlError, match=why):
        parse_http_url(written)


def test_user_information_is_kept_apart() -> None:
    url = parse_http_url("https://me:s%2Fcret@Host/x?token=1")
    assert (url.shown, url.userinfo, url.private) == ("https://host/x", "me:s%2Fcret", True)
    assert url.request == "https://me:s%2Fcret@host/x?token=1"
    assert not parse_http_url("https://host/x").private


@pytest.mark.parametrize(
    ("location", "followed"),
    [
        ("/x", "https://h/x"),
        ("x", "https://h/a/b/x"),
        ("../../../x", "https://h/x"),
        ("//other/x", "https://other/x"),
        ("http://o/y", "http://o/y"),
        ("?q=1", "https://h/a/b/c.tgz?q=1"),
        ("#frag", "https://h/a/b/c.tgz"),
    ],
)
def test_redirect_locations_resolve_against_the_url_asked(location: str, followed: str) -> None:
    assert resolve_redirect(parse_http_url("https://h/a/b/c.tgz"), location).without_userinfo == followed


_PIECES = st.sampled_from(["a", "B", "..", ".", "%2e", "%2E%2e", "%7E", "%41", "é", " ", "%25", "%", "%z", "@", ":", "~",
                           "!", "$", "&", "'", "(", "*", "+", ",", ";", "=", "[", "%5b", "|", "%2F", "x.tgz"])  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    host=st.sampled_from(["h", "Host.Example", "127.0.0.1", "[::1]"]),
    port=st.sampled_from(["", ":80", ":443", ":8080"]),
    segments=st.lists(st.lists(_PIECES, max_size=3).map("".join), max_size=5),
    query=st.lists(_PIECES, max_size=4).map("".join),
)
def test_requests_sends_exactly_the_canonical_url(
    host: str, port: str, segments: list[str], query: str
) -> None:
    text = f"https://{host}{port}/" + "/".join(segments) + (f"?{query}" if query else "")
    try:
        url = parse_http_url(text)
    except UrlError:
        return
    assert parse_http_url(url.request) == url  # a fixed point
    assert requests.Request("GET", url.request).prepare().url == url.request
    assert parse_url(url.request).host == url.host
    assert "/../" not in url.path + "/" and "/./" not in url.path + "/"
