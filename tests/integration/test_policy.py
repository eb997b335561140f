"""The platform policy (docs/policy.md), with the real CLI, a real HTTP server and a real registry.

The examples of docs/policy.md are the policies under test, their hosts replaced by the test servers'. A refused
entry must leave the servers without a single request; images that must not be pulled are named on the HTTP
server's host, whose request log shows any ``/v2/`` request.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preparer import Inputs, PreparerError, prepare
from preparer.policy import load_policy
from tests.buildpacks import make_dir, make_tgz
from tests.golden import BUILDER, ROOT, Layout, env_files, listing
from tests.integration.test_fetch_http import serve
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.plugins.registry import Registry, build_package, push
from tests.plugins.signing import make_key
from tests.projects import HEAD, group

DOC = (ROOT / "docs" / "policy.md").read_text()
EXAMPLES = dict(re.findall(r"### (.+?)\n.*?```toml\n(.*?)```", DOC, re.DOTALL))


def example(
    title: str, tmp_path: Path, http: FileServer | None = None, registry: Registry | None = None
) -> Path:
    """The example policy ``title`` of docs/policy.md, its hosts replaced by the test servers'."""
    text = EXAMPLES[title]
    if registry is not None:
        text = text.replace("registry.paas.example", registry.host).replace(
            "registry.corp.example", registry.host
        )
    if http is not None:
        text = text.replace("https://artifacts.corp.example/", http.url(""))
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


def v2_requests(server: FileServer) -> list[str]:
    with server.lock:
        return [path for path, _, _ in server.requests if path.startswith("/v2")]


@pytest.fixture
def packaged(registry: Registry, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A buildpackage in the registry: its tag reference and its digest reference."""
    work = tmp_path_factory.mktemp("package")
    package = build_package(work, [("acme/packaged", "2.0.0", "")], ("acme/packaged", "2.0.0"))
    tag_ref = registry.ref("buildpacks/packaged", "2.0")
    digest = push(package.layout, "latest", tag_ref)
    return tag_ref, f"{registry.host}/buildpacks/packaged@{digest}"


def test_every_example_is_a_valid_policy(tmp_path: Path) -> None:
    assert list(EXAMPLES) == ["A public PaaS", "An enterprise CI", "A signed registry", "A laptop"]
    make_key(tmp_path / "keys", "corp-cosign")
    for title in EXAMPLES:
        load_policy(example(title, tmp_path))


# A public PaaS


def test_paas_allows_the_builder_and_pinned_images_of_its_registry(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    registry: Registry,
    packaged: tuple[str, str],
) -> None:
    policy = example("A public PaaS", tmp_path, registry=registry)
    _, pinned = packaged
    result = preparer(
        "-policy", str(policy), project=group("urn:cnb:builder:examples/node", f"docker://{pinned}")
    )
    assert result.code == 0, result.stderr
    assert "acme_packaged/2.0.0/" in listing(layout.buildpacks)


@pytest.mark.parametrize(
    ("uri", "rule"),
    [
        ("https://127.0.0.1:1/bp.tgz", "http sources are not allowed (sources.allow, line 3 of {policy})"),
        ("../elsewhere", "path sources are not allowed (sources.allow, line 3 of {policy})"),
        ("docker://{registry}/buildpacks/packaged:2.0",
         "it must be pinned with @sha256:<digest> (image.require-pin, line 7 of {policy})"),
        ("docker://{http}/other/bp@sha256:" + "a" * 64,
         "{http}/other/bp matches no pattern of image.allow, line 6 of {policy}"),
        ("someone/unknown", "registry sources are not allowed (sources.allow, line 3 of {policy})"),
    ],
    ids=["http", "path", "tag", "other registry", "bare id not installed"],
)  # fmt: skip
def test_paas_refuses_before_any_request(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    registry: Registry,
    http_server: FileServer,
    uri: str,
    rule: str,
) -> None:
    policy = example("A public PaaS", tmp_path, registry=registry)
    http_host = f"127.0.0.1:{http_server.port}"
    uri = uri.format(registry=registry.host, http=http_host)
    (layout.app.parent / "elsewhere").mkdir(parents=True, exist_ok=True)  # a path that exists
    result = preparer("-policy", str(policy), project=group("urn:cnb:builder:examples/node", uri))
    assert result.code == 3
    expected = rule.format(policy=policy, http=http_host)
    assert result.stderr == (
        f'ERROR: failed to prepare: io.buildpacks.group[1] (uri = "{uri}" as written) is not allowed by the '
        f"platform policy: {expected}\n"
    )
    assert http_server.requests == []
    assert not layout.layers.exists() or listing(layout.layers) == []


def test_paas_refuses_ld_preload_and_names_the_deny_rule(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry
) -> None:
    policy = example("A public PaaS", tmp_path, registry=registry)
    project = HEAD + '[[io.buildpacks.build.env]]\nname = "LD_PRELOAD"\nvalue = "/workspace/evil.so"\n'
    result = preparer("-policy", str(policy), project=project)
    assert result.code == 3
    assert result.stderr == (
        'ERROR: failed to prepare: io.buildpacks.build.env[0] (name = "LD_PRELOAD" as written) is not allowed by '
        f"the platform policy: it matches 'LD_*' of env.deny, line 18 of {policy}\n"
    )
    assert env_files(layout) == {}


# An enterprise CI


def test_ci_allows_pinned_artifacts_and_refuses_the_rest(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    http_server: FileServer,
    registry: Registry,
) -> None:
    policy = example("An enterprise CI", tmp_path, http=http_server, registry=registry)
    (http_server.root / "buildpacks").mkdir()
    sha = serve(http_server, "buildpacks/bp.tgz", "acme/bp")
    pinned = http_server.url(f"buildpacks/bp.tgz#sha256={sha}")
    assert preparer("-policy", str(policy), project=group(pinned)).code == 0
    assert "acme_bp/1.0.0/" in listing(layout.buildpacks)

    # Unpinned: refused, and since the cache knows the URL from the run above, the message says what to write.
    unpinned = http_server.url("buildpacks/bp.tgz")
    before = len(http_server.requests)
    result = preparer("-policy", str(policy), project=group(unpinned))
    assert result.code == 3
    assert result.stderr.endswith(
        f"it must be pinned with #sha256=<digest> (http.require-pin, line 7 of {policy}); the cached copy of this "
        f'URL is sha256:{sha}: write uri = "{unpinned}#sha256={sha}"\n'
    )
    serve(http_server, "elsewhere.tgz", "acme/elsewhere")
    other = http_server.url("elsewhere.tgz")
    result = preparer("-policy", str(policy), project=group(f"{other}#sha256={'0' * 64}"))
    assert result.code == 3
    assert f"{other} matches no pattern of http.allow, line 6 of {policy}" in result.stderr
    assert len(http_server.requests) == before


# A laptop: everything allowed, within limits.


def test_laptop_allows_everything_as_without_a_policy(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, http_server: FileServer
) -> None:
    policy = example("A laptop", tmp_path)
    serve(http_server, "bp.tgz", "acme/bp")
    make_dir(layout.app / "local-bp", "acme/local")
    project = group(http_server.url("bp.tgz"), "local-bp") + (
        '[[io.buildpacks.group]]\nid = "acme/inline"\n[io.buildpacks.group.script]\napi = "0.10"\ninline = "true"\n'
    )
    result = preparer("-policy", str(policy), project=project)
    assert result.code == 0, result.stderr
    with_policy = (layout.layers / "order.toml").read_text()
    (layout.layers / "order.toml").unlink()
    assert preparer(project=project).code == 0
    assert (layout.layers / "order.toml").read_text() == with_policy


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ("[limits.buildpack]\ndownload-bytes = \"1MiB\"\n",
         ("more than 1048576 bytes downloaded for this buildpack: the platform policy's limit "
         "(limits.buildpack.download-bytes, line 2 of {policy})")),
        ("[limits.buildpack]\nextract-bytes = 100000\n",
         ("more than 100000 bytes extracted for this buildpack: the platform policy's limit "
         "(limits.buildpack.extract-bytes, line 2 of {policy})")),
        ("[limits.buildpack]\nentries = 3\n",
         ("more than 3 entries written for this buildpack: the platform policy's limit "
         "(limits.buildpack.entries, line 2 of {policy})")),
        ("[limits.run]\ndownload-bytes = \"3MiB\"\n",
         ("more than 3145728 bytes downloaded for the run: the platform policy's limit "
         "(limits.run.download-bytes, line 2 of {policy})")),
    ],
    ids=["download", "extract", "entries", "run download"],
)  # fmt: skip
def test_limits_stop_the_fetch_and_leave_nothing(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    http_server: FileServer,
    limits: str,
    message: str,
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(limits)
    urls = []
    for n in range(2):
        # Random bytes: gzip cannot shrink them, so 2 MiB of payload is 2 MiB on the wire.
        make_tgz(http_server.root / f"big{n}.tgz", f"acme/big{n}", payload=__import__("os").urandom(2 << 20))
        urls.append(http_server.url(f"big{n}.tgz"))
    before = listing(layout.buildpacks)
    result = preparer("-policy", str(policy), "-download-cache", "", project=group(*urls))
    assert result.code == 1
    lines = result.stderr.splitlines()
    # Each buildpack past its own limit is named (both may be, before the second is called off); the run's limit
    # is said once.
    failures = (
        [line.removeprefix("  ") for line in lines[1:]] if len(lines) > 1 else [lines[0][len("ERROR: ") :]]
    )
    if len(lines) > 1:
        assert "run" not in limits and lines[0] == f"ERROR: failed to fetch {len(failures)} buildpacks:"
    for failure in failures:
        assert failure.startswith("failed to fetch http://127.0.0.1:")
        assert failure.endswith(message.format(policy=policy))
    assert listing(layout.buildpacks) == before  # nothing installed, no staging left
    assert not (layout.layers / "order.toml").exists()


# The policy file itself.


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('[http]\nalow = ["x"]\n', "http.alow (line 2 of {policy}): unknown key (did you mean allow? known here: allow, require-pin)"),
        ('[sources]\nallow = ["ftp"]\n', "sources.allow (line 2 of {policy}): unknown kind 'ftp'"),
        ("[limits.buildpack]\nentries = -1\n", "limits.buildpack.entries (line 2 of {policy}): must be a non-negative"),
        ('[limits.run]\ndownload-bytes = "lots"\n', "limits.run.download-bytes (line 2 of {policy}): must be a number of bytes"),
        ("[image]\nrequire-pin = 1\n", "image.require-pin (line 2 of {policy}): must be true or false"),
        ("[env\n", "Expected ']'"),
    ],
    ids=["unknown key", "unknown kind", "negative", "size", "bool", "not TOML"],
)  # fmt: skip
def test_a_malformed_policy_exits_3_naming_key_and_line(
    preparer: Callable[..., Result], tmp_path: Path, text: str, error: str
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text(text)
    result = preparer("-policy", str(policy), project=HEAD)
    assert result.code == 3
    assert result.stderr.startswith(f"ERROR: failed to read policy {policy}: ")
    assert error.format(policy=policy) in result.stderr


TOP = "known here: app, env, http, image, limits, sigstore, sources"
IMAGE = "known here: allow, no-match-policy, require-pin, signature-max-age, signed-by"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('no-match-policy = "deny"\n', f"no-match-policy (line 1 of {{policy}}): unknown key (did you mean image.no-match-policy? {TOP})"),
        ('[[signed-by]]\nimages = ["*"]\n', f"signed-by (line 1 of {{policy}}): unknown key (did you mean image.signed-by? {TOP})"),
        ('[image]\ntrusted-root = "root.json"\n', f"image.trusted-root (line 2 of {{policy}}): unknown key (did you mean sigstore.trusted-root? {IMAGE})"),
        ("[image.limits.run]\nentries = 3\n", f"image.limits (line 1 of {{policy}}): unknown key (did you mean limits? {IMAGE})"),
        ('[sources]\ndeny = ["http"]\n', "sources.deny (line 2 of {policy}): unknown key (known here: allow)"),
    ],
    ids=["a setting at the top", "rules at the top", "the root under image", "limits under image", "deny"],
)  # fmt: skip
def test_a_key_written_in_another_table_is_named_where_it_belongs(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, text: str, error: str
) -> None:
    """A key the policy reads, written in the wrong table (``no-match-policy`` at the top, ``trusted-root`` under
    ``[image]``), got "unknown key" and the table's keys, never where it belongs. ``allow``/``deny`` mean what
    their table says: ``sources.deny`` is not pointed at ``env.deny``."""
    policy = tmp_path / "policy.toml"
    policy.write_text(text)
    before = listing(layout.buildpacks)
    result = preparer("-policy", str(policy), project=HEAD)
    assert result.code == 3
    assert result.stderr.splitlines() == [
        f"ERROR: failed to read policy {policy}: {error.format(policy=policy)}"
    ]
    assert listing(layout.buildpacks) == before and not (layout.layers / "order.toml").exists()


def test_dry_run_and_report_show_each_decision(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry
) -> None:
    policy = example("A public PaaS", tmp_path, registry=registry)
    report = tmp_path / "report.toml"
    project = (
        group("urn:cnb:builder:examples/node")
        + '[[io.buildpacks.build.env]]\nname = "NODE_ENV"\nvalue = "x"\n'
    )
    result = preparer("-dry-run", "-policy", str(policy), "-prepare-report", str(report), project=project)
    assert result.code == 0, result.stderr
    assert (
        '  policy: io.buildpacks.group[0] (uri = "urn:cnb:builder:examples/node"): allowed: builder in '
        f"sources.allow, line 3 of {policy}\n"
    ) in result.stdout
    assert (
        '  policy: io.buildpacks.build.env[0] (name = "NODE_ENV"): allowed: nothing in the policy restricts it\n'
        in result.stdout
    )
    assert tomllib.loads(report.read_text())["policy"] == [
        {"entry": "io.buildpacks.group[0]", "source": 'uri = "urn:cnb:builder:examples/node"', "decision": "allowed",
         "rule": f"builder in sources.allow, line 3 of {policy}"},
        {"entry": "io.buildpacks.build.env[0]", "source": 'name = "NODE_ENV"', "decision": "allowed",
         "rule": "nothing in the policy restricts it"},
    ]  # fmt: skip


def test_include_exclude_can_be_forbidden(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    policy = tmp_path / "policy.toml"
    policy.write_text("[app]\ninclude-exclude = false\n")
    layout.app.mkdir(parents=True, exist_ok=True)
    (layout.app / "debug.log").write_text("x")
    result = preparer("-policy", str(policy), project=HEAD + '[io.buildpacks]\nexclude = ["*.log"]\n')
    assert result.code == 0
    assert result.stderr == (
        "Warning: io.buildpacks.exclude is not applied by the preparer: the platform policy does not allow "
        f"include/exclude (app.include-exclude, line 2 of {policy})\n"
    )
    assert (layout.app / "debug.log").exists()


def test_an_image_found_through_a_bare_id_is_checked_before_it_is_pulled(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, http_server: FileServer
) -> None:
    """A bare id that is not installed needs registry and image, and the image rules hold for Docker Hub."""
    policy = tmp_path / "policy.toml"
    policy.write_text('[image]\nallow = ["registry.example/*"]\n')
    result = preparer("-policy", str(policy), project=group("someone/unknown"))
    assert result.code == 3
    assert f"docker.io/someone/unknown matches no pattern of image.allow, line 2 of {policy}" in result.stderr


# A property: for random policies and descriptors, a refused source is never requested, and an allowed run is the
# run without a policy.

ENTRIES = ["ok-pinned", "ok-unpinned", "other-pinned", "other-unpinned", "builder", "inline", "path"]
KIND_SETS = [
    None,
    ("builder",),
    ("builder", "http"),
    ("http", "inline", "path"),
    ("builder", "path", "inline"),
]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    entries=st.lists(st.sampled_from(ENTRIES), min_size=1, max_size=4),
    kinds=st.sampled_from(KIND_SETS),
    allow=st.sampled_from([None, ("{base}ok/*",), ("{base}*",), ("https://nowhere.example/*",)]),
    pin=st.booleans(),
)
def test_a_refused_source_is_never_requested_and_an_allowed_run_is_unchanged(
    http_server: FileServer,
    tmp_path_factory: pytest.TempPathFactory,
    entries: list[str],
    kinds: tuple[str, ...] | None,
    allow: tuple[str, ...] | None,
    pin: bool,
) -> None:
    base = http_server.url("")
    shas = {}
    for where in ("ok", "other"):
        if not (http_server.root / where / "bp.tgz").exists():
            (http_server.root / where).mkdir(exist_ok=True)
            serve(http_server, f"{where}/bp.tgz", f"acme/{where}")
        shas[where] = hashlib.sha256((http_server.root / where / "bp.tgz").read_bytes()).hexdigest()
    uris = {
        "ok-pinned": f"{base}ok/bp.tgz#sha256={shas['ok']}", "ok-unpinned": f"{base}ok/bp.tgz",
        "other-pinned": f"{base}other/bp.tgz#sha256={shas['other']}", "other-unpinned": f"{base}other/bp.tgz",
        "builder": "urn:cnb:builder:examples/node", "path": "local-bp",
    }  # fmt: skip
    project = HEAD
    for entry in dict.fromkeys(entries):  # each source once: ids must not repeat in a group
        if entry == "inline":
            project += '[[io.buildpacks.group]]\nid = "acme/inline"\n[io.buildpacks.group.script]\napi = "0.10"\ninline = "true"\n'
        else:
            project += f'[[io.buildpacks.group]]\nuri = "{uris[entry]}"\n'
    policy_text = ""
    if kinds is not None:
        policy_text += "[sources]\nallow = [" + ", ".join(f'"{k}"' for k in kinds) + "]\n"
    policy_text += "[http]\n" + (f"require-pin = {'true' if pin else 'false'}\n")
    if allow is not None:
        policy_text += "allow = [" + ", ".join(f'"{p.format(base=base)}"' for p in allow) + "]\n"

    def run(with_policy: bool) -> tuple[int, bytes | None, list[str]]:
        root = tmp_path_factory.mktemp("run")
        layout = Layout(root)
        shutil.copytree(BUILDER, root / "cnb")
        make_dir(layout.app / "local-bp", "acme/local")
        (layout.app / "project.toml").write_text(project)
        policy = None
        if with_policy:
            policy = root / "policy.toml"
            policy.write_text(policy_text)
        with http_server.lock:
            before = len(http_server.requests)
        try:
            prepare(Inputs(app_dir=layout.app, layers_dir=layout.layers, platform_dir=layout.platform,
                           buildpacks_dir=layout.buildpacks, order_path=layout.order, policy=policy))  # fmt: skip
            code = 0
        except PreparerError as err:
            code = int(err.exit_code)
            if with_policy and "is not allowed by the platform policy" in err.message:
                code = -3  # refused by the policy
        with http_server.lock:
            requested = [path for path, _, _ in http_server.requests[before:]]
        order = (
            (layout.layers / "order.toml").read_bytes() if (layout.layers / "order.toml").exists() else None
        )
        return code, order, requested

    code, order, requested = run(with_policy=True)
    if code == -3:
        assert requested == []  # refused: nothing was asked of the server
        return
    # Allowed: exactly what a run without the policy does.
    assert (code, order) == run(with_policy=False)[:2]
    for path in requested:  # and never a URL the policy's patterns exclude
        assert allow is None or any(
            fnmatch.fnmatchcase(f"{base}{path.lstrip('/')}", p.format(base=base)) for p in allow
        )
