"""The library in a service's shape: many runs at once in one process, each cancelled on its own, errors that
survive a process pool, nothing left behind (issue: a library a build service can embed).

Real components: the http file server on 127.0.0.1 (a trickling download keeps a run busy), real layouts, the
public API only.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
import pickle
import shutil
import threading
import time
from pathlib import Path

import pytest

from preparer import Cancel, Cancelled, Inputs, interrupt, plan_run, prepare, run_plan
from preparer import errors as errors_module
from preparer.errors import FetchError, PreparerError
from preparer.progress import Download
from tests.buildpacks import make_tgz
from tests.golden import BUILDER, Layout
from tests.plugins.http_server import FileServer
from tests.projects import HEAD


def build(root: Path, *uris: str) -> tuple[Layout, Inputs]:
    layout = Layout(root)
    shutil.copytree(BUILDER, layout.root / "cnb")
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    text = HEAD + "".join(f'[[io.buildpacks.group]]\nuri = "{uri}"\n' for uri in uris)
    (layout.app / "project.toml").write_text(text)
    inputs = Inputs(
        app_dir=str(layout.app), layers_dir=str(layout.layers), platform_dir=str(layout.platform),
        buildpacks_dir=str(layout.buildpacks), order_path=str(layout.order), download_cache=None,
    )  # fmt: skip
    return layout, inputs


def installed(layout: Layout) -> list[str]:
    return (
        sorted(p.name for p in layout.buildpacks.iterdir() if not p.name.startswith("."))
        if layout.buildpacks.exists()
        else []
    )


def test_one_cancelled_build_among_many_stops_alone(http_server: FileServer, tmp_path: Path) -> None:
    for n in range(3):
        make_tgz(http_server.root / f"bp{n}.tgz", f"svc/bp{n}", payload=os.urandom(3000))
    http_server.fail("bp1.tgz", "trickle")  # the build that will be cancelled is still downloading
    builds = [build(tmp_path / f"b{n}", http_server.url(f"bp{n}.tgz")) for n in range(3)]
    handles = [Cancel() for _ in builds]
    before = set(installed(builds[1][0]))
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        futures = [
            pool.submit(prepare, inputs, cancel=handle)
            for (_, inputs), handle in zip(builds, handles, strict=True)
        ]
        time.sleep(1.0)
        began = time.monotonic()
        handles[1].set()
        with pytest.raises(Cancelled) as cancelled:
            futures[1].result(timeout=10)
        stopped_in = time.monotonic() - began
        done = [futures[0].result(timeout=30), futures[2].result(timeout=30)]
    assert stopped_in < 2.0, stopped_in  # within a second or so; generous for a loaded machine
    assert (cancelled.value.exit_code, cancelled.value.message) == (130, "failed to prepare: cancelled")
    assert isinstance(cancelled.value, Exception) and not isinstance(cancelled.value, KeyboardInterrupt)
    assert set(installed(builds[1][0])) == before and not (builds[1][0].layers / "order.toml").exists()
    for (layout, _), report, n in zip((builds[0], builds[2]), done, (0, 2), strict=True):
        assert [b.id for b in report.buildpacks] == [f"svc/bp{n}"]
        assert (layout.buildpacks / f"svc_bp{n}" / "1.0.0" / "data.bin").is_file()
    assert interrupt._live == set()  # every run's scope is gone with it


def test_a_handle_set_before_planning_stops_the_run_at_its_first_line(
    tmp_path: Path, http_server: FileServer
) -> None:
    make_tgz(http_server.root / "bp.tgz", "svc/early")
    layout, inputs = build(tmp_path / "b", http_server.url("bp.tgz"))
    handle = Cancel()
    handle.set()
    with pytest.raises(Cancelled):
        plan_run(inputs, cancel=handle)
    with pytest.raises(Cancelled):
        prepare(inputs, cancel=handle)
    assert http_server.seen("bp.tgz") == [] and not (layout.layers / "order.toml").exists()


def test_a_deadline_stops_the_run_and_is_exit_1(tmp_path: Path, http_server: FileServer) -> None:
    make_tgz(http_server.root / "bp.tgz", "svc/slow", payload=os.urandom(3000))
    http_server.fail("bp.tgz", "trickle")
    layout, inputs = build(tmp_path / "b", http_server.url("bp.tgz"))
    with pytest.raises(Cancelled) as late:
        prepare(inputs, deadline=1.0)
    assert (late.value.exit_code, late.value.message) == (
        1,
        "failed to prepare: the run's deadline passed (1 s)",
    )
    assert "svc_slow" not in installed(layout) and not (layout.layers / "order.toml").exists()


def test_an_asyncio_service_cancels_one_build_and_goes_on(tmp_path: Path, http_server: FileServer) -> None:
    make_tgz(http_server.root / "fast.tgz", "svc/fast")
    make_tgz(http_server.root / "slow.tgz", "svc/slow", payload=os.urandom(3000))
    http_server.fail("slow.tgz", "trickle")
    _, fast = build(tmp_path / "fast", http_server.url("fast.tgz"))
    _, slow = build(tmp_path / "slow", http_server.url("slow.tgz"))

    async def service() -> tuple[str, str]:
        handle = Cancel()
        doomed = asyncio.create_task(asyncio.to_thread(prepare, slow, cancel=handle))
        fine = asyncio.create_task(asyncio.to_thread(prepare, fast))
        await asyncio.sleep(0.5)
        handle.set()
        try:
            await doomed
            outcome = "finished"
        except Cancelled as err:  # an ordinary exception: the loop and the other build go on
            outcome = err.message
        report = await fine
        return outcome, report.buildpacks[0].id

    assert asyncio.run(service()) == ("failed to prepare: cancelled", "svc/fast")


ERRORS = [
    errors_module.PreparerError("do it", "because"),
    errors_module.InvalidInputsError("resolve inputs", "a field"),
    errors_module.DescriptorError("parse project.toml", "line 2"),
    errors_module.with_fields(
        errors_module.DescriptorError("validate p.toml", "io.buildpacks.group[0].id: bad"),
        path="p.toml",
        key="io.buildpacks.group[0].id",
        line=4,
        column=1,
        problems=(errors_module.DescriptorError("validate p.toml", "another"),),
    ),
    errors_module.with_fields(
        errors_module.PolicyRefused("prepare", "not allowed"),
        entry="io.buildpacks.group[1]",
        rule="sources.allow",
        policy="policy.toml",
        line=2,
    ),
    errors_module.PlatformAPIError("verify platform API", "unsupported"),
    errors_module.BuildpackAPIError("verify buildpack API", "unsupported"),
    errors_module.BuilderError("read builder order", "missing"),
    errors_module.FetchError("download x", "HTTP 404 Not Found"),
    errors_module.with_fields(
        errors_module.FetchError("download y", "HTTP 503 Service Unavailable"),
        source="https://h/y.tgz",
        url="https://h/y.tgz",
        status=503,
        transient=True,
    ),
    errors_module.NotFoundError("pull r", "no manifest"),
    errors_module.with_fields(
        errors_module.SignatureRefused("fetch r@sha256:1", "not signed by a key the platform policy trusts"),
        entry="io.buildpacks.group[0]",
        image="r@sha256:1",
        digest="sha256:1",
        reason="other-digest",
        keys=("ab" * 32,),
        signed_digest="sha256:2",
        policy="policy.toml",
        line=3,
    ),
    errors_module.RunLimitReached("download x", "the run took longer than 3 s in all"),
    errors_module.FetchErrors(
        (errors_module.FetchError("download a", "x"), errors_module.NotFoundError("pull b", "y"))
    ),
    errors_module.Cancelled.by_signal(15),
    errors_module.Cancelled("cancelled"),
    errors_module.UnexpectedError("prepare", "boom"),
    errors_module.ApplyError("write order.toml", "disk full"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_every_error_pickles_to_an_equal_one(error: PreparerError) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert (again.message, again.exit_code, again.action, again.cause) == (
        error.message, error.exit_code, error.action, error.cause)  # fmt: skip
    assert again.__dict__.keys() == error.__dict__.keys()
    for name, value in error.__dict__.items():  # every field (the nested problems by their messages)
        got = getattr(again, name)
        assert (
            [str(e) for e in got] == [str(e) for e in value]
            if name in ("problems", "errors")
            else got == value
        )


def _fail_in_another_process(index: int) -> None:
    raise ERRORS[index]


def test_a_process_pool_hands_every_error_back() -> None:
    with concurrent.futures.ProcessPoolExecutor(2) as pool:
        futures = [pool.submit(_fail_in_another_process, i) for i in range(len(ERRORS))]
        for future, error in zip(futures, ERRORS, strict=True):
            got = future.exception(timeout=30)
            assert type(got) is type(error) and str(got) == str(error)
            assert getattr(got, "exit_code", None) == error.exit_code


def test_no_thread_or_run_is_left_after_many_runs(http_server: FileServer, tmp_path: Path) -> None:
    make_tgz(http_server.root / "a.tgz", "svc/a")
    make_tgz(http_server.root / "b.tgz", "svc/b")

    def sockets() -> int:
        return sum(os.readlink(f"/proc/self/fd/{fd}").startswith("socket:") for fd in os.listdir("/proc/self/fd")
                   if os.path.exists(f"/proc/self/fd/{fd}"))  # fmt: skip

    threads, open_sockets = threading.active_count(), sockets()
    for n in range(50):
        _, inputs = build(tmp_path / f"r{n}", http_server.url("a.tgz"), http_server.url("b.tgz"))
        prepare(inputs)
    time.sleep(0.2)
    assert threading.active_count() <= threads + 1, threading.enumerate()
    assert sockets() <= open_sockets + 2  # the test server's own may linger a moment
    assert interrupt._live == set()


def test_a_failed_warm_run_leaves_no_revalidation_behind(http_server: FileServer, tmp_path: Path) -> None:
    """A warm run sends its revalidations together before fetching; when an entry fails first, the requests no
    fetch took are shut down with the run: no thread and no socket of it is left in the caller's process."""
    make_tgz(http_server.root / "far-a.tgz", "svc/a")  # names of its own: the server answers them late
    make_tgz(http_server.root / "far-b.tgz", "svc/b")
    urls = [http_server.url("far-a.tgz"), http_server.url("far-b.tgz")]
    _, inputs = build(tmp_path / "cold", *urls)
    prepare(dataclasses.replace(inputs, download_cache=str(tmp_path / "cache")))  # both cached now
    http_server.latency = 5.0  # the origin stops answering in time
    (tmp_path / "bad.tgz").write_bytes(b"no tar archive " * 100)  # fails as it is fetched, beside the others
    _, inputs = build(tmp_path / "warm", str(tmp_path / "bad.tgz"), *urls)
    with pytest.raises(FetchError, match="not a tar archive"):
        prepare(dataclasses.replace(inputs, download_cache=str(tmp_path / "cache")))
    deadline = time.monotonic() + 2
    while any(t.name == "revalidate" for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [t.name for t in threading.enumerate() if t.name == "revalidate"] == []
    http_server.latency = 0.0


def test_each_run_reaches_servers_as_its_own_environment_says(
    http_server: FileServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Proxies come from Inputs.environ, never from the service's own environment (which points at nothing)."""
    make_tgz(http_server.root / "bp.tgz", "svc/proxied")
    dead = "http://127.0.0.1:9"
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "all_proxy"):
        monkeypatch.setenv(name, dead)
    monkeypatch.setenv("no_proxy", "")
    # The file server answers proxy requests too (GET http://host/path), and records them: it stands in for a proxy.
    proxied_url = "http://buildpacks.example/bp.tgz"
    _, inputs = build(tmp_path / "via-proxy", proxied_url)
    inputs = dataclasses.replace(inputs, environ={"http_proxy": f"http://127.0.0.1:{http_server.port}"})
    report = prepare(inputs)
    assert report.buildpacks[0].id == "svc/proxied" and http_server.proxied == ["/bp.tgz"]
    # Without a proxy in its environment, a run goes straight to the server, whatever the process says.
    _, direct = build(tmp_path / "direct", http_server.url("bp.tgz"))
    assert prepare(direct).buildpacks[0].id == "svc/proxied"
    assert http_server.proxied == ["/bp.tgz"]
    # no_proxy in the run's environment is honoured: the proxy (dead here) is not used for 127.0.0.1.
    _, bypass = build(tmp_path / "bypass", http_server.url("bp.tgz"))
    bypass = dataclasses.replace(bypass, environ={"http_proxy": dead, "no_proxy": "localhost,127.0.0.0/8"})
    assert prepare(bypass).buildpacks[0].id == "svc/proxied"


def test_a_plan_is_applied_only_to_the_inputs_it_was_made_from(tmp_path: Path) -> None:
    a_layout, a = build(tmp_path / "a")
    b_layout, b = build(tmp_path / "b")
    (a_layout.app / "drop.log").write_text("a's")
    (a_layout.app / "keep.txt").write_text("kept")
    (a_layout.app / "project.toml").write_text(HEAD + '[io.buildpacks]\nexclude = ["*.log"]\n')
    (b_layout.app / "drop.log").write_text("b's")
    plan = plan_run(a)
    with pytest.raises(PreparerError) as refused:
        run_plan(plan, b)
    assert refused.value.exit_code == 3 and "made for other inputs" in refused.value.message
    assert (b_layout.app / "drop.log").read_text() == "b's"  # nothing of A's plan touched B
    run_plan(plan)  # its own inputs
    assert not (a_layout.app / "drop.log").exists()


def test_the_callers_mistakes_and_exceptions_stay_the_callers(
    http_server: FileServer, tmp_path: Path
) -> None:
    with pytest.raises(TypeError, match=r"expected preparer\.Inputs, got str"):
        prepare("a/path")  # type: ignore[arg-type]
    make_tgz(http_server.root / "bp.tgz", "svc/cb", payload=os.urandom(3000))
    layout, inputs = build(tmp_path / "b", http_server.url("bp.tgz"))

    class Boom(Exception):
        pass

    def progress(event: Download) -> None:
        raise Boom(event.url)

    with pytest.raises(Boom):
        prepare(inputs, progress=progress)
    assert "svc_cb" not in installed(layout) and not list(layout.buildpacks.glob(".preparer-staging-*"))


def test_the_report_is_frozen_data_whose_dict_is_the_report_file(
    http_server: FileServer, tmp_path: Path
) -> None:
    import inspect

    import tomli

    from preparer import BuildpackRecord, EnvRecord, Report

    make_tgz(http_server.root / "bp.tgz", "svc/report")
    _, inputs = build(tmp_path / "b", http_server.url("bp.tgz"))
    inputs = dataclasses.replace(inputs, prepare_report=str(tmp_path / "report.toml"))
    report = prepare(inputs)
    assert tomli.loads((tmp_path / "report.toml").read_text()) == report.to_dict()
    assert report.to_dict()["buildpacks"] == [b.to_dict() for b in report.buildpacks]
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.dry_run = True  # type: ignore[misc]
    for record in (Report, BuildpackRecord, EnvRecord):
        doc = inspect.getdoc(record) or ""
        assert all(f"{f.name}:" in doc for f in dataclasses.fields(record)), record  # every field documented


def test_errors_carry_what_a_service_turns_into_a_response(http_server: FileServer, tmp_path: Path) -> None:
    from preparer import DescriptorError, FetchError, InvalidInputsError, PolicyRefused

    layout, inputs = build(tmp_path / "syntax")
    (layout.app / "project.toml").write_text('[_]\nschema-version = "0.2"\n[io.buildpacks]\ngroup = [\n')
    with pytest.raises(DescriptorError) as syntax:
        plan_run(inputs)
    assert (syntax.value.path, syntax.value.line, syntax.value.column) == (
        str(layout.app / "project.toml"),
        5,
        1,
    )
    assert syntax.value.__cause__ is not None  # the parser's own error, chained
    layout, inputs = build(tmp_path / "schema")
    (layout.app / "project.toml").write_text(HEAD + "[[io.buildpacks.group]]\nuri = 42\n")
    with pytest.raises(DescriptorError) as schema:
        plan_run(inputs)
    line = (HEAD + "[[io.buildpacks.group]]\n").count("\n") + 1
    assert (schema.value.key, schema.value.line, schema.value.column) == (
        "io.buildpacks.group[0].uri",
        line,
        1,
    )

    url = http_server.url("missing.tgz").replace("http://", "http://user:secret@") + "?token=x"
    _, inputs = build(tmp_path / "missing", url)
    with pytest.raises(FetchError) as missing:
        prepare(inputs)
    err = missing.value
    assert (err.status, err.transient, err.url) == (404, False, http_server.url("missing.tgz"))
    assert err.source is not None and "secret" not in err.source and "token" not in str(err.url)

    policy = tmp_path / "policy.toml"
    policy.write_text('[sources]\nallow = ["path"]\n')
    _, inputs = build(tmp_path / "refused", http_server.url("bp.tgz"))
    with pytest.raises(PolicyRefused) as refused:
        plan_run(dataclasses.replace(inputs, policy=str(policy)))
    assert (refused.value.entry, refused.value.rule, refused.value.line, refused.value.policy) == (
        "io.buildpacks.group[0]", "sources.allow", 2, str(policy))  # fmt: skip
    assert pickle.loads(pickle.dumps(refused.value)).rule == "sources.allow"

    with pytest.raises(InvalidInputsError) as bad:
        dataclasses.replace(inputs, http_timeout=0)
    assert bad.value.field == "http_timeout"


def test_progress_events_come_one_at_a_time_in_order_for_each_download(
    http_server: FileServer, tmp_path: Path
) -> None:
    for n in range(4):
        make_tgz(http_server.root / f"ev{n}.tgz", f"svc/ev{n}", payload=os.urandom(2_000_000))
    _, inputs = build(tmp_path / "ok", *(http_server.url(f"ev{n}.tgz") for n in range(4)))
    events: list[Download] = []
    inside, overlapped, threads = [0], [False], set()

    def progress(event: Download) -> None:
        inside[0] += 1
        overlapped[0] |= inside[0] > 1
        threads.add(threading.current_thread().name)
        time.sleep(0.002)  # long enough that two threads entering at once would meet here
        events.append(event)
        inside[0] -= 1

    prepare(inputs, progress=progress)
    assert not overlapped[0] and len(threads) > 1  # from several fetch threads, never two at once
    for n in range(4):
        url = http_server.url(f"ev{n}.tgz")
        mine = [e for e in events if e.url == url]
        assert mine[0].kind == "started" and mine[-1].kind == "finished", [e.kind for e in mine]
        assert {e.kind for e in mine[1:-1]} <= {"progress"}
        assert [e.done for e in mine] == sorted(e.done for e in mine) and mine[-1].done == mine[-1].total
        assert {(e.entry, e.source) for e in mine} == {(f"io.buildpacks.group[{n}]", url)}

    _, failing = build(tmp_path / "bad", http_server.url("missing.tgz"))
    events.clear()
    with pytest.raises(FetchError):
        prepare(failing, progress=progress)
    assert [(e.kind, e.entry, e.url) for e in events] == [
        ("failed", "io.buildpacks.group[0]", http_server.url("missing.tgz"))
    ]


def test_every_log_record_names_its_run(http_server: FileServer, tmp_path: Path) -> None:
    import logging

    make_tgz(http_server.root / "named.tgz", "svc/named", payload=os.urandom(3000))
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.DEBUG)
    logger = logging.getLogger("preparer")
    logger.addHandler(handler)
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        runs = {name: build(tmp_path / name, http_server.url("named.tgz"))[1] for name in ("a", "b")}
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda name: prepare(runs[name], run_id=f"build-{name}"), runs))
        prepare(build(tmp_path / "c")[1])  # no id given: one is made
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    by_run: dict[object, list[str]] = {}
    for record in records:
        by_run.setdefault(getattr(record, "run_id", "missing"), []).append(record.getMessage())
    assert {"build-a", "build-b"} <= set(by_run) and "missing" not in by_run and None not in by_run
    for name in ("a", "b"):
        assert any(str(tmp_path / name) in line for line in by_run[f"build-{name}"])
        assert not any(str(tmp_path / name) in line for run, lines in by_run.items() if run != f"build-{name}"
                       for line in lines)  # fmt: skip
    assert len(by_run) == 3


def test_a_logging_handler_that_raises_after_the_commit_leaves_the_run_committed(
    http_server: FileServer, tmp_path: Path
) -> None:
    """A service's own handler on the preparer's logger that fails on the lines said once the commit is whole (a
    full log disk, a closed socket) neither undoes the commit nor makes the run a failure."""
    import logging

    make_tgz(http_server.root / "bp.tgz", "svc/logged")
    layout, inputs = build(tmp_path / "b", http_server.url("bp.tgz"))

    class Failing(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("Wrote"):
                raise OSError("the log sink is gone")

    handler = Failing()
    logger = logging.getLogger("preparer")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        report = prepare(inputs)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert report.written[0] == str(layout.layers / "order.toml")
    assert 'id = "svc/logged"' in (layout.layers / "order.toml").read_text()
    assert "svc_logged" in installed(layout)
