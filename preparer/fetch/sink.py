"""Where one fetch puts what it makes besides the buildpack's bytes: its staging directory, its progress, its
warnings, and the policy's limits it is held to."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from preparer._fs import no_space
from preparer._logger import log
from preparer._record import field, record
from preparer.errors import NoSpaceError, with_fields
from preparer.fetch.guard import Guard
from preparer.fetch.streams import ProgressFn


def no_progress(source: str, done: int, total: int | None) -> None:
    """The progress callback that reports nothing."""


def log_warning(message: str) -> None:
    """The warning callback of a fetch run outside a pipeline: the ``preparer`` logger."""
    log.warning("%s", message)


@record
class Sink:
    """What one fetch writes to and reports to."""

    #: A private directory of the run: a fetch writes only in new directories below it.
    staging: Path
    #: Told how far each download is: ``(source, bytes done, total or None)``.
    progress: ProgressFn = no_progress
    #: Told every warning the fetch has for the user (a cache entry discarded, a lock not taken).
    warn: Callable[[str], None] = log_warning
    #: The platform policy's limits and decisions for this fetch (``None``: no policy).
    guard: Guard | None = None
    #: The staging directory and every directory above it, by device and inode, found by the run's first copy of a
    #: local directory (:func:`preparer.fetch.tree.copy_tree`) and shared by the run's fetches (a sink made from
    #: this one with ``replace`` holds the same dict): a directory among them is never copied.
    above_staging: dict[tuple[int, int], Path] = field(default_factory=dict, compare=False, repr=False)

    def staging_full(self, source: str, full: OSError) -> NoSpaceError:
        """The error of installing ``source`` into staging on a full disk (``full``), naming where staging is:
        ``<buildpacks>``, beside which it is made (hidden), or ``staging`` (``$TMPDIR``, when ``<buildpacks>``
        cannot be written); and that directory."""
        place = "<buildpacks>" if self.staging.name.startswith(".") else "staging"
        directory = self.staging.parent
        error = NoSpaceError(f"install {source}", no_space(full, place, directory))
        return with_fields(error, place=place, directory=str(directory))
