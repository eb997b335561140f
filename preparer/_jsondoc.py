"""JSON documents from outside, read bounded in what they build, not only in their bytes.

A document's bytes are bounded where it is read (4 MiB for a registry document, 16 MiB for a signature object),
but what ``json.loads`` builds from them is not: 16 MiB of ``{},{},...`` is six million dictionaries (474 MiB of
memory, measured), and ``[[[...`` a thousand levels deep ends in a ``RecursionError``. :func:`loads` counts first,
in the bytes and before anything is built, the characters that can start an element or open a container (``,``,
``{`` and ``[``): every object, array and value a document holds is within that count (plus one), so refusing a
document over :data:`MAX_ITEMS` of them bounds what its parse can build to a few MiB, whatever the bytes are. The
count is made with ``bytes.count`` (C speed, no copy) and includes what strings hold: an over-count only for a
document that carries tens of thousands of commas inside its strings, which no signer, registry or Sigstore file
writes. Nesting is bounded by the interpreter's recursion limit, and a document nested past it is refused in
words (:class:`DocumentRefused`), never a bare ``RecursionError``.
"""

from __future__ import annotations

import json
from typing import Any

#: Elements (commas, objects, arrays) one document may hold. A Sigstore bundle holds about a hundred, a trusted root
#: a few hundred, a ``.sig`` manifest of 1,000 signatures about 20,000.
MAX_ITEMS = 100_000


class DocumentRefused(ValueError):
    """Why a document is not read: too many elements, or nested too deep (words for a message)."""


def items(data: bytes | str) -> int:
    """An upper bound of the objects, arrays and values the JSON document ``data`` holds, less one: its commas,
    ``{`` and ``[`` (strings' included)."""
    if isinstance(data, bytes):
        return data.count(b",") + data.count(b"{") + data.count(b"[")
    return data.count(",") + data.count("{") + data.count("[")


def check(data: bytes | str, most: int = MAX_ITEMS) -> None:
    """Refuse ``data`` before it is parsed when it could build more than ``most`` elements.

    :raises DocumentRefused: it could.
    """
    count = items(data)
    if count > most:
        raise DocumentRefused(
            f"it holds {count} commas, objects and arrays, more than the {most} a document read here may"
        )


def loads(data: bytes | str, most: int = MAX_ITEMS, **options: Any) -> Any:
    """``json.loads(data, **options)``, once :func:`check` passes; nesting past the interpreter's recursion limit
    is refused in words.

    :raises DocumentRefused: too many elements, or nested too deep.
    :raises ValueError: not JSON (``json.JSONDecodeError``), or what ``options``' hooks raise.
    """
    check(data, most)
    try:
        return json.loads(data, **options)
    except RecursionError:
        raise DocumentRefused("it is nested deeper than a document read here may be") from None
