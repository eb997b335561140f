"""The one reader of every TOML file the preparer reads (the project descriptor, the platform file, the policy, the
lock, containerd's ``hosts.toml``, ``buildpack.toml``, ``order.toml``, ``analyzed.toml``); TOML written
deterministically (:func:`dumps_toml`).

A file is read bounded (its bytes, at most ``limit``; a FIFO, a device or a directory refused at once, never waited
on), decoded (UTF-8, a byte order mark read over), passed over once by the reader itself, then parsed by tomli.
The pass finds where every key, table and array element is written (:class:`Places`, returned with the document)
and refuses, at its place and before tomli builds anything, what would build too much: arrays and inline tables
nested more than :data:`MAX_NESTING` deep, values more than :data:`MAX_DEPTH` tables and arrays deep, an integer
outside TOML's 64-bit range. Every problem is one error: the caller's class (its exit code) with the action, the
file, the cause, and the place: ``(at line L, column C)`` in the cause, and the ``line`` and ``column`` fields
where the class has them (docs/decisions.md, "One TOML reader").
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomli

from preparer._fs import read_regular
from preparer._record import record
from preparer._types import KeyPath, TOMLTable
from preparer.errors import DescriptorError, PreparerError, with_fields
from preparer.files._toml_pass import Pass, TooMuch, flat_elements

# For type checkers only: a TypedDict made at run time costs every process its class (start-up).
if TYPE_CHECKING:
    from typing import TypedDict, Unpack

    class Reading(TypedDict, total=False):
        """How :func:`read_toml`, :func:`read_bytes` and :func:`parse_toml` read a file and say its problems; each key
        may be left out.

        Keys:
            error: the class of error to raise (default :class:`DescriptorError`, exit 3; the builder's own files
                differ).
            action: the message's action, when not ``read <what>`` / ``parse <what>``.
            limit: the most bytes read (default :data:`MAX_TOML`).
            named: whether causes start with the file's path (the default); not when ``action`` names the file as the
                user knows it (a staged copy's path means nothing to them).
        """

        error: type[PreparerError]
        action: str | None
        limit: int
        named: bool


#: The largest TOML file read (a project descriptor is a few KiB; a platform's files are not much more).
MAX_TOML = 1 << 20
#: How deep arrays and inline tables may be in one another: TOML's recommended minimum a parser supports. A bound
#: of its own, so that what is refused does not depend on how deep the stack is where the file is read.
MAX_NESTING = 100
#: How many tables and arrays a value may be in (each part of a dotted key or a header is a table): what every
#: walk over a document (the overlay, a copy, the report's writer) recurses through, far within Python's stack.
MAX_DEPTH = 200
#: TOML's integers: 64-bit, as the spec says and pack's parser holds them (tomli alone takes any number of digits,
#: and Python refuses to convert more than 4300).
MIN_INTEGER, MAX_INTEGER = -(1 << 63), (1 << 63) - 1


class Places:
    """Where each key, table and array element of a document is written, by its path in the parsed document
    (``("io", "buildpacks", "group", 1, "uri")``): the first place that names it (a table a header or a dotted key
    defines implicitly is where it is first named)."""

    def __init__(
        self, text: str, offsets: dict[KeyPath, int], flat: dict[KeyPath, tuple[int, int]] | None = None
    ) -> None:
        self.text = text
        self.offsets = offsets
        #: The arrays of one-line strings and numbers the pass read whole, by path: the start and end of their
        #: elements, each element's place found when one is asked for.
        self.flat = dict(flat or {})
        self.starts: list[int] | None = None

    def __contains__(self, path: object) -> bool:
        return isinstance(path, tuple) and self.offset(path) is not None

    def offset(self, path: KeyPath) -> int | None:
        """Where in the text ``path`` is written, or ``None``."""
        found = self.offsets.get(path)
        if found is None and path and path[:-1] in self.flat:
            start, end = self.flat[path[:-1]]
            for index, element in enumerate(flat_elements(self.text, start, end)):
                self.offsets.setdefault((*path[:-1], index), element)
            self.flat.pop(path[:-1], None)
            found = self.offsets.get(path)
        return found

    def place(self, offset: int) -> tuple[int, int]:
        """The line and column (both from 1) of the character at ``offset`` of the text."""
        import bisect  # deferred: only a problem asks where it is

        if self.starts is None:  # most documents never need it
            self.starts = [0, *(m.end() for m in re.finditer("\n", self.text))]
        line = bisect.bisect_right(self.starts, offset)
        return line, offset - self.starts[line - 1] + 1

    def position(self, path: KeyPath) -> tuple[int, int] | None:
        """The line and column where ``path`` is written, or ``None``."""
        offset = self.offset(path)
        return None if offset is None else self.place(offset)

    def line(self, path: KeyPath) -> int | None:
        """The line where ``path`` is written, or ``None``."""
        found = self.position(path)
        return None if found is None else found[0]

    def nearest(self, path: KeyPath) -> tuple[int | None, int | None]:
        """Where ``path`` is written, or else the nearest table or array holding it; ``(None, None)`` when none is."""
        for depth in range(len(path), 0, -1):
            found = self.position(path[:depth])
            if found is not None:
                return found
        return None, None

    def before(self, offset: int) -> Iterator[tuple[KeyPath, int]]:
        """Every path written before ``offset``, with its line, in the order they are written."""
        for path, at in sorted(self.offsets.items(), key=lambda item: item[1]):
            if at >= offset:
                return
            yield path, self.place(at)[0]


@record
class Document:
    """A TOML document read: its tables, where each key is written, and the name messages give its file."""

    table: TOMLTable
    places: Places
    name: str


class _Failure:
    """How problems with one file are said: ``error(action, cause)``, the cause naming the file (``named``) and the
    place, the error's ``path``, ``line`` and ``column`` set where its class has them; and the most bytes read."""

    def __init__(self, name: str, what: str, how: Reading) -> None:
        self.name, self.what = name, what
        self.error = how.get("error", DescriptorError)
        self.action = how.get("action")
        self.limit = how.get("limit", MAX_TOML)
        self.named = how.get("named", True)

    def __call__(
        self,
        verb: str,
        cause: str,
        place: tuple[int, int] | None = None,
        said: bool = False,
        prefix: bool = True,
    ) -> PreparerError:
        """The error of ``cause``; ``place`` is said at its end unless the cause says it already (``said``), and the
        file's name before it when causes are ``named`` (unless the cause names it, ``prefix`` false)."""
        where = f"{self.name}: " if self.named and prefix else ""
        at = f" (at line {place[0]}, column {place[1]})" if place is not None and not said else ""
        failed = self.error(self.action or f"{verb} {self.what}", f"{where}{cause}{at}")
        line, column = place or (None, None)
        fields = {"path": self.name, "line": line, "column": column}
        return with_fields(failed, **{k: v for k, v in fields.items() if hasattr(failed, k)})


def read_toml(path: Path, what: str, **how: Unpack[Reading]) -> Document:
    """The TOML file ``path``, read bounded and parsed (:func:`read_bytes`, then :func:`parse_toml`).

    :param what: names the file's role in messages, e.g. ``project descriptor``.
    :param how: the error, action, limit and naming of :class:`Reading`.
    :raises DescriptorError: (or ``error``) when the file cannot be read, is not TOML, or builds too much.
    """
    return parse_toml(read_bytes(path, what, **how), str(path), what, **how)


def read_bytes(path: Path, what: str, **how: Unpack[Reading]) -> bytes:
    """The bytes of the file ``path``: a regular file (a link to one is fine) of at most ``limit`` bytes; anything
    else (a FIFO, a device, a directory) is refused at once. The parameters are :func:`read_toml`'s.

    :raises DescriptorError: (or ``error``) when it cannot be read.
    """
    fail = _Failure(str(path), what, how)
    named = fail.named
    try:
        return read_regular(path, fail.limit)
    except FileNotFoundError:
        raise fail(
            "read", f"{path} does not exist" if named else f"there is no {path.name}", prefix=False
        ) from None
    except IsADirectoryError:
        raise fail(
            "read", f"{path} is a directory" if named else f"{path.name} is a directory", prefix=False
        ) from None
    except OSError as err:
        raise fail("read", str(err.strerror or err)) from err
    except ValueError as why:
        raise fail("read", str(why)) from why


def parse_toml(data: str | bytes, name: str, what: str, **how: Unpack[Reading]) -> Document:
    """The document whose bytes (or text) are ``data``, named ``name`` in messages, as :func:`read_toml` reads a
    file: at most ``limit`` bytes (refused before anything is parsed), UTF-8, TOML, within the bounds.

    :raises DescriptorError: (or ``error``) as :func:`read_toml`.
    """
    fail = _Failure(name, what, how)
    text = _decode(data, fail.limit, fail)
    try:
        found = Pass(text, MAX_NESTING, MAX_DEPTH, (MIN_INTEGER, MAX_INTEGER))
        found.document()
    except TooMuch as bound:
        raise fail("parse", bound.cause, Places(text, {}).place(bound.offset)) from None
    places = Places(text, found.offsets, found.flat)
    try:
        table = tomli.loads(text)
    except tomli.TOMLDecodeError as err:
        place = (
            str(err).removeprefix(err.msg).strip()
        )  # tomli's: (at line L, column C), or (at end of document)
        from preparer.files._toml_words import readable  # deferred: only a document tomli refuses needs it

        cause = readable(err.msg, err.pos, place, text, places.before)
        raise fail("parse", cause, (err.lineno, err.colno), said=True) from err
    return Document(table, places, name)


def _decode(data: str | bytes, limit: int, fail: _Failure) -> str:
    """``data`` as text: UTF-8 of at most ``limit`` bytes (a character is one to four), a byte order mark read over
    (as pack does)."""
    size = (
        len(data)
        if isinstance(data, bytes) or len(data) > limit
        else len(data.encode(errors="surrogatepass"))
    )
    if size > limit:
        raise fail("read", f"larger than {limit} bytes")
    if isinstance(data, str):
        try:
            data.encode()
        except UnicodeEncodeError as err:  # a lone surrogate: no file holds one
            place = data.count("\n", 0, err.start) + 1, err.start - data.rfind("\n", 0, err.start)
            raise fail("parse", f"not UTF-8 text: {err.reason}", place) from err
        return data.removeprefix("\ufeff")
    data = data.removeprefix(b"\xef\xbb\xbf")  # without the utf-8-sig codec: one module less to import
    try:
        return data.decode()
    except UnicodeDecodeError as err:
        line_start = data.rfind(b"\n", 0, err.start) + 1
        place = data.count(b"\n", 0, err.start) + 1, len(data[line_start : err.start].decode()) + 1
        raise fail("parse", f"not UTF-8 text: {err.reason}", place) from err


def dumps_toml(doc: dict[str, Any]) -> str:
    """Serialise ``doc`` with tomli-w; key order is the dict's, so equal inputs give equal bytes."""
    import tomli_w  # deferred: only runs that write TOML need it

    return tomli_w.dumps(doc)
