"""The fleet download cache (docs/fleet.md): Debian's docker-registry as the cluster's cache repository, the test
HTTP server as the origin whose requests are counted, and preparers as separate "pods" (each its own HOME, local
download cache and build layout), run through the real CLI."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import uuid
from pathlib import Path

import pytest
import requests

from tests.buildpacks import make_tgz
from tests.golden import BUILDER, Layout, listing
from tests.plugins.cli import Result, base_env, run_cli
from tests.plugins.http_server import FileServer
from tests.plugins.registry import Registry, build_package, push, started, to_cnb
from tests.projects import HEAD, group


def pod(tmp_path: Path, name: str, project: str, *flags: str, env: dict[str, str] | None = None) -> Result:
    """One build pod: its own HOME, TMPDIR, local download cache and layout; the real CLI."""
    return run_cli(*new_pod(tmp_path / name, project, *flags, env=env))


def new_pod(
    root: Path, project: str, *flags: str, env: dict[str, str] | None = None
) -> tuple[list[str], dict[str, str]]:
    """A pod's layout under ``root``: the arguments and environment of its run."""
    layout = Layout(root)
    shutil.copytree(BUILDER, root / "cnb")
    layout.app.mkdir(parents=True)
    (layout.app / "project.toml").write_text(project)
    (root / "tmp").mkdir()
    args = [*layout.flags(), "-download-cache", str(root / "cache"), *flags]
    return args, base_env(root, TMPDIR=str(root / "tmp"), **(env or {}))


@pytest.fixture
def repo(registry: Registry) -> str:
    """A repository of its own in the cluster's registry, for one test."""
    return f"{registry.host}/fleet/{uuid.uuid4().hex[:12]}"


def url_tag(url: str) -> str:
    """The tag of ``url``'s record (its sha256, without the fragment)."""
    return "url-" + hashlib.sha256(url.partition("#")[0].encode()).hexdigest()


def tags(repo: str) -> list[str]:
    host, _, name = repo.partition("/")
    answer = requests.get(f"http://{host}/v2/{name}/tags/list", timeout=10)
    return sorted(answer.json().get("tags") or []) if answer.status_code == 200 else []


def packaged(tmp_path: Path, bp_id: str, destination: str) -> str:
    """A buildpackage of ``bp_id`` 1.0.0 pushed to ``destination`` (``registry/repository:tag``); its digest."""
    package = build_package(tmp_path / "oci", [(bp_id, "1.0.0", "")], (bp_id, "1.0.0"))
    return push(package.layout, "latest", destination)


def archive(server: FileServer, name: str, bp_id: str) -> str:
    path = make_tgz(server.root / name, bp_id)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pods_after_the_first_make_no_origin_downloads(
    tmp_path: Path, http_server: FileServer, repo: str
) -> None:
    pinned_sha = archive(http_server, "pinned.tgz", "acme/pinned")
    archive(http_server, "plain.tgz", "acme/plain")
    project = group(http_server.url(f"pinned.tgz#sha256={pinned_sha}"), http_server.url("plain.tgz"))
    first = pod(tmp_path, "pod1", project, "-download-cache-repo", repo)
    assert first.code == 0 and first.stderr == ""
    assert f"sha256-{pinned_sha}" in tags(repo) and len(tags(repo)) == 4  # sha256- and url- for each archive

    for n in (2, 3, 4):
        result = pod(tmp_path, f"pod{n}", project, "-download-cache-repo", repo)
        assert result.code == 0 and result.stderr == ""
        assert (
            f"Installed acme/pinned@1.0.0 from {http_server.url('pinned.tgz')}" in result.stdout
        )  # as written
    assert [s for s, _ in http_server.seen("pinned.tgz")] == [200]  # pinned: never the origin again
    assert [s for s, _ in http_server.seen("plain.tgz")] == [200, 304, 304, 304]  # unpinned: one 304 each

    assert (
        pod(tmp_path, "pod5", project, "-download-cache-repo", repo, "-download-cache-max-age", "1h").code
        == 0
    )
    assert [s for s, _ in http_server.seen("plain.tgz")] == [200, 304, 304, 304]  # fresh enough: not asked


def test_a_cnb_over_http_is_written_back_and_served_like_an_archive(
    tmp_path: Path, http_server: FileServer, repo: str
) -> None:
    """A ``.cnb`` URL, pinned and unpinned: one origin download, then pods served from the repository (the pinned
    one asks nothing; the unpinned one a 304), and offline pods too."""
    package = build_package(tmp_path / "oci", [("acme/packaged", "1.0.0", "")], ("acme/packaged", "1.0.0"))
    cnb = to_cnb(package.layout, "latest", http_server.root / "bp.cnb")
    shutil.copy(cnb, http_server.root / "plain.cnb")
    sha = hashlib.sha256(cnb.read_bytes()).hexdigest()
    pinned, plain = http_server.url(f"bp.cnb#sha256={sha}"), http_server.url("plain.cnb")
    first = pod(tmp_path, "pod1", group(pinned, plain), "-download-cache-repo", repo)
    assert (first.code, first.stderr) == (0, "")
    assert tags(repo) == sorted([f"sha256-{sha}", url_tag(pinned), url_tag(plain)])
    for name, mode in (("pod2", "read-write"), ("pod3", "offline")):
        again = pod(tmp_path, name, group(pinned, plain), "-download-cache-repo", repo,
                    "-download-cache-repo-mode", mode)  # fmt: skip
        assert (again.code, again.stderr) == (0, "")
        assert "acme_packaged/1.0.0/" in listing(tmp_path / name / "cnb" / "buildpacks")
    assert [s for s, _ in http_server.seen("bp.cnb")] == [200]
    assert [s for s, _ in http_server.seen("plain.cnb")] == [200, 304]


def test_offline_uses_the_repository_only(tmp_path: Path, http_server: FileServer, repo: str) -> None:
    archive(http_server, "bp.tgz", "acme/bp")
    assert pod(tmp_path, "seed", group(http_server.url("bp.tgz")), "-download-cache-repo", repo).code == 0
    before = list(http_server.requests)
    offline = ["-download-cache-repo", repo, "-download-cache-repo-mode", "offline"]
    assert pod(tmp_path, "air-gapped", group(http_server.url("bp.tgz")), *offline).code == 0
    missing = pod(tmp_path, "miss", group(http_server.url("other.tgz")), *offline)
    assert http_server.requests == before
    key = url_tag(http_server.url("other.tgz"))
    assert missing.code == 1
    assert missing.stderr == (
        f"ERROR: failed to download {http_server.url('other.tgz')}: not in the download cache repository "
        f"(seed {key})\n"
    )


def test_read_mode_never_writes(tmp_path: Path, http_server: FileServer, repo: str) -> None:
    archive(http_server, "bp.tgz", "acme/bp")
    args = ["-download-cache-repo", repo, "-download-cache-repo-mode", "read"]
    assert pod(tmp_path, "reader", group(http_server.url("bp.tgz")), *args).code == 0
    assert tags(repo) == []


def test_a_repository_that_is_down_or_refuses_is_one_warning(
    tmp_path: Path, http_server: FileServer, auth_registry: Registry
) -> None:
    archive(http_server, "bp.tgz", "acme/bp")
    down = pod(
        tmp_path, "down", group(http_server.url("bp.tgz")), "-download-cache-repo", "127.0.0.1:1/fleet/x"
    )
    assert down.code == 0
    assert down.stderr.startswith("Warning: the download cache repository 127.0.0.1:1/fleet/x is not used: ")
    assert len(down.stderr.splitlines()) == 1
    refused = pod(tmp_path, "refused", group(http_server.url("bp.tgz")), "-download-cache-repo",
                  f"{auth_registry.host}/fleet/x")  # fmt: skip
    assert refused.code == 0
    assert refused.stderr == (
        f"Warning: the download cache repository {auth_registry.host}/fleet/x is not used: "
        f"HTTP 401 (credentials for {auth_registry.host})\n"
    )


def test_a_corrupt_blob_or_a_lying_tag_falls_back_to_the_origin(
    tmp_path: Path, http_server: FileServer, registry: Registry, repo: str
) -> None:
    sha = archive(http_server, "bp.tgz", "acme/bp")
    pinned = http_server.url(f"bp.tgz#sha256={sha}")
    assert pod(tmp_path, "seed", group(pinned), "-download-cache-repo", repo).code == 0
    blob = registry.blob_file(f"sha256:{sha}")
    blob.write_bytes(blob.read_bytes()[:-8] + b"XXXXXXXX")
    corrupt = pod(tmp_path, "corrupt", group(pinned), "-download-cache-repo", repo)
    assert corrupt.code == 0
    assert corrupt.stderr.startswith(
        f"Warning: the download cache repository's copy of {http_server.url('bp.tgz')} is not used: sha256 mismatch"
    )
    assert [s for s, _ in http_server.seen("bp.tgz")] == [200, 200]

    # A tag that names another archive than its digest: ignored, and the origin's bytes are used.
    other_sha = archive(http_server, "other.tgz", "acme/other")
    host, _, name = repo.partition("/")
    other_record = requests.get(f"http://{host}/v2/{name}/manifests/sha256-{sha}",
                                headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}, timeout=10)  # fmt: skip
    requests.put(f"http://{host}/v2/{name}/manifests/sha256-{other_sha}", data=other_record.content,
                 headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"}, timeout=10).raise_for_status()  # fmt: skip
    lying = pod(
        tmp_path,
        "lying",
        group(http_server.url(f"other.tgz#sha256={other_sha}")),
        "-download-cache-repo",
        repo,
    )
    assert lying.code == 0
    assert f"sha256-{other_sha} is ignored: its layer is not the digest it is tagged with" in lying.stderr
    assert [s for s, _ in http_server.seen("other.tgz")] == [200]


def test_downloads_with_credentials_are_never_written_back(
    tmp_path: Path, http_server: FileServer, repo: str
) -> None:
    archive(http_server, "bp.tgz", "acme/bp")
    url = http_server.url("bp.tgz").replace("http://", "http://user:secret@")
    assert pod(tmp_path, "private", group(url), "-download-cache-repo", repo).code == 0
    assert tags(repo) == []


def test_nothing_is_written_back_when_the_run_fails(
    tmp_path: Path, http_server: FileServer, repo: str
) -> None:
    archive(http_server, "bp.tgz", "acme/bp")
    result = pod(tmp_path, "failing", group(http_server.url("bp.tgz"), http_server.url("missing.tgz")),
                 "-download-cache-repo", repo)  # fmt: skip
    assert result.code == 1
    assert tags(repo) == []


def test_only_kept_archives_reach_the_repository(tmp_path: Path, http_server: FileServer, repo: str) -> None:
    """Uploads run beside their downloads: a download cut short is retried and the repository holds the archive
    once; a download that fails its pin leaves no blob and no tag. No kept bytes are left on disk."""
    sha = archive(http_server, "bp.tgz", "acme/bp")
    size = (http_server.root / "bp.tgz").stat().st_size
    http_server.fail("bp.tgz", "truncate")
    kept = pod(tmp_path, "kept", group(http_server.url(f"bp.tgz#sha256={sha}")), "-download-cache-repo", repo)
    assert (kept.code, kept.stderr) == (
        0,
        (
            f"Warning: download {http_server.url('bp.tgz')}: 127.0.0.1 closed the connection after {size // 2} of "
            f"{size} bytes; "
            "trying again in 0.5 s (attempt 2 of 4)\n"
        ),
    )  # the retry is announced
    assert [s for s, _ in http_server.seen("bp.tgz")] == [200, 200]
    assert tags(repo) == sorted([f"sha256-{sha}", url_tag(http_server.url("bp.tgz"))])

    evil = archive(http_server, "evil.tgz", "acme/evil")
    other = f"{repo}-other"
    refused = pod(tmp_path, "refused", group(http_server.url(f"evil.tgz#sha256={sha}")), "-download-cache-repo",
                  other)  # fmt: skip
    assert refused.code == 1 and "sha256 mismatch" in refused.stderr
    host, _, name = other.partition("/")
    assert tags(other) == []
    assert requests.head(f"http://{host}/v2/{name}/blobs/sha256:{evil}", timeout=10).status_code == 404
    assert list(tmp_path.rglob("fleet-*")) == []


def test_a_stopped_run_ends_its_uploads_within_a_second(
    tmp_path: Path, http_server: FileServer, repo: str
) -> None:
    """SIGTERM while archives trickle in (their uploads under way): the run stops within a second, as without a
    repository, and the repository gets no record."""
    names = [f"trickle{i}.tgz" for i in range(2)]
    for i, name in enumerate(names):
        make_tgz(http_server.root / name, f"me/slow{i}", payload=os.urandom(4000))
        http_server.fail(name, "trickle")
    root = tmp_path / "pod"
    args, env = new_pod(root, group(*map(http_server.url, names)), "-download-cache-repo", repo)
    proc = subprocess.Popen([sys.executable, "-m", "preparer", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 20
    while not all(http_server.seen(n) for n in names) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # bytes are trickling in, and out to the repository
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert proc.returncode == 143, stderr
    assert stderr.splitlines()[-1] == "ERROR: failed to prepare: interrupted (SIGTERM)"
    assert took < 1.0, f"stopped {took:.2f} s after SIGTERM"
    assert tags(repo) == []
    assert list(root.rglob("fleet-*")) == []


def test_origin_down_with_a_local_copy_uses_it_with_a_warning(
    tmp_path: Path, http_server: FileServer
) -> None:
    archive(http_server, "bp.tgz", "acme/bp")
    url = http_server.url("bp.tgz")
    root = tmp_path / "pod"
    args, env = new_pod(root, group(url), env={"CNB_PREPARER_HTTP_TIMEOUT": "2"})
    layout = Layout(root)
    assert run_cli(args, env).code == 0
    shutil.rmtree(layout.buildpacks / "acme_bp")
    http_server.fail("bp.tgz", *["500"] * 8)
    again = run_cli(args, env)
    assert again.code == 0
    assert f"Warning: {url} could not be revalidated" in again.stderr
    assert "acme_bp/1.0.0/bin/build" in listing(layout.buildpacks)


def test_an_image_by_digest_comes_from_the_repository(
    tmp_path: Path, http_server: FileServer, registry: Registry, repo: str
) -> None:
    """Seeded with skopeo as docs/fleet.md says; the origin (named on the HTTP server's host) is never asked."""
    digest = packaged(tmp_path, "acme/packaged", f"{repo}:sha256-seed")
    subprocess.run(["skopeo", "copy", "--src-tls-verify=false", "--dest-tls-verify=false", "--preserve-digests",
                    f"docker://{repo}@{digest}", f"docker://{repo}:sha256-{digest.removeprefix('sha256:')}"],
                   check=True, capture_output=True)  # fmt: skip
    origin = f"127.0.0.1:{http_server.port}/vendor/packaged@{digest}"
    result = pod(tmp_path, "pod", group(f"docker://{origin}"), "-download-cache-repo", repo)
    assert result.code == 0, result.stderr
    assert [path for path, _, _ in http_server.requests if path.startswith("/v2")] == []
    report_line = f"from {origin}"
    assert report_line in result.stdout


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("-download-cache-repo", "registry.example", "is not <registry>/<repository>"),
        ("-download-cache-repo-mode", "sometimes", "is not one of read-write, read, offline"),
        ("-download-cache-max-age", "1 day", "is not a duration such as 90s, 15m or 1h30m"),
    ],
)
def test_bad_settings_exit_3(tmp_path: Path, flag: str, value: str, message: str) -> None:
    extra = [] if flag == "-download-cache-repo" else ["-download-cache-repo", "127.0.0.1:1/x/y"]
    result = pod(tmp_path, "bad", HEAD, *extra, flag, value)
    assert result.code == 3 and message in result.stderr


def test_records_are_oci_artifacts_with_the_origin_bytes(
    tmp_path: Path, http_server: FileServer, repo: str
) -> None:
    sha = archive(http_server, "bp.tgz", "acme/bp")
    result = pod(tmp_path, "pod", group(http_server.url("bp.tgz")), "-download-cache-repo", repo)
    assert (result.code, result.stderr) == (0, "")
    host, _, name = repo.partition("/")
    record = requests.get(f"http://{host}/v2/{name}/manifests/sha256-{sha}",
                          headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}, timeout=10).json()  # fmt: skip
    assert record["artifactType"] == "application/vnd.buildpacks.preparer.archive.v1"
    assert record["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
    assert [layer["digest"] for layer in record["layers"]] == [f"sha256:{sha}"]
    assert record["annotations"]["org.opencontainers.image.source"] == http_server.url("bp.tgz")
    blob = requests.get(f"http://{host}/v2/{name}/blobs/sha256:{sha}", timeout=10).content
    assert blob == (http_server.root / "bp.tgz").read_bytes()
    assert json.loads(json.dumps(record)) == record


def test_an_image_pulled_by_digest_is_written_back(
    tmp_path: Path, http_server: FileServer, registry: Registry, repo: str
) -> None:
    origin_repo = f"{registry.host}/vendor/{uuid.uuid4().hex[:8]}"
    digest = packaged(tmp_path, "acme/copied", f"{origin_repo}:1.0.0")
    first = pod(tmp_path, "pod1", group(f"docker://{origin_repo}@{digest}"), "-download-cache-repo", repo)
    assert first.code == 0, first.stderr
    assert tags(repo) == [f"sha256-{digest.removeprefix('sha256:')}"]
    # Another pod, the same digest from an origin that would count any request: none is made.
    elsewhere = f"127.0.0.1:{http_server.port}/vendor/copied@{digest}"
    second = pod(tmp_path, "pod2", group(f"docker://{elsewhere}"), "-download-cache-repo", repo)
    assert second.code == 0, second.stderr
    assert [path for path, _, _ in http_server.requests if path.startswith("/v2")] == []


def _private_tmp() -> list[str]:
    """A prefix that gives the command a private tmpfs on its ``$TMPDIR`` (its own mount namespace), as each pod
    has; nothing where ``unshare`` cannot (not root)."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        return []
    probe = subprocess.run([unshare, "--mount", "true"], capture_output=True, check=False)
    if probe.returncode != 0:
        return []
    return [unshare, "--mount", "--propagation", "private", "sh", "-c", 'mount -t tmpfs tmpfs "$TMPDIR" && exec "$@"',
            "sh"]  # fmt: skip


def test_eight_cold_pods_at_once_all_succeed_and_leave_one_valid_record_per_key(
    tmp_path: Path, http_server: FileServer, repo: str
) -> None:
    shas = [archive(http_server, f"bp{n}.tgz", f"acme/bp{n}") for n in range(2)]
    project = group(http_server.url("bp0.tgz"), http_server.url(f"bp1.tgz#sha256={shas[1]}"))
    procs = []
    for n in range(8):
        args, env = new_pod(tmp_path / f"pod{n}", project, "-download-cache-repo", repo)
        procs.append(subprocess.Popen([*_private_tmp(), sys.executable, "-m", "preparer", *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))  # fmt: skip
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    url_tags = [url_tag(http_server.url(f"bp{n}.tgz")) for n in range(2)]
    assert tags(repo) == sorted([f"sha256-{sha}" for sha in shas] + url_tags)
    host, _, name = repo.partition("/")
    for tag, sha in [(f"sha256-{shas[0]}", shas[0]), (url_tags[0], shas[0]), (f"sha256-{shas[1]}", shas[1])]:
        record = requests.get(f"http://{host}/v2/{name}/manifests/{tag}",
                              headers={"Accept": "application/vnd.oci.image.manifest.v1+json"}, timeout=10).json()  # fmt: skip
        assert record["layers"][0]["digest"] == f"sha256:{sha}"


def test_a_tag_pulled_once_works_offline_after_its_origin_is_gone(
    tmp_path: Path, registry: Registry, repo: str
) -> None:
    with started(tmp_path / "origin") as origin:
        packaged(tmp_path, "acme/tagged", origin.ref("vendor/tagged", "1.0"))
        first = pod(
            tmp_path,
            "pod1",
            group(f"docker://{origin.ref('vendor/tagged', '1.0')}"),
            "-download-cache-repo",
            repo,
        )
        assert first.code == 0, first.stderr
        assert [t for t in tags(repo) if t.startswith("ref-")]  # the tag's record
        assert [t for t in tags(repo) if t.startswith("sha256-")]  # and the image
    offline = pod(tmp_path, "pod2", group(f"docker://{origin.ref('vendor/tagged', '1.0')}"), "-download-cache-repo",
                  repo, "-download-cache-repo-mode", "offline")  # fmt: skip
    assert offline.code == 0, offline.stderr
    assert "acme_tagged/1.0.0/" in listing(tmp_path / "pod2" / "cnb" / "buildpacks")


# Mirrors from containerd's hosts.toml (-registry-hosts-dir).


def hosts_dir(tmp_path: Path, registry: str, body: str) -> Path:
    directory = tmp_path / "hosts.d"
    (directory / registry).mkdir(parents=True)
    (directory / registry / "hosts.toml").write_text(body)
    return directory


def test_a_pull_through_mirror_serves_the_image(tmp_path: Path, registry: Registry) -> None:
    name = f"vendor/{uuid.uuid4().hex[:8]}"
    packaged(tmp_path, "acme/mirrored", registry.ref(name, "1.0"))
    with started(tmp_path / "mirror", proxy=f"http://{registry.host}") as mirror:
        directory = hosts_dir(tmp_path, registry.host,
                              f'server = "http://{registry.host}"\n[host."http://{mirror.host}"]\n'
                              'capabilities = ["pull", "resolve"]\n')  # fmt: skip
        result = pod(tmp_path, "pod", group(f"docker://{registry.ref(name, '1.0')}"),
                     "-registry-hosts-dir", str(directory))  # fmt: skip
        assert result.code == 0 and result.stderr == ""
        assert any(mirror.storage.rglob("data"))  # the mirror fetched the blobs for us


def test_a_mirror_that_is_down_or_lacks_the_image_gives_way_to_the_registry(
    tmp_path: Path, registry: Registry, http_server: FileServer
) -> None:
    name = f"vendor/{uuid.uuid4().hex[:8]}"
    packaged(tmp_path, "acme/direct", registry.ref(name, "1.0"))
    # The first mirror is down; the second, the test's HTTP server, has nothing (404) and sees what is sent.
    directory = hosts_dir(tmp_path, registry.host,
                          '[host."http://127.0.0.1:1"]\ncapabilities = ["pull", "resolve"]\n'
                          f'[host."http://127.0.0.1:{http_server.port}"]\ncapabilities = ["pull"]\n')  # fmt: skip
    auth = json.dumps({registry.host: "Basic b3JpZ2luOnNlY3JldA=="})
    result = pod(tmp_path, "pod", group(f"docker://{registry.ref(name, '1.0')}"), "-registry-hosts-dir",
                 str(directory), env={"CNB_REGISTRY_AUTH": auth})  # fmt: skip
    assert result.code == 0, result.stderr
    assert result.stderr.startswith("Warning: the mirror http://127.0.0.1:1 is not used: ")
    assert len(result.stderr.splitlines()) == 1  # once for the run
    seen = [(path, headers) for path, _, headers in http_server.requests]
    assert seen and all(path.startswith(f"/v2/{name}/") for path, _ in seen)
    assert not any("/manifests/1.0" in path for path, _ in seen)  # a pull-only host never resolves a tag
    assert not any(
        "Authorization" in headers for _, headers in seen
    )  # the registry's credentials stay with it


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('[host."http://m"]\ncapabilitys = ["pull"]\n', 'host."http://m".capabilitys: unknown key'),
        ('[host."http://m"]\ncapabilities = ["fly"]\n', 'host."http://m".capabilities: a list of pull, resolve, push'),
        ('[host."http://m"]\ndial_timeout = "soon"\n', 'host."http://m".dial_timeout: a duration'),
        ("server = 42\n", "server: must be an http(s) URL"),
        ("servers = 'x'\n", "servers: unknown key"),
    ],
)  # fmt: skip
def test_a_malformed_hosts_file_exits_3_naming_file_and_key(tmp_path: Path, body: str, message: str) -> None:
    directory = hosts_dir(tmp_path, "registry.example", body)
    result = pod(tmp_path, "pod", HEAD, "-registry-hosts-dir", str(directory))
    assert result.code == 3
    hosts_file = directory / "registry.example" / "hosts.toml"
    assert result.stderr.startswith(f"ERROR: failed to read {hosts_file}: {message}")


def test_the_report_says_where_each_buildpack_came_from(
    tmp_path: Path, http_server: FileServer, repo: str
) -> None:
    sha = archive(http_server, "bp.tgz", "acme/bp")
    pinned = http_server.url(f"bp.tgz#sha256={sha}")
    assert pod(tmp_path, "seed", group(pinned), "-download-cache-repo", repo).code == 0
    report = tmp_path / "report.toml"
    assert (
        pod(tmp_path, "pod", group(pinned), "-download-cache-repo", repo, "-prepare-report", str(report)).code
        == 0
    )
    (entry,) = tomllib.loads(report.read_text())["buildpacks"]
    assert (entry["source"], entry["via"]) == (http_server.url("bp.tgz"), "cache repository")


def test_an_air_gapped_copy_made_with_skopeo_sync_serves_offline(
    tmp_path: Path, http_server: FileServer, registry: Registry, repo: str
) -> None:
    sha = archive(http_server, "bp.tgz", "acme/bp")
    project = group(http_server.url(f"bp.tgz#sha256={sha}"), http_server.url("bp.tgz"))
    assert pod(tmp_path, "seed", project, "-download-cache-repo", repo).code == 0
    with started(tmp_path / "airgap") as airgap:
        subprocess.run(["skopeo", "sync", "--all", "--src", "docker", "--dest", "docker", "--src-tls-verify=false",
                        "--dest-tls-verify=false", repo, f"{airgap.host}/mirror"],
                       check=True, capture_output=True)  # fmt: skip
        copied = f"{airgap.host}/mirror/{repo.rsplit('/', 1)[1]}"
        before = list(http_server.requests)
        offline = pod(tmp_path, "offline", project, "-download-cache-repo", copied,
                      "-download-cache-repo-mode", "offline")  # fmt: skip
        assert offline.code == 0, offline.stderr
        assert http_server.requests == before  # not one origin request


def test_a_repository_that_refuses_writes_is_one_warning(
    tmp_path: Path, http_server: FileServer, registry: Registry
) -> None:
    """A pull-through mirror answers pushes with 405: the build goes on, with one warning."""
    archive(http_server, "bp.tgz", "acme/bp")
    with started(tmp_path / "proxy", proxy=f"http://{registry.host}") as proxy:
        result = pod(tmp_path, "pod", group(http_server.url("bp.tgz")), "-download-cache-repo",
                     f"{proxy.host}/fleet/x")  # fmt: skip
    assert result.code == 0
    assert result.stderr.startswith(
        f"Warning: the download cache repository {proxy.host}/fleet/x is not used: "
    )
    assert "HTTP 405" in result.stderr and len(result.stderr.splitlines()) == 1


def _blackhole(port: int, on: bool) -> bool:
    """Drop every packet to 127.0.0.1:``port`` (iptables; root), or stop dropping them; whether it worked."""
    rule = ["OUTPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", str(port), "-j", "DROP"]
    iptables = shutil.which("iptables")
    if iptables is None:
        return False
    return (
        subprocess.run([iptables, "-A" if on else "-D", *rule], capture_output=True, check=False).returncode
        == 0
    )


def test_a_blackholed_repository_costs_one_connect_timeout(tmp_path: Path, http_server: FileServer) -> None:
    archive(http_server, "bp.tgz", "acme/bp")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    if not _blackhole(port, True):
        pytest.skip("iptables cannot drop packets here")
    try:
        start = time.monotonic()
        result = pod(tmp_path, "pod", group(http_server.url("bp.tgz"), http_server.url("bp.tgz").replace("bp.tgz", "bp.tgz?again")),
                     "-download-cache-repo", f"127.0.0.1:{port}/fleet/x")  # fmt: skip
        took = time.monotonic() - start
    finally:
        _blackhole(port, False)
    assert result.code == 0
    assert result.stderr.startswith(
        f"Warning: the download cache repository 127.0.0.1:{port}/fleet/x is not used: "
    )
    assert len(result.stderr.splitlines()) == 1
    assert took < 2.0 + 10  # one connect timeout of 2 s, not one per buildpack (plus the run itself)


def test_registry_entries_resolve_offline_from_the_repository(
    tmp_path: Path, http_server: FileServer, registry: Registry, repo: str
) -> None:
    """urn:cnb:registry: — the index file and the image it names, both cached, both served offline."""
    from preparer.fetch.oci.index import index_path

    image = f"{registry.host}/vendor/{uuid.uuid4().hex[:8]}"
    digest = packaged(tmp_path, "acme/listed", f"{image}:1.0.0")
    entry = {"ns": "acme", "name": "listed", "version": "1.0.0", "yanked": False, "addr": f"{image}@{digest}"}
    index_file = http_server.root / "index" / index_path("acme", "listed")
    index_file.parent.mkdir(parents=True)
    index_file.write_text(json.dumps(entry) + "\n")
    flags = ["-buildpack-registry-index", http_server.url("index"), "-download-cache-repo", repo]
    assert pod(tmp_path, "seed", group("urn:cnb:registry:acme/listed@1.0.0"), *flags).code == 0
    before = list(http_server.requests)
    offline = pod(tmp_path, "offline", group("urn:cnb:registry:acme/listed@1.0.0"), *flags,
                  "-download-cache-repo-mode", "offline")  # fmt: skip
    assert offline.code == 0, offline.stderr
    assert http_server.requests == before  # the index was not asked
    assert "acme_listed/1.0.0/" in listing(tmp_path / "offline" / "cnb" / "buildpacks")


def test_override_path_makes_the_url_the_api_root(
    tmp_path: Path, registry: Registry, http_server: FileServer
) -> None:
    """As Harbor's proxy projects need: requests go to <url>/<repository>/..., not <url>/v2/<repository>/..."""
    name = f"vendor/{uuid.uuid4().hex[:8]}"
    packaged(tmp_path, "acme/harbor", registry.ref(name, "1.0"))
    directory = hosts_dir(tmp_path, registry.host,
                          f'[host."http://127.0.0.1:{http_server.port}/v2/proxy-project"]\n'
                          'capabilities = ["pull", "resolve"]\noverride_path = true\n')  # fmt: skip
    result = pod(
        tmp_path, "pod", group(f"docker://{registry.ref(name, '1.0')}"), "-registry-hosts-dir", str(directory)
    )
    assert result.code == 0, result.stderr
    paths = [path for path, _, _ in http_server.requests]
    assert paths and all(path.startswith(f"/v2/proxy-project/{name}/") for path in paths)


def test_a_read_only_cache_serves_and_refuses_the_write_back_with_one_warning(
    tmp_path: Path, http_server: FileServer
) -> None:
    """A cache the pods may only pull from (htpasswd, read-only storage): hits are served, the write-back of a miss
    is refused with one warning, and the build goes on."""
    sha = archive(http_server, "bp.tgz", "acme/bp")
    archive(http_server, "new.tgz", "acme/new")
    root = tmp_path / "cache-registry"
    root.mkdir()
    htpasswd = root / "htpasswd"
    subprocess.run(["htpasswd", "-Bbc", str(htpasswd), "puller", "pw"], check=True, capture_output=True)

    def auth(host: str) -> dict[str, str]:
        return {"CNB_REGISTRY_AUTH": json.dumps({host: "Basic cHVsbGVyOnB3"})}

    with started(root, htpasswd) as writable:
        seeded = pod(tmp_path, "seed", group(http_server.url(f"bp.tgz#sha256={sha}")), "-download-cache-repo",
                     f"{writable.host}/fleet/ro", env=auth(writable.host))  # fmt: skip
        assert seeded.code == 0 and seeded.stderr == ""
    with started(root, htpasswd, readonly=True) as read_only:  # the same storage, now refusing writes
        project = group(http_server.url(f"bp.tgz#sha256={sha}"), http_server.url("new.tgz"))
        result = pod(tmp_path, "pod", project, "-download-cache-repo", f"{read_only.host}/fleet/ro",
                     env=auth(read_only.host))  # fmt: skip
    assert result.code == 0
    assert [s for s, _ in http_server.seen("bp.tgz")] == [200]  # the hit came from the cache
    assert result.stderr.startswith(
        f"Warning: the download cache repository {read_only.host}/fleet/ro is not used: "
    )
    assert len(result.stderr.splitlines()) == 1


def test_pods_served_by_the_cache_send_no_request_to_the_origin_registry(tmp_path: Path, repo: str) -> None:
    """Origin load counted where the issue counts it: cnb-preparer/ lines in the origin registry's access log."""
    with started(tmp_path / "origin", access_log=True) as origin:
        log = tmp_path / "origin" / "access.log"
        digest = packaged(tmp_path, "acme/counted", origin.ref("vendor/counted", "1.0"))
        project = group(f"docker://{origin.host}/vendor/counted@{digest}")
        assert pod(tmp_path, "pod1", project, "-download-cache-repo", repo).code == 0
        first = log.read_text().count("cnb-preparer/")
        for n in (2, 3):
            assert pod(tmp_path, f"pod{n}", project, "-download-cache-repo", repo).code == 0
        assert first > 0 and log.read_text().count("cnb-preparer/") == first


# The second trust-boundaries review (docs/security.md): what a pusher and a credential can and cannot do.


def test_what_a_query_token_fetched_is_never_shared(
    tmp_path: Path, http_server: FileServer, repo: str
) -> None:
    """A presigned or ``?token=`` URL is neither written back nor looked up: a pod without the token does not get
    the private archive, and ``?v=1`` and ``?v=2`` are not one record."""
    archive(http_server, "private.tgz", "acme/private")
    fresh = ["-download-cache-repo", repo, "-download-cache-max-age", "1h"]
    assert pod(tmp_path, "owner", group(http_server.url("private.tgz?token=s3cr3t")), *fresh).code == 0
    assert tags(repo) == []
    (http_server.root / "private.tgz").unlink()  # the origin gives it only to whoever has the token
    stranger = pod(tmp_path, "stranger", group(http_server.url("private.tgz")), *fresh)
    assert stranger.code == 1 and "HTTP 404" in stranger.stderr

    archive(http_server, "bp.tgz", "acme/one")
    assert pod(tmp_path, "v1", group(http_server.url("bp.tgz?v=1")), *fresh).code == 0
    shutil.copy(make_tgz(tmp_path / "two.tgz", "acme/two"), http_server.root / "bp.tgz")
    assert pod(tmp_path, "v2", group(http_server.url("bp.tgz?v=2")), *fresh).code == 0
    assert "acme_two/1.0.0/" in listing(tmp_path / "v2" / "cnb" / "buildpacks")

    assert pod(tmp_path, "seed", group(http_server.url("bp.tgz")), *fresh).code == 0  # a plain URL is shared
    asked = len(http_server.seen("bp.tgz"))
    user = http_server.url("bp.tgz").replace("http://", "http://me:secret@")
    assert pod(tmp_path, "with-user", group(user), *fresh).code == 0
    assert len(http_server.seen("bp.tgz")) == asked + 1  # not looked up: from its origin


def test_a_pushed_record_with_the_origins_etag_does_not_pass_for_the_origins_bytes(
    tmp_path: Path, http_server: FileServer, registry: Registry, repo: str
) -> None:
    """With max-age 0 an unpinned URL's bytes come from its origin: a record that pairs the origin's ETag (one
    HEAD away for anyone) with a blob of the pusher's own gets a 200 from the origin, never a 304."""
    from preparer.fetch.fleet import ARTIFACT_TYPE, CHECKED, EMPTY_CONFIG, ETAG, LAYER_TYPE, SOURCE
    from tests.plugins.registry import put_manifest, upload_blob

    archive(http_server, "bp.tgz", "acme/real")
    url = http_server.url("bp.tgz")
    etag = requests.head(url, timeout=10).headers.get("ETag") or requests.get(url, timeout=10).headers["ETag"]
    evil = make_tgz(tmp_path / "evil.tgz", "acme/real", payload=b"the pusher's code").read_bytes()
    name = repo.partition("/")[2]
    upload_blob(registry, name, b"{}")
    digest = upload_blob(registry, name, evil)
    record = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
              "artifactType": ARTIFACT_TYPE, "config": EMPTY_CONFIG,
              "layers": [{"mediaType": LAYER_TYPE, "digest": digest, "size": len(evil)}],
              "annotations": {SOURCE: url, ETAG: etag, CHECKED: "0"}}  # fmt: skip
    put_manifest(
        registry,
        name,
        url_tag(url),
        json.dumps(record).encode(),
        "application/vnd.oci.image.manifest.v1+json",
    )
    result = pod(
        tmp_path, "victim", group(url), "-download-cache-repo", repo, "-download-cache-repo-mode", "read"
    )
    assert (result.code, result.stderr) == (0, "")
    installed = tmp_path / "victim" / "cnb" / "buildpacks" / "acme_real" / "1.0.0"
    assert not (installed / "data.bin").exists()  # the origin's archive, not the pusher's
    assert [s for s, _ in http_server.seen("bp.tgz")][-1] == 200

    # The origin's own record (its ETag is its content's sha256) still spares the download: a 304.
    assert pod(tmp_path, "writer", group(url), "-download-cache-repo", repo).code == 0
    assert pod(tmp_path, "reader", group(url), "-download-cache-repo", repo).code == 0
    assert [s for s, _ in http_server.seen("bp.tgz")][-1] == 304


def test_a_repository_that_trickles_its_records_costs_one_deadline(
    tmp_path: Path, http_server: FileServer
) -> None:
    """A byte every second keeps within every between-bytes timeout: only the record's own deadline (10 s) ends
    it, once; then the breaker is open and the origin serves the run."""
    from preparer.fetch.fleet import RECORD_SECONDS
    from tests.plugins.http_server import Stalling, stalling

    archive(http_server, "one.tgz", "acme/one")
    archive(http_server, "two.tgz", "acme/two")
    project = group(http_server.url("one.tgz"), http_server.url("two.tgz"))
    with stalling(Stalling(mode="body", pace=1.0)) as slow:
        start = time.monotonic()
        result = pod(tmp_path, "pod", project, "-download-cache-repo", f"{slow.host}/fleet/x",
                     "-download-cache-repo-mode", "read")  # fmt: skip
        took = time.monotonic() - start
    assert result.code == 0, result.stderr
    [warning] = result.warnings
    assert warning.startswith(f"Warning: the download cache repository {slow.host}/fleet/x is not used: url-")
    assert warning.endswith(f": it did not answer within {RECORD_SECONDS:g} s")
    assert len(slow.paths) <= 2  # each entry asked at most once, at the same time; then the breaker is open
    assert RECORD_SECONDS <= took < RECORD_SECONDS + 6, f"{took:.1f} s"
    assert [s for s, _ in http_server.seen("one.tgz")] == [200]
