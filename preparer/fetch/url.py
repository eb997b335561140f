"""One canonical form of an ``http(s)`` URL, decided once and used by everything that reads it.

The policy, the download cache's key, the fleet cache's key, the report and the transport all see the URL this
module returns, so what is decided on is what is fetched (docs/security.md, "The policy"). The form is RFC 3986's
normalisation, done the way the transport would do it so that the transport has nothing left to change:

- scheme and host lower-cased, the default port dropped (``https://Host:443/`` is ``https://host/``);
- percent-encoding normalised: escapes of unreserved characters decoded (``%7E`` is ``~``, ``%2e`` is ``.``), the
  others upper-cased, characters a URL may not hold encoded;
- dot segments removed, after the decoding above (``/a/%2e%2e/b`` is ``/b``);
- user information kept apart: never part of what is matched, cached or shown.

A URL is refused (:class:`UrlError`) when it cannot be read one way only: a user information holding ``/``, ``?`` or
``#`` (``http://evil:1/x@allowed.example/`` reads as host ``evil`` to the transport, and as a user name before
``allowed.example`` to a reader), a host that is empty, not ASCII or percent-encoded, a port out of range, a
backslash or a control character.
"""

from __future__ import annotations

from urllib.parse import quote

from preparer._numbers import decimal

# No regular expression and no dataclass here: this module is imported by every run that names an http URL, and
# compiling patterns or generating methods at import cost more than all the URLs of a run take to parse.

#: Default ports, dropped from the canonical form.
_DEFAULT_PORTS = {"http": 80, "https": 443}
_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_HEX = frozenset("0123456789abcdefABCDEF")
#: What a path (``/`` included) and a query may hold unencoded: RFC 3986's pchar, ``/``, and ``?`` in a query.
_PATH_SAFE = "!$&'()*+,;=:@/"
_QUERY_SAFE = _PATH_SAFE + "?"
_HOST_NAME = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._~-")
_HOST_ADDRESS = frozenset("0123456789abcdef:.")
_USERINFO = _UNRESERVED | frozenset("!$&'()*+,;=:%")


class UrlError(ValueError):
    """Why a URL is refused; the message holds no part of the URL (it may hold a password)."""


class HttpUrl:
    """An ``http(s)`` URL in canonical form (no fragment: a ``#sha256=`` pin is read before). Not to be changed:
    :meth:`with_userinfo` makes another."""

    __slots__ = ("host", "path", "port", "query", "scheme", "userinfo")

    def __init__(
        self, scheme: str, host: str, port: int | None, path: str, query: str = "", userinfo: str = ""
    ) -> None:
        self.scheme, self.host, self.port = scheme, host, port
        #: The path, never empty (``/`` at least).
        self.path = path
        self.query = query
        #: The user information as written (percent-encoded), without the ``@``; empty when there is none.
        self.userinfo = userinfo

    def _fields(self) -> tuple[str, str, int | None, str, str, str]:
        return self.scheme, self.host, self.port, self.path, self.query, self.userinfo

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HttpUrl) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return f"HttpUrl({self.shown!r})"  # never the user information

    def with_userinfo(self, userinfo: str) -> HttpUrl:
        return HttpUrl(self.scheme, self.host, self.port, self.path, self.query, userinfo)

    @property
    def origin(self) -> str:
        """``scheme://host[:port]``."""
        return f"{self.scheme}://{self.host}" + (f":{self.port}" if self.port is not None else "")

    @property
    def shown(self) -> str:
        """The URL as matched by the policy and shown: no user information, no query (either may hold a secret)."""
        return self.origin + self.path

    @property
    def without_userinfo(self) -> str:
        """The URL as the resource's key: its query (which names what is fetched) kept, no user information."""
        return self.shown + (f"?{self.query}" if self.query else "")

    @property
    def request(self) -> str:
        """The URL as the transport requests it: credentials included."""
        if not self.userinfo:
            return self.without_userinfo
        return f"{self.scheme}://{self.userinfo}@{self.without_userinfo.split('://', 1)[1]}"

    @property
    def private(self) -> bool:
        """Whether something in the URL may be a credential: user information, or a query (``?token=``,
        presigned URLs). Such a URL is never shared beyond this run (the fleet cache)."""
        return bool(self.userinfo or self.query)


def parse_http_url(text: str) -> HttpUrl:
    """The canonical form of the ``http(s)`` URL ``text`` (a fragment is dropped).

    :raises UrlError: ``text`` is not an http(s) URL that reads one way only.
    """
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in _DEFAULT_PORTS:
        raise UrlError("not an http or https URL")
    if "\\" in rest or not rest.isprintable():
        raise UrlError("it holds a control character or a backslash")
    end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
    authority, tail = rest[:end], rest[end:]
    if _userinfo_end(rest) != authority.rfind("@"):
        raise UrlError(
            "it reads two ways: what comes before its last '@' may be a user name and password (so it is not "
            "shown) or a host and a path; percent-encode '/', '?' and '#' in a user name or password (%2F, %3F, "
            "%23), or '@' in a path (%40)"
        )
    userinfo, _, hostport = authority.rpartition("@")
    if not _USERINFO.issuperset(userinfo):
        raise UrlError("its user information holds a character that must be percent-encoded")
    host, port = _host_port(hostport, scheme)
    tail = tail.partition("#")[0]
    path, _, query = tail.partition("?")
    path = _normalise(path, _PATH_SAFE)
    if "%" in path and any(_hides_a_dot_segment(segment) for segment in path.split("/")):
        # ``/a/..%2Fb``: a server that decodes %2F before it resolves dot segments climbs out of ``/a``.
        raise UrlError("a path segment is '.' or '..' once its encoded '/' or '\\' are decoded")
    path = remove_dot_segments(path) or "/"
    return HttpUrl(scheme, host, port, path, _normalise(query, _QUERY_SAFE), userinfo)


def _userinfo_end(rest: str) -> int:
    """Where a reader that knows nothing of URL syntax would end the user information: at the last ``@`` before
    which a ``:`` comes, or no ``/`` (how the preparer's own redaction reads it; -1 for none)."""
    at = rest.rfind("@")
    return at if at >= 0 and (":" in rest[:at] or "/" not in rest[:at]) else -1


def _host_port(hostport: str, scheme: str) -> tuple[str, int | None]:
    host, port_text = hostport, ""
    if hostport.startswith("["):
        close = hostport.find("]")
        if close < 0:
            raise UrlError("its IPv6 host has no closing ']'")
        host, after = hostport[: close + 1], hostport[close + 1 :]
        if after and not after.startswith(":"):
            raise UrlError("its host is not a host name or an address")
        port_text = after[1:]
    elif ":" in hostport:
        host, _, port_text = hostport.rpartition(":")
    host = host.lower()
    name = host[1:-1] if host.startswith("[") else host
    allowed = _HOST_ADDRESS if host.startswith("[") else _HOST_NAME
    if not name or not host.isascii() or not allowed.issuperset(name):
        raise UrlError("its host is empty, holds an escape or is not ASCII (write a name in its xn-- form)")
    port = None
    if port_text:
        port = decimal(port_text)
        if port is None or not 0 < port < 65536:
            raise UrlError("its port is not a number from 1 to 65535")
    return host, None if port == _DEFAULT_PORTS[scheme] else port


def _normalise(text: str, safe: str) -> str:
    """``text`` with escapes of unreserved characters decoded, the others upper-cased, a ``%`` that begins no escape
    encoded, and what may not appear unencoded encoded (as UTF-8): what requests would send, unchanged by it."""
    first, *rest = text.split("%")
    out = [quote(first, safe=safe)]
    for piece in rest:
        if len(piece) >= 2 and piece[0] in _HEX and piece[1] in _HEX:
            char = chr(int(piece[:2], 16))
            out.append(char if char in _UNRESERVED else f"%{piece[:2].upper()}")
            piece = piece[2:]
        else:
            out.append("%25")
        out.append(quote(piece, safe=safe))
    return "".join(out)


def _hides_a_dot_segment(segment: str) -> bool:
    """Whether ``segment`` becomes ``.`` or ``..`` pieces once an encoded ``/`` or ``\\`` in it is decoded."""
    pieces = segment.replace("%2F", "/").replace("%5C", "/").split("/")
    return len(pieces) > 1 and any(piece in (".", "..") for piece in pieces)


def remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4: ``/a/b/../c/./d`` is ``/a/c/d``; no ``..`` climbs above the root."""
    if "." not in path:
        return path
    segments = path.split("/")
    out: list[str] = []
    for segment in segments[1:] if path.startswith("/") else segments:
        if segment == "..":
            if out:
                out.pop()
        elif segment != ".":
            out.append(segment)
    if segments[-1] in (".", ".."):
        out.append("")  # ``/a/b/..`` names the directory ``/a/``
    return ("/" if path.startswith("/") else "") + "/".join(out)


def resolve_redirect(base: HttpUrl, location: str) -> HttpUrl:
    """The canonical URL a ``Location`` header names, relative to ``base`` (RFC 3986 section 5.2).

    :raises UrlError: it names no http(s) URL, or one that is refused.
    """
    location = location.strip()
    if not location or location.startswith("#"):
        return base
    scheme, colon, _ = location.partition(":")
    if colon and scheme[:1].isalpha() and scheme.isascii() and all(c.isalnum() or c in "+.-" for c in scheme):
        return parse_http_url(location)
    if location.startswith("//"):
        return parse_http_url(f"{base.scheme}:{location}")
    if location.startswith("/"):
        return parse_http_url(base.origin + location)
    if location.startswith("?"):
        return parse_http_url(base.origin + base.path + location)
    directory = base.path.rpartition("/")[0]
    return parse_http_url(f"{base.origin}{directory}/{location}")
