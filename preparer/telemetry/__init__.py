"""Build telemetry: the run's steps as OpenTelemetry spans (docs/telemetry.md).

Every step calls the hooks (:mod:`.hooks`) through this module: :func:`span` around a step (or :func:`step` on the
function that is one), :func:`annotate` and :func:`count` for what it found out, :func:`event` for what happened
within it; the entry points open the run's first span with :func:`traced`. Outside a run that records, a hook is one
context-variable read and does nothing, and a run not asked imports nothing more: the recorders
(:mod:`.spans`), the file (:mod:`.run`) and its encoder (:mod:`.otlp`) are imported by runs that record, and
OpenTelemetry itself only when a caller brings its tracer. Nothing here imports the rest of the package: the fetch
floor calls the hooks without reaching the top.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from preparer.telemetry.hooks import (
    TIERS,
    Tracer,
    Value,
    annotate,
    count,
    event,
    fetched_attributes,
    fetching,
    present,
    recording,
    retried,
    span,
    step,
    within,
)

if TYPE_CHECKING:
    from preparer.telemetry.hooks import RunInputs

__all__ = [
    "TIERS",
    "Tracer",
    "Value",
    "annotate",
    "count",
    "event",
    "fetched_attributes",
    "fetching",
    "present",
    "recording",
    "retried",
    "span",
    "step",
    "traced",
    "within",
]


def traced(inputs: RunInputs, entry: str) -> AbstractContextManager[None]:
    """The block as the run's first span, ``entry`` (``prepare``, ``plan_run``, ``run_plan``), when its inputs ask
    for telemetry or give a tracer (:func:`preparer.telemetry.run.traced`); within a run that records already
    (``prepare``'s own ``plan_run``), nothing more."""
    if recording() or (inputs.tracer is None and not inputs.telemetry and inputs.traceparent is None):
        return nullcontext()
    from preparer.telemetry.run import traced as run_traced  # deferred: only runs that record

    return run_traced(inputs, entry)
