"""JSON from outside the signature path is bounded in what its parse builds, not only in its bytes (issue 48).

A document read within its byte bound can still build far more than its bytes: 4 MiB of ``{},{},...`` is 1.4 million
dictionaries (about 100 MiB), and a few thousand ``[`` end in a ``RecursionError``. The signature path was bounded
first; these are the rest of the fetch floor, each attacked as an outsider would, through the real CLI, the
preparer's peak RSS measured as its own ``ru_maxrss``: a token endpoint's answer, a ``.cnb``'s ``index.json`` and
labels, the buildpack registry's index file, a credential helper's answer; and a ``.cnb`` of many empty entries,
every header of which was kept.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from pathlib import Path

from tests.buildpacks import raw_header
from tests.golden import Layout
from tests.plugins.cli import Result, measured
from tests.plugins.http_server import FileServer
from tests.projects import group

MIB = 1 << 20
#: Measured before the fix (peak RSS, MiB): the token answer 138, the .cnb index 236, the registry index line 145,
#: the credential helper 133, the .cnb of 200,000 empty entries 139 (in 49 s); a label 5,000 deep was "an error the
#: preparer does not foresee". After: 29 to 42.
#: The peak the preparer may reach refusing each (before: 100 MiB more than its baseline, for each 4 MiB).
BUDGET_MIB = 64


def run_measured(
    layout: Layout, tmp_path: Path, project: str, env: dict[str, str] | None = None
) -> tuple[Result, float, float]:
    """The CLI on ``project``, measured (:func:`~tests.plugins.cli.measured`)."""
    (layout.app / "project.toml").write_text(project)
    return measured(layout, tmp_path, env=env)


def empty_objects(size: int, head: bytes = b"[", tail: bytes = b"]") -> bytes:
    """``head`` + ``{},{},...{}`` + ``tail``, ``size`` bytes in all."""
    count = (size - len(head) - len(tail) + 1) // 3
    return head + b"{}," * (count - 1) + b"{}" + tail


def last_error(result: Result) -> str:
    return result.stderr.strip().splitlines()[-1]


def test_a_token_answer_of_a_million_objects_is_refused_unparsed(
    layout: Layout, tmp_path: Path, http_server: FileServer
) -> None:
    realm = http_server.url("token")
    http_server.challenges["/v2/me/x/manifests/1"] = (
        f'Bearer realm="{realm}",service="s",scope="repository:me/x:pull"'
    )
    http_server.answers["/token"] = (200, "application/json", empty_objects(4 * MIB - 1024, b'{"x":[', b"]}"))
    registry = f"127.0.0.1:{http_server.port}"
    result, peak, _ = run_measured(layout, tmp_path, group(f"docker://{registry}/me/x:1"))
    print(f"peak RSS refusing a token answer of 1.4 million objects: {peak:.1f} MiB")
    assert result.code == 1, result.stderr
    assert last_error(result) == (
        f"ERROR: failed to authenticate to {registry}: the token endpoint's answer is not read: it holds 2795515 "
        "commas, objects and arrays, more than the 100000 a document read here may"
    )
    assert peak < BUDGET_MIB, peak


def layout_tar(path: Path, index: bytes, config: bytes | None = None) -> Path:
    """A ``.cnb`` (an OCI layout in a tar) whose ``index.json`` is ``index``, with ``config`` as a blob when given
    (an index naming a manifest naming it is the caller's)."""
    with tarfile.open(path, "w") as tar:
        files = {"oci-layout": b'{"imageLayoutVersion":"1.0.0"}', "index.json": index}
        if config is not None:
            files[f"blobs/sha256/{hashlib.sha256(config).hexdigest()}"] = config
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_a_cnb_index_of_a_million_objects_is_refused_unparsed(layout: Layout, tmp_path: Path) -> None:
    layout_tar(
        layout.app / "bp.cnb", empty_objects(4 * MIB - 1024, b'{"schemaVersion":2,"manifests":[', b"]}")
    )
    result, peak, _ = run_measured(layout, tmp_path, group("bp.cnb"))
    print(f"peak RSS refusing a .cnb index.json of 1.4 million objects: {peak:.1f} MiB")
    assert result.code == 1, result.stderr
    assert last_error(result) == (
        f"ERROR: failed to read {layout.app / 'bp.cnb'}: index.json is not read: it holds 2795500 commas, objects "
        "and arrays, more than the 100000 a document read here may"
    )
    assert peak < BUDGET_MIB, peak


def with_label(label: str) -> tuple[bytes, bytes]:
    """An index and the image config it leads to, whose layers label is ``label``."""
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []},
        "config": {"Labels": {
            "io.buildpacks.buildpack.layers": label,
            "io.buildpacks.buildpackage.metadata": '{"id":"me/bp","version":"1.0.0"}',
        }},
    }).encode()  # fmt: skip
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": f"sha256:{hashlib.sha256(config).hexdigest()}", "size": len(config)},
        "layers": [],
    }).encode()  # fmt: skip
    index = json.dumps({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": f"sha256:{hashlib.sha256(manifest).hexdigest()}", "size": len(manifest)}],
    }).encode()  # fmt: skip
    return index, config + b"\n" + manifest


def test_a_label_nested_five_thousand_deep_is_a_refusal_in_words(layout: Layout, tmp_path: Path) -> None:
    index, blobs = with_label("[" * 5000 + "]" * 5000)
    config, manifest = blobs.split(b"\n")
    path = layout_tar(layout.app / "bp.cnb", index, config)
    with tarfile.open(path, "a") as tar:
        info = tarfile.TarInfo(f"blobs/sha256/{hashlib.sha256(manifest).hexdigest()}")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
    result, _, _ = run_measured(layout, tmp_path, group("bp.cnb"))
    label = "label 'io.buildpacks.buildpack.layers'"
    why = "it is nested deeper than a document read here may be"
    assert (result.code, last_error(result)) == (
        1,
        f"ERROR: failed to read buildpackage {layout.app / 'bp.cnb'}: {label} is not read: {why}",
    )
    assert "Traceback" not in result.stderr and "RecursionError" not in result.stderr


def test_a_registry_index_line_of_a_million_objects_is_refused_unparsed(
    layout: Layout, tmp_path: Path, http_server: FileServer
) -> None:
    index_file = http_server.root / "index" / "me" / "ta" / "me_meta"
    index_file.parent.mkdir(parents=True)
    index_file.write_bytes(empty_objects(4 * MIB - 1024) + b"\n")
    env = {"CNB_BUILDPACK_REGISTRY_INDEX": http_server.url("index")}
    result, peak, _ = run_measured(layout, tmp_path, group("urn:cnb:registry:me/meta"), env)
    print(f"peak RSS refusing a registry index line of 1.4 million objects: {peak:.1f} MiB")
    assert result.code == 1, result.stderr
    assert last_error(result).endswith("line 1 of the index file is not an entry"), last_error(result)
    assert peak < BUDGET_MIB, peak


def test_a_credential_helpers_answer_of_a_million_objects_is_refused_unparsed(
    layout: Layout, tmp_path: Path, http_server: FileServer
) -> None:
    answer = tmp_path / "answer.json"
    answer.write_bytes(empty_objects(4 * MIB - 1024, b'{"Username":"u","Secret":"s","x":[', b"]}"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-testing"
    helper.write_text(f"#!/bin/sh\nread server\ncat {answer}\n")
    helper.chmod(0o755)
    config_dir = tmp_path / "docker-config"
    config_dir.mkdir()
    registry = f"127.0.0.1:{http_server.port}"
    (config_dir / "config.json").write_text(json.dumps({"credHelpers": {registry: "testing"}}))
    env = {"DOCKER_CONFIG": str(config_dir), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    result, peak, _ = run_measured(layout, tmp_path, group(f"docker://{registry}/me/x:1"), env)
    print(f"peak RSS refusing a credential helper's answer of 1.4 million objects: {peak:.1f} MiB")
    # Before, the answer was built whole (133 MiB) and its Username and Secret taken.
    assert (result.code, last_error(result)) == (
        1,
        "ERROR: failed to get credentials: credential helper docker-credential-testing gave an unreadable answer",
    )
    assert peak < BUDGET_MIB, peak


def test_a_cnb_of_many_empty_entries_is_refused_past_the_bound(layout: Layout, tmp_path: Path) -> None:
    """200,000 headers (100 MiB) were each kept: 122 MiB and 31 s before; the bound is 10,000 entries."""
    with open(layout.app / "many.cnb", "wb") as out:
        out.writelines(raw_header(b"blobs/sha256/%064d" % n) for n in range(200_000))
        out.write(bytes(1024))
    result, peak, took = run_measured(layout, tmp_path, group("many.cnb"))
    print(f"a .cnb of 200,000 empty entries: {peak:.1f} MiB, {took:.1f} s")
    assert (result.code, last_error(result)) == (
        1,
        f"ERROR: failed to read {layout.app / 'many.cnb'}: it holds more than 10000 entries, more than a layout has",
    )
    assert peak < BUDGET_MIB and took < 30, (peak, took)
