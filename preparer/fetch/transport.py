"""The transport floor: one HTTP session per run, redirects decided hop by hop, timeouts, and the one retry rule.

Everything that talks to a server (http archives, registries, token endpoints, the buildpack registry index)
goes through a :class:`Transport`: connect and read timeouts (10 s and 60 s by default), up to three retries with
exponential backoff (0.5, 1, 2 s) on connection errors, timeouts, truncated bodies and 5xx answers, and no retry
for a 4xx answer or a certificate that is not trusted. requests is imported on the first request, so runs that
download nothing never pay for it. The session itself is :mod:`~preparer.fetch.sessions`'s, the run's time
:mod:`~preparer.fetch.clock`'s, and a warm run's one-socket revalidation :mod:`~preparer.fetch.probe`'s.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from preparer import interrupt, telemetry
from preparer._frozen import FrozenMap, frozen
from preparer._logger import log
from preparer._record import field, record
from preparer.errors import FetchError, NotFoundError, with_fields
from preparer.fetch.clock import Deadline, RunClock
from preparer.fetch.environment import ca_source, netrc_auth, netrc_path, proxy_for
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
    #: The environment that decides how servers are reached: proxies (and ``no_proxy``), CA certificates, the netrc
    #: file (never the process's own). ``None``: the run's (``Inputs.environ``). Given, it is the one source of all
    #: of them for every run the transport is given to, whatever ``Inputs.environ`` says; a read-only copy is kept.
    environ: Mapping[str, str] | None = field(default=None, repr=False)
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

    def __post_init__(self) -> None:
        if self.environ is not None:
            if not isinstance(self.environ, Mapping):
                raise TypeError(f"Transport(environ=...) takes a mapping, not {type(self.environ).__name__}")
            given = frozen(self.environ)  # checked once: the caller's dict may change after
            if not all(isinstance(k, str) and isinstance(v, str) for k, v in given.items()):
                raise TypeError("Transport(environ=...) must map strings to strings")
            self.environ = given

    @property
    def environment(self) -> Mapping[str, str]:
        """The environment requests are sent by: :attr:`environ`, or an empty one (no proxy, the system's CA
        certificates, no netrc) when it names none."""
        return _NOTHING if self.environ is None else self.environ

    def reaching(self, runs: Mapping[str, str]) -> Mapping[str, str]:
        """The environment a run given this transport reaches servers by: the transport's when it names one (the
        one source of proxies, CA certificates and netrc), else the run's own, ``runs``."""
        return runs if self.environ is None else self.environ

    def session(self) -> requests.Session:
        """The shared session: pooled connections and the CA certificates the run's environment names
        (:func:`~preparer.fetch.environment.ca_source`). Every connection it opens is watched (:meth:`watch`).

        :raises NetworkError: the transport is closed (its run is over): nothing is opened after :meth:`close`.
        """
        with self._lock:
            if self._closed:
                raise NetworkError("the run is over: no request is sent after it", retry=False)
            if self._session is None:
                from preparer.fetch.sessions import new_session  # deferred with requests: the first request

                self._session = new_session(
                    self.watch, ca_source(self.environment)[0] if self.verify is None else self.verify
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
                from preparer.fetch.sessions import (
                    tls_context,  # deferred: only a warm run's probe over https
                )

                self._tls = tls_context(ca_source(self.environment)[0])
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
                proxy, variable = proxy_for(target.scheme, target.host, target.port, self.environment)
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
        netrc = netrc_path(self.environment)
        if url.userinfo:
            said = "the credentials in the URL were refused"
        elif "Authorization" in sent:
            said = "the Authorization header sent was refused"
        elif netrc is not None and netrc_auth(url.host, self.environment) is not None:
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
        proxy = proxy_for(url.scheme, url.host, url.port, self.environment)[0]
        down = None if proxy else self._down.get(Where(url.scheme, url.host, url.port).key)
        if down is not None:
            raise _NotAskedAgain(f"{down}, in every attempt earlier in this run: not asked again")
        credentials = (
            None if url.userinfo or "Authorization" in headers else netrc_auth(url.host, self.environment)
        )
        try:
            response = self.session().request(
                method, url.request, headers=headers, stream=True, timeout=timeouts, allow_redirects=False,
                proxies={url.scheme: proxy} if proxy else {}, auth=credentials,
            )  # fmt: skip
        except requests.RequestException as err:
            interrupt.check()  # a connection shut down by a request to stop is not a network failure
            self.clock.check(action)  # nor one the run's time limit closed
            raise failure(
                err, Where(url.scheme, url.host, url.port), timeouts, environ=self.environment
            ) from err
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
                telemetry.retried(number, err.status)
                log.warning("%s: %s; trying again in %g s (attempt %d of %d)", action, err, delay, number + 1,
                            attempts)  # fmt: skip
                interrupt.sleep(delay)
        raise AssertionError("not reached")


def for_run(
    given: Transport | None,
    runs: Mapping[str, str],
    *,
    timeouts: tuple[float, float],
    retries: int,
    deadline: float,
    clock: RunClock,
) -> Transport:
    """A transport of a run: its settings (``timeouts``, ``retries``, the download ``deadline``, the run's
    ``clock``) and a session of its own, so that its connections are the run's: watched by its cancel from before
    they connect, never handed to another run, closed with it. With the caller's transport ``given``
    (``Inputs.transport``), its environment (:meth:`Transport.reaching`) and TLS trust; its session only when it
    was given one with :meth:`Transport.use_session` (an in-memory one), which every run's requests then go to."""
    if given is None:
        return Transport(timeouts=timeouts, retries=retries, deadline=deadline, clock=clock, environ=runs)
    made = Transport(
        timeouts=timeouts, retries=retries, deadline=deadline, clock=clock, environ=given.reaching(runs),
        verify=given.verify,
    )  # fmt: skip
    # Read without its lock: a run never takes the lock of a transport its caller shares (a thread of the caller's
    # holding it when the process forked would leave it held in the child).
    shared = None if given.own_session else given._session
    if shared is not None:
        made.use_session(shared)
    return made


#: The environment of a transport that names none.
_NOTHING: Mapping[str, str] = FrozenMap()

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
