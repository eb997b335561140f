"""Registry credentials, looked up in the lifecycle's order (platform spec §Registry Authentication):

1. ``CNB_REGISTRY_AUTH``: JSON mapping a registry to an ``Authorization`` header value (``Basic …``, ``Bearer …``);
2. the docker config (``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json``): ``credHelpers`` for the
   registry, then ``auths`` (``registrytoken``, ``identitytoken``, ``auth``, ``username``/``password``), then
   ``credsStore``; helpers are the ``docker-credential-<name>`` executables;
3. anonymous.

Keys are compared without scheme and path, so ``https://index.docker.io/v1/`` is ``index.docker.io``.
Credentials are never part of any message.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from preparer import interrupt
from preparer._fs import read_regular
from preparer._jsondoc import DocumentRefused, loads
from preparer._record import field, record
from preparer.errors import FetchError
from preparer.fetch.failures import failure
from preparer.fetch.oci.reference import DOCKER_HUB
from preparer.fetch.transport import Transport, check_status, read_capped

if TYPE_CHECKING:
    import requests


@record
class Credential:
    """How to authenticate to one registry. ``repr`` shows where it came from, never the secret."""

    source: str
    #: A whole ``Authorization`` header value (``Basic …`` or ``Bearer …``).
    header: str | None = field(default=None, repr=False)
    #: An OAuth2 refresh token for the token endpoint (docker's ``identitytoken``).
    identity_token: str | None = field(default=None, repr=False)

    @classmethod
    def basic(cls, source: str, username: str, password: str) -> Credential:
        token = base64.b64encode(f"{username}:{password}".encode()).decode()
        return cls(source, header=f"Basic {token}")


def normalize(key: str) -> str:
    """A registry key without scheme or path; ``docker.io`` spellings become ``index.docker.io``."""
    host = key.split("://", 1)[-1].split("/", 1)[0].lower()
    return DOCKER_HUB if host in ("docker.io", "registry-1.docker.io", "index.docker.io") else host


def lookup(registry: str, environ: Mapping[str, str]) -> Credential | None:
    """The credential for ``registry`` (as keyed: ``index.docker.io`` for Docker Hub), or ``None`` (anonymous).

    :raises FetchError: ``CNB_REGISTRY_AUTH`` or the docker config is malformed, or a helper fails (exit 1).
    """
    registry = normalize(registry)
    raw = environ.get("CNB_REGISTRY_AUTH")
    if raw:
        found = _from_cnb_registry_auth(raw, registry)
        if found is not None:
            return found
    return _from_docker_config(registry, environ)


def _from_cnb_registry_auth(raw: str, registry: str) -> Credential | None:
    try:
        table = loads(raw)
    except (ValueError, RecursionError) as err:
        raise FetchError(
            "resolve keychain", f"failed to parse CNB_REGISTRY_AUTH value: {json_problem(err)}"
        ) from None
    if not isinstance(table, dict):
        raise FetchError("resolve keychain", "CNB_REGISTRY_AUTH must be a JSON object")
    for key, value in table.items():
        if normalize(str(key)) != registry:
            continue
        if not isinstance(value, str):
            raise FetchError("resolve keychain", f"CNB_REGISTRY_AUTH value for '{registry}' must be a string")
        scheme, _, secret = value.strip().partition(" ")
        if scheme.lower() not in ("basic", "bearer", "x-identity"):
            raise FetchError("resolve keychain", f"unknown auth type from header for '{registry}'")
        if not secret.strip():
            raise FetchError("resolve keychain", f"the {scheme} value for '{registry}' is empty")
        if scheme.lower() == "x-identity":
            return Credential("CNB_REGISTRY_AUTH", identity_token=secret.strip())
        return Credential("CNB_REGISTRY_AUTH", header=value.strip())
    return None


def json_problem(err: BaseException) -> str:
    """Where a JSON document stops being JSON, as the parser says it (never a piece of the document: it may hold a
    secret)."""
    if isinstance(err, json.JSONDecodeError):
        return f"not JSON: {err.msg.lower()} at line {err.lineno} column {err.colno}"
    if isinstance(err, DocumentRefused):  # its words name counts and depths, never the document's text
        return f"not read: {err}"
    if isinstance(err, UnicodeDecodeError):
        return f"not UTF-8 text (byte {err.start})"
    if isinstance(err, RecursionError):
        return "not JSON: nested too deeply"
    return "not JSON"


#: The most of a docker config file that is read (one with a thousand registries is about 100 KiB).
MAX_DOCKER_CONFIG = 4 << 20
#: At most this much of an error answer (a registry's, its token endpoint's) is read for its own words.
MAX_ERROR_BODY = 16 << 10


def endpoint_says(response: requests.Response) -> str:
    """A token endpoint's own words for an error answer, printable, at most 300 characters: a registry's
    ``errors[0]`` (code and message), Docker Hub's ``details``, OAuth2's ``error`` and ``error_description``, or a
    short plain-text body; ``""`` when it says nothing readable. The response is closed."""
    import urllib3  # deferred (heavy), as everywhere a request was made

    try:
        with response:
            data = response.raw.read(MAX_ERROR_BODY, decode_content=True)
    except (OSError, urllib3.exceptions.HTTPError):
        return ""
    text = data.decode("utf-8", "replace")
    try:
        body = loads(text)
    except (ValueError, RecursionError):
        body = None
    words: list[str] = []
    if isinstance(body, dict):
        errors = body.get("errors")
        first = errors[0] if isinstance(errors, list) and errors and isinstance(errors[0], dict) else {}
        keys = ("code", "message") if first else ("details", "error", "error_description", "message")
        words = [str(value) for key in keys if (value := (first or body).get(key))]
    elif body is None and "<" not in text:  # plain text; an HTML page says nothing worth a line
        words = [text]
    return spoken(words)


def spoken(words: list[str]) -> str:
    """A server's ``words`` as one printable line of at most 300 characters, joined by ``: ``."""
    said = ": ".join(" ".join("".join(c if c.isprintable() else " " for c in w).split()) for w in words if w)
    return said if len(said) <= 300 else said[:299] + "…"


def why_anonymous(registry: str, environ: Mapping[str, str]) -> str:
    """Where credentials for ``registry`` were looked for and not found, and a helper the docker config names that
    is not installed: for a registry that refuses an anonymous request."""
    path = _config_path(environ)
    config: object = None
    if path is not None and path.is_file():
        try:
            config = loads(read_regular(path, MAX_DOCKER_CONFIG))
        except (OSError, ValueError, RecursionError):
            config = None
    store = config.get("credsStore") if isinstance(config, dict) else None
    if (
        isinstance(store, str)
        and store
        and shutil.which(f"docker-credential-{store}", path=environ.get("PATH", os.defpath)) is None
    ):
        return (
            f"no credentials for {normalize(registry)}: {path} names the credential helper "
            f"docker-credential-{store} (credsStore), which is not installed"
        )
    return (
        f"no credentials for {normalize(registry)} in {_places(normalize(registry), environ, path, config)}"
    )


def _places(registry: str, environ: Mapping[str, str], path: Path | None, config: object) -> str:
    """The places credentials for ``registry`` were looked for, each with why it gave none:
    ``CNB_REGISTRY_AUTH (not set) or /home/me/.docker/config.json (does not exist)``."""
    if not environ.get("CNB_REGISTRY_AUTH"):
        variable = "CNB_REGISTRY_AUTH (not set)"
    else:
        variable = f"CNB_REGISTRY_AUTH (no entry for {registry})"
    if path is None:
        return f"{variable} or a docker config (neither DOCKER_CONFIG nor HOME is set)"
    if config_problem(environ) is not None:
        why = "DOCKER_CONFIG is not a directory: set it to the directory that holds config.json"
    elif not path.exists():
        why = "does not exist"
    elif not path.is_file():
        why = "not a file"
    elif isinstance(config, dict):
        why = f"no entry for {registry} in auths or credHelpers, and no credsStore"
    else:
        why = "not a JSON object"
    origin = "$DOCKER_CONFIG/config.json" if environ.get("DOCKER_CONFIG") else "$HOME/.docker/config.json"
    return f"{variable} or {path} ({origin}: {why})"


def config_problem(environ: Mapping[str, str]) -> str | None:
    """Why the docker config ``DOCKER_CONFIG`` points to cannot be read, when that is because ``DOCKER_CONFIG`` is
    not a directory (it is often set to the file itself); ``None`` otherwise. A warning: the run goes on without."""
    directory = environ.get("DOCKER_CONFIG")
    if not directory or Path(directory).is_dir():
        return None
    what = "is not a directory" if Path(directory).exists() else "does not exist"
    return (
        f"DOCKER_CONFIG {directory} {what}: it names the directory that holds config.json, so no registry "
        f"credentials are read from {Path(directory) / 'config.json'}"
    )


def _config_path(environ: Mapping[str, str]) -> Path | None:
    if environ.get("DOCKER_CONFIG"):
        return Path(environ["DOCKER_CONFIG"]) / "config.json"
    if environ.get("HOME"):
        return Path(environ["HOME"]) / ".docker" / "config.json"
    return None


def _from_docker_config(registry: str, environ: Mapping[str, str]) -> Credential | None:
    path = _config_path(environ)
    if path is None or not path.is_file():
        return None
    try:
        data = read_regular(path, MAX_DOCKER_CONFIG)  # a fifo or a device is refused, never waited on
    except OSError as err:
        raise FetchError("read docker config", f"{path}: {err.strerror or err}") from None
    except ValueError as err:
        raise FetchError("read docker config", f"{path}: {err}") from None
    try:
        config = loads(data)
    except (ValueError, RecursionError) as err:
        raise FetchError("read docker config", f"{path}: {json_problem(err)}") from None
    if not isinstance(config, dict):
        return None
    helpers = config.get("credHelpers") or {}
    for key, helper in helpers.items() if isinstance(helpers, dict) else ():
        if normalize(key) == registry and isinstance(helper, str):
            return _from_helper(helper, key, registry, environ)
    auths = config.get("auths") or {}
    for key, entry in auths.items() if isinstance(auths, dict) else ():
        if normalize(key) == registry and isinstance(entry, dict):
            found = _from_auths_entry(entry, registry, path)
            if found is not None:
                return found
    store = config.get("credsStore")
    if isinstance(store, str) and store:
        server = "https://index.docker.io/v1/" if registry == DOCKER_HUB else registry
        return _from_helper(store, server, registry, environ, missing_ok=True)
    return None


def _from_auths_entry(entry: dict[str, object], registry: str, path: Path) -> Credential | None:
    source = f"docker config {path}"
    if isinstance(entry.get("registrytoken"), str) and entry["registrytoken"]:
        return Credential(source, header=f"Bearer {entry['registrytoken']}")  # sent to the registry as it is
    if isinstance(entry.get("identitytoken"), str) and entry["identitytoken"]:
        return Credential(source, identity_token=str(entry["identitytoken"]))
    if isinstance(entry.get("auth"), str) and entry["auth"]:
        try:
            username, _, password = base64.b64decode(str(entry["auth"])).decode().partition(":")
        except ValueError:
            raise FetchError(
                "read docker config", f"{path}: the auth of '{registry}' is not base64"
            ) from None
        return Credential.basic(source, username, password)
    if isinstance(entry.get("username"), str) and isinstance(entry.get("password"), str):
        return Credential.basic(source, str(entry["username"]), str(entry["password"]))
    return None


def _from_helper(
    helper: str, server: str, registry: str, environ: Mapping[str, str], missing_ok: bool = False
) -> Credential | None:
    program = f"docker-credential-{helper}"
    try:
        # A session of its own: a helper that is stopped is stopped with whatever it started.
        proc = subprocess.Popen(
            [program, "get"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(environ), start_new_session=True,
        )  # fmt: skip
    except FileNotFoundError:
        if missing_ok:
            return None
        raise FetchError("get credentials", f"credential helper {program} is not installed") from None
    except OSError as err:
        raise FetchError(
            "get credentials", f"credential helper {program} cannot be run: {err.strerror or err}"
        ) from None
    try:
        stdout, stderr = interrupt.communicate(proc, server, HELPER_SECONDS)
    except subprocess.TimeoutExpired:
        raise FetchError(
            "get credentials", f"credential helper {program} did not answer within {HELPER_SECONDS:g} s"
        ) from None
    if proc.returncode != 0:
        if "credentials not found" in stdout.lower() + stderr.lower():
            return None
        raise FetchError("get credentials", f"credential helper {program} exited with {proc.returncode}")
    try:
        answer = loads(stdout)
        username, secret = str(answer["Username"]), str(answer["Secret"])
    except (ValueError, KeyError, TypeError, RecursionError):
        raise FetchError(
            "get credentials", f"credential helper {program} gave an unreadable answer"
        ) from None
    source = f"credential helper {program}"
    if username == "<token>":
        return Credential(source, identity_token=secret)
    return Credential.basic(source, username, secret)


#: Seconds a credential helper has to answer.
HELPER_SECONDS = 30.0

_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
#: A token endpoint is named by the registry, so its answer is as untrusted as the registry: bounded.
MAX_TOKEN_ANSWER = 4 << 20


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """A ``WWW-Authenticate`` header: its scheme (lower case) and parameters."""
    return header.split(" ", 1)[0].lower(), dict(_CHALLENGE.findall(header))


@record
class Refused:
    """A token endpoint's refusal of a credential, or of anonymity (401, 403), in its own words when it gave any
    (``the token endpoint answered HTTP 401: incorrect username or password``)."""

    said: str


def request_token(
    transport: Transport, params: dict[str, str], scope: str, credential: Credential | None, registry: str
) -> str | Refused:
    """A bearer token for ``scope`` (``repository:<name>:pull``) from the challenge's realm, with the credential
    if there is one (basic, or docker's identity token); :class:`Refused` when the endpoint refuses it (401, 403).

    :raises FetchError: a TLS failure, another error answer, or no token in the answer.
    :raises NetworkError: the endpoint cannot be reached.
    """
    import requests  # deferred (heavy): only runs that talk to a registry import it

    action = f"authenticate to {registry}"
    query = {"service": params.get("service", ""), "scope": scope}
    session = transport.session()
    try:
        if credential is not None and credential.identity_token is not None:
            response = session.post(
                params["realm"],
                data={**query, "grant_type": "refresh_token", "client_id": "cnb-preparer",
                      "refresh_token": credential.identity_token},
                timeout=transport.request_timeouts(), stream=True,
            )  # fmt: skip
        else:
            headers = {}
            if credential is not None and (credential.header or "").lower().startswith("basic "):
                headers["Authorization"] = credential.header or ""
            response = session.get(
                params["realm"],
                params=query,
                headers=headers,
                timeout=transport.request_timeouts(),
                stream=True,
            )
    except requests.RequestException as err:
        transport.clock.check(action)
        found = failure(err)
        if not found.retry:
            raise FetchError(action, str(found)) from None
        raise found from err
    if response.status_code in (401, 403):
        status = response.status_code
        words = endpoint_says(response)
        return Refused(f"the token endpoint answered HTTP {status}" + (f": {words}" if words else ""))
    if response.status_code >= 400:
        says = endpoint_says(response)
        check_status(response, action, "the token endpoint", says)
    data = read_capped(response, MAX_TOKEN_ANSWER, action, "the token answer", transport.download_deadline())
    try:
        body = loads(data)  # bounded in what it builds: 4 MiB of {},{},... is a million objects
        token = body.get("token") or body.get("access_token")
    except DocumentRefused as err:
        raise FetchError(action, f"the token endpoint's answer is not read: {err}") from None
    except (ValueError, AttributeError, RecursionError):
        token = None
    if not isinstance(token, str) or not token:
        raise FetchError(action, "the token endpoint gave no token")
    return token
