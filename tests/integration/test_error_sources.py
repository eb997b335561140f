"""Every error about a fetched buildpack names the source the user wrote, never where the preparer staged it.

Broken buildpacks of every kind, from a directory, a local archive and over http (with and without the download
cache), each run through the real CLI: the last line names the ``uri`` as written (or the file the user gave),
and no staging or temporary path appears anywhere in the output.
"""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.buildpacks import buildpack_toml, entry, make_tar
from tests.golden import Layout
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.projects import HEAD

SCRIPT = "#!/bin/sh\n"

COMPOSITE = buildpack_toml(
    "me/composite", order='[[order]]\n[[order.group]]\nid = "me/absent"\nversion = "1.0.0"\n'
)

#: Broken buildpacks: the entries of each, and what the message must say besides naming the source.
BROKEN: dict[str, tuple[list[tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]], str]] = {
    "no-buildpack-toml": ([(entry("bin/detect", mode=0o755), SCRIPT.encode())], "buildpack.toml"),
    "malformed-toml": ([(entry("buildpack.toml"), b"api = [\n")], "buildpack.toml"),
    "control-in-version": (
        [(entry("buildpack.toml"), buildpack_toml("me/bad", "1.0\\u0007").encode())],
        "version",
    ),
    "link-outside": (
        [
            (entry("buildpack.toml"), buildpack_toml("me/link").encode()),
            entry("bin/escape", tarfile.SYMTYPE, link="../../../../etc/passwd"),
        ],
        "escape",
    ),
    "missing-children": ([(entry("buildpack.toml"), COMPOSITE.encode())], "me/absent@1.0.0"),
}


def write_dir(root: Path, entries: list[tarfile.TarInfo | tuple[tarfile.TarInfo, bytes]]) -> None:
    """The entries as a directory (links as links)."""
    for item in entries:
        info, data = item if isinstance(item, tuple) else (item, b"")
        path = root / info.name
        path.parent.mkdir(parents=True, exist_ok=True)
        if info.issym():
            path.symlink_to(info.linkname)
        else:
            path.write_bytes(data)
            path.chmod(info.mode)


@pytest.mark.parametrize("form", ["dir", "archive", "http", "http-no-cache"])
@pytest.mark.parametrize("case", sorted(BROKEN))
def test_errors_name_the_uri_as_written(case: str, form: str, preparer: Callable[..., Result], layout: Layout,
                                        http_server: FileServer) -> None:  # fmt: skip
    entries, detail = BROKEN[case]
    flags: tuple[str, ...] = ()
    if form == "dir":
        write_dir(layout.app / "bpsrc", entries)
        uri, named = "./bpsrc", str(layout.app / "bpsrc")
    elif form == "archive":
        (layout.app / "bp.tar").write_bytes(make_tar(entries))
        uri, named = "bp.tar", str(layout.app / "bp.tar")
    else:
        (http_server.root / f"{case}.tar").write_bytes(make_tar(entries))
        uri = named = http_server.url(f"{case}.tar")
        flags = ("-download-cache", "") if form == "http-no-cache" else ()
    result = preparer(*flags, project=HEAD + f'[[io.buildpacks.group]]\nuri = "{uri}"\n')
    assert result.code == 1, result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("ERROR: failed to ") and named in last and detail in last, last
    for internal in ("preparer-staging", "/tmp/run-", "/tree-", "/dir-", "/http-"):
        assert internal not in result.stdout + result.stderr, internal
