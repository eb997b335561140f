"""Start-up: a whole preparer process on an env-only project.toml, against bare Python and `import typer`.

Every build pays the preparer's start-up, so the goal is at most 1.3 x the time of `python -c "import typer"`.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from _util import PYTHON, build_layout, median_seconds, preparer_env, report

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
        command = [*build_layout(root / "build", PROJECT), "-download-cache", str(root / "cache")]

        def clean() -> None:
            shutil.rmtree(root / "build" / "platform", ignore_errors=True)

        bare = median_seconds([PYTHON, "-c", "pass"], RUNS)
        typer = median_seconds([PYTHON, "-c", "import typer"], RUNS)
        prepare = median_seconds(command, RUNS, env=preparer_env(), setup=clean)
        print(f"python -c pass: {bare:.3f} s; python -c 'import typer': {typer:.3f} s (medians of {RUNS})")
        report("startup (env-only prepare)", prepare, "s", typer, "import typer", 1.3)


if __name__ == "__main__":
    main()
