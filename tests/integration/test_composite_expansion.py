"""A buildpackage's composites are checked against the build's target once each, linear in their tree (issue 48).

The attack as it was found: a ``.cnb`` of 27 small ``buildpack.toml`` files, a chain of 26 composites each with two
groups naming the next, the last naming a buildpack for another architecture. The target check walked every path
through the chain (2^26 of them) and wrote each path's reason into the next: 1.85 GiB and a minute, then an error
the preparer does not foresee. Here a real ``.cnb`` is built (umoci, skopeo) and run through the real CLI, its
peak RSS measured as the preparer's own ``ru_maxrss``.

Measured before the fix on a 2-core machine shared with other work: a chain of 16 took 7 s and 94 MiB, 18 took 23 s
and 283 MiB, 20 took 122 s and 1,052 MiB, and 26 was still running after 180 s at 1,223 MiB.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.golden import Layout
from tests.plugins.cli import Result, measured
from tests.plugins.registry import build_package, to_cnb
from tests.projects import group

#: The peak the preparer may reach checking the chain (before: past 1.2 GiB).
BUDGET_MIB = 64
#: Seconds it may take (before: past 180).
BUDGET_SECONDS = 30
ARM64_ONLY = '\n[[targets]]\nos = "linux"\narch = "arm64"\n'
REASON = "it runs on linux/arm64; this build is linux/amd64 (CNB_PREPARER_PLATFORM)"


def chain(work: Path, depth: int, leaf: str, groups: int = 2) -> Path:
    """A ``.cnb`` of ``depth`` composites ``me/c1`` ... ``me/c<depth>``, each with ``groups`` groups naming the
    next, the last naming ``me/leaf`` (whose buildpack.toml ends with ``leaf``; without it, bin/ says linux)."""
    buildpacks = [("me/leaf", "1.0.0", leaf)]
    child = "me/leaf"
    for number in range(depth, 0, -1):
        buildpacks.append(
            (
                f"me/c{number}",
                "1.0.0",
                f'\n[[order]]\n[[order.group]]\nid = "{child}"\nversion = "1.0.0"\n' * groups,
            )
        )
        child = f"me/c{number}"
    work.mkdir(parents=True)
    package = build_package(work, buildpacks, (child, "1.0.0"))
    return to_cnb(package.layout, "latest", work / "chain.cnb")


@pytest.fixture(scope="module")
def chains(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The issue's chain (26 composites, two groups each) for another architecture, the same chain for any, and one
    of 33 composites (one past the bound)."""
    work = tmp_path_factory.mktemp("chains")
    return {
        "refused": chain(work / "refused", 26, ARM64_ONLY),
        "runs": chain(work / "runs", 26, ""),
        "deep": chain(work / "deep", 33, "", groups=1),
    }


def run_measured(layout: Layout, tmp_path: Path, cnb: Path) -> tuple[Result, float, float]:
    """The CLI on a project naming ``cnb``, measured (:func:`~tests.plugins.cli.measured`): what it shows, its peak
    RSS (MiB) and the seconds it took; a run past 120 seconds is stopped (and says so)."""
    (layout.app / "chain.cnb").write_bytes(cnb.read_bytes())
    (layout.app / "project.toml").write_text(group("chain.cnb"))
    return measured(layout, tmp_path, env={"CNB_PREPARER_PLATFORM": "linux/amd64"})


def test_the_issues_chain_of_composites_is_refused_at_once_in_a_message_linear_in_the_chain(
    layout: Layout, tmp_path: Path, chains: dict[str, Path]
) -> None:
    result, peak, took = run_measured(layout, tmp_path, chains["refused"])
    print(f"a chain of 26 composites, two groups each, refused: {peak:.1f} MiB, {took:.1f} s")
    assert result.code == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    # Each composite is told once with its reason, then named "as above"; the leaf's reason is said once.
    said = f"in group 1, me/leaf@1.0.0: {REASON}; in group 2, me/leaf@1.0.0 (as above)"
    for number in range(26, 1, -1):
        said = (
            f"in group 1, me/c{number}@1.0.0: none of its groups can run on this build ({said}); "
            f"in group 2, me/c{number}@1.0.0 (as above)"
        )
    assert last == f"ERROR: failed to install me/c1@1.0.0: none of its groups can run on this build ({said})"
    assert "Traceback" not in result.stderr and not (layout.layers / "order.toml").exists()
    assert not (layout.buildpacks / "me_c1").exists()
    assert peak < BUDGET_MIB and took < BUDGET_SECONDS, (peak, took)


def test_the_same_chain_for_this_build_is_installed_at_once(
    layout: Layout, tmp_path: Path, chains: dict[str, Path]
) -> None:
    result, peak, took = run_measured(layout, tmp_path, chains["runs"])
    print(f"a chain of 26 composites, two groups each, installed: {peak:.1f} MiB, {took:.1f} s")
    assert result.code == 0, result.stderr
    assert (layout.buildpacks / "me_c26" / "1.0.0" / "buildpack.toml").is_file()
    assert (layout.buildpacks / "me_leaf" / "1.0.0" / "bin" / "build").is_file()
    assert peak < BUDGET_MIB and took < BUDGET_SECONDS, (peak, took)


def test_composites_nested_past_the_bound_are_a_refusal_naming_the_chain(
    layout: Layout, tmp_path: Path, chains: dict[str, Path]
) -> None:
    result, _, took = run_measured(layout, tmp_path, chains["deep"])
    assert result.code == 1, result.stderr
    path = " > ".join(f"me/c{number}@1.0.0" for number in range(1, 34))
    assert result.stderr.strip().splitlines()[-1] == (
        "ERROR: failed to install me/c1@1.0.0: its composites nest more than 32 deep, the most the preparer "
        f"checks: {path}"
    )
    assert "Traceback" not in result.stderr and not (layout.layers / "order.toml").exists()
    assert not (layout.buildpacks / "me_c1").exists() and took < BUDGET_SECONDS
