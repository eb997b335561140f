"""Characters that look like the ASCII ones TOML, ids and versions are written in, named for messages.

A word processor, a chat client or a web page turns ``"`` into U+201C, a space into U+00A0, or a Latin ``o`` into
a Cyrillic one (pasted from a document in another script); the text reads the same, and the parser's message
(``Invalid value``) names nothing a user can see. These say which character it is.
"""

from __future__ import annotations

#: Look-alikes of ASCII punctuation and spaces, with the character they are taken for.
_PUNCTUATION = {
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"', "\u00ab": '"', "\u00bb": '"',
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'", "\u00b4": "'", "\u0060": "'",
    "\u00a0": " ", "\u2007": " ", "\u202f": " ", "\u2002": " ", "\u2003": " ", "\u2009": " ", "\u3000": " ",
    "\u200b": "nothing (it is invisible)", "\u2060": "nothing (it is invisible)", "\ufeff": "nothing (it is invisible)",
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2212": "-",
    "\uff1d": "=", "\u2024": ".", "\uff0e": ".", "\u2044": "/", "\u2215": "/", "\uff3b": "[", "\uff3d": "]",
}  # fmt: skip


def describe(char: str) -> str | None:
    """What ``char`` is when it is not ASCII: ``U+201C (LEFT DOUBLE QUOTATION MARK), not "``, or, for a letter of
    another script, ``U+043E (CYRILLIC SMALL LETTER O), not a Latin letter``; ``None`` for ASCII."""
    if char.isascii():
        return None
    import unicodedata  # deferred: only a message that names a character needs it

    code = f"U+{ord(char):04X}"
    name = unicodedata.name(char, "")
    named = f"{code} ({name})" if name else code
    if char in _PUNCTUATION:
        meant = _PUNCTUATION[char]
        return f"{named}, not {meant}" if len(meant) > 1 else f"{named}, not {meant!r}"
    if char.isalpha():  # a Latin letter of another width, or accented, is not the ASCII one all the same
        return f"{named}, not {'an ASCII' if 'LATIN' in name else 'a Latin'} letter"
    if char.isdigit():
        return f"{named}, not an ASCII digit"
    return named


def first_lookalike(text: str) -> tuple[int, str] | None:
    """The offset and description (:func:`describe`) of the first character of ``text`` that is not ASCII."""
    for at, char in enumerate(text):
        described = describe(char)
        if described is not None:
            return at, described
    return None
