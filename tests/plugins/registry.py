"""Fixtures: real OCI registries (Debian's docker-registry) on 127.0.0.1, and buildpackage images in them.

Images are built with ``umoci`` (one ``umoci insert`` layer per buildpack, labels with ``umoci config``) and
pushed with ``skopeo``, as a platform's release pipeline would. One registry is open; one asks for htpasswd
credentials. Both are stopped at the end of the session.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.buildpacks import buildpack_toml, make_dir

USER, PASSWORD = "builder", "s3cret-pass"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Registry:
    """A running docker-registry."""

    host: str
    storage: Path
    process: subprocess.Popen[bytes]
    auth: tuple[str, str] | None = None

    def ref(self, repository: str, tag: str = "latest") -> str:
        return f"{self.host}/{repository}:{tag}"

    def blob_file(self, digest: str) -> Path:
        """Where the registry keeps a blob on disk (to corrupt it in a test)."""
        hexdigest = digest.removeprefix("sha256:")
        return self.storage / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"


def _start(
    root: Path,
    htpasswd: Path | None,
    proxy: str | None = None,
    access_log: bool = False,
    readonly: bool = False,
) -> Registry:
    """A docker-registry in ``root`` (with ``proxy``, a pull-through mirror of that upstream URL; with ``access_log``,
    every request logged to ``root/access.log``; ``readonly``, refusing every write to what ``root`` holds)."""
    port = _free_port()
    storage = root / "storage"
    config = {
        "version": 0.1,
        "log": {"level": "error", "accesslog": {"disabled": not access_log}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}", "secret": "test-only"},
    }
    if htpasswd is not None:
        config["auth"] = {"htpasswd": {"realm": "preparer-tests", "path": str(htpasswd)}}
    if proxy is not None:
        config["proxy"] = {"remoteurl": proxy}
    if readonly:
        config["storage"]["maintenance"] = {"readonly": {"enabled": True}}  # type: ignore[index]
    (root / "config.yml").write_text(json.dumps(config))  # JSON is YAML
    process = subprocess.Popen(
        ["docker-registry", "serve", str(root / "config.yml")],
        stdout=(root / "access.log").open("wb") if access_log else subprocess.DEVNULL,
        stderr=(root / "registry.log").open("wb"),
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            time.sleep(0.05)
    else:
        process.kill()
        raise RuntimeError(f"docker-registry did not start: {(root / 'registry.log').read_text()}")
    return Registry(f"127.0.0.1:{port}", storage, process)


@contextlib.contextmanager
def started(
    root: Path,
    htpasswd: Path | None = None,
    *,
    proxy: str | None = None,
    access_log: bool = False,
    readonly: bool = False,
) -> Iterator[Registry]:
    """A docker-registry of the test's own in ``root`` (see :func:`_start`), stopped when the block ends."""
    root.mkdir(parents=True, exist_ok=True)
    running = _start(root, htpasswd, proxy, access_log, readonly)
    try:
        yield running
    finally:
        running.process.terminate()
        running.process.wait(timeout=10)


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """An open registry."""
    running = _start(tmp_path_factory.mktemp("registry"), None)
    yield running
    running.process.terminate()
    running.process.wait(timeout=10)


@pytest.fixture(scope="session")
def auth_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    """A registry that wants ``USER``/``PASSWORD`` (htpasswd, bcrypt)."""
    root = tmp_path_factory.mktemp("auth-registry")
    htpasswd = root / "htpasswd"
    subprocess.run(["htpasswd", "-Bbc", str(htpasswd), USER, PASSWORD], check=True, capture_output=True)
    running = _start(root, htpasswd)
    running.auth = (USER, PASSWORD)
    yield running
    running.process.terminate()
    running.process.wait(timeout=10)


def _run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


@dataclass(frozen=True)
class Package:
    """A buildpackage image built in an OCI layout."""

    layout: Path
    tag: str
    top: tuple[str, str]

    def manifest(self) -> dict:  # type: ignore[type-arg]
        index = json.loads((self.layout / "index.json").read_text())
        entry = next(
            m for m in index["manifests"] if m["annotations"]["org.opencontainers.image.ref.name"] == self.tag
        )
        manifest: dict = json.loads(_blob(self.layout, entry["digest"]))  # type: ignore[type-arg]
        return manifest


def _blob(layout: Path, digest: str) -> bytes:
    return (layout / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()


def build_package(
    workdir: Path,
    buildpacks: list[tuple[str, str, str]],
    top: tuple[str, str],
    tag: str = "latest",
    architecture: str = "amd64",
    layout: Path | None = None,
    payload: bytes = b"",
    content: Path | None = None,
) -> Package:
    """Build a buildpackage: each ``(id, version, order)`` becomes one layer at /cnb/buildpacks/<eid>/<version>.

    :param content: a buildpack directory copied as each buildpack (instead of a small generated one).
    """
    layout = layout or workdir / "layout"
    if not layout.exists():
        _run("umoci", "init", "--layout", str(layout))
    image = f"{layout}:{tag}"
    _run("umoci", "new", "--image", image)
    _run("umoci", "config", "--image", image, "--architecture", architecture, "--os", "linux")
    # One layer per buildpack: unpack, add the buildpack's directory, repack (umoci insert writes truncated tars).
    bundle = workdir / f"bundle-{tag}"
    shutil.rmtree(bundle, ignore_errors=True)
    _run("umoci", "unpack", "--image", image, str(bundle))
    for bp_id, version, order in buildpacks:
        target = bundle / "rootfs" / "cnb" / "buildpacks" / bp_id.replace("/", "_") / version
        if content is not None:
            shutil.copytree(content, target, symlinks=True)
        else:
            make_dir(target, bp_id, version, payload=payload)
        if order:
            (target / "buildpack.toml").write_text(buildpack_toml(bp_id, version, order=order))
            shutil.rmtree(target / "bin")
        _run("umoci", "repack", "--refresh-bundle", "--image", image, str(bundle))
    shutil.rmtree(bundle)
    package = Package(layout, tag, top)
    config = json.loads(_blob(layout, package.manifest()["config"]["digest"]))
    diff_ids = config["rootfs"]["diff_ids"]
    layers: dict[str, dict[str, dict[str, str]]] = {}
    for (bp_id, version, order), diff_id in zip(buildpacks, diff_ids, strict=True):
        info = {"api": "0.10", "layerDiffID": diff_id}
        if order:
            info["order"] = []
        layers.setdefault(bp_id, {})[version] = info
    metadata = {"id": top[0], "version": top[1]}
    _run(
        "umoci", "config", "--image", image,
        "--config.label", f"io.buildpacks.buildpack.layers={json.dumps(layers)}",
        "--config.label", f"io.buildpacks.buildpackage.metadata={json.dumps(metadata)}",
    )  # fmt: skip
    return package


def add_index(layout: Path, tag: str, members: dict[str, str]) -> None:
    """Add an image index ``tag`` to the layout listing the images tagged in ``members`` (tag ->
    ``architecture[/variant]``)."""
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text())
    manifests = []
    for member_tag, written in members.items():
        architecture, _, variant = written.partition("/")
        entry = next(
            m
            for m in index["manifests"]
            if m["annotations"]["org.opencontainers.image.ref.name"] == member_tag
        )
        manifests.append(
            {"mediaType": entry["mediaType"], "digest": entry["digest"], "size": entry["size"],
             "platform": {"os": "linux", "architecture": architecture} | ({"variant": variant} if variant else {})}
        )  # fmt: skip
    blob = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                       "manifests": manifests}).encode()  # fmt: skip
    import hashlib

    digest = hashlib.sha256(blob).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(blob)
    index["manifests"].append(
        {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": f"sha256:{digest}", "size": len(blob),
         "annotations": {"org.opencontainers.image.ref.name": tag}}
    )  # fmt: skip
    index_path.write_text(json.dumps(index))


def push(
    layout: Path, tag: str, destination: str, creds: tuple[str, str] | None = None, all_images: bool = False
) -> str:
    """``skopeo copy`` the layout's ``tag`` to ``docker://destination``; return the pushed manifest digest."""
    args = ["skopeo", "copy", "--dest-tls-verify=false", "--preserve-digests"]
    if creds:
        args += ["--dest-creds", f"{creds[0]}:{creds[1]}"]
    if all_images:
        args.append("--all")
    digest_file = layout.parent / f"digest-{tag}"
    _run(*args, "--digestfile", str(digest_file), f"oci:{layout}:{tag}", f"docker://{destination}")
    return digest_file.read_text().strip()


def to_cnb(layout: Path, tag: str, path: Path) -> Path:
    """Write the layout's ``tag`` as a ``.cnb`` file (an OCI layout tar)."""
    _run("skopeo", "copy", f"oci:{layout}:{tag}", f"oci-archive:{path}")
    return path


@dataclass
class TokenRegistry:
    """A bearer-token front for a real registry: the v2 API answers 401 with a Bearer challenge; the token
    endpoint hands out tokens for ``USER``/``PASSWORD``. (docker-registry's own token auth needs a signing PKI;
    this front keeps the real registry behind it and the real challenge flow in front.)"""

    host: str
    tokens_issued: list[str]


@pytest.fixture(scope="session")
def token_registry(registry: Registry) -> Iterator[TokenRegistry]:
    import base64
    import secrets
    import threading
    import urllib.request
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    issued: list[str] = []

    class Front(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

        def deny(self) -> None:
            realm = f"http://{self.headers['Host']}/token"
            self.send_response(401)
            self.send_header(
                "WWW-Authenticate", f'Bearer realm="{realm}",service="front",scope="repository:x:pull"'
            )
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            if self.path.startswith("/token"):
                expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
                if self.headers.get("Authorization") != expected:
                    self.send_response(401)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                token = secrets.token_hex(8)
                issued.append(token)
                body = json.dumps({"token": token}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            if self.headers.get("Authorization", "").removeprefix("Bearer ") not in issued:
                self.deny()
                return
            request = urllib.request.Request(f"http://{registry.host}{self.path}",
                                             headers={"Accept": self.headers.get("Accept", "*/*")})  # fmt: skip
            try:
                with urllib.request.urlopen(request) as upstream:
                    body = upstream.read()
                    status, headers = upstream.status, upstream.headers
            except urllib.error.HTTPError as err:
                body, status, headers = err.read(), err.code, err.headers
            self.send_response(status)
            for name in ("Content-Type", "Docker-Content-Digest"):
                if headers.get(name):
                    self.send_header(name, headers[name])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Front)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield TokenRegistry(f"127.0.0.1:{server.server_address[1]}", issued)
    server.shutdown()
    server.server_close()


# Images written blob by blob through the registry's upload API, for shapes umoci does not make: uncompressed
# layers, flattened packages (several buildpacks in one layer), pack's absolute entry names, Docker media types.

OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
DOCKER_MEDIA = {
    "manifest": "application/vnd.docker.distribution.manifest.v2+json",
    "config": "application/vnd.docker.container.image.v1+json",
    "layer": "application/vnd.docker.image.rootfs.diff.tar.gzip",
}
OCI_MEDIA = {
    "manifest": "application/vnd.oci.image.manifest.v1+json",
    "config": "application/vnd.oci.image.config.v1+json",
    "layer": OCI_LAYER + "+gzip",
}


def _sha256(data: bytes) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(data).hexdigest()


def upload_blob(registry: Registry, repository: str, data: bytes) -> str:
    """Push ``data`` with a monolithic upload (POST, then PUT with the digest); return its digest."""
    import urllib.request

    digest = _sha256(data)
    start = urllib.request.Request(f"http://{registry.host}/v2/{repository}/blobs/uploads/", method="POST")
    with urllib.request.urlopen(start) as response:
        location = response.headers["Location"]
    if location.startswith("/"):
        location = f"http://{registry.host}{location}"
    separator = "&" if "?" in location else "?"
    put = urllib.request.Request(
        f"{location}{separator}digest={digest}", data=data, method="PUT",
        headers={"Content-Type": "application/octet-stream"},
    )  # fmt: skip
    with urllib.request.urlopen(put) as response:
        assert response.status == 201, response.status
    return digest


def put_manifest(registry: Registry, repository: str, tag: str, body: bytes, media_type: str) -> str:
    """PUT a manifest or index under ``tag``; return its digest."""
    import urllib.request

    request = urllib.request.Request(
        f"http://{registry.host}/v2/{repository}/manifests/{tag}", data=body, method="PUT",
        headers={"Content-Type": media_type},
    )  # fmt: skip
    with urllib.request.urlopen(request) as response:
        assert response.status == 201, response.status
    return _sha256(body)


def buildpack_layer(workdir: Path, buildpacks: list[tuple[str, str, str]], absolute: bool = True) -> bytes:
    """One uncompressed layer holding ``(id, version, order)`` buildpacks below ``/cnb/buildpacks``, as pack
    writes them (absolute names, every parent directory listed)."""
    import io
    import tarfile

    prefix = "/" if absolute else ""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in ("cnb", "cnb/buildpacks"):
            info = tarfile.TarInfo(prefix + directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for bp_id, version, order in buildpacks:
            source = make_dir(workdir / f"src-{bp_id.replace('/', '_')}-{version}", bp_id, version)
            if order:  # a composite: an order and no bin/
                (source / "buildpack.toml").write_text(buildpack_toml(bp_id, version, order=order))
                shutil.rmtree(source / "bin")
            base = f"cnb/buildpacks/{bp_id.replace('/', '_')}"
            info = tarfile.TarInfo(prefix + base)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
            tar.add(source, arcname=f"{prefix}{base}/{version}")
    return buf.getvalue()


def push_package(
    registry: Registry,
    repository: str,
    tag: str,
    layers: list[tuple[bytes, list[tuple[str, str, str]]]],
    top: tuple[str, str],
    *,
    compress: bool = True,
    media: dict[str, str] = OCI_MEDIA,
) -> tuple[str, dict[str, object]]:
    """Push a buildpackage whose layers are ``(uncompressed tar, the buildpacks it holds)``; return the manifest's
    digest and the manifest."""
    import gzip

    diff_ids: list[str] = []
    descriptors: list[dict[str, object]] = []
    label: dict[str, dict[str, dict[str, object]]] = {}
    for tar_bytes, held in layers:
        diff_id = _sha256(tar_bytes)
        blob = gzip.compress(tar_bytes, mtime=0) if compress else tar_bytes
        layer_type = media["layer"] if compress else media["layer"].removesuffix("+gzip").replace(".gzip", "")
        descriptors.append({"mediaType": layer_type, "digest": upload_blob(registry, repository, blob),
                            "size": len(blob)})  # fmt: skip
        diff_ids.append(diff_id)
        for bp_id, version, order in held:
            info: dict[str, object] = {"api": "0.10", "layerDiffID": diff_id}
            if order:
                info["order"] = []
            label.setdefault(bp_id, {})[version] = info
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Labels": {
            "io.buildpacks.buildpack.layers": json.dumps(label),
            "io.buildpacks.buildpackage.metadata": json.dumps({"id": top[0], "version": top[1]}),
        }},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }).encode()  # fmt: skip
    manifest: dict[str, object] = {
        "schemaVersion": 2, "mediaType": media["manifest"],
        "config": {"mediaType": media["config"], "digest": upload_blob(registry, repository, config),
                   "size": len(config)},
        "layers": descriptors,
    }  # fmt: skip
    body = json.dumps(manifest).encode()
    return put_manifest(registry, repository, tag, body, media["manifest"]), manifest


@dataclass
class Front:
    """An HTTP front for a real registry that passes every request through, except the paths in ``overrides``,
    answered with the given ``(status, headers, body)``. It plays a registry that misbehaves (oversized or
    malformed answers), which a real registry cannot be made to do. ``requests`` lists the paths asked for."""

    host: str
    overrides: dict[str, tuple[int, dict[str, str], bytes]]
    requests: list[str]


@pytest.fixture(scope="session")
def _front_server(registry: Registry) -> Iterator[Front]:
    import threading
    import urllib.error
    import urllib.request
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    front = Front("", {}, [])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

        def do_GET(self) -> None:
            self._answer("GET")

        def do_HEAD(self) -> None:
            self._answer("HEAD")

        def _answer(self, method: str) -> None:
            front.requests.append(self.path)
            override = front.overrides.get(self.path)
            if override is not None:
                status, headers, body = override
            else:
                request = urllib.request.Request(f"http://{registry.host}{self.path}", method=method,
                                                 headers={"Accept": self.headers.get("Accept", "*/*")})  # fmt: skip
                try:
                    with urllib.request.urlopen(request) as upstream:
                        body, status = upstream.read(), upstream.status
                        kept = ("Content-Type", "Docker-Content-Digest")
                        headers = {k: v for k, v in upstream.headers.items() if k in kept}
                        if method == "HEAD":
                            headers["Content-Length"] = upstream.headers.get("Content-Length", "0")
                except urllib.error.HTTPError as err:
                    body, status, headers = err.read(), err.code, {}
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            if "Content-Length" not in headers:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if method == "GET":
                self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    front.host = f"127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield front
    server.shutdown()
    server.server_close()


@pytest.fixture
def front(_front_server: Front) -> Iterator[Front]:
    """The misbehaving front, with no overrides at the start of each test."""
    _front_server.overrides.clear()
    _front_server.requests.clear()
    yield _front_server
    _front_server.overrides.clear()


@dataclass
class HubProxy:
    """An HTTP proxy that stands in for Docker Hub, which cannot be reached here: requests for
    ``registry-1.docker.io`` (sent through it with ``HTTP_PROXY`` and ``-insecure-registry index.docker.io``) are
    passed to the real local registry; every other host answers 502. ``requests`` lists the URLs asked for."""

    url: str
    requests: list[str]

    def env(self) -> dict[str, str]:
        """The environment that sends a preparer's Docker Hub traffic here."""
        return {
            "HTTP_PROXY": self.url,
            "http_proxy": self.url,
            "NO_PROXY": "127.0.0.1",
            "no_proxy": "127.0.0.1",
        }


@pytest.fixture
def hub(registry: Registry) -> Iterator[HubProxy]:
    import threading
    import urllib.error
    import urllib.request
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import urlsplit

    proxy = HubProxy("", [])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

        def do_GET(self) -> None:
            proxy.requests.append(self.path)
            target = urlsplit(self.path)
            if target.hostname != "registry-1.docker.io":
                status, headers, body = 502, {}, b""
            else:
                upstream = f"http://{registry.host}{target.path}" + (
                    f"?{target.query}" if target.query else ""
                )
                accept = {"Accept": self.headers.get("Accept", "*/*")}
                try:
                    with urllib.request.urlopen(urllib.request.Request(upstream, headers=accept)) as answer:
                        body, status = answer.read(), answer.status
                        headers = {k: v for k, v in answer.headers.items() if k in ("Content-Type",)}
                except urllib.error.HTTPError as err:
                    body, status, headers = err.read(), err.code, {}
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    proxy.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield proxy
    server.shutdown()
    server.server_close()
