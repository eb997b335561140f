"""A lock of an image pulled through an image index (docs/lock.md): the index's digest is locked beside the platform
manifest's, and a frozen run pulls through it, so an image signed at its index (``cosign sign <multi-arch tag>``)
verifies on every frozen run. Real CLI, the suite's real registry, images signed as cosign signs them.
"""

from __future__ import annotations

import re
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path

from tests.golden import Layout
from tests.integration.test_fleet_pins import two_platforms
from tests.integration.test_lock import fresh, order
from tests.plugins.cli import Result
from tests.plugins.registry import Registry
from tests.plugins.signing import cosign_sign, make_key
from tests.projects import group


def test_an_image_signed_at_its_index_verifies_on_every_frozen_run(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry
) -> None:
    index, amd = two_platforms(tmp_path, registry.ref("lock/multi", "multi"))
    key = make_key(tmp_path / "keys")
    cosign_sign(registry, "lock/multi", index, key)  # the index only, as cosign signs a multi-arch tag
    policy = tmp_path / "policy.toml"
    policy.write_text('[[image.signed-by]]\nkeys = ["keys/cosign.pub"]\n')
    lock = tmp_path / "preparer.lock"
    project = group(f"docker://{registry.ref('lock/multi', 'multi')}")
    first = preparer("-lock", str(lock), "-policy", str(policy), project=project)
    assert first.code == 0, first.stderr
    [locked] = tomllib.loads(lock.read_text())["buildpack"]
    assert (locked["pinned"], locked["digest"], locked["index"]) == (
        f"{registry.host}/lock/multi@{amd}",
        amd,
        index,
    )
    shutil.rmtree(tmp_path / "cache")  # the first frozen run asks the registry, the second has its record
    for _ in range(2):
        fresh(layout)
        frozen = preparer("-lock", str(lock), "-policy", str(policy), project=project)
        assert frozen.code == 0, frozen.stderr
        assert order(layout) == [("acme/multi", "1.0.0")]


def test_a_locked_index_must_lead_to_the_locked_manifest(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry
) -> None:
    """The index is the app's input too: one that leads elsewhere (another platform's manifest here) is exit 1
    naming both digests. The lock is one written before its target was recorded (a lock that records it is
    refused on another target before anything is pulled: test_targets.py)."""
    _, amd = two_platforms(tmp_path, registry.ref("lock/multi2", "multi"))
    lock = tmp_path / "preparer.lock"
    project = group(f"docker://{registry.ref('lock/multi2', 'multi')}")
    assert preparer("-lock", str(lock), project=project).code == 0
    text = lock.read_text()
    lock.write_text(text.replace('[target]\nos = "linux"\narch = "amd64"\n\n', ""))
    assert "[target]" in text and "[target]" not in lock.read_text()
    fresh(layout)
    arm = preparer("-lock", str(lock), project=project, env={"CNB_PREPARER_PLATFORM": "linux/arm64"})
    assert arm.code == 1
    assert re.search(
        rf"its bytes are sha256:[0-9a-f]{{64}}, but the lock file {lock} locks {amd}", arm.stderr
    )


def test_a_lock_without_an_index_is_read_as_before(
    preparer: Callable[..., Result], layout: Layout, tmp_path: Path, registry: Registry
) -> None:
    """A lock an older preparer wrote has no ``index``: the image is pulled by the locked manifest's digest."""
    index, _ = two_platforms(tmp_path, registry.ref("lock/multi3", "multi"))
    lock = tmp_path / "preparer.lock"
    project = group(f"docker://{registry.ref('lock/multi3', 'multi')}")
    assert preparer("-lock", str(lock), project=project).code == 0
    text = lock.read_text()
    old = text.replace(f'index = "{index}"\n', "")
    assert old != text
    lock.write_text(old)
    fresh(layout)
    frozen = preparer("-lock", str(lock), project=project)
    assert frozen.code == 0, frozen.stderr
    assert order(layout) == [("acme/multi", "1.0.0")]
    assert lock.read_text() == old  # a frozen run does not rewrite it
