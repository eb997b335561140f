"""``project.toml`` texts the tests write: the schema 0.2 head, and a group of ``uri`` entries."""

from __future__ import annotations

HEAD = '[_]\nschema-version = "0.2"\n'


def group(*uris: str) -> str:
    """A project.toml whose group fetches ``uris``, in order."""
    return HEAD + "".join(f'[[io.buildpacks.group]]\nuri = "{u}"\n' for u in uris)
