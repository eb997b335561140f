"""The spool between a download and its upload to the fleet cache (preparer/fetch/spool.py): real threads, real
files."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from preparer.fetch.spool import MEMORY, Abandoned, Spool

MIB = 1 << 20


def test_a_sender_within_memory_gets_every_byte_in_order_and_no_file_is_written(tmp_path: Path) -> None:
    data = [os.urandom(MIB) for _ in range(MEMORY // MIB)]
    spool = Spool(tmp_path, length=MEMORY)
    received: list[bytes] = []
    sender = threading.Thread(target=lambda: received.extend(spool.pieces(stall=10)))
    sender.start()
    with spool:
        for piece in data:
            spool.write(piece)
            assert list(tmp_path.iterdir()) == []
        spool.end(True)
    sender.join(10)
    assert b"".join(received) == b"".join(data)


def test_a_sender_that_falls_behind_never_holds_the_writer_back(tmp_path: Path) -> None:
    """With no sender at all, 3 x MEMORY are written at once: what does not fit in memory waits in a file, and the
    sender started afterwards gets it all, in order; discarding removes the file."""
    data = [os.urandom(MIB) for _ in range(3 * MEMORY // MIB)]
    spool = Spool(tmp_path)
    with spool:
        for piece in data:
            spool.write(piece)
        spool.end(True)
    assert [p.name.startswith("fleet-") for p in tmp_path.iterdir()] == [True]
    assert b"".join(spool.pieces(stall=10)) == b"".join(data)
    spool.discard()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("how", ["not kept", "left without end", "discarded while sent", "stalled"])
def test_a_download_that_is_not_kept_abandons_the_sender(tmp_path: Path, how: str) -> None:
    spool = Spool(tmp_path)
    spool.write(os.urandom(3 * MIB))
    pieces = spool.pieces(stall=0.2)
    next(pieces)  # the sender is under way
    if how == "not kept":
        spool.end(False)
    elif how == "left without end":
        with spool:
            pass
    elif how == "discarded while sent":
        spool.end(True)
        spool.discard()
    with pytest.raises(Abandoned):
        list(pieces)
    spool.discard()
    spool.write(b"after")  # dropped
    assert list(tmp_path.iterdir()) == []
