"""Per-file work in forked processes (extracting an archive, installing a cached tree), so that the work of
several buildpacks runs on every core.

Writing thousands of small files is Python work per entry (a header parsed, a name checked, ``open``/``write``/
``close``/``chmod``), and in one process it runs on one core at a time, whatever the number of threads. Here the
fetch thread keeps what releases the interpreter lock (reading the body, hashing it, inflating it) and hands the
plain tar bytes through a pipe to a child it forks, which runs the same reader and the same checks
(:func:`~preparer.fetch.extract.extract_stream`) and sends back what it extracted, or the error. A child never
outlives its extraction: it is killed when the fetch fails or is called off, and it ends when its parent does (the
pipe closes).

Forking is the command's choice, made once for its process (:func:`allow`), as the allocator's tuning is: a
library caller's process (a service with threads of its own) extracts in its threads, as before. An extraction the
platform policy counts (its entries and bytes, against limits shared by the run) stays in the process too, where
the counts are.
"""

from __future__ import annotations

import contextlib
import os
import signal
from typing import TYPE_CHECKING, TypeVar, cast

from preparer import interrupt
from preparer.errors import FetchError

if TYPE_CHECKING:
    from collections.abc import Callable

    from preparer.fetch.streams import PlainChunks, Reader, TarStream

    #: An extraction of the plain tar bytes of a stream: ``extract(stream, at_end)``, ``at_end`` called once the
    #: archive's end marker is read (:func:`preparer.fetch.extract.extract_stream`).
    Extraction = Callable[[TarStream, Callable[[], None]], "T"]

T = TypeVar("T")
#: Bytes read from a pipe at once.
CHUNK = 1 << 20

_allowed = False
#: Whether the processors were counted since :func:`allow` (once, at the first extraction: not at start-up).
_counted = False


def allow() -> None:
    """Extract in forked processes from now on, in this process (the command's), when it has more than one
    processor to run them on."""
    global _allowed, _counted
    _allowed, _counted = hasattr(os, "fork"), False


def enabled() -> bool:
    """Whether per-file work forks (:func:`allow`). Not on one processor: there a child only adds the pipe's copies
    (a pod limited to one CPU took 1.14x as long for eight archives, 7 pairs)."""
    global _allowed, _counted
    if _allowed and not _counted:
        _allowed, _counted = processors() >= 2, True
    return _allowed


def processors() -> float:
    """The processors this process may use: its affinity, and the cgroup's CPU quota (a container's limit)."""
    count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    quota = _cgroup_quota()
    return count if quota is None else min(count, quota)


def _cgroup_quota() -> float | None:
    """The cgroup's CPU limit, in processors (v2's ``cpu.max``, v1's quota and period); ``None``: none, or unknown."""
    v2 = _first_line("/sys/fs/cgroup/cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
    else:
        quota = _first_line("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") or ""
        period = _first_line("/sys/fs/cgroup/cpu/cpu.cfs_period_us") or ""
    if quota.isdigit() and period.isdigit() and int(period) > 0:
        return int(quota) / int(period)
    return None


def _first_line(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.readline().strip()
    except OSError:
        return None


def extract_in_child(fileobj: Reader, extract: Extraction[T], archive: str) -> T:
    """``extract`` of the tar stream ``fileobj`` (gzip or plain), run by a child: what it returns, or raises.

    This thread reads, hashes and inflates ``fileobj`` and writes the plain bytes to the child, until the child has
    read the archive's end marker (it closes its end of the pipe) or the bytes end.

    :raises FetchError: as the extraction would raise it here (the child's own error, sent back).
    """
    # Deferred: the command imports this module before any fetch.
    from preparer.fetch.streams import PlainChunks, TarStream, damage_ahead, damaged

    data_read, data_write = os.pipe()
    _widen(data_write)

    def in_child() -> T:
        return extract(TarStream(_FdReader(data_read), read_ahead=False), lambda: os.close(data_read))

    failure: FetchError | None = None
    chunks = PlainChunks(fileobj)

    def meanwhile() -> None:
        nonlocal failure
        os.close(data_read)
        try:
            failure = _pump(chunks, data_write, archive)
        finally:
            os.close(data_write)

    try:
        extracted = call_in_child(in_child, f"extract {archive}", (data_read,), meanwhile)
    except FetchError:
        # The bytes broke before the child read to their end, or break further on (an inflater may turn damaged
        # data into bytes the child finds are no tar before the inflater finds the damage): they say why.
        ahead = None if failure is not None else damage_ahead(chunks.next)
        cause = failure or (None if ahead is None else damaged(archive, ahead))
        if cause is not None:
            raise cause from None
        raise
    except BaseException:
        if failure is not None:
            raise failure from None
        raise
    if (
        failure is not None
    ):  # the child took the pipe's closing for the end: the bytes did not end as they should
        raise failure
    return extracted


def call_in_child(
    function: Callable[[], T],
    action: str,
    keep: tuple[int, ...] = (),
    meanwhile: Callable[[], None] | None = None,
) -> T:
    """``function()`` run by a forked child (per-file work, on a core of its own): what it returns, or raises.

    The child keeps of this process's descriptors only ``keep`` (and stdio); ``meanwhile()`` runs here while it
    works. The child is killed and reaped when this thread is stopped or ``meanwhile`` fails.

    :raises PreparerError: what ``function`` raised (an error that does not pickle, as a :class:`FetchError`
        naming ``action``).
    """
    # Deferred: the command imports this module before it knows whether it fetches; and what the child uses is
    # imported here, before the fork, so the child imports nothing another thread could be importing meanwhile.
    import pickle  # noqa: F401
    import select  # noqa: F401

    result_read, result_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        _child(function, result_write, keep, action)
    os.close(result_write)
    try:
        if meanwhile is not None:
            meanwhile()
        outcome = _result(result_read, pid, action)
    except BaseException:
        _kill(pid)
        raise
    finally:
        os.close(result_read)
    if isinstance(outcome, BaseException):
        raise outcome
    return cast(T, outcome)  # what our own function returned, pickled


def _widen(pipe: int) -> None:
    """A pipe of 1 MiB (where the system allows it): a 64 KiB one moves a large file in sixteen times as many
    reads and writes, each a switch between the two processes."""
    import fcntl  # deferred: only a forking extraction sizes a pipe

    with contextlib.suppress(OSError):
        fcntl.fcntl(pipe, fcntl.F_SETPIPE_SZ, 1 << 20)


def _pump(chunks: PlainChunks, out: int, archive: str) -> FetchError | None:
    """Write the plain tar bytes of ``chunks`` to ``out`` until they end or the child stops reading; the error
    that broke them (damaged gzip data, a short stream), to raise if the child did not finish first."""
    import zlib  # deferred: loaded with the streams already, named here for its error

    from preparer.fetch.streams import damaged

    try:
        while data := chunks.next():
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
    except BrokenPipeError:
        return None  # the child read the end marker, or refused an entry: its result says which
    except zlib.error as err:
        return damaged(archive, err)
    except EOFError as err:
        return FetchError(f"extract {archive}", f"not a valid tar archive ({err})")
    return None


def _result(result: int, pid: int, action: str) -> object:
    """What the child sent back, once it ends; checked for a request to stop every tenth of a second."""
    import pickle  # deferred: imported before the fork (call_in_child)
    import select

    chunks = []
    while True:
        ready, _, _ = select.select([result], [], [], 0.1)
        if not ready:
            interrupt.check()
            continue
        chunk = os.read(result, CHUNK)
        if not chunk:
            break
        chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    if not chunks:
        return FetchError(action, f"the process doing it ended without a result ({_ended(status)})")
    return pickle.loads(b"".join(chunks))


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


def _kill(pid: int) -> None:
    """End the child and reap it (it may already have ended)."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _child(function: Callable[[], object], result: int, keep: tuple[int, ...], action: str) -> None:
    """The child's whole life: ``function()``, its outcome sent on ``result``, exit."""
    import pickle  # deferred: imported before the fork (call_in_child)

    code = 0
    try:
        # The parent's signal handlers stop runs: here a signal just ends the child (the parent cleans up).
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
        _close_others(result, *keep)
        outcome: object = function()
    except BaseException as err:  # noqa: BLE001 (sent to the parent, which raises it)
        outcome, code = err, 1
    try:
        payload = pickle.dumps(outcome)
    except Exception:  # noqa: BLE001 (an error that does not pickle: its words still reach the parent)
        payload = pickle.dumps(FetchError(action, str(outcome)))
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(result, view) :]
    finally:
        os._exit(code)


def _close_others(*keep: int) -> None:
    """Close every descriptor but stdio and ``keep``: a child holding a copy of another download's socket, a
    lock's file or another child's pipe would keep them open after the parent closes them."""
    start = 3
    for fd in sorted(keep):
        os.closerange(start, fd)
        start = fd + 1
    os.closerange(start, os.sysconf("SC_OPEN_MAX"))


class _FdReader:
    """The child's end of the pipe, as a :class:`~preparer.fetch.streams.Reader`."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self, size: int = -1) -> bytes:
        return os.read(self.fd, CHUNK if size < 0 else size)
