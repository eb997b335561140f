"""Every configuration error, pinned as users see it: one data file per case (tests/data/config-errors).

``<case>.toml`` is the project descriptor (a first line ``# namespace: <ns>`` sets ``-platform-namespace``);
``<case>.error`` is the exact message, ``{file}`` standing for the descriptor's path; ``<case>.where``, when there
is one, the problem's ``line:column``. Each case goes through :func:`preparer.plan_run` on a real directory; every
one must fail with exit code 3 and nothing written. :func:`preparer.check_descriptor` must find the same problem
first, with a place, from the file and from its text.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from preparer import DescriptorError, Inputs, InvalidInputsError, check_descriptor, plan_run
from tests.golden import BUILDER

DATA = Path(__file__).resolve().parent.parent / "data" / "config-errors"
CASES = sorted(p.stem for p in DATA.glob("*.toml"))
assert CASES, "no configuration error cases found"


@pytest.mark.parametrize("case", CASES)
def test_configuration_error(case: str, tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    descriptor = app / "project.toml"
    data = (DATA / f"{case}.toml").read_bytes()
    descriptor.write_bytes(data)
    shutil.copytree(BUILDER, tmp_path / "cnb")
    first = data.split(b"\n", 1)[0].decode()
    namespace = first.removeprefix("# namespace: ") if first.startswith("# namespace:") else None
    inputs = Inputs(
        app_dir=app, layers_dir=tmp_path / "layers", platform_dir=tmp_path / "platform",
        buildpacks_dir=tmp_path / "cnb" / "buildpacks", order_path=tmp_path / "cnb" / "order.toml",
        platform_namespace=namespace,
    )  # fmt: skip
    with pytest.raises(InvalidInputsError) as info:
        plan_run(inputs)
    expected = (DATA / f"{case}.error").read_text().rstrip("\n").replace("{file}", str(descriptor))
    assert str(info.value) == expected
    assert info.value.exit_code == 3
    assert isinstance(info.value, DescriptorError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app", "cnb"]


@pytest.mark.parametrize("case", CASES)
def test_check_descriptor_finds_the_same_problem_first_with_its_place(case: str, tmp_path: Path) -> None:
    descriptor = tmp_path / "project.toml"
    data = (DATA / f"{case}.toml").read_bytes()
    descriptor.write_bytes(data)
    first = data.split(b"\n", 1)[0].decode(errors="replace")
    namespace = first.removeprefix("# namespace: ") if first.startswith("# namespace:") else None
    expected = (DATA / f"{case}.error").read_text().rstrip("\n")
    where = DATA / f"{case}.where"
    for problems, name in (
        (check_descriptor(descriptor, platform_namespace=namespace), str(descriptor)),
        (check_descriptor(text=data, platform_namespace=namespace), "project.toml"),
    ):
        assert problems, f"{case}: no problem found"
        assert str(problems[0]) == expected.replace("{file}", name)
        assert problems[0].path == name and problems[0].exit_code == 3
        assert problems[0].line is not None and problems[0].column is not None
        if where.exists():
            assert f"{problems[0].line}:{problems[0].column}" == where.read_text().strip()
