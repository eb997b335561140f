"""Build telemetry (docs/telemetry.md): ``<layers>/tracing/lifecycle/prepare.jsonl`` as the real CLI writes it,
decoded with the OpenTelemetry protocol's own message types (``opentelemetry-proto``); a library caller's tracer
(the OpenTelemetry SDK's, exporting to memory); what a run not asked imports. Real HTTP server and registries on
127.0.0.1.
"""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf.json_format import Parse
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status, TracesData

from tests.buildpacks import make_tgz
from tests.golden import BUILDER, Layout
from tests.integration.test_fetch_http import serve
from tests.integration.test_fleet import new_pod
from tests.plugins.cli import Result, run_cli
from tests.plugins.http_server import FileServer
from tests.plugins.registry import PASSWORD, USER, Registry, build_package, push
from tests.plugins.signing import Key
from tests.projects import HEAD, group
from tests.signed import Rule, Scene

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


def trace_file(layout: Layout) -> Path:
    return layout.layers / "tracing" / "lifecycle" / "prepare.jsonl"


def camel_keys(node: Any) -> Iterator[str]:
    """Every field name of an OTLP/JSON document (attribute keys are values, not field names)."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            yield from camel_keys(value)
    elif isinstance(node, list):
        for item in node:
            yield from camel_keys(item)


def hex_to_base64(node: Any) -> None:
    """OTLP/JSON's ids are hex, protobuf's JSON mapping of ``bytes`` is base64: what an OTLP/JSON reader undoes."""
    if isinstance(node, dict):
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in node:
                assert re.fullmatch(r"[0-9a-f]+", node[key]), node[key]
                node[key] = base64.b64encode(bytes.fromhex(node[key])).decode()
        for value in node.values():
            hex_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            hex_to_base64(item)


def decoded(line: str) -> TracesData:
    """One line of the file as the OTLP message it must be: lowerCamelCase names, hex ids, 64-bit integers as
    strings, every field known to ``opentelemetry-proto``'s ``TracesData``."""
    document = json.loads(line)
    names = set(camel_keys(document))
    assert not {n for n in names if "_" in n}, names  # protobuf's original names would parse too
    for name in ("startTimeUnixNano", "endTimeUnixNano", "timeUnixNano", "intValue"):
        assert all(isinstance(v, str) for v in _values(document, name)), name
    hex_to_base64(document)
    parsed: TracesData = Parse(json.dumps(document), TracesData())  # unknown fields refused
    return parsed


def _values(node: Any, name: str) -> Iterator[Any]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == name:
                yield value
            yield from _values(value, name)
    elif isinstance(node, list):
        for item in node:
            yield from _values(item, name)


def spans_of(data: TracesData) -> list[Span]:
    return [span for rs in data.resource_spans for ss in rs.scope_spans for span in ss.spans]


def attrs(span: Span) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        assert kind is not None
        found[kv.key] = getattr(kv.value, kind)
    return found


def named(spans: list[Span], name: str) -> list[Span]:
    return [s for s in spans if s.name == name]


def check_tree(spans: list[Span], trace_id: str, parent: str | None) -> Span:
    """One trace, one root (a child of ``parent``), every other span a child of a span of the line, and each within
    its parent's time. Returns the root."""
    by_id = {s.span_id: s for s in spans}
    assert len(by_id) == len(spans)
    assert {s.trace_id.hex() for s in spans} == {trace_id}
    roots = [s for s in spans if s.parent_span_id not in by_id]
    assert len(roots) == 1
    root = roots[0]
    assert root.parent_span_id.hex() == (parent or "")
    for span in spans:
        assert len(span.span_id) == 8 and len(span.trace_id) == 16
        assert span.start_time_unix_nano <= span.end_time_unix_nano
        if span is not root:
            up = by_id[span.parent_span_id]
            assert up.start_time_unix_nano <= span.start_time_unix_nano <= span.end_time_unix_nano
            assert span.end_time_unix_nano <= up.end_time_unix_nano
    return root


def test_a_run_continues_the_platform_s_trace_and_appends_a_line_per_run(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer
) -> None:
    """Two archives over http: the cold run downloads them (tier origin, their bytes), the warm run is served by
    the download cache; each run appends one line, the first left as it was, every line of the platform's trace."""
    sizes = {}
    for name in ("acme/one", "acme/two"):
        path = make_tgz(http_server.root / f"tel-{name[5:]}.tgz", name, payload=os.urandom(3000))
        sizes[name] = path.stat().st_size
    project = group(http_server.url("tel-one.tgz"), http_server.url("tel-two.tgz"))
    before = time.time_ns()
    result = preparer(project=project, env={"CNB_OTEL_TRACEPARENT": TRACEPARENT})
    after = time.time_ns()
    assert result.code == 0, result.stderr
    path = trace_file(layout)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    first = path.read_text()
    assert first.count("\n") == 1 and first.endswith("\n")
    spans = spans_of(decoded(first))
    root = check_tree(spans, TRACE_ID, PARENT_ID)
    assert root.name == "prepare" and root.status.code == 0
    assert before <= root.start_time_unix_nano <= root.end_time_unix_nano <= after
    for step in ("cnb.read_inputs", "cnb.plan", "cnb.fetch", "cnb.extract", "cnb.check_fetched", "cnb.commit",
                 "cnb.target.check"):  # fmt: skip
        assert named(spans, step), step
    fetches = {attrs(s)["cnb.buildpack.id"]: attrs(s) for s in named(spans, "cnb.buildpack.fetch")}
    assert set(fetches) == {"acme/one", "acme/two"}
    by_id = {s.span_id: s for s in spans}
    waits = named(spans, "cnb.lock.wait")  # each download under the download cache's lock, a peer's wait
    assert waits and {by_id[w.parent_span_id].name for w in waits} <= {"cnb.buildpack.fetch", "cnb.extract"}
    for bp_id, said in fetches.items():
        assert said["cnb.buildpack.version"] == "1.0.0"
        assert said["cnb.source.kind"] == "http"
        assert said["cnb.fetch.tier"] == "origin"
        assert said["cnb.fetch.bytes"] == sizes[bp_id]
    data = json.loads(first)["resourceSpans"][0]
    assert {a["key"]: a["value"] for a in data["resource"]["attributes"]}["service.name"] == {
        "stringValue": "preparer"
    }
    assert data["scopeSpans"][0]["scope"]["name"] == "preparer"

    for bp in ("acme_one", "acme_two"):  # a warm run: the buildpacks installed again, from the download cache
        __import__("shutil").rmtree(layout.buildpacks / bp)
    assert preparer(project=project, env={"CNB_OTEL_TRACEPARENT": TRACEPARENT}).code == 0
    text = path.read_text()
    assert text.startswith(first) and text.count("\n") == 2
    warm = spans_of(decoded(text.splitlines()[1]))
    check_tree(warm, TRACE_ID, PARENT_ID)
    tiers = {attrs(s)["cnb.fetch.tier"] for s in named(warm, "cnb.buildpack.fetch")}
    assert tiers == {"download cache"}


def test_without_a_traceparent_the_flag_starts_a_trace_and_present_buildpacks_say_so(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    """``-telemetry`` alone: a new trace, its root without a parent; a buildpack the builder has is the tier
    ``present``."""
    result = preparer("-telemetry", project=HEAD + '[[io.buildpacks.group]]\nid = "examples/python"\n')
    assert result.code == 0, result.stderr
    lines = trace_file(layout).read_text().splitlines()
    assert len(lines) == 1
    spans = spans_of(decoded(lines[0]))
    root = spans[0]
    trace_id = root.trace_id.hex()
    assert trace_id != TRACE_ID and set(trace_id) != {"0"}
    check_tree(spans, trace_id, None)
    (present,) = named(spans, "cnb.buildpack.fetch")
    assert attrs(present)["cnb.fetch.tier"] == "present"
    assert attrs(present)["cnb.buildpack.id"] == "examples/python"


def test_the_environment_asks_and_a_malformed_traceparent_is_a_new_trace(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    result = preparer(project=HEAD, env={"CNB_PREPARER_TELEMETRY": "true", "CNB_OTEL_TRACEPARENT": "00-XYZ"})
    assert result.code == 0, result.stderr
    assert result.warnings == [
        "Warning: CNB_OTEL_TRACEPARENT is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>): a new trace"
    ]
    spans = spans_of(decoded(trace_file(layout).read_text()))
    check_tree(spans, spans[0].trace_id.hex(), None)


def test_a_run_not_asked_writes_none(preparer: Callable[..., Result], layout: Layout) -> None:
    assert preparer(project=HEAD).code == 0
    assert not (layout.layers / "tracing").exists()


def test_retries_and_their_causes_are_counted_on_the_buildpack_s_span(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer
) -> None:
    serve(http_server, "tel-retry.tgz", "acme/retry")
    http_server.fail("tel-retry.tgz", "500")
    result = preparer("-telemetry", "-download-cache", "", project=group(http_server.url("tel-retry.tgz")))
    assert result.code == 0, result.stderr
    spans = spans_of(decoded(trace_file(layout).read_text()))
    (fetch,) = named(spans, "cnb.buildpack.fetch")
    assert attrs(fetch)["cnb.fetch.retries"] == 1
    events = [e for s in spans for e in s.events if e.name == "cnb.retry"]
    assert len(events) == 1
    said = {kv.key: kv.value for kv in events[0].attributes}
    assert said["error.type"].string_value == "500"
    assert said["http.request.resend_count"].int_value == 1


def test_a_failed_run_s_spans_carry_the_error_and_the_exit_code(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer
) -> None:
    result = preparer("-telemetry", project=group(http_server.url("tel-missing.tgz")))
    assert result.code == 1
    spans = spans_of(decoded(trace_file(layout).read_text()))
    root = check_tree(spans, spans[0].trace_id.hex(), None)
    assert root.status.code == Status.STATUS_CODE_ERROR
    assert attrs(root)["process.exit.code"] == 1
    assert attrs(root)["error.type"] == root.status.message == "NotFoundError"
    (fetch,) = named(spans, "cnb.buildpack.fetch")
    assert fetch.status.code == Status.STATUS_CODE_ERROR
    assert attrs(fetch)["process.exit.code"] == 1
    assert "tel-missing" not in trace_file(layout).read_text()


def test_invalid_inputs_fail_with_exit_3_in_the_file(preparer: Callable[..., Result], layout: Layout) -> None:
    result = preparer("-telemetry", project=HEAD + "[[io.buildpacks.group]]\nversion = 3\n")
    assert result.code == 3
    (line,) = trace_file(layout).read_text().splitlines()
    root = check_tree(spans_of(decoded(line)), json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
                      ["traceId"], None)  # fmt: skip
    assert attrs(root)["process.exit.code"] == 3


@pytest.fixture
def private_image(tmp_path_factory: pytest.TempPathFactory, auth_registry: Registry) -> str:
    """A buildpackage in the authenticated registry, in a repository named unlike its buildpack."""
    work = tmp_path_factory.mktemp("tel-private")
    package = build_package(work, [("acme/private", "1.0.0", "")], ("acme/private", "1.0.0"))
    push(package.layout, "latest", auth_registry.ref("corp/secret-repo"), creds=(USER, PASSWORD))
    return auth_registry.ref("corp/secret-repo")


def test_no_line_names_a_url_host_image_repository_credential_path_or_env_value(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    http_server: FileServer,
    auth_registry: Registry,
    private_image: str,
) -> None:
    """A run with registry credentials, a URL with a query token, a private registry and a policy: its file
    names none of them, nor any path or value of its environment (buildpacks by id, sources by kind)."""
    serve(http_server, "tel-secret.tgz", "acme/secret")
    token_url = http_server.url("tel-secret.tgz") + "?token=t0k3n-value"
    policy = tmp_path / "policy.toml"
    policy.write_text('[sources]\nallow = ["http", "image"]\n')
    basic = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    env = {
        "CNB_REGISTRY_AUTH": json.dumps({auth_registry.host: f"Basic {basic}"}),
        "CNB_OTEL_TRACEPARENT": TRACEPARENT,
        "CNB_INSECURE_REGISTRIES": auth_registry.host,
    }
    result = preparer("-policy", str(policy), project=group(token_url, f"docker://{private_image}"), env=env)
    assert result.code == 0, result.stderr
    text = trace_file(layout).read_text()
    spans = spans_of(decoded(text))
    assert {attrs(s).get("cnb.source.kind") for s in named(spans, "cnb.buildpack.fetch")} == {"http", "image"}
    assert named(spans, "cnb.policy.enforce")
    host, port = auth_registry.host.split(":")
    forbidden = [
        "://", "docker:", "127.0.0.1", host, f":{port}", f":{http_server.port}", "corp/secret-repo",
        "secret-repo", "tel-secret", "t0k3n", "token", USER, PASSWORD, basic, str(tmp_path), "policy.toml",
        *env.values(), "/",
    ]  # fmt: skip
    for line in text.splitlines():
        for word in forbidden:
            # "/" is allowed only in buildpack ids (acme/private) and the ids of the fetched buildpacks
            checked = line.replace("acme/private", "").replace("acme/secret", "")
            assert word not in checked, word


def test_an_unwritable_directory_is_a_warning_never_a_failed_build(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    (layout.layers / "tracing").symlink_to(tmp_path)  # a link planted by the build user is not followed
    result = preparer("-telemetry", project=HEAD)
    assert result.code == 0, result.stderr
    said = f"{trace_file(layout)}: {layout.layers / 'tracing'} is a symbolic link (not followed)"
    assert result.warnings == [f"Warning: the run's telemetry is not written to {said}"]
    assert not (tmp_path / "lifecycle").exists()
    (layout.layers / "tracing").unlink()
    (layout.layers / "tracing").write_text("")
    result = preparer("-telemetry", project=HEAD)
    assert result.code == 0
    said = f"{trace_file(layout)}: {layout.layers / 'tracing'} is not a directory"
    assert result.warnings == [f"Warning: the run's telemetry is not written to {said}"]
    (layout.layers / "tracing").unlink()
    trace_file(layout).parent.mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("mine\n")
    trace_file(layout).symlink_to(outside)  # the file itself a link
    result = preparer("-telemetry", project=HEAD)
    assert result.code == 0
    assert len(result.warnings) == 1 and result.warnings[0].startswith(
        f"Warning: the run's telemetry is not written to {trace_file(layout)}: "
    )
    assert outside.read_text() == "mine\n"


def test_a_file_another_phase_made_is_appended_to_as_it_is(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    trace_file(layout).parent.mkdir(parents=True)
    trace_file(layout).write_text('{"resourceSpans":[]}\n')
    trace_file(layout).chmod(0o600)
    assert preparer("-telemetry", project=HEAD).code == 0
    lines = trace_file(layout).read_text().splitlines()
    assert lines[0] == '{"resourceSpans":[]}' and len(lines) == 2
    assert stat.S_IMODE(trace_file(layout).stat().st_mode) == 0o600


def test_a_dry_run_writes_none_and_says_where_a_run_would(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    result = preparer("-dry-run", "-telemetry", project=HEAD)
    assert result.code == 0, result.stderr
    assert f"  telemetry: would append to {trace_file(layout)} (a run writes it; a dry run does not)" in (
        result.stdout + result.stderr
    )
    assert not (layout.layers / "tracing").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving files to another user takes root")
def test_the_file_and_the_directories_made_are_the_build_user_s(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    assert preparer("-telemetry", "-uid", "1234", "-gid", "2345", project=HEAD).code == 0
    for path in (layout.layers / "tracing", layout.layers / "tracing" / "lifecycle", trace_file(layout)):
        info = path.stat()
        assert (info.st_uid, info.st_gid) == (1234, 2345), path


def test_a_library_caller_s_tracer_gets_the_spans_under_its_own_and_no_file(
    layout: Layout, http_server: FileServer, tmp_path: Path
) -> None:
    """The OpenTelemetry SDK's tracer, exporting to memory: the run's spans are children of the caller's span,
    in its trace, and nothing is written below ``<layers>``."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    from preparer import Inputs, prepare

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("service")
    serve(http_server, "tel-lib.tgz", "acme/lib")
    (layout.app / "project.toml").write_text(group(http_server.url("tel-lib.tgz")))
    inputs = Inputs(
        app_dir=layout.app, layers_dir=layout.layers, platform_dir=layout.platform,
        buildpacks_dir=layout.buildpacks, order_path=layout.order, download_cache=tmp_path / "cache",
        tracer=tracer, telemetry=True,
    )  # fmt: skip
    with tracer.start_as_current_span("build") as build:
        prepare(inputs)
    spans = {s.name: s for s in exporter.get_finished_spans()}
    root, fetching = spans["prepare"], spans["cnb.fetch"]
    assert root.parent is not None and root.context is not None and fetching.parent is not None
    assert root.parent.span_id == build.get_span_context().span_id
    assert fetching.parent.span_id == root.context.span_id
    said = spans["cnb.buildpack.fetch"].attributes or {}
    assert said["cnb.buildpack.id"] == "acme/lib"
    assert said["cnb.fetch.tier"] == "origin"
    assert {s.context.trace_id for s in exporter.get_finished_spans() if s.context} == {
        build.get_span_context().trace_id
    }
    assert not (layout.layers / "tracing").exists()

    (layout.app / "project.toml").write_text(group(http_server.url("tel-nope.tgz")))
    exporter.clear()
    with pytest.raises(Exception, match="404"):
        prepare(inputs)
    failed = {s.name: s for s in exporter.get_finished_spans()}["prepare"]
    assert failed.status.status_code == StatusCode.ERROR
    assert (failed.attributes or {})["process.exit.code"] == 1


RUN = """
import json, sys
from preparer import Inputs, prepare
inputs = Inputs(
    app_dir=sys.argv[1], layers_dir=sys.argv[2], platform_dir=sys.argv[3], buildpacks_dir=sys.argv[4],
    order_path=sys.argv[5], download_cache=None,
)
prepare(inputs)
print(json.dumps(sorted(m for m in sys.modules if m.startswith(("opentelemetry", "google", "preparer.telemetry.")))))
"""


def test_a_run_not_asked_imports_no_opentelemetry_nor_the_recorder(
    tmp_path: Path, http_server: FileServer
) -> None:
    layout = Layout(tmp_path / "build")
    __import__("shutil").copytree(BUILDER, layout.root / "cnb")
    layout.app.mkdir(parents=True)
    layout.layers.mkdir()
    serve(http_server, "tel-weight.tgz", "acme/weight")
    (layout.app / "project.toml").write_text(group(http_server.url("tel-weight.tgz")))
    args = [str(p) for p in (layout.app, layout.layers, layout.platform, layout.buildpacks, layout.order)]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", RUN, *args], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["preparer.telemetry.hooks"]


def test_a_signed_image_s_verification_is_a_span_of_its_fetch(
    scene: Scene, key: Key, registry: Registry
) -> None:
    image = scene.image()
    image.sign(key, "sig")
    policy = scene.policy(Rule([f"{registry.host}/signed/*"], keys=[key.public]))
    result = scene.run(policy, image.tagged, "-telemetry")
    assert result.code == 0, result.stderr
    text = trace_file(scene.layout).read_text()
    spans = spans_of(decoded(text))
    (verify,) = named(spans, "cnb.signature.verify")
    (fetch,) = named(spans, "cnb.buildpack.fetch")
    assert attrs(verify)["cnb.signature.count"] == 1 and attrs(fetch)["cnb.signature.count"] == 1
    up = {s.span_id: s for s in spans}
    while verify.parent_span_id != fetch.span_id:
        verify = up[verify.parent_span_id]
    for word in (registry.host, image.repository, key.fingerprint, str(scene.directory)):  # its digest may be
        assert word not in text, word


def test_the_fleet_is_the_tier_of_a_pod_it_served(
    tmp_path: Path, http_server: FileServer, registry: Registry
) -> None:
    serve(http_server, "tel-fleet.tgz", "acme/fleet")
    repo = f"{registry.host}/fleet/tel-{os.getpid()}-{time.time_ns()}"
    project = group(http_server.url("tel-fleet.tgz"))
    tiers = []
    for name in ("pod1", "pod2"):
        args, env = new_pod(tmp_path / name, project, "-download-cache-repo", repo, "-telemetry")
        assert run_cli(args, env).code == 0
        text = (tmp_path / name / "layers" / "tracing" / "lifecycle" / "prepare.jsonl").read_text()
        (fetch,) = named(spans_of(decoded(text)), "cnb.buildpack.fetch")
        tiers.append(attrs(fetch)["cnb.fetch.tier"])
        assert "fleet/tel-" not in text
    assert tiers == ["origin", "fleet"]
