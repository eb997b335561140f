"""The lifecycle image: unpacked with umoci, and /cnb/lifecycle/preparer run under runc as a hardened build pod runs
it (tests/image/conftest.py): read-only root, no capabilities, ``noNewPrivileges``, the build user, the build's
directories as bind mounts, ``/tmp`` a ``noexec`` tmpfs or not writable at all.

Every run inside is compared with the Python package (``python -m preparer``) on the same inputs: same exit code,
same bytes on stdout and stderr, same files.
"""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from preparer import __version__
from tests.buildpacks import make_tgz
from tests.golden import BUILDER, ROOT, Layout, env_files, listing
from tests.image.conftest import BUILD, CHOWN_CAPABILITIES, SCRIPTS, Pod, build_pod, in_image, run, unpack
from tests.plugins.cli import Result, run_cli
from tests.plugins.http_server import FileServer
from tests.plugins.registry import Registry, build_package, push, to_cnb
from tests.projects import HEAD

#: The directories of a build container, as the preparer is told about them inside the image.
FLAGS = ["-app", "/workspace", "-layers", "/layers", "-platform", "/platform", "-buildpacks", "/cnb/buildpacks",
         "-order", "/cnb/order.toml"]  # fmt: skip
ENV = {"CNB_PLATFORM_API": "0.15", "NO_COLOR": "1"}
BUILD_USER = (1000, 1000)
ROOT_USER = (0, 0)
#: The build's paths in the container, each a directory of the layout on the host.
MOUNTED = ("/workspace", "/layers", "/platform", "/cnb", "/certs", "/cache")


def build_dirs(root: Path, project: str | None, extra: dict[str, bytes] | None = None) -> Layout:
    """The builder's /cnb and an app with ``project`` (and ``extra`` files) at a build container's paths."""
    layout = Layout(root)
    shutil.copytree(BUILDER, root / "cnb", dirs_exist_ok=True)
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    (root / "cache").mkdir()
    if project is not None:
        (layout.app / "project.toml").write_text(project)
    for name, data in (extra or {}).items():
        (layout.app / name).parent.mkdir(parents=True, exist_ok=True)
        (layout.app / name).write_bytes(data)
    return layout


def outside(layout: Layout, args: list[str], env: dict[str, str]) -> Result:
    """The Python package on ``layout``, with the container's absolute paths moved under ``layout.root``."""

    def moved(arg: str) -> str:
        for top in MOUNTED:
            if arg == top or arg.startswith(top + "/"):
                return str(layout.root) + arg
        return arg

    env = {name: moved(value) for name, value in env.items()}
    result = run_cli([moved(a) for a in args], env)
    return Result(
        result.code, result.stdout.replace(str(layout.root), ""), result.stderr.replace(str(layout.root), "")
    )


@dataclass
class Compared:
    contained: Result
    expected: Result
    inside: Layout
    python: Layout


def compare(
    rootfs: Path,
    tmp_path: Path,
    args: list[str],
    project: str | None = None,
    *,
    files: dict[str, bytes] | None = None,
    env: dict[str, str] | None = None,
    user: tuple[int, int] = BUILD_USER,
    capabilities: tuple[str, ...] = (),
    tmp: str = "noexec",
    certificate: Path | None = None,
    arrange: Callable[[Layout], object] | None = None,
) -> Compared:
    """The same inputs in the pod and through ``python -m preparer``; both results, output bytes equal."""
    env = ENV if env is None else env
    inside = build_dirs(tmp_path / "pod", project, files)
    python = build_dirs(tmp_path / "python", project, files)
    for layout in (inside, python):
        if arrange:
            arrange(layout)
        (layout.root / "certs").mkdir()
        if certificate:
            shutil.copy(certificate, layout.root / "certs" / "ca.pem")
    pod = build_pod(inside.root, user, capabilities, tmp)
    pod.binds["/cache"] = inside.root / "cache"
    if user != ROOT_USER:
        shutil.chown(inside.root / "cache", *user)
    contained = in_image(rootfs, *args, env=env, pod=pod)
    expected = outside(python, args, env)
    assert contained.code == expected.code, (contained, expected)
    return Compared(contained, expected, inside, python)


def assert_same_outcome(compared: Compared) -> None:
    inside, python = compared.inside, compared.python
    assert (inside.layers / "order.toml").is_file() == (python.layers / "order.toml").is_file()
    if (inside.layers / "order.toml").is_file():
        assert (inside.layers / "order.toml").read_bytes() == (python.layers / "order.toml").read_bytes()
    assert env_files(inside) == env_files(python)
    assert listing(inside.app) == listing(python.app)
    assert listing(inside.buildpacks) == listing(python.buildpacks)


def test_the_image_holds_only_the_preparer_on_top_of_the_base(image: Path, tmp_path: Path) -> None:
    rootfs = unpack(image, tmp_path / "bundle")
    top = sorted(
        p.relative_to(rootfs).as_posix() for p in rootfs.rglob("*") if "preparer.d/" not in p.as_posix()
    )
    assert top == ["cnb", "cnb/lifecycle", "cnb/lifecycle/preparer", "cnb/lifecycle/preparer.d", "tmp"]
    bundled = {p.name for p in (rootfs / "cnb" / "lifecycle" / "preparer.d").iterdir()}
    assert {
        "libc.so.6",
        "ld-linux-x86-64.so.2",
        "libpython3.11.so.1.0",
        "certifi",
        "isal",
        "cryptography",
    } <= bundled
    assert "ecdsa" not in bundled  # the verifier is cryptography's now
    # ISA-L's inflater itself, not zlib standing in for it where the import would fail
    assert list((rootfs / "cnb" / "lifecycle" / "preparer.d" / "isal").glob("isal_zlib*.so"))
    index = json.loads((image / "index.json").read_text())
    manifests = {
        m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"] for m in index["manifests"]
    }

    def layers(tag: str) -> list[str]:
        blob = image / "blobs" / "sha256" / manifests[tag].removeprefix("sha256:")
        return [layer["digest"] for layer in json.loads(blob.read_text())["layers"]]

    base, preparer = layers("base"), layers("preparer")
    assert preparer[:-1] == base and len(preparer) == len(base) + 1  # one layer on top of the base


#: What /cnb/lifecycle/preparer{,.d} may weigh (the signature verifier's issue): on disk, as ``du -sb`` counts, and
#: as the gzip-compressed tar a layer of it is (``tar -czf``, gzip's default level 6). Issue 48's RE2 (google-re2's
#: extension, 1.2 MB stripped, and the libstdc++ it links, 2.2 MB) took the bundle to 64.8 MB; leaving out the
#: standard library's modules the preparer never reaches (sqlite3 and its library, pydoc, multiprocessing, ...:
#: lifecycle-image/preparer.spec) brought it back to 61.8 MB (58.9 MiB).
MAX_ON_DISK, MAX_COMPRESSED = 60 << 20, 24 << 20


def test_the_bundle_stays_within_its_size_budget(rootfs: Path) -> None:
    import gzip
    import io
    import os
    import tarfile

    lifecycle = rootfs / "cnb" / "lifecycle"
    paths = [lifecycle / "preparer", lifecycle / "preparer.d", *(lifecycle / "preparer.d").rglob("*")]
    on_disk = sum(os.lstat(p).st_size for p in paths)
    compressed = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=compressed, mode="wb", compresslevel=6, mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w") as tar,
    ):
        for name in ("preparer", "preparer.d"):
            tar.add(lifecycle / name, arcname=name)
    size = len(compressed.getvalue())
    assert on_disk > 10 << 20 and size > 5 << 20  # the bundle, measured whole
    assert on_disk <= MAX_ON_DISK, f"{on_disk} bytes on disk"
    assert size <= MAX_COMPRESSED, f"{size} bytes compressed"


def test_any_base_image_gets_the_preparer(image: Path, tmp_path: Path) -> None:
    """LIFECYCLE_BASE is any skopeo source; a base without /tmp stays without one (the preparer needs none)."""
    base = tmp_path / "base"
    run("umoci", "init", "--layout", base)
    run("umoci", "new", "--image", f"{base}:lifecycle")
    run("umoci", "unpack", "--image", f"{base}:lifecycle", tmp_path / "base-bundle")
    (tmp_path / "base-bundle" / "rootfs" / "cnb" / "lifecycle").mkdir(parents=True)
    (tmp_path / "base-bundle" / "rootfs" / "cnb" / "lifecycle" / "creator").write_bytes(b"stand-in")
    run("umoci", "repack", "--image", f"{base}:lifecycle", tmp_path / "base-bundle")
    out = tmp_path / "image"
    run(SCRIPTS / "build-image.sh", BUILD, out, f"oci:{base}:lifecycle")

    rootfs = unpack(out, tmp_path / "bundle")
    assert (rootfs / "cnb" / "lifecycle" / "creator").read_bytes() == b"stand-in"
    assert not (rootfs / "tmp").exists()
    result = in_image(rootfs, "-version", pod=Pod(tmp="none"))
    assert (result.code, result.stdout, result.stderr) == (0, __version__ + "\n", "")


@pytest.mark.parametrize("tmp", ["noexec", "none"])
@pytest.mark.parametrize("args", [["-version"], ["-h"]], ids=["version", "help"])
def test_version_and_help_as_the_build_user(rootfs: Path, tmp_path: Path, args: list[str], tmp: str) -> None:
    compared = compare(rootfs, tmp_path, args, env={}, tmp=tmp)
    assert compared.contained == compared.expected
    assert compared.contained.code == 0 and compared.contained.stdout


#: Each failure: its arguments, environment, exit code and the start of its message.
FAILURES = {
    "missing descriptor": (
        ["-project-descriptor", "/workspace/nowhere.toml", *FLAGS],
        ENV,
        3,
        "ERROR: failed to",
    ),
    "bad flag": (["-no-such-flag", *FLAGS], ENV, 2, "flag provided but not defined: -no-such-flag"),
    "no platform API": ([*FLAGS], {"NO_COLOR": "1"}, 11, "ERROR: failed to get platform API version"),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_failures_are_the_same_inside(rootfs: Path, tmp_path: Path, case: str) -> None:
    args, env, code, message = FAILURES[case]
    compared = compare(rootfs, tmp_path, args, HEAD, env=env, tmp="none")
    assert compared.contained == compared.expected
    assert compared.contained.code == code and compared.contained.stderr.startswith(message)
    assert listing(compared.inside.layers) == [] and not (compared.inside.platform / "env").exists()


def test_an_env_only_run_as_the_build_user_with_no_writable_tmp(rootfs: Path, tmp_path: Path) -> None:
    project = HEAD + '[[io.buildpacks.build.env]]\nname = "GREETING"\nvalue = "hello"\n'
    compared = compare(rootfs, tmp_path, [*FLAGS, "-download-cache", "", "my-app"], project, tmp="none")
    assert compared.contained == compared.expected and compared.contained.code == 0
    assert env_files(compared.inside) == {"GREETING": "hello"}
    assert (compared.inside.platform / "env" / "GREETING").stat().st_uid == BUILD_USER[0]
    assert_same_outcome(compared)


def test_a_full_prepare_as_root_gives_the_files_to_the_build_user(rootfs: Path, tmp_path: Path) -> None:
    """The demo app (env, exclusions, a reordered group) plus a local archive, as root with -uid/-gid and the
    capabilities a chown needs (what a runtime gives by default; a hardened pod runs as the build user instead)."""
    app = ROOT / "fixtures" / "demo" / "app"
    project = (app / "project.toml").read_text() + '\n[[io.buildpacks.group]]\nuri = "vendor/local.tgz"\n'
    files = {p.relative_to(app).as_posix(): p.read_bytes() for p in app.rglob("*") if p.is_file()}
    files.pop("project.toml")
    files["vendor/local.tgz"] = make_tgz(
        tmp_path / "src" / "local.tgz", "example/local", "0.9.0"
    ).read_bytes()
    args = [*FLAGS, "-download-cache", "", "-uid", "1000", "-gid", "1000", "my-app"]

    compared = compare(
        rootfs, tmp_path, args, project, files=files, user=ROOT_USER, capabilities=CHOWN_CAPABILITIES
    )
    assert compared.contained == compared.expected and compared.contained.code == 0
    assert_same_outcome(compared)
    assert env_files(compared.inside) == {"GREETING": "hello from project.toml", "NODE_ENV": "production"}
    assert "example_local/0.9.0/bin/build" in listing(compared.inside.buildpacks)
    assert (compared.inside.layers / "order.toml").stat().st_uid == 1000
    assert (compared.inside.platform / "env" / "GREETING").stat().st_gid == 1000


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


INLINE = """
[[io.buildpacks.group]]
id = "example/inline"
[io.buildpacks.group.script]
api = "0.10"
inline = "echo built inline"
"""


@pytest.mark.parametrize("tmp", ["noexec", "none"])
def test_a_full_run_as_the_build_user_fetches_everything_as_the_package_does(
    rootfs: Path,
    tmp_path: Path,
    http_server: FileServer,
    https_server: tuple[FileServer, Path],
    registry: Registry,
    tmp: str,
) -> None:
    """http, https, a registry, a .cnb and an inline buildpack, include/exclude, a download cache on a volume:
    requests, urllib3, TLS and the OCI client work in the executable as in the package, with no /etc at all."""
    tls, cert = https_server
    make_tgz(http_server.root / "plain.tgz", "example/plain", "1.0.0")
    make_tgz(tls.root / "secure.tgz", "example/secure", "2.0.0")
    packaged = build_package(
        tmp_path / "oci", [("example/packaged", "3.0.0", "")], ("example/packaged", "3.0.0")
    )
    push(packaged.layout, "latest", registry.ref("example/packaged", "3"))
    archived = build_package(
        tmp_path / "oci-cnb", [("example/archived", "4.0.0", "")], ("example/archived", "4.0.0")
    )
    cnb = to_cnb(archived.layout, "latest", tmp_path / "archived.cnb").read_bytes()
    uris = [http_server.url("plain.tgz"), f"https://127.0.0.1:{tls.port}/secure.tgz",
            f"docker://{registry.ref('example/packaged', '3')}", "vendor/archived.cnb"]  # fmt: skip
    project = HEAD + '[io.buildpacks]\nexclude = ["*.log", "tmp/"]\n'
    project += "".join(f'[[io.buildpacks.group]]\nuri = "{u}"\n' for u in uris) + INLINE
    files = {"index.js": b"x", "debug.log": b"noise", "tmp/scratch": b"s", "vendor/archived.cnb": cnb}
    env = ENV | {"REQUESTS_CA_BUNDLE": "/certs/ca.pem", "CNB_DOWNLOAD_CACHE_DIR": "/cache"}

    compared = compare(rootfs, tmp_path, [*FLAGS, "my-app"], project, files=files, env=env, tmp=tmp,
                       certificate=cert)  # fmt: skip
    contained, expected = compared.contained, compared.expected
    assert contained.code == 0, contained.stderr
    assert_same_outcome(compared)
    installed = listing(compared.inside.buildpacks)
    for bp in ("example_plain/1.0.0/", "example_secure/2.0.0/", "example_packaged/3.0.0/",
               "example_archived/4.0.0/", "example_inline/"):  # fmt: skip
        assert bp in installed
    assert listing(compared.inside.app) == ["index.js", "project.toml", "vendor/", "vendor/archived.cnb"]
    assert any((compared.inside.root / "cache").iterdir())  # the cache volume was used
    # Buildpacks are fetched in parallel: their progress lines interleave in any order.
    assert sorted(contained.stdout.splitlines()) == sorted(expected.stdout.splitlines())
    assert contained.stderr == expected.stderr


def test_signatures_are_verified_inside_as_in_the_package(
    rootfs: Path, tmp_path: Path, registry: Registry
) -> None:
    """The verifier (cryptography and its Rust extension, imported lazily) is in the bundle: images signed with
    P-256 and Ed25519 keys are installed, an unsigned one refused with the same message, inside the hardened pod as
    through the package."""
    from tests.plugins.signing import make_key
    from tests.signed import push_image

    key = make_key(tmp_path / "keys")
    edwards = make_key(tmp_path / "keys", "ed", curve="ed25519")
    signed = push_image(registry, tmp_path)
    signed.sign(key, "sig")
    bundled = push_image(registry, tmp_path, signed.repository.replace("signed/", "bundled/"))
    bundled.sign(edwards, "bundle")
    unsigned = push_image(registry, tmp_path)
    policy = b'[[image.signed-by]]\nkeys = ["cosign.pub", "ed.pub"]\n'
    files = {
        "policy.toml": policy,
        "cosign.pub": key.public.read_bytes(),
        "ed.pub": edwards.public.read_bytes(),
    }
    args = [*FLAGS, "-policy", "/workspace/policy.toml"]
    for refs, code in (([signed.pinned, bundled.pinned], 0), ([unsigned.pinned], 1)):
        project = HEAD + "".join(f'[[io.buildpacks.group]]\nuri = "docker://{r}"\n' for r in refs)
        compared = compare(rootfs, tmp_path / str(code), args, project, files=files)
        assert compared.contained.code == code, compared.contained.stderr
        assert_same_outcome(compared)
        assert compared.contained.stderr == compared.expected.stderr
    assert "not signed by a key the platform policy trusts" in compared.contained.stderr


def test_an_untrusted_certificate_fails_the_same_way_inside(
    rootfs: Path, tmp_path: Path, https_server: tuple[FileServer, Path]
) -> None:
    """Without the test's CA, https is refused by certificate verification (the bundled CA store is loaded)."""
    tls, _ = https_server
    make_tgz(tls.root / "secure.tgz", "example/secure", "2.0.0")
    project = HEAD + f'[[io.buildpacks.group]]\nuri = "https://127.0.0.1:{tls.port}/secure.tgz"\n'
    compared = compare(rootfs, tmp_path, [*FLAGS, "-download-cache", "", "my-app"], project)

    contained, expected = compared.contained, compared.expected
    assert contained.code == expected.code == 1
    # The same cause, each naming the CA certificates it used: the image bundles certifi's (it has no system store).
    # (Had the executable lost certifi's CA bundle, requests would fail before connecting, with another cause.)
    untrusted = (
        f"ERROR: failed to download https://127.0.0.1:{tls.port}/secure.tgz: the TLS certificate of "
        "127.0.0.1 is not trusted: self-signed certificate (CA certificates: "
    )
    assert contained.stderr.startswith(untrusted) and expected.stderr.startswith(untrusted)
    assert "/cnb/lifecycle/preparer.d/certifi/cacert.pem, from certifi's bundle)" in contained.stderr
    assert "Traceback" not in contained.stderr and len(contained.stderr.splitlines()) == 1
    assert_same_outcome(compared)
    assert not (compared.inside.layers / "order.toml").exists()


def test_project_metadata_from_git_inside_matches_the_package(rootfs: Path, tmp_path: Path) -> None:
    """dulwich is in the bundle: the same project-metadata.toml from a repository made by the git CLI."""
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e",
           "GIT_AUTHOR_DATE": "@1700000000 +0000", "GIT_COMMITTER_DATE": "@1700000000 +0000", "PATH": "/usr/bin:/bin"}  # fmt: skip

    def repository(layout: Layout) -> None:
        for args in (
            ["init", "-q", "-b", "main"],
            ["add", "."],
            ["commit", "-q", "-m", "one"],
            ["tag", "v1"],
        ):
            subprocess.run(["git", "-C", str(layout.app), *args], env=env, check=True, capture_output=True)

    args = [*FLAGS, "-download-cache", "", "my-app"]
    compared = compare(rootfs, tmp_path, args, HEAD, files={"index.js": b"x"}, arrange=repository)
    assert compared.contained == compared.expected and compared.contained.code == 0
    written = (compared.inside.layers / "project-metadata.toml").read_bytes()
    assert written == (compared.python.layers / "project-metadata.toml").read_bytes()
    assert b'describe = "v1"' in written and b'type = "git"' in written
