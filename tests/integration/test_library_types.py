"""A typed service that uses the library passes mypy --strict; a misspelled name or keyword fails it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SERVICE = """
from preparer import (
    Cancel, Cancelled, DescriptorError, Download, FetchError, Inputs, PreparerError, check_descriptor, plan_run,
    prepare, run_plan,
)


def shown(event: Download) -> None:
    print(event.kind, event.entry, event.url, event.done, event.total)


def build(app: str) -> int:
    inputs = Inputs(app_dir=app, layers_dir="/l", platform_dir="/p", buildpacks_dir="/b", order_path="/o")
    lines: list[int | None] = [p.line for p in check_descriptor(app + "/project.toml")]
    try:
        report = prepare(inputs, progress=shown, cancel=Cancel(), deadline=60.0, run_id="b1")
    except Cancelled as err:
        return err.exit_code
    except DescriptorError as err:
        return (err.line or 0) + len(err.problems) + len(lines)
    except FetchError as err:
        return err.status or int(err.transient)
    except PreparerError as err:
        return err.exit_code
    run_plan(plan_run(inputs))
    return len(report.warnings) + len(str(Inputs.from_environ(app_dir=app).app_dir))
"""


def mypy(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    module = tmp_path / "service.py"
    module.write_text(text)
    return subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(module)],
                          capture_output=True, text=True, check=False)  # fmt: skip


def test_a_typed_service_passes_mypy_strict(tmp_path: Path) -> None:
    result = mypy(tmp_path, SERVICE)
    assert result.returncode == 0, result.stdout


def test_a_misspelled_name_or_keyword_fails_it(tmp_path: Path) -> None:
    name = mypy(tmp_path, SERVICE.replace("FetchError, Inputs,", "FetchError, Inputs, Inputz,"))
    assert name.returncode == 1 and 'Module "preparer" has no attribute "Inputz"' in name.stdout
    keyword = mypy(tmp_path, SERVICE.replace("from_environ(app_dir=app)", "from_environ(app_dri=app)"))
    assert keyword.returncode == 1 and 'Unexpected keyword argument "app_dri"' in keyword.stdout
