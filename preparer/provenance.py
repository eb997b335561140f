"""The run's provenance: an in-toto Statement v1 whose predicate is SLSA Provenance v1, saying which exact buildpack
bytes the prepared build uses (docs/provenance.md).

It is made from what the run did, never from what it was asked: the files the commit writes are its subjects, read
back from their staged bytes; every order entry is a resolved dependency with the digest of what was installed (the
archive's or the image manifest's sha256, in-toto's ``dirHash`` of an installed tree, the inline script's sha256).
:func:`stage_provenance` stages the file with the commit (all or nothing); :func:`statement` is the pure part.
The bytes are JSON with sorted keys, two-space indents and a final newline, and hold no float: the same inputs give
the same bytes apart from ``runDetails.metadata``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, assert_never

from preparer._logger import current_run
from preparer._version import __version__
from preparer.errors import ApplyError

if TYPE_CHECKING:
    from preparer.detection import Detection
    from preparer.entries import GroupEntry
    from preparer.fetch.base import Fetched
    from preparer.plan import Plan, Step
    from preparer.report import BuildpackRecord, LockRecord, SignatureRecord
    from preparer.settings import ProvenanceSettings
    from preparer.writes import PendingWrites

#: The Statement's ``_type`` (in-toto attestation spec, ``spec/v1/statement.md``).
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
#: The predicate's type: SLSA Provenance v1 (slsa.dev/spec/v1.0/provenance).
PREDICATE_TYPE = "https://slsa.dev/provenance/v1"
#: What the build definition means: the prepare phase of a Cloud Native Buildpacks build, as this project runs it
#: (docs/provenance.md, "buildType").
BUILD_TYPE = "urn:cnb:preparer:prepare:v1"
#: ``runDetails.builder.id`` when the platform names none (``CNB_PREPARER_PROVENANCE_BUILDER_ID``).
DEFAULT_BUILDER_ID = "urn:cnb:preparer"


def dir_hash(root: Path) -> str:
    """in-toto's ``dirHash`` of the tree at ``root``: Go's dirhash ``Hash1`` in lowercase hex, without ``h1:``.

    It is the sha256 of the lines ``<sha256 hex of the file>  <path relative to root>\\n`` of every regular file
    below ``root``, sorted by path as bytes: what ``find . -type f | cut -c3- | LC_ALL=C sort | xargs -r sha256sum |
    sha256sum`` prints in ``root``. Links and other special files are not regular files, and are left out, as that
    command leaves them out; a link is never followed (:func:`tree_hashes` says what the links are).

    :raises ApplyError: the tree cannot be read, or a file's name holds a newline (exit 1).
    """
    return tree_hashes(root)[0]


def tree_hashes(root: Path) -> tuple[str, str | None]:
    """The tree's :func:`dir_hash` and its ``linkHash``: the same sum over its symbolic links, each hashed as if it
    were a file holding its target's text (``find . -type l``, each line ``<sha256 of readlink's bytes>  <path>``),
    so that two trees whose links point elsewhere differ; ``None`` when the tree holds no link.

    A builder's buildpack may hold thousands of small files, so the tree is read the cheap way: each directory
    listed once (the kind of each entry comes with its name, no ``stat``), each file opened relative to its
    directory and read into one buffer reused for every file.

    :raises ApplyError: the tree cannot be read, or a file's name holds a newline (exit 1).
    """
    files: list[tuple[bytes, str]] = []
    links: list[tuple[bytes, str]] = []
    buffer = bytearray(1 << 16)
    view = memoryview(buffer)
    pending = [(str(root), "", os.O_RDONLY | os.O_DIRECTORY)]  # the root itself may be a link, as os.walk's
    try:
        while pending:
            directory, prefix, flags = pending.pop()
            fd = os.open(directory, flags)
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        relative = prefix + entry.name
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(
                                (os.path.join(directory, entry.name), relative + "/", _NO_LINK_DIR)
                            )
                            continue
                        if "\n" in relative and (entry.is_file(follow_symlinks=False) or entry.is_symlink()):
                            raise ApplyError(f"hash {root}", f"a file's name holds a newline: {relative!r}")
                        if entry.is_file(follow_symlinks=False):
                            files.append((os.fsencode(relative), _sha256_at(fd, entry.name, buffer, view)))
                        elif entry.is_symlink():
                            target = os.readlink(entry.name, dir_fd=fd)
                            links.append((os.fsencode(relative), _sha256(os.fsencode(target))))
            finally:
                os.close(fd)
    except OSError as err:
        raise ApplyError(f"hash {root}", err.strerror or str(err)) from err
    return _summed(files), (_summed(links) if links else None)


def _summed(lines: list[tuple[bytes, str]]) -> str:
    """The sha256 hex of ``<digest>  <path>\\n`` for each of ``lines``, sorted by path as bytes."""
    lines.sort()
    return hashlib.sha256(
        b"".join(f"{digest}  ".encode() + name + b"\n" for name, digest in lines)
    ).hexdigest()


#: How a directory below the root is opened: never through a link.
_NO_LINK_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _sha256_at(dir_fd: int, name: str, buffer: bytearray, view: memoryview) -> str:
    """The sha256 hex of the file ``name`` in the directory ``dir_fd`` (never through a link), read into
    ``buffer``."""
    digest = hashlib.sha256()
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    try:
        while read := os.readv(fd, (buffer,)):
            digest.update(view[:read])
            if read < len(buffer):  # a regular file reads short only at its end: no read more to say so
                break
    finally:
        os.close(fd)
    return digest.hexdigest()


def _file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def dumps_statement(statement: Mapping[str, Any]) -> bytes:
    """The file's bytes: JSON, keys sorted, two-space indents, ASCII, a final newline."""
    import json  # deferred: only runs with a provenance write JSON

    return (
        json.dumps(statement, sort_keys=True, indent=2, ensure_ascii=True, allow_nan=False) + "\n"
    ).encode()


def statement(
    subjects: Sequence[tuple[str, bytes]],
    external: Mapping[str, Any],
    internal: Mapping[str, Any],
    dependencies: Sequence[Mapping[str, Any]],
    builder_id: str,
    metadata: Mapping[str, str],
) -> dict[str, Any]:
    """The Statement, from its parts: each subject as ``(name, bytes written)``."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": name, "digest": {"sha256": _sha256(data)}} for name, data in subjects],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "buildDefinition": {
                "buildType": BUILD_TYPE,
                "externalParameters": dict(external),
                "internalParameters": dict(internal),
                "resolvedDependencies": list(dependencies),
            },
            "runDetails": {
                "builder": {"id": builder_id, "version": {"preparer": __version__}},
                "metadata": dict(metadata),
            },
        },
    }


def stage_provenance(
    plan: Plan,
    settings: ProvenanceSettings,
    results: Mapping[int, Fetched],
    records: Sequence[BuildpackRecord],
    written: Sequence[Path],
    lock: LockRecord | None,
    pending: PendingWrites,
    kept: Mapping[tuple[str, str], Path] | None = None,
) -> dict[str, Any]:
    """Stage the provenance (``settings.path``) with the commit's other files (``pending``), once every buildpack is installed.

    :param results: what each fetched step gave, by the step's ``id``.
    :param records: the report's record of each step, in the plan's order.
    :param written: the build's files the commit writes (order.toml, env files, project-metadata.toml): the
        subjects, read back from their staged bytes.
    :param kept: the buildpacks fetched whose copy already in ``<buildpacks>`` has other files, by ``(id,
        version)``: described as the copy the build runs, the artifact fetched as not installed.
    :returns: the statement staged.
    :raises ApplyError: a file or tree cannot be read, or the provenance cannot be staged (exit 1).
    """
    run_id, started = current_run()
    import time  # deferred, as the rest of this module: only runs with a provenance

    metadata = {"invocationId": run_id or "", "finishedOn": _rfc3339(time.time())}
    if started is not None:
        metadata["startedOn"] = _rfc3339(started)
    doc = statement(
        [(_subject_name(path, settings), _staged_bytes(pending, path)) for path in written],
        external_parameters(plan, settings),
        internal_parameters(plan, settings, lock),
        [
            *(
                _described(
                    _dependency(s, results.get(id(s)), r, plan, settings), results.get(id(s)), r, kept or {}
                )
                for s, r in zip(plan.steps, records, strict=True)
            ),
            *_input_files(plan, settings),
        ],
        settings.builder_id,
        metadata,
    )
    pending.add(settings.path, dumps_statement(doc), 0o644)
    return doc


def _rfc3339(seconds: float) -> str:
    import datetime  # deferred, as time

    return datetime.datetime.fromtimestamp(int(seconds), datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _subject_name(path: Path, settings: ProvenanceSettings) -> str:
    """``layers/order.toml``, ``platform/env/NAME``, ``layers/project-metadata.toml``; a file elsewhere by its name."""
    for prefix, directory in (("layers", settings.layers_dir), ("platform", settings.platform_dir)):
        if path.is_relative_to(directory):
            return "/".join((prefix, *path.relative_to(directory).parts))
    return path.name


def _staged_bytes(pending: PendingWrites, path: Path) -> bytes:
    """What the commit is about to rename to ``path``: its temporary file's bytes, read relative to its directory."""
    for directory, temporary, _, final in pending.files:
        if final == path:
            try:
                fd = os.open(temporary, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=directory)
                with os.fdopen(fd, "rb") as f:
                    return f.read()
            except OSError as err:
                raise ApplyError(f"read back {path}", err.strerror or str(err)) from err
    raise ApplyError(f"read back {path}", "it is not among the files the commit writes")


def _shown_path(path: Path, app_dir: Path) -> str:
    """``path`` relative to ``<app>`` when it is inside, else its name: never where the build's directories are,
    so that the same build in another directory gives the same bytes (the digest beside it names the content)."""
    return "/".join(path.relative_to(app_dir).parts) if path.is_relative_to(app_dir) else path.name


def _policy_rule(said: str, plan: Plan) -> str:
    """A policy's rule as a decision says it (``path in sources.allow, line 2 of <file>``), the policy named as
    ``the policy`` rather than by where its file is (``internalParameters.policy.sha256`` names its bytes)."""
    if plan.rules is None:
        return said
    return said.replace(f" of {plan.rules.path}", " of the policy")


def _file_digest(path: Path | None, made_from: Mapping[str, str | None]) -> str | None:
    """The sha256 of the file ``path`` as the plan read it (its fingerprint), else as it is now."""
    if path is None:
        return None
    known = made_from.get(str(path))
    if known is not None:
        return known
    try:
        return _file_sha256(str(path))
    except OSError:
        return None


def external_parameters(plan: Plan, settings: ProvenanceSettings) -> dict[str, Any]:
    """What the app asked for: the descriptor (path, sha256), the platform's namespace and file, and the group
    entries in effect as written, credentials removed (an inline script by its sha256)."""
    made_from = dict(plan.made_from)
    found: dict[str, Any] = {}
    if plan.descriptor_path is not None:
        found["descriptor"] = {
            "path": _shown_path(plan.descriptor_path, settings.app_dir),
            "sha256": _file_digest(plan.descriptor_path, made_from),
        }
    if settings.platform_namespace is not None:
        platform: dict[str, Any] = {"namespace": settings.platform_namespace}
        if settings.platform_config is not None:
            platform["config"] = {
                "path": settings.platform_config.name,
                "sha256": _file_digest(settings.platform_config, made_from),
            }
        found["platform"] = platform
    if settings.lists.given:
        found["lists"] = _lists(settings, made_from)
    groups = {"pre": plan.pre, "group": plan.group, "post": plan.post}
    found["buildpacks"] = {
        name: [_entry(step.entry) for step in steps] for name, steps in groups.items() if steps is not None
    }
    return found


def _lists(settings: ProvenanceSettings, made_from: Mapping[str, str | None]) -> dict[str, Any]:
    """The platform's lists as given (``-buildpack`` and the others): references without credentials, the names of
    ``-env`` variables (never their values: ``-env NPM_TOKEN`` is a credential), each env file with its sha256."""
    from preparer.fetch.locator import redact  # deferred, as in _entry

    lists = settings.lists
    found: dict[str, Any] = {}
    for flag, refs in (
        ("buildpack", lists.buildpacks), ("pre-buildpack", lists.pre_buildpacks),
        ("post-buildpack", lists.post_buildpacks),
    ):  # fmt: skip
        if refs:
            found[flag] = [redact(ref) for ref in refs]
    if lists.build_env:
        found["env"] = [item.partition("=")[0] for item in lists.build_env]
    if lists.env_files:
        found["env-file"] = [
            {"path": _shown_path(path, settings.app_dir), "sha256": _file_digest(path, made_from)}
            for path in lists.env_files
        ]
    return found


def _entry(entry: GroupEntry) -> dict[str, Any]:
    # Deferred: the fetch package stays off runs without a provenance.
    from preparer.fetch.locator import redact

    written: dict[str, Any] = {"entry": entry.key}
    for name, value in (("id", entry.id), ("version", entry.version)):
        if value is not None:
            written[name] = value
    if entry.uri is not None:
        written["uri"] = redact(entry.uri)
    if entry.script is not None:
        script = entry.script
        written["script"] = {
            "api": script.api,
            "shell": script.shell,
            "sha256": _sha256(script.inline.encode()),
        }
    return written


def internal_parameters(plan: Plan, settings: ProvenanceSettings, lock: LockRecord | None) -> dict[str, Any]:
    """What the platform decided: the policy's sha256, the lock's (as read, or as this run writes it), the target,
    the exec-env, the Platform API and, from Platform API 0.15, the groups as the detector will run them."""
    made_from = dict(plan.made_from)
    found: dict[str, Any] = {"execEnv": settings.exec_env, "platformApi": settings.platform_api}
    policy = _file_digest(settings.policy, made_from)
    if policy is None and settings.policy_text is not None:
        data = settings.policy_text
        policy = _sha256(data.encode() if isinstance(data, str) else data)
    if policy is not None:
        found["policy"] = {"sha256": policy}
    if lock is not None:
        found["lock"] = _lock(settings, lock, made_from)
    if plan.detection is not None and plan.detection.applies:
        found["detector"] = _detector(plan.detection, settings.app_dir)
    if plan.target is not None:
        target = plan.target
        found["target"] = {"platform": target.platform, "os": target.os, "arch": target.arch} | {
            key: value
            for key, value in (
                ("variant", target.variant),
                ("distroName", target.distro_name),
                ("distroVersion", target.distro_version),
            )
            if value
        }
    return found


def _detector(detection: Detection, app_dir: Path) -> dict[str, Any]:
    """The groups as the detector will run them (docs/detector.md), as the report has them, keys in camelCase:
    ``system`` (its ``path``, by name as the other files, ``action``, ``pre`` and ``post``) and ``groups``, each a
    list of buildpacks."""
    found: dict[str, Any] = {}
    system = detection.system_dict()
    if system is not None:
        if detection.system_path is not None and "path" in system:
            system = system | {"path": _shown_path(detection.system_path, app_dir)}
        found["system"] = system
    if detection.groups:
        found["groups"] = [[_camel(m.to_dict()) for m in group.members] for group in detection.groups]
    return found


def _camel(said: Mapping[str, Any]) -> dict[str, Any]:
    """``said`` with ``exec-env`` and ``skipped-within`` as ``execEnv`` and ``skippedWithin``."""
    names = {"exec-env": "execEnv", "skipped-within": "skippedWithin"}
    return {names.get(key, key): value for key, value in said.items()}


def _will_not_run(step: Step, plan: Plan) -> dict[str, Any]:
    """Annotations of a buildpack installed that the detector will not run (or runs without some of what it holds):
    ``runs: false`` and why, by the group element its entry became."""
    detection = plan.detection
    if detection is None:
        return {}
    notes: dict[str, Any] = {}
    for group in detection.groups:
        for member in group.members:
            if member.origin != "project" or member.entry != step.entry.key:
                continue
            if member.skipped:
                notes |= {"runs": False, "skipped": member.skipped}
            if member.skipped_within:
                notes["skippedWithin"] = list(member.skipped_within)
    return notes


def _lock(
    settings: ProvenanceSettings, lock: LockRecord, made_from: Mapping[str, str | None]
) -> dict[str, Any]:
    """The lock: frozen to it (its sha256 as read), or written by this run (the sha256 of what is written)."""
    found: dict[str, Any] = {"action": lock.action}
    if lock.path is not None:
        found["path"] = _shown_path(Path(lock.path), settings.app_dir)
    if lock.action == "frozen":
        if settings.lock_data is not None:
            found["sha256"] = _sha256(settings.lock_data)
        elif lock.path is not None:
            found["sha256"] = _file_digest(Path(lock.path), made_from)
    elif lock.data is not None:
        found["sha256"] = _sha256(lock.data)
    return found


def _dependency(
    step: Step, fetched: Fetched | None, record: BuildpackRecord, plan: Plan, settings: ProvenanceSettings
) -> dict[str, Any]:
    """One order entry's resource descriptor: what it names, where it came from, its digest, how it was trusted."""
    # Deferred: the fetch package stays off the import of this module, as off the pipeline's.
    from preparer.fetch import locator as locators
    from preparer.files.buildpack import buildpack_dir
    from preparer.plan import Present

    described: dict[str, Any] = {"name": f"{record.id}@{record.version}"}
    notes: dict[str, Any] = {"entry": step.entry.key} | _will_not_run(step, plan)
    installed = buildpack_dir(settings.buildpacks_dir, record.id, record.version)
    if isinstance(step, Present):
        described["uri"] = f"urn:cnb:builder:{record.id}@{record.version}"
        described["digest"] = _tree_digest(installed, notes)
        return described | {"annotations": notes}
    assert fetched is not None
    locator = step.locator
    recorded = record.not_installed or record.digest  # what was fetched, whichever copy was installed
    match locator:
        case locators.InlineLocator():
            described["digest"] = {"sha256": _sha256(locator.inline.encode())}
            notes["inline"] = True
        case locators.PathLocator():
            notes["path"] = _shown_path(locator.path, settings.app_dir)
            digest = fetched.archive or recorded
            described["digest"] = _digest_set(digest) if digest else _tree_digest(installed, notes)
        case locators.HttpLocator():
            described["digest"] = {"sha256": (fetched.archive or recorded or "").removeprefix("sha256:")}
            described["uri"] = locator.shown + (f"#sha256={locator.sha256}" if locator.sha256 else "")
            if locator.sha256:
                notes["pinned"] = f"sha256:{locator.sha256}"
        # An image, or one the buildpack registry names.
        case locators.ImageLocator() | locators.RegistryLocator() | locators.IdLocator():
            described["digest"] = {"sha256": (fetched.archive or recorded or "").removeprefix("sha256:")}
            registry = record.resolved == "registry" or isinstance(locator, locators.RegistryLocator)
            described["uri"] = _image_uri(registry, fetched, record)
            notes |= _image_notes(registry, fetched, record, plan)
            if isinstance(locator, locators.ImageLocator) and "@" in locator.reference:
                notes["pinned"] = locator.reference.rpartition("@")[2]
        case _ as never:
            assert_never(never)
    if (
        fetched.manifest is not None
    ):  # a .cnb, on disk or downloaded: by the file's digest, holding this image
        notes["manifest"] = fetched.manifest
    notes |= _trust(step, fetched, record, plan)
    return described | {"annotations": notes}


def _described(
    dependency: dict[str, Any],
    fetched: Fetched | None,
    record: BuildpackRecord,
    kept: Mapping[tuple[str, str], Path],
) -> dict[str, Any]:
    """``dependency`` as the bytes on disk have it: when the entry's buildpack was already in ``<buildpacks>`` with
    other files than those fetched, that copy (``urn:cnb:builder:``, its ``dirHash``), the artifact fetched under
    ``notInstalled``; each other buildpack it carries that was so kept, in ``kept``."""
    if fetched is None:
        return dependency
    found = [bp.descriptor for bp in fetched.buildpacks if (bp.descriptor.id, bp.descriptor.version) in kept]
    if not found:
        return dependency
    notes = dependency["annotations"]
    others = [
        _kept(kept[(d.id, d.version)], d.ref)
        for d in found
        if (d.id, d.version) != (record.id, record.version)
    ]
    if others:
        notes["kept"] = others
    if not record.not_installed:
        return dependency
    fetched_one = {key: value for key, value in dependency.items() if key in ("uri", "digest")}
    fetched_notes = {key: value for key, value in notes.items() if key not in ("entry", "kept")}
    own_notes = {key: value for key, value in notes.items() if key in ("entry", "kept")}
    own = kept.get((record.id, record.version))
    digest = (
        _tree_digest(own, own_notes) if own else {"dirHash": (record.digest or "").removeprefix("dirHash:")}
    )
    return {
        "name": dependency["name"],
        "uri": f"urn:cnb:builder:{record.id}@{record.version}",
        "digest": digest,
        "annotations": own_notes
        | {"notInstalled": fetched_one | ({"annotations": fetched_notes} if fetched_notes else {})},
    }


def _kept(path: Path, name: str) -> dict[str, Any]:
    """A copy kept in ``<buildpacks>``, described by its files (its ``linkHash`` noted when it holds links)."""
    notes: dict[str, Any] = {}
    digest = _tree_digest(path, notes)
    return {"name": name, "digest": digest} | ({"annotations": notes} if notes else {})


def _digest_set(digest: str) -> dict[str, str]:
    """``{"sha256": hex}`` of ``sha256:<hex>``, ``{"dirHash": hex}`` of ``dirHash:<hex>``."""
    algorithm, _, value = digest.partition(":")
    return {"dirHash": value} if algorithm == "dirHash" else {"sha256": value}


def _tree_digest(installed: Path, notes: dict[str, Any]) -> dict[str, str]:
    """An installed tree's digest set (in-toto's ``dirHash``), its ``linkHash`` noted when it holds links: in-toto's
    sum leaves links out, and a tree whose ``bin/build`` links elsewhere must not read as the same."""
    files, links = tree_hashes(installed)
    if links is not None:
        notes["linkHash"] = links
    return {"dirHash": files}


def _image_uri(registry: bool, fetched: Fetched, record: BuildpackRecord) -> str:
    """``docker://<registry>/<repository>@sha256:<platform manifest>``; an entry the buildpack registry resolved
    (``registry``) by its registry id."""
    if registry:
        return f"urn:cnb:registry:{record.id}@{record.version}"
    return _docker_uri(fetched.image or fetched.source)


def _docker_uri(image: str) -> str:
    """``docker://<registry>/<repository>@sha256:...`` with the registry named as the policy names it (Docker Hub
    is ``docker.io``, however it was written or keyed): one image, one uri."""
    from preparer.fetch.oci.reference import parse_reference  # deferred, as in _dependency

    ref = parse_reference(image)
    return f"docker://{ref.name}@{ref.digest}" if ref.digest else f"docker://{image}"


def _image_notes(registry: bool, fetched: Fetched, record: BuildpackRecord, plan: Plan) -> dict[str, Any]:
    """An image's index and the platform chosen from it; a registry entry's image."""
    notes: dict[str, Any] = {}
    if registry and fetched.image is not None:
        notes["image"] = _docker_uri(fetched.image)
    if fetched.index is not None:
        notes["index"] = fetched.index
        if plan.target is not None:
            notes["platform"] = plan.target.platform
    if record.resolved is not None:
        notes["resolved"] = record.resolved
    return notes


def _trust(step: Step, fetched: Fetched, record: BuildpackRecord, plan: Plan) -> dict[str, Any]:
    """How the entry was trusted: the lock it was frozen to, the policy's rule, the signatures verified."""
    notes: dict[str, Any] = {}
    if getattr(step, "locked_in", None) is not None:
        notes["locked"] = True
    rules = [decision.rule for decision in plan.policy if decision.key == step.entry.key]
    if rules:
        notes["policy"] = _policy_rule(rules[0], plan)
    if record.signatures:
        notes["signatures"] = [_signature(s, plan) for s in record.signatures]
    carried = [f"{bp.descriptor.id}@{bp.descriptor.version}" for bp in fetched.buildpacks]
    if len(carried) > 1:
        notes["buildpacks"] = carried
    return notes


def _signature(signature: SignatureRecord, plan: Plan) -> dict[str, Any]:
    """A verified signature as the report says it, with the provenance's camelCase names, and the
    ``[[image.signed-by]]`` rule it satisfied (``image.signed-by, line 4 of policy.toml``)."""
    names = {"log-index": "logIndex", "integrated-time": "integratedTime"}
    said = {
        names.get(key, key): value
        for key, value in signature.to_dict().items()
        if key not in ("entry", "image")
    }
    if signature.line is not None and plan.rules is not None:
        said["rule"] = f"image.signed-by, line {signature.line} of the policy"
    return said


def _input_files(plan: Plan, settings: ProvenanceSettings) -> Iterable[dict[str, Any]]:
    """The descriptor (named by its path relative to ``<app>``), the builder's order.toml and the system.toml merged
    (by their names), each with its sha256."""
    made_from = dict(plan.made_from)
    files: list[tuple[Path, str]] = []
    if plan.descriptor_path is not None:
        files.append((plan.descriptor_path, "descriptor"))
    if plan.builder_order is not None:
        files.append((settings.order_path, "builder order"))
    detection = plan.detection
    if detection is not None and detection.system is not None and detection.system_path is not None:
        files.append((detection.system_path, "system buildpacks"))
    for path, role in files:
        digest = _file_digest(path, made_from)
        if digest is not None:
            yield {
                "name": _shown_path(path, settings.app_dir),
                "digest": {"sha256": digest},
                "annotations": {"role": role},
            }
