"""Local and inline buildpacks through the CLI: install, checks, exit codes, all-or-nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.buildpacks import buildpack_toml, make_dir, make_tgz
from tests.golden import Layout, listing
from tests.plugins.cli import Result, base_env
from tests.projects import HEAD, group


def test_relative_dir_tgz_and_file_uri(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    make_dir(layout.app / "bps" / "dir", "me/dir")
    make_tgz(layout.app / "bp.tgz", "me/tgz", "2.0.0")
    make_tgz(tmp_path / "elsewhere.tar.gz", "me/file", "3.0.0")
    result = preparer(project=group("./bps/dir", "bp.tgz", f"file://{tmp_path}/elsewhere.tar.gz"))
    assert result.code == 0, result.stderr
    for path in ("me_dir/1.0.0", "me_tgz/2.0.0", "me_file/3.0.0"):
        root = layout.buildpacks / path
        assert (root / "buildpack.toml").is_file()
        assert (root / "bin" / "build").stat().st_mode & 0o777 == 0o755
        assert (root / "buildpack.toml").stat().st_mode & 0o777 == 0o644
    assert 'id = "me/file"\n  version = "3.0.0"' in (layout.layers / "order.toml").read_text()


def test_inline_buildpack(preparer: Callable[..., Result], layout: Layout) -> None:
    project = (
        HEAD
        + """
[[io.buildpacks.group]]
id = "me/inline"
[io.buildpacks.group.script]
api = "0.10"
shell = "/bin/bash"
inline = "echo building\\nexit 0"
"""
    )
    assert preparer(project=project).code == 0
    root = layout.buildpacks / "me_inline" / "0.0.0"
    assert (root / "bin" / "build").read_text() == "#!/bin/bash\n\necho building\nexit 0\n"
    assert (root / "bin" / "detect").read_text() == "#!/bin/bash\n\nexit 0\n"
    assert os.access(root / "bin" / "build", os.X_OK) and os.access(root / "bin" / "detect", os.X_OK)
    assert (root / "buildpack.toml").read_text() == buildpack_toml("me/inline", "0.0.0").replace(
        "\n\n", "\n\n", 1
    )


def test_inline_needs_id_and_api(preparer: Callable[..., Result], layout: Layout) -> None:
    no_api = HEAD + '[[io.buildpacks.group]]\nid = "me/x"\n[io.buildpacks.group.script]\ninline = "true"\n'
    result = preparer(project=no_api)
    assert result.code == 3
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to validate {layout.app / 'project.toml'}: io.buildpacks.group[0].script: api is required"
    )


def test_id_must_match_the_fetched_buildpack(preparer: Callable[..., Result], layout: Layout) -> None:
    make_tgz(layout.app / "bp.tgz", "me/real")
    result = preparer(project=HEAD + '[[io.buildpacks.group]]\nid = "me/other"\nuri = "bp.tgz"\n')
    assert result.code == 3
    assert "id 'me/other' does not match the buildpack fetched from" in result.stderr
    assert not (layout.buildpacks / "me_real").exists()


def test_unsupported_buildpack_api_exits_12(preparer: Callable[..., Result], layout: Layout) -> None:
    make_tgz(layout.app / "old.tgz", "me/old", api="0.6")
    result = preparer(project=group("old.tgz"))
    assert result.code == 12
    assert result.stderr.splitlines()[-1] == (
        "ERROR: failed to set API for Buildpack 'me/old@1.0.0': buildpack API version '0.6' is incompatible "
        "with the lifecycle"
    )


def test_composite_children_must_be_present(preparer: Callable[..., Result], layout: Layout) -> None:
    root = layout.app / "meta"
    root.mkdir()
    order = '\n[[order]]\n[[order.group]]\nid = "examples/node"\nversion = "1.2.0"\n' \
            '[[order.group]]\nid = "me/missing"\nversion = "9.9.9"\n'  # fmt: skip
    (root / "buildpack.toml").write_text(buildpack_toml("me/meta", order=order))
    result = preparer(project=group("./meta"))
    assert result.code == 1
    assert "neither in" in result.stderr and "me/missing@9.9.9" in result.stderr
    assert "examples/node" not in result.stderr.splitlines()[-1]
    (root / "buildpack.toml").write_text(
        buildpack_toml("me/meta", order=order.split('[[order.group]]\nid = "me')[0])
    )
    assert preparer(project=group("./meta")).code == 0


def test_missing_and_broken_sources_exit_1(preparer: Callable[..., Result], layout: Layout) -> None:
    missing = preparer(project=group("./nope"))
    assert missing.code == 1
    assert missing.stderr.splitlines()[-1] == (
        f"ERROR: failed to resolve io.buildpacks.group[0] (./nope): {layout.app}/nope: no such file or directory"
    )
    (layout.app / "junk.tgz").write_bytes(b"<html>not an archive</html>")
    junk = preparer(project=group("junk.tgz"))
    assert junk.code == 1 and "not a tar archive: it is an HTML or XML page" in junk.stderr
    make_dir(layout.app / "nobp", "me/x")
    (layout.app / "nobp" / "buildpack.toml").unlink()
    assert "no buildpack.toml at the root" in preparer(project=group("./nobp")).stderr


def test_a_directory_with_a_link_outside_is_refused(preparer: Callable[..., Result], layout: Layout) -> None:
    root = make_dir(layout.app / "sneaky", "me/sneaky")
    os.symlink("/etc/passwd", root / "passwd")
    result = preparer(project=group("./sneaky"))
    assert result.code == 1
    assert "refusing entry 'passwd': symbolic link '/etc/passwd' leaves the buildpack" in result.stderr
    (root / "passwd").unlink()
    os.symlink(".", root / "here")
    os.symlink("here/..", root / "up")  # inside on paper; through 'here' it is the app directory
    before = listing(layout.buildpacks)
    chained = preparer(project=group("./sneaky"))
    assert chained.code == 1
    assert chained.stderr.splitlines()[-1] == (
        f"ERROR: failed to copy buildpack from {root}: refusing entry 'up': symbolic link 'here/..' leaves the "
        "buildpack"
    )
    assert listing(layout.buildpacks) == before


def test_nothing_changes_when_a_later_entry_fails(preparer: Callable[..., Result], layout: Layout) -> None:
    make_tgz(layout.app / "a.tgz", "me/a")
    make_tgz(layout.app / "b.tgz", "me/b")
    (layout.app / "junk.log").write_text("x")
    project = group("a.tgz", "b.tgz", "./missing", "a.tgz") + (
        '[io.buildpacks]\nexclude = ["*.log"]\n[[io.buildpacks.build.env]]\nname = "A"\nvalue = "1"\n'
    )
    (layout.app / "project.toml").write_text(project)
    before = {p: listing(p) for p in (layout.app, layout.layers, layout.buildpacks)}
    result = preparer()
    assert result.code == 1
    assert {p: listing(p) for p in (layout.app, layout.layers, layout.buildpacks)} == before
    assert not layout.platform.exists()


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_a_failing_chown_installs_no_buildpack(layout: Layout, tmp_path: Path) -> None:
    # Root without CAP_CHOWN: writing order.toml and env files owned by -uid fails after every fetch succeeded,
    # and the error says what to change.
    make_tgz(layout.app / "bp.tgz", "me/late")
    (layout.app / "project.toml").write_text(
        group("bp.tgz") + '[[io.buildpacks.build.env]]\nname = "A"\nvalue = "1"\n'
    )
    before = {p: listing(p) for p in (layout.app, layout.buildpacks)}
    command = ["setpriv", "--bounding-set=-chown", "--inh-caps=-chown", sys.executable, "-m", "preparer",
               *layout.flags(), "-uid", "1000", "-gid", "1000", "-download-cache", ""]  # fmt: skip
    proc = subprocess.run(command, capture_output=True, text=True, env=base_env(tmp_path), check=False)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        f"ERROR: failed to give {layout.layers}/order.toml to the build user 1000:1000 (-uid/-gid): Operation not "
        "permitted: the preparer runs as root without the CHOWN capability (add CHOWN to the container's "
        "capabilities, or run the preparer as the build user, without -uid and -gid)"
    )
    assert {p: listing(p) for p in (layout.app, layout.buildpacks)} == before
    assert listing(layout.layers) == []
    assert not layout.platform.exists()


PIN = "#sha256=" + "ab" * 32


@pytest.mark.parametrize("written", [f"file://{{archive}}{PIN}", f"./bp.tgz{PIN}", f"bp.tgz{PIN}"])
def test_a_pin_on_a_local_path_is_refused_not_passed_over(
    preparer: Callable[..., Result], layout: Layout, written: str
) -> None:
    """A ``#sha256=`` pin on a path was neither checked nor refused: archive B installed for a pin of A, and the
    provenance recorded the pin as held. A path takes no pin: exit 3, naming what to do, nothing installed."""
    make_tgz(layout.app / "bp.tgz", "me/tgz", "2.0.0")
    result = preparer(project=group(written.format(archive=layout.app / "bp.tgz")))
    assert result.code == 3, result.stderr
    assert "a #sha256= pin is checked on http(s) URIs only" in result.stderr, result.stderr
    assert not (layout.buildpacks / "me_tgz").exists() and not (layout.layers / "order.toml").exists()


#: What a pin where nothing checks it is told.
NO_PIN = (
    "a #sha256= pin is checked on http(s) URIs only: remove it (an image is pinned by its digest, <image>@sha256:"
    "<digest>; a local path is read as it is: serve the archive over https and pin that URI); a file whose name "
    "holds '#sha256=' is named by a file:// URI with '#' written as %23"
)


@pytest.mark.parametrize(
    "written",
    [
        f"docker://registry.example/corp/bp:1{PIN}",
        f"registry.example/corp/bp:1{PIN}",
        f"urn:cnb:registry:acme/bp@1.0.0{PIN}",
        f"urn:cnb:builder:examples/node{PIN}",
        f"urn:buildpack:examples/node{PIN}",
        f"examples/node{PIN}",
        f"examples/node@1.0.0{PIN}",
    ],
)
def test_a_pin_on_any_source_but_an_http_archive_is_refused_as_unchecked(
    preparer: Callable[..., Result], layout: Layout, written: str
) -> None:
    """A ``#sha256=`` pin on a registry entry was read into its version (the dry run said "would download" and
    exit 0), on a builder URN into its id ("not found", exit 1), on an image into its tag ("not a valid tag"), and
    on a bare id as a local path. Every kind but an http(s) archive refuses it the same way, in the dry run and the
    run alike, before any request."""
    for flags in (("-dry-run",), ()):
        result = preparer(*flags, project=group(written))
        assert result.code == 3, result.stderr
        assert result.stderr.splitlines()[-1] == (
            f"ERROR: failed to validate {layout.app / 'project.toml'}: io.buildpacks.group[0].uri '{written}': "
            + NO_PIN
        ), result.stderr
    assert not (layout.layers / "order.toml").exists()


@pytest.mark.parametrize("written", [f"bp.tgz{PIN}", f"./bp.tgz{PIN}", f"{{app}}/bp.tgz{PIN.upper()}"])
def test_a_pin_on_a_path_is_refused_even_when_a_file_is_named_so(
    preparer: Callable[..., Result], layout: Layout, written: str
) -> None:
    """A bare path holding ``#sha256=`` was a pin when no file had that name, and a file name (installed unchecked,
    the reviewer reading a pin) when one did: a project could ship ``bp.tgz#sha256=<the good digest>`` with other
    bytes. The same text now reads one way whatever is on disk: refused, saying how such a file is named."""
    make_tgz(layout.app / "bp.tgz", "me/good", "1.0.0")
    name = written.format(app=layout.app).rsplit("/", 1)[-1]
    make_tgz(layout.app / name, "me/other", "6.6.6")
    before = listing(layout.buildpacks)
    result = preparer(project=group(written.format(app=layout.app)))
    assert result.code == 3, result.stderr
    assert result.stderr.splitlines()[-1].endswith(NO_PIN), result.stderr
    assert listing(layout.buildpacks) == before
    assert not (layout.layers / "order.toml").exists()
    quoted = f"file://{layout.app}/{name}".replace("#", "%23")
    assert preparer(project=group(quoted)).code == 0  # the file named so, as the message says
    assert (layout.buildpacks / "me_other").is_dir()


@pytest.mark.parametrize("written", ["file:bp.tgz", "FILE:./bp.tgz", "file:"])
def test_a_relative_file_url_is_refused_saying_how_to_write_the_path(
    preparer: Callable[..., Result], layout: Layout, written: str
) -> None:
    """``file:bp.tgz`` was read as a file named ``file:bp.tgz`` (exit 1, "no such file"), with nothing saying that
    ``file:`` is not read as a scheme there."""
    make_tgz(layout.app / "bp.tgz", "me/tgz", "2.0.0")
    result = preparer(project=group(written))
    assert result.code == 3, result.stderr
    shown = written[5:] or "bp.tgz"
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to validate {layout.app / 'project.toml'}: io.buildpacks.group[0].uri '{written}': "
        f"'{written[:5]}' without '//': a file:// URI names an absolute path (file:///srv/bp.tgz); a relative path "
        f"is written without a scheme ({shown})"
    ), result.stderr
    assert not (layout.buildpacks / "me_tgz").exists() and not (layout.layers / "order.toml").exists()


@pytest.mark.parametrize(
    "written",
    [
        "file://{archive}#token=s3cr3t-value",
        "file://{archive}?token=s3cr3t-value",
        "file://me:s3cr3t-value@localhost{archive}",
        "https://127.0.0.1:9/bp.tgz#token=s3cr3t-value",
    ],
)
def test_no_part_of_a_uri_that_may_hold_a_secret_is_shown(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, written: str
) -> None:
    """A secret in a ``file://`` URI's fragment reached the provenance and the report. A fragment that is no pin, a
    query and user information are refused, and never shown: not in the error, the report, the dry run."""
    make_tgz(layout.app / "bp.tgz", "me/tgz", "2.0.0")
    text = group(written.format(archive=layout.app / "bp.tgz"))
    report = tmp_path / "report.toml"
    for flags in ((), ("-dry-run",)):
        result = preparer(*flags, "-prepare-report", str(report), project=text)
        assert result.code == 3, result.stderr
        assert "s3cr3t" not in result.stdout + result.stderr, result.stderr
        assert not report.exists() or "s3cr3t" not in report.read_text()
    assert not (layout.buildpacks / "me_tgz").exists()


@pytest.mark.parametrize("written", ["..", "../cnb", "{buildpacks}"])
def test_a_directory_holding_the_buildpacks_directory_is_refused_not_copied_into_itself(
    preparer: Callable[..., Result], layout: Layout, written: str
) -> None:
    """``uri = ".."`` (or the builder's own directory) held ``<buildpacks>``, where staging is: the copy went on
    copying its own copy until a name was too long, then "an error the preparer does not foresee". Refused before
    anything is copied, naming the directory and what to write instead."""
    uri = written.format(buildpacks=layout.buildpacks)
    before = listing(layout.buildpacks)
    result = preparer(project=group(uri))
    assert result.code == 1, result.stderr
    source = os.path.normpath(layout.app / uri)
    what = "is" if source == str(layout.buildpacks) else "holds"
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to copy buildpack from {source}: it {what} {layout.buildpacks}, where the preparer stages "
        "the buildpacks it installs, and would be copied into itself: name the buildpack's own directory (the one "
        "holding buildpack.toml), outside it"
    ), result.stderr
    assert listing(layout.buildpacks) == before  # no staging left behind
    assert not (layout.layers / "order.toml").exists()


def test_the_refusal_holds_for_any_local_buildpack_of_a_run(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    """The directories above staging are found once per run and shared by its fetches: the one holding
    ``<buildpacks>`` is refused whichever of the run's copies found them."""
    good = [str(make_dir(tmp_path / f"bp{n}", f"tiny/bp{n}")) for n in range(6)]
    before = listing(layout.buildpacks)
    for uris in ([*good, ".."], ["..", *good], [*good[:3], "..", *good[3:]]):
        result = preparer(project=group(*uris))
        assert result.code == 1, result.stderr
        assert f"holds {layout.buildpacks}, where the preparer stages" in result.stderr, result.stderr
        assert listing(layout.buildpacks) == before
        assert not (layout.layers / "order.toml").exists()


def test_a_buildpacks_repository_holding_the_buildpacks_directory_is_refused(
    preparer: Callable[..., Result], tmp_path: Path
) -> None:
    """A buildpack author's own checkout (buildpack.toml at its top) given ``-buildpacks ./out`` inside it."""
    repo = make_dir(tmp_path / "repo", "me/dev")
    (repo / "out").mkdir()
    result = preparer("-buildpacks", str(repo / "out"), project=group(str(repo)))
    assert result.code == 1, result.stderr
    assert (
        f"failed to copy buildpack from {repo}: it holds {repo / 'out'}, where the preparer" in result.stderr
    )
    assert listing(repo / "out") == []


@pytest.mark.parametrize(
    ("written", "problem"),
    [
        ("file://", "it names no path: write file:///<absolute path>"),
        ("file://localhost", "it names no path: write file:///<absolute path>"),
        # A relative path after file:// is read as a host: say so (it said "must name a local path" alone).
        ("file://./bp.tgz", "file:// URIs must name a local path, and '.' is read as a host: write file:///<absolute path>, or a relative path without a scheme"),
        ("file://bp.tgz", "file:// URIs must name a local path, and 'bp.tgz' is read as a host: write file:///<absolute path>, or a relative path without a scheme"),
        ("file://me:s3cr3t@localhost{archive}", "a file:// URI takes no user information ('user@'): write file:///<path>"),
    ],
)  # fmt: skip
def test_a_file_uri_without_a_path_or_with_a_user_is_refused_saying_so(
    preparer: Callable[..., Result], layout: Layout, written: str, problem: str
) -> None:
    """``file://`` read as the process's working directory and copied it (into itself, here); user information
    got "must name a local path" beside a shown ``file://localhost/...``, which does."""
    make_tgz(layout.app / "bp.tgz", "me/tgz")
    result = preparer(project=group(written.format(archive=layout.app / "bp.tgz")), cwd=layout.root)
    assert result.code == 3, result.stderr
    assert result.stderr.splitlines()[-1].endswith(problem), result.stderr
    assert "s3cr3t" not in result.stderr
    assert not (layout.buildpacks / "me_tgz").exists() and not (layout.layers / "order.toml").exists()


def test_a_file_uri_names_its_host_in_any_case(preparer: Callable[..., Result], layout: Layout) -> None:
    """A host has no case: ``file://LOCALHOST/...`` was refused as not a local path."""
    make_tgz(layout.app / "bp.tgz", "me/tgz")
    result = preparer(project=group(f"file://LOCALHOST{layout.app}/bp.tgz"))
    assert result.code == 0, result.stderr
    assert (layout.buildpacks / "me_tgz" / "1.0.0" / "buildpack.toml").is_file()
