"""One canonical form of an image's name, for references and the policy's globs alike (docs/policy.md, "Matching").

Docker Hub's spellings are matched here, through a policy file read as the CLI reads it: nothing reaches Docker Hub
from these machines. The same attack against the suite's registry is in tests/integration/test_policy_references.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from preparer.errors import InvalidInputsError
from preparer.fetch.oci.reference import canonical_glob, parse_reference
from preparer.policy import load_policy
from preparer.policy.rules import check_image
from tests.plugins.signing import make_key

DIGEST = "sha256:" + "ab" * 32

#: Every spelling of one image, each with the ``name`` the policy matches.
SAME_IMAGE = {
    "docker.io/library/alpine": [
        "alpine", "alpine:3.20", "alpine@" + DIGEST, "docker.io/alpine", "docker.io/library/alpine",
        "index.docker.io/alpine", "index.docker.io/library/alpine:3", "registry-1.docker.io/alpine",
        "DOCKER.IO/alpine", "Index.Docker.IO/library/alpine", "REGISTRY-1.docker.io/library/alpine",
    ],
    "docker.io/corp/bp": ["corp/bp", "docker.io/corp/bp:1", "INDEX.docker.io/corp/bp", "registry-1.docker.io/corp/bp"],
    "registry.example/corp/bp": ["registry.example/corp/bp", "Registry.Example/corp/bp:v1", "REGISTRY.EXAMPLE/corp/bp"],
    "registry.example:5000/corp/bp": [
        "registry.example:5000/corp/bp", "registry.example:05000/corp/bp", "Registry.Example:0005000/corp/bp",
    ],
    "[::1]:5000/bp": ["[::1]:5000/bp", "[0:0:0:0:0:0:0:1]:05000/bp", "[0::0001]:5000/bp"],
    "127.0.0.1:5000/bp": ["127.0.0.1:5000/bp", "[::ffff:127.0.0.1]:5000/bp", "[::FFFF:7f00:1]:5000/bp"],
    # localhost in any case is a registry with or without a port (Docker's rule), never a Docker Hub path.
    "localhost/corp/bp": ["localhost/corp/bp", "LOCALHOST/corp/bp:1", "LocalHost/corp/bp@" + DIGEST],
}  # fmt: skip
LABELS = "letters, digits and '-' in labels separated by single dots"
SPELLINGS = [(name, ref) for name, refs in SAME_IMAGE.items() for ref in refs]


@pytest.mark.parametrize(("name", "ref"), SPELLINGS)
def test_every_spelling_of_an_image_has_one_name(name: str, ref: str) -> None:
    assert parse_reference(ref).name == name


def test_docker_hub_is_keyed_and_asked_as_before() -> None:
    """The name is what the policy sees; credentials and requests keep Docker Hub's own hosts."""
    ref = parse_reference("DOCKER.IO/alpine")
    assert (ref.registry, ref.api_host, str(ref)) == (
        "index.docker.io", "registry-1.docker.io", "index.docker.io/library/alpine:latest",
    )  # fmt: skip
    assert str(parse_reference("Registry.Example:05000/a/b")) == "registry.example:5000/a/b:latest"


@pytest.mark.parametrize(
    ("ref", "problem"),
    [
        # A zone is no part of Docker's grammar, and %eth0 / %25eth0 would be two names of one host.
        ("[fe80::1%eth0]:5000/bp", "'[fe80::1%eth0]:5000' names an IPv6 zone ('%...'): Docker's references have none; name the host"),
        ("[fe80::1%25eth0]/bp", "'[fe80::1%25eth0]' names an IPv6 zone ('%...'): Docker's references have none; name the host"),
        ("127.1:5000/bp", "'127.1:5000' is an IPv4 address written another way: write it as 127.0.0.1"),
        ("0x7f.0.0.1/bp", "'0x7f.0.0.1' is an IPv4 address written another way: write it as 127.0.0.1"),
        ("010.0.0.1/bp", "'010.0.0.1' is an IPv4 address written another way: write it as 8.0.0.1"),
        ("registry.example./bp", "'registry.example.' is not a registry host: " + LABELS),
        ("registry..example/bp", "'registry..example' is not a registry host: " + LABELS),
        ("-registry.example/bp", "'-registry.example' is not a registry host: " + LABELS),
        ("registry.example:0/bp", "the port of 'registry.example:0' is not a number from 1 to 65535"),
        ("registry.example:65536/bp", "the port of 'registry.example:65536' is not a number from 1 to 65535"),
        ("registry.example:+80/bp", "the port of 'registry.example:+80' is not a number from 1 to 65535"),
        ("registry.example:/bp", "'registry.example:' has an empty port"),
        ("[::1]x/bp", "'[::1]x' is not a registry host[:port]"),
        ("[::g]:5000/bp", "'::g' is not an IPv6 address"),
    ],
)  # fmt: skip
def test_a_registry_read_more_than_one_way_is_exit_3(ref: str, problem: str) -> None:
    with pytest.raises(InvalidInputsError) as caught:
        parse_reference(ref)
    assert str(caught.value) == f"failed to parse image reference '{ref}': {problem}"


@pytest.mark.parametrize(
    ("glob", "canonical"),
    [
        ("*", "*"),
        ("**", "**"),
        ("corp/*", "docker.io/corp/*"),
        ("alpine", "docker.io/library/alpine"),
        ("alp*", "docker.io/library/alp*"),
        ("docker.io/*", "docker.io/*"),
        ("docker.io/alpine", "docker.io/library/alpine"),
        ("INDEX.docker.io/x/*", "docker.io/x/*"),
        ("registry-1.docker.io/library/*", "docker.io/library/*"),
        ("Registry.Example/corp/*", "registry.example/corp/*"),
        ("127.0.0.1:05000/corp/*", "127.0.0.1:5000/corp/*"),
        ("[0::1]:05000/*", "[::1]:5000/*"),
        ("*/corp/*", "*/corp/*"),
        ("*.Corp.Example:0443/*", "*.corp.example:443/*"),
        ("localhost/bp-[0-9]", "localhost/bp-[0-9]"),
        ("LOCALHOST/corp/*", "localhost/corp/*"),
        ("LocalHost/bp", "localhost/bp"),
    ],
)
def test_a_glob_is_read_as_a_reference_is(glob: str, canonical: str) -> None:
    assert canonical_glob(glob) == canonical


def policy_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "glob", ["docker.io/library/*", "library/*", "INDEX.DOCKER.IO/library/alp*", "alpine"]
)
@pytest.mark.parametrize("ref", SAME_IMAGE["docker.io/library/alpine"])
def test_image_allow_matches_every_docker_hub_spelling(tmp_path: Path, glob: str, ref: str) -> None:
    policy = load_policy(policy_file(tmp_path, f'[image]\nallow = ["{glob}"]\n'))
    assert check_image(policy, parse_reference(ref).name, None) is None
    refused = check_image(policy, parse_reference("docker.io/other/alpine").name, None)
    assert refused is not None
    assert refused[1] == f"docker.io/other/alpine matches no pattern of image.allow, line 2 of {policy.path}"


@pytest.mark.parametrize(
    "glob", ["corp/*", "docker.io/corp/*", "index.docker.io/corp/*", "Registry-1.Docker.IO/corp/*"]
)
@pytest.mark.parametrize("ref", SAME_IMAGE["docker.io/corp/bp"])
def test_a_signature_rule_on_docker_hub_covers_every_spelling(tmp_path: Path, glob: str, ref: str) -> None:
    key = make_key(tmp_path / "keys")
    text = f'[[image.signed-by]]\nimages = ["{glob}"]\nkeys = {json.dumps([str(key.public)])}\n'
    policy = load_policy(policy_file(tmp_path, text))
    assert [rule.line for rule in policy.signed_by_rules(parse_reference(ref).name)] == [1]
    assert policy.signed_by_rules(parse_reference("registry.example/corp/bp").name) == ()


def test_the_default_images_of_a_signature_rule_cover_every_image(tmp_path: Path) -> None:
    key = make_key(tmp_path / "keys")
    policy = load_policy(
        policy_file(tmp_path, f"[[image.signed-by]]\nkeys = {json.dumps([str(key.public)])}\n")
    )
    for ref in ("alpine", "Registry.Example:05000/a/b", "[::1]/x"):
        assert len(policy.signed_by_rules(parse_reference(ref).name)) == 1


@pytest.mark.parametrize(
    ("glob", "problem"),
    [
        ("corp/bp:v1", "a tag (':v1') is never part of what is matched: name the repository"),
        ("alpine:*", "a tag (':v1') is never part of what is matched: name the repository"),
        ("*@sha256:*", "a digest ('@sha256:...') is never part of what is matched: name the repository"),
        ("registry.example/Corp/*", "repository names are lower case"),
        ("Corp/*", "repository names are lower case"),
        ("registry.example/", "it has an empty path component ('//', or a '/' at its start or end)"),
        ("/corp/*", "it has an empty path component ('//', or a '/' at its start or end)"),
        ("registry.example/corp//*", "it has an empty path component ('//', or a '/' at its start or end)"),
        ("registry.example/corp bp", "it holds a character no repository name has"),
        ("127.1:5000/*", "'127.1:5000' is an IPv4 address written another way: write it as 127.0.0.1"),
        # As a project writes its uri: the scheme is named ("'docker:' has an empty port" said nothing of it).
        ("docker://registry.example/*", "a scheme ('docker://') is never part of what is matched: write 'registry.example/*'"),
        ("https://ghcr.io/corp/*", "a scheme ('https://') is never part of what is matched: write 'ghcr.io/corp/*'"),
    ],
)  # fmt: skip
def test_a_glob_that_can_never_match_is_refused_when_the_policy_is_read(
    tmp_path: Path, glob: str, problem: str
) -> None:
    path = policy_file(tmp_path, f'# images\n[image]\nallow = ["registry.example/*", "{glob}"]\n')
    with pytest.raises(InvalidInputsError) as caught:
        load_policy(path)
    assert str(caught.value) == (
        f"failed to read policy {path}: image.allow (line 3 of {path}): '{glob}' can never match an image: {problem}"
    )
