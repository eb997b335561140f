"""Decimal numbers in text from outside (a URL's port, a header, a log's checkpoint, an environment variable), read
as the peer tools read them: ASCII digits only.

Python's ``str.isdigit`` and ``int`` take other scripts' digits (``'١٢'`` is 12) and ``isdigit`` takes characters
``int`` refuses (``'²'``), so a check with the one and a read with the other either crashes or reads a number curl,
Go and the registry would refuse.
"""

from __future__ import annotations


def decimal(text: str) -> int | None:
    """``text`` as a non-negative decimal number of ASCII digits, or ``None`` when it is anything else (empty, signed,
    spaced, another script's digits).

    >>> decimal("8080"), decimal("٨٠"), decimal("²"), decimal(""), decimal("+1")
    (8080, None, None, None, None)
    """
    if not text or not text.isascii() or not text.isdigit():
        return None
    return int(text)
