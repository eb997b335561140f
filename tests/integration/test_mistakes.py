"""Ordinary mistakes never pass as success: each is a warning that names it, or exit 3 before anything changes
(docs/decisions.md, "No mistake passes as success"). The real CLI on a real layout."""

from __future__ import annotations

import tarfile
from collections.abc import Callable
from pathlib import Path

from tests.buildpacks import make_dir
from tests.golden import Layout, env_files, listing
from tests.plugins.cli import Result, base_env, run_cli
from tests.plugins.http_server import FileServer
from tests.projects import HEAD, group


def test_an_empty_group_is_no_group_and_says_so(preparer: Callable[..., Result], layout: Layout) -> None:
    result = preparer(project=HEAD + "[io.buildpacks]\ngroup = []\n")
    assert result.code == 0
    assert result.warnings == [
        (
            "Warning: io.buildpacks.group has no entry (for this build); it is treated as absent: the builder's "
            "order is used"
        )
    ]
    assert not (layout.layers / "order.toml").exists()  # the builder's order stands, as with no group


def test_an_env_name_no_shell_can_read_gets_a_warning(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    env = "".join(
        f'[[io.buildpacks.build.env]]\nname = "{n}"\nvalue = "1"\n' for n in ("MY-VAR", "1ABC", "OK_1")
    )
    result = preparer(project=HEAD + env)
    assert result.code == 0
    assert result.warnings == [
        f"Warning: io.buildpacks.build.env[{i}]: {name} is written as <platform>/env/{name}, but no shell can read "
        "a variable of that name (letters, digits and _ only, not starting with a digit)"
        for i, name in ((0, "MY-VAR"), (1, "1ABC"))
    ]
    assert env_files(layout) == {"MY-VAR": "1", "1ABC": "1", "OK_1": "1"}


def test_an_env_name_with_a_look_alike_character_names_it(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    names = ("F\u041eO", "\u0391PI_KEY", "\uff21PI", "ASCII_ONLY")
    env = "".join(f'[[io.buildpacks.build.env]]\nname = "{n}"\nvalue = "1"\n' for n in names)
    result = preparer(project=HEAD + env)
    assert result.code == 0, result.stderr
    said = [
        ("\u041e", "U+041E (CYRILLIC CAPITAL LETTER O), not a Latin letter"),
        ("\u0391", "U+0391 (GREEK CAPITAL LETTER ALPHA), not a Latin letter"),
        ("\uff21", "U+FF21 (FULLWIDTH LATIN CAPITAL LETTER A), not an ASCII letter"),
    ]
    assert result.warnings == [
        f"Warning: io.buildpacks.build.env[{i}]: {name} is written as <platform>/env/{name}, but no shell can read "
        f"a variable of that name (letters, digits and _ only, not starting with a digit): its character '{char}' "
        f"is {what}"
        for i, (name, (char, what)) in enumerate(zip(names, said, strict=False))
    ]


def test_an_app_directory_that_is_not_one_is_invalid_input(layout: Layout, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-app"
    a_file = tmp_path / "app.txt"
    a_file.write_text("x")
    for app, why in ((missing, "does not exist"), (a_file, "is not a directory")):
        flags = [*layout.flags(), "-app", str(app)]
        result = run_cli(flags, base_env(tmp_path))
        assert result.code == 3, result.stderr
        assert result.stderr == f"ERROR: failed to resolve inputs: the app directory (-app) {app} {why}\n"
    assert not layout.platform.exists() and listing(layout.layers) == []


def test_an_include_pattern_that_matches_nothing_is_named(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    (layout.app / "src").mkdir()
    (layout.app / "src" / "main.py").write_text("x")
    (layout.app / "README").write_text("x")
    result = preparer(project=HEAD + '[io.buildpacks]\ninclude = ["src/", "scr/", "!*.map"]\n')
    assert result.code == 0
    assert result.warnings == ["Warning: io.buildpacks.include: 'scr/' matches no file of the app"]
    assert sorted(p.name for p in layout.app.iterdir()) == ["project.toml", "src"]


def test_a_filter_that_would_leave_only_the_descriptor_changes_nothing(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    (layout.app / "src").mkdir()
    (layout.app / "src" / "main.py").write_text("x")
    (layout.app / "index.js").write_text("x")
    for table in ('include = ["scr/"]', 'exclude = ["*"]'):
        (layout.app / "project.toml").write_text(HEAD + f"[io.buildpacks]\n{table}\n")
        before = listing(layout.app)
        result = preparer()
        assert result.code == 3, result.stderr
        key = "io.buildpacks." + table.split(" ")[0]
        assert result.stderr.splitlines()[-1] == (
            f"ERROR: failed to validate {layout.app / 'project.toml'}: {key} would remove every file of the app but "
            "project.toml (2 files): check its patterns"
        )
        assert listing(layout.app) == before
        assert not (layout.layers / "order.toml").exists()


def test_a_name_a_typo_away_from_one_the_preparer_reads_says_which(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    """``[[io.buildpack.group]]`` was ignored without a word, and the builder's order ran instead."""
    project = (
        HEAD + '[[io.buildpack.group]]\nid = "heroku/python"\n[io.buildpacks]\ngrup = []\nbuidler = "x"\n'
    )
    result = preparer(project=project)
    assert result.code == 0
    assert result.warnings == [
        "Warning: [io.buildpack] is not read: did you mean [io.buildpacks]?",
        "Warning: io.buildpacks.grup is not applied by the preparer: did you mean io.buildpacks.group?",
        "Warning: io.buildpacks.buidler is not applied by the preparer: did you mean io.buildpacks.builder?",
    ]
    missing = preparer(project=HEAD + '[[io.buildpacks.group]]\nid = "heroku/pyton"\n')
    assert missing.code == 1
    assert missing.stderr.splitlines()[-1] == (
        f"ERROR: failed to resolve io.buildpacks.group[0] (heroku/pyton): buildpack 'heroku/pyton' was not found "
        f"in {layout.buildpacks}; did you mean 'heroku/python'?"
    )


def test_what_is_no_archive_is_said_in_plain_words(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer, tmp_path: Path
) -> None:
    """A web page served for an archive read 'invalid literal for int() with base 8: b'>a web p''."""
    import gzip
    import zipfile

    (http_server.root / "page.tgz").write_text("<!DOCTYPE html><html><body>Sign in</body></html>\n" * 20)
    with zipfile.ZipFile(http_server.root / "bp.zip.tgz", "w") as archive:
        archive.writestr("buildpack.toml", "x")
    damaged = bytearray(gzip.compress(b"x" * 100_000))
    damaged[30:40] = b"\xff" * 10
    (http_server.root / "damaged.tgz").write_bytes(bytes(damaged))
    expected = {
        "page.tgz": "not a tar archive: it is an HTML or XML page (a server's error or login page, perhaps: check "
        "the URL)",
        "bp.zip.tgz": "not a tar archive: it is a zip archive (a buildpack is a tar archive, .tgz or .tar)",
        "damaged.tgz": "the gzip data is damaged (",
    }
    for name, cause in expected.items():
        result = preparer(project=group(http_server.url(name)), env={"CNB_PREPARER_HTTP_TIMEOUT": "2"})
        assert result.code == 1, result.stderr
        assert f"ERROR: failed to extract {http_server.url(name)}: {cause}" in result.stderr, result.stderr


def test_an_archive_of_a_buildpack_directory_says_how_to_make_it(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    source = make_dir(layout.app / "bp-src" / "my-bp", "me/nested")
    with tarfile.open(layout.app / "bp.tgz", "w:gz") as tar:
        tar.add(source, arcname="my-bp")  # the directory itself, not what is in it
    result = preparer(project=group("bp.tgz"))
    assert result.code == 1
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to fetch buildpack from {layout.app / 'bp.tgz'}: buildpack.toml is in my-bp/, not at the "
        "root of the archive: make the archive from inside the buildpack's directory (tar -czf my-bp.tgz -C my-bp .)"
    )


def test_an_output_path_that_cannot_be_written_fails_before_anything_changes(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    """A report path with a typo failed after the run had written order.toml and the env files."""
    project = HEAD + '[[io.buildpacks.build.env]]\nname = "A"\nvalue = "1"\n'
    (tmp_path / "a-file").write_text("x")
    for report, why in (
        (tmp_path / "a-file" / "report.toml", f"{tmp_path / 'a-file'} is not a directory"),
        (tmp_path, "is a directory"),
    ):
        result = preparer("-prepare-report", str(report), project=project)
        assert result.code == 3, result.stderr
        assert result.stderr == f"ERROR: failed to resolve inputs: -prepare-report {report}: {why}\n"
        assert env_files(layout) == {}


def test_an_edited_inline_script_is_installed_where_buildpacks_persist(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    """The same id and version (0.0.0) with another script: the installed buildpack is the project's script, not
    the one a previous build left in <buildpacks>."""
    inline = HEAD + '[[io.buildpacks.group]]\nid = "me/inline"\n[io.buildpacks.group.script]\napi = "0.10"\n'
    build = layout.buildpacks / "me_inline" / "0.0.0" / "bin" / "build"
    assert preparer(project=inline + 'inline = "echo first"\n').code == 0
    assert "echo first" in build.read_text()
    again = preparer(project=inline + 'inline = "echo second"\n')
    assert again.code == 0, again.stderr
    assert "echo second" in build.read_text() and "echo first" not in build.read_text()
    assert "Installed me/inline@0.0.0" in again.stdout
    assert sorted(p.name for p in build.parents[2].iterdir()) == ["0.0.0"]  # nothing left aside
    same = preparer(project=inline + 'inline = "echo second"\n')
    assert "Already installed: me/inline@0.0.0" in same.stdout


def test_an_inline_script_may_give_its_version(preparer: Callable[..., Result], layout: Layout) -> None:
    """contract §7.24: `version` beside `script` is accepted, as pack does; `uri` beside it is not."""
    script = '[io.buildpacks.group.script]\napi = "0.10"\ninline = "echo hi"\n'
    entry = '[[io.buildpacks.group]]\nid = "me/inline"\n'
    result = preparer(project=HEAD + entry + 'version = "1.2.3"\n' + script)
    assert result.code == 0, result.stderr
    toml = (layout.buildpacks / "me_inline" / "1.2.3" / "buildpack.toml").read_text()
    assert 'version = "1.2.3"' in toml
    assert 'version = "1.2.3"' in (layout.layers / "order.toml").read_text()
    refused = preparer(project=HEAD + entry + 'uri = "bp.tgz"\n' + script)
    assert refused.code == 3
    assert refused.stderr.endswith("io.buildpacks.group[0]: script cannot be combined with uri\n")


def test_a_mistyped_key_of_an_entry_says_which_it_is_near(preparer: Callable[..., Result]) -> None:
    project = HEAD + '[[io.buildpacks.group]]\nid = "heroku/procfile"\nversin = "1.0.0"\nx = 1\n'
    result = preparer(project=project)
    assert result.code == 0
    assert result.warnings == [
        (
            "Warning: io.buildpacks.group[0].versin is not applied by the preparer: did you mean "
            "io.buildpacks.group[0].version?"
        ),
        "Warning: io.buildpacks.group[0].x is not applied by the preparer",
    ]
    missing = preparer(project=HEAD + '[[io.buildpacks.build.env]]\nnmae = "A"\nvalue = "1"\n')
    assert missing.code == 3
    assert missing.stderr.endswith(
        "io.buildpacks.build.env[0]: name is required (nmae is written: did you mean name?)\n"
    )


def test_a_misspelled_setting_of_the_preparer_is_named_not_silently_ignored(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    out = tmp_path / "provenance.json"
    result = preparer(
        env={"CNB_PREPARER_PROVANANCE": str(out), "CNB_PREPARER_SHINY": "1"},
        project=HEAD + '[[io.buildpacks.group]]\nid = "examples/node"\n',
    )
    assert result.code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert (
        "Warning: CNB_PREPARER_PROVANANCE is not a setting of the preparer (did you mean CNB_PREPARER_PROVENANCE?): "
        "it is ignored"
    ) in lines
    [shiny] = [line for line in lines if line.startswith("Warning: CNB_PREPARER_SHINY ")]
    assert (
        "(the preparer's are CNB_PREPARER_BUILDPACKS, CNB_PREPARER_DISABLE_SYSTEM_BUILDPACKS, "
        "CNB_PREPARER_DOWNLOAD_TIMEOUT, "
        in shiny
        and shiny.endswith(": it is ignored")
    )
    assert not out.exists()
    assert not [line for line in lines if "CNB_PREPARER_PROVENANCE " in line]  # a known one is never named
