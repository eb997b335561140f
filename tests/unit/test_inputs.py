"""resolve_inputs: flag > environment > default, absolute paths, and the inputs that are refused (exit 3)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import preparer.resolve
from preparer.api import APIVersion
from preparer.errors import InvalidInputsError, PlatformAPIError
from preparer.goflags import parse
from preparer.inputs import DEFAULT_BUILDPACK_REGISTRY_INDEX, Inputs, resolve_inputs
from preparer.resolve import log_level_of, no_color, user_cache_dir

CWD = Path("/base")
API = {"CNB_PLATFORM_API": "0.15"}


def resolve(argv: list[str], **environ: str) -> Inputs:
    return resolve_inputs(parse(argv).values, API | environ, cwd=CWD)


def test_defaults_are_the_creators() -> None:
    inputs = resolve([], XDG_CACHE_HOME="/home/u/.cache")
    assert (inputs.app_dir, inputs.layers_dir, inputs.platform_dir) == (
        Path("/workspace"),
        Path("/layers"),
        Path("/platform"),
    )
    assert (inputs.buildpacks_dir, inputs.order_path) == (Path("/cnb/buildpacks"), Path("/cnb/order.toml"))
    assert inputs.descriptor_path == Path("/workspace/project.toml") and inputs.project_descriptor is None
    assert (inputs.uid, inputs.gid, inputs.insecure_registries, inputs.dry_run) == (None, None, (), False)
    assert (inputs.platform_namespace, inputs.platform_config, inputs.prepare_report) == (None, None, None)
    assert inputs.exec_env == "production"
    assert inputs.registry_index == DEFAULT_BUILDPACK_REGISTRY_INDEX
    assert inputs.platform_api == APIVersion(0, 15)
    assert inputs.download_cache is not None and inputs.download_cache.name == "cnb-preparer"
    assert inputs.target_platform.startswith("linux/")


@pytest.mark.parametrize(
    ("flag", "env", "field"),
    [
        ("app", "CNB_APP_DIR", "app_dir"),
        ("layers", "CNB_LAYERS_DIR", "layers_dir"),
        ("platform", "CNB_PLATFORM_DIR", "platform_dir"),
        ("buildpacks", "CNB_BUILDPACKS_DIR", "buildpacks_dir"),
        ("order", "CNB_ORDER_PATH", "order_path"),
        ("project-descriptor", "CNB_PROJECT_DESCRIPTOR_PATH", "project_descriptor"),
        ("prepare-report", "CNB_PREPARE_REPORT_PATH", "prepare_report"),
        ("download-cache", "CNB_DOWNLOAD_CACHE_DIR", "download_cache"),
    ],
)
def test_flag_beats_environment_beats_default(flag: str, env: str, field: str) -> None:
    assert getattr(resolve([], **{env: "/from/env"}), field) == Path("/from/env")
    assert getattr(resolve([f"-{flag}", "/from/flag"], **{env: "/from/env"}), field) == Path("/from/flag")


def test_relative_paths_become_absolute_against_the_working_directory() -> None:
    inputs = resolve(
        ["-app", "src", "-layers", "../layers", "-project-descriptor", "./p.toml"], CNB_PLATFORM_DIR="p"
    )
    assert inputs.app_dir == Path("/base/src")
    assert inputs.layers_dir == Path("/layers")
    assert inputs.platform_dir == Path("/base/p")
    assert inputs.descriptor_path == Path("/base/p.toml")


def test_an_empty_download_cache_disables_it() -> None:
    assert resolve(["-download-cache", ""]).download_cache is None
    assert resolve([], CNB_DOWNLOAD_CACHE_DIR="").download_cache is None
    assert resolve(["-download-cache=c"], CNB_DOWNLOAD_CACHE_DIR="").download_cache == Path("/base/c")


def test_the_default_download_cache_is_in_the_user_cache_directory() -> None:
    assert resolve([], XDG_CACHE_HOME="/x/cache", HOME="/home/u").download_cache == Path(
        "/x/cache/cnb-preparer"
    )
    assert resolve([], XDG_CACHE_HOME="relative", HOME="/home/u").download_cache == Path(
        "/home/u/.cache/cnb-preparer"
    )
    assert user_cache_dir({}) is None  # no HOME at all (a bare image): no cache


def test_insecure_registries_repeat_as_flags_and_split_commas_in_the_environment() -> None:
    env = {"CNB_INSECURE_REGISTRIES": " a:5000, b ,,c"}
    assert resolve([], **env).insecure_registries == ("a:5000", "b", "c")
    assert resolve(["-insecure-registry", "x,y", "-insecure-registry=z"], **env).insecure_registries == (
        "x,y",
        "z",
    )


@pytest.mark.parametrize(("value", "dry"), [("1", True), ("True", True), ("t", True), ("", False)])
def test_env_bools_are_go_parse_bool(value: str, dry: bool) -> None:
    assert resolve([], CNB_DRY_RUN=value).dry_run is dry
    assert resolve(["-dry-run=false"], CNB_DRY_RUN=value).dry_run is False
    assert resolve(["-dry-run"], CNB_DRY_RUN="false").dry_run is True


def test_a_dry_run_that_is_no_bool_is_invalid_input_where_a_flag_does_not_decide() -> None:
    with pytest.raises(InvalidInputsError, match="CNB_DRY_RUN='yes' is not a bool"):
        resolve([], CNB_DRY_RUN="yes")
    assert resolve(["-dry-run=false"], CNB_DRY_RUN="yes").dry_run is False


def test_uid_and_gid_from_flags_or_environment() -> None:
    assert (resolve(["-uid", "1000", "-gid=0x3e8"]).uid, resolve(["-gid=0x3e8"]).gid) == (1000, 1000)
    inputs = resolve([], CNB_USER_ID="1001", CNB_GROUP_ID="1002")
    assert (inputs.uid, inputs.gid) == (1001, 1002)
    assert resolve(["-uid", "5"], CNB_USER_ID="1001").uid == 5
    assert resolve([], CNB_USER_ID="").uid is None


def test_a_non_integer_user_id_in_the_environment_is_invalid() -> None:
    # The lifecycle's intEnv would quietly use 0 (root); files owned by root are worse than an error.
    with pytest.raises(InvalidInputsError) as caught:
        resolve([], CNB_USER_ID="cnb")
    assert caught.value.exit_code == 3
    assert caught.value.message == "failed to resolve inputs: CNB_USER_ID='cnb' is not an integer"


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["-log-level", "loud"], {}, "failed to parse log level: 'loud' is not one of debug, info, warn, error"),
        ([], {"CNB_LOG_LEVEL": "trace"}, "failed to parse log level: 'trace' is not one of debug, info, warn, error"),
        (["-platform-config", "pack.toml"], {}, "failed to resolve inputs: -platform-config needs -platform-namespace"),
        ([], {"CNB_PLATFORM_CONFIG_PATH": "p.toml", "CNB_PLATFORM_NAMESPACE": ""},
         "failed to resolve inputs: -platform-config needs -platform-namespace"),
        ([], {"CNB_PREPARER_HTTP_TIMEOUT": "soon"},
         "failed to resolve inputs: CNB_PREPARER_HTTP_TIMEOUT must be a positive number of seconds"),
        ([], {"CNB_PREPARER_HTTP_TIMEOUT": "-1"},
         "failed to resolve inputs: CNB_PREPARER_HTTP_TIMEOUT must be a positive number of seconds"),
        ([], {"CNB_PREPARER_HTTP_TIMEOUT": "inf"},
         "failed to resolve inputs: CNB_PREPARER_HTTP_TIMEOUT must be a positive number of seconds"),
    ],
)  # fmt: skip
def test_well_formed_but_invalid_inputs_exit_3(argv: list[str], env: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidInputsError) as caught:
        resolve(argv, **env)
    assert (caught.value.exit_code, caught.value.message) == (3, message)


@pytest.mark.parametrize(("value", "level"), [("DEBUG", "debug"), ("Warning", "warn"), ("error", "error")])
def test_log_level_names_are_case_insensitive(value: str, level: str) -> None:
    assert resolve(["-log-level", value]) is not None
    assert log_level_of(parse(["-log-level", value]).values, {}) == level
    assert log_level_of({}, {"CNB_LOG_LEVEL": value}) == level
    assert log_level_of({}, {}) == "info"


def test_platform_namespace_config_and_the_registry_index() -> None:
    inputs = resolve(
        [
            "-platform-namespace",
            "io.buildpacks.pack",
            "-buildpack-registry-index",
            "http://127.0.0.1:1/index",
        ],
        CNB_PLATFORM_CONFIG_PATH="cfg/pack.toml",
    )
    assert inputs.platform_namespace == "io.buildpacks.pack"
    assert inputs.platform_config == Path("/base/cfg/pack.toml")
    assert inputs.registry_index == "http://127.0.0.1:1/index"


def test_exec_env_target_platform_and_the_environment_are_passed_on() -> None:
    inputs = resolve([], CNB_EXEC_ENV="test", CNB_PREPARER_PLATFORM="linux/arm64/v8", DOCKER_CONFIG="/d")
    assert (inputs.exec_env, inputs.target_platform) == ("test", "linux/arm64/v8")
    assert inputs.environ["DOCKER_CONFIG"] == "/d"
    assert "DOCKER_CONFIG" not in repr(inputs)  # the environment may hold credentials: never shown


def test_the_platform_api_is_carried_and_checked() -> None:
    assert resolve([], CNB_PLATFORM_API="0.12").platform_api == APIVersion(0, 12)
    assert resolve_inputs({}, {}, cwd=CWD).platform_api == APIVersion(0, 15)  # a library caller may omit it
    with pytest.raises(PlatformAPIError) as caught:
        resolve([], CNB_PLATFORM_API="0.3")
    assert caught.value.exit_code == 11


@pytest.mark.parametrize(
    ("flags", "env", "expected"),
    [
        ({}, {}, False),
        ({}, {"NO_COLOR": "1"}, True),
        ({}, {"NO_COLOR": ""}, False),
        ({}, {"CNB_NO_COLOR": "true"}, True),
        ({}, {"CNB_NO_COLOR": "please"}, False),
        ({"no-color": True}, {}, True),
        ({"no-color": False}, {"CNB_NO_COLOR": "true"}, False),
    ],
)
def test_no_color(flags: dict[str, object], env: dict[str, str], expected: bool) -> None:
    assert no_color(flags, env) is expected


def test_the_environment_never_shows_in_the_inputs_representation() -> None:
    inputs = resolve([], CNB_REGISTRY_AUTH='{"r.io": "Basic c2VjcmV0"}')
    assert inputs.environ["CNB_REGISTRY_AUTH"]
    assert "c2VjcmV0" not in repr(inputs) and "environ" not in repr(inputs)
    assert repr(inputs).startswith("Inputs(app_dir=PosixPath('/workspace'), ")


def test_paths_may_be_strings_or_path_likes_and_become_absolute(tmp_path: Path) -> None:
    class Where:
        def __fspath__(self) -> str:
            return "relative/app"

    inputs = Inputs(app_dir=Where(), layers_dir="/layers/../layers", platform_dir=tmp_path, buildpacks_dir="/b",
                    order_path="/o", prepare_report="r.toml", download_cache=None)  # fmt: skip
    assert inputs.app_dir == Path.cwd() / "relative" / "app"
    assert inputs.layers_dir == Path("/layers")
    assert inputs.platform_dir == tmp_path
    assert inputs.prepare_report == Path.cwd() / "r.toml"
    assert inputs.descriptor_path == Path.cwd() / "relative" / "app" / "project.toml"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("app_dir", 42, "Inputs.app_dir must be a path (str or os.PathLike), not int"),
        # An empty one is a str: the message names the value, as an empty item of env_files does.
        ("order_path", "", "Inputs.order_path must be a path (str or os.PathLike), not ''"),
        ("system_path", "", "Inputs.system_path must be a path (str or os.PathLike), not ''"),
        ("download_cache", b"/cache", "Inputs.download_cache must be a path (str or os.PathLike), not bytes"),
        ("uid", "1000", "Inputs.uid must be int or NoneType, not str"),
        ("dry_run", "yes", "Inputs.dry_run must be bool, not str"),
        ("http_timeout", True, "Inputs.http_timeout must be int or float, not bool"),
        ("environ", None, "Inputs.environ must be Mapping, not NoneType"),
    ],
)
def test_a_value_of_the_wrong_type_is_the_librarys_own_error(field: str, value: object, message: str) -> None:
    with pytest.raises(InvalidInputsError) as info:
        Inputs(**(DIRS | {field: value}))  # type: ignore[arg-type]
    assert info.value.exit_code == 3
    assert str(info.value) == f"failed to resolve inputs: {message}"


#: The directories Inputs(...) requires (no container defaults outside from_environ).
DIRS = {"app_dir": "/w", "layers_dir": "/l", "platform_dir": "/p", "buildpacks_dir": "/b", "order_path": "/o"}


def test_inputs_requires_its_directories_and_has_no_container_defaults() -> None:
    with pytest.raises(TypeError, match="app_dir"):
        Inputs(layers_dir="/l", platform_dir="/p", buildpacks_dir="/b", order_path="/o")
    assert Inputs.from_environ({}).app_dir == Path("/workspace")  # the container's, where it belongs


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("http_timeout", 0, "Inputs.http_timeout must be a positive number of seconds"),
        ("run_timeout", -1.5, "Inputs.run_timeout must be a positive number of seconds"),
        ("uid", -5, "Inputs.uid is not a user or group id (0 to 4294967294)"),
        ("gid", 2**40, "Inputs.gid is not a user or group id (0 to 4294967294)"),
        ("download_cache_repo", "no-slash", "Inputs.download_cache_repo is not <registry>/<repository>: "),
        (
            "download_cache_repo_mode",
            "write",
            "Inputs.download_cache_repo_mode must be read-write, read or offline",
        ),
        ("target_platform", "amd64", "Inputs.target_platform must be os/arch[/variant], e.g. linux/amd64"),
    ],
)
def test_a_value_the_command_refuses_is_refused_when_inputs_are_built(
    field: str, value: object, message: str
) -> None:
    with pytest.raises(InvalidInputsError) as info:
        Inputs(**(DIRS | {field: value}))  # type: ignore[arg-type]
    assert info.value.exit_code == 3 and str(info.value).startswith(f"failed to resolve inputs: {message}")


def test_from_environ_gives_the_commands_defaults() -> None:
    environ = {"HOME": "/home/u", "CNB_REGISTRY_AUTH": "{}", "CNB_LAYERS_DIR": "/l"}
    inputs = Inputs.from_environ(environ, app_dir="/src", dry_run=True)
    assert inputs.download_cache == Path("/home/u/.cache/cnb-preparer")
    assert inputs.environ == environ  # registry credentials are found as the command finds them
    assert (inputs.app_dir, inputs.layers_dir, inputs.dry_run) == (Path("/src"), Path("/l"), True)
    assert inputs.target_platform.startswith("linux/")
    # An untyped caller's misspelled field is refused at run time too (a typed one's fails the type checker).
    with pytest.raises(InvalidInputsError, match="Inputs has no field app"):
        Inputs.from_environ(environ, app="/src")  # type: ignore[call-arg]


def test_the_overrides_of_from_environ_are_the_fields_of_inputs() -> None:
    # InputsOverrides exists for type checkers only: its fields are read from the source.
    tree = ast.parse(Path(preparer.resolve.__file__).read_text())
    (overrides,) = (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "InputsOverrides")
    names = {
        n.target.id for n in overrides.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    }
    assert names == {f.name for f in dataclasses.fields(Inputs)} - {"environ"}
