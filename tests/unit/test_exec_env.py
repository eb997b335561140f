"""Execution environments (Platform API 0.15): ``[buildpack] exec-env`` read as the lifecycle reads it (every other
shape refused, with the spelling to write and the detector's own failure), the detector's skip rule, and
``CNB_EXEC_ENV`` checked as pack checks it."""

from __future__ import annotations

from pathlib import Path

import pytest

from preparer.api import APIVersion
from preparer.errors import BuilderError, FetchError, InvalidInputsError
from preparer.execenv import exec_env_problem, skip_reason
from preparer.files.buildpack import BuildpackDescriptor, read_buildpack_toml
from preparer.inputs import Inputs, resolve_inputs

HEAD = 'api = "0.12"\n\n[buildpack]\nid = "me/x"\nversion = "1.0.0"\n'


def descriptor(tmp_path: Path, text: str, *, builder: bool = True) -> BuildpackDescriptor:
    (tmp_path / "buildpack.toml").write_text(text)
    return read_buildpack_toml(tmp_path / "buildpack.toml", builder=builder)


def test_the_lifecycles_spelling_is_read(tmp_path: Path) -> None:
    assert descriptor(tmp_path, HEAD + 'exec-env = ["test", "production"]\n').exec_env == (
        "test",
        "production",
    )
    assert descriptor(tmp_path, HEAD).exec_env == ()
    assert descriptor(tmp_path, HEAD + "exec-env = []\n").exec_env == ()
    # A top-level exec-env is no key of [buildpack]: ignored, as the detector ignores it.
    assert descriptor(tmp_path, 'exec-env = ["test"]\n' + HEAD).exec_env == ()


def test_the_specs_spelling_is_refused_with_the_one_to_write_and_the_detectors_failure(
    tmp_path: Path,
) -> None:
    text = HEAD + '\n[[buildpack.exec-env]]\nname = "test"\n\n[[buildpack.exec-env]]\nname = "development"\n'
    with pytest.raises(BuilderError) as caught:
        descriptor(tmp_path, text)
    assert caught.value.exit_code == 1
    assert caught.value.message == (
        f"failed to read {tmp_path / 'buildpack.toml'}: [[buildpack.exec-env]] (line 7) is the buildpack spec's "
        'spelling, which the lifecycle does not read: write exec-env = ["test", "development"] in [buildpack] '
        '(the lifecycle\'s detector fails at start-up on this file: toml: line 7 (last key "buildpack.exec-env"): '
        "incompatible types: TOML value has type map[string]any; destination has type string)"
    )


@pytest.mark.parametrize(
    ("written", "line", "detector"),
    [
        ('exec-env = "test"\n', 6, "TOML value has type string; destination has type slice"),
        (
            '\n[buildpack.exec-env]\nname = "test"\n',
            7,
            "TOML value has type map[string]any; destination has type slice",
        ),
        ("exec-env = [1]\n", 6, "TOML value has type int64; destination has type string"),
    ],
)
def test_every_other_shape_is_refused_naming_the_key_and_the_line(
    tmp_path: Path, written: str, line: int, detector: str
) -> None:
    with pytest.raises(BuilderError) as caught:
        descriptor(tmp_path, HEAD + written)
    message = caught.value.message
    assert (
        f"buildpack.exec-env (line {line}) must be a list of strings, as the lifecycle reads it: write"
        in message
    )
    assert f'toml: line {line} (last key "buildpack.exec-env"): incompatible types: {detector})' in message


def test_a_fetched_buildpack_is_refused_as_a_fetch(tmp_path: Path) -> None:
    (tmp_path / "buildpack.toml").write_text(HEAD + 'exec-env = "test"\n')
    with pytest.raises(FetchError) as caught:
        read_buildpack_toml(tmp_path / "buildpack.toml", shown="./bp")
    assert caught.value.message.startswith(
        "failed to read buildpack.toml of ./bp: buildpack.exec-env (line 6)"
    )
    assert 'write exec-env = ["test"] in [buildpack]' in caught.value.message


def bp(exec_env: tuple[str, ...], api: str = "0.12") -> BuildpackDescriptor:
    return BuildpackDescriptor("me/x", "1.0.0", api, exec_env=exec_env)


P15, P14 = APIVersion(0, 15), APIVersion(0, 14)


@pytest.mark.parametrize(
    ("listed", "build", "skipped"),
    [
        ((), "production", False),
        (("test",), "production", True),
        (("test",), "test", False),
        (("production",), "test", True),
        (("*",), "development", False),
        (("test", "production"), "development", True),
        (("Production",), "production", True),  # compared as written
        (("",), "production", True),  # a list with an empty value is a list
        (("*test",), "test", True),  # no globs
    ],
)
def test_the_detectors_skip_rule(listed: tuple[str, ...], build: str, skipped: bool) -> None:
    assert (skip_reason(bp(listed), build, P15) is not None) is skipped


def test_nothing_is_skipped_below_platform_015_or_buildpack_api_012_nor_a_composite() -> None:
    assert skip_reason(bp(("test",)), "production", P14) is None
    assert skip_reason(bp(("test",), api="0.11"), "production", P15) is None
    composite = BuildpackDescriptor("me/c", "1.0.0", "0.12", order=((),), exec_env=("test",))
    assert skip_reason(composite, "production", P15) is None
    assert skip_reason(bp(("test",)), "production", P15) == (
        'its exec-env = ["test"] does not hold production, this build\'s (CNB_EXEC_ENV)'
    )


@pytest.mark.parametrize("value", ["production", "test", "development", "Production", "staging-2", "-", "."])
def test_pack_accepts_these_values(value: str) -> None:
    assert exec_env_problem(value) is None
    assert resolve_inputs({}, {"CNB_EXEC_ENV": value}, cwd=Path("/")).exec_env == value


@pytest.mark.parametrize("value", ["te$t", "*", "test,production", "test production", "prod\n"])
def test_what_pack_refuses_is_exit_3_naming_the_variable(value: str) -> None:
    with pytest.raises(InvalidInputsError) as caught:
        resolve_inputs({}, {"CNB_EXEC_ENV": value}, cwd=Path("/"))
    assert caught.value.exit_code == 3 and caught.value.field == "exec_env"
    assert caught.value.message.startswith(
        f"failed to resolve inputs: CNB_EXEC_ENV={value!r} is not an execution"
    )
    with pytest.raises(InvalidInputsError, match=r"Inputs\.exec_env must be production, test"):
        Inputs(
            app_dir="/a",
            layers_dir="/l",
            platform_dir="/p",
            buildpacks_dir="/b",
            order_path="/o",
            exec_env=value,
        )


def test_an_empty_value_is_production_as_the_lifecycles_default() -> None:
    assert resolve_inputs({}, {"CNB_EXEC_ENV": ""}, cwd=Path("/")).exec_env == "production"
