"""The command line as platforms use it: Go flag syntax, environment, exit codes, output streams."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from preparer import __version__
from tests.golden import Layout, env_files
from tests.plugins.cli import Result, base_env, run_cli
from tests.plugins.http_server import FileServer

ENV_ONLY = '[_]\nschema-version = "0.2"\n[[io.buildpacks.build.env]]\nname = "A"\nvalue = "1"\n'


def test_version_and_help_need_no_platform_api(tmp_path: Path) -> None:
    env = base_env(tmp_path)
    del env["CNB_PLATFORM_API"]
    assert run_cli(["-version"], env) == Result(0, __version__ + "\n", "")
    shown = run_cli(["-h"], env)
    assert shown.code == 0 and "-project-descriptor string" in shown.stdout


@pytest.mark.parametrize(
    ("api", "message"),
    [
        (None, "ERROR: failed to get platform API version; please set 'CNB_PLATFORM_API' to specify the desired platform API version (supported: 0.7 to 0.15)"),
        ("abc", "ERROR: failed to parse platform API 'abc': supported: 0.7 to 0.15"),
        ("0.6", "ERROR: failed to set platform API: platform API version '0.6' is incompatible with the lifecycle; supported: 0.7 to 0.15"),
        ("1.0", "ERROR: failed to set platform API: platform API version '1.0' is incompatible with the lifecycle; supported: 0.7 to 0.15"),
    ],
)  # fmt: skip
def test_platform_api_is_checked_before_flags(tmp_path: Path, api: str | None, message: str) -> None:
    env = base_env(tmp_path)
    env.pop("CNB_PLATFORM_API")
    if api is not None:
        env["CNB_PLATFORM_API"] = api
    result = run_cli(["-not-a-flag"], env)
    assert (result.code, result.stderr) == (11, message + "\n")


@pytest.mark.parametrize("api", ["0.7", "0.12", "0.15", "v0.15"])
def test_supported_platform_apis(tmp_path: Path, api: str) -> None:
    env = base_env(tmp_path, CNB_PLATFORM_API=api, CNB_APP_DIR=str(tmp_path))
    assert run_cli([], env).code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-nope"], "flag provided but not defined: -nope"),
        (["-uid", "x"], 'invalid value "x" for flag -uid: parse error'),
        (
            ["-daemon=maybe"],
            'invalid boolean value "maybe" for -daemon: parse error (use 1, t, T, TRUE, true, True or 0, f, F, FALSE, false, False)',
        ),
        (["-app"], "flag needs an argument: -app"),
        (["---app", "x"], "bad flag syntax: ---app"),
    ],
)
def test_flag_syntax_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = run_cli(args, base_env(tmp_path))
    assert result.code == 2
    assert result.stderr.splitlines()[0] == message
    assert "Traceback" not in result.stderr


def test_every_go_spelling_of_a_flag(preparer: Callable[..., Result], layout: Layout, tmp_path: Path) -> None:
    (layout.app / "project.toml").write_text(ENV_ONLY)
    for spelling in (["-platform", "P"], ["-platform=P"], ["--platform", "P"], ["--platform=P"]):
        target = tmp_path / f"p{len(spelling)}{spelling[0][:3]}"
        args = [a.replace("P", str(target)) for a in spelling]
        assert preparer(*args).code == 0
        assert (target / "env" / "A").read_text() == "1"


def test_a_creator_command_line_is_accepted_unchanged(preparer: Callable[..., Result]) -> None:
    creator = [
        "-cache-dir", "/cache", "-cache-image", "reg/cache", "-daemon", "-gid", "1000", "-uid", "1000",
        "-launch-cache", "/launch-cache", "-launcher", "/cnb/lifecycle/launcher", "-log-level", "info",
        "-previous-image", "reg/app:prev", "-process-type", "web", "-project-metadata", "/layers/pm.toml",
        "-report", "/layers/report.toml", "-run-image", "reg/run", "-skip-restore=false", "-stack", "/cnb/stack.toml",
        "-tag", "reg/app:1", "-tag=reg/app:2", "-insecure-registry", "reg", "-parallel", "-run", "/cnb/run.toml",
        "-layout=false", "-layout-dir", "/layout", "-build-config", "/cnb/build-config", "-extensions", "/cnb/ext",
        "-system", "/cnb/system.toml", "-launcher-sbom", "/cnb/lifecycle", "reg/app:latest",
    ]  # fmt: skip
    result = preparer(*creator, project=ENV_ONLY)
    assert result.code == 0, result.stderr


def test_a_bool_flag_does_not_take_the_next_argument(preparer: Callable[..., Result]) -> None:
    # As in Go, `-skip-restore false` makes "false" the image and "reg/app" a second positional argument.
    result = preparer("-skip-restore", "false", "reg/app", project=ENV_ONLY)
    assert result.code == 3
    assert result.stderr.splitlines()[-1] == (
        "ERROR: failed to parse arguments: received 2 arguments, but expected at most 1"
    )


HINT = " (not a flag: flags go before the first positional argument)"


def test_flags_stop_at_the_first_positional(preparer: Callable[..., Result]) -> None:
    result = preparer("reg/app", "-dry-run", project=ENV_ONLY)
    assert result.code == 3
    assert result.warnings == ["Warning: unconsumed flag-like positional arg: -dry-run" + HINT]


def test_double_dash_ends_the_flags(preparer: Callable[..., Result], layout: Layout) -> None:
    # "-dry-run" after "--" is the image, not a flag: the run is real, with the lifecycle's warning (once).
    result = preparer("--", "-dry-run", project=ENV_ONLY)
    assert result.code == 0, result.stderr
    assert result.stderr == "Warning: unconsumed flag-like positional arg: -dry-run" + HINT + "\n"
    assert env_files(layout) == {"A": "1"}


@pytest.mark.parametrize(
    ("args", "code", "stdout"),
    [
        (["-version=true"], 0, __version__ + "\n"),
        (["--version"], 0, __version__ + "\n"),
        (["-h", "-nope"], 0, None),  # Go stops at -h
        (["--help"], 0, None),
        (["-version", "-nope"], 2, ""),  # Go reads every flag before acting on -version
        (["-nope", "-h"], 2, ""),
    ],
)
def test_version_and_help_are_flags_like_the_others(
    tmp_path: Path, args: list[str], code: int, stdout: str | None
) -> None:
    result = run_cli(args, base_env(tmp_path))
    assert result.code == code
    if stdout is None:
        assert result.stdout.startswith("Usage: preparer [flags] [<image>]\n")
    else:
        assert result.stdout == stdout
    if code == 2:
        assert result.stderr.splitlines() == [
            "flag provided but not defined: -nope",
            "Usage: preparer [flags] [<image>] (see -h)",
        ]


def test_a_flag_value_that_looks_like_version_is_a_value(
    preparer: Callable[..., Result], tmp_path: Path
) -> None:
    # "-version" is the value of -platform here, so the run happens and writes to a directory of that name.
    result = preparer("-platform", "-version", project=ENV_ONLY, cwd=tmp_path)
    assert result.code == 0, result.stderr
    assert (tmp_path / "-version" / "env" / "A").read_text() == "1"


def test_version_false_runs_the_phase(preparer: Callable[..., Result], layout: Layout) -> None:
    result = preparer("-version=false", project=ENV_ONLY)
    assert result.code == 0 and result.stdout.startswith("===> PREPARING")
    assert env_files(layout) == {"A": "1"}


def test_flags_beat_environment_beats_defaults(tmp_path: Path, layout: Layout) -> None:
    (layout.app / "project.toml").write_text(ENV_ONLY)
    env = base_env(
        tmp_path,
        CNB_APP_DIR=str(layout.app),
        CNB_PLATFORM_DIR=str(tmp_path / "from-env"),
        CNB_LAYERS_DIR=str(layout.layers),
        CNB_BUILDPACKS_DIR=str(layout.buildpacks),
        CNB_ORDER_PATH=str(layout.order),
    )
    assert run_cli([], env).code == 0
    assert (tmp_path / "from-env" / "env" / "A").exists()
    assert run_cli(["-platform", str(tmp_path / "from-flag")], env).code == 0
    assert (tmp_path / "from-flag" / "env" / "A").exists()


def test_streams_banner_and_no_colour_off_a_terminal(preparer: Callable[..., Result]) -> None:
    result = preparer(project=ENV_ONLY + '[io.buildpacks]\nbuilder = "x"\n')
    assert result.stdout.splitlines()[0] == "===> PREPARING"
    assert result.stderr == "Warning: io.buildpacks.builder is not applied by the preparer\n"
    assert "\033[" not in result.stdout + result.stderr


def test_log_level_filters(preparer: Callable[..., Result], tmp_path: Path) -> None:
    project = ENV_ONLY + '[io.buildpacks]\nbuilder = "x"\n'
    quiet = preparer("-log-level", "error", "-platform", str(tmp_path / "p1"), project=project)
    assert (quiet.code, quiet.stdout, quiet.stderr) == (0, "", "")
    warn = preparer("-log-level=warn", "-platform", str(tmp_path / "p2"), project=project)
    assert (warn.stdout, warn.warnings) == (
        "",
        ["Warning: io.buildpacks.builder is not applied by the preparer"],
    )
    bad = preparer("-log-level", "loud", project=project)
    assert bad.code == 3
    assert (
        bad.stderr.splitlines()[-1]
        == "ERROR: failed to parse log level: 'loud' is not one of debug, info, warn, error"
    )


def test_dry_run_prints_the_plan_and_changes_nothing(preparer: Callable[..., Result], layout: Layout) -> None:
    project = (
        '[_]\nschema-version = "0.2"\n[[io.buildpacks.group]]\nid = "examples/node"\n'
        + ENV_ONLY.split("\n", 2)[2]
    )
    result = preparer("-dry-run", project=project)
    assert result.code == 0
    assert "  group: examples/node@1.2.0 (present)" in result.stdout.splitlines()
    assert not (layout.layers / "order.toml").exists()
    assert env_files(layout) == {}


def test_a_broken_toml_file_names_file_line_and_column(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    result = preparer(project='[_]\nschema-version = "0.2"\n[io.buildpacks\n')
    assert result.code == 3
    assert result.stderr.splitlines()[-1] == (
        f"ERROR: failed to parse project descriptor: {layout.app}/project.toml: "
        "Expected ']' at the end of a table declaration (at line 3, column 15)"
    )


def test_platform_file_flags_and_env(preparer: Callable[..., Result], tmp_path: Path, layout: Layout) -> None:
    pack = tmp_path / "pack.toml"
    pack.write_text('[pack]\n[[pack.build.env]]\nname = "B"\nvalue = "2"\n')
    missing_ns = preparer("-platform-config", str(pack), project=ENV_ONLY)
    assert missing_ns.code == 3
    result = preparer(project=ENV_ONLY, env={"CNB_PLATFORM_NAMESPACE": "io.buildpacks.pack",
                                             "CNB_PLATFORM_CONFIG_PATH": str(pack)})  # fmt: skip
    assert result.code == 0
    assert env_files(layout) == {"B": "2"}
    missing = preparer(
        "-platform-namespace", "io.buildpacks.pack", "-platform-config", str(tmp_path / "no.toml")
    )
    assert missing.code == 3


def test_dry_run_makes_no_request(preparer: Callable[..., Result], layout: Layout) -> None:
    # Nothing listens on port 9: a request would fail the run, or make its size known.
    project = '[_]\nschema-version = "0.2"\n[[io.buildpacks.group]]\nuri = "http://127.0.0.1:9/bp.tgz"\n'
    result = preparer("-dry-run", project=project)
    assert result.code == 0, result.stderr
    assert "  group: http://127.0.0.1:9/bp.tgz (would fetch)" in result.stdout.splitlines()
    assert "  would download http://127.0.0.1:9/bp.tgz (size unknown)" in result.stdout.splitlines()
    assert not (layout.layers / "order.toml").exists()


def test_colour_and_progress_bars_on_a_terminal(
    layout: Layout, tmp_path: Path, http_server: FileServer
) -> None:
    import os
    import pty
    import subprocess
    import sys

    from tests.buildpacks import make_tgz

    make_tgz(http_server.root / "bp.tgz", "me/tty", payload=b"t" * 300_000)
    (layout.app / "project.toml").write_text(
        '[_]\nschema-version = "0.2"\n[io.buildpacks]\nbuilder = "x"\n'
        f'[[io.buildpacks.group]]\nuri = "{http_server.url("bp.tgz")}"\n'
    )
    env = base_env(tmp_path)
    del env["NO_COLOR"]
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "preparer", *layout.flags(), "-download-cache", str(tmp_path / "cache")],
        stdout=secondary, stderr=secondary, env=env | {"COLUMNS": "100", "TERM": "xterm"},
    )  # fmt: skip
    os.close(secondary)
    output = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    assert proc.wait(timeout=60) == 0
    text = output.decode(errors="replace")
    assert "\033[1;33mWarning: \033[0m" in text  # the warning prefix in yellow
    assert "\033[0;36m===> PREPARING\033[0m" in text
    assert "━" in text  # rich's progress bar
    assert (layout.buildpacks / "me_tty" / "1.0.0" / "data.bin").is_file()


def test_relative_paths_are_taken_from_the_working_directory(
    preparer: Callable[..., Result], tmp_path: Path
) -> None:
    (tmp_path / "here").mkdir()
    result = preparer("-platform", "rel/platform", project=ENV_ONLY, cwd=tmp_path / "here")
    assert result.code == 0, result.stderr
    assert (tmp_path / "here" / "rel" / "platform" / "env" / "A").read_text() == "1"


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ([], {"CNB_USER_ID": "root"}, "ERROR: failed to resolve inputs: CNB_USER_ID='root' is not an integer"),
        (["-platform-config", "x.toml"], {}, "ERROR: failed to resolve inputs: -platform-config needs -platform-namespace"),
        ([], {"CNB_PREPARER_HTTP_TIMEOUT": "nan"},
         "ERROR: failed to resolve inputs: CNB_PREPARER_HTTP_TIMEOUT must be a positive number of seconds"),
        (["img", "extra"], {}, "ERROR: failed to parse arguments: received 2 arguments, but expected at most 1"),
    ],
)  # fmt: skip
def test_invalid_inputs_exit_3_and_the_report_says_why(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, args: list[str], env: dict[str, str],
    message: str,
) -> None:  # fmt: skip
    report = tmp_path / "out" / "report.toml"
    result = preparer("-prepare-report", str(report), *args, project=ENV_ONLY, env=env)
    assert (result.code, result.stdout, result.stderr) == (3, "", message + "\n")
    assert tomllib.loads(report.read_text()) == {
        "error": {"code": 3, "message": message.removeprefix("ERROR: ")}
    }
    assert env_files(layout) == {}


def test_env_bools_follow_go_and_an_invalid_dry_run_changes_nothing(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    dry = preparer(project=ENV_ONLY, env={"CNB_DRY_RUN": "T"})
    assert dry.code == 0 and "Dry run: nothing is fetched, written or removed" in dry.stdout
    assert env_files(layout) == {}
    # Not a ParseBool spelling: read as false it would write and remove what the user meant to see only.
    meant = preparer(project=ENV_ONLY, env={"CNB_DRY_RUN": "yes"})
    assert meant.code == 3
    assert meant.stderr == (
        "ERROR: failed to resolve inputs: CNB_DRY_RUN='yes' is not a bool (use 1, t, T, TRUE, true, True or 0, f, F, "
        "FALSE, false, False): read as false it would write and remove\n"
    )
    assert env_files(layout) == {}
    # A setting whose false reading changes nothing keeps a warning.
    colour = preparer(project=ENV_ONLY, env={"CNB_NO_COLOR": "yes"})
    assert colour.code == 0
    assert (
        "Warning: CNB_NO_COLOR='yes' is not a bool (use 1, t, T, TRUE, true, True or 0, f, F, FALSE, false, False); "
        "it counts as false" in colour.stderr
    )
    assert env_files(layout) == {"A": "1"}


def test_a_byte_order_mark_is_read_over(preparer: Callable[..., Result], layout: Layout) -> None:
    (layout.app / "project.toml").write_bytes(b"\xef\xbb\xbf" + ENV_ONLY.encode())
    result = preparer()
    assert (result.code, result.stderr) == (0, "")
    assert env_files(layout) == {"A": "1"}


def test_a_dumb_terminal_gets_no_colour(layout: Layout, tmp_path: Path) -> None:
    import os
    import pty
    import subprocess
    import sys

    (layout.app / "project.toml").write_text(ENV_ONLY + '[io.buildpacks]\nbuilder = "x"\n')
    env = base_env(tmp_path)
    del env["NO_COLOR"]
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "preparer", *layout.flags()], stdout=secondary, stderr=secondary,
                            env=env | {"TERM": "dumb"})  # fmt: skip
    os.close(secondary)
    output = b""
    while chunk := _read_pty(primary):
        output += chunk
    assert proc.wait(timeout=60) == 0
    assert b"Warning: " in output and b"\033[" not in output


def _read_pty(fd: int) -> bytes:
    import os

    try:
        return os.read(fd, 65536)
    except OSError:  # the other end closed
        return b""


def test_downloads_are_logged_once_each_off_a_terminal(
    preparer: Callable[..., Result], layout: Layout, http_server: FileServer
) -> None:
    from tests.buildpacks import make_tgz

    make_tgz(http_server.root / "log.tgz", "me/log", payload=b"x" * 200_000)
    url = http_server.url("log.tgz")
    project = f'[_]\nschema-version = "0.2"\n[[io.buildpacks.group]]\nuri = "{url}"\n'
    result = preparer(project=project)
    assert result.code == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("Download")]
    assert len(lines) == 2, result.stdout
    assert lines[0].startswith(f"Downloading {url} (") and lines[0].endswith(" KiB)")
    assert lines[1].startswith(f"Downloaded {url} (")
    # A second run finds the archive in the download cache: nothing is said about downloading at info level.
    again = preparer(project=project)
    assert again.code == 0 and f"Downloading {url}" not in again.stdout


def test_the_console_script_and_main_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess
    import sys

    from preparer.cli import main

    script = Path(sys.executable).parent / "preparer"
    proc = subprocess.run([str(script), "-version"], capture_output=True, text=True, check=False)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, __version__ + "\n", "")
    assert main(["-version"]) == 0
    assert capsys.readouterr().out == __version__ + "\n"
    # Odd argv values reach the Go-style parser untouched (typer does not read them): no API set, so exit 11.
    for argv in (["-"], ["--"], [""], ["--", "--help"], ["-x=", "--"]):
        assert main(argv) == 11
    assert capsys.readouterr().err.count("ERROR: failed to get platform API version") == 5


def test_an_unexpected_error_is_one_line_and_its_traceback_only_at_debug(
    tmp_path: Path, layout: Layout, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import preparer.pipeline
    from preparer.cli import run

    # No input is known to make the pipeline raise a non-preparer exception (the hypothesis test looks for
    # one), so one is injected here to check the CLI's last line of defence.
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(preparer.pipeline, "prepare", broken)
    env = base_env(tmp_path)
    assert run([*layout.flags()], env) == 1
    err = capsys.readouterr().err
    assert err == "ERROR: failed to prepare: an error the preparer does not foresee (boom)\n"
    assert run([*layout.flags(), "-log-level", "debug"], env) == 1
    captured = capsys.readouterr()
    assert "Traceback" in captured.out and 'raise RuntimeError("boom")' in captured.out
    assert captured.err == "ERROR: failed to prepare: an error the preparer does not foresee (boom)\n"


@pytest.mark.parametrize("flags", [["-log-level", "debug"], ["-version"], ["-h"]])
def test_a_closed_stdout_neither_stops_the_build_nor_prints_a_traceback(
    layout: Layout, tmp_path: Path, flags: list[str]
) -> None:
    import os
    import subprocess
    import sys

    (layout.app / "project.toml").write_text(ENV_ONLY)
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader went away: every write to stdout fails with EPIPE
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "preparer", *layout.flags(), "-download-cache", "", *flags],
            stdout=write_end, stderr=subprocess.PIPE, text=True, env=base_env(tmp_path), check=False,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert env_files(layout) == ({"A": "1"} if flags[0] == "-log-level" else {})


def test_debug_shows_the_resolved_inputs(preparer: Callable[..., Result], layout: Layout) -> None:
    result = preparer("-log-level", "debug", project=ENV_ONLY)
    assert result.code == 0
    inputs = [line for line in result.stdout.splitlines() if line.startswith("Inputs: ")]
    assert len(inputs) == 1
    assert f"app {layout.app}, layers {layout.layers}," in inputs[0] and "Platform API 0.15" in inputs[0]
    assert "Inputs: " not in preparer(project=ENV_ONLY).stdout


def test_a_dry_run_never_replaces_a_runs_report_and_says_what_it_writes(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path
) -> None:
    project = '[_]\nschema-version = "0.2"\n[[io.buildpacks.group]]\nuri = "urn:cnb:builder:examples/node"\n'
    report = tmp_path / "report.toml"
    real = preparer("-prepare-report", str(report), project=project)
    assert real.code == 0, real.stderr
    written = report.read_bytes()
    assert tomllib.loads(written.decode())["dry-run"] is False
    # A dry run at the real run's report keeps it, and says so; so does a dry run that fails.
    dry = preparer("-dry-run", "-prepare-report", str(report), project=project)
    assert dry.code == 0, dry.stderr
    assert "Dry run: nothing is fetched, written or removed\n" in dry.stdout
    assert dry.warnings == [
        (
            f"Warning: the report {report} is kept: a dry run never replaces a run's report; give the dry run a "
            "-prepare-report of its own"
        )
    ]
    failed = preparer(
        "-dry-run", "-prepare-report", str(report), project=project + "[[io.buildpacks.group]]\n"
    )
    assert failed.code == 3, failed.stderr
    assert report.read_bytes() == written
    # Its own report is written, and said to be; a later dry run renews it.
    own = tmp_path / "dry.toml"
    first = preparer("-dry-run", "-prepare-report", str(own), project=project)
    assert first.code == 0, first.stderr
    assert f"Dry run: nothing is fetched, written or removed but the report, {own}\n" in first.stdout
    assert tomllib.loads(own.read_text())["dry-run"] is True
    npm = project.replace("examples/node", "examples/npm")
    again = preparer("-dry-run", "-prepare-report", str(own), project=npm)
    assert again.code == 0 and again.warnings == []
    assert "examples/npm" in own.read_text() and "examples/node" not in own.read_text()
