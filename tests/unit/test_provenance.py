"""The pure parts of the provenance (docs/provenance.md): in-toto's ``dirHash``, the file's bytes, the builder id."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from preparer import InvalidInputsError
from preparer.errors import ApplyError
from preparer.flags import env_default
from preparer.inputs import resolve_inputs
from preparer.provenance import dir_hash, dumps_statement, statement, tree_hashes
from preparer.resolve import builder_id_problem


def small_tree(root: Path) -> Path:
    """``Z`` (empty), ``b.txt`` (``a\\n``), ``sub/A`` (``hello``), and a link that is not a regular file."""
    (root / "sub").mkdir(parents=True)
    (root / "Z").write_bytes(b"")
    (root / "b.txt").write_bytes(b"a\n")
    (root / "sub" / "A").write_bytes(b"hello")
    os.symlink("b.txt", root / "link")
    return root


def test_dir_hash_is_in_totos_worked_out_by_hand(tmp_path: Path) -> None:
    """The value ``find . -type f | cut -c3- | LC_ALL=C sort | xargs -r sha256sum | sha256sum`` printed in the tree
    (in-toto attestation spec, ``spec/v1/digest_set.md``). The lines it hashes, in C order (``Z`` before ``b``),
    hold the well-known digests of the empty string, ``a\\n`` and ``hello``; the link is left out."""
    summary = (
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  Z\n"
        "87428fc522803d31065e7bce3cf03fe475096631e5e07bbd7a0fde60c4cf25c7  b.txt\n"
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824  sub/A\n"
    )
    import hashlib

    assert hashlib.sha256(summary.encode()).hexdigest() == (
        "8fb27856efed55a144485843e6e4226ce1723ef6fc51a6f823a3d154144de9c7"
    )
    assert dir_hash(small_tree(tmp_path / "tree")) == (
        "8fb27856efed55a144485843e6e4226ce1723ef6fc51a6f823a3d154144de9c7"
    )


def test_dir_hash_changes_with_a_name_or_a_byte(tmp_path: Path) -> None:
    tree = small_tree(tmp_path / "tree")
    before = dir_hash(tree)
    (tree / "sub" / "A").write_bytes(b"hellO")
    assert dir_hash(tree) != before
    (tree / "sub" / "A").write_bytes(b"hello")
    assert dir_hash(tree) == before
    (tree / "sub" / "A").rename(tree / "sub" / "B")
    assert dir_hash(tree) != before


def test_dir_hash_of_a_tree_that_cannot_be_read_is_an_apply_error(tmp_path: Path) -> None:
    with pytest.raises(ApplyError) as raised:
        dir_hash(tmp_path / "missing")
    assert str(raised.value).startswith(f"failed to hash {tmp_path / 'missing'}: ")


def test_a_file_name_holding_a_newline_is_an_apply_error(tmp_path: Path) -> None:
    """in-toto's lines could not say where such a name ends: the tree is refused, naming the file."""
    tree = small_tree(tmp_path / "tree")
    (tree / "sub" / "two\nlines").write_bytes(b"")
    with pytest.raises(ApplyError) as raised:
        dir_hash(tree)
    assert str(raised.value) == f"failed to hash {tree}: a file's name holds a newline: 'sub/two\\nlines'"
    assert raised.value.exit_code == 1


def test_the_bytes_are_sorted_json_with_a_final_newline() -> None:
    doc = statement([("layers/order.toml", b"x")], {"b": 1, "a": [2]}, {}, [], "urn:cnb:preparer", {})
    data = dumps_statement(doc)
    assert data.endswith(b"}\n") and data.count(b"\n}\n") == 1
    assert data == (json.dumps(json.loads(data), sort_keys=True, indent=2) + "\n").encode()
    assert json.loads(data)["subject"] == [
        {
            "name": "layers/order.toml",
            "digest": {"sha256": "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"},
        }
    ]
    with pytest.raises(ValueError):  # no float, and no NaN, ever reaches the file
        dumps_statement({"x": float("nan")})


@pytest.mark.parametrize("given", ["urn:cnb:preparer", "https://ci.example/builders/v1", "urn:x:y?z=1"])
def test_an_absolute_uri_is_a_builder_id(given: str, tmp_path: Path) -> None:
    environ = {"CNB_PREPARER_PROVENANCE_BUILDER_ID": given}
    assert resolve_inputs({}, environ, tmp_path).provenance_builder_id == given


def test_the_default_builder_id_is_an_absolute_uri(tmp_path: Path) -> None:
    given = resolve_inputs({}, {}, tmp_path).provenance_builder_id  # taken as it is: it must pass the check
    assert builder_id_problem(given) is None
    assert given == env_default("CNB_PREPARER_PROVENANCE_BUILDER_ID")


@pytest.mark.parametrize(
    "name", ["CNB_PREPARER_HTTP_TIMEOUT", "CNB_PREPARER_DOWNLOAD_TIMEOUT", "CNB_PREPARER_RUN_TIMEOUT"]
)
def test_the_default_timeouts_are_positive_seconds(name: str, tmp_path: Path) -> None:
    given = env_default(name)  # taken as it is: it must be what the variable may say
    field = name.removeprefix("CNB_PREPARER_").lower()
    said = getattr(resolve_inputs({}, {name: given}, tmp_path), field)
    assert said == getattr(resolve_inputs({}, {}, tmp_path), field) == float(given) > 0


@pytest.mark.parametrize("given", ["preparer", "/builders/1", "https://x/#y", "https://x/a b", "1http://x"])
def test_anything_else_is_refused(given: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidInputsError) as raised:
        resolve_inputs({}, {"CNB_PREPARER_PROVENANCE_BUILDER_ID": given}, tmp_path)
    assert raised.value.exit_code == 3
    assert "CNB_PREPARER_PROVENANCE_BUILDER_ID must be an absolute URI" in str(raised.value)


def test_dir_hash_agrees_with_the_spec_s_command_on_an_awkward_tree(tmp_path: Path) -> None:
    """Files of the read buffer's size and one byte either side, a name that is not UTF-8, nested directories, a
    link to a directory (not entered) and a root reached through a link (followed, as the command's ``cd``)."""
    import subprocess

    tree = tmp_path / "tree"
    (tree / "a" / "b" / "c").mkdir(parents=True)
    for size in (0, 1, (1 << 16) - 1, 1 << 16, (1 << 16) + 1, 3 << 16):
        (tree / "a" / f"f{size}").write_bytes(os.urandom(size))
    (tree / "a" / "b" / "c" / "deep").write_bytes(b"deep")
    (tree / os.fsdecode(b"caf\xe9")).write_bytes(b"latin-1 name")
    os.symlink("a", tree / "linked-dir")
    os.symlink(tree, tmp_path / "root-link")
    command = "find . -type f | cut -c3- | LC_ALL=C sort | xargs -r sha256sum | sha256sum | cut -f1 -d' '"
    expected = subprocess.run(
        ["sh", "-c", command], cwd=tree, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert dir_hash(tree) == expected
    assert dir_hash(tmp_path / "root-link") == expected


def test_tree_hashes_sum_the_links_as_dir_hash_sums_the_files(tmp_path: Path) -> None:
    """The small tree's one link, ``link`` to ``b.txt``, hashed as a file holding ``b.txt``; a tree with no link has
    no ``linkHash``."""
    import hashlib

    tree = small_tree(tmp_path / "tree")
    target = hashlib.sha256(b"b.txt").hexdigest()
    files, links = tree_hashes(tree)
    assert files == dir_hash(tree)
    assert links == hashlib.sha256(f"{target}  link\n".encode()).hexdigest()
    (tree / "link").unlink()
    os.symlink("sub/A", tree / "link")
    assert tree_hashes(tree) == (
        files,
        hashlib.sha256(f"{hashlib.sha256(b'sub/A').hexdigest()}  link\n".encode()).hexdigest(),
    )
    (tree / "link").unlink()
    assert tree_hashes(tree) == (files, None)
