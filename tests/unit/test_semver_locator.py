"""Semver precedence for "highest version", and the classification of group entry URIs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from preparer.errors import InvalidInputsError
from preparer.fetch.locator import (
    BuilderLocator,
    HttpLocator,
    IdLocator,
    ImageLocator,
    PathLocator,
    RegistryLocator,
    parse_locator,
    redact,
)
from preparer.semver import highest


@pytest.mark.parametrize(
    ("versions", "best"),
    [
        (["1.0.0", "1.0.0-rc.1"], "1.0.0"),
        (
            ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta.11", "1.0.0-beta.2"],
            "1.0.0-beta.11",
        ),
        (["0.9.0", "0.10.0"], "0.10.0"),
        (["latest", "v1", "1.0"], None),
        (["2.0.0+build.1", "1.9.9"], "2.0.0+build.1"),
    ],
)
def test_highest(versions: list[str], best: str | None) -> None:
    assert highest(versions) == best


BASE = Path("/project")


@pytest.mark.parametrize(
    ("uri", "locator"),
    [
        ("urn:cnb:builder:a/b", BuilderLocator("a/b")),
        ("urn:cnb:builder:a/b@1.2.3", BuilderLocator("a/b", "1.2.3")),
        ("urn:buildpack:a/b", BuilderLocator("a/b")),
        ("urn:cnb:registry:ns/name@1.0.0", RegistryLocator("ns", "name", "1.0.0")),
        ("https://h/x.tgz", HttpLocator("https://h/x.tgz")),
        ("http://h/x.tgz#sha256=" + "ab" * 32, HttpLocator("http://h/x.tgz", "ab" * 32)),
        ("file:///opt/bp%20one", PathLocator(Path("/opt/bp one"))),
        ("docker://registry.io/bp:1", ImageLocator("registry.io/bp:1")),
        ("./bp", PathLocator(Path("/project/bp"))),
        ("../shared/bp.tgz", PathLocator(Path("/shared/bp.tgz"))),
        ("bp.cnb", PathLocator(Path("/project/bp.cnb"))),
        ("/abs/bp", PathLocator(Path("/abs/bp"))),
        ("cnbs/sample-package:hello", ImageLocator("cnbs/sample-package:hello")),
        # Bare ids (docs/decisions.md, "Resolving `uri`"): installed, else registry, else image; @<version> is never a digest.
        ("heroku/python", IdLocator("heroku/python")),
        ("paketo-buildpacks/nodejs", IdLocator("paketo-buildpacks/nodejs")),
        ("heroku/procfile@1.0.1", IdLocator("heroku/procfile", "1.0.1")),
        ("heroku/procfile@latest", IdLocator("heroku/procfile")),
        ("heroku/procfile@sha256:" + "ab" * 32, ImageLocator("heroku/procfile@sha256:" + "ab" * 32)),
        ("gcr.io/bp", ImageLocator("gcr.io/bp")),
        ("localhost/bp", ImageLocator("localhost/bp")),
        ("registry:5000/bp", ImageLocator("registry:5000/bp")),
        ("ns/name/extra", ImageLocator("ns/name/extra")),
        ("python", ImageLocator("python")),
        ("bash-script-buildpack/", PathLocator(Path("/project/bash-script-buildpack"))),
    ],
)
def test_parse_locator(uri: str, locator: object) -> None:
    assert parse_locator(uri, BASE, exists=lambda _: False) == locator


def test_a_bare_name_that_exists_is_a_path() -> None:
    assert parse_locator("buildpacks", BASE, exists=lambda p: p == BASE / "buildpacks") == PathLocator(
        BASE / "buildpacks"
    )


@pytest.mark.parametrize(
    "uri",
    [
        "ftp://h/x.tgz",
        "http://[::1/x.tgz",
        "https://h:99999/x.tgz",
        "urn:cnb:builder:",
        "urn:cnb:registry:bad",
        "https://h/x#md5=00",
        "docker://",
        "docker://UPPER/case",
        "heroku/python:Bad Tag",
        "heroku/procfile@sha256:abc",
    ],
)
def test_bad_uris_exit_3(uri: str) -> None:
    with pytest.raises(InvalidInputsError):
        parse_locator(uri, BASE, exists=lambda _: False)


def test_redact_removes_credentials() -> None:
    assert redact("https://user:s3cret@host/x.tgz?token=abc") == "https://host/x.tgz"
    assert redact("https://user:s3cret@[::1/x?t=1") == "https://[::1/x"


def test_a_file_uris_escapes_are_bytes_of_the_name() -> None:
    """``%C3%28`` (not UTF-8) was decoded as U+FFFD, naming a file that is not the one written."""
    locator = parse_locator("file:///srv/b%C3%28.tgz", Path("/app"))
    assert isinstance(locator, PathLocator)
    assert os.fsencode(locator.path) == b"/srv/b\xc3(.tgz"
