"""Why a request failed, said once, the way curl and git say it: one place classifies every network failure.

requests and urllib3 wrap the cause of a failure several times over (and their messages carry the URL, credentials
and all); :func:`failure` finds the cause in the chain and says it in plain words, with the host and port but never
a URL, a query or user information, and never a Python class name. It also says whether another attempt may help:
a name that does not exist, a certificate that is not trusted, or a server that does not speak TLS will not be
different a second later.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Mapping
from urllib.parse import urlsplit

from preparer.fetch.environment import CA_VARIABLES, ca_source, proxy_for


class NetworkError(Exception):
    """A failure while talking to a server; ``retry`` says whether another attempt may help; ``down``: the server
    (scheme, host, port) could not be connected to at all (refused, unreachable, no connection in time)."""

    def __init__(
        self, cause: str, retry: bool = True, status: int | None = None, down: Where | None = None
    ) -> None:
        super().__init__(cause)
        self.retry, self.status, self.down = retry, status, down


class Where:
    """The host and port a request was for (none of the URL's path, query or user information)."""

    __slots__ = ("host", "port", "scheme")

    def __init__(self, scheme: str = "", host: str = "", port: int | None = None) -> None:
        self.scheme, self.host = scheme, host
        self.port = port if port is not None else {"http": 80, "https": 443}.get(scheme)

    @property
    def server(self) -> str:
        return self.host or "the server"

    @property
    def key(self) -> tuple[str, str, int | None]:
        return self.scheme, self.host, self.port

    @classmethod
    def of(cls, url: str | None) -> Where:
        """Where ``url`` points (a response's URL: what a failure while reading its body names)."""
        try:
            parts = urlsplit(url or "")
            return cls(parts.scheme, parts.hostname or "", parts.port)
        except ValueError:
            return cls()


def failure(
    err: BaseException,
    where: Where | None = None,
    timeouts: tuple[float, float] | None = None,
    received: tuple[int, int | None] | None = None,
    environ: Mapping[str, str] | None = None,
) -> NetworkError:
    """The failure ``err`` (a requests, urllib3 or socket error) said in plain words, and whether to retry.

    :param received: while a body was read: the bytes that had arrived, and the ``Content-Length`` (if any).
    :param environ: the run's environment (the proxy and the CA certificates it names).
    """
    where, environ = where or Where(), environ or {}
    chain = list(_chain(err))
    found = _resolution(chain, where) or _proxy(chain, where, environ) or _tls(chain, where, environ)
    return found or _connection(chain, where, timeouts, received)


def closed_early(where: Where, received: tuple[int, int | None] | None) -> NetworkError:
    """A body cut short: how much of it had arrived, when that is known."""
    if received is None:
        return NetworkError(f"{where.server} closed the connection before the body ended")
    done, total = received
    of = f" of {total}" if total is not None else ""
    return NetworkError(f"{where.server} closed the connection after {done}{of} bytes")


def shown_proxy(proxy: str) -> str:
    """A proxy's address as messages show it: ``host:port``, without its scheme or user information."""
    return proxy.split("://", 1)[-1].rpartition("@")[2].rstrip("/")


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err`` and every error it wraps: causes, contexts, urllib3's ``reason`` and errors among ``args``."""
    seen: list[BaseException] = []
    todo: list[object] = [err]
    while todo and len(seen) < 32:
        item = todo.pop(0)
        if not isinstance(item, BaseException) or any(item is s for s in seen):
            continue
        seen.append(item)
        yield item
        todo += [item.__cause__, item.__context__, getattr(item, "reason", None), *item.args]


def _resolution(chain: list[BaseException], where: Where) -> NetworkError | None:
    import socket  # deferred with the rest: only a failed request asks

    for item in chain:
        if isinstance(item, socket.gaierror):
            if item.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5)):
                return NetworkError(f"could not resolve host {where.server}", retry=False)
            return NetworkError(f"could not resolve host {where.server} ({item.strerror})")
    return None


def _proxy(chain: list[BaseException], where: Where, environ: Mapping[str, str]) -> NetworkError | None:
    import requests  # deferred (heavy), as everywhere a request was made

    if not any(isinstance(item, requests.exceptions.ProxyError) for item in chain):
        return None
    proxy, variable = proxy_for(where.scheme, where.host, where.port, environ)
    text = " ".join(str(item) for item in chain)
    named = f"the proxy {shown_proxy(proxy)} ({variable})" if proxy else "the proxy"
    if "407" in text:
        return NetworkError(f"{named} refused the tunnel: 407 Proxy Authentication Required", retry=False)
    if any(isinstance(item, ConnectionRefusedError) for item in chain):
        return NetworkError(f"{named} cannot be reached: connection refused")
    return NetworkError(f"{named} failed to connect to {where.server}")


def _tls(chain: list[BaseException], where: Where, environ: Mapping[str, str]) -> NetworkError | None:
    import ssl  # deferred: a warm run that imports no TLS stack must not pay for it here

    verify = next((item for item in chain if isinstance(item, ssl.SSLCertVerificationError)), None)
    if verify is not None:
        bundle, source = ca_source(environ)
        why = verify.verify_message or "it is not trusted"
        via = f"${source}" if source in CA_VARIABLES else source
        advice = (
            ""
            if source in CA_VARIABLES[:2]
            else "; for a private CA, set REQUESTS_CA_BUNDLE to its certificate"
        )
        return NetworkError(
            f"the TLS certificate of {where.server} is not trusted: {why} (CA certificates: {bundle}, from {via})"
            f"{advice}",
            retry=False,
        )
    text = " ".join(str(item) for item in chain if isinstance(item, ssl.SSLError))
    if "WRONG_VERSION_NUMBER" in text or "record layer failure" in text or "packet length too long" in text:
        port = f" port {where.port}" if where.port else ""
        return NetworkError(
            f"{where.server}{port} did not answer with TLS (a plain http server? then write http://)",
            retry=False,
        )
    if text:
        return NetworkError(f"the TLS handshake with {where.server} failed", retry=False)
    return None


def _connection(
    chain: list[BaseException],
    where: Where,
    timeouts: tuple[float, float] | None,
    received: tuple[int, int | None] | None,
) -> NetworkError:
    import http.client

    import requests  # deferred (heavy), as everywhere a request was made
    import urllib3

    port = f" port {where.port}" if where.port else ""
    for (
        item
    ) in chain:  # the socket's own error first: urllib3 calls a refused connection a connect timeout too
        if isinstance(item, ConnectionRefusedError):
            return NetworkError(f"connection refused by {where.server}{port}", down=where)
        if isinstance(item, ConnectionResetError):
            if received is None:
                return NetworkError(f"the connection to {where.server} was reset")
            done, total = received
            of = f" of {total}" if total is not None else ""
            return NetworkError(f"the connection to {where.server} was reset after {done}{of} bytes")
        if isinstance(item, http.client.RemoteDisconnected):
            return NetworkError(f"{where.server} closed the connection without answering")
        if isinstance(item, OSError) and item.errno in (errno.ENETUNREACH, errno.EHOSTUNREACH):
            return NetworkError(
                f"{where.server}{port} cannot be reached ({os.strerror(item.errno)})", down=where
            )
    kinds = tuple(type(item) for item in chain)
    connect = requests.exceptions.ConnectTimeout | urllib3.exceptions.ConnectTimeoutError
    if any(issubclass(k, connect) for k in kinds):
        within = f" within {timeouts[0]:g} s" if timeouts else ""
        return NetworkError(f"could not connect to {where.server}{port}{within}", down=where)
    if any(
        issubclass(k, requests.exceptions.Timeout | TimeoutError | urllib3.exceptions.TimeoutError)
        for k in kinds
    ):
        within = f" within {timeouts[1]:g} s" if timeouts else ""
        return NetworkError(f"no answer from {where.server}{within}")
    if any(
        issubclass(k, http.client.IncompleteRead | requests.exceptions.ChunkedEncodingError) for k in kinds
    ):
        return closed_early(where, received)
    return NetworkError(f"the connection to {where.server} failed or was closed early")
