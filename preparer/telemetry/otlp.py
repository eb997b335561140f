"""A run's spans as one line of the OpenTelemetry File Exporter's format: OTLP/JSON (the OTLP specification's
"JSON Protobuf Encoding" of a ``TracesData``), which the Collector's ``otlpjsonfile`` receiver reads.

OTLP/JSON is protobuf's JSON mapping with its own exceptions, kept here: field names in lowerCamelCase; trace and
span ids as lower-case hex, not base64; 64-bit integers (times, ``intValue``) as decimal strings; enums (the span's
kind, the status's code) as their numbers; fields left at their defaults left out. Written by the package itself, a
few dozen lines, so that a run that writes telemetry brings no dependency (the OpenTelemetry SDK's exporter would
bring the SDK, the API and protobuf to every run).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from preparer.telemetry.hooks import Value
    from preparer.telemetry.spans import KeptSpan

#: ``Span.SpanKind``: the prepare phase's steps are internal to it.
SPAN_KIND_INTERNAL = 1
#: ``Status.StatusCode``.
STATUS_CODE_ERROR = 2


def any_value(value: Value) -> dict[str, Any]:
    """An ``AnyValue``: a bool before an int (a bool is one in Python), an int as a decimal string."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    return {"stringValue": value}


def attributes(values: Mapping[str, Value]) -> list[dict[str, Any]]:
    """``KeyValue``s, in the order set."""
    return [{"key": key, "value": any_value(value)} for key, value in values.items()]


def encode_span(span: KeptSpan, trace_id: str) -> dict[str, Any]:
    """A ``Span``."""
    encoded: dict[str, Any] = {"traceId": trace_id, "spanId": span.span_id}
    if span.parent_id is not None:
        encoded["parentSpanId"] = span.parent_id
    encoded.update(
        name=span.name,
        kind=SPAN_KIND_INTERNAL,
        startTimeUnixNano=str(span.start_ns),
        endTimeUnixNano=str(span.end_ns),
    )
    if span.attributes:
        encoded["attributes"] = attributes(span.attributes)
    if span.events:
        encoded["events"] = [
            {"timeUnixNano": str(at), "name": name, **({"attributes": attributes(a)} if a else {})}
            for at, name, a in span.events
        ]
    if span.error is not None:
        encoded["status"] = {"message": span.error, "code": STATUS_CODE_ERROR}
    return encoded


def encode_line(
    spans: Iterable[KeptSpan], trace_id: str, resource: Mapping[str, Value], scope: tuple[str, str]
) -> bytes:
    """One line of the file: a ``TracesData`` of ``spans``, from ``resource``, by the instrumentation ``scope``
    (name, version), ending in a newline."""
    document = {
        "resourceSpans": [
            {
                "resource": {"attributes": attributes(resource)},
                "scopeSpans": [
                    {
                        "scope": {"name": scope[0], "version": scope[1]},
                        "spans": [encode_span(span, trace_id) for span in spans],
                    }
                ],
            }
        ]
    }
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
