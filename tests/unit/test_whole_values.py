"""A value is checked whole: Python's ``$`` also matches before a trailing newline, so a pattern anchored with it
let ``v1\\n`` pass for a tag, ``1.0.0\\n`` for a version and ``a/b\\n`` for a buildpack id, to fail later and further
from the user's mistake (a pull, a lookup in <buildpacks>). Each is refused where it is read; a tag is the
distribution spec's, ASCII as Go reads ``\\w``."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

from preparer.descriptor import parse_version
from preparer.errors import DescriptorError, InvalidInputsError
from preparer.fetch.locator import parse_locator
from preparer.fetch.oci.reference import parse_reference
from preparer.files.buildpack import check_id
from preparer.semver import semver_key
from tests.golden import Layout
from tests.plugins.cli import Result
from tests.projects import group

ROOT = Path(__file__).parents[2]
DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize(
    "reference",
    [
        "registry.example/repo:v1\n",
        "registry.example/repo:vé",  # a letter of another script: Go's \w is ASCII
        f"registry.example/repo@{DIGEST}\n",
        "registry.example/repo\n",
        "registry.example\n/repo:v1",
    ],
)
def test_an_image_reference_is_read_whole(reference: str) -> None:
    with pytest.raises(InvalidInputsError, match="failed to parse image reference"):
        parse_reference(reference)


@pytest.mark.parametrize(
    "uri", ["a/b\n", "a/b@1.0.0\n", "docker://registry.example/repo:v1\n", "urn:cnb:registry:a/b\n"]
)
def test_a_buildpack_uri_is_read_whole(uri: str) -> None:
    with pytest.raises(InvalidInputsError, match="failed to parse buildpack uri"):
        parse_locator(uri, Path("/nonexistent"), lambda _: False)


def test_ids_versions_and_schema_versions_are_read_whole() -> None:
    assert check_id("a/b") and not check_id("a/b\n")
    assert semver_key("1.0.0") is not None and semver_key("1.0.0\n") is None
    assert parse_version("0.2", "schema-version", "project.toml", "0.1, 0.2") == "0.2"
    with pytest.raises(DescriptorError, match="is not a version of the form"):
        parse_version("0.2\n", "schema-version", "project.toml", "0.1, 0.2")


def test_a_tag_with_a_newline_is_refused_before_anything_is_pulled(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    done = preparer(project=group("docker://registry.example/repo:v1\\n"))  # TOML's escape: a newline
    assert done.code == 3, done.stderr
    assert "'v1\\x0a' is not a valid tag" in done.stderr  # as the log shows a control character
    assert list(layout.layers.iterdir()) == [] and not layout.platform.exists()


def test_no_pattern_of_the_package_ends_at_dollar() -> None:
    """``\\Z`` (or ``fullmatch``) ends a value; ``$`` would let a trailing newline through."""
    found = []
    for path in sorted((ROOT / "preparer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
                continue
            if len(node.value) > 1 and node.value.endswith("$"):  # "$" alone is a shell's, in a message
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
