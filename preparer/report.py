"""What a prepare run did, as data: the CLI renders it, the library returns it, and ``-prepare-report`` writes it.

The report file is TOML: ``dry-run``, ``[descriptor]`` (``path``, ``schema-version``), ``[effective]`` (the
effective configuration, credentials removed), ``[[buildpacks]]`` (``id``, ``version``, ``source``, ``action``
= ``installed`` | ``present`` | ``inline``, ``digest`` when known, ``resolved`` for bare ids), ``[[env]]`` (``name``,
``action`` = ``written`` | ``kept`` | ``skipped``), ``[app] removed``, ``[[unapplied]]`` (``key``, ``reason``).
A run that fails writes only ``[error]`` (``code``, ``message``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from preparer.descriptor import Unapplied
from preparer.files._toml import dumps_toml, write_atomic

if TYPE_CHECKING:
    from preparer.policy.rules import Decision


class BuildpackRecord(NamedTuple):
    """One order entry the preparer wrote, and where its buildpack came from."""

    id: str
    version: str
    source: str
    action: Literal["installed", "present", "inline"]
    digest: str | None = None
    #: How a bare buildpack id in ``uri`` was resolved: ``installed``, ``registry`` or ``image``.
    resolved: str | None = None
    #: Where the bytes came from when not from the source itself: ``download cache``, ``cache repository``.
    via: str | None = None


class EnvRecord(NamedTuple):
    """One build env variable and what happened to its file."""

    name: str
    action: Literal["written", "kept", "skipped"]


class MetadataRecord(NamedTuple):
    """project-metadata.toml: where, what was done (``written``, ``kept``, ``would write``, ``would keep``), and
    the document (written, or the one that would have been)."""

    path: str
    action: str
    document: dict[str, Any]


class Report(NamedTuple):
    """The outcome of :func:`preparer.prepare`."""

    descriptor_path: str | None = None
    schema_version: str | None = None
    effective: dict[str, Any] = {}  # noqa: RUF012 (never mutated by the preparer)
    buildpacks: tuple[BuildpackRecord, ...] = ()
    env: tuple[EnvRecord, ...] = ()
    app_removed: int = 0
    unapplied: tuple[Unapplied, ...] = ()
    #: Every warning, in the order found (unapplied properties included), without the ``Warning:`` prefix.
    warnings: tuple[str, ...] = ()
    dry_run: bool = False
    #: Paths written, in order (order.toml, installed buildpack directories, env files, project metadata).
    written: tuple[str, ...] = ()
    #: project-metadata.toml, when there is something to say of the source.
    project_metadata: MetadataRecord | None = None
    #: What the platform policy decided of each entry (empty without a policy).
    policy: tuple[Decision, ...] = ()


#: The reason given when nothing more specific applies.
NOT_APPLIED = "not applied by the preparer"


def unapplied_message(item: Unapplied) -> str:
    """The warning line for ``item``, without the ``Warning: `` prefix.

    >>> unapplied_message(Unapplied("io.buildpacks.builder", NOT_APPLIED))
    'io.buildpacks.builder is not applied by the preparer'
    """
    if item.reason == NOT_APPLIED:
        return f"{item.key} is not applied by the preparer"
    return f"{item.key} is not applied by the preparer: {item.reason}"


def report_to_toml(report: Report) -> dict[str, Any]:
    """The ``-prepare-report`` document of a run that did not fail."""
    descriptor: dict[str, Any] = {}
    if report.descriptor_path is not None:
        descriptor["path"] = report.descriptor_path
    if report.schema_version is not None:
        descriptor["schema-version"] = report.schema_version
    doc: dict[str, Any] = {
        "dry-run": report.dry_run,
        "descriptor": descriptor,
        "effective": report.effective,
        "buildpacks": [
            {"id": b.id, "version": b.version, "source": b.source, "action": b.action}
            | ({"digest": b.digest} if b.digest else {})
            | ({"resolved": b.resolved} if b.resolved else {})
            | ({"via": b.via} if b.via else {})
            for b in report.buildpacks
        ],
        "env": [{"name": e.name, "action": e.action} for e in report.env],
        "app": {"removed": report.app_removed},
        "unapplied": [{"key": u.key, "reason": u.reason} for u in report.unapplied],
    }
    if report.policy:
        doc["policy"] = [
            {
                "entry": d.key,
                "source": d.written,
                "decision": "allowed" if d.allowed else "refused",
                "rule": d.rule,
            }
            for d in report.policy
        ]
    if report.project_metadata is not None:
        m = report.project_metadata
        doc["project-metadata"] = {"path": m.path, "action": m.action} | m.document
    return doc


def write_report(path: Path, report: Report | None = None, *, error: tuple[int, str] | None = None) -> None:
    """Write the report file: ``report``'s document, or for a failed run only ``[error]`` with ``(code, message)``.

    :raises ApplyError: the file cannot be written (exit 1).
    """
    if error is not None:
        doc: dict[str, Any] = {"error": {"code": error[0], "message": error[1]}}
    else:
        assert report is not None
        doc = report_to_toml(report)
    with contextlib.suppress(OSError):  # write_atomic reports the failure
        path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, dumps_toml(doc).encode())
