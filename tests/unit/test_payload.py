"""Signed JSON is read as Go reads it, or refused where the two could differ (preparer/policy/payload.py)."""

from __future__ import annotations

import pytest

from preparer.policy.payload import MAX_DEPTH, PayloadProblem, read_json

DOC = b'{"critical": {"image": {"docker-manifest-digest": "sha256:' + b"a" * 64 + b'"}}}'


def test_a_plain_document_is_read() -> None:
    assert read_json(DOC)["critical"]["image"]["docker-manifest-digest"] == "sha256:" + "a" * 64


@pytest.mark.parametrize(
    ("data", "cause"),
    [
        (b"\xef\xbb\xbf" + DOC, "byte order mark"),
        (DOC.decode().encode("utf-16"), "UTF-16"),
        (DOC.decode().encode("utf-16-le"), "UTF-16"),
        (DOC.decode().encode("utf-32-be"), "UTF-16 or UTF-32"),
        (b'{"a": "\xff"}', "not UTF-8"),
        (b'{"a": "\\ud800"}', "lone surrogate"),
        (b'{"\\udc00": 1}', "lone surrogate"),
        (b'{"a": 1, "a": 2}', "given twice"),
        (
            b'{"critical": {"image": {"Docker-Manifest-Digest": "x", "docker-manifest-digest": "y"}}}',
            "only by case",
        ),
        ('{"k": 1, "\u212a": 2}'.encode(), "only by case"),  # the Kelvin sign folds to k, as in Go
        (b'{"a": NaN}', "NaN"),
        (b'{"a": -Infinity}', "-Infinity"),
        (b"[" * (MAX_DEPTH + 2) + b"]" * (MAX_DEPTH + 2), "nested deeper"),
        (b"[" * 100_000, "nested deeper"),
        (b"{", "not JSON"),
    ],
)
def test_an_ambiguous_document_is_refused(data: bytes, cause: str) -> None:
    with pytest.raises(PayloadProblem, match=cause):
        read_json(data)
