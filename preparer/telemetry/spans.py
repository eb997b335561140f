"""The span recorders of a run that records (:class:`preparer.telemetry.Recorder`): :class:`Kept`, whose spans
are kept for the run's file (:mod:`preparer.telemetry.otlp` encodes them), and :class:`Forwarded`, whose spans go
to a caller's OpenTelemetry tracer. Both belong to one run, made when it starts and dropped when it ends.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from preparer._record import record

if TYPE_CHECKING:
    from preparer.telemetry.hooks import Handle, Tracer, Value

#: A W3C traceparent (Trace Context, level 1): version, trace id, parent span id, flags; a later version may add
#: fields after a dash.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


@record
class Parent:
    """The trace a run continues: the platform's ``CNB_OTEL_TRACEPARENT``."""

    trace_id: str
    span_id: str


def parse_traceparent(text: str) -> Parent | None:
    """The trace and span ``text`` names (a W3C traceparent), or ``None`` when it is not one (a version ``ff``,
    an id of zeros, a version-00 value with more fields, upper-case hex)."""
    found = _TRACEPARENT.fullmatch(text.strip())
    if found is None:
        return None
    version, trace_id, span_id, _, more = found.groups()
    if version == "ff" or (version == "00" and more) or set(trace_id) == {"0"} or set(span_id) == {"0"}:
        return None
    return Parent(trace_id, span_id)


def new_id(size: int) -> str:
    """A random id of ``size`` bytes, in lower-case hex, never all zeros (an invalid id to OpenTelemetry)."""
    while True:
        made = os.urandom(size)
        if any(made):
            return made.hex()


def failure_of(error: BaseException) -> tuple[str, int | None]:
    """What a span records of ``error``: its type's name (``error.type``) and the exit code it means, when it says
    one. Never its message: the words name URLs, paths and images."""
    inner = getattr(error, "error", None)  # a caller's exception carried out of the run, or a stop's error
    if isinstance(inner, BaseException):
        error = inner
    code = getattr(error, "exit_code", None)
    return type(error).__name__, code if isinstance(code, int) else None


class KeptSpan:
    """A span of a :class:`Kept` recorder: what the file says of it, filled in as the step goes."""

    def __init__(self, owner: Kept, name: str, parent: KeptSpan | None, attributes: Mapping[str, Value],
                 collects: bool) -> None:  # fmt: skip
        self.owner, self.name, self.parent, self.collects = owner, name, parent, collects
        self.span_id = new_id(8)
        self.parent_id = parent.span_id if parent is not None else owner.parent_span
        self.attributes: dict[str, Value] = dict(attributes)
        self.events: list[tuple[int, str, dict[str, Value]]] = []
        #: ``(message, exit code)`` when the step failed.
        self.error: str | None = None
        self.start_ns = time.time_ns()
        self.end_ns = 0

    def set(self, key: str, value: Value) -> None:
        self.attributes[key] = value

    def add(self, key: str, amount: int) -> None:
        with self.owner.lock:  # steps in several threads may count to one fetch
            before = self.attributes.get(key, 0)
            self.attributes[key] = (before if isinstance(before, int) else 0) + amount

    def event(self, name: str, attributes: Mapping[str, Value]) -> None:
        self.events.append((time.time_ns(), name, dict(attributes)))

    def fail(self, error: BaseException) -> None:
        kind, code = failure_of(error)
        self.error = kind
        self.attributes["error.type"] = kind
        if code is not None:
            self.attributes["process.exit.code"] = code

    def end(self) -> None:
        self.end_ns = time.time_ns()
        with self.owner.lock:
            self.owner.ended.append(self)


class Kept:
    """The spans of a run that writes them to its file, in the order they ended."""

    def __init__(self, parent: Parent | None) -> None:
        #: The trace: the platform's, else a new one; the run's first span is a child of the platform's span.
        self.trace_id = parent.trace_id if parent is not None else new_id(16)
        self.parent_span = parent.span_id if parent is not None else None
        self.ended: list[KeptSpan] = []
        self.lock = threading.Lock()

    def start(
        self, name: str, parent: Handle | None, attributes: Mapping[str, Value], collects: bool
    ) -> Handle:
        assert parent is None or isinstance(parent, KeptSpan)
        return KeptSpan(self, name, parent, attributes, collects)


class ForwardedSpan:
    """A span of a :class:`Forwarded` recorder: the caller's tracer's span."""

    def __init__(self, otel: Any, parent: ForwardedSpan | None, lock: threading.Lock, collects: bool) -> None:
        self.otel, self.parent, self.lock, self.collects = otel, parent, lock, collects
        self.totals: dict[str, int] = {}

    def set(self, key: str, value: Value) -> None:
        self.otel.set_attribute(key, value)

    def add(self, key: str, amount: int) -> None:
        with self.lock:
            self.totals[key] = self.totals.get(key, 0) + amount
            self.otel.set_attribute(key, self.totals[key])

    def event(self, name: str, attributes: Mapping[str, Value]) -> None:
        self.otel.add_event(name, dict(attributes))

    def fail(self, error: BaseException) -> None:
        kind, code = failure_of(error)
        self.otel.set_attribute("error.type", kind)
        if code is not None:
            self.otel.set_attribute("process.exit.code", code)
        try:
            from opentelemetry.trace import Status, StatusCode  # deferred: only a caller's tracer brings it
        except ImportError:  # a tracer of another make: its span has the attributes, and no status
            return
        self.otel.set_status(Status(StatusCode.ERROR, kind))

    def end(self) -> None:
        self.otel.end()


class Forwarded:
    """The spans of a run given a caller's tracer: each started on it, the first in the caller's current context
    (a child of the caller's current span), the others in their parent's."""

    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer
        self.lock = threading.Lock()

    def start(
        self, name: str, parent: Handle | None, attributes: Mapping[str, Value], collects: bool
    ) -> Handle:
        if parent is None:
            otel = self.tracer.start_span(name, attributes=dict(attributes))
            return ForwardedSpan(otel, None, self.lock, collects)
        from opentelemetry.trace import set_span_in_context  # deferred: only a caller's tracer brings it

        assert isinstance(parent, ForwardedSpan)
        context = set_span_in_context(parent.otel)
        otel = self.tracer.start_span(name, context=context, attributes=dict(attributes))
        return ForwardedSpan(otel, parent, self.lock, collects)
