"""The platform's lists (``-buildpack``, ``-pre-buildpack``, ``-post-buildpack``, ``-env``, ``-env-file``) through
the real command, as a new user meets them: the mistakes each flag invites, what a dry run and the report say of
where each entry comes from, and everything a descriptor's entry gets (the policy, the provenance, the variables).

pack's own results are held case by case in test_lists_pack.py; the lock round trip per layer is in
test_lists_lock.py.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable
from pathlib import Path

from preparer.lists import ENV_FORMS
from tests.buildpacks import make_dir, make_tgz
from tests.golden import Layout, env_files, listing
from tests.plugins.cli import Result
from tests.plugins.http_server import FileServer
from tests.projects import HEAD

GROUP_NODE = HEAD + '[[io.buildpacks.group]]\nid = "examples/node"\n'


def order_ids(layout: Layout) -> list[list[str]]:
    doc = tomllib.loads((layout.layers / "order.toml").read_text())
    return [[entry["id"] for entry in group["group"]] for group in doc["order"]]


def unchanged(layout: Layout, buildpacks_before: list[str]) -> bool:
    """Nothing written: no order.toml, no env file, <buildpacks> as it was."""
    return (
        not (layout.layers / "order.toml").exists()
        and env_files(layout) == {}
        and listing(layout.buildpacks) == buildpacks_before
    )


def test_a_typo_in_a_buildpack_path_is_exit_1_naming_the_flag_and_the_path(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    make_dir(layout.app / "buildpacks" / "mine", "acme/mine")
    before = listing(layout.buildpacks)
    result = preparer("-buildpack", "./buildpacks/mien", "-env", "A=1")
    assert result.code == 1
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to resolve -buildpack[0] (./buildpacks/mien): {layout.app}/buildpacks/mien: no such file "
        "or directory"
    )
    assert unchanged(layout, before)
    fixed = preparer("-buildpack", "./buildpacks/mine")  # a path from <app>, whatever the working directory
    assert fixed.code == 0, fixed.stderr
    assert order_ids(layout) == [["acme/mine"]]


def test_a_typo_in_an_env_file_name_is_exit_3_with_the_file_meant(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    (tmp_path / "ci.env").write_text("A=1\n")
    result = preparer("-env-file", "ci.evn", cwd=tmp_path)  # from the working directory, as every path flag
    assert result.code == 3
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to read -env-file ci.evn: {tmp_path}/ci.evn does not exist; did you mean {tmp_path}/ci.env?"
    )
    assert env_files(layout) == {}
    assert preparer("-env-file", "ci.env", cwd=tmp_path).code == 0
    assert env_files(layout) == {"A": "1"}


def test_env_without_a_value_takes_the_preparer_s_own_and_an_unset_one_is_written_empty_with_a_warning(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    result = preparer("-env", "NODE_ENV", "-e", "NPM_TOKEN", env={"NODE_ENV": "production"})
    assert result.code == 0, result.stderr
    assert env_files(layout) == {"NODE_ENV": "production", "NPM_TOKEN": ""}
    assert result.warnings == [
        "Warning: -env[1]: NPM_TOKEN is not set in the preparer's environment: it is written empty, as pack does"
    ]


def test_an_env_file_line_a_shell_would_read_otherwise_is_exit_3_naming_the_file_and_line(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    env = tmp_path / "build.env"
    env.write_text("# written for a shell\nA=1\nexport NODE_ENV=production\nB = 2\n")
    result = preparer("-env-file", str(env))
    assert result.code == 3
    errors = [line for line in result.stderr.splitlines() if line.startswith("ERROR: ")]
    assert errors == [
        (
            f"ERROR: failed to read -env-file build.env: {env}:3: the name 'export NODE_ENV' holds white space: write "
            "NODE_ENV=VALUE ('export' is a shell's word); a line is NAME=VALUE, or NAME for the value the preparer's "
            "environment has"
        ),
        (
            f"ERROR: failed to read -env-file build.env: {env}:4: the name 'B ' holds white space: write NAME=VALUE, "
            "with no space around '='; a line is NAME=VALUE, or NAME for the value the preparer's environment has"
        ),
    ]
    assert env_files(layout) == {}
    env.write_text('# written for the preparer\r\nA=1\r\nNODE_ENV="production"\r\n')
    fixed = preparer("-env-file", str(env))
    assert fixed.code == 0, fixed.stderr
    assert env_files(layout) == {
        "A": "1",
        "NODE_ENV": '"production"',
    }  # quotes kept, as pack and docker keep them
    assert f"Warning: {env}:3: the value of NODE_ENV is written with its quotes" in fixed.stderr


def test_a_comma_inside_a_url_splits_it_as_pack_does_and_double_quotes_keep_it_whole(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer
) -> None:
    make_tgz(http_server.root / "a,b.tgz", "acme/comma", "1.0.0")
    url = http_server.url("a,b.tgz")
    before = listing(layout.buildpacks)
    split = preparer("-buildpack", url)
    assert split.code == 1
    assert split.warnings[0] == (
        f"Warning: -buildpack '{url}' is read as 2 buildpacks ({url.split(',')[0]}, b.tgz): a value is a "
        f"comma-separated list, as pack reads it; a URL with a comma is written in double quotes: "
        f"-buildpack '\"{url}\"'"
    )
    assert unchanged(layout, before)
    whole = preparer("-buildpack", f'"{url}"')
    assert whole.code == 0, whole.stderr
    assert order_ids(layout) == [["acme/comma"]]
    assert (
        preparer("-pre-buildpack", url).code == 0
    )  # one buildpack a flag, as pack's: the comma is the URL's


def test_a_flag_given_twice_appends_and_the_same_buildpack_or_name_twice_is_a_warning(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    result = preparer(
        "-buildpack",
        "heroku/nodejs",
        "-buildpack",
        "heroku/procfile,heroku/nodejs",
        "-env",
        "A=1",
        "-env",
        "A=2",
    )
    assert result.code == 0, result.stderr
    assert order_ids(layout) == [["heroku/nodejs", "heroku/procfile", "heroku/nodejs"]]
    assert env_files(layout) == {"A": "2"}
    assert result.warnings == [
        "Warning: -buildpack[2] names heroku/nodejs again (as -buildpack[0]): the group holds it twice",
        "Warning: -env[1] sets A again (as -env[0]); the last value wins",
    ]


def test_an_empty_value_is_exit_3_naming_the_flag_and_what_it_takes(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    before = listing(layout.buildpacks)
    for args, error in (
        (["-buildpack", ""], ("ERROR: failed to validate -buildpack: -buildpack[0] is empty: name a buildpack, or "
         "leave the flag out; -buildpack takes <id>[@<version>], urn:cnb:builder:<id>, urn:cnb:registry:<id>, "
         "docker://<image>, an image, an http(s) or file URL, or a path from <app>")),
        (["-buildpack", "heroku/nodejs,"], ("ERROR: failed to validate -buildpack: -buildpack[1] is empty: name a "
         "buildpack, or leave the flag out; -buildpack takes")),
        (["-env", ""], ("ERROR: failed to validate -env: -env[0] is empty: give NAME=VALUE or NAME, or leave the flag "
         "out; -env takes NAME=VALUE, or NAME for the value the preparer's environment has")),
        (["-env-file", ""], ("ERROR: failed to resolve inputs: -env-file[0] is empty: name a file, or leave the flag "
         "out")),
    ):  # fmt: skip
        result = preparer(*args, project=GROUP_NODE)
        assert result.code == 3, args
        assert result.stderr.splitlines()[-1].startswith(error), result.stderr
        assert unchanged(layout, before)


def test_what_go_s_csv_reader_refuses_is_exit_2_and_a_bad_variable_exit_3(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    bad = preparer("-buildpack", 'heroku/"nodejs"')
    assert bad.code == 2
    assert bad.stderr.startswith(
        'invalid value "heroku/"nodejs"" for flag -buildpack: parse error on line 1, column 8: bare " in '
        "non-quoted-field (a comma-separated list, as pack reads it"
    )
    variable = preparer(env={"CNB_PREPARER_BUILDPACKS": '"heroku/nodejs'})
    assert variable.code == 3
    assert variable.stderr.splitlines()[-1].startswith(
        "ERROR: failed to resolve inputs: CNB_PREPARER_BUILDPACKS='\"heroku/nodejs' is not a comma-separated list: "
        'parse error on line 1, column 15: extraneous or missing " in quoted-field'
    )


def test_the_variables_hold_comma_separated_lists_and_the_flags_replace_them(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    (tmp_path / "a.env").write_text("A=1\n")
    (tmp_path / "b,c.env").write_text("B=2\n")
    env = {
        "CNB_PREPARER_BUILDPACKS": "heroku/nodejs,heroku/procfile",
        "CNB_PREPARER_PRE_BUILDPACKS": "heroku/python",
        "CNB_PREPARER_ENV_FILES": f'{tmp_path}/a.env,"{tmp_path}/b,c.env"',
    }
    assert preparer(env=env).code == 0
    assert order_ids(layout) == [["heroku/python", "heroku/nodejs", "heroku/procfile"]]
    assert env_files(layout) == {"A": "1", "B": "2"}
    assert preparer("-buildpack", "examples/node", env=env).code == 0
    assert order_ids(layout) == [["heroku/python", "examples/node"]]


def test_a_replaced_entry_is_a_warning_naming_the_flag_and_the_report_says_what_is_in_force(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    project = (
        GROUP_NODE
        + '[[io.buildpacks.group]]\nuri = "heroku/python"\n'
        + '[[io.buildpacks.build.env]]\nname = "NODE_ENV"\nvalue = "development"\n'
        + '[[io.buildpacks.build.env]]\nname = "KEPT"\nvalue = "1"\n'
    )
    report = tmp_path / "report.toml"
    result = preparer(
        "-b", "heroku/nodejs", "-e", "NODE_ENV=production", "-e", "SECRET", "-prepare-report", str(report),
        project=project, env={"SECRET": "s3cr3t"},
    )  # fmt: skip
    assert result.code == 0, result.stderr
    assert result.warnings == [
        (
            "Warning: io.buildpacks.group[0] is not applied by the preparer: -buildpack replaces io.buildpacks.group, "
            "as pack's does"
        ),
        (
            "Warning: io.buildpacks.group[1] is not applied by the preparer: -buildpack replaces io.buildpacks.group, "
            "as pack's does"
        ),
        "Warning: io.buildpacks.build.env[0] is not applied by the preparer: -env[0] sets NODE_ENV over it",
    ]
    doc = tomllib.loads(report.read_text())
    assert doc["effective"]["group"] == [{"uri": "heroku/nodejs"}]
    assert doc["effective"]["build"]["env"] == [
        {"name": "KEPT", "value": "1"},
        {"name": "NODE_ENV", "from": "-env[0]"},
        {"name": "SECRET", "from": "-env[1]"},
    ]
    assert "s3cr3t" not in report.read_text()
    assert {
        "key": "io.buildpacks.group[1]",
        "reason": "-buildpack replaces io.buildpacks.group, as pack's does",
    } in (doc["unapplied"])
    assert env_files(layout) == {"KEPT": "1", "NODE_ENV": "production", "SECRET": "s3cr3t"}


def test_the_dry_run_says_where_each_entry_comes_from(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    project = HEAD + '[[io.buildpacks.pack.group]]\nid = "examples/node"\n'
    pack = tmp_path / "pack.toml"
    pack.write_text(
        '[[pack.post.group]]\nid = "heroku/procfile"\n[[pack.build.env]]\nname = "A"\nvalue = "1"\n'
    )
    (tmp_path / "ci.env").write_text("B=2\n")
    flags = ("-platform-namespace", "io.buildpacks.pack", "-platform-config", str(pack), "-dry-run")
    result = preparer(*flags, "-pre-buildpack", "heroku/python", "-env-file", str(tmp_path / "ci.env"),
                      "-e", "C=3", project=project)  # fmt: skip
    assert result.code == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(("    from:", "  would write"))]
    assert lines == [
        "    from: -pre-buildpack[0]",
        "    from: io.buildpacks.pack.group[0] in project.toml",
        "    from: pack.post.group[0] in pack.toml",
        f"  would write {layout.layers}/order.toml",
        f"  would write {layout.platform}/env/A",
        "    from: pack.build.env[0]",
        f"  would write {layout.platform}/env/B",
        f"    from: {tmp_path}/ci.env:1",
        f"  would write {layout.platform}/env/C",
        "    from: -env[0]",
    ]
    around = preparer("-post-buildpack", "heroku/procfile", "-dry-run")
    assert (
        f"  group: each of the 2 groups of the builder's order (from {layout.order})"
        in around.stdout.splitlines()
    )


def test_the_policy_decides_a_list_s_entries_as_a_descriptor_s(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, http_server: FileServer
) -> None:
    make_tgz(http_server.root / "bp.tgz", "acme/http", "1.0.0")
    policy = tmp_path / "policy.toml"
    policy.write_text('[sources]\nallow = ["builder"]\n[env]\ndeny = ["LD_*"]\n')
    before = listing(layout.buildpacks)
    source = preparer("-policy", str(policy), "-buildpack", "heroku/nodejs", "-b", http_server.url("bp.tgz"))
    assert source.code == 3
    assert source.stderr.splitlines()[-1].startswith(
        f'ERROR: failed to prepare: -buildpack[1] (uri = "{http_server.url("bp.tgz")}" as written) is not allowed '
        "by the platform policy: "
    )
    env = preparer("-policy", str(policy), "-env", "LD_PRELOAD=/x.so")
    assert env.code == 3
    assert "-env[0]" in env.stderr.splitlines()[-1] and "LD_PRELOAD" in env.stderr.splitlines()[-1]
    assert unchanged(layout, before)
    assert http_server.requests == []


def test_the_provenance_records_the_lists_as_given_without_credentials_or_values(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, http_server: FileServer
) -> None:
    make_tgz(http_server.root / "bp.tgz", "acme/http", "1.0.0")
    url = http_server.url("bp.tgz").replace("http://", "http://bot:hunter2@")
    (tmp_path / "ci.env").write_text("A=1\n")
    out = tmp_path / "provenance.json"
    result = preparer(
        "-provenance", str(out), "-b", f"heroku/nodejs,{url}", "-post-buildpack", "heroku/procfile",
        "-env", "TOKEN=hunter3", "-env-file", str(tmp_path / "ci.env"),
    )  # fmt: skip
    assert result.code == 0, result.stderr
    text = out.read_text()
    assert "hunter2" not in text and "hunter3" not in text
    external = json.loads(text)["predicate"]["buildDefinition"]["externalParameters"]
    import hashlib

    assert external["lists"] == {
        "buildpack": ["heroku/nodejs", http_server.url("bp.tgz")],
        "post-buildpack": ["heroku/procfile"],
        "env": ["TOKEN"],
        "env-file": [
            {"path": "ci.env", "sha256": hashlib.sha256(b"A=1\n").hexdigest()}
        ],  # outside <app>: by name
    }
    assert [e["entry"] for e in external["buildpacks"]["group"]] == ["-buildpack[0]", "-buildpack[1]"]
    assert [e["entry"] for e in external["buildpacks"]["post"]] == ["-post-buildpack[0]"]


def test_from_builder_is_refused_by_name_with_the_flags_that_do_the_same(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    result = preparer("-buildpack", "heroku/python", "-buildpack", "from=builder")
    assert result.code == 3
    assert result.stderr.splitlines()[-1].startswith(
        "ERROR: failed to validate -buildpack: -buildpack[1] 'from=builder': pack's splice of the builder's order, "
        "which the preparer does not read: without -buildpack, -pre-buildpack and -post-buildpack wrap every group "
        "of the builder's order"
    )
    wrapped = preparer("-pre-buildpack", "heroku/python")
    assert wrapped.code == 0
    assert order_ids(layout) == [
        ["heroku/python", "examples/node", "examples/npm", "examples/procfile"],
        ["heroku/python", "examples/python", "examples/procfile"],
    ]


def test_every_problem_of_the_lists_and_the_files_is_said_in_one_run(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    project = HEAD + '[[io.buildpacks.pre.group]]\nuri = "ftp://host/bp.tgz"\n[io.buildpacks]\ninclude = 1\n'
    result = preparer("-buildpack", "ftp://host/x.tgz", "-env", "=1", project=project)
    assert result.code == 3
    errors = [
        line.split(":", 2)[1].strip() for line in result.stderr.splitlines() if line.startswith("ERROR:")
    ]
    assert errors == [
        "failed to validate -buildpack",
        "failed to validate -env",
        f"failed to validate {layout.app}/project.toml",
        f"failed to validate {layout.app}/project.toml",
    ]


def test_a_credential_in_a_list_s_value_is_never_shown_whatever_the_mistake(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    url = "https://bot:hunter2@host.example/a?token=hunter3"
    for args, env, code, said in (
        (
            ["-buildpack", f"{url},b.tgz"],
            {},
            1,
            "Warning: -buildpack 'https://host.example/a,b.tgz' is read as 2",
        ),
        (["-buildpack", f'{url}"x'], {}, 2, 'invalid value "https://host.example/a" for flag -buildpack'),
        (
            [],
            {"CNB_PREPARER_BUILDPACKS": f'"{url}'},
            3,
            "CNB_PREPARER_BUILDPACKS='\"https://host.example/a' is",
        ),
        (
            ["-env", "NPM TOKEN=hunter2"],
            {},
            3,
            "-env[0] 'NPM TOKEN=…': the name 'NPM TOKEN' holds white space",
        ),
        (
            ["-buildpack", "ftp://bot:hunter2@host/x.tgz"],
            {},
            3,
            "-buildpack[0] 'ftp://host/x.tgz': unsupported",
        ),
    ):
        result = preparer(*args, env=env)
        assert result.code == code, (args, result.stderr)
        assert said in result.stderr, result.stderr
        assert "hunter" not in result.stderr + result.stdout


def test_an_at_with_nothing_after_it_is_exit_3_never_the_tag_latest(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    # Read on, 'examples/node@' and 'docker://corp/bp@' were the image ...:latest, downloaded from Docker Hub; pack
    # and go-containerregistry read no image of either.
    before = listing(layout.buildpacks)
    forms = (
        "; -buildpack takes <id>[@<version>], urn:cnb:builder:<id>, urn:cnb:registry:<id>, docker://<image>, an "
        "image, an http(s) or file URL, or a path from <app>"
    )
    bare = "nothing follows '@': write <id>@<version>, an image's @sha256:<digest>, or no '@'"
    for value, cause in (
        ("examples/node@", bare),
        ("docker://corp/bp@", "nothing follows '@': give a digest (@sha256:<64 hex digits>) or no '@'"),
        ("registry.example/corp/bp:v1@", bare),
    ):
        for flags in (["-buildpack", value], ["-dry-run", "-buildpack", value]):
            result = preparer(*flags, project=GROUP_NODE)
            assert (result.code, result.stderr.splitlines()[-1]) == (
                3, f"ERROR: failed to validate -buildpack: -buildpack[0] '{value}': {cause}{forms}"
            ), result.stderr  # fmt: skip
            assert "would download" not in result.stdout
            assert unchanged(layout, before)
    described = preparer(project=HEAD + '[[io.buildpacks.group]]\nuri = "docker://corp/bp@"\n')
    assert described.code == 3
    assert "nothing follows '@'" in described.stderr


def test_a_password_written_into_an_image_reference_is_refused_and_never_shown(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    # Written as a git or https URL takes them, 'docker://bot:hunter2@ghcr.io/...' was shown whole in the error, the
    # report's [error] and every message naming the entry.
    before = listing(layout.buildpacks)
    report = layout.root / "report.toml"
    refused = (
        "an image reference takes no user name or password: give the registry's credentials in CNB_REGISTRY_AUTH "
        "or a Docker config.json (DOCKER_CONFIG)"
    )
    for value, shown in (
        ("docker://bot:hunter2@ghcr.io/corp/bp", "docker://ghcr.io/corp/bp"),
        (
            "docker://bot:hun@ter2@ghcr.io/corp/bp@sha256:" + "0" * 64,
            "docker://ghcr.io/corp/bp@sha256:" + "0" * 64,
        ),
    ):
        for dry in ([], ["-dry-run"]):
            result = preparer(*dry, "-buildpack", value, "-prepare-report", str(report))
            assert result.code == 3, result.stderr
            assert f"-buildpack[0] '{shown}': {refused}" in result.stderr.splitlines()[-1]
            assert "hunter" not in result.stdout + result.stderr + report.read_text()
            assert unchanged(layout, before)
        described = preparer(
            "-prepare-report", str(report), project=f'{HEAD}[[io.buildpacks.group]]\nuri = "{value}"\n'
        )
        assert described.code == 3
        assert refused in described.stderr
        assert "hunter" not in described.stdout + described.stderr + report.read_text()


def test_an_empty_item_of_a_list_s_variable_is_exit_3_naming_the_variable_not_a_flag(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    # "$BASE,$EXTRA" with EXTRA unset: the user wrote a variable, and was told of -buildpack[1] or -env-file[1].
    (tmp_path / "a.env").write_text("A=1\n")
    before = listing(layout.buildpacks)
    for name, value, position, what in (
        ("CNB_PREPARER_BUILDPACKS", "heroku/nodejs,", 2, "a buildpack"),
        ("CNB_PREPARER_PRE_BUILDPACKS", ",heroku/python", 1, "a buildpack"),
        ("CNB_PREPARER_POST_BUILDPACKS", "heroku/procfile,,heroku/python", 2, "a buildpack"),
        ("CNB_PREPARER_ENV_FILES", f"{tmp_path}/a.env,", 2, "a file"),
    ):
        result = preparer(env={name: value}, project=GROUP_NODE)
        said = (
            f"ERROR: failed to resolve inputs: {name}={value!r}: item {position} is empty: name {what} in each item "
            "(comma-separated), or leave the variable unset"
        )
        assert (result.code, result.stderr.splitlines()[-1]) == (3, said), result.stderr
        assert "Traceback" not in result.stderr
        assert unchanged(layout, before)


def test_an_env_name_longer_than_a_file_name_can_be_is_exit_3_in_a_dry_run_too(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    # It names <platform>/env/<NAME>: read on, the dry run said all was well and the run failed at its commit,
    # exit 1, "File name too long". 86 euro signs are 258 bytes: the bound is the file system's, in bytes.
    before = listing(layout.buildpacks)
    for name in ("A" * 256, "€" * 86):
        said = (
            f"env name '{name[:32]}…' is {len(name.encode())} bytes long: it names a file in <platform>/env, and a "
            "file's name holds at most 255 bytes"
        )
        for dry in ([], ["-dry-run"]):
            result = preparer(*dry, "-env", f"{name}=1", project=GROUP_NODE)
            assert (result.code, result.stderr.splitlines()[-1]) == (
                3, f"ERROR: failed to validate -env: -env[0] '{name}=…': {said}; -env takes {ENV_FORMS}"
            ), result.stderr  # fmt: skip
            assert unchanged(layout, before)
        described = preparer(project=f'{HEAD}[[io.buildpacks.build.env]]\nname = "{name}"\nvalue = "1"\n')
        assert described.code == 3, described.stderr
        assert said in described.stderr
        assert unchanged(layout, before)
    assert preparer("-env", f"{'A' * 255}=1", project=GROUP_NODE).code == 0  # as long as it can be


def test_a_path_from_home_written_in_quotes_says_no_shell_expands_it(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    # -buildpack "~/bp" (quoted, or from a variable): no shell expands it; it was "'~/bp' is not a valid repository".
    result = preparer("-buildpack", "~/bp", project=GROUP_NODE)
    assert result.code == 3
    assert result.stderr.splitlines()[-1].startswith(
        "ERROR: failed to validate -buildpack: -buildpack[0] '~/bp': '~' is not expanded (no shell reads the value): "
        "write the path absolute, or relative; -buildpack takes"
    ), result.stderr
    described = preparer(project=f'{HEAD}[[io.buildpacks.group]]\nuri = "~/bp"\n')
    assert described.code == 3
    assert "'~' is not expanded (no shell reads the value): write the path absolute" in described.stderr
