"""A registry's refusals in the registry's own words, and where credentials were looked for (issue: messages).

The registries are real: Debian's docker-registry with htpasswd auth, and the test file server standing in for a
registry that limits pulls as Docker Hub does (the registry cannot be made to answer 429).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from tests.plugins.cli import Result
from tests.plugins.http_server import RATE_LIMITED, FileServer
from tests.plugins.registry import Registry
from tests.projects import group


def test_a_rate_limit_carries_the_registrys_code_and_message(
    preparer: Callable[..., Result], http_server: FileServer
) -> None:
    http_server.fail("v2/lib/limited/manifests/1", "429")
    ref = f"127.0.0.1:{http_server.port}/lib/limited:1"
    result = preparer(project=group(f"docker://{ref}"))
    assert result.code == 1
    assert result.stderr == (
        f"ERROR: failed to pull {ref}: manifest '1': HTTP 429 Too Many Requests (TOOMANYREQUESTS: {RATE_LIMITED})\n"
    )  # not retried: the limit does not lift in a second


def test_an_anonymous_refusal_names_a_credential_helper_that_is_not_installed(
    preparer: Callable[..., Result], auth_registry: Registry, tmp_path: Path
) -> None:
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"credsStore": "desktop"}))
    result = preparer(project=group(f"docker://{auth_registry.ref('me/anything')}"),
                      env={"DOCKER_CONFIG": str(config)})  # fmt: skip
    assert result.code == 1
    assert result.stderr == (
        f"ERROR: failed to pull {auth_registry.host}/me/anything: unauthorized anonymously (UNAUTHORIZED: "
        f"authentication required): no credentials for {auth_registry.host}: {config / 'config.json'} names the "
        "credential helper docker-credential-desktop (credsStore), which is not installed\n"
    )


def test_malformed_credentials_say_where_the_json_breaks(
    preparer: Callable[..., Result], auth_registry: Registry, tmp_path: Path
) -> None:
    project = group(f"docker://{auth_registry.ref('me/anything')}")
    secret = '{"r.io": "Basic c2VjcmV0"'  # cut short: the parser's position, never the text
    broken = preparer(project=project, env={"CNB_REGISTRY_AUTH": secret})
    assert broken.code == 1
    assert broken.stderr == (
        "ERROR: failed to resolve keychain: failed to parse CNB_REGISTRY_AUTH value: not JSON: expecting ',' "
        "delimiter at line 1 column 26\n"
    )
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text('{\n  "auths": {\n    "r.io": {"auth": "c2VjcmV0"},\n  }\n}\n')
    result = preparer(project=project, env={"DOCKER_CONFIG": str(config)})
    assert result.code == 1
    assert result.stderr == (
        f"ERROR: failed to read docker config: {config / 'config.json'}: not JSON: expecting property name "
        "enclosed in double quotes at line 4 column 3\n"
    )
    assert "c2VjcmV0" not in broken.stderr + result.stderr
