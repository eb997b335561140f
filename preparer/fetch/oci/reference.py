"""Image references: ``[registry/]repository[:tag][@digest]``, normalised as Docker and go-containerregistry do.

- No registry part (the first component has no ``.`` or ``:`` and is not ``localhost``, in any case: ``LOCALHOST/x``
  is the registry ``localhost``, as ``LOCALHOST:5000/x`` is ``localhost:5000``) means Docker Hub.
- Docker Hub's API is at ``registry-1.docker.io`` while its credentials are keyed ``index.docker.io``, and a
  one-component repository there is ``library/<name>``.
- No tag and no digest means ``latest``.

The registry is read one way only, so that the policy, the credentials, hosts.toml, the caches and the requests
all see the same one: its host lower-cased (host names are compared without case), its port a number without
leading zeros (``:05000`` is ``:5000``), an IPv6 address in its short form, and ``docker.io``,
``index.docker.io`` and ``registry-1.docker.io`` (in any case) are Docker Hub. A host that a resolver would read
as an address written another way (``127.1``, ``0x7f.0.0.1``, ``2130706433``) or that ends in a dot is refused:
it would reach a registry under a name no rule uses. :func:`canonical_glob` reads the globs of the platform policy
by the same rules, and :attr:`Reference.name` is what they are matched against.
"""

from __future__ import annotations

import ipaddress
import re

from preparer._record import record
from preparer.errors import InvalidInputsError

DOCKER_HUB = "index.docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
#: Docker Hub as the policy names it (and Docker and containerd do): ``docker.io/library/alpine``.
DOCKER_HUB_NAME = "docker.io"
_DOCKER_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
_LABEL = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"
_HOST_NAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*\Z")
#: What the path of a glob may hold: a repository's characters, ``/`` and the glob's own (``*?[!]``).
_GLOB_PATH = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._-/*?[!]")
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REPOSITORY = re.compile(rf"^{_COMPONENT}(?:/{_COMPONENT})*\Z")
_TAG = re.compile(r"^[\w][\w.-]{0,127}\Z", re.ASCII)  # the distribution spec's: \w as Go reads it
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}\Z")


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
    def name(self) -> str:
        """``registry/repository`` as the platform policy matches it: Docker Hub is ``docker.io``."""
        registry = DOCKER_HUB_NAME if self.registry == DOCKER_HUB else self.registry
        return f"{registry}/{self.repository}"

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
    rest, at, digest = text.partition("@")
    if at and not digest:  # go-containerregistry refuses it too; read on, it would be the tag 'latest'
        raise InvalidInputsError(
            action, "nothing follows '@': give a digest (@sha256:<64 hex digits>) or no '@'"
        )
    if digest and not _DIGEST.match(digest):
        raise InvalidInputsError(action, f"'{digest}' is not a sha256 digest")
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first.lower() == "localhost" or first.startswith("[")):
        registry, path = first, remainder
    else:
        registry, path = DOCKER_HUB, rest
    name, colon, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (path, "", "")
    if colon and not _TAG.match(tag):
        raise InvalidInputsError(action, f"'{tag}' is not a valid tag")
    try:
        registry = canonical_registry(registry)
    except ValueError as err:
        raise InvalidInputsError(action, str(err)) from None
    if registry == DOCKER_HUB and "/" not in name:
        name = f"library/{name}"
    if not _REPOSITORY.match(name):
        raise InvalidInputsError(action, f"'{name}' is not a valid repository name")
    return Reference(registry, name, tag or None, digest or None)


def canonical_registry(text: str) -> str:
    """The one spelling of the registry ``text`` (``host``, ``host:port`` or ``[v6]:port``); ``index.docker.io``
    for Docker Hub.

    :raises ValueError: a host or port no registry is reached by, or one read another way by a resolver (the
        message says which).
    """
    host, port = text.lower(), ""
    if host.startswith("["):
        close = host.find("]")
        after = host[close + 1 :] if close > 0 else "x"
        if after and not after.startswith(":"):
            raise ValueError(f"'{text}' is not a registry host[:port]")
        if "%" in host[1:close]:  # fe80::1%eth0 and fe80::1%25eth0 would be two names of one host
            raise ValueError(
                f"'{text}' names an IPv6 zone ('%...'): Docker's references have none; name the host"
            )
        try:
            address = ipaddress.IPv6Address(host[1:close])
        except ValueError:
            raise ValueError(f"'{host[1:close]}' is not an IPv6 address") from None
        mapped = address.ipv4_mapped
        host, port = (str(mapped) if mapped else f"[{address.compressed}]"), after[1:]
        if after and not port:
            raise ValueError(f"'{text}' has an empty port")
    elif ":" in host:
        host, _, port = host.partition(":")
        if not port:
            raise ValueError(f"'{text}' has an empty port")
    if port:
        if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"the port of '{text}' is not a number from 1 to 65535")
        port = str(int(port))
    if not host.startswith("["):
        if not _HOST_NAME.match(host):
            raise ValueError(
                f"'{text}' is not a registry host: letters, digits and '-' in labels separated by single dots"
            )
        _check_address(host, text)
    if host in _DOCKER_HUB_ALIASES and not port:
        return DOCKER_HUB
    return f"{host}:{port}" if port else host


def canonical_glob(glob: str) -> str:
    """The platform policy's image glob ``glob`` read as :func:`parse_reference` reads a reference, to be matched
    against :attr:`Reference.name`: ``corp/*`` is ``docker.io/corp/*``, ``alpine`` is ``docker.io/library/alpine``,
    ``INDEX.docker.io/x/*`` is ``docker.io/x/*``, ``127.0.0.1:05000/*`` is ``127.0.0.1:5000/*``.

    A glob made of ``*`` alone matches every image. A first component holding a wildcard (``*/corp/*``,
    ``*.corp.example/*``) is a pattern of registries: it is only lower-cased. A Docker Hub path of one component
    gains ``library/`` unless it is ``*`` (``docker.io/*`` is all of Docker Hub).

    :raises ValueError: ``glob`` can never match a reference in that form (the message says why).
    """
    if set(glob) == {"*"}:
        return glob
    # docker://, as a project's uri is written: read on, 'docker:' would be a registry with an empty port.
    scheme, sep, after = glob.partition("://")
    if sep and "/" not in scheme:
        raise ValueError(f"a scheme ('{scheme}://') is never part of what is matched: write '{after}'")
    if "@" in glob:
        raise ValueError("a digest ('@sha256:...') is never part of what is matched: name the repository")
    first, slash, rest = glob.partition("/")
    wild = any(c in first for c in "*?[")
    if first.startswith("[") and not any(c in first for c in "*?"):
        try:  # an IPv6 address, or a pattern of hosts
            canonical_registry(first)
            wild = False
        except ValueError:
            pass
    if slash and (wild or "." in first or ":" in first or first.lower() == "localhost"):
        registry, path = first.lower(), rest
        if wild:
            host, colon, port = registry.rpartition(":")
            if colon and port.isdigit() and port.isascii() and int(port):
                registry = f"{host}:{int(port)}"
        else:
            registry = canonical_registry(first)
    else:
        registry, path = DOCKER_HUB, glob
    if registry == DOCKER_HUB:
        registry = DOCKER_HUB_NAME
        if "/" not in path and set(path) != {"*"}:
            path = f"library/{path}"
    if "" in path.split("/"):
        raise ValueError("it has an empty path component ('//', or a '/' at its start or end)")
    if ":" in path:
        raise ValueError("a tag (':v1') is never part of what is matched: name the repository")
    if path != path.lower():
        raise ValueError("repository names are lower case")
    if not _GLOB_PATH.issuperset(path):
        raise ValueError("it holds a character no repository name has")
    return f"{registry}/{path}"


def _check_address(host: str, text: str) -> None:
    """Refuse ``host`` when a resolver reads it as an IPv4 address other than its dotted-quad form."""
    import socket  # deferred: a name with no digit-only label needs no look

    if not host[-1:].isdigit() and "0x" not in host:
        return
    try:
        packed = socket.inet_aton(host)
    except OSError:
        return  # a name
    if str(ipaddress.IPv4Address(packed)) != host:
        raise ValueError(
            f"'{text}' is an IPv4 address written another way: write it as {ipaddress.IPv4Address(packed)}"
        )


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
