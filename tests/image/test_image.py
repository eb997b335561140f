"""The lifecycle image: unpacked with umoci, and /cnb/lifecycle/preparer run inside it with nothing else (chroot).

Every run inside is compared with the Python package (``python -m preparer``) on the same inputs: same exit code,
same output, same files.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from preparer import __version__
from tests.buildpacks import make_tgz
from tests.golden import BUILDER, ROOT, Layout, env_files, listing
from tests.image.conftest import BUILD, SCRIPTS, in_image, proc_mounted, run, unpack
from tests.plugins.cli import Result, base_env, run_cli
from tests.plugins.http_server import FileServer
from tests.plugins.registry import Registry, build_package, push

#: The directories of a build container, as the preparer is told about them inside the image.
FLAGS = ["-app", "/workspace", "-layers", "/layers", "-platform", "/platform", "-buildpacks", "/cnb/buildpacks",
         "-order", "/cnb/order.toml"]  # fmt: skip
ENV = {"CNB_PLATFORM_API": "0.15", "NO_COLOR": "1"}
HEAD = '[_]\nschema-version = "0.2"\n'


def build_dirs(root: Path, project: str, extra: dict[str, bytes] | None = None) -> Layout:
    """The builder's /cnb and an app with ``project`` (and ``extra`` files) at a build container's paths."""
    layout = Layout(root)
    shutil.copytree(BUILDER, root / "cnb", dirs_exist_ok=True)
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    (layout.app / "project.toml").write_text(project)
    for name, data in (extra or {}).items():
        (layout.app / name).parent.mkdir(parents=True, exist_ok=True)
        (layout.app / name).write_bytes(data)
    return layout


def outside(layout: Layout, args: list[str], env: dict[str, str], home: Path) -> Result:
    """The Python package on ``layout``, with the image's absolute paths moved under ``layout.root``."""

    def moved(arg: str) -> str:
        for top in ("/workspace", "/layers", "/platform", "/cnb", "/certs"):
            if arg == top or arg.startswith(top + "/"):
                return str(layout.root) + arg
        return arg

    env = {name: moved(value) for name, value in env.items()}
    result = run_cli([moved(a) for a in args], base_env(home, **env))
    return Result(
        result.code, result.stdout.replace(str(layout.root), ""), result.stderr.replace(str(layout.root), "")
    )


def assert_same_outcome(inside: Layout, python: Layout) -> None:
    assert (inside.layers / "order.toml").is_file() == (python.layers / "order.toml").is_file()
    if (inside.layers / "order.toml").is_file():
        assert (inside.layers / "order.toml").read_bytes() == (python.layers / "order.toml").read_bytes()
    assert env_files(inside) == env_files(python)
    assert listing(inside.app) == listing(python.app)
    assert listing(inside.buildpacks) == listing(python.buildpacks)


def test_the_image_holds_only_the_preparer_on_top_of_the_base(image: Path, tmp_path: Path) -> None:
    rootfs = unpack(image, tmp_path / "bundle")
    assert sorted(p.relative_to(rootfs).as_posix() for p in rootfs.rglob("*")) == [
        "cnb", "cnb/lifecycle", "cnb/lifecycle/preparer", "tmp",
    ]  # fmt: skip
    index = json.loads((image / "index.json").read_text())
    manifests = {
        m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"] for m in index["manifests"]
    }

    def layers(tag: str) -> list[str]:
        blob = image / "blobs" / "sha256" / manifests[tag].removeprefix("sha256:")
        return [layer["digest"] for layer in json.loads(blob.read_text())["layers"]]

    base, preparer = layers("base"), layers("preparer")
    assert preparer[:-1] == base and len(preparer) == len(base) + 1  # one layer on top of the base


def test_any_base_image_gets_the_preparer_and_a_tmp(image: Path, tmp_path: Path) -> None:
    """LIFECYCLE_BASE is any skopeo source; a base without /tmp gets one in the preparer's layer."""
    base = tmp_path / "base"
    run("umoci", "init", "--layout", base)
    run("umoci", "new", "--image", f"{base}:lifecycle")
    run("umoci", "unpack", "--image", f"{base}:lifecycle", tmp_path / "base-bundle")
    (tmp_path / "base-bundle" / "rootfs" / "cnb" / "lifecycle").mkdir(parents=True)
    (tmp_path / "base-bundle" / "rootfs" / "cnb" / "lifecycle" / "creator").write_bytes(b"stand-in")
    run("umoci", "repack", "--image", f"{base}:lifecycle", tmp_path / "base-bundle")
    out = tmp_path / "image"
    run(SCRIPTS / "build-image.sh", BUILD / "preparer", out, f"oci:{base}:lifecycle")

    rootfs = unpack(out, tmp_path / "bundle")
    assert (rootfs / "cnb" / "lifecycle" / "creator").read_bytes() == b"stand-in"
    assert (rootfs / "tmp").stat().st_mode & 0o7777 == 0o1777
    with proc_mounted(rootfs):
        result = in_image(rootfs, "-version")
    assert (result.code, result.stdout) == (0, __version__ + "\n"), result.stderr


def test_version_in_the_bare_root_file_system(rootfs: Path) -> None:
    result = in_image(rootfs, "-version")
    assert (result.code, result.stdout) == (0, __version__ + "\n"), result.stderr


def test_the_image_user_runs_it_too(rootfs: Path) -> None:
    result = in_image(rootfs, "-version", user="1000:1000")
    assert (result.code, result.stdout) == (0, __version__ + "\n"), result.stderr


def test_without_tmp_it_unpacks_into_tmpdir(rootfs: Path) -> None:
    (rootfs / "tmp").rmdir()
    (rootfs / "layers").mkdir()
    fails = in_image(rootfs, "-version")
    assert fails.code != 0 and fails.stdout == ""
    assert "/tmp" in fails.stderr and "Traceback" not in fails.stderr and len(fails.stderr.splitlines()) == 1
    works = in_image(rootfs, "-version", env={"TMPDIR": "/layers"})
    assert (works.code, works.stdout) == (0, __version__ + "\n"), works.stderr
    assert list((rootfs / "layers").iterdir()) == []  # it cleans up after itself


def test_a_full_prepare_inside_matches_the_python_package(rootfs: Path, tmp_path: Path) -> None:
    """The demo app (env, exclusions, a reordered group) plus a local buildpack archive."""
    project = (ROOT / "fixtures" / "demo" / "app" / "project.toml").read_text()
    project += '\n[[io.buildpacks.group]]\nuri = "vendor/local.tgz"\n'
    archive = make_tgz(tmp_path / "src" / "local.tgz", "example/local", "0.9.0").read_bytes()
    files = {
        p.relative_to(ROOT / "fixtures" / "demo" / "app").as_posix(): p.read_bytes()
        for p in (ROOT / "fixtures" / "demo" / "app").rglob("*")
        if p.is_file() and p.name != "project.toml"
    }
    files["vendor/local.tgz"] = archive  # fmt: skip
    args = [*FLAGS, "-download-cache", "", "my-app"]

    inside = build_dirs(rootfs, project, files)
    contained = in_image(rootfs, *args, env=ENV)
    assert contained.code == 0, contained.stderr
    python = build_dirs(tmp_path / "python", project, files)
    expected = outside(python, args, ENV, tmp_path)
    assert expected.code == 0, expected.stderr

    assert_same_outcome(inside, python)
    assert env_files(inside) == {"GREETING": "hello from project.toml", "NODE_ENV": "production"}
    assert "example_local/0.9.0/bin/build" in listing(inside.buildpacks)
    assert (contained.stdout, contained.stderr) == (expected.stdout, expected.stderr)


@pytest.fixture
def https_server(tmp_path: Path) -> Iterator[tuple[FileServer, Path]]:
    """A file server on 127.0.0.1 over TLS with a self-signed certificate; yields it and the certificate."""
    cert, key = tmp_path / "tls" / "cert.pem", tmp_path / "tls" / "key.pem"
    cert.parent.mkdir()
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)  # fmt: skip
    server = FileServer(tmp_path / "www-tls")
    server.root.mkdir()

    class Quiet(SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            """No access log on the test's stderr."""

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Quiet, directory=str(server.root)))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    httpd.daemon_threads = True
    server.port = httpd.server_address[1]
    threading.Thread(target=httpd.serve_forever, name="https-server", daemon=True).start()
    try:
        yield server, cert
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_fetching_over_http_https_and_a_registry_inside_matches_the_python_package(
    rootfs: Path,
    tmp_path: Path,
    http_server: FileServer,
    https_server: tuple[FileServer, Path],
    registry: Registry,
) -> None:
    """requests, urllib3, TLS and the OCI client work in the executable as in the package, with no /etc at all."""
    tls, cert = https_server
    make_tgz(http_server.root / "plain.tgz", "example/plain", "1.0.0")
    make_tgz(tls.root / "secure.tgz", "example/secure", "2.0.0")
    package = build_package(
        tmp_path / "oci", [("example/packaged", "3.0.0", "")], ("example/packaged", "3.0.0")
    )
    push(package.layout, "latest", registry.ref("example/packaged", "3"))
    uris = [http_server.url("plain.tgz"), f"https://127.0.0.1:{tls.port}/secure.tgz",
            f"docker://{registry.ref('example/packaged', '3')}"]  # fmt: skip
    project = HEAD + "".join(f'[[io.buildpacks.group]]\nuri = "{u}"\n' for u in uris)
    env = ENV | {"REQUESTS_CA_BUNDLE": "/certs/ca.pem", "CNB_DOWNLOAD_CACHE_DIR": "/layers/cache"}
    args = [*FLAGS, "my-app"]

    inside = build_dirs(rootfs, project)
    (rootfs / "certs").mkdir()
    shutil.copy(cert, rootfs / "certs" / "ca.pem")
    contained = in_image(rootfs, *args, env=env)
    assert contained.code == 0, contained.stderr
    python = build_dirs(tmp_path / "python", project)
    (python.root / "certs").mkdir()
    shutil.copy(cert, python.root / "certs" / "ca.pem")
    expected = outside(python, args, env, tmp_path)
    assert expected.code == 0, expected.stderr

    assert_same_outcome(inside, python)
    installed = listing(inside.buildpacks)
    for bp in ("example_plain/1.0.0/", "example_secure/2.0.0/", "example_packaged/3.0.0/"):
        assert bp in installed
    # Buildpacks are fetched in parallel: their progress lines interleave in any order.
    assert sorted(contained.stdout.splitlines()) == sorted(expected.stdout.splitlines())
    assert contained.stderr == expected.stderr


def test_an_untrusted_certificate_fails_the_same_way_inside(
    rootfs: Path, tmp_path: Path, https_server: tuple[FileServer, Path]
) -> None:
    """Without the test's CA, https is refused by certificate verification (the bundled CA store is loaded)."""
    tls, _ = https_server
    make_tgz(tls.root / "secure.tgz", "example/secure", "2.0.0")
    project = HEAD + f'[[io.buildpacks.group]]\nuri = "https://127.0.0.1:{tls.port}/secure.tgz"\n'
    args = [*FLAGS, "-download-cache", "", "my-app"]

    inside = build_dirs(rootfs, project)
    contained = in_image(rootfs, *args, env=ENV)
    python = build_dirs(tmp_path / "python", project)
    expected = outside(python, args, ENV, tmp_path)

    assert contained.code == expected.code == 1
    assert (contained.stdout, contained.stderr) == (expected.stdout, expected.stderr)
    # (Had the executable lost certifi's CA bundle, requests would fail before connecting, with another cause.)
    assert (
        contained.stderr.startswith("ERROR: failed to download https://")
        and "Traceback" not in contained.stderr
    )
    assert_same_outcome(inside, python)
    assert not (inside.layers / "order.toml").exists()
