"""Which schema a project.toml uses, and how its keys are normalised and spelled back."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from preparer.config import effective_config, platform_layers
from preparer.descriptor import parse_descriptor
from preparer.errors import DescriptorError
from preparer.report import unapplied_message


def parse(text: str, namespace: str | None = None):  # type: ignore[no-untyped-def]
    return parse_descriptor(tomllib.loads(text), None, namespace)


@pytest.mark.parametrize(
    ("text", "schema", "warned"),
    [
        ('[_]\nschema-version = "0.1"\n[build]\nexclude=["a"]', "0.1", False),
        ('[_]\nschema-version = "0.2"', "0.2", False),
        ('[_]\nschema-version = "0.3"', "0.3", False),
        ('[io.buildpacks]\nschema-version = "0.3"', "0.3", False),
        ('[io.buildpacks]\nschema-version = "0.15"\n[io.buildpacks.defaults]\nexclude=["a"]', "0.15", False),
        ("[io.buildpacks]\nexclude = []", "0.2", True),
        ("[build]\nexclude = []", "0.1", True),
        ("", "0.1", False),
    ],
)
def test_schema_detection(text: str, schema: str, warned: bool) -> None:
    descriptor = parse(text)
    assert descriptor.schema_version == schema
    assert bool(descriptor.warnings) == warned


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[_]\nschema-version = "v0.2"', "is not a version of the form <major>.<minor>"),
        ('[_]\nschema-version = "0.2.0"', "is not a version of the form <major>.<minor>"),
        (
            '[_]\nschema-version = "1"',
            "schema-version '1' is not supported; supported versions: 0.1, 0.2, 0.3",
        ),
        ("[_]\nschema-version = 2", "_.schema-version must be a string, not an integer"),
        ('[io.buildpacks]\nschema-version = "0.6"', "io.buildpacks.schema-version '0.6' is not supported"),
        ('io = { buildpacks = "x" }', "io.buildpacks must be a table, not a string"),
    ],
)
def test_bad_schema_versions_exit_3(text: str, message: str) -> None:
    with pytest.raises(DescriptorError) as info:
        parse(text)
    assert info.value.exit_code == 3
    assert message in str(info.value)


def warnings_of(text: str, namespace: str | None = None) -> list[str]:
    descriptor = parse(text, namespace)
    layers, _ = platform_layers(descriptor, namespace)
    return [unapplied_message(u) for u in effective_config(descriptor, layers).unapplied]


def test_keys_are_spelled_as_written_in_each_schema() -> None:
    assert warnings_of('[build]\nbuilder = "x"\n[[build.buildpacks]]\nid = "a"\nfoo = 1') == [
        "build.buildpacks[0].foo is not applied by the preparer",
        "build.builder is not applied by the preparer",
    ]
    assert warnings_of('[_]\nschema-version = "0.2"\n[io.buildpacks]\nbuilder = "x"') == [
        "io.buildpacks.builder is not applied by the preparer"
    ]
    assert warnings_of(
        '[io.buildpacks]\nschema-version = "0.14"\n[io.buildpacks.defaults]\nbuilder = "x"'
    ) == ["io.buildpacks.defaults.builder is not applied by the preparer"]


def test_other_platforms_tables_are_not_ours() -> None:
    text = """
    [_]
    schema-version = "0.2"
    [io.buildpacks.kpack]
    schema-version = "0.1"
    builder = "k"
    [io.buildpacks.pack]
    builder = "p"
    [com.vmware.kpack]
    builder = "v"
    """
    assert warnings_of(text) == []
    assert warnings_of(text, "io.buildpacks.pack") == [
        "io.buildpacks.pack.builder is not applied by the preparer"
    ]


def test_legacy_env_build_is_read_alone_in_0_2() -> None:
    text = '[_]\nschema-version = "0.2"\n[[io.buildpacks.env.build]]\nname = "A"\nvalue = "1"\n'
    descriptor = parse(text)
    config = effective_config(descriptor)
    assert [(e.key, e.name) for e in config.env or ()] == [("io.buildpacks.env.build[0]", "A")]
    both = text + '[[io.buildpacks.build.env]]\nname = "B"\nvalue = "2"\n'
    assert warnings_of(both) == [
        "io.buildpacks.env.build is not applied by the preparer: [[io.buildpacks.build.env]] is set and takes its place"
    ]


def test_parsing_leaves_the_document_alone() -> None:
    doc = tomllib.loads('[_]\nschema-version = "0.2"\n[[io.buildpacks.env.build]]\nname = "A"\nvalue = "1"\n')
    parse_descriptor(doc)
    assert doc["io"]["buildpacks"]["env"]["build"][0]["name"] == "A"


def test_a_byte_order_mark_is_read_over_and_other_bytes_are_refused(tmp_path: Path) -> None:
    from preparer.files.toml import read_toml

    path = tmp_path / "project.toml"
    path.write_bytes(b'\xef\xbb\xbf[_]\nschema-version = "0.2"\n')
    read = read_toml(path, "project descriptor")
    assert read.table == {"_": {"schema-version": "0.2"}}
    assert read.places.text.startswith("[_]")
    path.write_bytes(b'[_]\nschema-version = "0.\xff"\n')
    with pytest.raises(DescriptorError, match="not UTF-8 text"):
        read_toml(path, "project descriptor")
