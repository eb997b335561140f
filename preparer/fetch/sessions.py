"""The requests session a transport sends through: pooled connections, every one watched by the run from before
it connects (so that a stop, or the run's time, shuts it at once, also in a TLS handshake or behind a proxy), names
looked up as the run can leave them (:mod:`~preparer.fetch.dial`), and the TLS trust the run's environment names.

Imported with requests, on a run's first request: runs that download nothing never pay for it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from preparer._version import __version__

if TYPE_CHECKING:
    import requests


def new_session(watch: Callable[[Any], None], verify: str | bool) -> requests.Session:
    """A session whose every connection is told to ``watch`` (a transport's bound ``watch``, held weakly) from
    before it connects, verifying TLS with ``verify`` (a CA bundle, a directory of them, or ``False``)."""
    import weakref  # deferred with requests

    from requests.adapters import HTTPAdapter

    # urllib3 keeps every pool's connections reachable from a process-wide finalizer: a hook that held the
    # transport would keep the transport, its session and so every pool alive for as long as the process. The hook
    # holds it weakly: a transport nobody closed is still collected, and its connections with it.
    watching = weakref.WeakMethod(watch)  # a bound method (Transport.watch)

    def on_connect(sock: Any) -> None:
        watch = watching()
        if watch is not None:
            watch(sock)

    watched = _watched_pools(on_connect)

    class Watching(HTTPAdapter):
        def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
            super().init_poolmanager(*args, **kwargs)
            self.poolmanager.pool_classes_by_scheme = watched

        def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
            manager = super().proxy_manager_for(proxy, **kwargs)
            if not proxy.lower().startswith("socks"):
                manager.pool_classes_by_scheme = watched
            return manager

    session = _session()
    session.trust_env = False  # proxies, netrc and CA certificates come from the run's environment
    session.headers["User-Agent"] = f"cnb-preparer/{__version__}"
    session.verify = verify
    adapter = Watching(pool_connections=8, pool_maxsize=8, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def _watched_pools(on_connect: Callable[[Any], None]) -> dict[str, Any]:
    """urllib3's connection pool classes, by scheme, whose connections ``on_connect`` is given to watch."""
    from urllib3.connection import HTTPConnection, HTTPSConnection  # deferred with requests
    from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

    from preparer.fetch import dial  # deferred with requests

    # Every connection is watched from before it connects (a proxy can stall on CONNECT, a server in the TLS
    # handshake or before its first byte), also through an http(s) proxy. (A SOCKS proxy's connections are
    # urllib3's own kind: bounded by the timeouts only.)
    class Watched:
        _guard: Any = None
        sock: Any

        def _new_conn(self) -> Any:
            return _dial(self, on_connect)

        def connect(self) -> None:
            try:
                super().connect()  # type: ignore[misc]  # the connection class it is mixed into
                on_connect(self.sock)  # over TLS, the TLS socket now, watched as itself
            finally:
                dial.release(self._guard)

    class Plain(Watched, HTTPConnection):
        pass

    class Secure(Watched, HTTPSConnection):
        pass

    class PlainPool(HTTPConnectionPool):
        ConnectionCls = Plain

    class SecurePool(HTTPSConnectionPool):
        ConnectionCls = Secure

    return {"http": PlainPool, "https": SecurePool}


def _dial(connection: Any, on_connect: Callable[[Any], None]) -> Any:
    """A new socket for the urllib3 ``connection``, as its own ``_new_conn`` makes one (the same errors), but
    watched by the run from before it connects, its name looked up as the run can leave it (:mod:`.dial`)."""
    import socket  # deferred with requests and urllib3

    from urllib3.exceptions import (  # deferred, as socket
        ConnectTimeoutError,
        NameResolutionError,
        NewConnectionError,
    )
    from urllib3.util.connection import allowed_gai_family

    from preparer.fetch import dial  # deferred with requests

    timeout = connection.timeout if isinstance(connection.timeout, (int, float)) else None
    try:
        sock, connection._guard = dial.connect(
            (connection._dns_host, connection.port), timeout, on_connect,
            source_address=connection.source_address, options=connection.socket_options,
            family=allowed_gai_family(),
        )  # fmt: skip
    except socket.gaierror as err:
        raise NameResolutionError(connection.host, connection, err) from err
    except TimeoutError as err:
        raise ConnectTimeoutError(
            connection, f"Connection to {connection.host} timed out. (connect timeout={timeout})"
        ) from err
    except OSError as err:
        raise NewConnectionError(connection, f"Failed to establish a new connection: {err}") from err
    return sock


def _session() -> requests.Session:
    """A requests session that takes a redirect to a malformed URL for an answer: requests reads the ``Location``
    of every redirect, even one it does not follow, and a malformed one (``http://[::1/x``) raises a bare
    ``ValueError`` there; the answer comes back instead, for :func:`_redirect` to name what is wrong with it."""
    import requests  # deferred (heavy): made on the first request

    class Session(requests.Session):
        def get_redirect_target(self, resp: requests.Response) -> str | None:
            target = super().get_redirect_target(resp)
            try:
                urlsplit(target or "")
            except ValueError:
                return None
            return target

    return Session()


def tls_context(bundle: str) -> Any:
    """The trust the requests session has: the CA certificates ``bundle`` (a file or a directory)."""
    import ssl  # deferred: only a warm run's probe over https needs it

    if Path(bundle).is_dir():
        return ssl.create_default_context(capath=bundle)
    return ssl.create_default_context(cafile=bundle)
