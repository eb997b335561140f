"""Fixtures: a real HTTP server on 127.0.0.1 serving files, with faults injected per path; the same over TLS.
It speaks HTTP/1.1 and keeps connections alive, as real servers do, so what a client leaves in its pools stays open.

Every response carries an ``ETag`` (the body's sha256) and honours ``If-None-Match``. Faults are queued per path
and used one per request: ``500``, ``404``, ``truncate`` (announce the whole length, send half, close),
``slow`` (wait ``slow_seconds`` before the body), ``endless`` (no length; the file, then zeros until the client
goes away), and ``trickle`` (the body a byte every half second). Paths given to :meth:`FileServer.redirect` answer
302. A request in proxy form (``GET http://host/path``) is served
too and recorded in ``proxied``, so the server can stand in for an HTTP proxy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import ssl
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest


@dataclass
class FileServer:
    """The running server: where its files live, the faults to inject, and the requests it saw."""

    root: Path
    port: int = 0
    faults: dict[str, list[str]] = field(default_factory=dict)
    slow_seconds: float = 3.0
    requests: list[tuple[str, int, dict[str, str]]] = field(default_factory=list)
    proxied: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    scheme: str = "http"
    #: The self-signed certificate of a TLS server (a CA bundle for ``REQUESTS_CA_BUNDLE``).
    cert: Path | None = None
    #: ``Location`` of the paths answered with a 302 (:meth:`redirect`).
    redirects: dict[str, str] = field(default_factory=dict)
    #: ``WWW-Authenticate`` of the paths answered with a 401 (a Basic or Bearer challenge), every time.
    challenges: dict[str, str] = field(default_factory=dict)
    #: ``(status, content type, body)`` of the paths answered so every time: an error document of one's own.
    answers: dict[str, tuple[int, str, bytes]] = field(default_factory=dict)
    #: Seconds every request waits before it is answered: an origin far away.
    latency: float = 0.0
    #: Paths answered in chunks, without ``Content-Length`` (``Transfer-Encoding: chunked``), to GET and HEAD alike.
    chunked: set[str] = field(default_factory=set)
    #: The paths asked for with ``HEAD`` (each is in ``requests`` too), in order.
    heads: list[str] = field(default_factory=list)
    #: Requests being answered now, and the most there were at once.
    in_flight: int = 0
    most_in_flight: int = 0

    def url(self, name: str) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/{name}"

    def fail(self, name: str, *faults: str) -> None:
        """Answer the next requests for ``name`` with ``faults``, in order; then serve normally."""
        with self.lock:
            self.faults.setdefault("/" + name, []).extend(faults)

    def redirect(self, name: str, location: str) -> None:
        """Answer every request for ``name`` with a 302 to ``location``."""
        with self.lock:
            self.redirects["/" + name] = location

    def seen(self, name: str) -> list[tuple[int, dict[str, str]]]:
        """The status and request headers of every request for ``name``."""
        with self.lock:
            return [(status, headers) for path, status, headers in self.requests if path == "/" + name]


#: What the ``429`` fault's error document says (Docker Hub's words).
RATE_LIMITED = (
    "You have reached your pull rate limit. You may increase the limit by authenticating and upgrading"
)


def _handler(server: FileServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers: a client's pooled connections stay open

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: tests assert on `server.requests` instead."""

        def answer(self, status: int) -> None:
            with server.lock:
                server.requests.append((urlsplit(self.path).path, status, dict(self.headers)))

        def do_HEAD(self) -> None:
            """As GET, without the body (a fault queued for the path is taken by the HEAD)."""
            with server.lock:
                server.heads.append(urlsplit(self.path).path)
            self.do_GET()

        def do_GET(self) -> None:
            with server.lock:
                server.in_flight += 1
                server.most_in_flight = max(server.most_in_flight, server.in_flight)
            try:
                time.sleep(server.latency)
                self.get()
            finally:
                with server.lock:
                    server.in_flight -= 1

        def get(self) -> None:
            path = urlsplit(self.path).path
            with server.lock:
                if self.path.startswith(("http://", "https://")):
                    server.proxied.append(path)
                queue = server.faults.get(path, [])
                fault = queue.pop(0) if queue else None
                location = server.redirects.get(path)
                challenge = server.challenges.get(path)
                answer = server.answers.get(path)
            if answer is not None:
                status, kind, body = answer
                self.answer(status)
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if challenge is not None and fault is None:
                self.answer(401)
                self.send_response(401)
                self.send_header("WWW-Authenticate", challenge)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if location is not None:
                self.answer(302)
                self.send_response(302)
                self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            file = server.root / path.lstrip("/")
            if fault == "429":  # as Docker Hub limits pulls: the registry's error document says why
                body = json.dumps({"errors": [{"code": "TOOMANYREQUESTS", "message": RATE_LIMITED}]}).encode()
                self.answer(429)
                self.send_response(429)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if fault in ("500", "404") or not file.is_file():
                status = int(fault) if fault in ("500", "404") else 404
                self.answer(status)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = file.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest() + '"'
            if fault is None and self.headers.get("If-None-Match") == etag:
                self.answer(304)
                self.send_response(304)
                self.send_header("ETag", etag)
                self.end_headers()
                return
            self.answer(200)
            self.send_response(200)
            if path in server.chunked:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                if self.command == "GET":
                    for start in range(0, len(body), 1000):
                        piece = body[start : start + 1000]
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.write(b"0\r\n\r\n")
                return
            if fault == "endless":
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                try:
                    self.wfile.write(body)
                    zeros = bytes(1 << 16)
                    while True:
                        self.wfile.write(zeros)
                except OSError:
                    return
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", etag)
            self.send_header("Last-Modified", "Sun, 01 Nov 2026 00:00:00 GMT")
            self.end_headers()
            if self.command == "HEAD":
                return
            if fault == "slow":
                time.sleep(server.slow_seconds)
            if fault == "trickle":
                try:
                    for byte in body:
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(0.5)
                except OSError:
                    pass
                return
            if fault == "truncate":
                self.wfile.write(body[: len(body) // 2])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body)

    return Handler


class _Server(ThreadingHTTPServer):
    """A threading server that keeps quiet when a client goes away or refuses the handshake: what the tests of cut
    downloads, cancelled runs and untrusted certificates make the preparer do."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


def _serve(server: FileServer, tls: ssl.SSLContext | None = None) -> Generator[FileServer, None, None]:
    httpd = _Server(("127.0.0.1", 0), _handler(server))
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    server.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, name="http-server", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FileServer]:
    """A file server on 127.0.0.1 for one test, stopped afterwards."""
    yield from _serve(FileServer(tmp_path_factory.mktemp("www")))


@pytest.fixture
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FileServer]:
    """The same file server over https, with a self-signed certificate for 127.0.0.1 (``server.cert``)."""
    tls_dir = tmp_path_factory.mktemp("tls")
    cert, key = tls_dir / "cert.pem", tls_dir / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    yield from _serve(FileServer(tmp_path_factory.mktemp("www"), scheme="https", cert=cert), context)


@dataclass
class Stalling:
    """A server on 127.0.0.1 that answers every request slowly: ``silent`` says nothing at all; ``headers``
    trickles an endless header line; ``body`` sends ``status`` and a ``Content-Length`` of ``length`` bytes, then
    the body a byte every ``pace`` seconds; ``reset`` sends half of such a body at once, then resets the connection
    (TCP RST, as a load balancer dropping it does). ``paths`` are the request paths it saw."""

    mode: str = "body"
    pace: float = 0.5
    length: int = 1000
    status: int = 200
    port: int = 0
    paths: list[str] = field(default_factory=list)

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"


@contextlib.contextmanager
def stalling(server: Stalling) -> Iterator[Stalling]:
    """Run ``server`` for the block."""
    import socket

    listener = socket.create_server(("127.0.0.1", 0))
    server.port = listener.getsockname()[1]
    done = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                request = conn.recv(65536).decode("latin-1")
                server.paths.append(request.split(" ")[1] if " " in request else "")
                if server.mode == "silent":
                    done.wait()
                    return
                if server.mode == "headers":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                else:
                    conn.sendall(b"HTTP/1.1 %d Slow\r\nContent-Type: application/vnd.oci.image.manifest.v1+json"
                                 b"\r\nContent-Length: %d\r\n\r\n" % (server.status, server.length))  # fmt: skip
                if server.mode == "reset":
                    conn.sendall(bytes(server.length // 2))
                    time.sleep(0.1)  # the bytes are read before the reset reaches the client
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    return  # closed with a zero linger: a reset, not an orderly end
                while not done.wait(server.pace):
                    conn.sendall(b"a")
            except OSError:
                return

    def accept() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield server
    finally:
        done.set()
        listener.close()
