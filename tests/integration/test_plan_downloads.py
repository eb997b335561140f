"""What a plan will download, and how large, before the first byte (issue: the library in a long-lived build
service, round 2): a web UI shows the total from ``plan_run`` and follows the run's events against it.

Real components: the suite's keep-alive HTTP server (an archive with ``Content-Length``, and one answered in chunks
without it), a real registry whose access log says what it served, the download cache of a first run, the CLI's
``-dry-run`` through the ``preparer`` fixture.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from preparer import Cancel, Cancelled, Download, Inputs, PlannedDownload, plan_run, prepare, run_plan
from preparer.downloads import human_size
from tests.buildpacks import make_dir, make_tgz
from tests.golden import BUILDER, Layout
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.plugins.registry import Registry, buildpack_layer, push_package, started
from tests.projects import HEAD, group


def build(root: Path, *uris: str, **more: Any) -> tuple[Layout, Inputs]:
    layout = Layout(root)
    shutil.copytree(BUILDER, layout.root / "cnb")
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    (layout.app / "project.toml").write_text(
        HEAD + "".join(f'[[io.buildpacks.group]]\nuri = "{u}"\n' for u in uris)
    )
    inputs = Inputs(
        app_dir=str(layout.app), layers_dir=str(layout.layers), platform_dir=str(layout.platform),
        buildpacks_dir=str(layout.buildpacks), order_path=str(layout.order), **{"download_cache": None, **more},
    )  # fmt: skip
    return layout, inputs


def served(server: FileServer, name: str) -> int:
    """The bytes the server sent for ``name`` in answers to GET (200s, ``Content-Length`` or chunked body)."""
    gets = sum(1 for path, status, _ in server.requests if path == f"/{name}" and status == 200)
    heads = server.heads.count(f"/{name}")
    return (gets - heads) * (server.root / name).stat().st_size


def test_an_archives_size_comes_from_one_head_and_the_events_carry_it(
    http_server: FileServer, tmp_path: Path
) -> None:
    make_tgz(http_server.root / "bp.tgz", "svc/sized", payload=bytes(range(256)) * 40)
    size = (http_server.root / "bp.tgz").stat().st_size
    _layout, inputs = build(tmp_path / "b", http_server.url("bp.tgz"))
    plan = plan_run(inputs)
    assert plan.downloads == (
        PlannedDownload("io.buildpacks.group[0]", http_server.url("bp.tgz"), None, size),
    )
    assert (plan.download_size, plan.unknown_sizes) == (size, 0)
    assert (
        http_server.heads == ["/bp.tgz"] and served(http_server, "bp.tgz") == 0
    )  # measured, nothing downloaded
    events: list[Download] = []
    run_plan(plan, progress=events.append)
    assert (
        served(http_server, "bp.tgz") == plan.download_size
    )  # what the plan said is what the run downloaded
    assert events and {e.expected for e in events} == {size}
    assert events[-1].kind == "finished" and events[-1].done == size


def test_the_entries_are_measured_at_once_and_listed_in_the_plans_order(
    http_server: FileServer, tmp_path: Path
) -> None:
    """A web UI waits for the total: the probes go out together, as the run's fetches do, each answer held back."""
    names = [f"many{n}.tgz" for n in range(4)]
    for n, name in enumerate(names):
        make_tgz(http_server.root / name, f"svc/many{n}", payload=bytes(n * 1000))
    _layout, inputs = build(tmp_path / "b", *(http_server.url(name) for name in names))
    http_server.latency = 0.3
    try:
        plan = plan_run(inputs)
    finally:
        http_server.latency = 0.0
    assert http_server.most_in_flight >= 2
    assert sorted(http_server.heads) == [f"/{name}" for name in names]
    assert [d.source for d in plan.downloads] == [http_server.url(name) for name in names]
    assert [d.size for d in plan.downloads] == [(http_server.root / name).stat().st_size for name in names]


def test_a_chunked_answer_is_of_unknown_size_and_the_rest_still_counts(
    http_server: FileServer, tmp_path: Path
) -> None:
    make_tgz(http_server.root / "known.tgz", "svc/known")
    make_tgz(http_server.root / "chunked.tgz", "svc/chunked")
    http_server.chunked.add("/chunked.tgz")
    _layout, inputs = build(tmp_path / "b", http_server.url("known.tgz"), http_server.url("chunked.tgz"))
    plan = plan_run(inputs)
    sizes = {d.source.rpartition("/")[2]: d.size for d in plan.downloads}
    assert sizes == {"known.tgz": (http_server.root / "known.tgz").stat().st_size, "chunked.tgz": None}
    assert (plan.download_size, plan.unknown_sizes) == (sizes["known.tgz"], 1)
    events: list[Download] = []
    report = run_plan(plan, progress=events.append)
    assert sorted(b.id for b in report.buildpacks) == ["svc/chunked", "svc/known"]
    assert {e.expected for e in events if e.url.endswith("chunked.tgz")} == {None}


def test_what_the_download_cache_holds_is_cached_and_costs_nothing(
    http_server: FileServer, tmp_path: Path
) -> None:
    make_tgz(http_server.root / "bp.tgz", "svc/warm")
    digest = hashlib.sha256((http_server.root / "bp.tgz").read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    pinned = http_server.url("bp.tgz") + f"#sha256={digest}"
    prepare(build(tmp_path / "first", http_server.url("bp.tgz"), download_cache=str(cache))[1])
    before = len(http_server.requests)

    # Unpinned: one conditional HEAD, answered 304.
    plan = plan_run(build(tmp_path / "b", http_server.url("bp.tgz"), download_cache=str(cache))[1])
    assert [(d.size, d.cached) for d in plan.downloads] == [(0, True)]
    asked = http_server.requests[before:]
    assert [(path, status) for path, status, _ in asked] == [("/bp.tgz", 304)] and "If-None-Match" in asked[
        0
    ][2]

    # Pinned, and the cache holds that digest: no request at all.
    plan = plan_run(build(tmp_path / "c", pinned, download_cache=str(cache))[1])
    assert [(d.size, d.cached) for d in plan.downloads] == [(0, True)]
    assert len(http_server.requests) == before + 1


def test_local_sources_download_nothing_and_an_offline_run_asks_nothing(
    http_server: FileServer, registry: Registry, tmp_path: Path
) -> None:
    make_dir(tmp_path / "local", "svc/local")
    make_tgz(http_server.root / "bp.tgz", "svc/remote")
    _, inputs = build(tmp_path / "b", str(tmp_path / "local"))
    assert plan_run(inputs).downloads == ()
    _layout, inputs = build(
        tmp_path / "c", str(tmp_path / "local"), http_server.url("bp.tgz"),
        download_cache=str(tmp_path / "cache"), download_cache_repo=f"{registry.host}/fleet/offline",
        download_cache_repo_mode="offline",
    )  # fmt: skip
    plan = plan_run(inputs)
    assert [(d.source, d.size) for d in plan.downloads] == [(http_server.url("bp.tgz"), None)]
    assert http_server.requests == []


def blob_bytes(access_log: Path, repository: str) -> int:
    """The bytes the registry sent in 200 answers to GETs of ``repository``'s blobs (its combined access log)."""
    total = 0
    pattern = re.compile(
        rf'"GET /v2/{re.escape(repository)}/blobs/sha256:[0-9a-f]{{64}} HTTP/1\.1" 200 (\d+)'
    )
    for line in access_log.read_text().splitlines():
        match = pattern.search(line)
        if match:
            total += int(match[1])
    return total


def test_an_images_size_is_its_config_and_layers_and_is_what_the_run_downloads(tmp_path: Path) -> None:
    with started(tmp_path / "reg", access_log=True) as registry:
        one = buildpack_layer(tmp_path / "one", [("img/a", "1.0.0", "")])
        two = buildpack_layer(tmp_path / "two", [("img/b", "1.0.0", "")])
        _, manifest = push_package(
            registry, "bp/sized", "1", [(one, [("img/a", "1.0.0", "")]), (two, [("img/b", "1.0.0", "")])],
            ("img/a", "1.0.0"),
        )  # fmt: skip
        layers = manifest["layers"]
        config = manifest["config"]
        assert isinstance(layers, list) and isinstance(config, dict)
        expected = sum(int(d["size"]) for d in [config, *layers])
        _layout, inputs = build(tmp_path / "b", f"docker://{registry.ref('bp/sized', '1')}")
        plan = plan_run(inputs)
        assert [(d.source, d.size, d.cached) for d in plan.downloads] == [
            (registry.ref("bp/sized", "1"), expected, False)
        ]
        log = tmp_path / "reg" / "access.log"
        assert blob_bytes(log, "bp/sized") == 0  # only manifests were read
        run_plan(plan)
        assert blob_bytes(log, "bp/sized") == plan.download_size


def test_the_dry_run_asks_nothing_and_says_what_the_cache_holds(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer
) -> None:
    """A dry run makes no request (the contract): a pinned archive the download cache holds is said to come from
    it; the size of anything else is unknown."""
    archive = make_tgz(http_server.root / "pinned.tgz", "svc/pinned", payload=bytes(range(256)) * 8000)
    make_tgz(http_server.root / "other.tgz", "svc/other")
    pinned = f"{http_server.url('pinned.tgz')}#sha256={hashlib.sha256(archive.read_bytes()).hexdigest()}"
    assert preparer(project=group(pinned)).code == 0  # the cache now holds it
    (layout.layers / "order.toml").unlink()
    asked = len(http_server.requests)
    result = preparer(
        "-dry-run", "-log-level", "info", project=group(pinned, http_server.url("other.tgz"))
    )  # fmt: skip
    assert result.code == 0, result.stderr
    assert len(http_server.requests) == asked
    lines = [line.strip() for line in (result.stdout + result.stderr).splitlines()]
    assert f"would use {http_server.url('pinned.tgz')} from the download cache (nothing to download)" in lines
    assert f"would download {http_server.url('other.tgz')} (size unknown)" in lines
    assert "2 downloads, 0 B, 1 of unknown size, 1 in the download cache" in lines
    assert not (layout.layers / "order.toml").exists()


def test_human_sizes() -> None:
    assert [human_size(n) for n in (0, 1023, 1024, 1258291, 14889779, 3 << 30)] == [
        "0 B", "1023 B", "1.0 KiB", "1.2 MiB", "14.2 MiB", "3.0 GiB",
    ]  # fmt: skip


def test_a_plan_made_inside_prepare_is_not_measured(http_server: FileServer, tmp_path: Path) -> None:
    """A run that shows its plan to no one sends no request to measure it: the command's warm path stays as it was."""
    make_tgz(http_server.root / "bp.tgz", "svc/plain")
    prepare(build(tmp_path / "b", http_server.url("bp.tgz"))[1])
    assert http_server.heads == []


def test_a_cancel_stops_the_measuring_at_once_and_leaves_no_thread(
    http_server: FileServer, tmp_path: Path
) -> None:
    """A service cancels a plan whose probes wait on a server that holds its answers back: ``plan_run`` returns
    ``Cancelled`` at once, and none of its probe threads is left."""
    names = ["held0.tgz", "held1.tgz"]
    for name in names:
        make_tgz(http_server.root / name, "svc/held")
    _layout, inputs = build(tmp_path / "b", *(http_server.url(name) for name in names))
    handle = Cancel()
    raised: list[BaseException] = []
    stopped: list[float] = []

    def planning() -> None:
        try:
            plan_run(inputs, cancel=handle)
        except BaseException as err:  # noqa: BLE001 - handed to the test's thread
            raised.append(err)
        stopped.append(time.monotonic())

    http_server.latency = 3.0
    try:
        thread = threading.Thread(target=planning)
        thread.start()
        ends = time.monotonic() + 10
        while len(http_server.heads) < 2 and time.monotonic() < ends:
            time.sleep(0.01)
        time.sleep(0.2)  # both probes are waiting for their answers
        cancelled = time.monotonic()
        handle.set()
        thread.join(10)
    finally:
        http_server.latency = 0.0
    assert [type(e) for e in raised] == [Cancelled]
    assert stopped[0] - cancelled < 0.5
    ends = time.monotonic() + 1  # (their sockets are shut: they end as soon as they are scheduled)
    while [t for t in threading.enumerate() if t.name.startswith("fetch")] and time.monotonic() < ends:
        time.sleep(0.02)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("fetch")]


def shared_packages(registry: Registry, tmp_path: Path) -> tuple[str, str]:
    """Two buildpackages of one repository that share a layer (a library buildpack both hold)."""
    common = buildpack_layer(tmp_path / "common", [("lib/common", "1.0.0", "")])
    own = {name: buildpack_layer(tmp_path / name, [(f"img/{name}", "1.0.0", "")]) for name in ("a", "b")}
    for tag, name in (("1", "a"), ("2", "b")):
        layers = [(common, [("lib/common", "1.0.0", "")]), (own[name], [(f"img/{name}", "1.0.0", "")])]
        push_package(registry, "bp/shared", tag, layers, (f"img/{name}", "1.0.0"))
    return f"docker://{registry.ref('bp/shared', '1')}", f"docker://{registry.ref('bp/shared', '2')}"


def test_a_layer_two_images_share_is_counted_once_as_the_run_fetches_it_once(tmp_path: Path) -> None:
    """With a download cache the run fetches the shared layer once: the plan's total is what the registry then
    served (on main it counted the layer for each image: 1.17 times the bytes fetched here)."""
    with started(tmp_path / "reg", access_log=True) as registry:
        first, second = shared_packages(registry, tmp_path)
        _layout, inputs = build(tmp_path / "b", first, second, download_cache=str(tmp_path / "cache"))
        plan = plan_run(inputs)
        log = tmp_path / "reg" / "access.log"
        assert blob_bytes(log, "bp/shared") == 0
        report = run_plan(plan)
        assert sorted(bp.id for bp in report.buildpacks) == ["img/a", "img/b"]
        assert blob_bytes(log, "bp/shared") == plan.download_size


def test_without_a_download_cache_each_image_counts_the_layer_it_fetches(tmp_path: Path) -> None:
    """Without a cache, each entry's fetch downloads the shared layer: each counts it, as the registry serves it."""
    with started(tmp_path / "reg", access_log=True) as registry:
        first, second = shared_packages(registry, tmp_path)
        _layout, inputs = build(tmp_path / "b", first, second)
        plan = plan_run(inputs)
        run_plan(plan)
        assert blob_bytes(tmp_path / "reg" / "access.log", "bp/shared") == plan.download_size
