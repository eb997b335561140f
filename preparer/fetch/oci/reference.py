"""Image references: ``[registry/]repository[:tag][@digest]``, normalised as Docker and go-containerregistry do.

- No registry part (the first component has no ``.`` or ``:`` and is not ``localhost``) means Docker Hub.
- Docker Hub's API is at ``registry-1.docker.io`` while its credentials are keyed ``index.docker.io``, and a
  one-component repository there is ``library/<name>``.
- No tag and no digest means ``latest``.
- A registry is a host name or a bracketed IPv6 address, with a port from 1 to 65535: a malformed one is refused
  with the rest of the reference, before any request.
"""

from __future__ import annotations

import ipaddress
import re

from preparer._record import record
from preparer.errors import InvalidInputsError

DOCKER_HUB = "index.docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
#: A registry: a host name (dot-separated labels of letters, digits and inner ``-``) or a bracketed IPv6 address,
#: then an optional ``:<port>`` (the distribution project's reference grammar).
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_REGISTRY = re.compile(rf"^(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9A-Fa-f:.]+\])(?::([0-9]+))?$")


@record
class Reference:
    """A parsed image reference."""

    #: The registry as credentials are keyed (``index.docker.io`` for Docker Hub).
    registry: str
    repository: str
    tag: str | None = None
    digest: str | None = None

    @property
    def api_host(self) -> str:
        """Where the registry's v2 API answers."""
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    @property
    def identifier(self) -> str:
        """The digest when there is one (it wins over a tag), else the tag."""
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        name = f"{self.registry}/{self.repository}"
        return name + (f"@{self.digest}" if self.digest else f":{self.tag or 'latest'}")


def parse_reference(text: str) -> Reference:
    """Parse ``text`` (without ``docker://``).

    :raises InvalidInputsError: not a valid reference (exit 3).
    """
    action = f"parse image reference '{text}'"
    rest, _, digest = text.partition("@")
    if digest and not _DIGEST.match(digest):
        raise InvalidInputsError(action, f"'{digest}' is not a sha256 digest")
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first.startswith("[")):
        registry, path = first, remainder
        host = _REGISTRY.match(registry)
        if host is None:
            raise InvalidInputsError(action, f"'{registry}' is not a registry host name or address")
        if host[1] is not None and not 0 < int(host[1]) < 65536:
            raise InvalidInputsError(
                action, f"registry '{registry}': its port is not a number from 1 to 65535"
            )
    else:
        registry, path = DOCKER_HUB, rest
    name, colon, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (path, "", "")
    if colon and not _TAG.match(tag):
        raise InvalidInputsError(action, f"'{tag}' is not a valid tag")
    if registry in ("docker.io", "registry-1.docker.io"):
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and "/" not in name:
        name = f"library/{name}"
    if not _REPOSITORY.match(name):
        raise InvalidInputsError(action, f"'{name}' is not a valid repository name")
    return Reference(registry, name, tag or None, digest or None)


def is_loopback(registry: str) -> bool:
    """``localhost``, ``127.0.0.0/8`` and ``::1``, with or without a port: reached over plain http."""
    host = registry
    if host.startswith("["):
        host = host[1 : host.find("]")]
    elif host.count(":") == 1:
        host = host.split(":")[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def scheme_for(registry: str, insecure: tuple[str, ...]) -> str:
    """``http`` for loopback and ``-insecure-registry`` hosts (``host`` or ``host:port``, a scheme is ignored),
    ``https`` otherwise."""
    hosts = {entry.split("://", 1)[-1].rstrip("/").lower() for entry in insecure}
    plain = is_loopback(registry) or registry.lower() in hosts or registry.split(":")[0].lower() in hosts
    return "http" if plain else "https"
