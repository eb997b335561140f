"""What a prepare run did, as data: the CLI renders it, the library returns it, and ``-prepare-report`` writes it.

The report file is TOML: ``dry-run``, ``[descriptor]`` (``path``, ``schema-version``), ``[effective]`` (the
effective configuration, credentials removed), ``[[buildpacks]]`` (``id``, ``version``, ``source``, ``action``
= ``installed`` | ``present`` | ``inline``, ``digest`` when known, ``resolved`` for bare ids), ``[[env]]`` (``name``,
``action`` = ``written`` | ``kept`` | ``skipped``), ``[app] removed``, ``[[unapplied]]`` (``key``, ``reason``),
``[target]`` (``os``, ``arch``, ``variant``, ``distro-name``, ``distro-version``, ``source``, ``distro-source``),
``exec-env``, ``[system]`` (``path``, ``action``, ``pre``, ``post``) and ``[[groups]]``, each group as the detector will
run it (``[[groups.buildpacks]]``: ``id``, ``version``, ``from``, ``entry``, ``runs``, ``exec-env``, ``skipped``;
docs/detector.md). A run that fails writes only ``[error]`` (``code``, ``message``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from preparer._record import field, record
from preparer.descriptor import NOT_APPLIED, Unapplied
from preparer.files.toml import dumps_toml
from preparer.writes import write_atomic

if TYPE_CHECKING:
    from preparer.detection import Detection, DetectorGroup
    from preparer.files.locked import Locked
    from preparer.policy.rules import Decision
    from preparer.target import Target


@record
class BuildpackRecord:
    """One order entry the preparer wrote, and where its buildpack came from.

    Attributes:
        id: the buildpack's id.
        version: its version.
        source: the ``uri`` as written (credentials removed), or where it was found.
        action: ``installed`` (fetched into ``<buildpacks>``), ``present`` (already there) or ``inline``.
        digest: ``sha256:<hex>`` of the archive or image manifest, when known; for a copy already in
            ``<buildpacks>`` whose files are not the ones fetched, ``dirHash:<hex>`` of that copy (docs/provenance.md),
            the bytes the build runs.
        not_installed: that copy's case: the digest of what was fetched and not installed.
        resolved: how a bare buildpack id in ``uri`` was resolved: ``installed``, ``registry`` or ``image``.
        via: where the bytes came from when not from the source itself: ``download cache``, ``cache repository``.
        signatures: the signatures the platform policy required of its image, verified (:class:`SignatureRecord`).
    """

    id: str
    version: str
    source: str
    action: Literal["installed", "present", "inline"]
    digest: str | None = None
    resolved: str | None = None
    via: str | None = None
    signatures: tuple[SignatureRecord, ...] = ()
    not_installed: str = ""

    def to_dict(self) -> dict[str, Any]:
        """As the report file has it (fields without a value left out)."""
        return {"id": self.id, "version": self.version, "source": self.source, "action": self.action} | {
            key: value for key, value in (("digest", self.digest), ("resolved", self.resolved), ("via", self.via),
                                          ("not-installed", self.not_installed))
            if value
        }  # fmt: skip


@record
class SignatureRecord:
    """A signature that satisfied one of the platform policy's ``[[image.signed-by]]`` rules for an image.

    Attributes:
        entry: the entry that named the image (``io.buildpacks.group[0]``).
        image: the image, as named (credentials removed).
        digest: the digest the signature is for (the platform manifest's, or the index's).
        format: ``cosign`` (the ``sha256-<hex>.sig`` tag) or ``bundle`` (a Sigstore bundle among its referrers).
        key: the SHA-256 fingerprint of the key it verified with (hex of its DER SubjectPublicKeyInfo); ``""`` for a
            keyless signature.
        issuer, subject: a keyless signature's certificate: its OIDC issuer and its subject (SAN).
        log_index: a keyless signature's transparency log entry (its global ``logIndex``).
        integrated_time: a keyless signature's verified signing time, seconds since the epoch.
        line: the line of the platform policy's ``[[image.signed-by]]`` rule it satisfied (the provenance names the
            rule; the report file does not).
    """

    entry: str
    image: str
    digest: str
    format: str
    key: str
    issuer: str = ""
    subject: str = ""
    log_index: int | None = None
    integrated_time: int | None = None
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """As the report file has it (a keyless signature's signing time in RFC 3339, UTC)."""
        common = {"entry": self.entry, "image": self.image, "digest": self.digest, "format": self.format}
        if not self.issuer:
            return common | {"key": self.key}
        keyless: dict[str, Any] = {"issuer": self.issuer, "subject": self.subject}
        if self.log_index is not None:
            keyless["log-index"] = self.log_index
        if self.integrated_time is not None:
            import datetime  # deferred: only keyless signatures are reported with a time

            at = datetime.datetime.fromtimestamp(self.integrated_time, datetime.UTC)
            keyless["integrated-time"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        return common | keyless


@record
class EnvRecord:
    """One build env variable and what happened to its file.

    Attributes:
        name: the variable's name (its file is ``<platform>/env/<name>``).
        action: ``written``, ``kept`` (a platform's own file of that name) or ``skipped``.
    """

    name: str
    action: Literal["written", "kept", "skipped"]

    def to_dict(self) -> dict[str, Any]:
        """As the report file has it."""
        return {"name": self.name, "action": self.action}


@record
class MetadataRecord:
    """project-metadata.toml.

    Attributes:
        path: where it is.
        action: ``written``, ``kept``, ``would write`` or ``would keep``.
        document: its document (written, or the one that would have been).
    """

    path: str
    action: str
    document: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """As the report file has it."""
        return {"path": self.path, "action": self.action} | self.document


@record
class LockChange:
    """What rewriting the lock changed of one entry (``-update-lock``, or a lock written for the first time).

    Attributes:
        entry: where the entry is written (``io.buildpacks.group[0]``).
        old: what it locked before (``None``: it was not locked).
        new: what it locks now (``None``: the entry is gone, and so is its lock).
    """

    entry: str
    old: Locked | None
    new: Locked | None

    def to_dict(self) -> dict[str, Any]:
        """As the report file has it: each side as ``id@version (where)``, or left out."""
        from preparer.files.locked import describe_locked  # deferred: only runs with a lock

        return {"entry": self.entry} | {
            side: describe_locked(value) for side, value in (("old", self.old), ("new", self.new)) if value
        }


@record
class LockRecord:
    """The run's lock.

    Attributes:
        path: the lock file, or ``None`` for a lock given as bytes (``Inputs.lock_data``), which is never written.
        action: ``frozen`` (the run installed what it locks), ``written`` (resolved and written: there was none,
            or ``update_lock``), ``would write`` (a dry run), ``not written`` (a dry run that cannot tell it).
        data: the lock's bytes: the one the run was frozen to, the one written (or, for ``Inputs.lock_data``, to
            keep), the one a dry run with ``update_lock`` would write; ``None`` when a dry run cannot tell it.
        changes: what writing it changed, entry by entry, in the project's order (:class:`LockChange`).
    """

    path: str | None
    action: Literal["frozen", "written", "would write", "not written"]
    data: bytes | None = None
    changes: tuple[LockChange, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """As the report file has it (without the lock's bytes)."""
        head = {"action": self.action} if self.path is None else {"path": self.path, "action": self.action}
        return head | {"changes": [change.to_dict() for change in self.changes]}


@record
class Report:
    """The outcome of :func:`preparer.prepare` (and :func:`preparer.run_plan`); :meth:`to_dict` is the
    ``-prepare-report`` document.

    Attributes:
        descriptor_path: the project descriptor read, or ``None`` without one.
        schema_version: its schema version as declared.
        effective: the effective configuration, credentials removed.
        buildpacks: every order entry written (:class:`BuildpackRecord`).
        env: every build env variable (:class:`EnvRecord`).
        app_removed: how many files include/exclude removed from the app.
        unapplied: every property the preparer did not apply (:class:`~preparer.descriptor.Unapplied`).
        warnings: every warning, in the order found (unapplied properties included), without ``Warning:``.
        dry_run: whether nothing was fetched, written or removed.
        written: paths written, in order (order.toml, installed buildpack directories, env files, metadata).
        project_metadata: project-metadata.toml, when there is something to say of the source.
        policy: what the platform policy decided of each entry (empty without a policy).
        lock: the run's lock (:class:`LockRecord`), with ``Inputs.lock`` or ``Inputs.lock_data``.
        target: the build's target, which every buildpack of the order was checked against (docs/targets.md).
        provenance: the provenance written with the commit (``Inputs.provenance``; docs/provenance.md): the in-toto
            Statement as data, the file's JSON document; ``None`` without one, and in a dry run.
        exec_env: the build's execution environment (``CNB_EXEC_ENV``).
        system: what the run did with system.toml (docs/detector.md): its ``path`` and ``action`` (``merged``,
            ``none``, ``off``, ``not applied``) and, merged, its ``pre`` and ``post`` buildpacks; ``None`` when none
            is given.
        groups: each group as the lifecycle's detector will run it (:class:`~preparer.detector.DetectorGroup`):
            system buildpacks merged, each element marked with where it came from and whether it runs; empty when
            the run neither writes an order nor merges system buildpacks.
    """

    descriptor_path: str | None = None
    schema_version: str | None = None
    effective: dict[str, Any] = field(default_factory=dict)
    buildpacks: tuple[BuildpackRecord, ...] = ()
    env: tuple[EnvRecord, ...] = ()
    app_removed: int = 0
    unapplied: tuple[Unapplied, ...] = ()
    warnings: tuple[str, ...] = ()
    dry_run: bool = False
    written: tuple[str, ...] = ()
    project_metadata: MetadataRecord | None = None
    policy: tuple[Decision, ...] = ()
    lock: LockRecord | None = None
    target: Target | None = None
    provenance: dict[str, Any] | None = None
    exec_env: str | None = None
    system: dict[str, Any] | None = None
    groups: tuple[DetectorGroup, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The ``-prepare-report`` document (TOML-ready) of a run that did not fail."""
        return report_to_toml(self)


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
        "buildpacks": [b.to_dict() for b in report.buildpacks],
        "env": [e.to_dict() for e in report.env],
        "app": {"removed": report.app_removed},
        "unapplied": [u.to_dict() for u in report.unapplied],
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
    signatures = [s.to_dict() for b in report.buildpacks for s in b.signatures]
    if signatures:
        doc["signature"] = signatures
    if report.project_metadata is not None:
        doc["project-metadata"] = report.project_metadata.to_dict()
    if report.lock is not None:
        doc["lock"] = report.lock.to_dict()
    if report.target is not None:
        target = report.target
        doc["target"] = {
            "os": target.os, "arch": target.arch, "variant": target.variant, "distro-name": target.distro_name,
            "distro-version": target.distro_version, "source": target.source,
            "distro-source": target.distro_source,
        }  # fmt: skip
    if report.exec_env is not None:
        doc["exec-env"] = report.exec_env
    if report.system is not None:
        doc["system"] = report.system
    if report.groups:
        doc["groups"] = [group.to_dict() for group in report.groups]
    return doc


def detection_fields(detection: Detection | None) -> dict[str, Any]:
    """The report's fields of what the detector will run (:class:`~preparer.detector.Detection`)."""
    if detection is None:
        return {}
    return {"exec_env": detection.exec_env, "system": detection.system_dict(), "groups": detection.groups}


def write_report(
    path: Path,
    report: Report | None = None,
    *,
    error: tuple[int, str] | None = None,
    places: tuple[tuple[str, Path], ...] = (),
) -> None:
    """Write the report file: ``report``'s document, or for a failed run only ``[error]`` with ``(code, message)``;
    below one of the build's directories (``places``), never through a link.

    :raises ApplyError: the file cannot be written (exit 1).
    """
    if error is not None:
        doc: dict[str, Any] = {"error": {"code": error[0], "message": error[1]}}
    else:
        assert report is not None
        doc = report_to_toml(report)
    write_atomic(path, dumps_toml(doc).encode(), places=places)  # its directory made as needed
