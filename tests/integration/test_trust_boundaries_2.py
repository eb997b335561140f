"""The second trust-boundaries review, attack by attack (docs/security.md): the policy decides on what is really
fetched, root never follows a link planted by the build user, the app's ``.git`` is input, time is bounded, and
what the real lifecycle accepts is accepted. Fleet-cache attacks are in test_fleet.py, git ones in
test_project_metadata.py.

Each test performs the attack as an adversary would, on real servers on 127.0.0.1 and, where ownership matters,
as a real second user (uid 1000; those tests need root and are skipped without it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.buildpacks import make_dir, make_tgz
from tests.golden import Layout
from tests.integration.test_trust_boundaries import OTHER, as_root, run_as, shared_layout
from tests.plugins.cli import Result, base_env
from tests.plugins.http_server import FileServer, Stalling, stalling
from tests.plugins.registry import build_package, to_cnb
from tests.projects import HEAD, group


def policy(tmp_path: Path, text: str) -> str:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return str(path)


def paths_asked(server: FileServer) -> list[str]:
    with server.lock:
        return [path for path, _, _ in server.requests]


# 1. http.allow is matched on the URL the transport fetches, never on a string that reads another way.


def test_a_host_hidden_after_a_user_information_is_refused(
    preparer: Callable[..., Result], http_server: FileServer, tmp_path: Path
) -> None:
    make_tgz(http_server.root / "x@allowed.example" / "buildpacks" / "bp.tgz", "evil/bp")
    rules = policy(tmp_path, 'http.allow = ["http://allowed.example/buildpacks/*"]\n')
    evil = f"http://127.0.0.1:{http_server.port}/x@allowed.example/buildpacks/bp.tgz"
    for uri in (evil, evil + "#sha256=" + "0" * 64):
        result = preparer("-policy", rules, project=group(uri))
        assert result.code == 3, result.stderr
        assert (
            "not a valid URL: it reads two ways: what comes before its last '@' may be a user name and password"
            in result.stderr
        )
    assert paths_asked(http_server) == []


def test_user_information_is_never_part_of_the_match(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer, tmp_path: Path
) -> None:
    make_tgz(http_server.root / "buildpacks" / "bp.tgz", "me/bp")
    rules = policy(tmp_path, f'http.allow = ["{http_server.url("buildpacks/*")}"]\n')
    uri = f"http://me:secret@127.0.0.1:{http_server.port}/buildpacks/bp.tgz"
    result = preparer("-policy", rules, project=group(uri))
    assert result.code == 0, result.stderr
    assert "secret" not in result.stderr + result.stdout
    uri = f"http://127.0.0.1:{http_server.port}/buildpacks/bp.tgz?token=abc"  # nor is the query
    assert preparer("-policy", rules, project=group(uri)).code == 0


# 2. Dot segments are removed before the policy decides, as the transport removes them.


@pytest.mark.parametrize("segment", ["..", "%2e%2e", "%2E.", "./.."])
def test_dot_segments_cannot_climb_out_of_an_allowed_path(
    preparer: Callable[..., Result], http_server: FileServer, tmp_path: Path, segment: str
) -> None:
    make_tgz(http_server.root / "private" / "bp.tgz", "private/bp")
    rules = policy(tmp_path, f'http.allow = ["{http_server.url("buildpacks/*")}"]\n')
    result = preparer(
        "-policy", rules, project=group(http_server.url(f"buildpacks/{segment}/private/bp.tgz"))
    )
    assert result.code == 3, result.stderr
    assert f"{http_server.url('private/bp.tgz')} matches no pattern of http.allow" in result.stderr
    encoded = preparer("-policy", rules, project=group(http_server.url("buildpacks/..%2Fprivate/bp.tgz")))
    assert encoded.code == 3, encoded.stderr
    assert "a path segment is '.' or '..' once its encoded '/' or '\\' are decoded" in encoded.stderr
    assert paths_asked(http_server) == []


# 3. Every redirect hop is decided by the policy; https never leads to http; credentials stay with their origin.


def test_a_redirect_to_a_url_the_policy_does_not_allow_is_refused(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer, tmp_path: Path
) -> None:
    make_tgz(http_server.root / "private" / "bp.tgz", "private/bp")
    make_tgz(http_server.root / "buildpacks" / "v2" / "bp.tgz", "me/moved")
    http_server.redirect("buildpacks/bp.tgz", "/private/bp.tgz")
    http_server.redirect("buildpacks/moved.tgz", "v2/bp.tgz")
    rules = policy(tmp_path, f'http.allow = ["{http_server.url("buildpacks/*")}"]\n')
    result = preparer("-policy", rules, project=group(http_server.url("buildpacks/bp.tgz")))
    assert result.code == 3, result.stderr
    assert (
        f"is not allowed by the platform policy: it redirects to {http_server.url('private/bp.tgz')}, which "
        "matches no pattern of http.allow" in result.stderr
    )
    assert "/private/bp.tgz" not in paths_asked(http_server)
    assert not (layout.buildpacks / "private_bp").exists()
    allowed = preparer("-policy", rules, project=group(http_server.url("buildpacks/moved.tgz")))
    assert allowed.code == 0, allowed.stderr
    assert (layout.buildpacks / "me_moved" / "1.0.0" / "buildpack.toml").is_file()


def test_https_never_redirects_to_http_and_credentials_stay_with_their_origin(
    preparer: Callable[..., Result], tls_server: FileServer, http_server: FileServer
) -> None:
    make_tgz(http_server.root / "bp.tgz", "me/plain")
    tls_server.redirect("bp.tgz", http_server.url("bp.tgz"))
    env = {"REQUESTS_CA_BUNDLE": str(tls_server.cert)}
    result = preparer(project=group(tls_server.url("bp.tgz")), env=env)
    assert result.code == 1, result.stderr
    assert (
        f"failed to download {tls_server.url('bp.tgz')}: the server redirects from https to "
        f"{http_server.url('bp.tgz')}: plain http is refused after https" in result.stderr
    )
    assert paths_asked(http_server) == []
    # A request with credentials redirected to another origin goes there without them.
    http_server.redirect("creds.tgz", tls_server.url("creds.tgz"))
    make_tgz(tls_server.root / "creds.tgz", "me/creds")
    uri = f"http://me:secret@127.0.0.1:{http_server.port}/creds.tgz"
    assert preparer(project=group(uri), env=env).code == 0
    assert "Authorization" in dict(http_server.seen("creds.tgz")[0][1])
    assert all("Authorization" not in headers for _, headers in tls_server.seen("creds.tgz"))


# 4. The kind of a source is decided by what it is: a buildpackage is one whatever its name.


def test_a_buildpackage_under_another_name_is_a_cnb_for_the_policy(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer, tmp_path: Path
) -> None:
    package = build_package(tmp_path / "pkg", [("me/cnb", "1.0.0", "")], ("me/cnb", "1.0.0"))
    cnb = to_cnb(package.layout, "latest", tmp_path / "bp.cnb")
    for name in ("bp.tar", "bp.CNB", "bp.tgz"):
        shutil.copy(cnb, layout.app / name)
        shutil.copy(cnb, http_server.root / name)
    only_paths = policy(tmp_path, 'sources.allow = ["path"]\n')
    for name in ("bp.tar", "bp.tgz"):
        result = preparer("-policy", only_paths, project=group(name))
        assert result.code == 3, result.stderr
        assert (
            f"{layout.app / name} is a buildpackage (an OCI image layout), and cnb sources are not allowed"
            in result.stderr
        )
    named = preparer("-policy", only_paths, project=group("bp.CNB"))
    assert named.code == 3, named.stderr
    assert "cnb sources are not allowed" in named.stderr
    only_http = policy(tmp_path, 'sources.allow = ["http"]\n')
    remote = preparer("-policy", only_http, project=group(http_server.url("bp.tar")))
    assert remote.code == 3, remote.stderr
    assert "is a buildpackage (an OCI image layout), and cnb sources are not allowed" in remote.stderr
    assert not (layout.buildpacks / "me_cnb").exists()
    with_cnb = policy(tmp_path, 'sources.allow = ["path", "cnb"]\n')
    assert preparer("-policy", with_cnb, project=group("bp.tar")).code == 0
    assert (layout.buildpacks / "me_cnb" / "1.0.0" / "buildpack.toml").is_file()


# 12. A version with x in its build part is a concrete version, as the lifecycle reads it.


def test_x_in_a_build_or_prerelease_part_is_a_version_not_a_range(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    for version in ("1.0.0+build.x", "1.0.0-x.1"):
        make_dir(layout.buildpacks / "me_built" / version, "me/built", version)
    project = HEAD + '[[io.buildpacks.group]]\nid = "me/built"\nversion = "1.0.0+build.x"\n'
    result = preparer(project=project)
    assert result.code == 0, result.stderr
    order = tomllib.loads((layout.layers / "order.toml").read_text())
    assert order["order"][0]["group"] == [{"id": "me/built", "version": "1.0.0+build.x"}]
    prerelease = preparer(project=project.replace("1.0.0+build.x", "1.0.0-x.1"))
    assert prerelease.code == 0, prerelease.stderr
    for wildcard in ("1.x", "1.0.X", "*", "1.*-rc"):
        refused = preparer(project=project.replace("1.0.0+build.x", wildcard))
        assert refused.code == 3, (wildcard, refused.stderr)
        assert f"'{wildcard}' is a version range" in refused.stderr


# 5. Root never follows a link the build user planted in a directory it can write.


def victim_dir(world: Path) -> Path:
    """A directory of root's that the build user must not be able to make root change."""
    victim = world / "victim"
    victim.mkdir(mode=0o700)
    (victim / "secret").write_text("root's")
    return victim


def untouched(victim: Path) -> bool:
    return oct(victim.stat().st_mode & 0o777) == oct(0o700) and sorted(os.listdir(victim)) == ["secret"]


@as_root
@pytest.mark.parametrize("planted", ["link", "other-users-dir"])
def test_a_link_or_a_foreign_directory_at_an_ids_place_is_refused(
    world: Path, tmp_path: Path, planted: str
) -> None:
    layout = shared_layout(world)
    os.chown(
        layout.buildpacks, OTHER, OTHER
    )  # the build user can write <buildpacks>; the preparer runs as root
    victim = victim_dir(world)
    where = layout.buildpacks / "me_bp"
    if planted == "link":
        os.symlink(victim, where)
        os.lchown(where, OTHER, OTHER)
        why = f"{where} is a symbolic link (not followed)"
    else:
        where.mkdir()
        os.chown(where, OTHER, OTHER)
        why = f"{where} is owned by uid {OTHER}, not by the preparer's user or root"
    make_tgz(layout.app / "bp.tgz", "me/bp")
    (layout.app / "project.toml").write_text(group("bp.tgz"))
    result = run_as(None, layout, tmp_path, "-download-cache", "")
    assert result.code == 1, result.stderr
    assert f"ERROR: failed to install me/bp@1.0.0 into {where / '1.0.0'}: {why}" in result.stderr
    assert untouched(victim)
    assert not (layout.layers / "order.toml").exists()


@as_root
def test_a_link_planted_as_the_platforms_env_directory_is_refused(world: Path, tmp_path: Path) -> None:
    layout = shared_layout(world)
    layout.platform.mkdir()
    os.chown(layout.platform, OTHER, OTHER)
    victim = victim_dir(world)
    os.symlink(victim, layout.platform / "env")  # so that root writes <victim>/passwd
    (layout.app / "project.toml").write_text(
        HEAD + '[[io.buildpacks.build.env]]\nname = "passwd"\nvalue = "x"\n'
    )
    result = run_as(None, layout, tmp_path)
    assert result.code == 1, result.stderr
    assert (
        f"ERROR: failed to create {layout.platform / 'env'}: {layout.platform / 'env'} is a symbolic link"
        in (result.stderr)
    )
    assert untouched(victim)


@as_root
def test_staging_is_never_in_a_directory_the_build_user_can_write(
    world: Path, tmp_path: Path, http_server: FileServer
) -> None:
    """A staging directory in a <buildpacks> the build user can write could be renamed away and a link put in its
    place while root extracts into it: the run stages in $TMPDIR instead, and the result is the same."""
    layout = shared_layout(world)
    os.chown(layout.buildpacks, OTHER, OTHER)
    temp = world / "tmp"
    temp.mkdir(mode=0o700)
    make_tgz(http_server.root / "bp.tgz", "me/slow")
    http_server.fail("bp.tgz", "slow")
    (layout.app / "project.toml").write_text(group(http_server.url("bp.tgz")))
    seen: set[str] = set()
    python, python_env = sys.executable, dict[str, str]()
    with subprocess.Popen(
        [python, "-m", "preparer", *layout.flags(), "-download-cache", ""],
        env=base_env(tmp_path, TMPDIR=str(temp), **python_env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    ) as proc:  # fmt: skip
        while proc.poll() is None:
            seen.update(os.listdir(layout.buildpacks))
            seen.update(f"tmp/{name}" for name in os.listdir(temp))
            time.sleep(0.05)
        assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert not [name for name in seen if name.startswith(".preparer-staging-")]
    assert [name for name in seen if name.startswith("tmp/preparer-staging-")]
    assert (layout.buildpacks / "me_slow" / "1.0.0" / "buildpack.toml").is_file()


@as_root
def test_a_run_with_nowhere_safe_to_stage_fetches_nothing(
    world: Path, tmp_path: Path, http_server: FileServer
) -> None:
    """$TMPDIR is only looked for when <buildpacks> cannot hold staging; when the build user can write both, the run
    stages nowhere: exit 1 naming both and what to do, no request, nothing written in either."""
    layout = shared_layout(world)
    os.chown(layout.buildpacks, OTHER, OTHER)
    temp = world / "tmp"
    temp.mkdir(mode=0o700)
    os.chown(temp, OTHER, OTHER)  # a volume the build user owns ($TMPDIR of /tmp, sticky, would be safe)
    make_tgz(http_server.root / "bp.tgz", "me/bp")
    (layout.app / "project.toml").write_text(group(http_server.url("bp.tgz")))
    before = sorted(os.listdir(layout.buildpacks))
    result = subprocess.run(
        [sys.executable, "-m", "preparer", *layout.flags(), "-download-cache", ""],
        env=base_env(tmp_path, TMPDIR=str(temp)), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert (
        f"ERROR: failed to make a staging directory: neither {layout.buildpacks} nor $TMPDIR can be written safely"
        in result.stderr
    )
    assert f"{layout.buildpacks} is owned by uid {OTHER}; {temp} is owned by uid {OTHER}" in result.stderr
    assert "set TMPDIR to a directory only the preparer's user can write" in result.stderr
    assert paths_asked(http_server) == []
    assert sorted(os.listdir(layout.buildpacks)) == before
    assert os.listdir(temp) == []


def test_a_directory_swapped_for_a_link_after_planning_leads_no_removal_outside_the_app(
    tmp_path: Path,
) -> None:
    """The app belongs to the build user: between planning and the commit it can swap a directory of the app for
    a link. Removing what exclude planned never goes through it."""
    from preparer import Inputs, PreparerError, plan_run, run_plan

    layout = Layout(tmp_path / "build")
    layout.app.mkdir(parents=True)
    (layout.app / "src").mkdir()
    (layout.app / "src" / "a.log").write_text("app")
    (layout.app / "index.js").write_text("app")
    (layout.app / "project.toml").write_text(HEAD + '[io.buildpacks]\nexclude = ["*.log"]\n')
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "a.log").write_text("not the app's")
    inputs = Inputs(app_dir=layout.app, layers_dir=layout.layers, platform_dir=layout.platform,
                    buildpacks_dir=layout.buildpacks, order_path=layout.order)  # fmt: skip
    plan = plan_run(inputs)
    shutil.move(layout.app / "src", tmp_path / "moved")
    os.symlink(victim, layout.app / "src")
    with pytest.raises(PreparerError) as raised:
        run_plan(plan, inputs)
    # A saved plan whose app changed is refused before anything is removed (a swap after that check, in the
    # commit itself, meets the removal's own refusal: test_appfilter's links tests).
    assert raised.value.message == (
        f"failed to run the plan: the files of {layout.app} that io.buildpacks.exclude selects changed since it was "
        "made: make a new plan with plan_run"
    )
    assert (victim / "a.log").read_text() == "not the app's"
    assert sorted(os.listdir(layout.app)) == ["index.js", "project.toml", "src"]


def test_a_directory_swapped_for_a_link_in_the_commit_leads_no_removal_outside_the_app(
    tmp_path: Path,
) -> None:
    """The same swap after the plan's files were checked, in the commit itself: the removal goes through no link."""
    from preparer.appfilter import Trash, plan_removal
    from preparer.errors import PreparerError

    app = tmp_path / "app"
    (app / "src").mkdir(parents=True)
    (app / "src" / "a.log").write_text("app")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "a.log").write_text("not the app's")
    removal = plan_removal(app, (), ("*.log",))
    shutil.move(app / "src", tmp_path / "moved")
    os.symlink(victim, app / "src")
    trash = Trash(app)
    with pytest.raises(PreparerError) as raised:
        trash.move(removal)
    trash.restore()
    assert raised.value.message == (
        f"failed to remove {app / 'src' / 'a.log'}: {app / 'src'} is a symbolic link (not followed)"
    )
    assert (victim / "a.log").read_text() == "not the app's"


# 11. The run has a deadline: many slow servers together cannot hold a build for hours.


@pytest.mark.parametrize("server", ["trickling bodies", "silent", "trickling headers"])
def test_the_run_deadline_bounds_every_download_together(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer, server: str
) -> None:
    """Each download alone keeps within its own limits (a byte now and then, never 60 s of silence): only the
    run's deadline ends them. Nothing is installed, and the run says why."""
    mode = {"trickling bodies": "body", "silent": "silent", "trickling headers": "headers"}[server]
    with stalling(Stalling(mode=mode, pace=0.5)) as slow:
        if server == "trickling bodies":
            urls = [http_server.url(f"bp{n}.tgz") for n in range(6)]
            for n in range(len(urls)):
                make_tgz(http_server.root / f"bp{n}.tgz", f"me/slow{n}")
                http_server.fail(f"bp{n}.tgz", "trickle")
        else:
            urls = [f"http://{slow.host}/bp{n}.tgz" for n in range(3)]
        start = time.monotonic()
        result = preparer(project=group(*urls), env={"CNB_PREPARER_RUN_TIMEOUT": "3"})
        took = time.monotonic() - start
    assert result.code == 1, result.stderr
    assert "the run took longer than 3 s in all (CNB_PREPARER_RUN_TIMEOUT)" in result.stderr
    assert result.stderr.startswith("ERROR: failed to download http://127.0.0.1:")
    assert took < 8, f"{took:.1f} s"
    assert not [p for p in layout.buildpacks.iterdir() if p.name.startswith("me_slow")]


# 13. A build user with HOME=/ has no cache there, and nothing is wrong: no warning on every run.


@as_root
def test_no_cache_warning_for_a_build_user_whose_home_is_the_root(
    world: Path, tmp_path: Path, http_server: FileServer
) -> None:
    layout = shared_layout(world, owner=OTHER)
    make_tgz(http_server.root / "bp.tgz", "me/bp")
    (layout.app / "project.toml").write_text(group(http_server.url("bp.tgz")))
    homeless = {"HOME": "/", "XDG_CACHE_HOME": ""}
    result = run_as(OTHER, layout, tmp_path, env=homeless)
    assert (result.code, result.stderr) == (0, "")
    assert (layout.buildpacks / "me_bp" / "1.0.0" / "buildpack.toml").is_file()
    asked = run_as(OTHER, layout, tmp_path, "-download-cache", "/.cache/cnb-preparer", env=homeless)
    assert asked.code == 0
    assert asked.warnings == [
        "Warning: the download cache is not used: /.cache cannot be made (Permission denied)"
    ]
