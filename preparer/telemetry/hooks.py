"""The hooks of build telemetry (docs/telemetry.md), which :mod:`preparer.telemetry` gives every step.

They are what every step calls, at the top and on the fetch floor alike: :func:`span` around a step (or
:func:`step` on the function that is one), :func:`annotate` and :func:`count` for what the step found out,
:func:`event` for what happened within it. They record into the span recorder of the run the caller is in, which
the entry points set in the run's context (:mod:`preparer.telemetry.run`) and the run's own threads inherit, as
they inherit its run id; outside a run that records, each is one context-variable read and does nothing.

It imports nothing of the package: the fetch floor calls it without reaching the top, and a run that is not asked
for telemetry imports nothing more (the recorder, the OTLP/JSON encoder and OpenTelemetry itself, when a caller
brings a tracer, are imported by the runs that record).
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from functools import wraps
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, TypeVar

#: What an attribute's value may be: OpenTelemetry's primitive values.
Value = str | bool | int | float


class Tracer(Protocol):
    """An OpenTelemetry tracer as the library uses one (``opentelemetry.trace.Tracer``): a caller that already
    traces passes its own (``Inputs.tracer``), and the run's spans go to it, the run's first parented to the
    caller's current span; no file is written then."""

    def start_span(self, name: str, context: Any = ..., kind: Any = ..., attributes: Any = ...) -> Any:
        """A new span ``name``, a child of ``context``'s span (the current one when ``None``)."""


# The rest of the types are for type checkers only: a run pays for no class it does not make.
if TYPE_CHECKING:
    from pathlib import Path

    P = ParamSpec("P")
    R = TypeVar("R")

    class Handle(Protocol):
        """One open span of a recorder (:mod:`preparer.telemetry.spans`)."""

        @property
        def parent(self) -> Handle | None:
            """The span it was opened in (``None``: the run's first)."""

        @property
        def collects(self) -> bool:
            """Whether :func:`count` adds to it (a buildpack's fetch: its bytes and retries, whatever step within)."""

        def set(self, key: str, value: Value) -> None: ...

        def add(self, key: str, amount: int) -> None: ...

        def event(self, name: str, attributes: Mapping[str, Value]) -> None: ...

        def fail(self, error: BaseException) -> None: ...

        def end(self) -> None: ...

    class Recorder(Protocol):
        """Where one run's spans go: kept for its file, or handed to a caller's tracer."""

        def start(
            self, name: str, parent: Handle | None, attributes: Mapping[str, Value], collects: bool
        ) -> Handle:
            """A span opened now."""

    class RunInputs(Protocol):
        """What the run's telemetry reads of its inputs (``preparer.Inputs``'s fields of these names)."""

        @property
        def tracer(self) -> Tracer | None: ...
        @property
        def telemetry(self) -> bool: ...
        @property
        def traceparent(self) -> str | None: ...
        @property
        def dry_run(self) -> bool: ...
        @property
        def layers_dir(self) -> Path: ...
        @property
        def uid(self) -> int | None: ...
        @property
        def gid(self) -> int | None: ...
        @property
        def platform_api(self) -> object: ...
        @property
        def exec_env(self) -> str: ...

    class Decorator(Protocol):
        """What :func:`step` gives: a function's decorator that keeps its type."""

        def __call__(self, function: Callable[P, R], /) -> Callable[P, R]: ...

    class Described(Protocol):
        """A buildpack as a span names it (``BuildpackDescriptor``'s fields)."""

        @property
        def id(self) -> str: ...
        @property
        def version(self) -> str: ...

    class FetchedLike(Protocol):
        """What a buildpack's span says of its fetch's result (``preparer.fetch.base.Fetched``'s fields)."""

        @property
        def top(self) -> Described: ...
        @property
        def via(self) -> str | None: ...
        @property
        def digest(self) -> str | None: ...
        @property
        def signatures(self) -> tuple[object, ...]: ...

    R_fetched = TypeVar("R_fetched", bound=FetchedLike)


#: The span the caller is in, and the recorder of its run (``None``: the run records nothing, or no run).
_current: contextvars.ContextVar[tuple[Recorder, Handle] | None] = contextvars.ContextVar(
    "preparer_span", default=None
)

_NOTHING: AbstractContextManager[None] = nullcontext()


def recording() -> bool:
    """Whether the caller is in a run that records spans (for attributes that cost something to make)."""
    return _current.get() is not None


def span(name: str, attributes: Mapping[str, Value] | None = None, *, collects: bool = False) -> (
    AbstractContextManager[None]
):  # fmt: skip
    """A span ``name`` for the block, a child of the caller's, when the run records; an error leaving the block
    is its status (:meth:`Handle.fail`).

    :param collects: :func:`count` adds to this span from the steps within it.
    """
    current = _current.get()
    if current is None:
        return _NOTHING
    return _opened(current[0], current[1], name, attributes or {}, collects)


@contextmanager
def _opened(
    recorder: Recorder, parent: Handle | None, name: str, attributes: Mapping[str, Value], collects: bool
) -> Iterator[None]:
    handle = recorder.start(name, parent, attributes, collects)
    token = _current.set((recorder, handle))
    try:
        yield
    except BaseException as err:
        handle.fail(err)
        raise
    finally:
        _current.reset(token)
        handle.end()


@contextmanager
def within(recorder: Recorder, name: str, attributes: Mapping[str, Value]) -> Iterator[Handle]:
    """The run's first span, ``name``, recorded by ``recorder`` for the block (the entry points' own)."""
    with _opened(recorder, None, name, attributes, False):
        current = _current.get()
        assert current is not None  # set by _opened for the block
        yield current[1]


def step(name: str, said: Callable[[Any], Mapping[str, Value | None]] | None = None) -> Decorator:
    """The decorated function as a span ``name`` (a step of the run), when the run records; ``said``: the
    attributes its result gives the span (counts, ids and versions; never a URL, an image or a path)."""

    def decorate(function: Callable[P, R]) -> Callable[P, R]:
        @wraps(function)
        def traced(*args: P.args, **kwargs: P.kwargs) -> R:
            current = _current.get()
            if current is None:
                return function(*args, **kwargs)
            with _opened(current[0], current[1], name, {}, False):
                result = function(*args, **kwargs)
                if said is not None:
                    annotate(said(result))
                return result

        return traced

    return decorate


def annotate(attributes: Mapping[str, Value | None]) -> None:
    """Set ``attributes`` on the caller's span (those ``None`` are left out)."""
    current = _current.get()
    if current is None:
        return
    for key, value in attributes.items():
        if value is not None:
            current[1].set(key, value)


def count(key: str, amount: int) -> None:
    """Add ``amount`` to the attribute ``key`` of the span that collects what the caller's step is part of (a
    buildpack's fetch), else the caller's span."""
    current = _current.get()
    if current is None:
        return
    handle: Handle | None = current[1]
    while handle is not None and not handle.collects:
        handle = handle.parent
    (handle or current[1]).add(key, amount)


def event(name: str, attributes: Mapping[str, Value | None] | None = None) -> None:
    """An event ``name`` in the caller's span, now."""
    current = _current.get()
    if current is None:
        return
    current[1].event(name, {k: v for k, v in (attributes or {}).items() if v is not None})


def retried(attempt: int, status: int | None) -> None:
    """A request's ``attempt``-th try failed on the network, or with an answer ``status``, and it is tried again:
    an event of the caller's span, counted on the fetch's (``error.type`` is the status, else ``network``: the
    failure's words name the server, and are not recorded)."""
    if _current.get() is None:
        return
    event("cnb.retry", {"http.request.resend_count": attempt, "error.type": str(status or "network")})
    count("cnb.fetch.retries", 1)


#: The tier that served a fetch, by the name ``Fetched.via`` gives it (``None``: the source itself).
TIERS = {"download cache": "download cache", "cache repository": "fleet", None: "origin"}


def present(key: str, bp_id: str, version: str) -> AbstractContextManager[None]:
    """The span ``cnb.buildpack.fetch`` of a buildpack already in ``<buildpacks>`` (the entry ``key``): the tier
    ``present``."""
    if _current.get() is None:
        return _NOTHING
    attributes: dict[str, Value] = {
        "cnb.entry": key, "cnb.buildpack.id": bp_id, "cnb.buildpack.version": version, "cnb.fetch.tier": "present"
    }  # fmt: skip
    return span("cnb.buildpack.fetch", attributes)


def fetching(key: str, bp_id: str | None, locator: object) -> AbstractContextManager[None]:
    """The span ``cnb.buildpack.fetch`` of the entry ``key``, which collects what its steps count: its id when
    known before, and its kind of source (named by its locator's class, ``HttpLocator``: ``http``; never its URL,
    image or path)."""
    if _current.get() is None:
        return _NOTHING
    kind = type(locator).__name__.removesuffix("Locator").lower()
    attributes: dict[str, Value] = {"cnb.entry": key, "cnb.source.kind": kind}
    if bp_id is not None:
        attributes["cnb.buildpack.id"] = bp_id
    return span("cnb.buildpack.fetch", attributes, collects=True)


def fetched_attributes(result: R_fetched) -> R_fetched:
    """``result``, its buildpack, digest, tier and signatures said on the caller's span (a buildpack's fetch)."""
    if _current.get() is not None:
        annotate({
            "cnb.buildpack.id": result.top.id,
            "cnb.buildpack.version": result.top.version,
            "cnb.fetch.tier": TIERS.get(result.via, result.via),
            "cnb.buildpack.digest": result.digest,
            "cnb.signature.count": len(result.signatures) if result.signatures else None,
        })  # fmt: skip
    return result
