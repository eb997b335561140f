"""The floor of a run that installs one local ``.tgz``: what any extractor written in Python must do, and no more.

``python floor_local.py ARCHIVE DEST``: the interpreter starts, imports typer as the command does (the cycle
collector paused), reads the archive, hashes it (SHA-256, as the preparer reports it) and inflates it with ISA-L in
a thread of its own, and writes every entry under ``DEST`` with the fewest system calls a file takes (open, write,
close), in the main thread. No name, link, mode or size is checked, nothing is recorded, no buildpack.toml is read
and no order is written. The benchmark times this beside ``tar -xzf`` of the same archive: the preparer's ratio can
come down to this one, not below it, on the machine that ran it.
"""

from __future__ import annotations

import gc
import hashlib
import os
import queue
import sys
import threading

import isal.isal_zlib as inflating

gc.disable()  # as the command imports typer: with the cycle collector paused, the rest frozen (preparer.__main__)
import typer  # noqa: F401 (the command's own import: part of the floor)

gc.freeze()
gc.enable()

CHUNK = 1 << 20


def main(archive: str, dest: str) -> None:
    chunks: queue.Queue[bytes] = queue.Queue(4)

    def read_ahead() -> None:
        digest, inflater = hashlib.sha256(), inflating.decompressobj(wbits=31)
        with open(archive, "rb") as f:
            while data := f.read(CHUNK):
                digest.update(data)
                chunks.put(inflater.decompress(data))
        chunks.put(b"")

    threading.Thread(target=read_ahead, daemon=True).start()
    stream = _Stream(chunks)
    made = {dest}
    while (header := stream.take(512)) and header != bytes(512):
        name = header[:100].split(b"\0", 1)[0].decode()
        size = int(header[124:136].strip(b" \0") or b"0", 8)
        padding = -size % 512
        path = os.path.join(dest, name)
        if header[156:157] == b"5":
            os.makedirs(path, exist_ok=True)
            made.add(os.path.normpath(path))
            stream.take(size + padding)
            continue
        parent = os.path.normpath(os.path.dirname(path))
        if parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        stream.write_to(fd, size)
        os.close(fd)
        stream.take(padding)


class _Stream:
    """The inflated bytes, taken as they come."""

    def __init__(self, chunks: queue.Queue[bytes]) -> None:
        self.chunks, self.buffer, self.pos = chunks, b"", 0

    def _fill(self) -> bool:
        data = self.chunks.get()
        if data:
            self.buffer, self.pos = self.buffer[self.pos :] + data, 0
        return bool(data)

    def take(self, size: int) -> bytes:
        while len(self.buffer) - self.pos < size and self._fill():
            pass
        data = self.buffer[self.pos : self.pos + size]
        self.pos += len(data)
        return data

    def write_to(self, fd: int, size: int) -> None:
        while size:
            if self.pos == len(self.buffer) and not self._fill():
                return
            view = memoryview(self.buffer)[self.pos : self.pos + size]
            written = os.write(fd, view)
            self.pos += written
            size -= written


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    os._exit(0)  # as the command ends: no interpreter teardown
