"""Image references and the policy's image globs compared in one canonical form (docs/policy.md, "Matching").

The attack: the same registry named another way (its host in another case, its port with leading zeros, an
IPv4-mapped IPv6 address) reaches the same images, so a rule that compared references as written was escaped by
the other spelling. Real CLI and the suite's real registry; each spelling is first shown to reach the registry (a
signed or allowed image is installed through it), so a refusal is the policy's and not an unreachable host's.
Docker Hub's spellings cannot be fetched here (no network): tests/unit/test_image_names.py matches them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.plugins.registry import Registry
from tests.plugins.signing import Key
from tests.signed import Rule, Scene


def port(registry: Registry) -> str:
    return registry.host.rpartition(":")[2]


#: ``(the host the rule names, the host the project names)``, ``{port}`` the registry's: each pair is one registry.
SPELLINGS = [
    ("127.0.0.1:{port}", "127.0.0.1:0{port}"),
    ("127.0.0.1:{port}", "127.0.0.1:000{port}"),
    ("127.0.0.1:{port}", "[::ffff:127.0.0.1]:{port}"),
    ("localhost:{port}", "LocalHost:{port}"),
    ("localhost:{port}", "LOCALHOST:0{port}"),
    ("127.0.0.1:0{port}", "127.0.0.1:{port}"),  # the rule in another spelling
    ("LOCALHOST:{port}", "localhost:{port}"),
]
IDS = [f"rule {rule} ref {ref}" for rule, ref in SPELLINGS]


@pytest.mark.parametrize(("rule", "ref"), SPELLINGS, ids=IDS)
def test_a_signature_rule_cannot_be_escaped_by_another_spelling_of_its_registry(
    scene: Scene, registry: Registry, key: Key, rule: str, ref: str
) -> None:
    rule, ref = rule.format(port=port(registry)), ref.format(port=port(registry))
    pol = scene.policy(Rule([f"{rule}/corp/*"], keys=[key.public]))
    signed = scene.image(namespace="corp", buildpack="spelled")
    signed.sign(key, "sig")
    reached = scene.run(pol, f"{ref}/{signed.repository}")
    assert reached.code == 0, reached.stderr  # the spelling reaches the registry, and the rule applied to it
    assert scene.installed("spelled")

    unsigned = scene.image(namespace="corp", buildpack="unsigned")
    result = scene.run(pol, f"{ref}/{unsigned.repository}")
    assert result.code == 1, result.stderr
    assert (
        f"not signed by a key the platform policy trusts (image.signed-by, line 3 of {pol}): no signature found"
        in result.stderr
    )
    assert not scene.installed("unsigned")


@pytest.mark.parametrize(("rule", "ref"), SPELLINGS, ids=IDS)
def test_an_allow_rule_decides_every_spelling_of_its_registry_as_the_one_it_names(
    scene: Scene, tmp_path: Path, registry: Registry, rule: str, ref: str
) -> None:
    rule, ref = rule.format(port=port(registry)), ref.format(port=port(registry))
    pol = tmp_path / "policy.toml"
    pol.write_text(f'[image]\nallow = ["{rule}/corp/*"]\n')
    allowed = scene.image(namespace="corp", buildpack="spelled").repository
    result = scene.run(pol, f"{ref}/{allowed}")
    assert result.code == 0, result.stderr
    assert scene.installed("spelled")

    other = scene.image(namespace="other", buildpack="other").repository
    result = scene.run(pol, f"{ref}/{other}")
    assert result.code == 3
    canonical = ref.lower().replace(f":0{port(registry)}", f":{port(registry)}").replace(":000", ":")
    canonical = canonical.replace("[::ffff:127.0.0.1]", "127.0.0.1")
    assert f"{canonical}/{other} matches no pattern of image.allow, line 2 of {pol}" in result.stderr, (
        result.stderr
    )


@pytest.mark.parametrize("host", ["127.1", "0x7f.0.0.1", "0177.0.0.1", "2130706433"])
def test_an_address_written_another_way_is_refused_before_any_request(
    scene: Scene, registry: Registry, key: Key, host: str
) -> None:
    """A resolver reads these as 127.0.0.1: no rule could name them all, so they are not references at all."""
    pol = scene.policy(Rule([f"{registry.host}/corp/*"], keys=[key.public]))
    unsigned = scene.image(namespace="corp", buildpack="unsigned").repository
    ref = f"{host}:{port(registry)}/{unsigned}"
    result = scene.run(pol, ref)
    assert result.code == 3
    assert (
        f"'{host}:{port(registry)}' is an IPv4 address written another way: write it as 127.0.0.1"
        in result.stderr
    )
    assert not scene.installed("unsigned")


TAG = "a tag (':v1') is never part of what is matched: name the repository"
DIGEST = "a digest ('@sha256:...') is never part of what is matched: name the repository"
EMPTY = "it has an empty path component ('//', or a '/' at its start or end)"


@pytest.mark.parametrize(
    ("table", "glob", "problem"),
    [
        ("image", "registry.example/corp/bp:v1", TAG),
        ("image", "registry.example/corp/bp@sha256:" + "a" * 64, DIGEST),
        ("image", "registry.example/Corp/*", "repository names are lower case"),
        ("image", "registry.example//corp/*", EMPTY),
        ("image", "registry.example:0/corp/*", "the port of 'registry.example:0' is not a number from 1 to 65535"),
        ("signed-by", "corp/bp:latest", TAG),
        ("signed-by", "registry.example/corp/", EMPTY),
        ("signed-by", "docker://registry.example/corp/*",
         "a scheme ('docker://') is never part of what is matched: write 'registry.example/corp/*'"),
    ],
)  # fmt: skip
def test_a_glob_that_can_never_match_is_exit_3_naming_it_its_key_and_line(
    scene: Scene, tmp_path: Path, key: Key, table: str, glob: str, problem: str
) -> None:
    if table == "image":
        pol = tmp_path / "policy.toml"
        pol.write_text(f'[sources]\nallow = ["image"]\n\n[image]\nallow = ["registry.example/*", "{glob}"]\n')
        where = f"image.allow (line 5 of {pol})"
    else:
        pol = scene.policy(Rule(["registry.example/*", glob], keys=[key.public]))
        where = f"image.signed-by (line 3 of {pol}): images"
    result = scene.run(pol, "registry.example/corp/bp")
    assert result.code == 3
    assert result.stderr == (
        f"ERROR: failed to read policy {pol}: {where}: '{glob}' can never match an image: {problem}\n"
    )


@pytest.mark.parametrize("ref", ["LOCALHOST/other/bp", "LocalHost/other/bp:1"])
def test_localhost_in_another_case_without_a_port_is_the_registry_localhost(
    scene: Scene, tmp_path: Path, ref: str
) -> None:
    """``LOCALHOST:5000/x`` was the registry ``localhost:5000`` and ``LOCALHOST/x`` a Docker Hub path refused as
    "not a valid repository name", and a glob ``LOCALHOST/corp/*`` was refused as upper case in a repository:
    the host was read by its case. Now both are ``localhost``, as Docker reads them: the glob matches, and a
    reference it does not match is refused by the rule, in its canonical name, before any request."""
    pol = tmp_path / "policy.toml"
    pol.write_text('[image]\nallow = ["LOCALHOST/corp/*"]\n')
    result = scene.run(pol, ref)
    assert result.code == 3, result.stderr
    assert (
        f"the platform policy: localhost/other/bp matches no pattern of image.allow, line 2 of {pol}"
        in result.stderr
    ), result.stderr
    assert not (scene.layout.layers / "order.toml").exists()


@pytest.mark.parametrize(
    ("rule", "ref"),
    [
        ("registry.example/corp/*", "registry.example:443/corp/bp"),
        ("registry.example:443/corp/*", "registry.example/corp/bp"),
        ("*.example/corp/*", "registry.example:0443/corp/bp"),
    ],
)
def test_a_signature_rule_cannot_be_escaped_by_writing_the_https_default_port(
    scene: Scene, key: Key, rule: str, ref: str
) -> None:
    """``registry.example:443/corp/bp`` reaches the server ``registry.example/corp/*`` names, but matched no rule:
    under the default no-match policy it went unchecked with a warning, under ``deny`` it was refused as unnamed.
    A rule restricts, so it covers both spellings of the https default port (the dry run asks nothing of the
    registry: none is needed to see which rule applies)."""
    policy = scene.policy(Rule([rule], keys=[key.public]), head='[image]\nno-match-policy = "deny"\n')
    result = scene.run(policy, ref, "-dry-run")
    assert result.code == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    assert f"): image.signed-by, line 4 of {policy}: key " in result.stdout, result.stdout


def test_a_loopback_registrys_port_443_is_no_default_port(scene: Scene, key: Key) -> None:
    """A loopback registry is asked over plain http: its :443 is a port like any other, and another registry."""
    policy = scene.policy(
        Rule(["127.0.0.1/corp/*"], keys=[key.public]), head='[image]\nno-match-policy = "deny"\n'
    )
    result = scene.run(policy, "127.0.0.1:443/corp/bp", "-dry-run")
    assert result.code == 3, result.stderr
    assert "the image 127.0.0.1:443/corp/bp matches no [[image.signed-by]] rule" in result.stderr, (
        result.stderr
    )
