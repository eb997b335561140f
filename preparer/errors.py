"""Errors raised by the preparer's library code.

Every error carries the exit code the CLI uses and formats as ``failed to <action>: <cause>``,
the lifecycle's message shape.
"""

from __future__ import annotations

from typing import TypeVar

from preparer.exit import ExitCode

E = TypeVar("E", bound="PreparerError")


class PreparerError(Exception):
    """All errors raised by this package: an action that failed and why."""

    exit_code: int = ExitCode.FAILED

    def __init__(self, action: str, cause: str | BaseException | None = None) -> None:
        self.action = action
        self.cause = None if cause is None else str(cause)
        super().__init__(f"failed to {action}" if self.cause is None else f"failed to {action}: {self.cause}")

    @property
    def message(self) -> str:
        """The whole ``failed to <action>: <cause>`` sentence."""
        return str(self)

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled as it is (message, exit code and every field), without calling __init__ again: a process pool
        # hands the same error back.
        return (_rebuild, (type(self), self.args, self.__dict__))


def with_fields(error: E, **fields: object) -> E:
    """``error`` with its data fields set (those of its class; see each class's attributes)."""
    for name, value in fields.items():
        setattr(error, name, value)
    return error


def _rebuild(cls: type[PreparerError], args: tuple[object, ...], state: dict[str, object]) -> PreparerError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class InvalidInputsError(PreparerError):
    """Inputs that are well formed but invalid: flags, environment, a missing explicit file.

    Attributes:
        field: the :class:`~preparer.Inputs` field at fault, when one is (``http_timeout``).
    """

    exit_code = ExitCode.INVALID_INPUTS
    field: str | None = None


class DescriptorError(InvalidInputsError):
    """A project descriptor or platform file that cannot be read or violates its schema.

    Attributes:
        path: the file, when the error is about one.
        key: the dotted key at fault, as written (``io.buildpacks.group[1].uri``), for a schema error.
        line: the line (from 1) where the syntax error is, or where the key at fault is written.
        column: the column (from 1) of the same.
        problems: every problem found in the files, in their order (this one first), when the configuration was
            checked as a whole: one message each, as the command prints them.
    """

    path: str | None = None
    key: str | None = None
    line: int | None = None
    column: int | None = None
    problems: tuple[DescriptorError, ...] = ()


class PolicyRefused(InvalidInputsError):
    """The platform policy refuses an entry (exit 3), before anything is fetched.

    Attributes:
        entry: where the entry is written (``io.buildpacks.group[2]``).
        rule: the policy's key that refuses it (``sources.allow``).
        policy: the policy file.
        line: the line of the policy file where the rule is (``None``: the rule's default).
    """

    entry: str | None = None
    rule: str | None = None
    policy: str | None = None
    line: int | None = None


class PolicyError(InvalidInputsError):
    """The platform policy cannot be read or breaks its schema (exit 3): the platform's file, not the user's.

    Attributes:
        path: the policy file (``policy data`` for a policy given as text).
        key: the policy's key at fault, dotted (``limits.run.entries``), when one is.
        line: the line (from 1) where it is written, when known.
        column: the column (from 1) of a problem of the file's text (not TOML, not UTF-8, past a bound).
        problems: every problem of the policy, in the file's order (this one first), one message each, as the
            command prints them.
    """

    field = "policy"
    path: str | None = None
    key: str | None = None
    line: int | None = None
    column: int | None = None
    problems: tuple[PolicyError, ...] = ()


class LockRefused(InvalidInputsError):
    """A run frozen to its lock refuses it (exit 3), before anything is fetched: an entry added, removed or changed
    since the lock was written, a locked source that is not what the entry names, or a lock made for another build.

    Attributes:
        lock: the lock file (``Inputs.lock_data`` for a lock given as bytes).
        entry: the entry at fault (``io.buildpacks.group[0]``); ``None`` when the lock as a whole is.
    """

    field = "lock"
    lock: str | None = None
    entry: str | None = None


class PlatformAPIError(PreparerError):
    """``CNB_PLATFORM_API`` is unset, unparsable or unsupported."""

    exit_code = ExitCode.INCOMPATIBLE_PLATFORM_API


class BuildpackAPIError(PreparerError):
    """A buildpack's ``api`` is outside the supported Buildpack API range."""

    exit_code = ExitCode.INCOMPATIBLE_BUILDPACK_API


class FetchError(PreparerError):
    """A buildpack could not be resolved, downloaded, verified or unpacked.

    Attributes:
        source: the group entry's ``uri`` (or id) as written, credentials removed.
        url: the http(s) URL asked for, without credentials or query, when there is one.
        status: the HTTP status of the answer, when there was one.
        transient: whether trying again later may help (the network, a 5xx, a rate limit), or not (a 404, a pin,
            an archive the rules refuse).
    """

    source: str | None = None
    url: str | None = None
    status: int | None = None
    transient: bool = False


class DigestMismatch(FetchError):
    """Bytes that do not hash to the digest they must have (a pin, a lock, a manifest's).

    Attributes:
        expected: the digest they must have (``sha256:...``).
        got: the digest they have.
    """

    expected: str = ""
    got: str = ""


class SignatureRefused(FetchError):
    """An image is not signed as the platform policy's ``[[image.signed-by]]`` requires (exit 1); nothing of it was
    pulled past its manifest.

    Attributes:
        entry: where the entry is written (``io.buildpacks.group[2]``), when known.
        image: the image as named (credentials removed).
        digest: the digest a signature had to be for (the platform manifest's).
        reason: ``unsigned`` (no signature found), ``unverified`` (none verifies with the rule's keys),
            ``other-digest`` (one verifies, but is for another image, ``signed_digest``) or ``not-a-signature``
            (what verifies is an attestation of another kind, or too many objects to look at).
        keys: the SHA-256 fingerprints of the rule's keys.
        signed_digest: with ``other-digest``, the digest that signature is for.
        policy: the policy file; ``line``: the line of the ``[[image.signed-by]]`` rule.
    """

    entry: str | None = None
    image: str | None = None
    digest: str | None = None
    reason: str | None = None
    keys: tuple[str, ...] = ()
    signed_digest: str | None = None
    rule: str = "image.signed-by"
    policy: str | None = None
    line: int | None = None


class LockMismatch(FetchError):
    """What a run frozen to its lock fetched is not what the lock locks (exit 1): other bytes, or another
    buildpack; nothing was installed.

    Attributes:
        lock: the lock file (``Inputs.lock_data`` for a lock given as bytes).
        entry: the entry (``io.buildpacks.group[0]``).
        locked: what the lock locks: a digest (``sha256:...``), or ``id@version``.
        actual: what was fetched, in the same form.
    """

    lock: str | None = None
    entry: str | None = None
    locked: str | None = None
    actual: str | None = None


class RunLimitReached(FetchError):
    """A limit of the whole run (its time, or the platform policy's totals) was reached: said once for the run,
    not once for each buildpack it stopped."""


class FetchErrors(FetchError):
    """Several entries of a group failed to fetch: each error, in the group's order; the exit code is the first's.

    Its message is ``failed to fetch N buildpacks:`` and each error's own message on a line of its own.
    """

    def __init__(self, errors: tuple[PreparerError, ...]) -> None:
        self.errors = errors
        self.exit_code = errors[0].exit_code
        super().__init__(f"fetch {len(errors)} buildpacks")
        self.cause = "\n" + "\n".join("  " + error.message for error in errors)
        self.args = (f"failed to fetch {len(errors)} buildpacks:{self.cause}",)


class TargetRefused(PreparerError):
    """A buildpack the order names cannot run on the build's target (exit 1), decided before anything is written.

    Attributes:
        buildpack: ``<id>@<version>`` of the buildpack the order names (a composite's, when none of its groups can).
        target: the build's ``os/arch[/variant]``.
        source: the setting that gave it (``CNB_PREPARER_PLATFORM``).
    """

    buildpack: str | None = None
    target: str | None = None
    source: str | None = None


class DetectionRefused(PreparerError):
    """What the run prepares is what the lifecycle's detector would fail on, or find nothing to run in (exit 1),
    found before anything is written (docs/detector.md): a system buildpack not in ``<buildpacks>``, a buildpack of
    the builder's order not there, a group every buildpack of which it would skip on its exec-env.

    Attributes:
        buildpack: ``<id>@<version>`` at fault, when one is.
        file: the file that names it (system.toml, the builder's order.toml), when one does.
    """

    buildpack: str | None = None
    file: str | None = None


class BuilderError(PreparerError):
    """The builder's own files (``-order``, a ``buildpack.toml`` in ``<buildpacks>``) are missing or malformed."""


class NotFoundError(FetchError):
    """What was asked for does not exist where it was looked for (an HTTP 404, a missing image or index entry)."""


class UnexpectedError(PreparerError):
    """Something the preparer does not foresee went wrong (the system refused an operation, or a bug): the cause
    names the original error, and nothing has changed on disk."""


class Cancelled(PreparerError):
    """The run was stopped before it was done, and nothing changed (or, stopped during the commit's last steps,
    everything it was to do was done): its :class:`~preparer.interrupt.Cancel` handle was set (exit 130), its
    deadline passed (exit 1), or the process was asked to stop (:func:`preparer.interrupt.stop`; SIGINT 130,
    SIGTERM 143). An ordinary error: ``except Exception`` sees it, and an event loop goes on."""

    def __init__(self, cause: str, exit_code: int = 130, signum: int | None = None) -> None:
        super().__init__("prepare", cause)
        self.exit_code = exit_code
        #: The signal that stopped the process's runs, if one did.
        self.signum = signum

    @classmethod
    def by_signal(cls, signum: int) -> Cancelled:
        import signal  # deferred: only a stopped run names its signal

        return cls(f"interrupted ({signal.Signals(signum).name})", 128 + signum, signum)


class ApplyError(PreparerError):
    """Writing the prepared outputs failed."""


class NoSpaceError(PreparerError):
    """A file system the run writes to is full (``ENOSPC``), or the user's disk quota on it is used up
    (``EDQUOT``): exit 1, and nothing was changed. Never read as damage: a cached copy stays in the cache.

    Attributes:
        place: the directory's role, as the docs name it: ``<buildpacks>``, ``<layers>``, ``<platform>``,
            ``<app>``, ``staging`` (``$TMPDIR``, when ``<buildpacks>`` cannot be staged in) or ``the download
            cache``.
        directory: that directory.
    """

    place: str | None = None
    directory: str | None = None
