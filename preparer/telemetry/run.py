"""A run's telemetry from its inputs: whether it records, to what, and its file (docs/telemetry.md).

A run records when the platform asks (``-telemetry``, ``CNB_PREPARER_TELEMETRY``) or gives a trace to continue
(``CNB_OTEL_TRACEPARENT``): its spans are appended to ``<layers>/tracing/lifecycle/prepare.jsonl`` as one line of
OTLP/JSON when it ends, whatever ended it. A library caller's tracer (``Inputs.tracer``) gets the spans instead,
and no file is written. A file that cannot be written is a warning, never a failed build; a dry run writes none.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from preparer._fs import UnsafeDirectory, build_owner, make_dirs, open_dir, open_subdir
from preparer._logger import log
from preparer._version import __version__
from preparer.telemetry.hooks import within
from preparer.telemetry.spans import Forwarded, Kept, Parent, parse_traceparent

if TYPE_CHECKING:
    from preparer.telemetry.hooks import Recorder, RunInputs, Value

#: Where below ``<layers>`` the file goes: the draft Platform API's place for a lifecycle phase's telemetry.
FILE = ("tracing", "lifecycle", "prepare.jsonl")
#: The instrumentation scope of every span.
SCOPE = ("preparer", __version__)
#: The file's mode: group-readable (the draft: a platform's collector reads it as the build's group).
FILE_MODE = 0o640
DIR_MODE = 0o755


def trace_file(inputs: RunInputs) -> Path | None:
    """Where the run's telemetry is appended, or ``None`` when it writes none (not asked, or a caller's tracer)."""
    if inputs.tracer is not None or not (inputs.telemetry or inputs.traceparent is not None):
        return None
    return inputs.layers_dir.joinpath(*FILE)


@contextmanager
def traced(inputs: RunInputs, entry: str) -> Iterator[None]:
    """The block as the run's first span, ``entry`` (``prepare``, ``plan_run``, ``run_plan``), when the run records;
    :func:`preparer.telemetry.traced` asks it only of a run whose inputs ask for telemetry."""
    path = trace_file(inputs)
    recorder: Recorder
    if inputs.tracer is not None:
        recorder = Forwarded(inputs.tracer)
    elif path is None or inputs.dry_run:  # a dry run writes none: its account says where a run would
        yield
        return
    else:
        recorder = Kept(_parent(inputs.traceparent))
    try:
        with within(recorder, entry, _run_attributes(inputs)):
            yield
    finally:
        if isinstance(recorder, Kept) and path is not None:
            append_spans(recorder, path, inputs)


def _parent(traceparent: str | None) -> Parent | None:
    if traceparent is None:
        return None
    parent = parse_traceparent(traceparent)
    if parent is None:
        log.warning(
            "CNB_OTEL_TRACEPARENT is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>): a new trace"
        )
    return parent


def _run_attributes(inputs: RunInputs) -> dict[str, Value]:
    return {
        "cnb.platform.api": str(inputs.platform_api),
        "cnb.exec_env": inputs.exec_env,
        "cnb.dry_run": inputs.dry_run,
    }


def resource() -> Mapping[str, Value]:
    """The resource every line names: the service, as OpenTelemetry's semantic conventions name one."""
    return {"service.name": "preparer", "service.version": __version__, "cnb.phase": "prepare"}


def append_spans(recorder: Kept, path: Path, inputs: RunInputs) -> bool:
    """Append the run's spans to ``path`` (below ``<layers>``) as one line, written whole in one ``write`` to a
    file opened for appending (never truncated), group-readable and the build user's; a warning when it cannot be.

    :returns: whether it was written.
    """
    from preparer.telemetry.otlp import encode_line  # deferred: only runs that write a file encode

    spans = sorted(recorder.ended, key=lambda s: s.start_ns)
    line = encode_line(spans, recorder.trace_id, resource(), SCOPE)
    try:
        _append(line, path, inputs.layers_dir, build_owner(inputs.uid, inputs.gid))
    except OSError as err:
        log.warning("the run's telemetry is not written to %s: %s", path, err.strerror or err)
        return False
    return True


def _append(line: bytes, path: Path, layers: Path, owner: tuple[int, int] | None) -> None:
    """Below ``<layers>`` (which the build user can write), no link is followed; directories made are the build
    user's, so that phases running as the build user write beside the file.

    :raises OSError: it cannot be written whole.
    """
    make_dirs(layers)
    fds = [open_dir(layers)]
    try:
        current = layers
        for name in path.relative_to(layers).parts[:-1]:
            current = current / name
            fd, made = open_subdir(fds[-1], name, current, create=True, mode=DIR_MODE)
            fds.append(fd)
            if made and owner is not None:
                os.fchown(fd, *owner)
        file, made = _opened_for_appending(path, fds[-1])
        fds.append(file)
        if not _regular(file):
            raise UnsafeDirectory(errno.EINVAL, f"{path} is not a regular file")
        if made:  # one another phase made is appended to as it is
            os.fchmod(file, FILE_MODE)
            if owner is not None:
                os.fchown(file, *owner)
        written = os.write(file, line)
        if written != len(line):
            raise OSError(errno.ENOSPC, f"only {written} of the line's {len(line)} bytes were written")
    finally:
        for fd in reversed(fds):
            os.close(fd)


def _opened_for_appending(path: Path, directory: int) -> tuple[int, bool]:
    """The file ``path`` (in ``directory``) opened to append to, never through a link nor waiting on a FIFO, and
    whether it was made now."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        return os.open(path.name, flags | os.O_CREAT | os.O_EXCL, FILE_MODE, dir_fd=directory), True
    except FileExistsError:
        return os.open(path.name, flags, dir_fd=directory), False


def _regular(fd: int) -> bool:
    import stat  # deferred: only runs that write telemetry

    return stat.S_ISREG(os.fstat(fd).st_mode)
