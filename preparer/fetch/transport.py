"""The transport floor: one HTTP session per run, TLS trust, timeouts, and the one retry rule.

Everything that talks to a server (http archives, registries, token endpoints, the buildpack registry index)
goes through a :class:`Transport`: connect and read timeouts (10 s and 60 s by default), up to three retries with
exponential backoff (0.5, 1, 2 s) on connection errors, timeouts, truncated bodies and 5xx answers, and no retry
for a 4xx answer or a certificate that is not trusted. requests is imported on the first request, so runs that
download nothing never pay for it.
"""

from __future__ import annotations

import base64
import contextlib
import re
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar
from urllib.parse import SplitResult, unquote, urlsplit

from preparer import interrupt
from preparer._logger import log
from preparer._record import field, record
from preparer._version import __version__
from preparer.errors import FetchError, NotFoundError, RunLimitReached, with_fields
from preparer.fetch.environment import ca_source, goes_elsewhere, netrc_auth, netrc_path, proxy_for
from preparer.fetch.failures import NetworkError, Where, failure, shown_proxy
from preparer.fetch.url import HttpUrl, UrlError, parse_http_url, resolve_redirect

if TYPE_CHECKING:
    import requests

T = TypeVar("T")


def describe(err: BaseException) -> str:
    """A cause to show for a network failure, in plain words, without URLs, queries or credentials."""
    return str(err) if isinstance(err, NetworkError) else str(failure(err))


def check_status(response: requests.Response, action: str, what: str = "", says: str = "") -> None:
    """Raise for an error answer: a 5xx is transient (:class:`NetworkError`, retried), a 404 is
    :class:`NotFoundError`, any other 4xx a final :class:`FetchError`. ``says``: what the server said of it (a
    registry's error code and message), added in parentheses."""
    if response.status_code < 400:
        return
    response.close()
    status = f"HTTP {response.status_code} {response.reason or _phrase(response.status_code)}".rstrip()
    status += f" ({says})" if says else ""
    if response.status_code >= 500:
        raise NetworkError(status, status=response.status_code)
    error = NotFoundError if response.status_code == 404 else FetchError
    raise with_fields(
        error(action, f"{what}: {status}" if what else status),
        status=response.status_code,
        transient=response.status_code in (408, 425, 429),
    )


def _phrase(code: int) -> str:
    """The standard reason phrase of ``code``, for servers that send none (HTTP/2 has none at all)."""
    import http  # deferred with the rest: only a failed request asks

    try:
        return http.HTTPStatus(code).phrase
    except ValueError:
        return ""


def read_capped(
    response: requests.Response, limit: int, action: str, what: str, deadline: Deadline | None = None
) -> bytes:
    """The whole body of a small document (a manifest, a token answer, an index file), refused past ``limit``
    bytes instead of being read into memory, and past ``deadline`` however steadily its bytes trickle in.

    :raises FetchError: the body is larger than ``limit``, or not over by ``deadline`` (not worth another attempt).
    :raises NetworkError: the connection failed while reading (:func:`~preparer.fetch.failures.failure`).
    """
    chunks, size = [], 0
    try:
        with response:
            while chunk := response.raw.read1(1 << 16, decode_content=True):  # what has arrived
                size += len(chunk)
                if size > limit:
                    raise FetchError(action, f"{what} is larger than {limit} bytes")
                if deadline is not None and deadline.passed():
                    raise deadline.error(action, what)
                chunks.append(chunk)
    except FetchError:
        raise
    except Exception as err:
        interrupt.check()  # a connection shut down by a request to stop
        if deadline is not None and deadline.passed():
            raise deadline.error(action, what) from None
        raise failure(err, Where.of(response.url)) from err
    return b"".join(chunks)


class Deadline:
    """When something must be over (``time.monotonic()``), and what to say when it is not."""

    __slots__ = ("at", "cause", "whole_run")

    def __init__(self, at: float, cause: str, whole_run: bool = False) -> None:
        self.at = at
        #: ``it took longer than 1800 s in all (CNB_PREPARER_DOWNLOAD_TIMEOUT)``.
        self.cause = cause
        #: Whether it is the run's own end (then every fetch of the run is over, and it is said once).
        self.whole_run = whole_run

    def passed(self) -> bool:
        return time.monotonic() > self.at

    def error(self, action: str, what: str = "") -> FetchError:
        """The error of ``action`` for a deadline that passed (``what``: the part of it that was not over)."""
        kind = RunLimitReached if self.whole_run else FetchError
        return kind(action, f"{what}: {self.cause}" if what else self.cause)


class RunClock:
    """One run's time limit (``CNB_PREPARER_RUN_TIMEOUT``): every download and repository read of the run shares
    it. When it passes, every socket the run's requests opened is shut down, so that a thread blocked reading one
    wakes at once, and every fetch ends as a failed fetch (exit 1, nothing installed): many slow servers together
    cannot hold a build for longer than this, whatever each of them is allowed alone."""

    def __init__(self, seconds: float | None = None) -> None:
        import weakref  # deferred with the rest of the fetching machinery

        self.seconds = seconds
        self.ends = None if seconds is None else time.monotonic() + seconds
        self._sockets: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._over = False

    @property
    def cause(self) -> str:
        return f"the run took longer than {self.seconds:g} s in all (CNB_PREPARER_RUN_TIMEOUT)"

    def stop(self) -> None:
        """The run is over: no watchdog is needed any more."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()

    def watch(self, sock: Any) -> None:
        """Shut ``sock`` down when the run's time is up (the watchdog that does it starts with the first socket:
        a run that opens none, a warm one, starts no thread)."""
        if sock is None or self.ends is None:
            return
        with self._lock:
            self._sockets.add(sock)
            over = self._over
            if self._timer is None and not over:
                self._timer = threading.Timer(max(0.0, self.ends - time.monotonic()), self._expire)
                self._timer.daemon = True
                self._timer.start()
        if over:
            _shut(sock)

    def _expire(self) -> None:
        with self._lock:
            self._over = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shut(sock)

    def check(self, action: str) -> None:
        """:raises RunLimitReached: the run's time is up."""
        if self.ends is not None and time.monotonic() >= self.ends:
            raise RunLimitReached(action, self.cause)

    def left(self) -> float | None:
        """Seconds left, or ``None`` without a limit."""
        return None if self.ends is None else max(0.0, self.ends - time.monotonic())

    def deadline(self, within: float | None, cause: str) -> Deadline | None:
        """The earlier of ``within`` seconds from now (said as ``cause``) and the run's end."""
        candidates = [] if within is None else [Deadline(time.monotonic() + within, cause)]
        if self.ends is not None:
            candidates.append(Deadline(self.ends, self.cause, whole_run=True))
        return min(candidates, key=lambda deadline: deadline.at, default=None)


def _shut(sock: Any) -> None:
    with contextlib.suppress(OSError):  # closed already
        sock.shutdown(2)  # socket.SHUT_RDWR, without importing socket


class _NotAskedAgain(NetworkError):
    """A request not sent: its server could not be connected to in any attempt of an earlier request of the run."""


class Unreachable(FetchError):
    """Every attempt failed on the network (a server down, a connection refused or cut): a cached copy may stand
    in, with a warning."""

    transient = True


@record(frozen=False)
class Transport:
    """The run's HTTP client: one pooled ``requests.Session`` made on first use, shared by the fetch threads."""

    #: Seconds to wait for a connection and between bytes.
    timeouts: tuple[float, float] = (10.0, 60.0)
    #: Retries after the first attempt, on connection errors, timeouts, truncated bodies and 5xx.
    retries: int = 3
    #: The first backoff, in seconds; it doubles with every retry.
    backoff: float = 0.5
    #: Seconds one download (one attempt) may take in all.
    deadline: float = 1800.0
    #: The run's time limit, shared by the run's transports.
    clock: RunClock = field(default_factory=RunClock, repr=False)
    #: The run's environment: its proxies, CA certificates and netrc file (never the process's own).
    environ: Mapping[str, str] = field(default_factory=dict, repr=False)
    _session: requests.Session | None = field(default=None, init=False, repr=False)
    #: Whether the session is the transport's own (``False``: one given with :meth:`use_session`).
    own_session: bool = field(default=True, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _tls: Any = field(default=None, init=False, repr=False)
    #: Servers that could not be connected to in any attempt of a request, and why: not asked again in the run.
    _down: dict[tuple[str, str, int | None], str] = field(default_factory=dict, init=False, repr=False)
    #: What the session verifies TLS with instead of the environment's CA certificates (a hosts.toml host's CA
    #: file, or ``False`` for its ``skip_verify``).
    verify: str | bool | None = field(default=None, repr=False)
    #: Transports made from this one (:meth:`variant`), closed with it.
    _variants: list[Transport] = field(default_factory=list, init=False, repr=False)
    _closed: bool = field(default=False, init=False, repr=False)

    def session(self) -> requests.Session:
        """The shared session: pooled connections and the CA certificates the run's environment names
        (:func:`~preparer.fetch.environment.ca_source`). Every connection it opens is watched (:meth:`watch`).

        :raises NetworkError: the transport is closed (its run is over): nothing is opened after :meth:`close`.
        """
        with self._lock:
            if self._closed:
                raise NetworkError("the run is over: no request is sent after it", retry=False)
            if self._session is None:
                self._session = _new_session(
                    self, ca_source(self.environ)[0] if self.verify is None else self.verify
                )
            return self._session

    def variant(
        self, timeouts: tuple[float, float], retries: int, verify: str | bool | None = None
    ) -> Transport:
        """A transport of the same run (its clock and environment) with other timeouts, retries and TLS trust, and
        a session of its own: closed by :meth:`close` with this one."""
        made = Transport(
            timeouts=timeouts, retries=retries, backoff=self.backoff, deadline=self.deadline, clock=self.clock,
            environ=self.environ, verify=verify,
        )  # fmt: skip
        with self._lock:
            if self._closed:
                made._closed = True
            else:
                self._variants.append(made)
            if (
                not self.own_session and self._session is not None
            ):  # a given session: every request goes to it
                made.use_session(self._session)
        return made

    def close(self) -> None:
        """End the run's use of the network: the session's pooled connections are closed, and those of every
        :meth:`variant`. A session given with :meth:`use_session` is the giver's to close. Requests made after it
        fail (:meth:`session`); closing twice does nothing more."""
        with self._lock:
            session = self._session if self.own_session else None
            self._session, self._closed = None, True
            variants, self._variants = self._variants, []
        for variant in variants:
            variant.close()
        if session is not None:
            session.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tls_context(self) -> Any:
        """The run's TLS trust for requests made without the session (the warm probe): the CA certificates its
        environment names, loaded once in the run (never kept beyond it: a bundle changed between runs is read
        again)."""
        with self._lock:
            if self._tls is None:
                self._tls = _tls_context(ca_source(self.environ)[0])
            return self._tls

    def use_session(self, session: requests.Session) -> None:
        """Send every request through ``session`` (an in-memory one: :mod:`~preparer.fetch.mock`); the one-socket
        probe of a revalidation is then not made either."""
        with self._lock:
            self._session, self.own_session = session, False

    def watch(self, sock: Any) -> None:
        """Shut ``sock`` down when the run is asked to stop or its time is up, so that a thread blocked on it (for
        an answer's first byte as for its last) wakes at once."""
        interrupt.watch(sock)
        self.clock.watch(sock)

    def get(
        self,
        url: str,
        headers: dict[str, str] | None = None,
        *,
        action: str,
        check: bool = True,
        hop: Callable[[HttpUrl], None] | None = None,
        method: str = "GET",
    ) -> requests.Response:
        """GET ``url`` (or ``method``: ``HEAD`` for what a plan measures), streaming, following redirects. Connection errors and timeouts become
        :class:`NetworkError`; with ``check``, error answers raise as :func:`check_status` says.

        Redirects are followed here, one hop at a time, each decided on the canonical URL it names
        (:mod:`preparer.fetch.url`): ``https`` to ``http`` is refused, credentials (user information and an
        ``Authorization`` header) go only to the origin they were given for, and ``hop`` is told every URL before
        it is asked (the platform policy refuses what it does not allow by raising).

        :param action: what the request is for, in messages (``download <source>``, ``pull <ref>``).
        :raises FetchError: a redirect to something other than http(s), from https to http, or more than
            :data:`MAX_REDIRECTS` of them.
        """
        try:
            target = parse_http_url(url)
        except UrlError as err:
            raise FetchError(action, f"not a valid URL: {err}") from None
        sent = dict(headers or {})
        for _ in range(MAX_REDIRECTS + 1):
            response = self._get_once(target, sent, action, method)
            location = response.headers.get("Location")
            if response.status_code == 407:  # from a plain http proxy (an https one fails the tunnel)
                response.close()
                proxy, variable = proxy_for(target.scheme, target.host, target.port, self.environ)
                raise FetchError(
                    action,
                    f"the proxy {shown_proxy(proxy)} ({variable}) answered 407 Proxy Authentication Required",
                )
            if response.status_code not in _REDIRECTS or location is None:
                if check and response.status_code == 401:
                    self._unauthorized(response, target, sent, action)
                if check:
                    check_status(response, action)
                return response
            response.close()
            following = _redirect(target, location, action)
            if hop is not None:
                hop(following)
            if following.origin != target.origin:
                sent.pop("Authorization", None)  # as requests does: a credential is for its own origin
            else:
                following = following.with_userinfo(target.userinfo)
            target = following
        raise FetchError(action, f"too many redirects ({MAX_REDIRECTS}), the last to {target.shown}")

    def _unauthorized(
        self, response: requests.Response, url: HttpUrl, sent: dict[str, str], action: str
    ) -> None:
        """Raise for a 401 with a Basic challenge, saying where credentials for the host are read (the URL, the
        netrc file) and whether some were sent; other 401s are :func:`check_status`'s."""
        challenge = response.headers.get("WWW-Authenticate", "")
        if not challenge.lower().startswith("basic"):
            return
        response.close()
        netrc = netrc_path(self.environ)
        if url.userinfo:
            said = "the credentials in the URL were refused"
        elif "Authorization" in sent:
            said = "the Authorization header sent was refused"
        elif netrc is not None and netrc_auth(url.host, self.environ) is not None:
            said = f"the credentials for machine {url.host} in {netrc} were refused"
        else:
            where = f"{netrc}" if netrc is not None else "$NETRC or $HOME/.netrc"
            said = (
                f"{url.host} asks for a user and password (Basic), and none was sent: they are read from the URL "
                f"({url.origin.replace('://', '://USER:PASSWORD@', 1)}/...) or from a netrc file ({where}, machine {url.host})"
            )
        raise with_fields(FetchError(action, f"HTTP 401 Unauthorized: {said}"), status=401)

    def download_deadline(self) -> Deadline | None:
        """When a download starting now must be over: its own limit, or the run's end if sooner."""
        cause = f"it took longer than {self.deadline:g} s in all (CNB_PREPARER_DOWNLOAD_TIMEOUT)"
        return self.clock.deadline(self.deadline, cause)

    def request_timeouts(self, read: float | None = None) -> tuple[float, float]:
        """Seconds to connect and to wait between bytes, never past the run's end."""
        connect, between = self.timeouts[0], read if read is not None else self.timeouts[1]
        left = self.clock.left()
        if left is not None:
            connect, between = min(connect, left) or 0.001, min(between, left) or 0.001
        return connect, between

    def _get_once(
        self, url: HttpUrl, headers: dict[str, str], action: str, method: str = "GET"
    ) -> requests.Response:
        import requests  # deferred (heavy): only runs that download import it

        interrupt.check()
        self.clock.check(action)
        timeouts = self.request_timeouts()
        # The run's environment decides, not the process's (the session trusts no environment of its own).
        proxy = proxy_for(url.scheme, url.host, url.port, self.environ)[0]
        down = None if proxy else self._down.get(Where(url.scheme, url.host, url.port).key)
        if down is not None:
            raise _NotAskedAgain(f"{down}, in every attempt earlier in this run: not asked again")
        credentials = (
            None if url.userinfo or "Authorization" in headers else netrc_auth(url.host, self.environ)
        )
        try:
            response = self.session().request(
                method, url.request, headers=headers, stream=True, timeout=timeouts, allow_redirects=False,
                proxies={url.scheme: proxy} if proxy else {}, auth=credentials,
            )  # fmt: skip
        except requests.RequestException as err:
            interrupt.check()  # a connection shut down by a request to stop is not a network failure
            self.clock.check(action)  # nor one the run's time limit closed
            raise failure(err, Where(url.scheme, url.host, url.port), timeouts, environ=self.environ) from err
        return response

    def retrying(self, action: str, attempt: Callable[[], T]) -> T:
        """Call ``attempt`` until it returns, at most ``retries + 1`` times, sleeping with exponential backoff
        after each :class:`NetworkError`; any other error ends the attempts at once.

        :raises Unreachable: ``failed to <action>: <cause> (after N attempts)`` when every attempt failed.
        """
        attempts = self.retries + 1
        for number in range(1, attempts + 1):
            self.clock.check(action)
            try:
                return attempt()
            except NetworkError as err:
                interrupt.check()  # a connection shut down by a request to stop is not a network failure
                self.clock.check(action)  # not retried: the run's time is up
                if isinstance(err, _NotAskedAgain):
                    raise Unreachable(action, str(err)) from None
                if not err.retry:
                    raise FetchError(action, str(err)) from None
                if number == attempts:
                    if err.down is not None:  # every attempt: the server is down for this run
                        with self._lock:
                            self._down.setdefault(err.down.key, str(err))
                    raise with_fields(
                        Unreachable(action, f"{err} (after {attempts} attempts)"), status=err.status
                    ) from None
                left = self.clock.left()
                delay = min(self.backoff * 2 ** (number - 1), left if left is not None else 1e9)
                log.warning("%s: %s; trying again in %g s (attempt %d of %d)", action, err, delay, number + 1,
                            attempts)  # fmt: skip
                interrupt.sleep(delay)
        raise AssertionError("not reached")


#: Redirects followed for one request (curl's default is 50, requests' 30; a buildpack is not behind ten).
MAX_REDIRECTS = 10
_REDIRECTS = frozenset({301, 302, 303, 307, 308})


def _redirect(current: HttpUrl, location: str, action: str) -> HttpUrl:
    """The canonical URL a redirect from ``current`` leads to, without user information.

    :raises FetchError: it is not http(s), is malformed, or leaves https for http.
    """
    try:
        following = resolve_redirect(current, location)
    except UrlError as err:
        raise FetchError(action, f"the server redirects to a URL that is refused: {err}") from None
    if current.scheme == "https" and following.scheme == "http":
        raise FetchError(
            action, f"the server redirects from https to {following.shown}: plain http is refused after https"
        )
    return following.with_userinfo("")


def _new_session(transport: Transport, verify: str | bool) -> requests.Session:
    import weakref  # deferred with requests

    from requests.adapters import HTTPAdapter

    # urllib3 keeps every pool's connections reachable from a process-wide finalizer: a hook that held the
    # transport would keep the transport, its session and so every pool alive for as long as the process. The hook
    # holds it weakly: a transport nobody closed is still collected, and its connections with it.
    watching = weakref.WeakMethod(transport.watch)

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


def _tls_context(bundle: str) -> Any:
    """The trust the requests session has: the CA certificates ``bundle`` (a file or a directory)."""
    import ssl  # deferred: only a warm run's probe over https needs it

    if Path(bundle).is_dir():
        return ssl.create_default_context(capath=bundle)
    return ssl.create_default_context(cafile=bundle)


def probe_unchanged(url: str, headers: dict[str, str], transport: Transport) -> bool | None:
    """Ask the server whether ``url`` is unchanged (the conditional ``headers``), with one plain request.

    Importing requests, or even http.client, costs more than a warm run's whole revalidation, so this asks with a
    socket: one ``GET`` with ``Connection: close``, of which only the status line is read (at most 4 KiB). ``True``
    means a 304: the cached copy is current. ``False`` means any other answer. ``None`` means no answer (errors,
    redirects, a URL or header this request would not send as requests does), or that requests would not go
    straight to the server (a proxy, a netrc file): the regular path then decides. Nothing from this request is
    ever installed; credentials in the URL are sent as requests sends them (Basic) and never shown.
    """
    parts = urlsplit(url)
    if not transport.own_session:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or goes_elsewhere(transport.environ):
        return None
    request = _probe_request(parts, headers)
    if request is None:
        return None
    from preparer.fetch import dial  # deferred: only warm runs probe

    connect, read = transport.request_timeouts()
    ends = time.monotonic() + read  # the whole probe, however slowly its answer trickles in
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
        # As bytes: a name given as str is encoded with the idna codec, whose import (stringprep, unicodedata)
        # costs a tenth of a warm run's revalidation, for a name that is ASCII (fetch/url.py refuses any other).
        host = parts.hostname.encode("ascii")
        # Watched from before it connects, through the TLS handshake; the run's time bounds it below, without a
        # watchdog thread.
        sock, guard = dial.connect((host, port), connect, interrupt.watch)
        try:
            if parts.scheme == "https":
                sock = transport.tls_context().wrap_socket(sock, server_hostname=parts.hostname)
            sock.settimeout(read)
            sock.sendall(request)
            status = _status_line(sock, ends)
        finally:
            sock.close()
            dial.release(guard)
    except (OSError, ValueError):  # the regular path retries and reports it
        return None
    if status == 304:
        return True
    return None if status is None or 300 <= status < 400 else False


def _probe_request(parts: SplitResult, headers: dict[str, str]) -> bytes | None:
    """The probe's request, or ``None`` when a value holds what a request line or header may not (then requests,
    which quotes and checks them, asks instead)."""
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    fields = {
        "Host": parts.netloc.rpartition("@")[2],
        "User-Agent": f"cnb-preparer/{__version__}",
        "Accept": "*/*",
        **headers,
        "Connection": "close",
    }
    if parts.username is not None:
        userinfo = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        fields["Authorization"] = "Basic " + base64.b64encode(userinfo.encode("latin-1")).decode()
    if not _PLAIN_TARGET.fullmatch(target) or not all(_PLAIN_VALUE.fullmatch(v) for v in fields.values()):
        return None
    lines = [f"GET {target} HTTP/1.1", *(f"{name}: {value}" for name, value in fields.items()), "", ""]
    return "\r\n".join(lines).encode("ascii")


#: What a request target and a header value may hold as sent, unquoted: visible ASCII (and spaces in values).
_PLAIN_TARGET = re.compile(r"[!-~]+")
_PLAIN_VALUE = re.compile(r"[ -~]*")


def _status_line(sock: Any, ends: float) -> int | None:
    """The status code of the answer on ``sock``: ``HTTP/1.x NNN``, read from at most 4 KiB by ``ends``."""
    data = b""
    while b"\r\n" not in data and len(data) < 4096:
        left = ends - time.monotonic()
        if left <= 0:
            raise TimeoutError("the status line took too long")
        sock.settimeout(left)
        chunk = sock.recv(4096 - len(data))
        if not chunk:
            break
        data += chunk
    line = data.partition(b"\r\n")[0].split()
    if len(line) < 2 or not line[0].startswith(b"HTTP/1.") or not line[1].isdigit() or len(line[1]) != 3:
        return None
    return int(line[1])
