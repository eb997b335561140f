"""Opening connections a run can call off at any moment: while the name is looked up, while the TCP connection is
made, while a proxy is asked to CONNECT and while TLS shakes hands.

A socket is watched (:func:`preparer.interrupt.watch`, and the run's clock) from before it connects, so a request
to stop shuts it down and whatever waits on it (the connection, the proxy's answer to CONNECT, the TLS handshake)
wakes at once. A name lookup (``getaddrinfo``) is a call into the C library that nothing can interrupt, so it is
made in a thread of its own, which the run waits for in short slices and stops waiting for when it is called off or
its connect timeout passes. That thread is then left behind, holding the name and nothing of the run, until the
resolver gives up on its own (``/etc/resolv.conf``'s ``timeout`` and ``attempts``: 5 s and 2 by default, for each
name server); an address written as numbers is never looked up, and takes no thread.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from preparer import interrupt

#: How often a lookup's waiter checks whether its run was called off (the promise is a tenth of a second).
POLL = 0.02

Address = tuple[Any, ...]
AddrInfo = tuple[socket.AddressFamily, socket.SocketKind, int, str, Address]


def resolve(host: str | bytes, port: int, family: int, timeout: float | None) -> Sequence[AddrInfo]:
    """The addresses of ``host`` (``getaddrinfo``, TCP), looked up in a thread of its own while the current run goes
    on; a numeric address is converted in place. A name given as bytes is not encoded again (as :mod:`socket`
    encodes a ``str`` with the idna codec, whose import costs a warm run more than its probe).

    :raises socket.gaierror: the name does not resolve.
    :raises TimeoutError: no answer within ``timeout`` seconds (the connect timeout).
    :raises preparer.interrupt.Stopped: (or another of :func:`~preparer.interrupt.check`'s) the run was called off
        meanwhile; the lookup is left to end on its own.
    """
    if _numeric(host):
        return socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, 0, socket.AI_NUMERICHOST)
    interrupt.check()
    outcome: list[Sequence[AddrInfo] | BaseException] = []
    done = threading.Event()

    def look_up() -> None:
        try:
            outcome.append(socket.getaddrinfo(host, port, family, socket.SOCK_STREAM))
        except BaseException as err:  # noqa: BLE001 - handed to the waiting thread
            outcome.append(err)
        done.set()

    worker = threading.Thread(target=look_up, name="preparer-resolve", daemon=True)
    worker.start()
    ends = None if timeout is None else time.monotonic() + timeout
    while not done.wait(POLL if ends is None else max(0.0, min(POLL, ends - time.monotonic()))):
        interrupt.check()
        if ends is not None and time.monotonic() >= ends:
            raise TimeoutError(f"looking up {host!r} took longer than {timeout:g} s")
    worker.join()  # over: its last instructions only (a run leaves no thread behind when it need not)
    found = outcome[0]
    if isinstance(found, BaseException):
        raise found
    return found


def _numeric(host: str | bytes) -> bool:
    """Whether ``host`` is an IPv4 or IPv6 address (``getaddrinfo`` then asks no resolver)."""
    text = (host.decode("ascii", "replace") if isinstance(host, bytes) else host).partition("%")[0]
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, text)
        except OSError:
            continue
        return True
    return False


def connect(
    address: tuple[str | bytes, int],
    timeout: float | None,
    watch: Callable[[socket.socket], None],
    source_address: tuple[str, int] | None = None,
    options: Sequence[tuple[int, int, int | bytes]] | None = None,
    family: int = socket.AF_UNSPEC,
) -> tuple[socket.socket, socket.socket]:
    """A TCP connection to ``address``, each of the host's addresses tried in turn (as
    :func:`socket.create_connection`), and a duplicate of its descriptor given to ``watch`` before it connects.

    Shutting the duplicate down shuts the connection down (they are one socket), also once TLS has taken over the
    original; the caller closes the duplicate when the connection is made and watched as itself.

    :returns: the socket and its duplicate.
    :raises OSError: as :func:`socket.create_connection` (``socket.gaierror`` when the name does not resolve,
        ``TimeoutError`` when no address answered in time).
    """
    host, port = address
    err: OSError | None = None
    bare = host.strip(b"[]") if isinstance(host, bytes) else host.strip("[]")
    for af, kind, proto, _, where in resolve(bare, port, family, timeout):
        sock = socket.socket(af, kind, proto)
        guard = None
        try:
            for option in options or ():
                sock.setsockopt(*option)
            if timeout is not None:
                sock.settimeout(timeout)
            if source_address:
                sock.bind(source_address)
            guard = sock.dup()
            watch(guard)
            sock.connect(where)
            return sock, guard
        except OSError as failed:
            err = failed
            sock.close()
            if guard is not None:
                guard.close()
            interrupt.check()  # shut down by a request to stop: not a failure to try the next address after
    raise err if err is not None else OSError(f"{host!r} has no address")


def release(guard: socket.socket | None) -> None:
    """Close the duplicate :func:`connect` watched (the connection is watched as itself from now on)."""
    if guard is not None:
        with contextlib.suppress(OSError):
            guard.close()
