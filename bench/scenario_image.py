"""Start-up of the self-contained executable (build/preparer) against `python -m preparer`, in the same run.

`-version` shows the fixed cost of each (the executable unpacks its bundle on every start); an env-only prepare
shows a whole run. Builds the executable first when `make image` has not.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from _util import PYTHON, ROOT, median_seconds, preparer_env

RUNS = 15
EXECUTABLE = ROOT / "build" / "preparer"
PROJECT = '[_]\nschema-version = "0.2"\n[[io.buildpacks.build.env]]\nname = "GREETING"\nvalue = "hello"\n'


def main() -> None:
    if not EXECUTABLE.exists():
        subprocess.run([ROOT / "lifecycle-image" / "build-executable.sh", ROOT / "build"], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
    size = EXECUTABLE.stat().st_size / (1 << 20)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(ROOT / "fixtures" / "builder" / "cnb", root / "cnb")
        (root / "workspace").mkdir()
        (root / "workspace" / "project.toml").write_text(PROJECT)
        flags = ["-app", str(root / "workspace"), "-layers", str(root / "layers"), "-platform", str(root / "platform"),
                 "-buildpacks", str(root / "cnb" / "buildpacks"), "-order", str(root / "cnb" / "order.toml"),
                 "-download-cache", ""]  # fmt: skip
        env = preparer_env()
        results = {}
        for name, command in (
            ("executable", [str(EXECUTABLE)]),
            ("python -m preparer", [PYTHON, "-m", "preparer"]),
        ):
            version = median_seconds([*command, "-version"], RUNS, env=env)
            prepare = median_seconds([*command, *flags], RUNS, env=env,
                                     setup=lambda: shutil.rmtree(root / "platform", ignore_errors=True))  # fmt: skip
            results[name] = (version, prepare)
        exe, py = results["executable"], results["python -m preparer"]
        print(f"executable: {size:.1f} MiB")
        print(
            f"-version: executable {exe[0]:.3f} s vs python -m preparer {py[0]:.3f} s -> ratio {exe[0] / py[0]:.2f}"
        )
        print(f"env-only prepare: executable {exe[1]:.3f} s vs python -m preparer {py[1]:.3f} s "
              f"-> ratio {exe[1] / py[1]:.2f} (medians of {RUNS}; no goal: this is the price of needing no Python)")  # fmt: skip


if __name__ == "__main__":
    main()
