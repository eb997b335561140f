"""Where an archive comes from when no tier has it: its origin, asked through the run's transport (in tests, an
in-memory one: :mod:`~preparer.fetch.mock`), and a warm run's revalidations of this pod's copies, sent together
before the run's fetches start."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from preparer import interrupt
from preparer._record import record
from preparer.errors import FetchError
from preparer.fetch.probe import probe_unchanged
from preparer.fetch.transport import Transport

if TYPE_CHECKING:
    import requests

    from preparer.fetch.locator import HttpLocator
    from preparer.fetch.url import HttpUrl


def conditional(validators: Mapping[str, str]) -> dict[str, str]:
    """The conditional request headers of an origin's validators (``etag``, ``last-modified``)."""
    headers = {}
    if validators.get("etag"):
        headers["If-None-Match"] = validators["etag"]
    if validators.get("last-modified"):
        headers["If-Modified-Since"] = validators["last-modified"]
    return headers


@record
class Origin:
    """Where an archive comes from when no tier has it: its URL, asked through the run's transport, every redirect
    decided by ``hop`` (the policy's ``http.allow``)."""

    locator: HttpLocator
    transport: Transport
    hop: Callable[[HttpUrl], None] | None = None

    @property
    def action(self) -> str:
        return f"download {self.locator.shown}"

    def get(self, headers: dict[str, str] | None = None, check: bool = True) -> requests.Response:
        """One request for the archive (conditional with ``headers``)."""
        return self.transport.get(self.locator.url, headers, action=self.action, check=check, hop=self.hop)

    def unchanged(self, headers: dict[str, str]) -> bool | None:
        """Whether the origin still serves what ``headers`` name (a 304), retried; ``None``: it cannot be asked."""
        if not headers:
            return False
        try:
            response = self.transport.retrying(self.action, lambda: self.get(headers, check=False))
        except FetchError:
            return None
        response.close()
        if response.status_code == 304:
            return True
        return None if response.status_code >= 500 else False

    def probe(self, headers: dict[str, str]) -> bool | None:
        """The same question asked with one plain request (:func:`~preparer.fetch.probe.probe_unchanged`)."""
        return probe_unchanged(self.locator.url, headers, self.transport)


class Revalidations:
    """The revalidation requests of one run, sent together before its fetches start: a warm run asks each origin
    whether this pod's copy is current (one plain request each), and the fetch threads, two to four, would otherwise
    ask one at a time each, a round trip to the origin per buildpack per thread. Each request runs in a thread of its
    own, in a scope inside the run's; the fetch of its archive takes its answer (or asks itself, when there is none).
    :meth:`close` shuts the requests no fetch took (the run failed first), so that no thread outlives its run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._asked: dict[tuple[str, tuple[tuple[str, str], ...]], _Answer] = {}
        self._scope: interrupt.Scope | None = None

    def start(self, origin: Origin, headers: dict[str, str]) -> None:
        """Ask ``origin`` whether the copy ``headers`` name is current, in a thread of its own."""
        answer = _Answer()
        with self._lock:
            if self._asked.setdefault(_asked_key(origin.locator.url, headers), answer) is not answer:
                return  # the same URL twice in a group: asked once
            if self._scope is None:
                self._scope = interrupt.Scope(interrupt.current())
            scope = self._scope
        threading.Thread(target=scope.run(lambda: answer.ask(origin, headers)), name="revalidate",
                         daemon=True).start()  # fmt: skip

    def take(self, url: str, headers: dict[str, str]) -> _Answer | None:
        """The answer asked for ``url`` with ``headers`` (once), if it was."""
        with self._lock:
            return self._asked.pop(_asked_key(url, headers), None)

    def close(self) -> None:
        """The run is over: the requests still under way are shut down."""
        with self._lock:
            scope, self._scope = self._scope, None
            self._asked.clear()
        if scope is not None:
            scope.call_off()
            scope.close()


def _asked_key(url: str, headers: dict[str, str]) -> tuple[str, tuple[tuple[str, str], ...]]:
    return url, tuple(sorted(headers.items()))


class _Answer:
    """One revalidation request's answer (:meth:`Origin.probe`), once it came."""

    def __init__(self) -> None:
        self._came = threading.Event()
        self._value: bool | None = None
        self._error: BaseException | None = None

    def ask(self, origin: Origin, headers: dict[str, str]) -> None:
        try:
            self._value = origin.probe(headers)
        except BaseException as err:  # noqa: BLE001 (raised where the answer is taken, as if asked there)
            self._error = err
        finally:
            self._came.set()

    def wait(self) -> bool | None:
        while not self._came.wait(0.1):
            interrupt.check()
        if self._error is not None:
            raise self._error
        return self._value
