"""Image reference normalisation and the credential lookup order."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from preparer.errors import FetchError, InvalidInputsError
from preparer.fetch.oci.auth import lookup, normalize
from preparer.fetch.oci.reference import Reference, is_loopback, parse_reference, scheme_for

DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("text", "ref", "api"),
    [
        ("busybox", Reference("index.docker.io", "library/busybox"), "registry-1.docker.io"),
        ("docker.io/cnbs/sample:1", Reference("index.docker.io", "cnbs/sample", "1"), "registry-1.docker.io"),
        ("index.docker.io/library/x@" + DIGEST, Reference("index.docker.io", "library/x", None, DIGEST),
         "registry-1.docker.io"),
        ("gcr.io/p/bp:v1", Reference("gcr.io", "p/bp", "v1"), "gcr.io"),
        ("localhost:5000/bp", Reference("localhost:5000", "bp"), "localhost:5000"),
        ("127.0.0.1:5000/a/b:t@" + DIGEST, Reference("127.0.0.1:5000", "a/b", "t", DIGEST), "127.0.0.1:5000"),
    ],
)  # fmt: skip
def test_parse_reference(text: str, ref: Reference, api: str) -> None:
    parsed = parse_reference(text)
    assert parsed == ref
    assert parsed.api_host == api


@pytest.mark.parametrize("text", ["UPPER/case", "a/b:t@sha256:short", "a/b:bad tag", "a//b"])
def test_bad_references_exit_3(text: str) -> None:
    with pytest.raises(InvalidInputsError):
        parse_reference(text)


def test_plain_http_only_for_loopback_and_insecure_registries() -> None:
    assert [is_loopback(h) for h in ("localhost:5000", "127.0.0.2", "[::1]:80", "10.0.0.1", "reg.io")] == [
        True, True, True, False, False,
    ]  # fmt: skip
    assert scheme_for("reg.internal:5000", ("reg.internal:5000",)) == "http"
    assert scheme_for("reg.io", ()) == "https"


def test_normalize_keys() -> None:
    assert normalize("https://index.docker.io/v1/") == "index.docker.io"
    assert normalize("docker.io") == "index.docker.io"
    assert normalize("http://Reg.IO:5000/v2/") == "reg.io:5000"


def test_cnb_registry_auth_comes_before_the_docker_config(tmp_path: Path) -> None:
    docker = tmp_path / ".docker"
    docker.mkdir()
    auth = base64.b64encode(b"u:p").decode()
    (docker / "config.json").write_text(
        json.dumps({"auths": {"https://index.docker.io/v1/": {"auth": auth}}})
    )
    env = {"HOME": str(tmp_path)}
    from_config = lookup("index.docker.io", env)
    assert from_config is not None and from_config.header == f"Basic {auth}"
    assert "u:p" not in repr(from_config) and auth not in repr(from_config)
    env["CNB_REGISTRY_AUTH"] = json.dumps({"docker.io": "Bearer tok"})
    assert lookup("index.docker.io", env) == from_config.__class__("CNB_REGISTRY_AUTH", header="Bearer tok")
    assert lookup("other.io", env) is None


@pytest.mark.parametrize(
    ("value", "message"),
    [("not json", "failed to parse CNB_REGISTRY_AUTH value"), ('{"r.io": "Digest x"}', "unknown auth type")],
)
def test_bad_cnb_registry_auth(value: str, message: str) -> None:
    with pytest.raises(FetchError) as info:
        lookup("r.io", {"CNB_REGISTRY_AUTH": value})
    assert message in str(info.value)


def test_docker_config_tokens(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {"auths": {"a.io": {"registrytoken": "rt-SECRET"}, "b.io": {"identitytoken": "it-SECRET"}}}
        )
    )
    env = {"DOCKER_CONFIG": str(tmp_path)}
    registry_token = lookup("a.io", env)
    assert registry_token is not None and registry_token.header == "Bearer rt-SECRET"
    identity = lookup("b.io", env)
    assert identity is not None and identity.identity_token == "it-SECRET" and identity.header is None
    assert "SECRET" not in repr(registry_token) + repr(identity)


def test_insecure_registry_spellings() -> None:
    assert scheme_for("reg.internal:5000", ("http://Reg.Internal:5000/",)) == "http"
    assert scheme_for("reg.internal:5000", ("reg.internal",)) == "http"
    assert scheme_for("other.internal:5000", ("reg.internal",)) == "https"
