"""Allocator settings for streaming large blobs: keep glibc from returning and re-faulting the same buffers.

Streaming a layer allocates and frees megabyte-sized buffers at every step (socket reads, hashing, inflating, tar
blocks). glibc's defaults hand such blocks back to the kernel as soon as they are freed (``mmap``/``munmap``, heap
trimming), so every megabyte read costs fresh zeroed pages: about four page faults per byte of data, which makes
system time the largest part of a cold fetch. Keeping freed memory for reuse (a higher mmap threshold and trim
threshold) removes ~95% of those faults and a third of the wall time of ``make bench``'s OCI scenario; peak
memory grows by a few MiB. Other C libraries are left alone, and so are explicit ``GLIBC_TUNABLES`` for malloc.

The setting is the process's, so only the command asks for it (:func:`allow`): a service that embeds the library
keeps its own allocator as it is. The first OCI fetch of a process that allows it applies it (:func:`when_allowed`).

Reuse has a cost in memory: glibc raises its mmap threshold to the size of the first large block freed, and from
then on serves such blocks from its heaps, where blocks freed by one thread and taken by another leave holes it
never gives back. Streaming a 1 GiB buildpack so grew the process by 40 MiB where its buffers held under 6. So a
stream gives back the free memory of every heap each :data:`RELEASE_EVERY` bytes (:func:`release`, glibc's
``malloc_trim``): a process that allows it stays at its buffers' size, whatever the size of the buildpack.
"""

from __future__ import annotations

import os
import threading
from typing import Any

#: Blocks below this size come from the heap instead of their own mapping (glibc's default is 128 KiB, adjusted
#: upwards at run time up to 32 MiB).
MMAP_THRESHOLD = 16 << 20
#: Free memory at the top of a heap kept for reuse instead of being given back (glibc's default is 128 KiB).
TRIM_THRESHOLD = 64 << 20
#: Bytes streamed between two :func:`release` calls: often enough that holes never add up to much, rarely enough
#: that the pages given back and faulted in again cost nothing measurable (a 1 GiB buildpack: 0.95-0.99x the time).
RELEASE_EVERY = 32 << 20
_M_TRIM_THRESHOLD = -1  # from glibc's malloc.h
_M_MMAP_THRESHOLD = -3

_lock = threading.Lock()
#: A forked child: the lock is free there, whichever thread of the parent held it (the tuning itself is inherited).
os.register_at_fork(after_in_child=_lock._at_fork_reinit)  # type: ignore[attr-defined]  # CPython's own
_done = False
_allowed = False
#: glibc's ``malloc_trim`` once looked up (``None``: not yet; ``False``: not glibc, or not to be called).
_trim: Any = None


def allow() -> None:
    """The process may be tuned (the command says so; a library caller does not): the first OCI fetch tunes it."""
    global _allowed
    _allowed = True


def when_allowed() -> bool:
    """:func:`tune_allocator`, when the process allows it (:func:`allow`)."""
    return _allowed and tune_allocator()


def tune_allocator() -> bool:
    """Apply the settings once per process (idempotent, thread-safe); whether glibc took them."""
    global _done
    with _lock:
        if _done:
            return False
        _done = True
        try:
            if not os.confstr("CS_GNU_LIBC_VERSION"):
                return False
        except (ValueError, OSError):
            return False  # not glibc
        if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
            return False  # the user chose their own
        try:
            import ctypes  # deferred: only OCI fetches tune the allocator

            libc = ctypes.CDLL(None)
            return bool(
                libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                and libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
            )
        except (OSError, AttributeError):
            return False


def release() -> None:
    """Give the free memory of every heap back to the system (glibc's ``malloc_trim``), in a process that allows it
    (:func:`allow`): what a stream calls each :data:`RELEASE_EVERY` bytes. Elsewhere, nothing."""
    global _trim
    if not _allowed:
        return
    if _trim is None:
        _trim = _malloc_trim()
    if _trim:
        _trim(0)


def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or ``False`` (another C library, or malloc settings the user chose)."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return False
    except (ValueError, OSError):
        return False
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    try:
        import ctypes  # deferred: only streams of more than RELEASE_EVERY bytes call it

        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
