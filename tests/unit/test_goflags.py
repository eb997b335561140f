"""Go ``flag``-package command lines: spellings, bools, repeatable flags, where parsing stops, errors, usage."""

from __future__ import annotations

import re

import pytest

from preparer.goflags import FLAGS, CsvError, FlagError, parse, parse_bool, parse_int, split_csv, usage

HINT = " (not a flag: flags go before the first positional argument)"


@pytest.mark.parametrize("argv", [["-app", "x"], ["-app=x"], ["--app", "x"], ["--app=x"]])
def test_four_spellings_of_a_value_flag(argv: list[str]) -> None:
    parsed = parse(argv)
    assert (parsed.values, parsed.positionals, parsed.warnings) == ({"app": "x"}, [], [])


def test_values_may_contain_equals_signs_and_look_like_flags() -> None:
    assert parse(["-app=a=b", "-layers", "-x", "-platform="]).values == {
        "app": "a=b",
        "layers": "-x",
        "platform": "",
    }


@pytest.mark.parametrize("spelling", ["1", "t", "T", "TRUE", "true", "True"])
def test_bool_true_spellings(spelling: str) -> None:
    assert parse([f"-daemon={spelling}"]).values == {"daemon": True}
    assert parse_bool(spelling) is True


@pytest.mark.parametrize("spelling", ["0", "f", "F", "FALSE", "false", "False"])
def test_bool_false_spellings(spelling: str) -> None:
    assert parse([f"--skip-restore={spelling}"]).values == {"skip-restore": False}
    assert parse_bool(spelling) is False


@pytest.mark.parametrize("spelling", ["yes", "no", "tRuE", "", " true", "2"])
def test_other_bool_spellings_are_refused(spelling: str) -> None:
    assert parse_bool(spelling) is None
    with pytest.raises(
        FlagError,
        match=f'^invalid boolean value "{spelling}" for -daemon: parse error \\(use 1, t, T, TRUE, true, True or 0, f, F, FALSE, false, False\\)$',
    ):
        parse([f"-daemon={spelling}"])


def test_a_bool_flag_never_takes_the_next_argument() -> None:
    parsed = parse(["-daemon", "false", "-app", "x"])
    assert parsed.values == {"daemon": True}
    assert parsed.positionals == ["false", "-app", "x"]
    assert parsed.warnings == ["unconsumed flag-like positional arg: -app" + HINT]


def test_repeatable_flags_append_without_splitting_commas() -> None:
    parsed = parse(["-tag", "a", "-tag=b,c", "-insecure-registry", "r1", "--insecure-registry=r2"])
    assert parsed.values == {"tag": ["a", "b,c"], "insecure-registry": ["r1", "r2"]}


def test_the_last_value_of_a_single_flag_wins() -> None:
    assert parse(["-app", "a", "-app", "b", "-daemon", "-daemon=false"]).values == {
        "app": "b",
        "daemon": False,
    }


@pytest.mark.parametrize(
    ("argv", "positionals"),
    [
        (["img", "-app", "x"], ["img", "-app", "x"]),
        (["-app", "x", "--", "-layers", "y"], ["-layers", "y"]),
        (["-", "-app", "x"], ["-", "-app", "x"]),  # a lone dash is a positional argument
        (["-app", "x", ""], [""]),
    ],
)
def test_parsing_stops_at_the_first_positional_or_double_dash(
    argv: list[str], positionals: list[str]
) -> None:
    parsed = parse(argv)
    assert parsed.positionals == positionals
    assert parsed.warnings == [
        f"unconsumed flag-like positional arg: {arg}" + HINT for arg in positionals if arg.startswith("-")
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["-nope"], "flag provided but not defined: -nope"),
        (["--nope=1"], "flag provided but not defined: -nope"),
        (["-App", "x"], "flag provided but not defined: -App (did you mean -app?)"),
        (["-app"], "flag needs an argument: -app"),
        (["-tag"], "flag needs an argument: -tag"),
        (["---app"], "bad flag syntax: ---app"),
        (["-=x"], "bad flag syntax: -=x"),
        (["--=x"], "bad flag syntax: --=x"),
        (["-uid", "x"], 'invalid value "x" for flag -uid: parse error'),
        (["-gid= 1"], 'invalid value " 1" for flag -gid: parse error'),
        (
            ["-daemon=maybe"],
            'invalid boolean value "maybe" for -daemon: parse error (use 1, t, T, TRUE, true, True or 0, f, F, FALSE, false, False)',
        ),
    ],
)
def test_errors_read_as_go_writes_them(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as caught:
        parse(argv)
    assert str(caught.value) == message


def test_help_stops_parsing_as_go_does() -> None:
    for argv in (["-h"], ["--help"], ["-help=x"], ["-app", "x", "-h", "-nope"]):
        assert parse(argv).help
    with pytest.raises(FlagError):
        parse(["-nope", "-h"])
    assert not parse(["-app", "-h"]).help  # "-h" is the value of -app


def test_version_is_a_bool_flag() -> None:
    assert parse(["-version"]).values == {"version": True}
    assert parse(["-version=false"]).values == {"version": False}
    assert parse(["-layers", "-version"]).values == {"layers": "-version"}


@pytest.mark.parametrize(
    ("text", "number"),
    [
        ("1000", 1000), ("-1", -1), ("+7", 7), ("0", 0), ("010", 8), ("0o17", 15), ("0_17", 15),
        ("0x1F", 31), ("0X1f", 31), ("0b101", 5), ("-0x10", -16), ("1_000", 1000),
        ("9223372036854775807", (1 << 63) - 1), ("-9223372036854775808", -(1 << 63)),
    ],
)  # fmt: skip
def test_integers_as_go_parse_int_base_0(text: str, number: int) -> None:
    assert parse_int(text) == number


@pytest.mark.parametrize(
    "text", ["", "-", "x", "08", "1_", "_1", "1__0", " 5", "5 ", "٣", "1.0", "9223372036854775808", "0x"]
)
def test_integers_go_refuses(text: str) -> None:
    assert parse_int(text) is None


def test_every_flag_is_in_the_usage_with_its_environment_variable() -> None:
    text = usage()
    assert text.startswith("Usage: preparer [flags] [<image>]\n")
    for flag in FLAGS:
        assert f"  -{flag.name}" in text if flag.name else f"  {flag.env}\n" in text
        if flag.env and flag.name:
            assert f"(env {flag.env}" in text
    assert "  -uid int\n" in text and "  -tag value\n" in text and "  -daemon\n" in text


def test_every_creator_flag_is_accepted() -> None:
    # The lifecycle's creator flags (preparer/flags.py), so that its command line passes unchanged.
    creator = {
        "app", "buildpacks", "build-config", "cache-dir", "cache-image", "daemon", "gid", "uid", "insecure-registry",
        "launch-cache", "launcher", "launcher-sbom", "layers", "layout", "layout-dir", "log-level", "no-color",
        "order", "parallel", "platform", "previous-image", "process-type", "project-metadata", "report", "run",
        "run-image", "skip-restore", "stack", "system", "tag", "version", "extensions", "analyzed", "group", "plan",
    }  # fmt: skip
    assert creator <= {flag.name for flag in FLAGS if flag.name}
    bools = {flag.name for flag in FLAGS if flag.kind == "bool"}
    assert bools == {
        "daemon",
        "layout",
        "parallel",
        "skip-restore",
        "no-color",
        "dry-run",
        "version",
        "require-lock",
        "disable-system-buildpacks",
        "telemetry",
    }


def test_usage_shows_the_defaults() -> None:
    text = usage("preparer")
    assert '    \tapplication directory (env CNB_APP_DIR, default "/workspace")\n' in text
    assert '(env CNB_ORDER_PATH, default "/cnb/order.toml")' in text
    assert "  -tag value\n    \taccepted so that a creator command line works unchanged\n" in text


@pytest.mark.parametrize(
    ("value", "items"),
    [
        ("a", ["a"]),
        ("a,b", ["a", "b"]),
        ("a, b", ["a", " b"]),  # kept as written, as Go's reader keeps them
        ('"https://host/a,b.tgz",c', ["https://host/a,b.tgz", "c"]),
        ('"say ""hi""",x', ['say "hi"', "x"]),
        ("a,", ["a", ""]),
        (",", ["", ""]),
        ("", [""]),  # pflag reads none; the caller refuses it by name
        ("a\n", ["a"]),  # a line ending at the end is dropped, as Go drops it
        ('"a\nb"', ["a\nb"]),  # inside quotes a line break is the item's
    ],
)
def test_a_csv_value_is_read_as_go_s_encoding_csv_reads_one_record(value: str, items: list[str]) -> None:
    assert split_csv(value) == items


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ('a"b', 'parse error on line 1, column 2: bare " in non-quoted-field'),
        ('"ab', 'parse error on line 1, column 4: extraneous or missing " in quoted-field'),
        ('"a"b', 'parse error on line 1, column 3: extraneous or missing " in quoted-field'),
        ("a\nb", "a line break at column 2, outside double quotes"),
    ],
)
def test_a_value_go_s_csv_reader_refuses_is_exit_2_in_its_words(value: str, message: str) -> None:
    with pytest.raises(CsvError, match=f"^{re.escape(message)}$"):
        split_csv(value)
    with pytest.raises(FlagError) as raised:
        parse(["-buildpack", value])
    assert str(raised.value).startswith(f'invalid value "{value}" for flag -buildpack: {message} (')
    assert "an item with a comma or a quote is written in double quotes" in str(raised.value)


def test_buildpack_values_split_at_commas_and_append_the_others_do_not() -> None:
    parsed = parse(
        ["-buildpack", "a,b", "-b", '"c,d"', "--buildpack=e", "-pre-buildpack", "p,q", "-env", "A=1,2", "-e", "B",
         "-env-file", "x,y.env", "-post-buildpack=z"]
    )  # fmt: skip
    assert parsed.values == {
        "buildpack": ["a", "b", "c,d", "e"],
        "pre-buildpack": ["p,q"],
        "env": ["A=1,2", "B"],
        "env-file": ["x,y.env"],
        "post-buildpack": ["z"],
    }
    assert parsed.warnings == []


def test_a_value_that_splits_a_url_is_a_warning_showing_the_quoted_form() -> None:
    parsed = parse(["-buildpack", "https://host/a,b.tgz", "-buildpack", "https://host/x.tgz,heroku/nodejs"])
    assert parsed.values["buildpack"] == ["https://host/a", "b.tgz", "https://host/x.tgz", "heroku/nodejs"]
    assert parsed.warnings == [
        (
            "-buildpack 'https://host/a,b.tgz' is read as 2 buildpacks (https://host/a, b.tgz): a value is a "
            "comma-separated list, as pack reads it; a URL with a comma is written in double quotes: "
            "-buildpack '\"https://host/a,b.tgz\"'"
        )
    ]


def test_a_short_name_is_its_flag_and_a_typo_of_a_list_is_named() -> None:
    assert parse(["-b", "x", "-e", "A=1"]).values == {"buildpack": ["x"], "env": ["A=1"]}
    with pytest.raises(
        FlagError, match=r"^flag provided but not defined: -buildpak \(did you mean -buildpack\?\)$"
    ):
        parse(["-buildpak", "x"])
    with pytest.raises(FlagError, match=r"^flag needs an argument: -env-file$"):
        parse(["-env-file"])
    text = usage()
    assert (
        "  -buildpack value\n" in text and "-b for short" in text and "(env CNB_PREPARER_BUILDPACKS)" in text
    )
