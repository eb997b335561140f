"""``project-metadata.toml``: where the app's source came from, which the exporter turns into the image label
``io.buildpacks.project.metadata`` (platform spec, "project-metadata.toml").

Precedence (docs/decisions.md, "Project metadata"): a file the platform put at the path first (kept); else the
descriptor's ``version`` / ``source-url`` (``[_]``, or ``[project]`` in schema 0.1), as ``type = "project"``; else
the app's git repository, as ``type = "git"``; else no file. URLs never keep a user name, password or token.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Literal

from preparer._record import record
from preparer.descriptor import ProjectDescriptor

log = logging.getLogger("preparer")


@record
class ProjectMetadata:
    """The ``[source]`` of project-metadata.toml."""

    type: Literal["project", "git"]
    version: dict[str, str]
    metadata: dict[str, Any]

    def document(self) -> dict[str, Any]:
        """The file's TOML document, empty tables left out."""
        source: dict[str, Any] = {"type": self.type}
        if self.version:
            source["version"] = dict(self.version)
        if self.metadata:
            source["metadata"] = dict(self.metadata)
        return {"source": source}


@record
class MetadataWrite:
    """What the run does about the file at ``path``."""

    path: Path
    metadata: ProjectMetadata
    #: ``kept``: the platform already put a file there, which wins.
    action: Literal["written", "kept"]


def plan_metadata(
    descriptor: ProjectDescriptor, app_dir: Path, path: Path | None
) -> tuple[MetadataWrite | None, list[str]]:
    """What to write at ``path`` (``None``: the feature is off), read before anything in ``<app>`` changes.

    :returns: the write (``None`` when there is nothing to say) and warnings.
    """
    if path is None:
        return None, []
    metadata, warnings = from_descriptor(descriptor)
    if metadata is None and os.path.lexists(app_dir / ".git"):
        metadata, more = from_git(app_dir)
        warnings += more
    if metadata is None:
        log.debug(
            "No project metadata: the descriptor declares no version or source-url, and no git repository"
        )
        return None, warnings
    if os.path.lexists(path):
        log.debug("Keeping the platform's %s (it knows the source better)", path)
        return MetadataWrite(path, metadata, "kept"), warnings
    return MetadataWrite(path, metadata, "written"), warnings


def describe_metadata(metadata: ProjectMetadata) -> str:
    """One line of what the file says: ``source: git, commit 1a2b3c4, describe v1.2.0``."""
    parts = [f"source: {metadata.type}"]
    parts += [f"{key} {value}" for key, value in metadata.version.items()]
    if "url" in metadata.metadata:
        parts.append(f"url {metadata.metadata['url']}")
    return ", ".join(parts)


def from_descriptor(descriptor: ProjectDescriptor) -> tuple[ProjectMetadata | None, list[str]]:
    """``version`` and ``source-url`` of the descriptor's ``[_]`` table (``[project]`` in schema 0.1)."""
    name = "project" if descriptor.schema_version == "0.1" else "_"
    table = descriptor.document.get(name)
    if not isinstance(table, dict):
        return None, []
    warnings = []
    found: dict[str, str] = {}
    for key in ("version", "source-url"):
        value = table.get(key)
        if value is None:
            continue
        if isinstance(value, str) and value.strip():
            found[key] = value.strip()
        else:
            warnings.append(f"{name}.{key} is not applied by the preparer: it must be a non-empty string")
    if not found:
        return None, warnings
    from preparer.gitinfo import redact_url  # deferred: the git reader stays off runs without metadata

    version = {"declared": found["version"]} if "version" in found else {}
    metadata = {"url": redact_url(found["source-url"])} if "source-url" in found else {}
    return ProjectMetadata("project", version, metadata), warnings


def from_git(app_dir: Path) -> tuple[ProjectMetadata | None, list[str]]:
    """HEAD of ``app_dir``'s repository: commit, describe, the branch and tags, the remote's url."""
    from preparer.gitinfo import GitUnreadable, read_git  # deferred: only apps with a .git need it

    try:
        source = read_git(app_dir)
    except GitUnreadable as err:
        return None, [f"project metadata not written: the git repository in {app_dir} cannot be read: {err}"]
    if source is None:
        log.debug("No project metadata from git: %s/.git has no commit yet", app_dir)
        return None, []
    metadata: dict[str, Any] = {"refs": list(source.refs)}
    if source.url:
        metadata["url"] = source.url
    return ProjectMetadata("git", {"commit": source.commit, "describe": source.describe}, metadata), []
