"""Every configuration error, pinned as users see it: one data file per case (tests/data/config-errors).

``<case>.toml`` is the project descriptor (a first line ``# namespace: <ns>`` sets ``-platform-namespace``);
``<case>.error`` is the exact message, ``{file}`` standing for the descriptor's path. Each case goes through
:func:`preparer.plan_run` on a real directory; every one must fail with exit code 3 and nothing written.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from preparer import DescriptorError, Inputs, InvalidInputsError, plan_run
from tests.golden import BUILDER

DATA = Path(__file__).resolve().parent.parent / "data" / "config-errors"
CASES = sorted(p.stem for p in DATA.glob("*.toml"))
assert CASES, "no configuration error cases found"


@pytest.mark.parametrize("case", CASES)
def test_configuration_error(case: str, tmp_path: Path) -> None:
    app = tmp_path / "app"
    app.mkdir()
    descriptor = app / "project.toml"
    text = (DATA / f"{case}.toml").read_text()
    descriptor.write_text(text)
    shutil.copytree(BUILDER, tmp_path / "cnb")
    namespace = (
        text.removeprefix("# namespace: ").split("\n", 1)[0] if text.startswith("# namespace:") else None
    )
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
