"""``image.no-match-policy`` (docs/policy.md): what becomes of an image no ``[[image.signed-by]]`` rule matches.

A typo in a rule's image pattern (``.../crop/*`` for ``.../signed/*``) left the image unchecked, exit 0, and the dry
run said nothing. Now a policy with any rule warns of such an image by default (naming it and the rules' patterns,
in the run and the dry run), ``deny`` refuses it before any request, ``allow`` says nothing; the dry run names, per
image, the rule that matched or "no rule". Real CLI, the suite's registry, an image pushed unsigned.
"""

from __future__ import annotations

import json

import pytest

from tests.plugins.http_server import FileServer
from tests.plugins.registry import Front
from tests.plugins.signing import Key
from tests.projects import group
from tests.signed import Rule, Scene


def _policy(scene: Scene, key: Key, host: str, setting: str | None) -> tuple[str, str]:
    """A policy whose one rule's pattern is a typo away from the image's (``crop`` for ``signed``); its path, and
    the pattern."""
    head = f'[image]\nno-match-policy = "{setting}"\n' if setting is not None else "# signatures\n"
    pattern = f"{host}/crop/*"
    return str(scene.policy(Rule([pattern], keys=[key.public]), head=head)), pattern


def test_by_default_an_image_no_rule_matches_is_warned_of_in_the_run_and_the_dry_run(
    scene: Scene, key: Key
) -> None:
    image = scene.image()
    policy, pattern = _policy(scene, key, image.host, None)
    warning = (
        f"Warning: io.buildpacks.group[0]: the image {image.name} matches no [[image.signed-by]] rule (images "
        f"{pattern} in {policy}), so its signatures are not checked (image.no-match-policy (the default) of {policy}"
        ' is warn: write "deny" to refuse such images, "allow" to say nothing)'
    )
    dry = scene.run(scene.directory / "policy.toml", image.tagged, "-dry-run")
    assert dry.code == 0, dry.stderr
    assert warning in dry.stderr, dry.stderr
    assert (
        f"  signatures: io.buildpacks.group[0] ({image.name}): no rule; image.no-match-policy (the default) of "
        f"{policy}: warn"
    ) in dry.stdout.splitlines(), dry.stdout
    result = scene.run(scene.directory / "policy.toml", image.tagged)
    assert result.code == 0, result.stderr
    assert result.stderr.count(warning) == 1, result.stderr  # said once: the fetch knows the plan said it
    assert scene.installed()


def test_deny_refuses_the_image_before_any_request(scene: Scene, key: Key, front: Front) -> None:
    image = scene.image().via(front.host)
    policy, pattern = _policy(scene, key, front.host, "deny")
    result = scene.run(scene.directory / "policy.toml", image.tagged)
    assert result.code == 3, result.stderr
    assert (
        f"matches no [[image.signed-by]] rule (images {pattern} in {policy}), and image.no-match-policy refuses "
        f"such images (image.no-match-policy, line 2 of {policy})"
    ) in result.stderr, result.stderr
    assert front.requests == []
    assert not scene.installed()


def test_allow_lets_the_image_through_unchecked_and_says_nothing(scene: Scene, key: Key) -> None:
    image = scene.image()
    _policy(scene, key, image.host, "allow")
    result = scene.run(scene.directory / "policy.toml", image.tagged)
    assert result.code == 0, result.stderr
    assert "Warning" not in result.stderr, result.stderr
    assert scene.installed()


def test_a_matched_image_is_named_with_its_rule_in_the_dry_run(scene: Scene, key: Key) -> None:
    image = scene.image()
    policy = scene.policy(Rule([f"{image.host}/signed/*"], keys=[key.public]))
    dry = scene.run(policy, image.tagged, "-dry-run")
    assert dry.code == 0, dry.stderr
    assert (
        f"  signatures: io.buildpacks.group[0] ({image.name}): image.signed-by, line 3 of {policy}: key"
        in (dry.stdout)
    )
    assert "no rule" not in dry.stdout and "Warning" not in dry.stderr, dry.stdout + dry.stderr


@pytest.mark.parametrize(("written", "said"), [('"denny"', "did you mean deny? "), ("true", "")])
def test_a_setting_that_is_no_word_of_the_three_is_located(
    scene: Scene, key: Key, written: str, said: str
) -> None:
    image = scene.image()
    policy = scene.policy(Rule(["*"], keys=[key.public]), head=f"[image]\nno-match-policy = {written}\n")
    result = scene.run(policy, image.tagged)
    assert result.code == 3, result.stderr
    assert (
        f"image.no-match-policy (line 2 of {policy}): must be one of deny, warn, allow ({said}what becomes of an "
        "image no [[image.signed-by]] rule matches: refused, warned of, or let through)"
    ) in result.stderr, result.stderr


@pytest.mark.parametrize("setting", ["deny", None])
def test_an_image_found_by_fetching_is_decided_when_found(
    scene: Scene, key: Key, http_server: FileServer, setting: str | None
) -> None:
    """A buildpack registry entry names its image only in the registry's index: the fetch decides it, with the same
    words (deny: exit 3, nothing installed; warn: said once)."""
    image = scene.image()
    index = http_server.root / "index" / "si" / "gn" / "acme_signed"
    index.parent.mkdir(parents=True)
    entry = {"ns": "acme", "name": "signed", "version": "1.0.0", "yanked": False, "addr": image.pinned}
    index.write_text(json.dumps(entry) + "\n")
    policy, pattern = _policy(scene, key, image.host, setting)
    result = scene.preparer(
        "-policy", policy, "-buildpack-registry-index", http_server.url("index"),
        project=group("urn:cnb:registry:acme/signed@1.0.0"),
    )  # fmt: skip
    said = f"the image {image.name} matches no [[image.signed-by]] rule (images {pattern} in {policy})"
    if setting == "deny":
        assert result.code == 3, result.stderr
        assert f"{said}, and image.no-match-policy refuses such images" in result.stderr, result.stderr
        assert not scene.installed()
    else:
        assert result.code == 0, result.stderr
        assert result.stderr.count(f"Warning: io.buildpacks.group[0]: {said}, so its signatures") == 1, (
            result.stderr
        )
        assert scene.installed()


@pytest.mark.parametrize(
    ("written", "meant"),
    [
        ("no-match", "no-match-policy"),
        ("No-Match-Policy", "no-match-policy"),
        ("NO_MATCH", "no-match-policy"),
    ],
)
def test_the_setting_written_short_or_in_another_case_is_named(
    scene: Scene, key: Key, written: str, meant: str
) -> None:
    """``no-match`` (the setting written short) and ``No-Match-Policy`` got "unknown key" and the list of keys, no
    suggestion: too many edits away for the typo search. Exit 3, the line, the key meant; nothing installed."""
    image = scene.image()
    policy = scene.policy(Rule(["*"], keys=[key.public]), head=f'[image]\n{written} = "deny"\n')
    result = scene.run(policy, image.tagged)
    assert result.code == 3, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"ERROR: failed to read policy {policy}: image.{written} (line 2 of {policy}): unknown key (did you mean "
        f"{meant}? known here: allow, no-match-policy, require-pin, signature-max-age, signed-by)"
    ), result.stderr
    assert not scene.installed()
