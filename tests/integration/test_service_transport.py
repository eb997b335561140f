"""A service's tenant shares one ``Transport`` among its builds, and builds its ``Inputs`` from a dict it goes on
editing: each build's connections, cancel and settings stay its own (issue 50: "one Transport shared by a tenant's
builds ties them together").

Real components: the suite's HTTP server on 127.0.0.1, which keeps connections alive (a connection one build left
in a shared pool is what another would take), holds an answer back (``slow``), and stands in for an HTTP proxy
(a request in proxy form is served and recorded); the same server over TLS with a certificate of its own.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path

import pytest

from preparer import Cancel, Cancelled, FetchError, Inputs, InvalidInputsError, PreparerError, prepare
from preparer.fetch.transport import Transport
from tests.buildpacks import make_tgz
from tests.plugins.http_server import FileServer
from tests.service import build as service_build


def build(
    root: Path, *uris: str, environ: Mapping[str, str] | None = None, transport: Transport | None = None
) -> Inputs:
    return service_build(root, *uris, environ={} if environ is None else environ, transport=transport)


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def settled(before: int) -> int:
    """The process's descriptors once the suite's server (in this process) has closed its side of the connections
    the builds closed: it notices a client's close a moment later. A connection a build left open never closes."""
    ends = time.monotonic() + 3
    while descriptors() > before and time.monotonic() < ends:
        time.sleep(0.05)
    return descriptors()


@pytest.fixture
def served(http_server: FileServer) -> FileServer:
    for name in ("first", "long", "other"):
        make_tgz(http_server.root / f"{name}.tgz", f"svc/{name}", payload=os.urandom(2000))
    return http_server


def test_a_cancel_is_immediate_on_a_shared_transport(served: FileServer, tmp_path: Path) -> None:
    """Build X leaves a keep-alive connection behind; build Y of the same tenant, whose answer the server holds
    back 5 s, is cancelled 0.3 s in: it stops at once (on main it waited for the answer: 4.7 s)."""
    tenant = Transport()
    prepare(build(tmp_path / "x", served.url("first.tgz"), transport=tenant))
    served.slow_seconds = 5.0
    served.fail("other.tgz", "slow")
    handle = Cancel()
    threading.Timer(0.3, handle.set).start()
    began = time.monotonic()
    with pytest.raises(Cancelled):
        prepare(build(tmp_path / "y", served.url("other.tgz"), transport=tenant), cancel=handle)
    took = time.monotonic() - began - 0.3
    assert took < 0.3, took


def test_cancelling_one_build_leaves_the_other_s_connection_alone(served: FileServer, tmp_path: Path) -> None:
    """X downloads one archive and trickles another; Y, of the same tenant, starts once X's first is done (the
    connection X used is then free) and is held back a second; X is cancelled meanwhile. Y's download is
    answered on its first request (on main, X's cancel shut Y's connection: Y asked twice)."""
    tenant = Transport()
    served.slow_seconds = 1.0
    served.fail("long.tgz", "trickle")
    served.fail("other.tgz", "slow")
    x_handle, y_done = Cancel(), threading.Event()
    y_result: list[object] = []

    def y() -> None:
        try:
            y_result.append(prepare(build(tmp_path / "y", served.url("other.tgz"), transport=tenant)))
        except PreparerError as err:  # what the service sees of Y
            y_result.append(err)
        y_done.set()

    def progress(event: object) -> None:
        if getattr(event, "kind", "") == "finished" and getattr(event, "url", "").endswith("first.tgz"):
            threading.Thread(target=y).start()
            threading.Timer(0.3, x_handle.set).start()

    x = build(tmp_path / "x", served.url("first.tgz"), served.url("long.tgz"), transport=tenant)
    with pytest.raises(Cancelled):
        prepare(x, cancel=x_handle, progress=progress)
    assert y_done.wait(10)
    assert not isinstance(y_result[0], Exception), y_result[0]
    assert [status for status, _ in served.seen("other.tgz")] == [200]


def test_a_shared_transport_keeps_no_connection_of_a_build(served: FileServer, tmp_path: Path) -> None:
    """Builds that share a transport close their connections as builds with none do: the tenant's transport
    holds no descriptor after them (on main it kept the keep-alive connections of every build)."""
    tenant = Transport()
    prepare(build(tmp_path / "warm", served.url("first.tgz"), transport=tenant))  # imports, the first session
    before = descriptors()
    for n in range(5):
        prepare(build(tmp_path / f"b{n}", served.url("first.tgz"), served.url("other.tgz"), transport=tenant))
    assert settled(before) <= before, os.listdir("/proc/self/fd")


# One source decides a transport's proxy and CA


def test_the_transport_s_proxy_is_the_one_used(served: FileServer, tmp_path: Path) -> None:
    """A tenant's transport names its proxy; the build's ``Inputs.environ`` names none. The request goes through
    the tenant's proxy (on main the proxy was read from ``Inputs.environ`` only: bypassed, and the made-up host
    did not resolve)."""
    tenant = Transport(environ={"HTTP_PROXY": f"http://127.0.0.1:{served.port}"})
    report = prepare(build(tmp_path, "http://buildpacks.invalid/first.tgz", transport=tenant))
    assert [bp.id for bp in report.buildpacks] == ["svc/first"]
    assert served.proxied == ["/first.tgz"]


def test_the_transport_s_environ_decides_the_ca_and_its_message(
    tls_server: FileServer, served: FileServer, tmp_path: Path
) -> None:
    """The tenant's transport names a CA file that does not sign the server; the build's environ names the one
    that does. The transport decides: the download fails, and the message names the transport's file (on main it
    named the build's, which the session did not use)."""
    make_tgz(tls_server.root / "bp.tgz", "svc/tls")
    other = unrelated_ca(tmp_path)
    tenant = Transport(environ={"SSL_CERT_FILE": str(other)})
    inputs = build(
        tmp_path / "b", tls_server.url("bp.tgz"), environ={"REQUESTS_CA_BUNDLE": str(tls_server.cert)},
        transport=tenant,
    )  # fmt: skip
    with pytest.raises(FetchError) as failed:
        prepare(inputs)
    assert f"CA certificates: {other}, from $SSL_CERT_FILE" in failed.value.message
    assert str(tls_server.cert) not in failed.value.message
    trusted = Transport(environ={"SSL_CERT_FILE": str(tls_server.cert)})
    report = prepare(build(tmp_path / "c", tls_server.url("bp.tgz"), transport=trusted))
    assert [bp.id for bp in report.buildpacks] == ["svc/tls"]


def test_a_transport_without_an_environ_takes_the_build_s(served: FileServer, tmp_path: Path) -> None:
    """``Transport()`` names no environment: the build's decides, proxy and CA alike, as without a transport."""
    inputs = build(
        tmp_path, "http://buildpacks.invalid/first.tgz", environ={"HTTP_PROXY": f"http://127.0.0.1:{served.port}"},
        transport=Transport(),
    )  # fmt: skip
    assert [bp.id for bp in prepare(inputs).buildpacks] == ["svc/first"]
    assert served.proxied == ["/first.tgz"]


# Inputs(environ=d) keeps what d held when it was built


def test_inputs_keep_the_environ_they_were_built_with(served: FileServer, tmp_path: Path) -> None:
    """The service edits its dict after building the Inputs (for the next tenant): the built Inputs, and the plan
    made from them, still go through the first proxy (on main they followed the dict to the dead one)."""
    environ = {"HTTP_PROXY": f"http://127.0.0.1:{served.port}"}
    inputs = build(tmp_path, "http://buildpacks.invalid/first.tgz", environ=environ)
    environ["HTTP_PROXY"] = "http://127.0.0.1:9"  # discard: nothing listens
    environ["HOME"] = 1  # type: ignore[assignment]  # a value building Inputs refuses
    assert inputs.environ["HTTP_PROXY"] == f"http://127.0.0.1:{served.port}"
    assert "HOME" not in inputs.environ
    with pytest.raises(TypeError):
        inputs.environ["HTTP_PROXY"] = "x"  # type: ignore[index]  # frozen, as the record is
    assert [bp.id for bp in prepare(inputs).buildpacks] == ["svc/first"]
    assert served.proxied == ["/first.tgz"]
    with pytest.raises(InvalidInputsError) as refused:
        build(tmp_path / "again", "http://buildpacks.invalid/first.tgz", environ=environ)
    assert refused.value.field == "environ"


def unrelated_ca(directory: Path) -> Path:
    """A self-signed certificate of another name: it signs nothing the suite serves."""
    cert = directory / "other-ca.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=other",
         "-keyout", str(directory / "other-key.pem"), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert


def test_a_transport_refuses_an_environ_that_is_not_a_mapping_of_strings() -> None:
    """A tenant's mistake is the caller's TypeError when the transport is made, saying what it takes (a str was a
    bare ValueError from dict(), a list of pairs was taken)."""
    for bad, said in (("HTTP_PROXY=x", "takes a mapping, not str"), ([("HTTP_PROXY", "x")], "not list"),
                      ({"HTTP_PROXY": 1}, "must map strings to strings")):  # fmt: skip
        with pytest.raises(TypeError, match=said):
            Transport(environ=bad)  # type: ignore[arg-type]
