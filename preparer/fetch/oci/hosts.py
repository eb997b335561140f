"""Registry mirrors as containerd configures them: ``<dir>/<registry>/hosts.toml`` (``-registry-hosts-dir``).

Each file names the registry's upstream (``server``) and, in order, the hosts to try first (``[host."<url>"]``)
with their ``capabilities`` (``pull``: blobs and manifests by digest; ``resolve``: a tag to a digest), ``ca``,
``skip_verify``, ``override_path`` (the URL is the API root, as Harbor's proxy projects need), ``header`` and
``dial_timeout``. ``_default/hosts.toml`` serves registries without a directory of their own. Docker Hub's
directory is ``docker.io``. A mirror that fails is one warning and the next host is tried; the upstream comes last.
What a mirror serves is verified as the upstream's is; credentials are looked up for the mirror's own host, so the
upstream's are never sent to a mirror.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from preparer._record import field, record
from preparer.errors import InvalidInputsError
from preparer.files.toml import read_toml
from preparer.goflags import parse_duration

MAX_HOSTS_FILE = 1 << 20
_KEYS = frozenset({"capabilities", "ca", "skip_verify", "override_path", "header", "dial_timeout", "client"})


@record
class Host:
    """One host to try for a registry."""

    url: str
    capabilities: frozenset[str]
    ca: tuple[str, ...] = ()
    skip_verify: bool = False
    override_path: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    dial_timeout: float | None = None

    @property
    def api_root(self) -> str:
        """Where the registry API answers: ``<url>/v2``, or the URL itself with ``override_path``."""
        return self.url.rstrip("/") if self.override_path else self.url.rstrip("/") + "/v2"

    @property
    def netloc(self) -> str:
        return urlsplit(self.url).netloc


@record
class RegistryHosts:
    """A registry's hosts.toml: its mirrors in order, and its upstream when ``server`` names one."""

    hosts: tuple[Host, ...]
    server: str | None = None


def load_hosts_dir(directory: Path) -> dict[str, RegistryHosts]:
    """Every ``<directory>/<registry>/hosts.toml``, by registry (``docker.io`` for Docker Hub, ``_default``).

    :raises InvalidInputsError: unreadable or malformed files (exit 3), naming the file and the key.
    """
    found: dict[str, RegistryHosts] = {}
    try:
        entries = sorted(directory.iterdir())
    except OSError as err:
        raise InvalidInputsError(f"read {directory}", err.strerror or str(err)) from None
    for entry in entries:
        path = entry / "hosts.toml"
        if entry.is_dir() and os.path.lexists(
            path
        ):  # a fifo, a directory or a broken link is refused, not passed over
            found[entry.name] = _load(path)
    return found


def hosts_for(config: Mapping[str, RegistryHosts], registry: str) -> RegistryHosts | None:
    """The hosts of ``registry`` (as references key it: ``index.docker.io`` is ``docker.io`` here)."""
    name = "docker.io" if registry == "index.docker.io" else registry
    return config.get(name) or config.get("_default")


def _load(path: Path) -> RegistryHosts:
    action = f"read {path}"
    read = read_toml(
        path, "hosts.toml", error=InvalidInputsError, action=action, limit=MAX_HOSTS_FILE, named=False
    )
    doc = read.table
    server = doc.pop("server", None)
    if server is not None and not _is_url(server):
        raise InvalidInputsError(action, "server: must be an http(s) URL")
    table = doc.pop("host", {})
    if doc:
        raise InvalidInputsError(action, f"{min(doc)}: unknown key (known: server, host)")
    if not isinstance(table, dict):
        raise InvalidInputsError(action, 'host: must be a table of [host."<url>"] tables')
    return RegistryHosts(tuple(_host(action, url, value) for url, value in table.items()), server)


def _host(action: str, url: str, value: Any) -> Host:
    where = f'host."{url}"'
    if not _is_url(url) or not isinstance(value, dict):
        raise InvalidInputsError(action, f"{where}: must be an http(s) URL with a table")
    unknown = sorted(set(value) - _KEYS)
    if unknown:
        raise InvalidInputsError(
            action, f"{where}.{unknown[0]}: unknown key (known: {', '.join(sorted(_KEYS))})"
        )
    capabilities = value.get("capabilities", ["pull", "resolve", "push"])
    if not isinstance(capabilities, list) or not set(capabilities) <= {"pull", "resolve", "push"}:
        raise InvalidInputsError(action, f"{where}.capabilities: a list of pull, resolve, push")
    ca = value.get("ca", [])
    ca = [ca] if isinstance(ca, str) else ca
    if not isinstance(ca, list) or not all(isinstance(c, str) for c in ca):
        raise InvalidInputsError(action, f"{where}.ca: a path or a list of paths")
    headers = value.get("header", {})
    if not isinstance(headers, dict):
        raise InvalidInputsError(action, f"{where}.header: a table of names and values")
    flat = {str(k): ", ".join(v) if isinstance(v, list) else str(v) for k, v in headers.items()}
    for key in ("skip_verify", "override_path"):
        if not isinstance(value.get(key, False), bool):
            raise InvalidInputsError(action, f"{where}.{key}: true or false")
    return Host(
        url, frozenset(capabilities), tuple(ca), bool(value.get("skip_verify", False)),
        bool(value.get("override_path", False)), flat, _dial_timeout(action, where, value.get("dial_timeout")),
    )  # fmt: skip


def _dial_timeout(action: str, where: str, value: Any) -> float | None:
    if value is None:
        return None
    seconds = parse_duration(value) if isinstance(value, str) else None
    if seconds is None:
        raise InvalidInputsError(action, f"{where}.dial_timeout: a duration such as 500ms or 2s")
    return seconds


def _is_url(value: object) -> bool:
    if not isinstance(value, str):
        return False
    parts = urlsplit(value)
    return parts.scheme in ("http", "https") and bool(parts.netloc)
