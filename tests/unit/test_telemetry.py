"""Build telemetry's parts (docs/telemetry.md): the traceparent read, the hooks inside and outside a recording run,
the OTLP/JSON values, and what the inputs refuse and resolve. The file a real run writes is
tests/integration/test_telemetry.py's."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from preparer import telemetry
from preparer.errors import InvalidInputsError
from preparer.inputs import Inputs, resolve_inputs
from preparer.telemetry.otlp import any_value, encode_line
from preparer.telemetry.spans import Kept, Parent, parse_traceparent

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


@pytest.mark.parametrize(
    ("text", "parent"),
    [
        (f"00-{TRACE}-{SPAN}-01", Parent(TRACE, SPAN)),
        (f"00-{TRACE}-{SPAN}-00", Parent(TRACE, SPAN)),  # not sampled by the platform: still its trace
        (f" 00-{TRACE}-{SPAN}-01\n", Parent(TRACE, SPAN)),
        (f"01-{TRACE}-{SPAN}-01-later", Parent(TRACE, SPAN)),  # a later version may add fields
        (f"00-{TRACE}-{SPAN}-01-later", None),
        (f"ff-{TRACE}-{SPAN}-01", None),
        (f"00-{'0' * 32}-{SPAN}-01", None),
        (f"00-{TRACE}-{'0' * 16}-01", None),
        (f"00-{TRACE.upper()}-{SPAN}-01", None),
        (f"00-{TRACE[:-1]}-{SPAN}-01", None),
        ("", None),
    ],
)
def test_a_traceparent_is_read_as_w3c_trace_context_says(text: str, parent: Parent | None) -> None:
    assert parse_traceparent(text) == parent


def test_outside_a_recording_run_the_hooks_do_nothing_and_make_nothing() -> None:
    assert not telemetry.recording()
    assert telemetry.span("a") is telemetry.span("b")  # one shared null context: nothing made per call

    @telemetry.step("cnb.step", lambda got: {"cnb.got": got})
    def double(x: int) -> int:
        return 2 * x

    assert double(2) == 4
    telemetry.annotate({"k": 1})
    telemetry.count("k", 1)
    telemetry.event("e")
    telemetry.retried(1, 503)


def test_spans_nest_count_to_their_collector_across_threads_and_fail_with_the_error() -> None:
    recorder = Kept(Parent(TRACE, SPAN))

    @telemetry.step("cnb.inner", lambda got: {"cnb.got": got})
    def inner() -> int:
        telemetry.count("cnb.fetch.bytes", 10)
        return 7

    with telemetry.within(recorder, "prepare", {"cnb.dry_run": False}):
        with telemetry.span("cnb.buildpack.fetch", collects=True):
            worker = threading.Thread(target=__import__("contextvars").copy_context().run, args=(inner,))
            worker.start()
            worker.join()
            telemetry.retried(1, None)
        with pytest.raises(InvalidInputsError), telemetry.span("cnb.failing"):
            raise InvalidInputsError("resolve inputs", "a path /secret/x")
    spans = {s.name: s for s in recorder.ended}
    assert set(spans) == {"prepare", "cnb.buildpack.fetch", "cnb.inner", "cnb.failing"}
    assert spans["prepare"].parent_id == SPAN
    assert spans["cnb.inner"].parent_id == spans["cnb.buildpack.fetch"].span_id
    fetch = spans["cnb.buildpack.fetch"].attributes
    assert fetch == {"cnb.fetch.bytes": 10, "cnb.fetch.retries": 1}
    assert spans["cnb.inner"].attributes == {"cnb.got": 7}
    (event,) = spans["cnb.buildpack.fetch"].events
    assert event[1:] == ("cnb.retry", {"http.request.resend_count": 1, "error.type": "network"})
    failing = spans["cnb.failing"]
    assert failing.error == "InvalidInputsError"
    assert failing.attributes == {"error.type": "InvalidInputsError", "process.exit.code": 3}
    line = encode_line(recorder.ended, recorder.trace_id, {"service.name": "preparer"}, ("preparer", "0"))
    assert line.endswith(b"\n") and line.count(b"\n") == 1 and b"/secret/x" not in line
    assert not telemetry.recording()  # the run's context is left as it was


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (True, {"boolValue": True}),
        (3, {"intValue": "3"}),
        (-(2**63), {"intValue": str(-(2**63))}),
        (0.5, {"doubleValue": 0.5}),
        ("é", {"stringValue": "é"}),
    ],
)
def test_values_are_encoded_as_otlp_json_says(value: str | bool | float, encoded: dict[str, object]) -> None:
    assert any_value(value) == encoded
    assert json.loads(json.dumps(any_value(value))) == encoded


def test_inputs_refuse_a_tracer_that_is_not_one_and_values_of_the_wrong_type(tmp_path: Path) -> None:
    dirs = dict.fromkeys(("app_dir", "layers_dir", "platform_dir", "buildpacks_dir", "order_path"), tmp_path)
    with pytest.raises(
        InvalidInputsError, match=r"Inputs.tracer must be an OpenTelemetry tracer .*not object"
    ):
        Inputs(**dirs, tracer=object())  # type: ignore[arg-type]
    with pytest.raises(InvalidInputsError, match=r"Inputs\.telemetry must be bool, not str"):
        Inputs(**dirs, telemetry="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputsError, match=r"Inputs\.traceparent must be str or NoneType, not int"):
        Inputs(**dirs, traceparent=1)  # type: ignore[arg-type]


def test_the_flag_is_before_the_environment_and_the_traceparent_is_read_from_it(tmp_path: Path) -> None:
    environ = {"CNB_PREPARER_TELEMETRY": "true", "CNB_OTEL_TRACEPARENT": f"00-{TRACE}-{SPAN}-01"}
    flags = {"app": str(tmp_path), "download-cache": ""}
    assert resolve_inputs(flags, environ).telemetry is True
    assert resolve_inputs({**flags, "telemetry": False}, environ).telemetry is False
    assert resolve_inputs(flags, environ).traceparent == f"00-{TRACE}-{SPAN}-01"
    assert resolve_inputs(flags, {}).traceparent is None
    assert resolve_inputs(flags, {}).telemetry is False
