"""Bare buildpack ids in ``uri`` (docs/decisions.md, "Resolving `uri`") against real servers: the registry index on the test HTTP server,
buildpackages in the real registry, and Docker Hub played by a proxy in front of that registry (Docker Hub itself
cannot be reached from here)."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.golden import Layout
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.plugins.registry import HubProxy, Registry, build_package, push
from tests.projects import group


def order_refs(layout: Layout) -> list[str]:
    order = tomllib.loads((layout.layers / "order.toml").read_text())
    return [f"{e['id']}@{e['version']}" for g in order["order"] for e in g["group"]]


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory, registry: Registry) -> dict[str, str]:
    """me/regonly 2.0.0 pushed by digest for the registry index; me/imageonly 1.5.0 as me/imageonly:latest."""
    work = tmp_path_factory.mktemp("bare-ids")
    regonly = build_package(work / "regonly", [("me/regonly", "2.0.0", "")], ("me/regonly", "2.0.0"))
    imageonly = build_package(work / "imageonly", [("me/imageonly", "1.5.0", "")], ("me/imageonly", "1.5.0"))
    digest = push(regonly.layout, "latest", registry.ref("me/regonly", "2.0.0"))
    push(imageonly.layout, "latest", registry.ref("me/imageonly", "latest"))
    return {"regonly": f"{registry.host}/me/regonly@{digest}"}


@pytest.fixture
def index(http_server: FileServer, packages: dict[str, str]) -> tuple[str, ...]:
    """A buildpack registry index on the HTTP server that lists me/regonly (and nothing else)."""
    entry = {"ns": "me", "name": "regonly", "version": "2.0.0", "yanked": False, "addr": packages["regonly"]}
    path = http_server.root / "index" / "re" / "go" / "me_regonly"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry, separators=(",", ":")) + "\n")
    return ("-buildpack-registry-index", http_server.url("index"))


def test_an_installed_id_makes_no_request(preparer: Callable[..., Result], layout: Layout, tmp_path: Path,
                                          http_server: FileServer, index: tuple[str, ...], hub: HubProxy) -> None:  # fmt: skip
    report = tmp_path / "report.toml"
    result = preparer(*index, "-log-level", "debug", "-prepare-report", str(report),
                      project=group("heroku/python", "heroku/procfile@1.0.1"), env=hub.env())  # fmt: skip
    assert result.code == 0, result.stderr
    assert order_refs(layout) == ["heroku/python@1.0.0", "heroku/procfile@1.0.1"]
    assert http_server.requests == [] and hub.requests == []
    assert (
        f"io.buildpacks.group[0]: heroku/python is installed in {layout.buildpacks}: using heroku/python@1.0.0, "
        "no request made" in result.stdout
    )
    records = tomllib.loads(report.read_text())["buildpacks"]
    assert [(r["source"], r["action"], r["resolved"]) for r in records] == [
        ("heroku/python", "present", "installed"),
        ("heroku/procfile@1.0.1", "present", "installed"),
    ]


def test_an_id_only_in_the_registry_index(preparer: Callable[..., Result], layout: Layout, tmp_path: Path,
                                          index: tuple[str, ...], hub: HubProxy) -> None:  # fmt: skip
    report = tmp_path / "report.toml"
    result = preparer(*index, "-log-level", "debug", "-prepare-report", str(report), project=group("me/regonly"),
                      env=hub.env())  # fmt: skip
    assert result.code == 0, result.stderr
    assert order_refs(layout) == ["me/regonly@2.0.0"]
    assert (layout.buildpacks / "me_regonly" / "2.0.0" / "buildpack.toml").is_file()
    assert hub.requests == []  # the registry index had it: no image lookup by name
    assert "me/regonly is not in" in result.stdout and "the buildpack registry" in result.stdout
    (record,) = tomllib.loads(report.read_text())["buildpacks"]
    assert (record["source"], record["action"], record["resolved"]) == ("me/regonly", "installed", "registry")
    assert record["digest"].startswith("sha256:")


def test_an_id_that_is_only_an_image(preparer: Callable[..., Result], layout: Layout, tmp_path: Path,
                                     http_server: FileServer, index: tuple[str, ...], hub: HubProxy) -> None:  # fmt: skip
    report = tmp_path / "report.toml"
    result = preparer(*index, "-insecure-registry", "index.docker.io", "-prepare-report", str(report),
                      project=group("me/imageonly"), env=hub.env())  # fmt: skip
    assert result.code == 0, result.stderr
    assert order_refs(layout) == ["me/imageonly@1.5.0"]
    assert [status for status, _ in http_server.seen("index/im/ag/me_imageonly")] == [404]  # no index entry
    assert hub.requests[0] == "http://registry-1.docker.io/v2/me/imageonly/manifests/latest"
    (record,) = tomllib.loads(report.read_text())["buildpacks"]
    assert (record["source"], record["resolved"]) == ("me/imageonly", "image")


def test_an_id_that_is_nowhere(preparer: Callable[..., Result], layout: Layout, index: tuple[str, ...],
                               hub: HubProxy) -> None:  # fmt: skip
    result = preparer(
        *index, "-insecure-registry", "index.docker.io", project=group("me/nowhere"), env=hub.env()
    )
    assert result.code == 1
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to find buildpack me/nowhere: not in {layout.buildpacks}, not in the buildpack registry "
        f"{index[1]}, and there is no image index.docker.io/me/nowhere:latest"
    )
    assert not (layout.layers / "order.toml").exists()


def test_an_id_at_a_version_that_is_nowhere(preparer: Callable[..., Result], layout: Layout,
                                            index: tuple[str, ...], hub: HubProxy) -> None:  # fmt: skip
    # heroku/procfile is installed, but not at 9.9.9: the registry is asked, and an image cannot name a version.
    result = preparer(*index, project=group("heroku/procfile@9.9.9"), env=hub.env())
    assert result.code == 1
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to find buildpack heroku/procfile@9.9.9: not in {layout.buildpacks} (found: 1.0.1, 2.0.0), "
        "not in the buildpack "
        f"registry {index[1]}, and an image reference cannot name a version with '@'"
    )
    assert hub.requests == []


def test_the_dry_run_says_what_it_would_do(preparer: Callable[..., Result], http_server: FileServer,
                                           index: tuple[str, ...], hub: HubProxy) -> None:  # fmt: skip
    result = preparer(*index, "-dry-run", project=group("heroku/python", "me/regonly"), env=hub.env())
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "  group: heroku/python@1.0.0 (installed in <buildpacks>)" in lines
    assert (
        "  group: me/regonly (not in <buildpacks>: would look it up in the buildpack registry, else pull it as "
        "an image)" in lines
    )
    assert http_server.requests == [] and hub.requests == []
