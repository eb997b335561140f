"""The lock file's ``[target]``: written when the run has a target, read back, absent in older locks, and
refused when malformed (exit 3, naming the key and its line)."""

from __future__ import annotations

import pytest

from preparer.errors import DescriptorError
from preparer.files.locked import Locked
from preparer.files.lockfile import dumps_lock, parse_lock

ENTRY = Locked("io.buildpacks.group[0]", {"uri": "./bp"}, "me/bp", "1.0.0", "path")


@pytest.mark.parametrize("target", ["linux/arm64/v8", "linux/amd64", None])
def test_the_target_is_written_and_read_back(target: str | None) -> None:
    data = dumps_lock([ENTRY], target)
    assert ("[target]" in data.decode()) is (target is not None)
    lock = parse_lock(data, "preparer.lock")
    assert (lock.entries, lock.target) == ((ENTRY,), target)


@pytest.mark.parametrize(
    ("table", "cause"),
    [
        ('[target]\nos = "linux"\n', "target.arch: must be lower case letters and digits"),
        ('[target]\nos = "Linux"\narch = "amd64"\n', "target.os (line 3): must be lower case"),
        (
            '[target]\nos = "linux"\narch = "amd64"\nvariant = 1\n',
            "target.variant (line 5): must be lower case",
        ),
        ('[target]\nos = "linux"\narch = "amd64"\nabi = "x"\n', "target.abi (line 5): unknown key"),
        ('target = "linux/amd64"\n', "target (line 2): must be a table"),
    ],
)
def test_a_malformed_target_is_refused_naming_the_key(table: str, cause: str) -> None:
    data = f"lock-version = 1\n{table}".encode()
    with pytest.raises(DescriptorError) as info:
        parse_lock(data, "preparer.lock")
    assert info.value.exit_code == 3
    assert str(info.value).startswith(f"failed to read lock file preparer.lock: {cause}")
