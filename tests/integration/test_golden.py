"""Every golden case of fixtures/projects through the library, then through the real CLI."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from preparer import Inputs, PreparerError, prepare
from tests.golden import CASES, check_outputs, make_layout, snapshot


def _inputs(layout_args: list[str], layout: object, environ: dict[str, str]) -> Inputs:
    flags = dict(zip(layout_args[::2], layout_args[1::2], strict=True))
    config = flags.get("-platform-config")
    return Inputs(
        app_dir=layout.app,  # type: ignore[attr-defined]
        layers_dir=layout.layers,  # type: ignore[attr-defined]
        platform_dir=layout.platform,  # type: ignore[attr-defined]
        buildpacks_dir=layout.buildpacks,  # type: ignore[attr-defined]
        order_path=layout.order,  # type: ignore[attr-defined]
        platform_namespace=flags.get("-platform-namespace"),
        platform_config=Path(config) if config else None,
        exec_env=environ.get("CNB_EXEC_ENV", "production"),
    )


@pytest.mark.parametrize("case", CASES)
def test_library(case: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    layout, expected = make_layout(tmp_path, case)
    before = snapshot(layout)
    inputs = _inputs(expected.get("args", []), layout, expected.get("environ", {}))
    with caplog.at_level(logging.INFO, logger="preparer"):
        try:
            report = prepare(inputs)
            code = 0
        except PreparerError as err:
            code, message = err.exit_code, err.message
    assert code == expected["exit-code"]
    if code:
        assert message == expected["error"]
    else:
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert warnings == expected["warnings"]
        assert list(report.warnings) == expected["warnings"]
        if "effective" in expected:
            assert report.effective == expected["effective"]
        if "resolved" in expected:
            resolved = [{"source": b.source, "resolved": b.resolved} for b in report.buildpacks if b.resolved]
            assert resolved == expected["resolved"]
    check_outputs(layout, expected, before)


@pytest.mark.parametrize("case", CASES)
def test_cli(case: str, tmp_path: Path) -> None:
    layout, expected = make_layout(tmp_path, case)
    before = snapshot(layout)
    env = {"CNB_PLATFORM_API": "0.15", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "NO_COLOR": "1"}
    env |= expected.get("environ", {})
    # The dry run first: the same exit code and error as the real run, and nothing written.
    dry = subprocess.run(
        [sys.executable, "-m", "preparer", *layout.flags(), *expected.get("args", []), "-dry-run"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert dry.returncode == expected["exit-code"], dry.stderr
    if dry.returncode:
        assert dry.stderr.splitlines()[-1] == "ERROR: " + expected["error"]
    assert snapshot(layout) == before and not (layout.layers / "order.toml").exists()
    proc = subprocess.run(
        [sys.executable, "-m", "preparer", *layout.flags(), *expected.get("args", [])],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == expected["exit-code"], proc.stderr
    assert "Traceback" not in proc.stderr
    stderr_lines = proc.stderr.splitlines()
    if proc.returncode:
        assert stderr_lines[-1] == "ERROR: " + expected["error"]
    else:
        assert [line for line in stderr_lines if line.startswith("Warning: ")] == [
            "Warning: " + w for w in expected["warnings"]
        ]
        assert proc.stdout.startswith("===> PREPARING\n")
    check_outputs(layout, expected, before)
    if proc.returncode == 0:
        # A second run over the same inputs changes nothing: byte-identical outputs.
        order = layout.layers / "order.toml"
        first = order.read_bytes() if order.exists() else None
        again = subprocess.run(
            [sys.executable, "-m", "preparer", *layout.flags(), *expected.get("args", [])],
            capture_output=True, text=True, env=env, check=False,
        )  # fmt: skip
        assert again.returncode == 0, again.stderr
        assert (order.read_bytes() if order.exists() else None) == first
