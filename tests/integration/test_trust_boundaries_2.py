"""The second trust-boundaries review, attack by attack (docs/security.md): the policy decides on what is really
fetched, root never follows a link planted by the build user, the app's ``.git`` is input, time is bounded, and
what the real lifecycle accepts is accepted. Fleet-cache attacks are in test_fleet.py, git ones in
test_project_metadata.py.

Each test performs the attack as an adversary would, on real servers on 127.0.0.1 and, where ownership matters,
as a real second user (uid 1000; those tests need root and are skipped without it).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable

from tests.buildpacks import make_dir
from tests.golden import Layout
from tests.plugins.cli import Result
from tests.projects import HEAD

# 12. A version with x in its build part is a concrete version, as the lifecycle reads it.


def test_x_in_a_build_or_prerelease_part_is_a_version_not_a_range(
    preparer: Callable[..., Result], layout: Layout
) -> None:
    for version in ("1.0.0+build.x", "1.0.0-x.1"):
        make_dir(layout.buildpacks / "me_built" / version, "me/built", version)
    project = HEAD + '[[io.buildpacks.group]]\nid = "me/built"\nversion = "1.0.0+build.x"\n'
    result = preparer(project=project)
    assert result.code == 0, result.stderr
    order = tomllib.loads((layout.layers / "order.toml").read_text())
    assert order["order"][0]["group"] == [{"id": "me/built", "version": "1.0.0+build.x"}]
    prerelease = preparer(project=project.replace("1.0.0+build.x", "1.0.0-x.1"))
    assert prerelease.code == 0, prerelease.stderr
    for wildcard in ("1.x", "1.0.X", "*", "1.*-rc"):
        refused = preparer(project=project.replace("1.0.0+build.x", wildcard))
        assert refused.code == 3, (wildcard, refused.stderr)
        assert f"'{wildcard}' is a version range" in refused.stderr
