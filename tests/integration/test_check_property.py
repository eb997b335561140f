"""check_descriptor finds a problem exactly when planning refuses the descriptor: random descriptors that mix
valid and invalid uris, image references, registry URNs, ports, ids, versions, env names and patterns (and, now
and then, bytes that are not UTF-8 or nesting too deep), some with a platform file that overlays more of them,
each checked and planned on a real directory.

Planning (:func:`preparer.plan_run`) fetches nothing: it reads the files and ``<buildpacks>`` and decides every
entry as far as its text and the disk allow; downloads start only when a plan is run. No stub is needed, then:
the test only makes sure of it, by failing any connection or name lookup made while it plans.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path
from typing import Any
from unittest import mock

import tomli_w
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from preparer import DescriptorError, Inputs, InvalidInputsError, PreparerError, check_descriptor, plan_run
from tests.golden import BUILDER

PIN = "#sha256=" + "0" * 64
URIS = st.sampled_from(
    ["urn:cnb:builder:examples/node", "urn:cnb:builder:examples/node@~1", "urn:cnb:builder:", "urn:buildpack:a/b@",
     "urn:cnb:registry:", "urn:cnb:registry:ns/name@1.0.0", "urn:cnb:registry:NS/x", "urn:cnb:registry:ns/n@",
     "https://example.com/bp.tgz", "https://example.com:8443/bp.tgz" + PIN, "https://example.com:99999/bp.tgz",
     "https://example.com:0/bp.tgz", "http://[::1", "https://h/x.tgz#md5=00", "https://u:p@h/x.tgz?token=1",
     "https://ex ample.com/x", "ftp://example.com/bp.tgz", "file://remote/x", "file:///bp.tgz", "docker://",
     "docker://registry.example.com:5000/bp:1", "docker://Bad/Ref", "docker://h.example:99999/x",
     "docker://h.example/x@sha256:00", "docker://a..b/x", "docker://h.example/x:" + "t" * 200, "heroku/python",
     "heroku/python@1.0.0", "heroku/python@1.x", "heroku/python@>=1", "Upper:tag", "ubuntu", "./bp", "bp.tgz",
     "", " ", "a b"]
)  # fmt: skip
IDS = st.sampled_from(["examples/node", "heroku/python", "a/b", "Not An Id", "", "a/../b", "x" * 300])
VERSIONS = st.sampled_from(["1.0.0", "1.2.0", "~1", "1.x", "^2", "../x", "latest", "", "1 0"])
ENTRIES = st.fixed_dictionaries(
    {}, optional={"id": IDS, "version": VERSIONS, "uri": URIS, "exec-env": st.sampled_from([["production"], ["test"], "x"])}
)  # fmt: skip
NAMES = st.sampled_from(["FOO", "A=B", "", "..", "CNB_X", "x.append", "a/b", "9LIVES", "NUL\x00"])
ENV = st.fixed_dictionaries({"name": NAMES, "value": st.sampled_from(["1", ""])})
PATTERNS = st.lists(
    st.sampled_from(
        ["src/", "*.log", "**/*.min.*.js", "*a*a*a*b", "/".join(["**"] * 5), "a" * 1100, "!keep"]
    ),
    max_size=3,
)
OPTIONAL = {
    "group": st.lists(ENTRIES, max_size=3),
    "pre": st.lists(ENTRIES, max_size=2),
    "env": st.lists(ENV, max_size=3),
    "include": PATTERNS,
    "exclude": PATTERNS,
}
PARTS = st.fixed_dictionaries({"schema": st.sampled_from(["0.1", "0.2", "0.3"])}, optional=OPTIONAL)
#: What is done to the text: nothing, a byte that is not UTF-8, or a value nested more than a run reads.
DAMAGE = st.sampled_from([None, None, None, "byte", "deep"])


def _document(parts: dict[str, Any]) -> dict[str, Any]:
    """A descriptor of the schema ``parts["schema"]`` holding the other parts, each where that schema reads it."""
    if parts["schema"] == "0.1":
        build: dict[str, Any] = {}
        for key, written in (
            ("group", "buildpacks"),
            ("env", "env"),
            ("include", "include"),
            ("exclude", "exclude"),
        ):
            if key in parts:
                build[written] = parts[key]
        if "pre" in parts:
            build["pre"] = {"buildpacks": parts["pre"]}
        return {"build": build} if build else {}
    table: dict[str, Any] = {k: parts[k] for k in ("group", "include", "exclude") if k in parts}
    if "pre" in parts:
        table["pre"] = {"group": parts["pre"]}
    if "env" in parts:
        table["build"] = {"env": parts["env"]}
    return {"_": {"schema-version": parts["schema"]}, "io": {"buildpacks": table}}  # fmt: skip


def _text(parts: dict[str, Any], damage: str | None) -> bytes:
    data = tomli_w.dumps(_document(parts)).encode()
    if damage == "byte":
        data = data.replace(b"\n", b"\n# caf\xe9\n", 1) if b"\n" in data else b"x = '\xff'\n"
    elif damage == "deep":
        data = b"deep = " + b"[" * 101 + b"]" * 101 + b"\n" + data
    return data


def _platform_text(parts: dict[str, Any] | None) -> bytes | None:
    """A platform file (``-platform-config``) whose ``[pack]`` table overlays ``parts`` as schema 0.2 reads them."""
    if parts is None:
        return None
    table = _document({**parts, "schema": "0.2"})["io"]["buildpacks"]
    return tomli_w.dumps({"pack": table}).encode()


def _offline(*_: object, **__: object) -> None:
    raise AssertionError("planning made a connection or looked a name up")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=PARTS, damage=DAMAGE, platform=st.one_of(st.none(), st.none(), PARTS))
def test_check_descriptor_finds_a_problem_exactly_when_planning_refuses(
    tmp_path: Path, parts: dict[str, Any], damage: str | None, platform: dict[str, Any] | None
) -> None:
    if not (tmp_path / "cnb").exists():
        shutil.copytree(BUILDER, tmp_path / "cnb")
    app = tmp_path / "app"
    shutil.rmtree(app, ignore_errors=True)
    app.mkdir()
    descriptor = app / "project.toml"
    data = _text(parts, damage)
    descriptor.write_bytes(data)
    pack, pack_data = tmp_path / "pack.toml", _platform_text(platform)
    overlay: dict[str, Any] = {}
    if pack_data is not None:
        pack.write_bytes(pack_data)
        overlay = {"platform_namespace": "io.buildpacks.pack", "platform_config": pack}
    inputs = Inputs(
        app_dir=app, layers_dir=tmp_path / "layers", platform_dir=tmp_path / "platform",
        buildpacks_dir=tmp_path / "cnb" / "buildpacks", order_path=tmp_path / "cnb" / "order.toml",
        exec_env="production", **overlay,
    )  # fmt: skip

    refused: InvalidInputsError | None = None
    with (
        mock.patch.object(socket.socket, "connect", _offline),
        mock.patch.object(socket, "getaddrinfo", _offline),
    ):
        try:
            plan_run(inputs)
        except InvalidInputsError as err:  # DescriptorError is one
            refused = err
        except PreparerError:
            pass  # what only <buildpacks> or the disk tells: an id not installed, a path that is not there
    from_file = check_descriptor(descriptor, **overlay)
    from_text = check_descriptor(
        text=data,
        platform_namespace=overlay.get("platform_namespace"),
        platform_config=None if pack_data is None else "pack.toml",
        platform_config_text=pack_data,
    )

    event("refused" if refused else "planned")  # both kinds come often (--hypothesis-show-statistics)
    assert (from_file == ()) == (refused is None), (data, refused, from_file)
    assert (from_text == ()) == (refused is None), (data, refused, from_text)
    if refused is None:
        return
    assert isinstance(refused, DescriptorError) and refused.path in (str(descriptor), str(pack))
    expected = [str(p) for p in (refused.problems or (refused,))]
    assert [str(p) for p in from_file] == expected
    named = [m.replace(str(descriptor), "project.toml").replace(str(pack), "pack.toml") for m in expected]
    assert [str(p) for p in from_text] == named
    for problems in (from_file, from_text):
        places = [(p.key, p.line, p.column) for p in problems]
        assert places == [(p.key, p.line, p.column) for p in (refused.problems or (refused,))]
        # Every problem has its place, but a file too large (never generated here).
        assert all(p.line is not None and p.column is not None for p in problems), places
