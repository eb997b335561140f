"""The lock file's ``[target]``: written when the run has a target, read back, absent in older locks, and
refused when malformed (exit 3, naming the key and its line); a lock of several targets, a ``[[target]]`` each."""

from __future__ import annotations

import pytest

from preparer.errors import DescriptorError
from preparer.files.locked import Locked
from preparer.files.lockfile import TargetLock, dumps_lock, parse_lock

ENTRY = Locked("io.buildpacks.group[0]", {"uri": "./bp"}, "me/bp", "1.0.0", "path")


@pytest.mark.parametrize("target", ["linux/arm64/v8", "linux/amd64", None])
def test_the_target_is_written_and_read_back(target: str | None) -> None:
    data = dumps_lock([ENTRY], target)
    assert ("[target]" in data.decode()) is (target is not None)
    lock = parse_lock(data, "preparer.lock")
    assert lock.targets == (TargetLock(target, (ENTRY,)),)


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


ARM = Locked("io.buildpacks.group[0]", {"uri": "./bp"}, "me/bp", "1.1.0", "path")


def test_a_lock_of_several_targets_is_version_2_in_the_order_of_their_names_and_read_back() -> None:
    one = dumps_lock([ENTRY], "linux/arm64", [TargetLock("linux/amd64", (ENTRY,))])
    other = dumps_lock([ENTRY], "linux/amd64", [TargetLock("linux/arm64", (ENTRY,))])
    assert one == other  # whichever build added which
    text = one.decode()
    assert "lock-version = 2\n" in text and text.index('arch = "amd64"') < text.index('arch = "arm64"')
    assert "[[target.buildpack]]" in text and "\n[[buildpack]]" not in text
    lock = parse_lock(dumps_lock([ARM], "linux/arm64/v8", [TargetLock("linux/amd64", (ENTRY,))]), "l")
    assert lock.targets == (TargetLock("linux/amd64", (ENTRY,)), TargetLock("linux/arm64/v8", (ARM,)))
    assert lock.of("linux/arm64") == TargetLock(
        "linux/arm64/v8", (ARM,)
    )  # the same platform written otherwise
    assert lock.of("linux/arm/v7") is None
    assert lock.besides("linux/arm64") == (TargetLock("linux/amd64", (ENTRY,)),)
    assert lock.platforms == "linux/amd64, linux/arm64/v8"
    # A lock that records no target is for any.
    old = parse_lock(dumps_lock([ENTRY]), "l")
    assert old.of("linux/s390x") == TargetLock(None, (ENTRY,)) and old.besides("linux/s390x") == ()


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        (
            '[target]\nos = "linux"\narch = "amd64"\n',
            "target (line 2): must be an array of tables ([[target]])",
        ),
        ('[[buildpack]]\nentry = "x"\n', "buildpack (line 2): unknown key"),
        (
            '[[target]]\nos = "linux"\narch = "amd64"\n[[target]]\nos = "linux"\narch = "amd64"\nvariant = "v1"\n',
            "target[1] (line 5): linux/amd64/v1 is locked twice: a lock has one [[target]] per target",
        ),
        (
            (
                '[[target]]\nos = "linux"\narch = "amd64"\n[[target.buildpack]]\nentry = "io.buildpacks.group[0]"\n'
                'id = "me/bp"\nversion = "1"\nsource = "ftp"\n'
            ),
            "target[0].buildpack[0].source (line 9): unknown source 'ftp'",
        ),
    ],
    ids=["a table", "top-level entries", "a target twice", "an entry's key"],
)
def test_a_malformed_lock_of_several_targets_is_refused_naming_the_key(text: str, cause: str) -> None:
    with pytest.raises(DescriptorError) as info:
        parse_lock(f"lock-version = 2\n{text}".encode(), "preparer.lock")
    assert info.value.exit_code == 3
    assert str(info.value).startswith(f"failed to read lock file preparer.lock: {cause}")
