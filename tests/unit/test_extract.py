"""Safe extraction: every hostile entry is refused with the archive and entry named; nothing lands outside."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preparer._fs import PER_FILE_WORK
from preparer.errors import FetchError
from preparer.fetch import workers
from preparer.fetch.extract import extract_tar
from tests.buildpacks import entry, make_tar

GOOD = (entry("buildpack.toml"), b'api = "0.10"\n')


@pytest.fixture(autouse=True, params=["here", "forked"])
def _where(request: pytest.FixtureRequest) -> object:
    """Every test twice: extracted in this process, and by a forked child (as the command extracts while another
    extraction writes in its process: the lock held here), which must refuse and report alike."""
    before = workers._allowed
    workers._allowed = request.param == "forked"
    if request.param == "forked":
        PER_FILE_WORK.acquire()
    yield
    if request.param == "forked":
        PER_FILE_WORK.release()
    workers._allowed = before


def extract(data: bytes, dest: Path, **kwargs: object) -> object:
    return extract_tar(io.BytesIO(data), dest, archive="bp.tgz", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("entries", "why"),
    [
        ([(entry("../evil"), b"x")], "refusing entry '../evil': path contains '..'"),
        ([(entry("a/../../evil"), b"x")], "refusing entry 'a/../../evil': path contains '..'"),
        ([(entry("/etc/evil"), b"x")], "refusing entry '/etc/evil': absolute path"),
        ([entry("up", tarfile.SYMTYPE, link="../../etc")], "symbolic link '../../etc' leaves the buildpack"),
        (
            [entry("abs", tarfile.SYMTYPE, link="/etc/passwd")],
            "symbolic link to the absolute path '/etc/passwd'",
        ),
        (
            [entry("dir", tarfile.SYMTYPE, link="sub"), (entry("dir/x"), b"x")],
            "refusing entry 'dir/x': it would be written through a symbolic link",
        ),
        (
            [entry("hard", tarfile.LNKTYPE, link="/etc/passwd")],
            "refusing entry 'hard': hard link target: absolute path",
        ),
        ([entry("hard", tarfile.LNKTYPE, link="../x")], "hard link target: path contains '..'"),
        ([entry("hard", tarfile.LNKTYPE, link="missing")], "which is not a file extracted before it"),
        ([entry("dev", tarfile.CHRTYPE)], "refusing entry 'dev': devices, fifos and other special files"),
        ([entry("blk", tarfile.BLKTYPE)], "refusing entry 'blk': devices, fifos and other special files"),
        ([entry("fifo", tarfile.FIFOTYPE)], "refusing entry 'fifo': devices, fifos and other special files"),
        ([(entry("suid", mode=0o4755), b"x")], "refusing entry 'suid': setuid or setgid bit"),
        ([(entry("sgid", mode=0o2755), b"x")], "refusing entry 'sgid': setuid or setgid bit"),
        # Each target looks inside on its own; resolved through the other link, it leaves the buildpack.
        (
            [entry("x", tarfile.SYMTYPE, link="."), entry("y", tarfile.SYMTYPE, link="x/..")],
            "refusing entry 'y': symbolic link 'x/..' leaves the buildpack",
        ),
        (
            [entry("y", tarfile.SYMTYPE, link="x/.."), entry("x", tarfile.SYMTYPE, link=".")],
            "refusing entry 'y': symbolic link 'x/..' leaves the buildpack",
        ),
        (
            [
                entry("d", tarfile.DIRTYPE),
                entry("d/up", tarfile.SYMTYPE, link=".."),
                entry("y", tarfile.SYMTYPE, link="d/up/../.."),
            ],
            "refusing entry 'y': symbolic link 'd/up/../..' leaves the buildpack",
        ),
        # A directory replaced by a link: its old files are no longer hard link targets.
        (
            [
                entry("d", tarfile.DIRTYPE),
                (entry("d/f"), b"x"),
                entry("d", tarfile.SYMTYPE, link="sub"),
                entry("h", tarfile.LNKTYPE, link="d/f"),
            ],
            "refusing entry 'h': hard link to 'd/f', which is not a file extracted before it",
        ),
    ],
)
def test_hostile_entries_are_refused(tmp_path: Path, entries: list, why: str) -> None:  # type: ignore[type-arg]
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(FetchError) as info:
        extract(make_tar([GOOD, *entries]), dest)
    assert info.value.exit_code == 1
    assert str(info.value).startswith("failed to extract bp.tgz: ")
    assert why in str(info.value)
    outside = sorted(p.name for p in tmp_path.iterdir())
    assert outside == ["dest"]  # nothing was written next to dest
    assert not Path("/etc/evil").exists()


def test_a_good_archive_gzip_or_not(tmp_path: Path) -> None:
    data = make_tar(
        [
            GOOD,
            entry("bin", tarfile.DIRTYPE, mode=0o700),
            (entry("bin/build", mode=0o700), b"#!/bin/sh\n"),
            (entry("./lib/data", mode=0o600), b"data"),
            entry("bin/alias", tarfile.SYMTYPE, link="build"),
            entry("lib/copy", tarfile.LNKTYPE, link="lib/data"),
        ]
    )
    for name, payload in (("plain", data), ("gzipped", gzip.compress(data))):
        dest = tmp_path / name
        dest.mkdir()
        extract(payload, dest)
        assert (dest / "bin" / "build").stat().st_mode & 0o777 == 0o755
        assert (dest / "bin").stat().st_mode & 0o777 == 0o755
        assert (dest / "lib" / "data").stat().st_mode & 0o777 == 0o644
        assert (dest / "bin" / "alias").readlink() == Path("build")
        assert (dest / "lib" / "copy").read_bytes() == b"data"


def test_select_extracts_one_buildpack_of_a_layer(tmp_path: Path) -> None:
    data = make_tar(
        [
            (entry("/cnb/buildpacks/a_b/1.0.0/buildpack.toml"), b"a"),
            (entry("cnb/buildpacks/a_b/1.0.0/bin/build", mode=0o755), b"b"),
            (entry("/cnb/buildpacks/other/2.0.0/buildpack.toml"), b"c"),
        ]
    )
    extract(data, tmp_path, select="cnb/buildpacks/a_b/1.0.0", allow_absolute=True)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "bin",
        "bin/build",
        "buildpack.toml",
    ]


@pytest.mark.parametrize(
    "payload",
    [b"not a tar at all" * 100, gzip.compress(b"x" * 1000, mtime=0)[:40]],
    ids=["not-a-tar", "truncated-gzip"],
)
def test_corrupt_or_truncated_archives_fail_cleanly(tmp_path: Path, payload: bytes) -> None:
    with pytest.raises(FetchError) as info:
        extract(payload, tmp_path)
    assert str(info.value).startswith("failed to extract bp.tgz:")


def test_an_escaping_chain_never_reaches_outside_files(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("outside")
    dest = tmp_path / "dest"
    dest.mkdir()
    hostile: list[tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]] = [
        GOOD,
        entry("d", tarfile.DIRTYPE),
        (entry("d/secret"), b"inside"),
        entry("x", tarfile.SYMTYPE, link="."),
        entry("d", tarfile.SYMTYPE, link="x/.."),  # resolves to dest's parent
        entry("h", tarfile.LNKTYPE, link="d/secret"),
    ]
    with pytest.raises(FetchError):
        extract(make_tar(hostile), dest)
    assert (tmp_path / "secret").read_text() == "outside"
    assert not (dest / "h").exists()


def test_links_that_stay_inside_are_kept(tmp_path: Path) -> None:
    data = make_tar(
        [
            GOOD,
            entry("lib/v1/sub", tarfile.DIRTYPE),
            (entry("lib/v1/sub/data"), b"data"),
            entry("lib/current", tarfile.SYMTYPE, link="v1"),
            entry("top", tarfile.SYMTYPE, link="lib/current/sub/.."),
            entry("loop", tarfile.SYMTYPE, link="loop"),
            entry("dangling", tarfile.SYMTYPE, link="not/there"),
            entry("lib/current", tarfile.DIRTYPE),  # a directory replaces the link: writing below it is fine
            (entry("lib/current/new"), b"new"),
        ]
    )
    extract(data, tmp_path)
    assert (tmp_path / "top").readlink() == Path("lib/current/sub/..")
    assert (tmp_path / "lib" / "current" / "new").read_bytes() == b"new"
    assert (tmp_path / "dangling").is_symlink()


# What an extraction records for the download cache must be what a walk of the tree finds.

RECORDED_SHAPES: dict[str, list[tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]]] = {
    "plain": [GOOD, (entry("bin/build", mode=0o755), b"#!/bin/sh\n"), (entry("vendor/a/b/c.rb"), b"c")],
    "duplicates": [GOOD, (entry("x"), b"first"), (entry("x", mode=0o755), b"second, longer")],
    "file-then-dir": [
        GOOD,
        (entry("x"), b"file"),
        entry("x", tarfile.DIRTYPE, mode=0o755),
        (entry("x/y"), b"y"),
    ],
    "dir-then-file": [
        GOOD,
        (entry("d/a"), b"a"),
        entry("d/s", tarfile.SYMTYPE, link="a"),
        (entry("d"), b"now"),
    ],
    "hard-links": [
        GOOD,
        (entry("a"), b"shared"),
        entry("b", tarfile.LNKTYPE, link="a"),
        (entry("a"), b"new a"),
    ],
    "links": [GOOD, entry("l", tarfile.SYMTYPE, link="buildpack.toml"), (entry("l"), b"a file now")],
    "dir-entries-late": [GOOD, (entry("p/q/r"), b"r"), entry("p", tarfile.DIRTYPE, mode=0o700)],
}


@pytest.mark.parametrize("shape", sorted(RECORDED_SHAPES))
def test_what_extraction_records_is_what_a_walk_finds(shape: str, tmp_path: Path) -> None:
    from preparer.fetch.cache import KnownTree, record_dirs, record_tree

    dest = tmp_path / "tree"
    dest.mkdir()
    extracted = extract_tar(io.BytesIO(make_tar(RECORDED_SHAPES[shape])), dest, archive="bp.tgz", record=True)
    dest.chmod(0o755)
    assert extracted.records is not None
    known = KnownTree(extracted.records, extracted.dirs, extracted.links)
    walked = record_tree(dest, "sha256:" + "0" * 64)
    assert known.files == walked.files
    assert known.links == walked.links
    assert record_dirs(dest, known.dirs) == walked.dirs


NAMES = st.sampled_from(["a", "b", "a/b", "a/c", "b/a", "a/b/c"])
ENTRY = st.one_of(
    st.tuples(st.just("file"), NAMES, st.binary(max_size=40), st.sampled_from([0o644, 0o755])),
    st.tuples(st.just("dir"), NAMES, st.just(b""), st.sampled_from([0o755, 0o700])),
    st.tuples(st.just("symlink"), NAMES, st.sampled_from([b"a", b"b", b"c"]), st.just(0o777)),
    st.tuples(st.just("hardlink"), NAMES, st.sampled_from([b"a", b"b", b"a/b"]), st.just(0o644)),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(ENTRY, max_size=8))
def test_any_archive_records_what_a_walk_finds(
    tmp_path: Path, entries: list[tuple[str, str, bytes, int]]
) -> None:
    import shutil

    from preparer.fetch.cache import record_dirs, record_tree

    made: list[tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]] = [GOOD]
    for kind, name, data, mode in entries:
        if kind == "file":
            made.append((entry(name, mode=mode), data))
        elif kind == "dir":
            made.append(entry(name, tarfile.DIRTYPE, mode=mode))
        else:
            made.append(
                entry(name, tarfile.SYMTYPE if kind == "symlink" else tarfile.LNKTYPE, link=data.decode())
            )
    dest = tmp_path / "tree"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir()
    try:
        extracted = extract_tar(io.BytesIO(make_tar(made)), dest, archive="bp.tgz", record=True)
    except FetchError:
        return  # refused: nothing is cached
    dest.chmod(0o755)
    walked = record_tree(dest, "sha256:" + "0" * 64)
    assert extracted.records == walked.files
    assert extracted.links == walked.links
    assert record_dirs(dest, extracted.dirs) == walked.dirs


def test_a_gzip_checksum_that_does_not_match_is_refused(tmp_path: Path) -> None:
    """The end marker is not the end: the gzip data is read to its end, and its CRC checked, as gzip -d tells tar
    (a stream damaged past the files it holds was taken for whole)."""
    (tmp_path / "crc").mkdir()
    (tmp_path / "more").mkdir()
    data = bytearray(gzip.compress(make_tar([GOOD, (entry("bin/build"), b"#!/bin/sh\n")])))
    data[-8] ^= 0xFF  # the CRC-32 of the trailer
    with pytest.raises(FetchError, match=r"the gzip data is damaged"):
        extract(bytes(data), tmp_path / "crc")
    data = bytearray(gzip.compress(make_tar([GOOD]) + bytes(2 << 20)))  # 2 MiB of zeros past the end marker
    with pytest.raises(FetchError, match=r"more than 1048576 bytes follow the end of the archive"):
        extract(bytes(data), tmp_path / "more")


def test_an_archive_without_an_end_marker_ends_where_its_bytes_do(tmp_path: Path) -> None:
    """tar accepts an archive that stops between entries; so does the reader, once its bytes have ended (the
    reading to the end of the stream must not wait for more)."""
    data = make_tar([GOOD, (entry("bin/build"), b"#!/bin/sh\n")])
    whole = 4 * 512  # the two headers and the two blocks of data, without the zero blocks that end an archive
    for body in (data[:whole], gzip.compress(data[:whole])):
        dest = tmp_path / str(len(body))
        dest.mkdir()
        assert extract(body, dest).files == 2  # type: ignore[attr-defined]


def test_damage_an_inflater_reads_as_bytes_is_named_as_damage(tmp_path: Path) -> None:
    """ISA-L turns this damaged stream into bytes before it finds the damage; they are no tar, but the damage is
    the cause to name."""
    damaged = bytearray(gzip.compress(b"x" * 100_000))
    damaged[30:40] = b"\xff" * 10
    with pytest.raises(FetchError, match=r"the gzip data is damaged \("):
        extract(bytes(damaged), tmp_path)
