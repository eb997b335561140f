"""Every network failure says its cause as curl would, once, and says whether it is retried (issue: messages).

Each test makes the failure for real on 127.0.0.1 (a name that cannot resolve, a closed port, a server that says
nothing, an https URL at a plain http server, a certificate no CA signed, a proxy that wants credentials) and runs
the real command. What cannot change a second later is not retried; every retry is announced as it is made.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable, Iterator

from tests.buildpacks import make_tgz
from tests.golden import Layout
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer, Stalling, stalling
from tests.projects import group

FAST = {"CNB_PREPARER_HTTP_TIMEOUT": "1"}


def retries(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "trying again" in line]


@contextlib.contextmanager
def closed_port() -> Iterator[int]:
    """A port that refuses connections for the block: bound but not listening, so that no server another test
    starts meanwhile can take it (a port found free and let go was taken once, and answered 404)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


def test_a_name_that_does_not_resolve_fails_at_once(preparer: Callable[..., Result], layout: Layout) -> None:
    url = "http://no-such-host.invalid/bp.tgz"
    result = preparer(project=group(url), env=FAST)
    assert result.code == 1
    assert result.stderr == f"ERROR: failed to download {url}: could not resolve host no-such-host.invalid\n"
    assert not (layout.layers / "order.toml").exists()


def test_a_refused_connection_is_retried_and_each_retry_announced(preparer: Callable[..., Result]) -> None:
    with closed_port() as port:
        url = f"http://127.0.0.1:{port}/bp.tgz"
        result = preparer(project=group(url), env=FAST)
    assert result.code == 1
    cause = f"connection refused by 127.0.0.1 port {port}"
    assert retries(result.stderr) == [
        f"Warning: download {url}: {cause}; trying again in {delay} s (attempt {n} of 4)"
        for delay, n in (("0.5", 2), ("1", 3), ("2", 4))
    ]
    assert result.stderr.splitlines()[-1] == f"ERROR: failed to download {url}: {cause} (after 4 attempts)"


def test_a_server_that_says_nothing_is_named_with_the_time_waited(preparer: Callable[..., Result]) -> None:
    with stalling(Stalling(mode="silent")) as server:
        url = f"http://{server.host}/bp.tgz"
        result = preparer(project=group(url), env=FAST)
    assert result.code == 1
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to download {url}: no answer from 127.0.0.1 within 1 s (after 4 attempts)"
    )
    assert len(server.paths) == 4 and len(retries(result.stderr)) == 3


def test_https_at_a_plain_http_server_says_to_write_http(
    preparer: Callable[..., Result], http_server: FileServer
) -> None:
    make_tgz(http_server.root / "bp.tgz", "me/plain")
    url = f"https://127.0.0.1:{http_server.port}/bp.tgz"
    result = preparer(project=group(url), env=FAST)
    assert result.code == 1
    assert result.stderr == (
        f"ERROR: failed to download {url}: 127.0.0.1 port {http_server.port} did not answer with TLS "
        "(a plain http server? then write http://)\n"
    )


def test_an_untrusted_certificate_names_the_ca_certificates_used(
    preparer: Callable[..., Result], tls_server: FileServer
) -> None:
    make_tgz(tls_server.root / "bp.tgz", "me/tls")
    result = preparer(
        project=group(tls_server.url("bp.tgz")), env=FAST | {"SSL_CERT_FILE": str(tls_server.cert)}
    )
    assert result.code == 0  # OpenSSL's variable is honoured
    url = tls_server.url("bp.tgz")
    wrong = preparer(
        project=group(url), env=FAST | {"REQUESTS_CA_BUNDLE": "/etc/ssl/certs/ca-certificates.crt"}
    )
    assert wrong.code == 1
    assert wrong.stderr == (
        f"ERROR: failed to download {url}: the TLS certificate of 127.0.0.1 is not trusted: self-signed "
        "certificate (CA certificates: /etc/ssl/certs/ca-certificates.crt, from $REQUESTS_CA_BUNDLE)\n"
    )  # not retried, and no advice to set the variable that is already set


def test_a_proxy_that_wants_credentials_is_named_with_its_variable(
    preparer: Callable[..., Result], tls_server: FileServer, http_server: FileServer
) -> None:
    with stalling(Stalling(mode="body", status=407, length=0)) as proxy:
        tunnel = preparer(
            project=group(tls_server.url("bp.tgz")), env=FAST | {"HTTPS_PROXY": f"http://u:p@{proxy.host}"}
        )
        plain = preparer(
            project=group(http_server.url("bp.tgz")), env=FAST | {"http_proxy": f"http://{proxy.host}"}
        )
    assert tunnel.code == plain.code == 1
    assert tunnel.stderr == (
        f"ERROR: failed to download {tls_server.url('bp.tgz')}: the proxy {proxy.host} (HTTPS_PROXY) refused the "
        "tunnel: 407 Proxy Authentication Required\n"
    )  # the proxy's user information is not shown
    assert plain.stderr == (
        f"ERROR: failed to download {http_server.url('bp.tgz')}: the proxy {proxy.host} (http_proxy) answered 407 "
        "Proxy Authentication Required\n"
    )


def test_every_broken_entry_is_named_in_one_run(
    preparer: Callable[..., Result], http_server: FileServer
) -> None:
    """A project with two broken entries takes one run, not two."""
    missing, nowhere = http_server.url("missing.tgz"), "http://no-such-host.invalid/bp.tgz"
    result = preparer(project=group(missing, nowhere), env=FAST)
    assert result.code == 1
    assert result.stderr == (
        "ERROR: failed to fetch 2 buildpacks:\n"
        f"  failed to download {missing}: HTTP 404 Not Found\n"
        f"  failed to download {nowhere}: could not resolve host no-such-host.invalid\n"
    )


def test_a_failure_is_reported_while_another_download_is_under_way(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout
) -> None:
    """A slow download does not hold a known failure back: it is called off, and nothing is installed."""
    missing = http_server.url("missing.tgz")
    with stalling(Stalling(mode="body", pace=0.5, length=100_000)) as slow:
        began = time.monotonic()
        result = preparer(project=group(f"http://{slow.host}/slow.tgz", missing), env=FAST)
        took = time.monotonic() - began
    assert result.code == 1
    assert (
        result.stderr == f"ERROR: failed to download {missing}: HTTP 404 Not Found\n"
    )  # the slow one is no failure
    assert took < 20, took  # the slow body alone would take 14 hours; generous for a loaded machine
    assert slow.paths == ["/slow.tgz"]  # it was under way
    assert not (layout.layers / "order.toml").exists()


def test_a_redirect_loop_is_named_with_its_last_hop_and_not_retried(
    preparer: Callable[..., Result], http_server: FileServer
) -> None:
    http_server.redirect("a.tgz", "/b.tgz")
    http_server.redirect("b.tgz", "/a.tgz")
    url = http_server.url("a.tgz")
    result = preparer(project=group(url), env=FAST)
    assert result.code == 1
    assert result.stderr == (
        f"ERROR: failed to download {url}: too many redirects (10), the last to {http_server.url('b.tgz')}\n"
    )
    assert len(http_server.seen("a.tgz")) + len(http_server.seen("b.tgz")) == 11  # one try: no retry


def test_a_certificate_for_another_name_says_so(
    preparer: Callable[..., Result], tls_server: FileServer
) -> None:
    make_tgz(tls_server.root / "bp.tgz", "me/tls")
    url = f"https://localhost:{tls_server.port}/bp.tgz"  # the certificate names 127.0.0.1 only
    result = preparer(project=group(url), env=FAST | {"REQUESTS_CA_BUNDLE": str(tls_server.cert)})
    assert result.code == 1
    assert result.stderr == (
        f"ERROR: failed to download {url}: the TLS certificate of localhost is not trusted: Hostname mismatch, "
        f"certificate is not valid for 'localhost'. (CA certificates: {tls_server.cert}, from $REQUESTS_CA_BUNDLE)\n"
    )


def test_a_proxy_that_is_down_is_not_taken_for_the_server(
    preparer: Callable[..., Result], tls_server: FileServer
) -> None:
    with closed_port() as port:
        result = preparer(
            project=group(tls_server.url("bp.tgz")), env=FAST | {"https_proxy": f"http://127.0.0.1:{port}"}
        )
    assert result.code == 1
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to download {tls_server.url('bp.tgz')}: the proxy 127.0.0.1:{port} (https_proxy) cannot be "
        "reached: connection refused (after 4 attempts)"
    )
