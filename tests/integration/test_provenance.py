"""``-provenance`` (docs/provenance.md): the in-toto Statement of SLSA Provenance v1 a run writes with its commit.

Every digest in it is checked against what was really installed: recomputed here from the bytes the suite's HTTP
server served, the manifests pushed to the suite's registry, the files the run wrote, and, for a tree, with the
shell command in-toto's spec gives for ``dirHash``. Real CLI in a subprocess, real servers on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import referencing

from preparer import Inputs, InvalidInputsError, prepare
from tests.buildpacks import make_dir, make_tgz
from tests.golden import Layout
from tests.integration.test_fetch_oci import basic
from tests.integration.test_fleet_pins import two_platforms
from tests.integration.test_lock import fresh
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.plugins.registry import PASSWORD, USER, Registry, build_package, to_cnb
from tests.projects import HEAD

SCHEMAS = Path(__file__).resolve().parent.parent / "data" / "provenance"


def validate(statement: dict[str, Any]) -> None:
    """``statement`` is an in-toto Statement v1 whose predicate is SLSA Provenance v1 (the schemas' README)."""
    loaded = {name: json.loads((SCHEMAS / name).read_text()) for name in ("statement-v1.schema.json",
                                                                            "slsa-provenance-v1.schema.json")}  # fmt: skip
    registry: referencing.Registry[Any] = referencing.Registry().with_resources(
        (schema["$id"], referencing.Resource.from_contents(schema)) for schema in loaded.values()
    )
    jsonschema.Draft202012Validator(loaded["statement-v1.schema.json"], registry=registry).validate(statement)
    provenance = loaded["slsa-provenance-v1.schema.json"]
    jsonschema.Draft202012Validator(provenance, registry=registry).validate(statement["predicate"])


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def find_dir_hash(root: Path) -> str:
    """in-toto's ``dirHash`` as its spec computes it by hand, in ``root``."""
    command = "find . -type f | cut -c3- | LC_ALL=C sort | xargs -r sha256sum | sha256sum | cut -f1 -d' '"
    return subprocess.run(
        ["sh", "-c", command], cwd=root, capture_output=True, text=True, check=True
    ).stdout.strip()


def dependencies(statement: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The resolved dependencies, by name."""
    return {d["name"]: d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]}


def cnb_manifest_digest(path: Path) -> str:
    """The digest of the image manifest a ``.cnb`` file's OCI layout names (its index.json's only entry)."""
    with tarfile.open(path) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        [entry] = json.load(member)["manifests"]
    return str(entry["digest"])


def project(*entries: str, env: str = "") -> str:
    body = "".join(f"[[io.buildpacks.group]]\n{e}\n" for e in entries)
    return HEAD + body + env


def test_every_buildpack_is_described_by_what_was_installed(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    http_server: FileServer,
    registry: Registry,
) -> None:
    """Seven kinds of source in one group, each described by the digest of the bytes the run installed, with no
    credential or query anywhere in the file."""
    archive = make_tgz(http_server.root / "prov-http.tgz", "acme/http", "1.0.0", payload=b"served bytes")
    secret_url = (
        http_server.url("prov-http.tgz").replace("127.0.0.1", "user:s3cr3t@127.0.0.1") + "?token=t0k3n"
    )
    index, amd = two_platforms(tmp_path, registry.ref("prov/multi", "multi"))
    local_dir = make_dir(layout.app / "bps" / "local", "acme/local", "2.0.0", payload=b"a local tree")
    local_tgz = make_tgz(layout.app / "bps" / "local.tgz", "acme/localtgz", "3.0.0")
    work = tmp_path / "cnb-work"
    work.mkdir()
    package = build_package(work, [("acme/cnb", "4.0.0", "")], ("acme/cnb", "4.0.0"))
    cnb = to_cnb(package.layout, "latest", layout.app / "bps" / "acme.cnb")
    script = "echo building\nexit 0"
    written = project(
        f'uri = "{secret_url}#sha256={sha256(archive.read_bytes())}"',
        f'uri = "docker://{registry.ref("prov/multi", "multi")}"',
        'uri = "urn:cnb:builder:examples/node@1.2.0"',
        'uri = "./bps/local"',
        'uri = "bps/local.tgz"',
        'uri = "bps/acme.cnb"',
        'id = "me/inline"\n[io.buildpacks.group.script]\napi = "0.10"\ninline = "echo building\\nexit 0"',
        env='[[io.buildpacks.build.env]]\nname = "JAVA_OPTS"\nvalue = "-Xmx1g"\n',
    )
    out = tmp_path / "out" / "provenance.json"
    auth = json.dumps({registry.host: basic(USER, PASSWORD)})  # credentials the run has, never shown
    result = preparer("-provenance", str(out), project=written, env={"CNB_REGISTRY_AUTH": auth})
    assert result.code == 0, result.stderr
    text = out.read_text()
    statement = json.loads(text)
    validate(statement)
    for secret in ("s3cr3t", "t0k3n", "token", PASSWORD, "user:", basic(USER, PASSWORD).split()[1]):
        assert secret not in text

    # The subjects: the files written, each by the sha256 of its bytes on disk.
    assert statement["subject"] == [
        {
            "name": "layers/order.toml",
            "digest": {"sha256": sha256((layout.layers / "order.toml").read_bytes())},
        },
        {"name": "platform/env/JAVA_OPTS", "digest": {"sha256": sha256(b"-Xmx1g")}},
    ]

    found = dependencies(statement)
    http = found["acme/http@1.0.0"]
    assert http["uri"] == f"{http_server.url('prov-http.tgz')}#sha256={sha256(archive.read_bytes())}"
    assert http["digest"] == {"sha256": sha256(archive.read_bytes())}
    assert http["annotations"]["pinned"] == f"sha256:{sha256(archive.read_bytes())}"

    image = found["acme/multi@1.0.0"]
    assert image["uri"] == f"docker://{registry.host}/prov/multi@{amd}"
    assert image["digest"] == {"sha256": amd.removeprefix("sha256:")}
    assert (image["annotations"]["index"], image["annotations"]["platform"]) == (index, "linux/amd64")

    builder = found["examples/node@1.2.0"]
    assert builder["uri"] == "urn:cnb:builder:examples/node@1.2.0"
    assert builder["digest"] == {"dirHash": find_dir_hash(layout.buildpacks / "examples_node" / "1.2.0")}

    local = found["acme/local@2.0.0"]
    assert "uri" not in local
    assert local["annotations"]["path"] == "bps/local"
    assert local["digest"] == {"dirHash": find_dir_hash(layout.buildpacks / "acme_local" / "2.0.0")}
    assert local["digest"] == {"dirHash": find_dir_hash(local_dir)}  # the tree installed is the one given

    assert found["acme/localtgz@3.0.0"]["digest"] == {"sha256": sha256(local_tgz.read_bytes())}
    assert found["acme/localtgz@3.0.0"]["annotations"]["path"] == "bps/local.tgz"
    assert found["acme/cnb@4.0.0"]["digest"] == {"sha256": sha256(cnb.read_bytes())}  # the file, as sha256sum
    assert found["acme/cnb@4.0.0"]["annotations"]["manifest"] == cnb_manifest_digest(
        cnb
    )  # the image it holds

    inline = found["me/inline@0.0.0"]
    assert inline["digest"] == {"sha256": sha256(script.encode())}
    assert "uri" not in inline

    # Named in the order's order, then the descriptor and the builder's order.toml.
    names = [d["name"] for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"]]
    assert names == [
        "acme/http@1.0.0", "acme/multi@1.0.0", "examples/node@1.2.0", "acme/local@2.0.0", "acme/localtgz@3.0.0",
        "acme/cnb@4.0.0", "me/inline@0.0.0", "project.toml", "order.toml",
    ]  # fmt: skip
    assert found["project.toml"]["digest"] == {"sha256": sha256((layout.app / "project.toml").read_bytes())}
    assert found["order.toml"]["digest"] == {"sha256": sha256(layout.order.read_bytes())}

    external = statement["predicate"]["buildDefinition"]["externalParameters"]
    assert external["descriptor"] == {
        "path": "project.toml",
        "sha256": sha256((layout.app / "project.toml").read_bytes()),
    }
    assert external["buildpacks"]["group"][0]["uri"] == (
        f"{http_server.url('prov-http.tgz')}#sha256={sha256(archive.read_bytes())}"
    )
    internal = statement["predicate"]["buildDefinition"]["internalParameters"]
    assert internal["execEnv"] == "production"
    assert (internal["target"]["platform"], internal["target"]["arch"]) == (
        "linux/amd64",
        "amd64",
    )  # as pulled
    assert statement["predicate"]["runDetails"]["builder"] == {
        "id": "urn:cnb:preparer",
        "version": {"preparer": "0.1.0"},
    }
    assert text.endswith("}\n")
    assert text == json.dumps(statement, sort_keys=True, indent=2) + "\n"


def test_a_builder_buildpack_of_thousands_of_files_is_hashed_whole(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    """A tree of the shape users have (thousands of small files, nested directories and one of a thousand): its
    ``dirHash`` is the spec's command's, and a file changed or added anywhere in it changes the digest."""
    tree = make_dir(layout.buildpacks / "acme_many" / "1.0.0", "acme/many")
    for i in range(2100):
        directory = tree / "vendor" / (f"pkg{i % 7}/lib" if i >= 1000 else "flat")
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"file{i:04}.rb").write_bytes(b"x" * (i % 300))
    out = tmp_path / "provenance.json"
    written = project('id = "acme/many"\nversion = "1.0.0"')
    digests = []
    for change in (None, "vendor/flat/file0999.rb", "vendor/pkg3/lib/new.rb"):
        if change is not None:
            (tree / change).write_bytes(b"changed")
        (layout.layers / "order.toml").unlink(missing_ok=True)  # the run installs nothing: the tree stays
        result = preparer("-provenance", str(out), project=written)
        assert result.code == 0, result.stderr
        [found] = [
            d for d in dependencies(json.loads(out.read_text())).values() if d["name"] == "acme/many@1.0.0"
        ]
        assert found["digest"] == {"dirHash": find_dir_hash(tree)}
        digests.append(found["digest"]["dirHash"])
    assert len(set(digests)) == 3


def test_two_runs_give_the_same_bytes_but_for_the_run_details_metadata(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, http_server: FileServer
) -> None:
    make_tgz(http_server.root / "prov-same.tgz", "acme/same", "1.0.0")
    written = project(f'uri = "{http_server.url("prov-same.tgz")}"')
    out = tmp_path / "provenance.json"
    runs = []
    for _ in range(2):
        fresh(layout)
        result = preparer("-provenance", str(out), "-log-level=debug", project=written)
        assert result.code == 0, result.stderr
        statement = json.loads(out.read_text())
        metadata = statement["predicate"]["runDetails"].pop("metadata")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", metadata["startedOn"])
        assert metadata["startedOn"] <= metadata["finishedOn"]
        assert re.fullmatch(r"[0-9a-f]{12}", metadata["invocationId"])
        runs.append((json.dumps(statement, sort_keys=True, indent=2) + "\n", metadata["invocationId"]))
    assert runs[0][0] == runs[1][0]
    assert runs[0][1] != runs[1][1]


def test_an_unwritable_path_is_exit_3_before_any_request(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, http_server: FileServer
) -> None:
    make_tgz(http_server.root / "prov-never.tgz", "acme/never", "1.0.0")
    written = project(f'uri = "{http_server.url("prov-never.tgz")}"')
    (tmp_path / "a-file").write_text("")
    result = preparer("-provenance", str(tmp_path / "a-file" / "provenance.json"), project=written)
    assert result.code == 3
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to resolve inputs: -provenance {tmp_path / 'a-file' / 'provenance.json'}: "
        f"{tmp_path / 'a-file'} is not a directory"
    )
    assert http_server.seen("prov-never.tgz") == []
    assert not (layout.layers / "order.toml").exists()


def test_the_same_path_as_the_report_is_refused_naming_both_flags(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    same = tmp_path / "out.json"
    result = preparer(
        "-provenance",
        str(same),
        "-prepare-report",
        str(same),
        project=project('uri = "urn:cnb:builder:examples/node"'),
    )
    assert result.code == 3
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to resolve inputs: -prepare-report and -provenance name the same file {same}: give each its own"
    )
    assert not (layout.layers / "order.toml").exists()
    assert not same.exists()  # not even the failed run's report: it would be taken for the other


@pytest.mark.parametrize("flag", ["-provenance", "-prepare-report"])
def test_an_output_over_a_file_the_run_reads_is_refused_and_the_file_kept(
    preparer: Callable[..., Result], layout: Layout, flag: str
) -> None:
    written = project('uri = "urn:cnb:builder:examples/node"')
    descriptor = layout.app / "project.toml"
    result = preparer(flag, str(descriptor), project=written)
    assert result.code == 3
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to resolve inputs: {flag} and -project-descriptor name the same file {descriptor}: "
        "give each its own"
    )
    assert descriptor.read_text() == written
    assert not (layout.layers / "order.toml").exists()


@pytest.mark.parametrize("flag", ["-provenance", "-prepare-report"])
def test_an_output_in_platform_env_is_refused(
    preparer: Callable[..., Result], layout: Layout, flag: str
) -> None:
    inside = layout.platform / "env" / "provenance.json"
    result = preparer(flag, str(inside), project=project('uri = "urn:cnb:builder:examples/node"'))
    assert result.code == 3
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to resolve inputs: {flag} {inside}: it is in <platform>/env, where the lifecycle reads "
        "every file as a build variable: give it a place outside"
    )
    assert not inside.exists()
    assert not (layout.layers / "order.toml").exists()


def test_an_existing_file_is_replaced_whole_and_a_failed_run_leaves_it(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    out = tmp_path / "provenance.json"
    out.write_text("old")
    os.link(out, tmp_path / "old-link")  # a replaced file is a new one: the old stays whole beside it
    assert (
        preparer("-provenance", str(out), project=project('uri = "urn:cnb:builder:examples/node"')).code == 0
    )
    assert (tmp_path / "old-link").read_text() == "old"
    replaced = out.read_text()
    validate(json.loads(replaced))
    failed = preparer("-provenance", str(out), project=project('uri = "urn:cnb:builder:examples/nope"'))
    assert failed.code == 1
    assert out.read_text() == replaced
    assert not list(tmp_path.glob(".provenance.json*"))  # no temporary file left beside it


def test_a_dry_run_writes_none(preparer: Callable[..., Result], layout: Layout, tmp_path: Path) -> None:
    out = tmp_path / "provenance.json"
    result = preparer(
        "-provenance", str(out), "-dry-run", project=project('uri = "urn:cnb:builder:examples/node"')
    )
    assert result.code == 0, result.stderr
    assert not out.exists()
    assert (
        f"  provenance: would write {out} (a run writes it; a dry run does not)" in result.stdout.splitlines()
    )


def test_a_relative_path_is_the_working_directory_s(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    (tmp_path / "cwd").mkdir()
    result = preparer(
        "-provenance",
        "prov.json",
        project=project('uri = "urn:cnb:builder:examples/node"'),
        cwd=tmp_path / "cwd",
        env={
            "PYTHONPATH": str(Path(__file__).resolve().parents[2])
        },  # this checkout's preparer, from any cwd
    )
    assert result.code == 0, result.stderr
    validate(json.loads((tmp_path / "cwd" / "prov.json").read_text()))


def test_the_builder_id_is_the_platform_s_and_an_absolute_uri(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    out = tmp_path / "provenance.json"
    written = project('uri = "urn:cnb:builder:examples/node"')
    env = {
        "CNB_PREPARER_PROVENANCE": str(out),
        "CNB_PREPARER_PROVENANCE_BUILDER_ID": "https://ci.example/builders/1",
    }
    assert preparer(project=written, env=env).code == 0
    assert (
        json.loads(out.read_text())["predicate"]["runDetails"]["builder"]["id"]
        == "https://ci.example/builders/1"
    )
    for wrong in ("ci.example/builders", "https://ci.example/a b", "https://ci.example/#frag"):
        fresh(layout)
        result = preparer(project=written, env=env | {"CNB_PREPARER_PROVENANCE_BUILDER_ID": wrong})
        assert result.code == 3
        assert result.stderr.splitlines()[-1] == (
            "ERROR: failed to resolve inputs: CNB_PREPARER_PROVENANCE_BUILDER_ID must be an absolute URI "
            f"(scheme:..., no spaces, no fragment), not {wrong!r}"
        )
        assert not (layout.layers / "order.toml").exists()


def test_a_lock_is_described_as_written_then_as_read(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, http_server: FileServer
) -> None:
    make_tgz(http_server.root / "prov-lock.tgz", "acme/locked", "1.0.0")
    written = project(f'uri = "{http_server.url("prov-lock.tgz")}"')
    lock, out = layout.app / "preparer.lock", tmp_path / "provenance.json"
    for action in ("written", "frozen"):
        fresh(layout)
        assert preparer("-lock", str(lock), "-provenance", str(out), project=written).code == 0
        frozen = json.loads(out.read_text())
        internal = frozen["predicate"]["buildDefinition"]["internalParameters"]
        assert internal["lock"] == {
            "action": action,
            "path": "preparer.lock",
            "sha256": sha256(lock.read_bytes()),
        }
    [dependency] = [
        d for d in frozen["predicate"]["buildDefinition"]["resolvedDependencies"] if "@" in d["name"]
    ]
    assert dependency["annotations"]["locked"] is True
    assert dependency["digest"] == {"sha256": sha256((http_server.root / "prov-lock.tgz").read_bytes())}


def test_project_metadata_is_a_subject_named_in_the_layers_or_by_its_file_name(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    out = tmp_path / "provenance.json"
    written = project('uri = "urn:cnb:builder:examples/node"').replace(HEAD, HEAD + 'version = "1.2.3"\n')
    assert preparer("-provenance", str(out), project=written).code == 0
    subjects = {s["name"]: s["digest"]["sha256"] for s in json.loads(out.read_text())["subject"]}
    inside = layout.layers / "project-metadata.toml"
    assert subjects["layers/project-metadata.toml"] == sha256(inside.read_bytes())
    fresh(layout)
    elsewhere = tmp_path / "meta" / "project-metadata.toml"
    result = preparer("-provenance", str(out), "-project-metadata", str(elsewhere), project=written)
    assert result.code == 0, result.stderr
    subjects = {s["name"]: s["digest"]["sha256"] for s in json.loads(out.read_text())["subject"]}
    assert subjects == {
        "layers/order.toml": sha256((layout.layers / "order.toml").read_bytes()),
        "project-metadata.toml": sha256(elsewhere.read_bytes()),
    }


def test_the_library_returns_the_statement_and_a_dry_run_none(layout: Layout, tmp_path: Path) -> None:
    (layout.app / "project.toml").write_text(project('uri = "urn:cnb:builder:examples/node"'))
    out = tmp_path / "provenance.json"
    inputs = Inputs(
        app_dir=layout.app, layers_dir=layout.layers, platform_dir=layout.platform, buildpacks_dir=layout.buildpacks,
        order_path=layout.order, download_cache=None, provenance=out,
    )  # fmt: skip
    report = prepare(inputs)
    assert report.provenance is not None
    assert report.provenance == json.loads(out.read_text())
    validate(report.provenance)
    out.unlink()
    dry = prepare(Inputs(**{**_fields(inputs), "dry_run": True}))
    assert dry.provenance is None and not out.exists()


def _fields(inputs: Inputs) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(inputs, f.name) for f in dataclasses.fields(inputs)}


def test_the_library_refuses_a_builder_id_that_is_not_an_absolute_uri(layout: Layout) -> None:
    with pytest.raises(InvalidInputsError) as raised:
        Inputs(
            app_dir=layout.app, layers_dir=layout.layers, platform_dir=layout.platform,
            buildpacks_dir=layout.buildpacks, order_path=layout.order, provenance_builder_id="preparer",
        )  # fmt: skip
    assert str(raised.value) == (
        "failed to resolve inputs: Inputs.provenance_builder_id must be an absolute URI (scheme:..., no spaces, no "
        "fragment), not 'preparer'"
    )


def test_a_flag_error_never_writes_its_report_over_the_descriptor(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    written = project('uri = "urn:cnb:builder:examples/node"')
    descriptor = layout.app / "project.toml"
    result = preparer("-prepare-report", str(descriptor), "-log-level", "loud", project=written)
    assert result.code == 3
    assert descriptor.read_text() == written


def test_trees_differing_only_in_a_link_are_told_apart(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    """in-toto's ``dirHash`` leaves links out: two installed trees whose ``bin/build`` links to different programs
    have the same one. The ``linkHash`` annotation tells them apart, computed as ``dirHash`` is, over ``find . -type
    l`` with each link's target text in place of a file's bytes (docs/provenance.md)."""
    tree = make_dir(layout.buildpacks / "acme_linked" / "1.0.0", "acme/linked")
    (tree / "bin" / "build").unlink()
    for program in ("safe", "evil"):
        (tree / "bin" / program).write_text(f"#!/bin/sh\necho {program}\n")
    out = tmp_path / "provenance.json"
    written = project('id = "acme/linked"\nversion = "1.0.0"')
    found = []
    for target in ("safe", "evil"):
        (tree / "bin" / "build").unlink(missing_ok=True)
        os.symlink(target, tree / "bin" / "build")
        (layout.layers / "order.toml").unlink(missing_ok=True)
        result = preparer("-provenance", str(out), project=written)
        assert result.code == 0, result.stderr
        [described] = [
            d for d in dependencies(json.loads(out.read_text())).values() if d["name"] == "acme/linked@1.0.0"
        ]
        assert described["annotations"]["linkHash"] == sha256(
            f"{sha256(target.encode())}  bin/build\n".encode()
        )
        found.append(described)
    assert found[0]["digest"] == found[1]["digest"] == {"dirHash": find_dir_hash(tree)}
    assert found[0]["annotations"]["linkHash"] != found[1]["annotations"]["linkHash"]


@pytest.mark.parametrize("flag", ["-provenance", "-prepare-report"])
@pytest.mark.parametrize("read", ["-system", "-analyzed", "-env-file", "-telemetry"])
def test_an_output_over_an_input_this_round_added_is_refused_and_the_file_kept(
    preparer: Callable[..., Result], layout: Layout, flag: str, read: str
) -> None:
    # system.toml, analyzed.toml (which the detector reads next), an env file and the telemetry file were written
    # over by the report or the provenance, exit 0.
    written = project('uri = "urn:cnb:builder:examples/node"')
    kept = {
        "-system": (
            '[system]\n[[system.pre.buildpacks]]\nid = "examples/npm"\nversion = "0.3.1"\n',
            "-system",
        ),
        "-analyzed": ('[run-image.target]\nos = "linux"\narch = "amd64"\n', "-analyzed"),
        "-env-file": ("A=1\n", "-env-file[0]"),
    }
    if read == "-telemetry":
        same = layout.layers / "tracing" / "lifecycle" / "prepare.jsonl"
        args, text, named = ["-telemetry"], None, "-telemetry"
    else:
        same = layout.root / "input.toml"
        text, named = kept[read]
        same.write_text(text)
        args = [read, str(same)]
    result = preparer(*args, flag, str(same), project=written)
    assert result.code == 3, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to resolve inputs: {flag} and {named} name the same file {same}: give each its own"
    )
    if text is not None:
        assert same.read_text() == text
    else:  # the failed run's spans, each line one of OTLP/JSON: no report, no provenance
        assert all(json.loads(line)["resourceSpans"] for line in same.read_text().splitlines())
    assert not (layout.layers / "order.toml").exists()
