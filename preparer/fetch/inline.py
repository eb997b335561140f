"""Inline buildpacks: a group entry's ``script`` becomes a buildpack (RFC 0048).

The generated buildpack has a ``buildpack.toml`` with the entry's id, version ``0.0.0`` unless given, and the
script's API; ``bin/detect`` always passes; ``bin/build`` is ``#!<shell>`` followed by the script. Its working
directory at build time is the app directory, as for every buildpack.
"""

from __future__ import annotations

from preparer.api import APIVersion
from preparer.errors import InvalidInputsError
from preparer.fetch.base import FetchContext, Fetched
from preparer.fetch.locator import InlineLocator
from preparer.fetch.tree import StagedBuildpack, new_root
from preparer.files.buildpack import check_id, read_buildpack_toml, version_problem
from preparer.files.toml import dumps_toml

DEFAULT_VERSION = "0.0.0"
DEFAULT_SHELL = "/bin/sh"


def fetch_inline(locator: InlineLocator, ctx: FetchContext) -> Fetched:
    """Generate the inline buildpack of a group entry's ``script`` table (its version, 0.0.0 by default) in staging."""
    return make_inline(locator.id, locator.version, locator.api, locator.shell, locator.inline, ctx)


def make_inline(
    bp_id: str, version: str | None, api: str, shell: str | None, inline: str, ctx: FetchContext
) -> Fetched:
    """Write the inline buildpack into a new staging directory.

    :raises InvalidInputsError: an invalid id, version, API version or shell (exit 3).
    """
    action = f"create inline buildpack '{bp_id}'"
    if not check_id(bp_id):
        raise InvalidInputsError(action, f"'{bp_id}' is not a valid buildpack id")
    try:
        APIVersion.parse(api)
    except ValueError:
        raise InvalidInputsError(action, f"script.api '{api}' is not a version") from None
    version = version or DEFAULT_VERSION
    bad_version = version_problem(version)
    if bad_version:
        raise InvalidInputsError(action, bad_version)
    shell = shell or DEFAULT_SHELL
    if "\n" in shell:
        raise InvalidInputsError(action, "script.shell must be a single line")
    root = new_root(ctx.sink.staging, "inline-")
    descriptor = {"api": api, "buildpack": {"id": bp_id, "version": version}}
    (root / "buildpack.toml").write_text(dumps_toml(descriptor))
    (root / "buildpack.toml").chmod(0o644)
    bin_dir = root / "bin"
    bin_dir.mkdir()
    bin_dir.chmod(0o755)  # explicitly: the umask of a hardened container would mask mkdir's mode
    script = inline if inline.endswith("\n") else inline + "\n"
    for name, body in (("detect", "exit 0\n"), ("build", script)):
        path = bin_dir / name
        path.write_text(f"#!{shell}\n\n{body}")
        path.chmod(0o755)
    staged = StagedBuildpack(
        read_buildpack_toml(root / "buildpack.toml", shown=f"inline script ({bp_id})"), root
    )
    return Fetched(staged.descriptor, (staged,), f"inline script ({bp_id})")
