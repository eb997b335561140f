"""Start-up: a whole preparer process on an env-only project.toml, against bare Python and `import typer`.

Every build pays the preparer's start-up, so the goal is at most 1.3 x the time of `python -c "import typer"`.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from _util import PYTHON, ROOT, median_seconds, preparer_env, report

RUNS = 25
PROJECT = """[_]
schema-version = "0.2"
[[io.buildpacks.build.env]]
name = "GREETING"
value = "hello"
[[io.buildpacks.build.env]]
name = "MODE"
value = "production"
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(ROOT / "fixtures" / "builder" / "cnb", root / "cnb")
        (root / "workspace").mkdir()
        (root / "workspace" / "project.toml").write_text(PROJECT)
        command = [
            PYTHON, "-m", "preparer", "-app", str(root / "workspace"), "-layers", str(root / "layers"),
            "-platform", str(root / "platform"), "-buildpacks", str(root / "cnb" / "buildpacks"),
            "-order", str(root / "cnb" / "order.toml"), "-download-cache", str(root / "cache"),
        ]  # fmt: skip

        def clean() -> None:
            shutil.rmtree(root / "platform", ignore_errors=True)

        bare = median_seconds([PYTHON, "-c", "pass"], RUNS)
        typer = median_seconds([PYTHON, "-c", "import typer"], RUNS)
        prepare = median_seconds(command, RUNS, env=preparer_env(), setup=clean)
        print(f"python -c pass: {bare:.3f} s; python -c 'import typer': {typer:.3f} s (medians of {RUNS})")
        report("startup (env-only prepare)", prepare, "s", typer, "import typer", 1.3)


if __name__ == "__main__":
    main()
