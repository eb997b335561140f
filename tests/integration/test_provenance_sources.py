"""``-provenance`` against the ways a buildpack is named and trusted (docs/provenance.md, "resolvedDependencies"):
registry credentials really used (htpasswd and a token endpoint), ``[[image.signed-by]]`` keys, every spelling of a
URL and of an image reference, the buildpack registry. Real CLI, the suite's HTTP server and registries; every
digest is recomputed here from the served bytes or the pushed manifest, and every ``uri`` is parsed as RFC 3986.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import tomllib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.buildpacks import make_tgz
from tests.golden import Layout
from tests.integration.test_bare_ids import index, packages  # noqa: F401 - fixtures
from tests.integration.test_fetch_oci import basic, private  # noqa: F401 - a fixture
from tests.integration.test_lock import fresh
from tests.integration.test_provenance import dependencies, project, validate
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.plugins.registry import PASSWORD, USER, HubProxy, Registry, TokenRegistry, build_package, push
from tests.plugins.signing import Key, make_key
from tests.signed import Form, Rule, Scene

#: RFC 3986 ``URI`` as far as a verifier reads one: a scheme, then only unreserved, reserved and ``%XX``.
RFC3986 = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-F]{2})*")


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_uri(uri: str) -> None:
    """``uri`` is an RFC 3986 URI with no user information and no query."""
    assert RFC3986.fullmatch(uri), uri
    parts = urlsplit(uri)
    assert parts.scheme == parts.scheme.lower() and parts.query == "", uri
    assert "@" not in parts.netloc, uri


def run_and_read(
    preparer: Callable[..., Result],
    tmp_path: Path,
    written: str,
    *flags: str,
    env: dict[str, str] | None = None,
) -> tuple[dict[str, Any], str, Result]:
    out, report = tmp_path / "provenance.json", tmp_path / "report.toml"
    result = preparer("-provenance", str(out), "-prepare-report", str(report), "-log-level", "debug", *flags,
                      project=written, env=env)  # fmt: skip
    assert result.code == 0, result.stderr
    text = out.read_text()
    statement = json.loads(text)
    validate(statement)
    for dependency in statement["predicate"]["buildDefinition"]["resolvedDependencies"]:
        if "uri" in dependency:
            check_uri(dependency["uri"])
    return statement, text + report.read_text() + result.stdout + result.stderr, result


def test_registry_credentials_are_used_and_never_written(
    preparer: Callable[..., Result],
    layout: Layout,
    tmp_path: Path,
    auth_registry: Registry,
    private: str,  # noqa: F811 - the fixture
) -> None:
    """An image only ``USER``/``PASSWORD`` may pull, given once as ``CNB_REGISTRY_AUTH`` and once in a
    ``DOCKER_CONFIG``: described by its digest, and neither the password nor the base64 of the pair is in the
    provenance, the report, or what the run printed (at debug level)."""
    manifest = subprocess.run(
        ["skopeo", "inspect", "--raw", "--tls-verify=false", "--creds", f"{USER}:{PASSWORD}", private],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    assert json.loads(manifest)["schemaVersion"] == 2  # the manifest as the registry serves it, hashed here
    expected = sha256(manifest)
    docker_config = tmp_path / "docker"
    docker_config.mkdir()
    pair = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    (docker_config / "config.json").write_text(json.dumps({"auths": {auth_registry.host: {"auth": pair}}}))
    envs = [
        {"CNB_REGISTRY_AUTH": json.dumps({auth_registry.host: basic(USER, PASSWORD)})},
        {"DOCKER_CONFIG": str(docker_config)},
    ]
    for env in envs:
        fresh(layout)
        statement, seen, _ = run_and_read(
            preparer,
            tmp_path,
            project(f'uri = "{private}"'),
            "-insecure-registry",
            auth_registry.host,
            env=env,
        )
        for secret in (PASSWORD, pair, base64.b64encode(PASSWORD.encode()).decode().rstrip("=")):
            assert secret not in seen
        [found] = [d for d in dependencies(statement).values() if d["name"] == "me/private@1.0.0"]
        assert found["uri"] == f"docker://{auth_registry.host}/me/private@sha256:{expected}"
        assert found["digest"] == {"sha256": expected}


def test_a_token_endpoint_s_tokens_are_never_written(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry,
    token_registry: TokenRegistry,
) -> None:  # fmt: skip
    work = tmp_path / "work"
    work.mkdir()
    package = build_package(work, [("me/tokened", "1.0.0", "")], ("me/tokened", "1.0.0"))
    digest = push(package.layout, "latest", registry.ref("me/tokened"))
    auth = json.dumps({token_registry.host: basic(USER, PASSWORD)})
    before = len(token_registry.tokens_issued)
    statement, seen, _ = run_and_read(
        preparer, tmp_path, project(f'uri = "docker://{token_registry.host}/me/tokened:latest"'),
        "-insecure-registry", token_registry.host, env={"CNB_REGISTRY_AUTH": auth},
    )  # fmt: skip
    issued = token_registry.tokens_issued[before:]
    assert issued  # the run really went through the token endpoint
    for secret in (*issued, PASSWORD, base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()):
        assert secret not in seen
    found = dependencies(statement)["me/tokened@1.0.0"]
    assert found["uri"] == f"docker://{token_registry.host}/me/tokened@{digest}"


@pytest.mark.parametrize("form", ["sig", "bundle"], ids=["tag scheme", "bundle"])
def test_keyed_signatures_are_described_as_the_report_says_them(
    preparer: Callable[..., Result], scene: Scene, tmp_path: Path, registry: Registry, form: Form
) -> None:
    key: Key = make_key(tmp_path / "keys")
    image = scene.image()
    digest = image.digest
    image.sign(key, form)
    pol = scene.policy(Rule([f"{registry.host}/signed/*"], keys=[key.public]))
    statement, _, _ = run_and_read(
        preparer, tmp_path, project(f'uri = "docker://{image.tagged}"'), "-policy", str(pol)
    )
    report = tomllib.loads((tmp_path / "report.toml").read_text())
    found = dependencies(statement)["acme/signed@1.0.0"]
    fmt = "cosign" if form == "sig" else "bundle"
    rule = "image.signed-by, line 3 of the policy"  # the rule it satisfied (the policy: by its sha256, below)
    assert found["annotations"]["signatures"] == [
        {"digest": digest, "format": fmt, "key": key.fingerprint, "rule": rule}
    ]
    said = [{k: v for k, v in s.items() if k not in ("entry", "image")} for s in report["signature"]]
    assert found["annotations"]["signatures"] == [s | {"rule": rule} for s in said]
    assert found["annotations"]["policy"]  # the rule that allowed it
    assert found["digest"] == {"sha256": digest.removeprefix("sha256:")}
    assert statement["predicate"]["buildDefinition"]["internalParameters"]["policy"] == {
        "sha256": sha256(pol.read_bytes())
    }


def test_every_spelling_of_a_url_gives_its_canonical_uri(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, http_server: FileServer
) -> None:
    """User information, a presigned query, an upper-case scheme and host, the default port, escapes of
    unreserved characters and dot segments are all gone from the ``uri``; the ``#sha256=`` pin stays."""
    name = f"sp~{uuid.uuid4().hex[:6]}.tgz"
    archive = make_tgz(http_server.root / name, "acme/spelled", "1.0.0")
    pin = sha256(archive.read_bytes())
    canonical = http_server.url(name)
    host = urlsplit(canonical).netloc
    written = (
        f"HTTP://User:Pa%40ss@{host.upper()}/x/../"
        f"{name.replace('~', '%7E')}?X-Amz-Signature=abc123&X-Amz-Credential=AKIA%2F#sha256={pin.upper()}"
    )
    statement, seen, _ = run_and_read(preparer, tmp_path, project(f'uri = "{written}"'))
    for secret in ("Pa%40ss", "Pa@ss", "abc123", "AKIA", "X-Amz", "User"):
        assert secret not in seen, secret
    found = dependencies(statement)["acme/spelled@1.0.0"]
    assert found["uri"] == f"{canonical}#sha256={pin}"
    assert found["digest"] == {"sha256": pin}
    assert found["annotations"]["pinned"] == f"sha256:{pin}"
    # What the app asked for stays as it was written, less its user information and query.
    external = statement["predicate"]["buildDefinition"]["externalParameters"]["buildpacks"]["group"][0]
    assert external["uri"] == f"HTTP://{host.upper()}/x/../{name.replace('~', '%7E')}#sha256={pin.upper()}"


def test_image_references_give_a_docker_uri_by_digest(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry, hub: HubProxy,
) -> None:  # fmt: skip
    """A registry with a port, written with ``docker://`` or without; Docker Hub's short names: the registry as
    Docker names it, the repository, the platform manifest's digest."""
    work = tmp_path / "work"
    work.mkdir()
    package = build_package(work, [("me/spelt", "1.0.0", "")], ("me/spelt", "1.0.0"))
    repository = f"spelt/{uuid.uuid4().hex[:8]}"
    digest = push(package.layout, "latest", registry.ref(repository))
    push(package.layout, "latest", registry.ref(f"library/{repository.replace('/', '-')}"))
    hub_env = hub.env()
    for written, expected in (
        (f"docker://{registry.host}/{repository}", f"docker://{registry.host}/{repository}@{digest}"),
        (f"{registry.host}/{repository}:latest", f"docker://{registry.host}/{repository}@{digest}"),
        (f"docker://{registry.host}/{repository}@{digest}", f"docker://{registry.host}/{repository}@{digest}"),
        (f"docker://{repository.replace('/', '-')}", f"docker://docker.io/library/{repository.replace('/', '-')}@{digest}"),
        (f"docker://docker.io/library/{repository.replace('/', '-')}:latest",
         f"docker://docker.io/library/{repository.replace('/', '-')}@{digest}"),
    ):  # fmt: skip
        fresh(layout)
        statement, _, _ = run_and_read(
            preparer, tmp_path, project(f'uri = "{written}"'), "-insecure-registry", "index.docker.io",
            env=hub_env,
        )  # fmt: skip
        found = dependencies(statement)["me/spelt@1.0.0"]
        assert found["uri"] == expected, written
        assert found["digest"] == {"sha256": digest.removeprefix("sha256:")}


def test_a_registry_id_is_its_urn_with_the_image_it_named(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path,
    index: tuple[str, ...],  # noqa: F811 - the fixture
    packages: dict[str, str],  # noqa: F811 - the fixture
) -> None:  # fmt: skip
    for written in ("urn:cnb:registry:me/regonly@2.0.0", "me/regonly"):
        fresh(layout)
        statement, _, _ = run_and_read(preparer, tmp_path, project(f'uri = "{written}"'), *index)
        found = dependencies(statement)["me/regonly@2.0.0"]
        assert found["uri"] == "urn:cnb:registry:me/regonly@2.0.0"
        image, _, digest = packages["regonly"].partition("@")
        assert found["digest"] == {"sha256": digest.removeprefix("sha256:")}
        assert found["annotations"]["image"] == f"docker://{image}@{digest}"
