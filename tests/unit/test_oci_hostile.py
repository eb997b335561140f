"""Documents from a registry, a .cnb file or the environment are not trusted: any shape ends in a domain error."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from preparer.errors import FetchError, InvalidInputsError
from preparer.fetch.base import FetchContext
from preparer.fetch.oci.auth import lookup
from preparer.fetch.oci.buildpackage import (
    LAYERS_LABEL,
    METADATA_LABEL,
    choose_platform,
    install_buildpackage,
)
from preparer.fetch.oci.client import kind_of
from preparer.fetch.oci.reference import parse_reference
from preparer.fetch.sink import Sink

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
KEYS = st.sampled_from(["manifests", "platform", "os", "architecture", "variant", "digest", "layers", "config",
                        "Labels", "rootfs", "diff_ids", "layerDiffID", "id", "version", "mediaType", "size"])  # fmt: skip
SHAPED = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8) | KEYS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=5),
    max_leaves=30,
)
OBJECTS = st.dictionaries(KEYS, SHAPED, max_size=5)
#: io.buildpacks.buildpack.layers-like: id -> version -> info, with anything at every level.
LAYERS = st.dictionaries(st.sampled_from(["a/b", "..", "a", ""]), st.dictionaries(
    st.sampled_from(["1.0.0", "..", "a/b", ""]), OBJECTS | SHAPED, max_size=2) | SHAPED, max_size=2)  # fmt: skip


@given(OBJECTS)
def test_any_index_gives_a_descriptor_or_a_fetch_error(index: dict[str, Any]) -> None:
    with contextlib.suppress(FetchError):
        assert isinstance(choose_platform(index, "linux/amd64", "x"), dict)


@given(OBJECTS)
def test_any_document_is_a_manifest_an_index_or_refused(doc: dict[str, Any]) -> None:
    with contextlib.suppress(ValueError):
        assert kind_of(doc) in ("manifest", "index")


def _never(digest: str, extract: Any) -> tuple[Path, dict[str, str]]:
    raise FetchError("read layer", digest)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=200)
@given(manifest=OBJECTS, labels=st.tuples(LAYERS | JSON, OBJECTS | JSON), rootfs=SHAPED)
def test_any_buildpackage_config_ends_in_a_fetch_error(
    tmp_path: Path, manifest: dict[str, Any], labels: tuple[Any, Any], rootfs: Any
) -> None:
    config = {
        "config": {"Labels": {LAYERS_LABEL: json.dumps(labels[0]), METADATA_LABEL: json.dumps(labels[1])}},
        "rootfs": rootfs,
    }
    ctx = FetchContext(Sink(tmp_path))
    with contextlib.suppress(FetchError):
        install_buildpackage(manifest, config, _never, source="x", digest=None, ctx=ctx)


@given(st.text(max_size=40))
def test_any_cnb_registry_auth_value(value: str) -> None:
    for raw in (value, json.dumps({"r.io": value}), json.dumps({"r.io": [value]})):
        with contextlib.suppress(FetchError):
            lookup("r.io", {"CNB_REGISTRY_AUTH": raw})


@given(st.text(max_size=60))
def test_any_reference_text(text: str) -> None:
    with contextlib.suppress(InvalidInputsError):
        parse_reference(text)


def test_a_package_of_twenty_thousand_buildpacks_is_matched_to_its_layers_in_linear_time(
    tmp_path: Path,
) -> None:
    """Each label entry looked its diff ID up in the config's list: 38 s for 20,000 (issue 48); now once each."""
    import time

    count = 20_000
    diff_ids = [f"sha256:{n:064x}" for n in range(count)]
    label = {f"me/b{n}": {"1.0.0": {"layerDiffID": diff_ids[n]}} for n in range(count)}
    config = {
        "config": {
            "Labels": {LAYERS_LABEL: json.dumps(label), METADATA_LABEL: '{"id":"me/b0","version":"1.0.0"}'}
        },
        "rootfs": {"diff_ids": diff_ids},
    }
    manifest = {"layers": [{"digest": f"sha256:{n:064x}", "size": 1} for n in range(count)]}
    start = time.monotonic()
    with contextlib.suppress(FetchError):
        install_buildpackage(
            manifest, config, _never, source="x", digest=None, ctx=FetchContext(Sink(tmp_path))
        )
    assert time.monotonic() - start < 15
