"""Byte streams between a source and the extractor: hashing, counting, bounding, decompressing.

Every body is read once, front to back, in large chunks, and hashed on the way, so memory stays flat whatever its
size and a digest is known the moment the body ends. gzip is told by its magic bytes, never by a name.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import re
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol, Self, TypeVar

from preparer import interrupt, telemetry
from preparer._fs import keeping_copy
from preparer._numbers import decimal
from preparer.errors import DigestMismatch, FetchError
from preparer.fetch.clock import Deadline
from preparer.fetch.failures import Where, closed_early, failure
from preparer.fetch.oci import memory

if TYPE_CHECKING:
    import requests

    from preparer.fetch.guard import Guard

T = TypeVar("T")

#: The size of every read: large enough that per-read overhead vanishes, small enough to keep memory flat.
CHUNK = 1 << 20
#: The most bytes a socket read or an inflating step makes at once. ISA-L asked for 1 MiB at a time held 11 MiB
#: more than zlib does, and a socket read asked for 1 MiB allocates 1 MiB to return what has arrived (tens of KiB):
#: both left holes in the heaps that a 1 GiB buildpack grew to 40 MiB.
STEP = 1 << 18
_GZIP_MAGIC = b"\x1f\x8b"
#: What may follow an archive's end marker (tar pads to 10 KiB records; gzip adds its trailer): more is refused,
#: so a body of endless zeros after an end marker ends instead of being read forever.
MAX_TRAILING = 1 << 20
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}\Z")
_PROGRESS_EVERY = 0.25  # seconds between progress reports of one download

#: Progress callback: ``(source, bytes_done, bytes_total or None)``; ``(source, 0, 0)`` is a cache hit.
ProgressFn = Callable[[str, int, "int | None"], None]


def sha256_of(data: bytes) -> str:
    """``sha256:<hex>`` of ``data``."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


def is_digest(value: object) -> bool:
    """Whether ``value`` is a ``sha256:<64 lowercase hex>`` digest (the only algorithm read here)."""
    return isinstance(value, str) and _DIGEST.match(value) is not None


def verify_digest(got: str, expected: str, action: str, mismatch: str | None = None) -> None:
    """The one digest check: what was read must hash to ``expected``.

    :param mismatch: the cause to give (with ``{expected}`` and ``{got}`` filled in); by default
        ``digest mismatch: expected <expected>, got <got>``.
    :raises FetchError: on a mismatch.
    """
    if got != expected:
        template = mismatch or "digest mismatch: expected {expected}, got {got}"
        error = DigestMismatch(action, template.format(expected=expected, got=got))
        error.expected, error.got = expected, got
        raise error


def verify_file(path: Path, digest: str) -> bool:
    """Whether the file at ``path`` hashes to ``digest`` (read back from a cache before it is used)."""
    sha256 = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            sha256.update(chunk)
    return "sha256:" + sha256.hexdigest() == digest


class Reader(Protocol):
    """What every body is read through: a file, a response, a counting or hashing reader (``read`` only)."""

    def read(self, size: int = -1, /) -> bytes: ...


class Sink(Protocol):
    """Where a copy of a body's bytes goes: a file, or an upload fed as the bytes arrive."""

    def write(self, data: bytes, /) -> int: ...


class HashingReader:
    """Reads ``stream`` while computing the sha256 and the size of everything read (and, with ``copy_to``, writing
    every byte read there too)."""

    def __init__(self, stream: Reader, copy_to: Sink | None = None) -> None:
        self.stream, self.copy_to = stream, copy_to
        self.sha256 = hashlib.sha256()
        self.size = 0

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.sha256.update(data)
        self.size += len(data)
        if self.copy_to is not None:
            self.copy_to.write(data)
        return data

    def drain(self, limit: int | None = None, action: str = "read") -> None:
        """Read to the end (a tar stream may stop before its padding), so the digest covers every byte.

        :param limit: at most this many more bytes; past it, :class:`FetchError` (``action``).
        """
        start = self.size
        while self.read(CHUNK):
            if limit is not None and self.size - start > limit:
                raise FetchError(action, f"more than {limit} bytes follow the end of the archive")

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha256.hexdigest()


class NetworkReader:
    """A response body as a file: counts bytes, reports progress, and turns any read error into NetworkError."""

    def __init__(
        self,
        raw: Any,
        source: str,
        total: int | None,
        progress: ProgressFn,
        deadline: Deadline | None = None,
        guard: Guard | None = None,
        where: Where | None = None,
    ) -> None:
        self.raw, self.source, self.total, self.progress = raw, source, total, progress
        self.guard, self.where = guard, where
        self.size = 0
        self.reported = 0.0
        self.deadline = deadline
        self._read1: Callable[[int], bytes] = getattr(raw, "read1", None) or raw.read

    def read(self, size: int = -1) -> bytes:
        # A read of ``size`` bytes is made of reads of what has arrived (read1), so the deadline is checked while
        # a server trickles bytes slowly enough to fill one large read for hours without tripping a socket timeout.
        wanted = size if size >= 0 else 1 << 62
        chunks: list[bytes] = []
        while wanted > 0:
            try:
                chunk: bytes = self._read1(min(wanted, STEP))
            except Exception as err:
                interrupt.check()  # a socket shut down by a request to stop (or the group's fetches called off)
                self._check_deadline()  # a socket shut down when the run's time was up
                raise failure(err, self.where, received=(self.size, self.total)) from err
            if not chunk:
                break
            chunks.append(chunk)
            wanted -= len(chunk)
            self._count(len(chunk))
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if not data:
            self._count(0)
        return data

    def _count(self, received: int) -> None:
        interrupt.check()
        if self.guard is not None:
            self.guard.downloaded(received)
        self.size += received
        self._check_deadline()
        now = time.monotonic()
        if now - self.reported >= _PROGRESS_EVERY or not received:
            self.reported = now
            self.progress(self.source, self.size, self.total)

    def _check_deadline(self) -> None:
        """:raises FetchError: the deadline has passed (final, not retried: another attempt would take as long)."""
        if self.deadline is not None and self.deadline.passed():
            raise self.deadline.error(f"download {self.source}")


def stream_body(
    response: requests.Response,
    source: str,
    progress: ProgressFn,
    consume: Callable[[Reader], T],
    trailing: int | None = None,
    deadline: Deadline | None = None,
    guard: Guard | None = None,
    copy_to: Sink | None = None,
) -> tuple[T, str, int]:
    """Feed the body to ``consume`` while hashing it, read it to its end, and check its length against
    ``Content-Length``. Returns ``(what consume returned, digest, size)``.

    :param trailing: at most this many bytes may follow what ``consume`` read (an archive's end marker).
    :param deadline: when the whole body must have arrived (:meth:`Transport.download_deadline`).
    :param guard: the policy's limits, charged every byte as it arrives.
    :param copy_to: also gets every byte of the body, unchanged (what the fleet cache writes back).
    :raises NetworkError: the body ended early or the connection failed (worth another attempt).
    :raises FetchError: more than ``trailing`` bytes after what ``consume`` read.
    """
    length = response.headers.get("Content-Length")
    total = decimal(length or "")
    response.raw.decode_content = False
    where = Where.of(response.url)
    body = NetworkReader(response.raw, source, total, progress, deadline, guard, where)
    hashing = HashingReader(body, copy_to)
    with contextlib.closing(response):
        result = consume(hashing)
        hashing.drain(trailing, f"download {source}")
    if total is not None and hashing.size != total:
        raise closed_early(where, (hashing.size, total))
    progress(source, hashing.size, hashing.size)
    telemetry.count("cnb.fetch.bytes", hashing.size)
    return result, hashing.digest, hashing.size


class Tee:
    """Reads ``stream`` and writes what it read to ``out``; stops past ``limit`` bytes (``over`` is then set)."""

    def __init__(self, stream: Reader, out: IO[bytes], limit: int | None) -> None:
        self.stream, self.out, self.limit = stream, out, limit
        self.count = 0
        self.over = False

    def read(self, size: int = -1) -> bytes:
        if self.over:
            return b""
        if self.limit is not None:
            room = self.limit - self.count + 1  # one byte more than allowed shows that there is more
            size = room if size < 0 else min(size, room)
        data = self.stream.read(size)
        self.count += len(data)
        if self.limit is not None and self.count > self.limit:
            self.over = True
            return b""
        # The kept copy's disk, not the reader's: its caller tells them apart. Flushed at once, so that no write
        # is left for ``close``, where a full disk could not be told from the reader's.
        with keeping_copy():
            self.out.write(data)
            self.out.flush()
        return data

    def drain(self) -> None:
        while self.read(CHUNK):
            pass


def _inflating() -> Any:
    """The module that inflates gzip data: ISA-L's (isal), which inflates as zlib does at 1.6 to 2.5 times its
    speed, else zlib (where its wheel cannot be had). Both have ``decompressobj`` and ``error``."""
    try:
        from isal import isal_zlib  # deferred: only gzip streams need it
    except ImportError:  # pragma: no cover (a dependency)
        return zlib
    return isal_zlib


def damaged(archive: str, err: BaseException) -> FetchError:
    """The error of the archive whose gzip data is damaged (or cut short)."""
    return FetchError(f"extract {archive}", f"the gzip data is damaged ({err})")


def damage_ahead(next_chunk: Callable[[], bytes], limit: int = MAX_TRAILING) -> zlib.error | None:
    """The error of gzip data damaged within ``limit`` more plain bytes of ``next_chunk``, if it is: an inflater
    may turn damaged data into bytes before it finds the damage (ISA-L does), and the damage is the cause to name
    when what was read is no tar."""
    try:
        while limit > 0 and (data := next_chunk()):
            limit -= len(data)
    except zlib.error as err:
        return err
    except (ValueError, EOFError, OSError):
        pass
    return None


class PlainChunks:
    """The plain tar bytes of ``source``, a chunk at a time: read, and inflated when gzip (told by its magic
    bytes, not by a name). Damaged gzip data is a :class:`zlib.error`, whichever inflater read it."""

    def __init__(self, source: Reader) -> None:
        self.source = source
        self.until_release = memory.RELEASE_EVERY  # plain bytes until the heaps' free memory is given back
        self.pending = source.read(CHUNK)  # raw bytes not yet inflated
        self.inflating: Any = _inflating() if self.pending[:2] == _GZIP_MAGIC else None
        self.inflater = self.inflating.decompressobj(wbits=31) if self.inflating is not None else None

    def next(self) -> bytes:
        """The next chunk; ``b""`` at the end.

        :raises zlib.error: the compressed data is damaged, or ends before its end (which inflaters tell apart
            differently: a damaged block may read as a stream that wants more).
        """
        while True:
            if not self.pending:
                self.pending = self.source.read(CHUNK)
                if not self.pending:
                    if self.inflater is not None and not self.inflater.eof:
                        raise zlib.error("it ends before the compressed stream does: truncated or damaged")
                    return b""
            if self.inflater is None:
                data, self.pending = self.pending, b""
            else:
                if self.inflater.eof:  # the next gzip member starts here; bytes that are none are trailing
                    if self.pending[:2] != _GZIP_MAGIC:
                        return b""
                    self.inflater = self.inflating.decompressobj(wbits=31)
                try:
                    data = self.inflater.decompress(self.pending, STEP)
                except self.inflating.error as err:
                    raise zlib.error(str(err)) from err
                self.pending = self.inflater.unconsumed_tail or self.inflater.unused_data
            if data:
                self.until_release -= len(data)
                if self.until_release <= 0:
                    self.until_release = memory.RELEASE_EVERY
                    memory.release()
                return data


class _ReadAhead:
    """:class:`PlainChunks` produced by a thread of its own, a few chunks ahead of the reader: reading, hashing and
    inflating run outside the interpreter lock, so they overlap the writing of the files."""

    def __init__(self, chunks: PlainChunks, depth: int = 8) -> None:
        self.chunks = chunks
        self.queue: queue.Queue[bytes | BaseException] = queue.Queue(depth)
        self.stop = threading.Event()
        self.ended = False
        # In the run's context: it stops with the run (or its group of fetches), and its sockets are the run's.
        self.thread = threading.Thread(target=interrupt.in_context(self._run), name="read-ahead", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                item: bytes | BaseException = self.chunks.next()
            except BaseException as err:  # noqa: BLE001 (handed to the reader, which raises it)
                item = err
            self.queue.put(item)
            if not isinstance(item, bytes) or not item:
                return

    def next(self, waits_without: threading.Lock | None = None) -> bytes:
        """The next chunk; while none is ready, ``waits_without`` (held by the caller) is let go. After the end
        (``b""``), the end again: the thread that read ahead has stopped."""
        if self.ended:
            return b""
        try:
            item = self.queue.get_nowait()
        except queue.Empty:
            if waits_without is None:
                item = self.queue.get()
            else:
                waits_without.release()
                try:
                    item = self.queue.get()
                finally:
                    waits_without.acquire()
        if isinstance(item, BaseException):
            raise item
        self.ended = not item
        return item

    def close(self) -> None:
        """Stop reading ahead; when this returns, no other thread reads the source any more."""
        self.stop.set()
        while self.thread.is_alive():
            with contextlib.suppress(queue.Empty):
                self.queue.get(timeout=0.05)
        self.thread.join()


class _InLine:
    """:class:`PlainChunks` read by the reader's own thread (a process that does nothing else: a forked extractor)."""

    def __init__(self, chunks: PlainChunks) -> None:
        self.chunks = chunks

    def next(self, waits_without: threading.Lock | None = None) -> bytes:
        return self.chunks.next()

    def close(self) -> None:
        """Nothing runs beside the reader."""


class TarStream:
    """The plain tar bytes of a stream (gzip or not), read in large chunks a few ahead of the reader, and handed
    on without copies: headers by :meth:`read`, file data by :meth:`copy_to` straight into a file. Close it (or
    use it as a context manager) before reading the source again.

    Decompressing, like hashing and writing, runs outside the interpreter lock, so it overlaps the writing.

    :param waits_without: a lock the reader holds while it works and lets go of while it waits for bytes (so that
        other extractions can use it meanwhile).
    """

    def __init__(
        self, source: Reader, waits_without: threading.Lock | None = None, read_ahead: bool = True
    ) -> None:
        self.buffer = b""
        self.pos = 0
        self.chunks: _ReadAhead | _InLine = (
            _ReadAhead(PlainChunks(source)) if read_ahead else _InLine(PlainChunks(source))
        )
        self.waits_without = waits_without

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.chunks.close()

    def _fill(self) -> bool:
        """More bytes into the buffer (what was left of it is kept); whether there were any."""
        data = self.chunks.next(self.waits_without)
        if not data:
            return False
        rest = self.buffer[self.pos :]
        self.buffer, self.pos = (rest + data if rest else data), 0
        return True

    def read(self, size: int) -> bytes:
        """Exactly ``size`` bytes, fewer only at the end of the stream."""
        while len(self.buffer) - self.pos < size:
            if not self._fill():
                break
        data = self.buffer[self.pos : self.pos + size]
        self.pos += len(data)
        return data

    def copy_to(self, fd: int, size: int) -> None:
        """Write the next ``size`` bytes to the file ``fd``.

        :raises EOFError: the stream ends first.
        """
        while size:
            if self.pos == len(self.buffer) and not self._fill():
                raise EOFError("the archive ended in the middle of a file")
            view = memoryview(self.buffer)[self.pos : self.pos + size]
            while view:
                written = os.write(fd, view)
                view = view[written:]
                self.pos += written
                size -= written

    def finish(self, limit: int) -> int:
        """Read the stream to its end (every gzip member's checksum and length checked as it ends), passing over at
        most ``limit`` bytes; how many there were. What follows the last member is the caller's.

        :raises ValueError: more than ``limit`` bytes follow.
        :raises zlib.error: the gzip data is damaged or cut short.
        """
        left = len(self.buffer) - self.pos
        self.buffer, self.pos = b"", 0
        while left <= limit:
            data = self.chunks.next(self.waits_without)
            if not data:
                return left
            left += len(data)
        raise ValueError(f"more than {limit} bytes follow the end of the archive")

    def skip(self, size: int) -> None:
        """Pass over the next ``size`` bytes.

        :raises EOFError: the stream ends first.
        """
        while size:
            if self.pos == len(self.buffer) and not self._fill():
                raise EOFError("the archive ended in the middle of an entry")
            step = min(size, len(self.buffer) - self.pos)
            self.pos += step
            size -= step
