"""Words a user can act on (docs/messages.md): each mistake made as a user makes it, through the real CLI, and the
message read as they read it."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from preparer import check_descriptor
from preparer.fetch.locator import ACCEPTED
from tests.golden import Layout, listing
from tests.plugins.cli import Result
from tests.plugins.http_server import RATE_LIMITED, FileServer, Stalling, stalling
from tests.plugins.registry import PASSWORD, USER, Registry
from tests.projects import HEAD, group


def descriptor_error(result: Result, layout: Layout) -> str:
    """The one error line of a run refused for its descriptor (exit 3, nothing written), without its head."""
    assert result.code == 3, result.stderr
    assert not layout.platform.exists() and listing(layout.layers) == []
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("ERROR: ")]
    return line.removeprefix("ERROR: ")


def test_a_table_declared_twice_is_named_as_written_with_its_first_line(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    text = HEAD + '[io.buildpacks]\ninclude = ["src"]\n\n[io.buildpacks]\nexclude = ["tmp"]\n'
    result = preparer(project=text)
    assert descriptor_error(result, layout) == (
        f"failed to parse project descriptor: {layout.app / 'project.toml'}: the table [io.buildpacks] is "
        "declared twice, first at line 3 (at line 6, column 15)"
    )
    assert "('io', 'buildpacks')" not in result.stderr


def test_a_table_declared_again_after_another_table_is_named_with_its_first_line(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    text = (
        HEAD
        + '[io.buildpacks]\ninclude = ["src"]\n\n[_.metadata]\nx = 1\n\n[io.buildpacks]\nexclude = ["t"]\n'
    )
    assert descriptor_error(preparer(project=text), layout) == (
        f"failed to parse project descriptor: {layout.app / 'project.toml'}: the table [io.buildpacks] is "
        "declared twice, first at line 3 (at line 9, column 15)"
    )


def test_an_array_of_tables_after_an_array_given_whole_says_which_line_gave_it(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    text = (
        HEAD + '[io.buildpacks]\ngroup = [{ id = "heroku/python" }]\n\n[[io.buildpacks.group]]\nid = "x/y"\n'
    )
    assert descriptor_error(preparer(project=text), layout) == (
        f"failed to parse project descriptor: {layout.app / 'project.toml'}: [[io.buildpacks.group]]: "
        "io.buildpacks.group is an array, given whole at line 4; add the entry to it there, or write every entry "
        "as [[io.buildpacks.group]] (at line 6, column 22)"
    )


#: Each file a run reads as TOML, with a table given twice in it: (its flag, its text, how errors name it).
TWICE = {
    "platform": (
        ("-platform-namespace", "acme", "-platform-config"),
        '[acme.buildpacks]\ninclude = ["a"]\n\n[other]\nx = 1\n\n[acme.buildpacks]\nexclude = ["b"]\n',
        (
            "failed to parse platform config: {path}: the table [acme.buildpacks] is declared twice, first at line 1 "
            "(at line 7, column 17)"
        ),
    ),
    "policy": (
        ("-policy",),
        '[sources]\nallow = ["*"]\n\n[limits]\n\n[sources]\ndeny = []\n',
        "failed to read policy {path}: the table [sources] is declared twice, first at line 1 (at line 6, column 9)",
    ),
    "lock": (
        ("-lock",),
        'lock-version = 1\n\n[target]\nos = "linux"\n\n[x]\n\n[target]\narch = "amd64"\n',
        (
            "failed to parse lock file: {path}: the table [target] is declared twice, first at line 3 (at line 8, "
            "column 8)"
        ),
    ),
}


@pytest.mark.parametrize("kind", TWICE)
def test_a_table_declared_twice_in_any_file_is_named_as_written(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, kind: str
) -> None:
    flags, text, message = TWICE[kind]
    path = tmp_path / f"{kind}.toml"
    path.write_text(text)
    result = preparer(*flags, str(path), project=group("examples/node"))
    assert result.code == 3, result.stderr
    assert result.stderr.splitlines()[-1] == "ERROR: " + message.format(path=path)
    assert "('" not in result.stderr  # never tomli's tuple
    assert listing(layout.layers) == [] and not layout.platform.exists()


def test_a_key_given_twice_is_named_with_its_table(preparer: Callable[..., Result], layout: Layout) -> None:
    text = HEAD + '[[io.buildpacks.group]]\nid = "heroku/python"\nid = "heroku/procfile"\n'
    assert descriptor_error(preparer(project=text), layout) == (
        f"failed to parse project descriptor: {layout.app / 'project.toml'}: the key id is given twice in "
        "[[io.buildpacks.group]], first at line 4 (at line 5, column 23)"
    )


def test_a_key_added_to_an_inline_table_says_where_to_write_it(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    text = HEAD + '[io.buildpacks]\nbuild = { env = [] }\nbuild.exclude = ["x"]\n'
    assert descriptor_error(preparer(project=text), layout) == (
        f"failed to parse project descriptor: {layout.app / 'project.toml'}: build.exclude: io.buildpacks.build "
        "is an inline table, given whole at line 4; write the key in it there (at line 5, column 22)"
    )


@pytest.mark.parametrize(
    ("written", "column", "named"),
    [
        ("schema-version = \u201c0.2\u201d", 18, "U+201C (LEFT DOUBLE QUOTATION MARK), not '\"'"),
        ("schema-version = \u20180.2\u2019", 18, 'U+2018 (LEFT SINGLE QUOTATION MARK), not "\'"'),
        ('schema-version =\u00a0"0.2"', 17, "U+00A0 (NO-BREAK SPACE), not ' '"),
    ],
)
def test_a_look_alike_character_is_named_with_its_line(
    preparer: Callable[..., Result], layout: Layout, written: str, column: int, named: str
) -> None:
    (layout.app / "project.toml").write_text(f"[_]\n{written}\n", encoding="utf-8")
    assert descriptor_error(preparer(), layout) == (
        f"failed to parse project descriptor: {layout.app / 'project.toml'}: Invalid value (at line 2, column "
        f"{column}): the character at fault is {named}"
    )


def test_a_cyrillic_letter_in_an_id_is_named_with_its_line(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    text = HEAD + '[[io.buildpacks.group]]\nid = "heroku/pyth\u043en"\n'
    assert descriptor_error(preparer(project=text), layout) == (
        f"failed to validate {layout.app / 'project.toml'}: io.buildpacks.group[0].id: 'heroku/pyth\u043en' is "
        "not a valid buildpack id: its character '\u043e' is U+043E (CYRILLIC SMALL LETTER O), not a Latin letter "
        "(line 4)"
    )


def test_an_id_at_a_version_not_installed_lists_the_versions_found(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer
) -> None:
    (http_server.root / "index").mkdir()  # a buildpack registry index without examples/node
    index = ("-buildpack-registry-index", http_server.url("index"))
    result = preparer(*index, project=group("examples/node@1.1.0"))
    assert result.code == 1, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to find buildpack examples/node@1.1.0: not in {layout.buildpacks} (found: 1.0.0, 1.2.0, "
        f"1.2.0-rc.1), not in the buildpack registry {http_server.url('index')}, and an image reference cannot "
        "name a version with '@'"
    )
    # As the id + version form says it:
    by_version = preparer(project=HEAD + '[[io.buildpacks.group]]\nid = "examples/node"\nversion = "1.1.0"\n')
    assert "(found: 1.0.0, 1.2.0, 1.2.0-rc.1)" in by_version.stderr


def test_the_dry_run_of_an_id_at_a_version_not_installed_lists_the_versions_found(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer
) -> None:
    index = ("-buildpack-registry-index", http_server.url("index"))
    result = preparer("-dry-run", *index, project=group("examples/node@1.1.0", "examples/other@1.0.0"))
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert (
        "  group: examples/node@1.1.0 (not in <buildpacks> (found: 1.0.0, 1.2.0, 1.2.0-rc.1): would look it up in "
        "the buildpack registry)"
    ) in lines
    assert (
        "  group: examples/other@1.0.0 (not in <buildpacks>: would look it up in the buildpack registry)"
        in lines
    )
    assert "pull it as an image" not in result.stdout  # an image reference cannot name a version with '@'
    assert http_server.requests == [] and listing(layout.layers) == []


@pytest.mark.parametrize("dry_run", [(), ("-dry-run",)], ids=["run", "dry-run"])
def test_a_builder_urn_at_a_version_not_installed_lists_the_versions_found(
    preparer: Callable[..., Result], layout: Layout, dry_run: tuple[str, ...]
) -> None:
    result = preparer(*dry_run, project=group("urn:cnb:builder:examples/node@1.1.0"))
    assert result.code == 1, result.stderr
    assert result.stderr.splitlines()[-1] == (
        "ERROR: failed to resolve io.buildpacks.group[0] (examples/node): version '1.1.0' of 'examples/node' was not "
        f"found in {layout.buildpacks} (found: 1.0.0, 1.2.0, 1.2.0-rc.1)"
    )
    assert listing(layout.layers) == []


def test_an_id_at_a_version_lists_the_versions_found_when_the_registry_cannot_be_read(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    index = ("-buildpack-registry-index", "http://registry-index.invalid/index")
    result = preparer(*index, project=group("examples/node@1.1.0"))
    assert result.code == 1, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to find buildpack examples/node@1.1.0: not in {layout.buildpacks} (found: 1.0.0, 1.2.0, "
        "1.2.0-rc.1); failed to look up examples/node in the buildpack registry http://registry-index.invalid/index:"
        " could not resolve host registry-index.invalid"
    )


def test_a_mistyped_key_of_the_underscore_table_says_which_it_is_near(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    project = '[_]\nschema-verison = "0.2"\nsource-ulr = "https://example.com/app"\n'
    result = preparer(project=project + '[[io.buildpacks.group]]\nid = "heroku/python"\n')
    assert result.code == 0, result.stderr
    assert result.warnings == [
        "Warning: No schema version declared in project.toml, reading [io.buildpacks] as schema version 0.2",
        "Warning: _.schema-verison is not read: did you mean _.schema-version?",
        "Warning: _.source-ulr is not read: did you mean _.source-url?",
    ]


@pytest.mark.parametrize(
    ("flag", "meant"),
    [("-locked", "-lock"), ("-require-locks", "-require-lock"), ("-dryrun", "-dry-run"), ("-App", "-app")],
)
def test_a_mistyped_flag_says_which_it_is_near_and_exits_2_as_go_does(
    preparer: Callable[..., Result], layout: Layout, flag: str, meant: str
) -> None:
    result = preparer(flag, "x", project=group("heroku/python"))
    assert result.code == 2
    assert result.stderr.splitlines() == [
        f"flag provided but not defined: {flag} (did you mean {meant}?)",
        "Usage: preparer [flags] [<image>] (see -h)",
    ]
    assert listing(layout.layers) == []


def test_a_flag_near_none_gets_no_guess(preparer: Callable[..., Result]) -> None:
    result = preparer("-frobnicate")
    assert (result.code, result.stderr.splitlines()[0]) == (2, "flag provided but not defined: -frobnicate")


#: ``uri`` schemes that do not exist, each with what a run says of it.
MISSPELLED = [
    ("htps://example.com/bp.tgz", "unsupported protocol 'htps' (did you mean https://?)"),
    ("urn:cnb:buidler:heroku/python", "unsupported URN 'urn:cnb:buidler:' (did you mean urn:cnb:builder:?)"),
    ("urn:cnb:registy:heroku/python", "unsupported URN 'urn:cnb:registy:' (did you mean urn:cnb:registry:?)"),
    ("docker:/example.com/bp", "'docker:/' has one slash: did you mean docker://?"),
    ("s3://bucket/bp.tgz", f"unsupported protocol 's3' (a uri is {ACCEPTED})"),
    ("gitlab://group/project", f"unsupported protocol 'gitlab' (a uri is {ACCEPTED})"),
    ("my_scm://group/project", f"unsupported protocol 'my_scm' (a uri is {ACCEPTED})"),
]


def test_every_uri_scheme_that_does_not_exist_is_named_in_one_run_and_by_the_check(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    text = group(*(uri for uri, _ in MISSPELLED))
    result = preparer(project=text)
    descriptor = layout.app / "project.toml"
    expected = [
        f"failed to validate {descriptor}: io.buildpacks.group[{n}].uri '{uri}': {why}"
        for n, (uri, why) in enumerate(MISSPELLED)
    ]
    assert result.code == 3
    assert result.stderr.splitlines() == [f"ERROR: {line}" for line in expected]
    assert listing(layout.layers) == [] and not layout.platform.exists()
    assert [p.message for p in check_descriptor(descriptor)] == expected
    assert [p.line for p in check_descriptor(text=text)] == [4, 6, 8, 10, 12, 14, 16]


def test_the_credentials_hint_names_the_paths_tried(
    preparer: Callable[..., Result], auth_registry: Registry, tmp_path: Path
) -> None:
    config = tmp_path / "docker"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"auths": {"other.example.com": {"auth": "eDp5"}}}))
    result = preparer(
        project=group(f"docker://{auth_registry.ref('me/anything')}"),
        env={"DOCKER_CONFIG": str(config), "CNB_REGISTRY_AUTH": "{}"},
    )
    assert result.code == 1
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to pull {auth_registry.host}/me/anything: unauthorized anonymously (UNAUTHORIZED: "
        f"authentication required): no credentials for {auth_registry.host} in CNB_REGISTRY_AUTH (no entry for "
        f"{auth_registry.host}) or {config / 'config.json'} ($DOCKER_CONFIG/config.json: no entry for "
        f"{auth_registry.host} in auths or credHelpers, and no credsStore)"
    )


def test_a_docker_config_variable_naming_the_file_is_a_warning_and_named_in_the_hint(
    preparer: Callable[..., Result], auth_registry: Registry, tmp_path: Path
) -> None:
    config = tmp_path / "docker" / "config.json"  # DOCKER_CONFIG names the directory, not the file
    config.parent.mkdir()
    config.write_text(json.dumps({"auths": {auth_registry.host: {"username": USER, "password": PASSWORD}}}))
    refs = [f"docker://{auth_registry.ref(f'me/{name}')}" for name in ("one", "two")]
    result = preparer(project=group(*refs), env={"DOCKER_CONFIG": str(config)})
    assert result.code == 1
    assert result.warnings == [
        (
            f"Warning: DOCKER_CONFIG {config} is not a directory: it names the directory that holds config.json, "
            f"so no registry credentials are read from {config / 'config.json'}"
        )
    ]  # once, though two images were asked for
    assert (
        f"no credentials for {auth_registry.host} in CNB_REGISTRY_AUTH (not set) or {config / 'config.json'} "
        "($DOCKER_CONFIG/config.json: DOCKER_CONFIG is not a directory: set it to the directory that holds "
        "config.json)"
    ) in result.stderr


# The network causes reach every path


def test_a_connection_reset_says_how_much_arrived(preparer: Callable[..., Result]) -> None:
    with stalling(Stalling(mode="reset", length=100_000)) as server:
        url = f"http://{server.host}/bp.tgz"
        result = preparer(project=group(url))
    assert result.code == 1
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to download {url}: the connection to 127.0.0.1 was reset after 50000 of 100000 bytes "
        "(after 4 attempts)"
    )
    assert len(server.paths) == 4  # retried: a reset is often a proxy or a server restarting


def test_a_redirect_to_a_malformed_url_is_named(
    preparer: Callable[..., Result], http_server: FileServer
) -> None:
    http_server.redirect("bp.tgz", "http://[::1/bp.tgz")
    result = preparer(project=group(http_server.url("bp.tgz")))
    assert result.code == 1
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to download {http_server.url('bp.tgz')}: the server redirects to a URL that is refused: "
        "its IPv6 host has no closing ']'"
    )
    assert "does not foresee" not in result.stderr


def test_a_token_endpoints_own_words_are_shown(
    preparer: Callable[..., Result], http_server: FileServer
) -> None:
    http_server.challenges["/v2/lib/limited/manifests/1"] = (
        f'Bearer realm="{http_server.url("token")}",service="127.0.0.1"'
    )
    http_server.fail("token", "429")
    result = preparer(project=group(f"docker://127.0.0.1:{http_server.port}/lib/limited:1"))
    assert result.code == 1
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to authenticate to 127.0.0.1:{http_server.port}: the token endpoint: HTTP 429 Too Many "
        f"Requests (TOOMANYREQUESTS: {RATE_LIMITED})"
    )


@pytest.mark.parametrize(
    ("status", "kind", "body", "said"),
    [
        (
            401,
            "application/json",
            b'{"details": "incorrect username or password"}',
            "HTTP 401: incorrect username or password",
        ),
        (
            403,
            "application/json",
            b'{"errors": [{"code": "DENIED", "message": "requested access is denied"}]}',
            "HTTP 403: DENIED: requested access is denied",
        ),
        (
            403,
            "text/plain",
            b"no \x07pulls for you " * 40,
            "HTTP 403: " + ("no pulls for you " * 40)[:299] + "\u2026",
        ),
        (401, "text/html", b"<html><body>Unauthorized</body></html>", "HTTP 401"),
    ],
    ids=["details", "errors", "plain-text", "html"],
)
def test_a_token_endpoints_refusal_is_said_in_its_own_words(
    preparer: Callable[..., Result], http_server: FileServer, status: int, kind: str, body: bytes, said: str
) -> None:
    host = f"127.0.0.1:{http_server.port}"
    http_server.challenges["/v2/lib/private/manifests/1"] = f'Bearer realm="{http_server.url("token")}"'
    http_server.answers["/token"] = (status, kind, body)
    secret = "Basic " + base64.b64encode(b"me:wrong-password").decode()
    result = preparer(
        project=group(f"docker://{host}/lib/private:1"), env={"CNB_REGISTRY_AUTH": json.dumps({host: secret})}
    )
    assert result.code == 1, result.stderr
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to pull {host}/lib/private: unauthorized with credentials from CNB_REGISTRY_AUTH (the token "
        f"endpoint answered {said})"
    )
    assert "wrong-password" not in result.stderr and secret.split()[1] not in result.stderr


def test_a_basic_challenge_says_where_credentials_for_the_host_are_read(
    preparer: Callable[..., Result], http_server: FileServer, tmp_path: Path
) -> None:
    http_server.challenges["/bp.tgz"] = 'Basic realm="files"'
    url = http_server.url("bp.tgz")
    result = preparer(project=group(url))
    assert result.code == 1
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to download {url}: HTTP 401 Unauthorized: 127.0.0.1 asks for a user and password (Basic), "
        f"and none was sent: they are read from the URL (http://USER:PASSWORD@127.0.0.1:{http_server.port}/...) "
        "or from a netrc file ($NETRC or $HOME/.netrc, machine 127.0.0.1)"
    )
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login me password wrong\n")
    refused = preparer(project=group(url), env={"NETRC": str(netrc)})
    assert refused.stderr.splitlines()[-1] == (
        f"ERROR: failed to download {url}: HTTP 401 Unauthorized: the credentials for machine 127.0.0.1 in "
        f"{netrc} were refused"
    )
    assert "wrong" not in refused.stderr
    assert [status for _, status, _ in http_server.requests] == [401, 401]  # neither is retried
