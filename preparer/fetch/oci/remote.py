"""The one registry client: a repository of a registry, reached with its credentials, for pulls and pushes.

The image fetcher (:mod:`~preparer.fetch.oci.client`, which verifies what it pulls and keeps it) and the fleet's
repository (:mod:`~preparer.fetch.fleet`, which reads records and writes them back) both ask a :class:`Remote`.
It holds what every request to one repository shares: its API's URLs, its credentials (looked up once, before its
first request, in the lifecycle's order: :mod:`~preparer.fetch.oci.auth`), the authorization a challenge earned,
and the one rule for a 401 (its challenge answered once, basic or a bearer token for the scope asked: ``pull``,
or ``pull,push``, then the request sent again). The push flow is docker's: a blob's upload started (``POST``), its
bytes sent (one ``PATCH``, or with the last ``PUT``), completed with its digest (``PUT ?digest=``), and a manifest
put by tag unless the tag names it already.

How one request goes out is the user's (a :class:`Send`): the image fetcher's follows redirects hop by hop through
the run's transport and retries; the fleet's has short timeouts and a breaker. Credentials are never part of any
message.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from preparer._jsondoc import loads
from preparer.fetch.oci import auth
from preparer.fetch.streams import sha256_of
from preparer.fetch.transport import Transport

if TYPE_CHECKING:
    import requests

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
#: The body of a blob sent in an upload.
_BYTES = {"Content-Type": "application/octet-stream"}


class Send(Protocol):
    """How one request to the repository goes out, its answer streamed; ``blob``: the exchange carries a blob's
    bytes (a blob's ``GET``, an upload's ``PATCH``), which may take longer than a manifest's."""

    def __call__(
        self, method: str, url: str, headers: dict[str, str], body: Any, blob: bool
    ) -> requests.Response: ...


class Unanswered(Exception):
    """A 401's challenge that cannot be answered (no credential for a basic challenge, an unknown scheme), or whose
    answer was refused (by the token endpoint, or the registry again): ``says`` is the registry's words for it, or
    the token endpoint's."""

    def __init__(self, says: str) -> None:
        super().__init__(says)
        self.says = says


class PushRefused(Exception):
    """The repository refused a step of a push: ``what`` the step (``start an upload``, ``put <tag>``), ``status``
    its answer's."""

    def __init__(self, what: str, status: int) -> None:
        super().__init__(f"{what} (HTTP {status})")
        self.what, self.status = what, status


class Remote:
    """One repository of one registry, for one run: its requests, with its credentials (see the module)."""

    def __init__(
        self,
        root: str,
        repository: str,
        *,
        registry: str,
        environ: Mapping[str, str],
        transport: Transport,
        send: Send,
        host: str | None = None,
        push: bool = False,
        warn: Callable[[str], None] | None = None,
        warned: set[str] | None = None,
    ) -> None:
        """``root``: where the registry's API answers (``https://<host>/v2``, or a mirror's own root);
        ``registry``: the registry's name, for messages; ``host``: the name its credentials are keyed by (a
        mirror's own, never the upstream's; ``registry`` by default); ``transport``: for the token endpoint;
        ``push``: a token's scope includes ``push``; ``warn``: told once per run (``warned``) of a docker config
        that cannot be read."""
        self.base = f"{root}/{repository}"
        self.root, self.repository, self.registry = root, repository, registry
        self.host = host or registry
        self.environ, self.transport, self._send = environ, transport, send
        self.actions = "pull,push" if push else "pull"
        self._warn, self._warned = warn, warned if warned is not None else set()
        self._credential: auth.Credential | None = None
        self._looked_up = False
        self._lock = threading.Lock()
        self.authorization: str | None = None
        #: Whether a request went with the run's credentials (the repository is then private for the cache).
        self.used_credential = False

    @property
    def credential(self) -> auth.Credential | None:
        """The credential for this repository's host, looked up (and any helper run) the first time a request needs
        it; a header credential is sent from the first request on, as the lifecycle sends ``CNB_REGISTRY_AUTH``.

        :raises FetchError: ``CNB_REGISTRY_AUTH`` or the docker config is malformed, or a helper fails.
        """
        with self._lock:
            if not self._looked_up:
                problem = auth.config_problem(self.environ)
                if problem is not None and self._warn is not None and problem not in self._warned:
                    self._warned.add(problem)
                    self._warn(problem)
                self._credential = auth.lookup(self.host, self.environ)
                if self._credential is not None and self._credential.header is not None:
                    self.authorization = self._credential.header
                    self.used_credential = True
                self._looked_up = True
            return self._credential

    # Requests

    def request(
        self,
        method: str,
        url: str,
        headers: dict[str, str] | None = None,
        body: Any = None,
        *,
        blob: bool = False,
    ) -> requests.Response:
        """One request with the repository's authorization; a 401 is answered once (:meth:`answer`) and the
        request sent again. Any other answer is the caller's to read and check.

        :raises Unanswered: the challenge cannot be answered, or the answer is refused (a second 401).
        :raises FetchError: the credentials cannot be read, or the token endpoint fails.
        :raises NetworkError: the token endpoint cannot be reached; and whatever ``send`` raises.
        """
        self.credential  # noqa: B018 (looks the credential up before the first request)
        response = self._authorized(method, url, headers, body, blob)
        if response.status_code == 401:
            challenge = response.headers.get("WWW-Authenticate", "")
            self.answer(challenge, registry_says(response))
            response = self._authorized(method, url, headers, body, blob)
            if response.status_code == 401:
                raise Unanswered(registry_says(response))
        return response

    def _authorized(
        self, method: str, url: str, headers: dict[str, str] | None, body: Any, blob: bool
    ) -> requests.Response:
        sent = dict(headers or {})
        if self.authorization:
            sent["Authorization"] = self.authorization
        return self._send(method, url, sent, body, blob)

    def answer(self, challenge: str, says: str = "") -> None:
        """Answer a 401's ``challenge`` (a ``WWW-Authenticate`` header): with the basic credential, or a bearer
        token for this repository's scope from the challenge's realm (with the credential, if any).

        :raises Unanswered: no credential for a basic challenge, an unknown scheme, or the token endpoint refused
            (``says``: the registry's words, else the endpoint's).
        """
        scheme, params = auth.parse_challenge(challenge)
        credential = self.credential
        if scheme == "basic":
            if credential is None or credential.header is None:
                raise Unanswered(says)
            self.authorization = credential.header
            self.used_credential = True
        elif scheme == "bearer" and "realm" in params:
            scope = f"repository:{self.repository}:{self.actions}"
            token = auth.request_token(self.transport, params, scope, credential, self.registry)
            if isinstance(token, auth.Refused):  # its words, rather than the registry's challenge's
                raise Unanswered(token.said)
            self.authorization = "Bearer " + token
            self.used_credential = self.used_credential or credential is not None
        else:
            raise Unanswered(says)

    def manifest_url(self, identifier: str) -> str:
        return f"{self.base}/manifests/{identifier}"

    def blob_url(self, digest: str) -> str:
        return f"{self.base}/blobs/{digest}"

    # Pushing

    def has_blob(self, digest: str) -> bool:
        """Whether the repository has the blob ``digest``."""
        head = self.request("HEAD", self.blob_url(digest))
        head.close()
        return head.status_code == 200

    def start_upload(self) -> str:
        """A new upload session's URL.

        :raises PushRefused: the repository does not start one."""
        start = self.request("POST", f"{self.base}/blobs/uploads/")
        start.close()
        if start.status_code != 202 or "Location" not in start.headers:
            raise PushRefused("start an upload", start.status_code)
        return self._absolute(start.headers["Location"])

    def send_upload(self, location: str, body: Any) -> str:
        """Send ``body`` (bytes, or an iterable of them: sent as they come) to the upload at ``location``, in one
        ``PATCH``; where the upload goes on.

        :raises PushRefused: the repository does not take them."""
        patch = self.request("PATCH", location, _BYTES, body, blob=True)
        patch.close()
        if patch.status_code != 202:
            raise PushRefused("upload an archive", patch.status_code)
        return self._absolute(patch.headers.get("Location", location))

    def complete_upload(self, location: str, digest: str, body: Any = b"") -> str:
        """End the upload at ``location`` with its last bytes, ``body``, as the blob ``digest`` (returned).

        :raises PushRefused: the repository does not keep it."""
        target = f"{location}{'&' if '?' in location else '?'}digest={digest}"
        put = self.request("PUT", target, _BYTES, body)
        put.close()
        if put.status_code != 201:
            raise PushRefused(f"upload {digest[:19]}", put.status_code)
        return digest

    def put_manifest(
        self, tag: str, manifest: bytes, media_type: str = OCI_MANIFEST, ask: bool = True
    ) -> bool:
        """Tag ``manifest`` as ``tag``, unless (``ask``) the tag names it already; whether it was put.

        :raises PushRefused: the repository does not take it."""
        if ask:
            head = self.request("HEAD", self.manifest_url(tag), {"Accept": OCI_MANIFEST})
            head.close()
            if head.status_code == 200 and head.headers.get("Docker-Content-Digest") == sha256_of(manifest):
                return False  # the tag already names this very manifest
        put = self.request("PUT", self.manifest_url(tag), {"Content-Type": media_type}, manifest)
        put.close()
        if put.status_code not in (200, 201):
            raise PushRefused(f"put {tag}", put.status_code)
        return True

    def _absolute(self, location: str) -> str:
        """An upload's ``Location``, which a registry may give as a path, as a URL."""
        if not location.startswith("/"):
            return location
        from urllib.parse import urlsplit  # deferred: only a push asks

        parts = urlsplit(self.root)
        return f"{parts.scheme}://{parts.netloc}{location}"


class Sized:
    """A request body of ``length`` bytes, sent as ``chunks`` come (requests sends a file object 8 KiB at a time) and
    with its length (so not in chunked encoding)."""

    def __init__(self, chunks: Iterable[bytes], length: int) -> None:
        self.chunks, self.length = chunks, length

    def __len__(self) -> int:
        return self.length

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.chunks)


def registry_says(response: requests.Response) -> str:
    """The registry's own words for an error answer (``errors[0]``: its code and message, as skopeo shows them),
    read from at most :data:`~preparer.fetch.oci.auth.MAX_ERROR_BODY` bytes of the body, printable and at most 300
    characters (:func:`~preparer.fetch.oci.auth.spoken`); ``""`` when the body says nothing readable. The response
    is closed."""
    import urllib3  # deferred (heavy), as everywhere a request was made

    # Any body at all: a registry's explanation is a courtesy, never a failure of its own.
    try:
        with response:
            data = response.raw.read(auth.MAX_ERROR_BODY, decode_content=True)
        errors = loads(data).get("errors")
        first = errors[0] if isinstance(errors, list) and errors else None
    except (OSError, ValueError, AttributeError, RecursionError, urllib3.exceptions.HTTPError):
        return ""
    if not isinstance(first, dict):
        return ""
    return auth.spoken([str(first.get(key) or "") for key in ("code", "message")])
