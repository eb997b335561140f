"""The entries the configuration gives, as records: a group's entries (``GroupEntry``, with an inline
buildpack's ``Script``) and the build's env variables (``EnvEntry``).

Records of their own, below the configuration's reader, so that the plan, the lock's format and the provenance
name them without importing it.
"""

from __future__ import annotations

from preparer._record import record


@record
class Script:
    """An inline buildpack's ``script`` table."""

    api: str
    inline: str
    shell: str = "/bin/sh"


@record
class GroupEntry:
    """One entry of ``group``, ``pre.group`` or ``post.group``."""

    #: Where the entry was written, e.g. ``io.buildpacks.group[1]``.
    key: str
    id: str | None = None
    version: str | None = None
    uri: str | None = None
    script: Script | None = None
    #: The file that set the entry (the descriptor or the platform file), for messages.
    file: str = "project.toml"


@record
class EnvEntry:
    """One ``build.env`` variable."""

    key: str
    name: str
    value: str
