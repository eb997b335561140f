"""Run every benchmark scenario (``bench/scenario_*.py``) in turn; each prints its own ratios.

Baselines are measured in the same run as the preparer, so the ratios hold on any machine. Every row is printed
beside the last release's figure (``bench/last-release.json``), and the rows more than a tenth worse are listed
again at the end. ``BENCH_RECORD=<release>`` writes this run's figures to that file instead (when a release is
measured).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from _util import LAST_RELEASE, WORSE_BY

HERE = Path(__file__).resolve().parent


def main() -> int:
    selected = sys.argv[1:]
    failures = 0
    with tempfile.NamedTemporaryFile("r", prefix="bench-marked-") as marked:
        env = os.environ | {"BENCH_MARKED": marked.name}
        for script in sorted(HERE.glob("scenario_*.py")):
            name = script.stem.removeprefix("scenario_")
            if selected and name not in selected:
                continue
            print(f"== {name}", flush=True)
            failures += subprocess.run([sys.executable, str(script)], check=False, env=env).returncode != 0
        worse = marked.read()
    if worse:
        print(
            f"== more than {WORSE_BY:.0%} worse than the last release ({LAST_RELEASE.name}):\n{worse}", end=""
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
