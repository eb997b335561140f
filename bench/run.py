"""Run every benchmark scenario (``bench/scenario_*.py``) in turn; each prints its own ratios.

Baselines are measured in the same run as the preparer, so the ratios hold on any machine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    selected = sys.argv[1:]
    failures = 0
    for script in sorted(HERE.glob("scenario_*.py")):
        name = script.stem.removeprefix("scenario_")
        if selected and name not in selected:
            continue
        print(f"== {name}", flush=True)
        failures += subprocess.run([sys.executable, str(script)], check=False).returncode != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
