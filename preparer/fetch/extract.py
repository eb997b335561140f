"""Safe extraction of buildpack archives and buildpackage layers: a lean tar reader that checks every entry.

Archives come from projects, servers and registries the platform does not control, so every entry is checked
before anything is written, and nothing is ever written outside ``dest``:

- absolute names (unless the archive is a buildpackage layer, whose names start at the image root) and ``..``;
- symbolic links whose target leaves the buildpack, also through other links of the archive (``x -> .`` then
  ``y -> x/..``): each target is checked as written, and every link again, resolved, once the archive is complete;
- entries that would be written through a link, and hard links to anything but a regular file already extracted
  (never through a link either);
- device, fifo, sparse and other special entries; setuid, setgid and sticky bits;
- headers beyond a small size (GNU long names and PAX records, :data:`MAX_EXTENDED`), names longer than
  :data:`MAX_NAME`, more than :data:`MAX_ENTRIES` entries.

Files are written 0644, or 0755 when any execute bit was set; directories 0755, whatever the umask. The stream
is read once, front to back, in large chunks; nothing is kept per file (a hard link may only point at a regular
file, reached through real directories, which is checked on disk: ``dest`` starts empty and only this extraction
writes it), only the archive's directories and symbolic links, so memory does not grow with its number of files. The reader is
written for speed on trees of thousands of small files: one header parse, one ``open``/``write``/``close`` per
file, one ``mkdir`` per directory, and no scan of earlier entries.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import stat
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from preparer import interrupt, telemetry
from preparer._fs import PER_FILE_WORK, current_umask, file_record, is_inside
from preparer._numbers import decimal
from preparer._record import record
from preparer.errors import FetchError
from preparer.fetch.streams import MAX_TRAILING, Reader, TarStream, damage_ahead, damaged

if TYPE_CHECKING:
    from preparer.fetch.guard import Guard

BLOCK = 512
#: The largest GNU long name or PAX extended header read (real ones are a few hundred bytes).
MAX_EXTENDED = 64 << 10
#: The most entries an archive may hold: real buildpacks have a few thousand; this bounds time and memory.
MAX_ENTRIES = 100_000
#: The longest entry name (Linux's PATH_MAX).
MAX_NAME = 4096

_REGULAR, _HARDLINK, _SYMLINK, _DIRECTORY = (b"0", b"\0", b"7"), b"1", b"2", b"5"
_SPECIAL = {b"3": "character device", b"4": "block device", b"6": "fifo"}
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


@record
class Extracted:
    """What an extraction found: the names at the top of the archive (to tell buildpacks from OCI layouts), the
    number of entries written, and every symbolic link (relative name -> target). With ``record``, also what the
    download cache's manifest holds of every file (:class:`preparer.fetch.cache.CachedTree`) and the names of
    every directory, so that the tree need not be walked again."""

    top_level: frozenset[str]
    files: int
    links: dict[str, str]
    records: dict[str, list[int]] | None = None
    dirs: frozenset[str] = frozenset()


class _Refused(Exception):
    """An entry the rules refuse; becomes a FetchError naming the archive and the entry."""

    def __init__(self, name: str, why: str) -> None:
        super().__init__(why)
        self.name, self.why = name, why


@telemetry.step("cnb.extract", lambda got: {"cnb.extract.files": got.files})
def extract_tar(
    fileobj: Reader,
    dest: Path,
    *,
    archive: str,
    select: str | None = None,
    allow_absolute: bool = False,
    record: bool = False,
    guard: Guard | None = None,
) -> Extracted:
    """Extract the tar stream ``fileobj`` (gzip or plain, told apart by magic bytes) into ``dest``.

    Reading stops at the archive's end marker; what follows is the caller's to drain (and bound).

    :param dest: an existing, empty directory; nothing is written outside it.
    :param archive: names the archive in error messages (already redacted).
    :param select: only entries below this relative prefix (``cnb/buildpacks``) are extracted, with the prefix
        stripped; the others are skipped.
    :param allow_absolute: buildpackage layers name entries from the image root, so ``/cnb/x`` is ``cnb/x``;
        buildpack archives may not hold absolute names.
    :param record: also record every file as it is written (:attr:`Extracted.records`).
    :param guard: the policy's limits, charged each entry and each file's size before it is written.
    :raises FetchError: naming the archive and the entry, for ``..``, absolute names, links leaving ``dest``,
        device and fifo entries, setuid/setgid bits, oversized headers, and corrupt or truncated archives.
    """
    if guard is None and PER_FILE_WORK.locked():
        from preparer.fetch import workers  # deferred: a small module, for runs that extract

        # Another extraction is writing in this process: this one takes a core of its own, in a child (the
        # command's way). Alone, it stays here: its reading ahead already uses a second core, and a child would
        # only add the pipe (one bench archive: 1.04x the time here).
        if workers.enabled():

            def extract(stream: TarStream, at_end: Callable[[], None]) -> Extracted:
                return extract_stream(stream, dest, archive, select, allow_absolute, record, at_end=at_end)

            return workers.extract_in_child(fileobj, extract, archive)
    # The writing holds PER_FILE_WORK (one extraction at a time writes), and lets go of it to wait for bytes.
    with TarStream(fileobj, waits_without=PER_FILE_WORK) as stream, PER_FILE_WORK:
        return extract_stream(stream, dest, archive, select, allow_absolute, record, guard)


def extract_stream(
    stream: TarStream,
    dest: Path,
    archive: str,
    select: str | None = None,
    allow_absolute: bool = False,
    record: bool = False,
    guard: Guard | None = None,
    at_end: Callable[[], None] | None = None,
) -> Extracted:
    """:func:`extract_tar` of the plain tar bytes of ``stream``, here (``at_end`` is called once the end marker
    is read, before the links are checked)."""
    writer = _Writer(dest, select.strip("/") if select else None, allow_absolute, record)
    try:
        _Reader(stream, writer, guard).run()
        # Past the end marker (tar pads to 10 KiB records), to the end of the gzip data: its checksum says whether
        # what was extracted is what was compressed, as gzip -d tells tar.
        try:
            stream.finish(MAX_TRAILING)
        except ValueError as err:
            raise FetchError(f"extract {archive}", str(err)) from err
        if at_end is not None:
            at_end()
        writer.check_links()
    except _Refused as refused:
        raise FetchError(f"extract {archive}", f"refusing entry '{refused.name}': {refused.why}") from refused
    except NotAnArchive as what:
        raise _damaged(stream, archive) or FetchError(
            f"extract {archive}", f"not a tar archive: {what}"
        ) from what
    except zlib.error as err:
        raise damaged(archive, err) from err
    except (EOFError, ValueError) as err:
        raise _damaged(stream, archive) or FetchError(
            f"extract {archive}",
            f"not a valid tar archive ({err})" if str(err) else "not a valid tar archive",
        ) from err
    except OSError as err:
        raise FetchError(f"extract {archive}", err.strerror or str(err)) from err
    links = {name: link for name, link in writer.links.items() if os.path.islink(f"{writer.root}/{name}")}
    return Extracted(frozenset(writer.top_level), writer.files, links, writer.records, frozenset(writer.dirs))


def _damaged(stream: TarStream, archive: str) -> FetchError | None:
    """The error of gzip data damaged further on than what was read of it (:func:`damage_ahead`)."""
    err = damage_ahead(lambda: stream.chunks.next(stream.waits_without))
    return None if err is None else damaged(archive, err)


class _Reader:
    """Reads tar headers (ustar, GNU long names, PAX) and hands each entry to the writer."""

    def __init__(self, stream: TarStream, writer: _Writer, guard: Guard | None = None) -> None:
        self.stream, self.writer, self.guard = stream, writer, guard
        self.first = True

    def read_exactly(self, size: int) -> bytes:
        data = self.stream.read(size)
        if len(data) != size:
            raise EOFError("the archive ended in the middle of an entry")
        return data

    def run(self) -> None:
        long_name: str | None = None
        long_link: str | None = None
        pax: dict[str, str] = {}
        while True:
            header = self.stream.read(BLOCK)
            if not header or header == bytes(BLOCK):
                return  # the end marker (or an archive that just stops between entries, as tar accepts)
            if len(header) != BLOCK:
                if self.first:
                    raise NotAnArchive(_what_it_is(header))
                raise EOFError("the archive ended in the middle of a header")
            try:
                kind, name, size, mode, link = _parse_header(header)
            except ValueError:
                if self.first:  # nothing of it is a tar archive: say what it looks like instead
                    raise NotAnArchive(_what_it_is(header)) from None
                raise
            self.first = False
            interrupt.check()
            self.writer.count(name)
            if kind in (b"L", b"K", b"x", b"g"):
                data = self._extended(name, size)
                if kind == b"L":
                    long_name = _text(data.rstrip(b"\0"))
                elif kind == b"K":
                    long_link = _text(data.rstrip(b"\0"))
                elif kind == b"x":
                    pax = _pax(data)
                elif set(_pax(data)) & {"path", "linkpath", "size"}:
                    raise _Refused(name, "a global PAX header may not set path, linkpath or size")
                continue
            name = pax.get("path", long_name or name)
            link = pax.get("linkpath", long_link or link)
            if "size" in pax:
                pax_size = decimal(pax["size"])
                if pax_size is None:
                    raise ValueError("malformed PAX size")
                size = pax_size
            if any(key.startswith("GNU.sparse") for key in pax):
                raise _Refused(name, "sparse files are not allowed")
            long_name = long_link = None
            pax = {}
            self.entry(kind, name, size, mode, link)

    def _extended(self, name: str, size: int) -> bytes:
        if size > MAX_EXTENDED:
            raise _Refused(name, f"an extended header of {size} bytes (at most {MAX_EXTENDED} are read)")
        data = self.read_exactly(_padded(size))
        return data[:size]

    def entry(self, kind: bytes, name: str, size: int, mode: int, link: str) -> None:
        """Check and write one entry; its data is consumed whether it is written or skipped."""
        target = self.writer.admit(name, kind, mode)
        if target is None:
            self.skip(size)
            return
        if self.guard is not None:
            self.guard.entry()
            if kind in _REGULAR:
                self.guard.extracted(size)
        if kind in _REGULAR:
            fd = self.writer.create(target, mode)
            try:
                self.copy(fd, size)
                self.writer.written(target, fd)
            finally:
                os.close(fd)
            return
        self.skip(size)
        if kind == _DIRECTORY:
            self.writer.directory(target)
        elif kind == _SYMLINK:
            self.writer.symlink(target, link)
        elif kind == _HARDLINK:
            self.writer.hardlink(target, link)
        else:
            raise _Refused(name, f"entries of type {kind!r} are not allowed")

    def copy(self, fd: int, size: int) -> None:
        """Write the entry's ``size`` bytes to ``fd`` and pass over its padding."""
        self.stream.copy_to(fd, size)
        self.stream.skip(_padded(size) - size)

    def skip(self, size: int) -> None:
        self.stream.skip(_padded(size))


def _padded(size: int) -> int:
    return (size + BLOCK - 1) // BLOCK * BLOCK


def _text(raw: bytes) -> str:
    """A name from the archive: UTF-8, with undecodable bytes kept as the file system keeps them."""
    return raw.decode("utf-8", "surrogateescape")


def _number(field_bytes: bytes) -> int:
    """A header number: octal digits, or GNU's base-256 (the high bit of the first byte set)."""
    if field_bytes[0] & 0x80:
        value = int.from_bytes(field_bytes[1:], "big")
        if field_bytes[0] & 0x40:
            raise ValueError("negative number in a header")
        return value
    digits = field_bytes.strip(b" \0")
    return int(digits, 8) if digits else 0


class NotAnArchive(Exception):
    """The bytes are no tar archive from their first block on; the message says what they look like."""


def _what_it_is(start: bytes) -> str:
    """What bytes that are no tar archive look like, in plain words (a web page served for a missing file, a zip)."""
    head = start.lstrip()[:64].lower()
    if head.startswith((b"<!doctype html", b"<html", b"<head", b"<?xml", b"<")):
        return "it is an HTML or XML page (a server's error or login page, perhaps: check the URL)"
    if start.startswith(b"PK\x03\x04"):
        return "it is a zip archive (a buildpack is a tar archive, .tgz or .tar)"
    if head.startswith((b"{", b"[")):
        return "it is JSON text"
    if start.startswith((b"BZh", b"\xfd7zXZ", b"\x28\xb5\x2f\xfd")):
        return "it is compressed with bzip2, xz or zstd (gzip or no compression are read)"
    if len(start) < BLOCK:
        return f"it is {len(start)} bytes long, less than one tar header"
    return "its first block is no tar header"


def _parse_header(header: bytes) -> tuple[bytes, str, int, int, str]:
    """``(type, name, size, mode, link name)`` of a header block whose checksum is right.

    :raises ValueError: a wrong checksum or malformed numbers (not a tar archive).
    """
    stored = _number(header[148:156])
    if stored != sum(header[:148]) + 256 + sum(header[156:]) and stored != _signed_sum(header):
        raise ValueError("bad header checksum")
    name = header[:100].split(b"\0", 1)[0]
    if header[257:262] == b"ustar":
        prefix = header[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
    kind = header[156:157]
    return (
        kind,
        _text(name),
        _number(header[124:136]),
        _number(header[100:108]),
        _text(header[157:257].split(b"\0", 1)[0]),
    )


def _signed_sum(header: bytes) -> int:
    """The checksum as old tars computed it, over signed bytes."""
    return (
        sum((b - 256 if b > 127 else b) for b in header[:148])
        + 256
        + sum((b - 256 if b > 127 else b) for b in header[156:])
    )


def _pax(data: bytes) -> dict[str, str]:
    """The records of a PAX extended header: ``<length> <key>=<value>\\n`` each."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(data) and data[pos : pos + 1] != b"\0":
        space = data.find(b" ", pos)
        if space < 0 or not data[pos:space].isdigit():
            raise ValueError("malformed PAX header")
        length = int(data[pos:space])
        record = data[space + 1 : pos + length]
        if length <= 0 or pos + length > len(data) or not record.endswith(b"\n") or b"=" not in record:
            raise ValueError("malformed PAX header")
        key, _, value = record[:-1].partition(b"=")
        records[_text(key)] = _text(value)
        pos += length
    return records


class _Writer:
    """Decides where each entry goes, refuses what the rules refuse, and writes it."""

    def __init__(self, dest: Path, select: str | None, allow_absolute: bool, record: bool = False) -> None:
        self.dest = dest
        self.root = str(dest)
        self.select, self.allow_absolute = select, allow_absolute
        self.links: dict[str, str] = {}  # symbolic links written: nothing may be written below one
        self.dirs: set[str] = {""}  # directories known to exist (made by this extraction)
        self.top_level: set[str] = set()
        self.files = 0
        self.entries = 0
        #: Modes the umask would take from files and directories as they are made: only then is a mode set again.
        self.masked = current_umask()
        #: With ``record``: every file written, as the cache's manifest records it.
        self.records: dict[str, list[int]] | None = {} if record else None

    def count(self, name: str) -> None:
        """One more header read: bounded in number, so time and memory are too."""
        self.entries += 1
        if self.entries > MAX_ENTRIES:
            raise _Refused(name, f"the archive holds more than {MAX_ENTRIES} entries")

    def relative(self, raw: str) -> str | None:
        """The entry's name relative to ``dest``; ``None`` when it is outside the selected subtree.

        :raises _Refused: for absolute names (unless allowed) and ``..``.
        """
        name = raw
        if name.startswith("/"):
            if not self.allow_absolute:
                raise _Refused(raw, "absolute path")
            name = name.lstrip("/")
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise _Refused(raw, "path contains '..'")
        clean = "/".join(parts)
        if self.select is None:
            return clean
        if clean == self.select:
            return ""
        if clean.startswith(self.select + "/"):
            return clean[len(self.select) + 1 :]
        return None

    def admit(self, raw: str, kind: bytes, mode: int) -> str | None:
        """The relative name ``raw`` is written at, after the checks every entry gets; ``None`` to skip it."""
        if len(raw) > MAX_NAME:
            raise _Refused(raw[:100] + "...", f"a name longer than {MAX_NAME} bytes")
        name = self.relative(raw)
        if name is None:
            return None

        if mode & (stat.S_ISUID | stat.S_ISGID):
            raise _Refused(raw, "setuid or setgid bit")
        if mode & stat.S_ISVTX and kind != _DIRECTORY:
            raise _Refused(raw, "sticky bit")
        if not name:
            if kind != _DIRECTORY:
                raise _Refused(raw, "the archive root must be a directory")
            return None
        self.top_level.add(name.split("/", 1)[0])
        if self.links and self._through_link(name):
            raise _Refused(raw, "it would be written through a symbolic link")
        if kind in _SPECIAL or kind == b"S":
            raise _Refused(raw, "devices, fifos and other special files are not allowed")
        return name

    def _through_link(self, name: str) -> bool:
        end = name.find("/")
        while end > 0:
            if name[:end] in self.links:
                return True
            end = name.find("/", end + 1)
        return False

    def _parent(self, name: str) -> str:
        parent = name.rpartition("/")[0]
        if parent not in self.dirs:
            path = self.root
            for part in parent.split("/"):
                path += "/" + part
                try:
                    os.mkdir(path, 0o755)
                    if 0o755 & self.masked:
                        os.chmod(path, 0o755)
                except FileExistsError:
                    if not stat.S_ISDIR(os.lstat(path).st_mode):
                        raise _Refused(name, "it would be written below a file") from None
            self._remember_dirs(parent)
        return f"{self.root}/{name}"

    def _remember_dirs(self, directory: str) -> None:
        while directory and directory not in self.dirs:
            self.dirs.add(directory)
            directory = directory.rpartition("/")[0]

    def _clear(self, name: str, path: str) -> None:
        """A later entry of the same name replaces the earlier one, never writes through it."""
        self.links.pop(name, None)
        if self.records is not None:
            self.records.pop(name, None)
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(path)  # what an earlier entry made; names below it are checked on disk when used
            below = name + "/"
            self.dirs = {d for d in self.dirs if d != name and not d.startswith(below)}
            self.links = {n: link for n, link in self.links.items() if not n.startswith(below)}
            if self.records is not None:
                self.records = {n: r for n, r in self.records.items() if not n.startswith(below)}
        else:
            os.unlink(path)

    def written(self, name: str, fd: int) -> None:
        """Record the file ``name``, complete, through its descriptor."""
        if self.records is not None:
            self.records[name] = file_record(os.fstat(fd))

    def create(self, name: str, mode: int) -> int:
        """A new regular file for ``name``, 0755 or 0644; returns its descriptor."""
        path = self._parent(name)
        final = 0o755 if mode & 0o111 else 0o644
        try:
            fd = os.open(path, _WRITE, final)
        except FileExistsError:
            self._clear(name, path)
            fd = os.open(path, _WRITE, final)
        if final & self.masked:
            os.fchmod(fd, final)
        self.files += 1
        return fd

    def directory(self, name: str) -> None:
        path = self._parent(name)
        try:
            os.mkdir(path, 0o755)
            made = True
        except FileExistsError:
            made = False
            if not stat.S_ISDIR(os.lstat(path).st_mode):  # a file or a link of that name: replaced
                self._clear(name, path)
                os.mkdir(path, 0o755)
                made = True
        if not made or 0o755 & self.masked:  # an existing directory keeps no mode it had
            os.chmod(path, 0o755)
        self._remember_dirs(name)

    def symlink(self, name: str, link: str) -> None:
        if link.startswith("/"):
            raise _Refused(name, f"symbolic link to the absolute path '{link}'")
        resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), link))
        if resolved == ".." or resolved.startswith("../"):
            raise _Refused(name, f"symbolic link '{link}' leaves the buildpack")
        path = self._parent(name)
        self._clear(name, path)
        os.symlink(link, path)
        self.links[name] = link
        self.files += 1

    def hardlink(self, name: str, raw_target: str) -> None:
        try:
            target = self.relative(raw_target)
        except _Refused as refused:
            raise _Refused(name, f"hard link target: {refused.why}") from refused
        source = f"{self.root}/{target}"
        if not target or self._through_link(target) or not self._regular_on_disk(target):
            raise _Refused(name, f"hard link to '{raw_target}', which is not a file extracted before it")
        path = self._parent(name)
        self._clear(name, path)
        os.link(source, path, follow_symlinks=False)
        self.files += 1
        if self.records is not None:
            self.records[name] = file_record(os.lstat(path))

    def _regular_on_disk(self, target: str) -> bool:
        """Whether ``target`` is still a regular file reached through real directories only (a directory on its
        way may have been replaced since it was written)."""
        path = self.root
        parts = target.split("/")
        for part in parts[:-1]:
            path += "/" + part
            try:
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    return False
            except FileNotFoundError:
                return False
        try:
            return stat.S_ISREG(os.lstat(f"{path}/{parts[-1]}").st_mode)
        except FileNotFoundError:
            return False

    def check_links(self) -> None:
        """Refuse the archive if any symbolic link, resolved through the others as extracted, leaves ``dest``.

        A link checked alone can look harmless (``y -> x/..``) until another entry makes ``x`` a link to ``.``,
        possibly later in the archive; the tree on disk is final here, so resolving it is exact. Run once per
        tree, not per entry.
        """
        if not self.links:
            return
        root = os.path.realpath(self.dest)
        for name, link in self.links.items():
            path = f"{self.root}/{name}"
            if os.path.islink(path) and not is_inside(root, os.path.realpath(path)):
                raise _Refused(name, f"symbolic link '{link}' leaves the buildpack")
