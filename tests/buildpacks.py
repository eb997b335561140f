"""Building real buildpack directories and archives for tests."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path


def buildpack_toml(bp_id: str, version: str = "1.0.0", api: str = "0.10", order: str = "") -> str:
    return f'api = "{api}"\n\n[buildpack]\nid = "{bp_id}"\nversion = "{version}"\n{order}'


def make_dir(root: Path, bp_id: str, version: str = "1.0.0", api: str = "0.10", payload: bytes = b"") -> Path:
    """A buildpack directory: buildpack.toml, bin/detect and bin/build (and ``payload`` as data.bin)."""
    (root / "bin").mkdir(parents=True)
    (root / "buildpack.toml").write_text(buildpack_toml(bp_id, version, api))
    for name in ("detect", "build"):
        (root / "bin" / name).write_text(f"#!/bin/sh\necho {bp_id} {name}\n")
        (root / "bin" / name).chmod(0o755)
    if payload:
        (root / "data.bin").write_bytes(payload)
    return root


def make_tgz(path: Path, bp_id: str, version: str = "1.0.0", api: str = "0.10", payload: bytes = b"") -> Path:
    """A ``.tgz`` of a buildpack directory, buildpack.toml at its root."""
    source = make_dir(path.parent / (path.name + ".src"), bp_id, version, api, payload)
    with tarfile.open(path, "w:gz") as tar:
        for child in sorted(source.rglob("*")):
            tar.add(child, arcname=child.relative_to(source).as_posix(), recursive=False)
    return path


def make_tar(entries: list[tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]]) -> bytes:
    """A tar archive made of exactly ``entries`` (headers, with data for regular files)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for entry in entries:
            info, data = entry if isinstance(entry, tuple) else (entry, b"")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data else None)
    return buf.getvalue()


def entry(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.linkname = kind, mode, link
    return info


def raw_header(name: bytes, size: int = 0, kind: bytes = b"0", mode: int = 0o644, link: bytes = b"") -> bytes:
    """One ustar header block, written by hand (fast, and free to say what tarfile would not)."""
    header = bytearray(512)
    header[0:100] = name[:100].ljust(100, b"\0")
    header[100:108] = b"%07o\0" % mode
    header[108:124] = b"0000000\0" * 2
    header[124:136] = b"%011o\0" % size
    header[136:148] = b"00000000000\0"
    header[156:157] = kind
    header[157:257] = link[:100].ljust(100, b"\0")
    header[257:265] = b"ustar\x0000"
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    return bytes(header)


def many_entries_tgz(path: Path, count: int) -> Path:
    """A ``.tgz`` of ``count`` empty files (a few MiB however large ``count`` is): an archive bomb by number."""
    import zlib

    compress = zlib.compressobj(1, zlib.DEFLATED, 31)
    with open(path, "wb") as out:
        out.write(compress.compress(raw_header(b"buildpack.toml", 0)))
        out.writelines(compress.compress(raw_header(b"d/%d" % i)) for i in range(count))
        out.write(compress.compress(bytes(1024)))
        out.write(compress.flush())
    return path
