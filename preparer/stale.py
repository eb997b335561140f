"""Whether a saved plan still says what its files say: the SHA-256 of each file a plan is made from, taken when
:func:`~preparer.pipeline.plan_run` reads them (the provenance records them too), and checked again when
:func:`~preparer.pipeline.run_plan` is given the plan."""

from __future__ import annotations

from typing import Any

from preparer._fs import read_regular
from preparer.appfilter import plan_removal
from preparer.errors import InvalidInputsError
from preparer.inputs import Inputs
from preparer.lock.modes import lock_path
from preparer.plan import Plan


def fingerprints(inputs: Inputs) -> tuple[tuple[str, str | None], ...]:
    """The SHA-256 of each file a plan is made from (``None``: it does not exist, or is not a file): the descriptor,
    the platform file, the policy, the lock, the builder's order, the env files."""
    import hashlib  # deferred: only plans are fingerprinted

    paths = (
        inputs.descriptor_path,
        inputs.platform_config,
        inputs.policy,
        lock_path(inputs),
        inputs.order_path,
        inputs.system_path,
        *inputs.env_files,
        inputs.analyzed_path,  # the target
    )
    found: list[tuple[str, str | None]] = []
    for path in paths:
        if path is None:
            continue
        if path == inputs.descriptor_path and inputs.descriptor_data is not None:
            found.append((str(path), hashlib.sha256(_descriptor_bytes(inputs.descriptor_data)).hexdigest()))
            continue
        try:  # read as every input file is: a FIFO or a device is refused, never waited on or read forever
            digest: str | None = hashlib.sha256(read_regular(path, FINGERPRINTED_BYTES)).hexdigest()
        except (OSError, ValueError):
            digest = None  # what reads it says why, in the run
        found.append((str(path), digest))
    return tuple(found)


def _descriptor_bytes(data: str | bytes | dict[str, Any]) -> bytes:
    """The bytes of a descriptor given as data, as read: its text, or the text its tables are read as."""
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode(errors="surrogatepass")
    from preparer.descriptor import descriptor_text  # deferred: only descriptors given as tables are written
    from preparer.errors import DescriptorError

    try:
        return descriptor_text(data).encode()
    except DescriptorError:
        return b""  # reading it says why, in the run


#: A file a plan is made from is fingerprinted up to this size (each has its own, smaller bound where it is read).
FINGERPRINTED_BYTES = 16 << 20


def check_not_stale(plan: Plan, inputs: Inputs) -> None:
    """``plan`` still says what its files say: none of them changed since :func:`plan_run` read them, and
    include/exclude selects the same files of the app. A saved plan is refused otherwise, as ``terraform apply``
    refuses a stale one: carrying out what the files no longer say would surprise.

    :raises InvalidInputsError: naming what changed (exit 3); nothing has changed on disk.
    """
    if plan.inputs is None:
        return
    changed = [path for (path, digest), (_, now) in zip(plan.made_from, fingerprints(inputs), strict=False)
               if digest != now]  # fmt: skip
    if not changed and plan.removal is not None:
        config = plan.config
        keep = (plan.descriptor_path, lock_path(inputs))  # as the plan keeps them (preparer.pipeline)
        now_removed = plan_removal(inputs.app_dir, config.include, config.exclude, *keep)
        if (now_removed.files, now_removed.dirs) != (plan.removal.files, plan.removal.dirs):
            changed.append(f"the files of {inputs.app_dir} that {config.filter_key} selects")
    if changed:
        raise InvalidInputsError(
            "run the plan", f"{', '.join(changed)} changed since it was made: make a new plan with plan_run"
        )
