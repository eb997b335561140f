"""What a run's environment says about reaching servers: the CA certificates, the proxy for each URL
(``http_proxy``, ``https_proxy``, ``all_proxy``, ``no_proxy``), and netrc credentials.

Read from the run's own environment (``Inputs.environ``; the command passes the process's), never from
``os.environ``: a service running many builds gives each its own. The rules are curl's and requests': the
lower-case variable wins over the upper-case one, ``no_proxy`` lists hosts, domains (``example.com`` or
``.example.com``: the domain and every name below it), IP addresses or networks (``10.0.0.0/8``), each optionally
with ``:port``, or ``*`` for every host.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from preparer._numbers import decimal

if TYPE_CHECKING:
    import ipaddress

#: Where Linux distributions keep the system CA store.
SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
)
#: The variables naming the CA certificates, in the order they win (requests' two, then OpenSSL's).
CA_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE")


def ca_source(environ: Mapping[str, str]) -> tuple[str, str]:
    """The CA certificates HTTPS trusts and where that choice comes from: ``REQUESTS_CA_BUNDLE`` or
    ``CURL_CA_BUNDLE`` (requests' variables), else ``SSL_CERT_FILE`` (OpenSSL's), else the system store, else
    certifi's bundle (the lifecycle image has no system store)."""
    for name in CA_VARIABLES:
        if environ.get(name):
            return environ[name], name
    for path in SYSTEM_BUNDLES:
        if Path(path).is_file():
            return path, "the system's store"
    import certifi  # deferred (third-party): only when no system store is found

    return str(certifi.where()), "certifi's bundle"


def _variable(environ: Mapping[str, str], name: str) -> tuple[str, str]:
    for variable in (name, name.upper()):
        if environ.get(variable):
            return environ[variable], variable
    return "", ""


def proxy_for(scheme: str, host: str, port: int | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """The proxy a request for ``scheme://host:port`` goes through, and the variable that names it; ``("", "")``
    when none does (no variable, or ``no_proxy`` names the host)."""
    proxy, variable = _variable(environ, f"{scheme}_proxy")
    if not proxy:
        proxy, variable = _variable(environ, "all_proxy")
    if not proxy or bypassed(host, port, _variable(environ, "no_proxy")[0]):
        return "", ""
    return proxy, variable


def bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether ``no_proxy`` names ``host`` (and ``port``, when the entry gives one)."""
    if not no_proxy:
        return False
    import ipaddress  # deferred: only a run with no_proxy set compares addresses

    host = host.lower().strip("[]")
    address = _address(host)
    for entry in no_proxy.replace(" ", "").lower().split(","):
        if not entry:
            continue
        if entry == "*":
            return True
        name, wanted = entry, None
        if entry.count(":") == 1 or (entry.startswith("[") and "]:" in entry):  # a port (never bare IPv6)
            name, _, number = entry.rpartition(":")
            wanted = decimal(number)
            wanted = -1 if wanted is None else wanted
        if wanted is not None and wanted != port:
            continue
        name = name.strip("[]")
        if address is not None and "/" in name:
            try:
                if address in ipaddress.ip_network(name, strict=False):
                    return True
            except ValueError:
                pass
            continue
        domain = name.lstrip(".")
        if domain and (host == domain or host.endswith("." + domain)):
            return True
    return False


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    import ipaddress  # deferred, as in bypassed

    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def netrc_auth(host: str, environ: Mapping[str, str]) -> tuple[str, str] | None:
    """The login and password a netrc file gives ``host`` (``$NETRC``, else ``$HOME/.netrc``), as curl and requests
    send them; ``None`` without one, or when the file cannot be read."""
    path = netrc_path(environ)
    if path is None:
        return None
    import netrc  # deferred: only runs with a netrc file read it

    try:
        found = netrc.netrc(str(path)).authenticators(host)
    except (OSError, netrc.NetrcParseError):
        return None
    if found is None:
        return None
    login, _, password = found
    return login, password or ""


def netrc_path(environ: Mapping[str, str]) -> Path | None:
    """The netrc file of the run's environment, when there is one."""
    if environ.get("NETRC"):
        return Path(environ["NETRC"]) if Path(environ["NETRC"]).is_file() else None
    home = environ.get("HOME")
    if not home:
        return None
    for name in (".netrc", "_netrc"):
        if (Path(home) / name).is_file():
            return Path(home) / name
    return None


def goes_elsewhere(environ: Mapping[str, str]) -> bool:
    """Whether a request would not go straight to the server as it is: a proxy, or a netrc file adds credentials."""
    proxied = any(value and name.lower().endswith("_proxy") and name.lower() != "no_proxy"
                  for name, value in environ.items())  # fmt: skip
    return proxied or netrc_path(environ) is not None
