"""Bytes handed from the thread that downloads them to a thread that sends them on, as they arrive.

A :class:`Spool` is the body's ``copy_to`` (:func:`~preparer.fetch.streams.stream_body`): the downloading thread
writes every byte to it and never waits. The bytes wait in memory, up to :data:`MEMORY` of them; when the sender
falls further behind than that (a repository slower than the origin), the rest goes through a file in the run's
temporary space, which the sender reads as it grows. Either way the sender gets the bytes in order, a piece at a
time, and is woken once per :data:`PIECE` (every wake-up takes the interpreter lock from the extraction beside it).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Self

#: Bytes a spool keeps in memory before it turns to its file.
MEMORY = 8 << 20
#: Bytes the sender is woken for (but the last ones).
PIECE = 2 << 20


class Abandoned(Exception):
    """The bytes are not to be sent: the download failed or was not kept, or it stalled."""


class Spool:
    """One download's bytes on their way to a sender (see the module).

    The downloading thread calls :meth:`write` for every byte and then :meth:`end`; leaving the ``with`` block
    without it ends the spool as not kept. The sender iterates :meth:`pieces`, then calls :meth:`discard`, as does
    a run that stops.
    """

    def __init__(self, directory: Path, length: int | None = None) -> None:
        self.directory = directory
        #: The number of bytes the download announced (``Content-Length``), if it did.
        self.length = length
        self._queue: deque[bytes] = deque()
        self._queued = 0
        #: Bytes written so far (the sender's stall is measured against it).
        self._written = 0
        self._file: IO[bytes] | None = None
        self._path: Path | None = None
        self._spilled = 0
        #: Bytes of the file the sender has been told about.
        self._announced = 0
        self._ended = False
        self._kept = False
        self._changed = threading.Condition()

    def write(self, data: bytes) -> int:
        with self._changed:
            if self._ended:
                return len(data)
            self._written += len(data)
            if self._file is None and self._queued + len(data) <= MEMORY:
                self._queue.append(data)
                self._queued += len(data)
                if self._queued >= PIECE:
                    self._changed.notify_all()
            else:
                self._to_file(data)
        return len(data)

    def _to_file(self, data: bytes) -> None:
        if self._file is None:
            fd, name = tempfile.mkstemp(prefix="fleet-", dir=self.directory)
            self._file, self._path = os.fdopen(fd, "wb"), Path(name)
            self._changed.notify_all()  # the sender drains the memory first
        self._file.write(data)
        self._spilled += len(data)
        if self._spilled - self._announced >= PIECE:
            self._file.flush()
            self._announced = self._spilled
            self._changed.notify_all()

    def end(self, kept: bool) -> None:
        """The download is over: its bytes are to be sent in full (``kept``), or not at all."""
        with self._changed:
            if not self._ended:
                self._ended, self._kept = True, kept
                if self._file is not None:
                    self._file.close()
                    self._announced = self._spilled
                self._changed.notify_all()

    def discard(self) -> None:
        """Drop the bytes, and any written from now on: the sender is done, never starts, or is to stop (even when
        the download ended as kept: a run that stops while they are sent)."""
        with self._changed:
            self.end(False)  # nothing, when it has ended
            self._kept = False
            self._queue.clear()
            self._queued = 0
            self._changed.notify_all()
        if self._path is not None:
            self._path.unlink(missing_ok=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.end(False)

    def pieces(self, stall: float) -> Iterator[bytes]:
        """The bytes in order, as they are written, until the download ends.

        :raises Abandoned: the bytes are not kept, or nothing was written for ``stall`` seconds.
        """
        reader: IO[bytes] | None = None
        read = 0
        try:
            while True:
                taken, announced, ended, kept = self._take(read, stall)
                if ended and not kept:
                    raise Abandoned("the download is not kept")
                if taken:
                    yield from taken
                elif announced > read:
                    if reader is None:
                        assert self._path is not None
                        reader = self._path.open("rb")
                    data = reader.read(min(announced - read, PIECE))
                    if not data:
                        raise Abandoned("the spooled bytes are gone")
                    read += len(data)
                    yield data
                elif ended:
                    return
        finally:
            if reader is not None:
                reader.close()

    def _take(self, read: int, stall: float) -> tuple[list[bytes], int, bool, bool]:
        """Once there is something to send, or the download ended: ``(the bytes in memory, now taken; bytes of
        the file announced; ended; kept)``."""
        with self._changed:
            seen = self._written
            while not (
                self._queued >= PIECE
                or (self._queued and self._file is not None)  # the memory is sent before the file
                or self._announced > read
                or self._ended
            ):
                if not self._changed.wait(stall) and self._written == seen:
                    raise Abandoned("the download stalled")
                seen = self._written
            taken = list(self._queue)
            self._queue.clear()
            self._queued = 0
            return taken, self._announced, self._ended, self._kept
