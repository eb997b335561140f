"""Signed JSON read as the signer's verifier (cosign, sigstore-go: Go's ``encoding/json``) reads it, or refused.

A signature covers bytes; what is checked afterwards (the digest an image signature names, the subject of a
certificate's log entry) is read from those bytes. Where Python's ``json`` and Go's would read the same bytes
differently, an attacker who can make a signer sign a crafted document could have one tool see one digest and the
other another. So every document whose reading is ambiguous is refused, never guessed at:

- bytes that are not UTF-8, a byte order mark, UTF-16 or UTF-32 (Go reads UTF-8 only and replaces what is not);
- a string holding a lone surrogate escape (``\\ud800``: Go replaces it, Python keeps it);
- a key given twice in one object (Go keeps the last, a JSON-path reader may take the first);
- two keys that differ only by case (Go matches struct fields without regard to case);
- ``NaN``, ``Infinity`` and ``-Infinity`` (not JSON; Go refuses them, Python accepts them);
- nesting deeper than :data:`MAX_DEPTH`.

And, before anything is parsed, a document that could build more than :data:`preparer._jsondoc.MAX_ITEMS` objects,
arrays and values is refused (:mod:`preparer._jsondoc`): its bytes are bounded where it is read, what they expand
to here. Every parse of outside data on the keyless path (bundles, ``.sig`` annotations, payloads, Rekor bodies,
the trusted root) goes through :func:`read_json`.
"""

from __future__ import annotations

import json
from typing import Any

from preparer._jsondoc import DocumentRefused, check

#: Nesting a signed document may have: a simple-signing payload or a bundle is five levels deep.
MAX_DEPTH = 32


class PayloadProblem(ValueError):
    """Why a signed document is refused (in words for a debug line or a refusal)."""


def read_json(data: bytes) -> Any:
    """The JSON document ``data``, read strictly (module docstring).

    :raises PayloadProblem: it is not JSON, or its reading is ambiguous.
    """
    try:
        check(data)  # before the text is decoded or anything built
    except DocumentRefused as err:
        raise PayloadProblem(str(err)) from None
    if data[:3] == b"\xef\xbb\xbf":
        raise PayloadProblem("it begins with a byte order mark")
    if data[:2] in (b"\xff\xfe", b"\xfe\xff") or (len(data) > 1 and (data[0] == 0 or data[1] == 0)):
        raise PayloadProblem("it is UTF-16 or UTF-32, not UTF-8")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise PayloadProblem("it is not UTF-8 text") from None
    try:
        doc = json.loads(text, object_pairs_hook=_object, parse_constant=_constant)
    except PayloadProblem:
        raise
    except RecursionError:
        raise PayloadProblem(f"it is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as err:
        raise PayloadProblem(f"it is not JSON ({err})") from None
    _check(doc, 0)
    return doc


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    folded: dict[str, str] = {}
    for key, value in pairs:
        if key in doc:
            raise PayloadProblem(f"the key '{_shown(key)}' is given twice in one object")
        other = folded.setdefault(key.casefold(), key)
        if other != key:
            raise PayloadProblem(f"the keys '{_shown(other)}' and '{_shown(key)}' differ only by case")
        doc[key] = value
    return doc


def _constant(name: str) -> Any:
    raise PayloadProblem(f"it holds {name}, which is not JSON")


def _check(value: Any, depth: int) -> None:
    """Refuse what :func:`json.loads` read without a word: lone surrogates, and nesting past the bound."""
    if depth > MAX_DEPTH:
        raise PayloadProblem(f"it is nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        _text(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            _text(key)
            _check(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check(item, depth + 1)


def _text(value: str) -> None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PayloadProblem("a string holds a lone surrogate escape") from None


def _shown(key: str) -> str:
    printable = "".join(c if c.isprintable() else "?" for c in key)
    return printable if len(printable) <= 60 else printable[:59] + "…"


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: ``DSSEv1 <len> <type> <len> <payload>``, lengths in ASCII decimal."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %b %d %b" % (len(kind), kind, len(payload), payload)


def b64(value: object) -> bytes | None:
    """The bytes a signed document's base64 field holds (standard alphabet, padded, nothing else), or ``None`` for
    anything else: a field that is not a string is not base64 either."""
    import base64  # deferred: reading a document needs no base64
    import binascii

    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return None
