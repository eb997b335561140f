"""A warm run's revalidation, asked with one plain socket: whether an origin still serves what this pod's copy
holds (a 304), before requests is imported at all (:func:`probe_unchanged`)."""

from __future__ import annotations

import base64
import re
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import SplitResult, unquote, urlsplit

from preparer import interrupt
from preparer._version import __version__
from preparer.fetch.environment import goes_elsewhere

if TYPE_CHECKING:
    from preparer.fetch.transport import Transport


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
    if parts.scheme not in ("http", "https") or not parts.hostname or goes_elsewhere(transport.environment):
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
