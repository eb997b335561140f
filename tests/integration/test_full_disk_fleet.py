"""A full disk where the fleet cache's upload spool is (preparer/fetch/spool.py): the local download cache's
temporary directory, or staging without a local cache. The repository is the real registry, reached through a slow
link (a proxy that holds each upload's bytes for a while, as a repository slower than the origin does), so that an
archive's bytes wait in the spool's file; the disks are small tmpfs mounts (tests/integration/test_full_disk.py);
through the CLI."""

from __future__ import annotations

import contextlib
import hashlib
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from tests.buildpacks import make_tgz
from tests.golden import Layout, listing
from tests.integration.test_full_disk import Mount, mount_tmpfs
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.plugins.registry import Registry, build_package, to_cnb
from tests.projects import group

__all__ = ["mount_tmpfs"]  # the fixture, used by name

#: Bytes that do not compress, more than the spool keeps in memory (8 MiB) and than the socket buffers hold.
PAYLOAD_SIZE = 40 << 20
#: Seconds the slow link holds an upload's bytes before it passes them on.
HOLD = 1.0


@contextlib.contextmanager
def slow_link(upstream: str) -> Iterator[str]:
    """A TCP proxy to ``upstream`` (``host:port``) that holds the bytes of every ``PATCH`` request for
    :data:`HOLD` seconds: the repository reads an upload's body later than the origin sends the download."""
    host, _, port = upstream.partition(":")
    listener = socket.create_server(("127.0.0.1", 0))
    done = threading.Event()

    def pump(source: socket.socket, target: socket.socket, hold: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if hold and data.startswith(b"PATCH "):
                    done.wait(HOLD)
                target.sendall(data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)

    def accept() -> None:
        while not done.is_set():
            try:
                client, _ = listener.accept()
                server = socket.create_connection((host, int(port)))
            except OSError:
                return
            threading.Thread(target=pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=pump, args=(server, client, False), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        done.set()
        listener.close()


def tags(repo: str) -> list[str]:
    """The tags of ``repo``, asked of the registry behind the slow link."""
    host, _, name = repo.partition("/")
    answer = requests.get(f"http://{host}/v2/{name}/tags/list", timeout=10)
    return list(answer.json().get("tags") or []) if answer.status_code == 200 else []


@pytest.fixture
def repo(registry: Registry) -> Iterator[str]:
    """A repository of the test's own in the real registry, through the slow link."""
    with slow_link(registry.host) as host:
        yield f"{host}/fleet/{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="module")
def archives(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """me/big with :data:`PAYLOAD_SIZE` bytes that do not compress, as a .tgz and as a .cnb."""
    work = tmp_path_factory.mktemp("big")
    payload = os.urandom(PAYLOAD_SIZE)
    package = build_package(work, [("me/big", "1.0.0", "")], ("me/big", "1.0.0"), payload=payload)
    return {
        "tgz": make_tgz(work / "big.tgz", "me/big", payload=payload),
        "cnb": to_cnb(package.layout, "latest", work / "big.cnb"),
    }


@pytest.mark.parametrize("kind", ["tgz", "cnb"])
def test_a_full_download_cache_under_the_spool_is_a_warning_and_the_run_goes_on(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout, tmp_path: Path,
    mount_tmpfs: Mount, repo: str, archives: dict[str, Path], kind: str,
) -> None:  # fmt: skip
    """The spool of the first attempt is in the cache's temporary directory; the attempt without the cache spools
    in staging, never in the full cache again (it did, and the run failed naming <buildpacks>)."""
    os.link(archives[kind], http_server.root / f"big.{kind}")
    cache = tmp_path / "cache"
    mount_tmpfs(cache, "4m")  # less than the archive, and than what waits in the spool's file
    url = http_server.url(f"big.{kind}")
    result = preparer("-download-cache-repo", repo, project=group(url))
    assert result.code == 0, result.stderr
    assert result.warnings == [
        f"Warning: no space left on device in the download cache ({cache}): {url} is downloaded without it"
    ]
    assert "Traceback" not in result.stderr
    assert (layout.buildpacks / "me_big" / "1.0.0" / "data.bin").stat().st_size == PAYLOAD_SIZE
    # Written back all the same: its bytes waited in staging, where the download went.
    digest = hashlib.sha256(archives[kind].read_bytes()).hexdigest()
    assert f"sha256-{digest}" in tags(repo)


def test_a_full_staging_under_the_spool_names_it(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout, mount_tmpfs: Mount, repo: str,
    archives: dict[str, Path],
) -> None:  # fmt: skip
    os.link(archives["tgz"], http_server.root / "big.tgz")
    mount_tmpfs(layout.buildpacks, "12m")
    (layout.app / "project.toml").write_text(group(http_server.url("big.tgz")))
    before = listing(layout.root)
    result = preparer("-download-cache", "", "-download-cache-repo", repo)
    assert result.code == 1, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to install {http_server.url('big.tgz')}: no space left on device in <buildpacks> "
        f"({layout.buildpacks})"
    )
    assert "Traceback" not in result.stderr
    assert listing(layout.root) == before
