"""Buildpack archives over http from a real server on 127.0.0.1, with faults injected, through the CLI."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from preparer.fetch.environment import ca_source
from tests.buildpacks import make_tgz
from tests.golden import BUILDER, Layout, listing
from tests.plugins.cli import Result, base_env
from tests.plugins.http_server import FileServer, _serve
from tests.projects import group

FAST = {"CNB_PREPARER_HTTP_TIMEOUT": "1"}


def serve(server: FileServer, name: str, bp_id: str, payload: bytes = b"") -> str:
    """Put a buildpack archive on the server; return its sha256."""
    path = make_tgz(server.root / name, bp_id, payload=payload)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cache_entries(tmp_path: Path) -> list[str]:
    """The blobs and extracted trees in the cache (not the directories that hold them, nor trees' manifests)."""
    cache = tmp_path / "cache"
    return [
        p
        for p in listing(cache)
        if (p.startswith("blobs/sha256/") and p.count("/") == 2 and not p.endswith("/"))
        or (p.startswith("trees/sha256/") and p.count("/") == 3 and p.endswith("/"))
    ]


def test_download_with_a_pinned_digest(preparer: Callable[..., Result], http_server: FileServer, layout: Layout,
                                       tmp_path: Path) -> None:  # fmt: skip
    sha = serve(http_server, "bp.tgz", "me/http")
    report = tmp_path / "report.toml"
    result = preparer("-prepare-report", str(report), project=group(http_server.url(f"bp.tgz#sha256={sha}")))
    assert result.code == 0, result.stderr
    assert (layout.buildpacks / "me_http" / "1.0.0" / "bin" / "build").is_file()
    assert f'digest = "sha256:{sha}"' in report.read_text()
    assert f"Downloading {http_server.url('bp.tgz')}" in result.stdout


def test_server_errors_are_retried(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout
) -> None:
    serve(http_server, "bp.tgz", "me/http")
    http_server.fail("bp.tgz", "500", "500")
    result = preparer(project=group(http_server.url("bp.tgz")), env=FAST)
    assert result.code == 0, result.stderr
    assert [status for status, _ in http_server.seen("bp.tgz")] == [500, 500, 200]


def test_a_truncated_body_is_retried_and_never_cached(preparer: Callable[..., Result], http_server: FileServer,
                                                      tmp_path: Path) -> None:  # fmt: skip
    serve(http_server, "bp.tgz", "me/http", payload=b"x" * 100_000)
    http_server.fail("bp.tgz", "truncate")
    assert preparer(project=group(http_server.url("bp.tgz")), env=FAST).code == 0
    assert [s for s, _ in http_server.seen("bp.tgz")] == [200, 200]
    serve(http_server, "cut.tgz", "me/cut", payload=b"y" * 100_000)
    http_server.fail("cut.tgz", "truncate", "truncate", "truncate", "truncate")
    result = preparer(project=group(http_server.url("cut.tgz")), env=FAST)
    assert result.code == 1
    assert result.stderr.splitlines()[-1].startswith(
        f"ERROR: failed to download {http_server.url('cut.tgz')}: "
    )
    assert "(after 4 attempts)" in result.stderr
    assert len(cache_entries(tmp_path)) == 1  # only the good archive's tree


def test_a_wrong_digest_fails_and_installs_nothing(preparer: Callable[..., Result], http_server: FileServer,
                                                   layout: Layout, tmp_path: Path) -> None:  # fmt: skip
    serve(http_server, "bp.tgz", "me/http")
    before = listing(layout.buildpacks)
    result = preparer(project=group(http_server.url("bp.tgz#sha256=" + "0" * 64)))
    assert result.code == 1
    assert f"ERROR: failed to verify {http_server.url('bp.tgz')}: sha256 mismatch" in result.stderr
    assert listing(layout.buildpacks) == before
    assert cache_entries(tmp_path) == []
    assert len(http_server.seen("bp.tgz")) == 1  # a mismatch is not retried


def test_a_pinned_body_that_is_no_archive_is_reported_as_the_mismatch(
    preparer: Callable[..., Result], http_server: FileServer, tmp_path: Path
) -> None:
    (http_server.root / "bp.tgz").write_bytes(b"<html>a login page</html>" * 100)
    result = preparer(project=group(http_server.url("bp.tgz#sha256=" + "0" * 64)))
    assert result.code == 1
    assert result.stderr.splitlines()[-1].startswith(
        f"ERROR: failed to verify {http_server.url('bp.tgz')}: sha256 mismatch: the uri pins sha256:{'0' * 64}, "
    )
    assert cache_entries(tmp_path) == []


def test_without_a_cache_retries_and_leaves_nothing_behind(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout, tmp_path: Path
) -> None:
    serve(http_server, "bp.tgz", "me/http", payload=b"x" * 100_000)
    http_server.fail("bp.tgz", "500", "truncate")
    result = preparer("-download-cache", "", project=group(http_server.url("bp.tgz")), env=FAST)
    assert result.code == 0, result.stderr
    assert [s for s, _ in http_server.seen("bp.tgz")] == [500, 200, 200]
    assert (layout.buildpacks / "me_http" / "1.0.0" / "data.bin").read_bytes() == b"x" * 100_000
    assert not (tmp_path / "cache").exists() and not (tmp_path / ".cache").exists()
    builder = {p.name for p in (BUILDER / "buildpacks").iterdir()}
    assert {p.name for p in layout.buildpacks.iterdir()} == builder | {"me_http"}  # no staging left


def test_not_found_is_not_retried(preparer: Callable[..., Result], http_server: FileServer) -> None:
    result = preparer(project=group(http_server.url("missing.tgz")), env=FAST)
    assert result.code == 1
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to download {http_server.url('missing.tgz')}: HTTP 404 Not Found"
    )
    assert len(http_server.seen("missing.tgz")) == 1


def test_a_slow_server_times_out(preparer: Callable[..., Result], http_server: FileServer) -> None:
    serve(http_server, "bp.tgz", "me/http")
    http_server.slow_seconds = 3
    http_server.fail("bp.tgz", "slow", "slow", "slow", "slow")
    result = preparer(project=group(http_server.url("bp.tgz")), env={"CNB_PREPARER_HTTP_TIMEOUT": "0.5"})
    assert result.code == 1
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to download {http_server.url('bp.tgz')}: no answer from 127.0.0.1 (after 4 attempts)"
    )


def test_warm_runs_revalidate_or_skip_the_network(preparer: Callable[..., Result], http_server: FileServer,
                                                  layout: Layout, tmp_path: Path) -> None:  # fmt: skip
    sha = serve(http_server, "bp.tgz", "me/http", payload=b"z" * 10_000)
    assert preparer(project=group(http_server.url("bp.tgz"))).code == 0
    installed = layout.buildpacks / "me_http" / "1.0.0" / "data.bin"
    cached = tmp_path / "cache" / "trees" / "sha256" / sha / "root" / "data.bin"
    shutil.rmtree(layout.buildpacks / "me_http")
    assert preparer(project=group(http_server.url("bp.tgz"))).code == 0
    statuses = http_server.seen("bp.tgz")
    assert [s for s, _ in statuses] == [200, 304]
    assert statuses[1][1]["If-None-Match"] == f'"{sha}"'
    assert installed.read_bytes() == b"z" * 10_000
    # Without a build user, the build may be root and could write the cache's files: installs are copies.
    assert installed.stat().st_ino != cached.stat().st_ino
    shutil.rmtree(layout.buildpacks / "me_http")
    assert preparer(project=group(http_server.url(f"bp.tgz#sha256={sha}"))).code == 0
    assert len(http_server.seen("bp.tgz")) == 2  # pinned and cached: no request at all


def test_a_warm_run_asks_every_origin_at_once(
    preparer: Callable[..., Result], http_server: FileServer
) -> None:
    """Six cached archives from an origin 0.3 s away: the six revalidation requests are in flight together (the
    fetch threads, two to four, would ask one at a time each: a round trip per buildpack per thread)."""
    names = [f"bp{i}.tgz" for i in range(6)]
    for i, name in enumerate(names):
        serve(http_server, name, f"me/far{i}")
    project = group(*(http_server.url(name) for name in names))
    assert preparer(project=project).code == 0
    http_server.latency, http_server.most_in_flight = 0.3, 0
    result = preparer(project=project)
    assert result.code == 0, result.stderr
    assert [s for name in names for s, _ in http_server.seen(name)] == [200, 304] * 6
    assert http_server.most_in_flight == 6


def test_an_origin_that_is_down_is_asked_for_all_its_attempts_once(
    preparer: Callable[..., Result], tmp_path: Path
) -> None:
    """Six cached archives whose origin stops listening: the copies stand in, each with its warning. The first
    requests go through their attempts; the others are not sent, and their warnings say why (before: every
    archive's own four attempts, two at a time)."""
    serving = _serve(FileServer(tmp_path / "www"))
    server = next(serving)
    names = [f"bp{i}.tgz" for i in range(6)]
    for i, name in enumerate(names):
        serve(server, name, f"me/down{i}")
    project = group(*(server.url(name) for name in names))
    assert preparer(project=project).code == 0
    serving.close()  # the port now refuses connections
    result = preparer(project=project)
    assert result.code == 0, result.stderr
    stood_in = [line for line in result.stderr.splitlines() if "the download cache's copy is used" in line]
    assert len(stood_in) == 6
    retried = {
        found[1]
        for line in result.stderr.splitlines()
        if (found := re.search(r"download (\S+): .*again", line))
    }
    assert 1 <= len(retried) <= 4  # the fetches under way when the origin went down: at most one per thread
    # Each copy stood in after its own four attempts, or at once (a fetch still retrying stops when another's
    # attempts have all failed).
    every = [line for line in stood_in if "(after 4 attempts)" in line]
    not_again = [line for line in stood_in if "in every attempt earlier in this run: not asked again" in line]
    assert 1 <= len(every) <= len(retried) and len(every) + len(not_again) == 6
    assert all(f"connection refused by 127.0.0.1 port {server.port}" in line for line in stood_in)


def test_a_cache_record_naming_no_digest_is_no_record(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout, tmp_path: Path
) -> None:
    """A URL's record in the download cache is read back as input: one whose digest reads as a path
    (``sha256:../../etc``) or whose validators are no strings is taken for no record. The archive is downloaded
    again and the record written anew (before, the run failed: 'unsupported or malformed digest')."""
    sha = serve(http_server, "bp.tgz", "me/rec")
    url = http_server.url("bp.tgz")
    assert preparer(project=group(url)).code == 0
    record = tmp_path / "cache" / "http" / (hashlib.sha256(url.encode()).hexdigest() + ".json")
    good = json.loads(record.read_text())
    for bad in ({**good, "digest": "sha256:../../../../etc"}, {**good, "etag": ["x"]}):
        record.write_text(json.dumps(bad))
        shutil.rmtree(layout.buildpacks / "me_rec")
        result = preparer(project=group(url))
        assert result.code == 0, result.stderr
        assert http_server.seen("bp.tgz")[-1][0] == 200  # downloaded, not revalidated
        assert json.loads(record.read_text())["digest"] == f"sha256:{sha}"


def test_a_restored_cache_whose_tree_is_stale_is_replaced(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout, tmp_path: Path
) -> None:
    """A cache volume restored from a copy (every inode new) and missing a URL's record: the archive is downloaded
    again, and the stale tree of the same digest is replaced by the new one (before: exit 1, 'the download cache
    did not keep what was just put in it')."""
    sha = serve(http_server, "bp.tgz", "me/restored")
    url = http_server.url("bp.tgz")
    assert preparer(project=group(url)).code == 0
    cache = tmp_path / "cache"
    shutil.copytree(cache, tmp_path / "copy", symlinks=True)
    shutil.rmtree(cache)
    shutil.copytree(tmp_path / "copy", cache, symlinks=True)  # the same files, every inode new
    cache.chmod(0o700)
    for record in (cache / "http").iterdir():
        record.unlink()
    shutil.rmtree(layout.buildpacks / "me_restored")
    result = preparer(project=group(url))
    assert result.code == 0, result.stderr
    assert (layout.buildpacks / "me_restored" / "1.0.0" / "buildpack.toml").is_file()
    assert [s for s, _ in http_server.seen("bp.tgz")] == [200, 200]
    shutil.rmtree(layout.buildpacks / "me_restored")
    assert preparer(project=group(url)).code == 0  # and the new tree serves the next run
    assert [s for s, _ in http_server.seen("bp.tgz")] == [200, 200, 304]
    assert (cache / "trees" / "sha256" / sha / "manifest.json").is_file()


def test_warm_installs_are_hard_links_only_where_the_build_cannot_write_them(
    preparer: Callable[..., Result], http_server: FileServer, layout: Layout, tmp_path: Path
) -> None:
    sha = serve(http_server, "bp.tgz", "me/http", payload=b"z" * 10_000)
    as_root_for_uid_1000 = ("-uid", "1000", "-gid", "1000")
    assert preparer(*as_root_for_uid_1000, project=group(http_server.url(f"bp.tgz#sha256={sha}"))).code == 0
    installed = layout.buildpacks / "me_http" / "1.0.0" / "data.bin"
    shutil.rmtree(layout.buildpacks / "me_http")
    assert preparer(*as_root_for_uid_1000, project=group(http_server.url(f"bp.tgz#sha256={sha}"))).code == 0
    again = installed.stat()
    assert again.st_ino == (tmp_path / "cache" / "trees" / "sha256" / sha / "root" / "data.bin").stat().st_ino
    assert (again.st_uid, again.st_mode & 0o022) == (0, 0)  # root's, and the build user cannot write it


def test_warm_runs_still_go_through_a_configured_proxy(preparer: Callable[..., Result], http_server: FileServer,
                                                       layout: Layout) -> None:  # fmt: skip
    serve(http_server, "bp.tgz", "me/http")
    assert preparer(project=group(http_server.url("bp.tgz"))).code == 0
    shutil.rmtree(layout.buildpacks / "me_http")
    # The test server also answers proxy requests (GET http://host/path), so it stands in for the proxy.
    proxy = f"http://127.0.0.1:{http_server.port}"
    assert preparer(project=group(http_server.url("bp.tgz")), env={"HTTP_PROXY": proxy}).code == 0
    assert http_server.proxied == ["/bp.tgz"]
    assert [s for s, _ in http_server.seen("bp.tgz")] == [200, 304]
    assert (layout.buildpacks / "me_http" / "1.0.0" / "buildpack.toml").is_file()


def test_https_cold_warm_and_an_untrusted_certificate(preparer: Callable[..., Result], tls_server: FileServer,
                                                      layout: Layout) -> None:  # fmt: skip
    assert tls_server.cert is not None
    serve(tls_server, "bp.tgz", "me/tls", payload=b"t" * 10_000)
    trusted = {"REQUESTS_CA_BUNDLE": str(tls_server.cert)}
    assert preparer(project=group(tls_server.url("bp.tgz")), env=trusted).code == 0
    shutil.rmtree(layout.buildpacks / "me_tls")
    assert preparer(project=group(tls_server.url("bp.tgz")), env=trusted).code == 0
    assert [s for s, _ in tls_server.seen("bp.tgz")] == [200, 304]
    assert (layout.buildpacks / "me_tls" / "1.0.0" / "data.bin").read_bytes() == b"t" * 10_000
    shutil.rmtree(layout.buildpacks / "me_tls")
    untrusted = preparer(project=group(tls_server.url("bp.tgz")), env=FAST)
    system = ca_source({})  # the run's environment names no CA certificates
    assert untrusted.code == 1
    # Named for what it is, and not retried: another attempt cannot make the certificate trusted.
    assert untrusted.stderr.splitlines()[-1] == (
        f"ERROR: failed to download {tls_server.url('bp.tgz')}: the TLS certificate of 127.0.0.1 is not trusted: "
        f"self-signed certificate (CA certificates: {system[0]}, from {system[1]}); for a private CA, "
        "set REQUESTS_CA_BUNDLE to its certificate"
    )
    assert len(tls_server.seen("bp.tgz")) == 2  # no request ever crossed the untrusted connection
    assert not (layout.buildpacks / "me_tls").exists()
    # OpenSSL's SSL_CERT_FILE is honoured as well as requests' variables (docs/decisions.md, "Fetching": TLS trust).
    assert (
        preparer(project=group(tls_server.url("bp.tgz")), env={"SSL_CERT_FILE": str(tls_server.cert)}).code
        == 0
    )
    assert (layout.buildpacks / "me_tls" / "1.0.0" / "data.bin").is_file()


def test_credentials_never_reach_output(preparer: Callable[..., Result], http_server: FileServer, layout: Layout,
                                        tmp_path: Path) -> None:  # fmt: skip
    serve(http_server, "bp.tgz", "me/http")
    secret_url = http_server.url("bp.tgz").replace("127.0.0.1", "user:s3cr3t@127.0.0.1")
    ok = preparer(
        "-log-level", "debug", "-prepare-report", str(tmp_path / "r.toml"), project=group(secret_url)
    )
    shutil.rmtree(layout.buildpacks / "me_http")
    warm = preparer("-log-level", "debug", project=group(secret_url))
    missing = preparer(
        "-log-level=debug", project=group(secret_url.replace("bp.tgz", "nope.tgz?token=t0k3n"))
    )
    assert ok.code == 0 and warm.code == 0 and missing.code == 1
    for text in (ok.stdout, ok.stderr, warm.stdout, warm.stderr, missing.stdout, missing.stderr,
                 (tmp_path / "r.toml").read_text()):  # fmt: skip
        assert "s3cr3t" not in text and "t0k3n" not in text
    (_, first), (status, revalidation) = http_server.seen("bp.tgz")
    assert first["Authorization"] == "Basic " + base64.b64encode(b"user:s3cr3t").decode()
    assert status == 304 and revalidation["Authorization"] == first["Authorization"]  # the same on a warm run


def test_third_of_four_downloads_failing_changes_nothing(preparer: Callable[..., Result], http_server: FileServer,
                                                         layout: Layout) -> None:  # fmt: skip
    for name in ("a", "b", "d"):
        serve(http_server, f"{name}.tgz", f"me/{name}")
    (layout.app / "junk.log").write_text("x")
    (layout.app / "index.js").write_text("x")
    project = group(*(http_server.url(f"{n}.tgz") for n in "abcd")) + (
        '[io.buildpacks]\nexclude = ["*.log"]\n[[io.buildpacks.build.env]]\nname = "A"\nvalue = "1"\n'
    )
    (layout.app / "project.toml").write_text(project)
    before = {p: listing(p) for p in (layout.app, layout.layers, layout.buildpacks)}
    result = preparer(env=FAST)
    assert result.code == 1
    assert f"failed to download {http_server.url('c.tgz')}: HTTP 404" in result.stderr
    assert {p: listing(p) for p in (layout.app, layout.layers, layout.buildpacks)} == before
    assert not layout.platform.exists()


def test_eight_concurrent_preparers_share_one_cache(http_server: FileServer, tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        serve(http_server, f"{name}.tgz", f"me/{name}", payload=name.encode() * 200_000)
    project = group(*(http_server.url(f"{n}.tgz") for n in "abc"))
    cache = tmp_path / "shared-cache"
    procs = []
    layouts = []
    for i in range(8):
        lay = Layout(tmp_path / f"build{i}")
        shutil.copytree(BUILDER, lay.root / "cnb")
        lay.app.mkdir(parents=True)
        (lay.app / "project.toml").write_text(project)
        layouts.append(lay)
        args = [*lay.flags(), "-download-cache", str(cache)]
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "preparer", *args],
                env=base_env(tmp_path),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outcomes = [(p.wait(timeout=120), p.stderr.read() if p.stderr else "") for p in procs]
    assert all(code == 0 for code, _ in outcomes), outcomes
    orders = {(lay.layers / "order.toml").read_bytes() for lay in layouts}
    trees = {tuple(listing(lay.buildpacks)) for lay in layouts}
    data = {(lay.buildpacks / "me_b" / "1.0.0" / "data.bin").read_bytes() for lay in layouts}
    assert len(orders) == 1 and len(trees) == 1 and data == {b"b" * 200_000}
    for name in ("a", "b", "c"):
        assert [s for s, _ in http_server.seen(f"{name}.tgz")].count(
            200
        ) == 1  # downloaded once, then revalidated
    assert listing(cache / "tmp") == []
