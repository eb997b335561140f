"""A registry v2 client over ``requests``: manifests, indexes and blobs, with the token challenge flow.

Every blob and every manifest fetched by digest is checked against its sha256, and blobs against the size their
descriptor gives; blobs stream to disk and are kept in the download cache by digest, so a second run of a digest
reference makes no request at all. Credentials are looked up only when a request is about to be made.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from preparer._jsondoc import DocumentRefused, loads
from preparer.errors import FetchError, NotFoundError
from preparer.fetch.base import FetchContext
from preparer.fetch.guard import LimitExceeded
from preparer.fetch.oci import auth
from preparer.fetch.oci.hosts import Host
from preparer.fetch.oci.reference import Reference, scheme_for
from preparer.fetch.sink import no_progress
from preparer.fetch.streams import (
    Reader,
    Tee,
    is_digest,
    sha256_of,
    stream_body,
    verify_digest,
)
from preparer.fetch.transport import Transport, check_status, read_capped

if TYPE_CHECKING:
    import requests

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFESTS = (OCI_MANIFEST, DOCKER_MANIFEST)
INDEXES = (OCI_INDEX, DOCKER_LIST)
_ACCEPT = ", ".join((*MANIFESTS, *INDEXES))
#: Manifests and indexes are small; a larger answer is refused instead of being read into memory.
MAX_MANIFEST = 4 << 20
#: The answers of a registry without the referrers API to a request for it (OCI distribution-spec 1.1: a client
#: falls back to the referrers tag schema on a 404; registries older than the API answer 400, 405 or 501 too).
_NO_REFERRERS_API = (400, 404, 405, 501)
T = TypeVar("T")


def kind_of(doc: dict[str, Any]) -> str:
    """``"index"`` or ``"manifest"`` for an image document, by its ``mediaType`` or, when absent, its fields.

    :raises ValueError: any other document (Docker schema 1, artifacts of other kinds), with a reason.
    """
    media_type = doc.get("mediaType")
    if media_type in INDEXES or (media_type is None and isinstance(doc.get("manifests"), list)):
        return "index"
    if media_type in MANIFESTS or (media_type is None and isinstance(doc.get("layers"), list)):
        return "manifest"
    if doc.get("schemaVersion") == 1:
        raise ValueError(
            "it is a Docker schema 1 manifest, which is not supported (push it again with a current tool)"
        )
    raise ValueError(f"unsupported manifest media type '{media_type}'")


class Registry:
    """One repository of one registry, for one run: credentials looked up once, on first use."""

    def __init__(self, ref: Reference, ctx: FetchContext, endpoint: Host | None = None) -> None:
        """``endpoint``: a mirror (or the upstream ``server``) from hosts.toml to ask instead of the registry itself;
        its own credentials, TLS settings, headers and connect timeout are used."""
        self.ref, self.ctx, self.endpoint = ref, ctx, endpoint
        if endpoint is None:
            root = f"{scheme_for(ref.registry, ctx.registries.insecure)}://{ref.api_host}/v2"
            self.transport = ctx.transport
        else:
            root = endpoint.api_root
            self.transport = _endpoint_transport(ctx.transport, endpoint)
        self.base = f"{root}/{ref.repository}"
        self._credential: auth.Credential | None = None
        self._looked_up = False
        self._lock = threading.Lock()
        self.authorization: str | None = None
        #: Whether a request went with the run's credentials (the repository is then private for the cache).
        self.used_credential = False

    @property
    def name(self) -> str:
        """``registry/repository``, for messages."""
        return f"{self.ref.registry}/{self.ref.repository}"

    @property
    def credential(self) -> auth.Credential | None:
        """The credential for this registry, looked up (and any helper run) the first time a request needs it."""
        with self._lock:
            if not self._looked_up:
                # A mirror's own credentials, never the upstream's.
                host = self.endpoint.netloc if self.endpoint is not None else self.ref.registry
                registries = self.ctx.registries
                problem = auth.config_problem(registries.environ)
                if problem is not None and problem not in registries.warned:
                    registries.warned.add(problem)
                    self.ctx.sink.warn(problem)
                self._credential = auth.lookup(host, registries.environ)
                if self._credential is not None and self._credential.header is not None:
                    # The lifecycle sends a CNB_REGISTRY_AUTH value as it is, without waiting for a challenge.
                    self.authorization = self._credential.header
                    self.used_credential = True
                self._looked_up = True
            return self._credential

    # Requests

    def _get(self, url: str, headers: dict[str, str]) -> requests.Response:
        """GET with the current authorization; a 401 is answered once (basic or bearer challenge), then retried."""
        response = self._send(url, headers)
        if response.status_code == 401:
            challenge = response.headers.get("WWW-Authenticate", "")
            self._answer_challenge(challenge, registry_says(response))
            response = self._send(url, headers)
        return response

    def _send(self, url: str, headers: dict[str, str]) -> requests.Response:
        self.credential  # noqa: B018 (looks the credential up before the first request)
        sent = dict(headers)
        if self.authorization:
            sent["Authorization"] = self.authorization
        if self.endpoint is not None:
            sent = {**self.endpoint.headers, **sent}
        return self.transport.get(url, sent, action=f"pull {self.ref}", check=False)

    def _answer_challenge(self, header: str, says: str = "") -> None:
        scheme, params = auth.parse_challenge(header)
        credential = self.credential
        if scheme == "basic":
            if credential is None or credential.header is None:
                raise self._unauthorized(says)
            self.authorization = credential.header
            self.used_credential = True
        elif scheme == "bearer" and "realm" in params:
            scope = f"repository:{self.ref.repository}:pull"
            token = auth.request_token(self.transport, params, scope, credential, self.ref.registry)
            if isinstance(token, auth.Refused):  # its words, rather than the registry's challenge's
                raise self._unauthorized(token.said)
            self.authorization = "Bearer " + token
            self.used_credential = self.used_credential or credential is not None
        else:
            raise self._unauthorized(says)

    def _unauthorized(self, says: str = "") -> FetchError:
        credential = self.credential
        said = f" ({says})" if says else ""
        if credential is not None:
            return FetchError(
                f"pull {self.name}", f"unauthorized with credentials from {credential.source}{said}"
            )
        host = self.endpoint.netloc if self.endpoint is not None else self.ref.registry
        why = auth.why_anonymous(host, self.ctx.registries.environ)
        return FetchError(f"pull {self.name}", f"unauthorized anonymously{said}: {why}")

    def _check(self, response: requests.Response, what: str) -> None:
        if response.status_code < 400:
            return
        says = registry_says(response)
        if response.status_code == 401:
            raise self._unauthorized(says)
        if response.status_code == 404:
            raise NotFoundError(f"pull {self.ref}", f"{what} not found in {self.name}")
        check_status(response, f"pull {self.ref}", what, says)

    def _retrying(self, action: Callable[[], T]) -> T:
        return self.transport.retrying(f"pull {self.ref}", action)

    def _check_digest(self, digest: object, what: str) -> str:
        if not is_digest(digest):
            raise FetchError(f"pull {self.ref}", f"{what} has no valid sha256 digest ({str(digest)[:80]!r})")
        return str(digest)

    # Manifests

    def manifest(self, identifier: str, size: int | None = None) -> tuple[dict[str, Any], str, str]:
        """The manifest or index named by a tag or digest: ``(document, "manifest" | "index", digest)``.

        A digest is checked, and a manifest with a digest in the cache needs no request. ``size``: the bytes the
        descriptor that names it gives; no more are read, and fewer are refused too.

        :raises FetchError: missing, unauthorized, not JSON, too large, of an unsupported type, wrong digest or
            size.
        """
        by_digest = identifier.startswith("sha256:")
        if by_digest:
            self._check_digest(identifier, "the reference")
            what = f"{self.ref} manifest {identifier}"
            cached = self.ctx.store.manifest(identifier, self.name, what, self.ctx.sink)
            if cached is not None:
                self._check_size(identifier, len(cached), size)
                return self._parse_manifest(cached, identifier)
        limit = MAX_MANIFEST if size is None else min(size, MAX_MANIFEST)
        data, digest = self._retrying(lambda: self._fetch_manifest(identifier, limit))
        self._check_size(identifier, len(data), size)
        if by_digest:
            verify_digest(
                digest,
                identifier,
                f"pull {self.ref}",
                "manifest digest mismatch: expected {expected}, got {got}",
            )
        parsed = self._parse_manifest(data, digest)
        self.ctx.store.keep_manifest(data, digest, self.name, self.used_credential, str(self.ref))
        return parsed

    def _check_size(self, identifier: str, count: int, size: int | None) -> None:
        if size is not None and count != size:
            raise FetchError(
                f"pull {self.ref}",
                f"manifest '{identifier}' is {count} bytes, but its descriptor says {size}",
            )

    def _fetch_manifest(self, identifier: str, limit: int = MAX_MANIFEST) -> tuple[bytes, str]:
        response = self._get(f"{self.base}/manifests/{identifier}", {"Accept": _ACCEPT})
        self._check(response, f"manifest '{identifier}'")
        data = read_capped(
            response,
            limit,
            f"pull {self.ref}",
            f"manifest '{identifier}'",
            self.transport.download_deadline(),
        )
        return data, sha256_of(data)

    def _parse_manifest(self, data: bytes, digest: str) -> tuple[dict[str, Any], str, str]:
        try:
            doc = loads(data)  # bounded in what it builds, not only in bytes
        except DocumentRefused as err:
            raise FetchError(f"pull {self.ref}", f"the manifest is refused: {err}") from None
        except ValueError:
            raise FetchError(f"pull {self.ref}", "the manifest is not JSON") from None
        if not isinstance(doc, dict):
            raise FetchError(f"pull {self.ref}", "the manifest is not a JSON object")
        try:
            kind = kind_of(doc)
        except ValueError as err:
            raise FetchError(f"pull {self.ref}", str(err)) from None
        return doc, kind, digest

    def referrers(self, digest: str, artifact_type: str) -> dict[str, Any] | None:
        """The index of the manifests that refer to ``digest`` (OCI 1.1): the registry's referrers API, asked for
        ``artifact_type`` (a registry may ignore the filter; ``""``: every type), or, when it answers that it has no
        such API (404,
        or 400, 405 or 501 as registries without it variously do), the referrers tag schema's index at tag
        ``sha256-<hex>``. ``None``: no referrers.

        :raises FetchError: the registry fails, or what it answers is not an index (exit 1).
        """
        from urllib.parse import quote  # deferred: only runs that verify signatures list referrers

        url = f"{self.base}/referrers/{digest}"
        url += f"?artifactType={quote(artifact_type, safe='')}" if artifact_type else ""

        def attempt() -> bytes | None:
            response = self._get(url, {"Accept": OCI_INDEX})
            if response.status_code in _NO_REFERRERS_API:
                response.close()
                return None
            self._check(response, f"the referrers of {digest}")
            what = f"the list of referrers of {digest}"
            return read_capped(
                response, MAX_MANIFEST, f"pull {self.ref}", what, self.transport.download_deadline()
            )

        data = self._retrying(attempt)
        if data is None:
            try:
                doc, kind, _ = self.manifest(digest.replace(":", "-"))
            except NotFoundError:
                return None
            return doc if kind == "index" else None
        return self._json_object(data, f"list of referrers of {digest}")

    # Blobs

    def document(self, digest: str, size: int | None, what: str) -> dict[str, Any]:
        """A small JSON blob (an image config) by digest, verified, read whole only up to :data:`MAX_MANIFEST`.

        :raises FetchError: larger than that, not a JSON object, or the blob's own failures.
        """
        if size is not None and size > MAX_MANIFEST:
            raise FetchError(f"pull {self.ref}", f"the {what} is larger than {MAX_MANIFEST} bytes")
        _, data = self.read_blob(digest, lambda body: body.read(), MAX_MANIFEST if size is None else size)
        return self._json_object(data, what)

    def _json_object(self, data: bytes, what: str) -> dict[str, Any]:
        """``data`` as a JSON object.

        :raises FetchError: it is not one (``what`` names it).
        """
        try:
            doc = loads(data)  # bounded in what it builds, not only in bytes
        except DocumentRefused as err:
            raise FetchError(f"pull {self.ref}", f"the {what} is refused: {err}") from None
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise FetchError(f"pull {self.ref}", f"the {what} is not a JSON object")
        return doc

    def read_blob(
        self, digest: str, consume: Callable[[Reader], T], size: int | None = None, *, shown: bool = True
    ) -> tuple[Path, T]:
        """Feed the blob to ``consume`` as it arrives, while keeping it (cache or staging) and checking it.

        ``size`` (the descriptor's) bounds what is read and must match. ``consume`` may be called again when an
        attempt fails; whatever it made of a blob that turns out wrong is the caller's to discard (the error is
        raised after it returns). ``shown``: whether its download is shown as progress (``Downloading <image>
        sha256:…``); not for what is read about an image rather than of it (a signature's payload).

        :raises FetchError: missing, unauthorized, wrong size or digest, or ``consume``'s own error.
        """
        self._check_digest(digest, "a blob")
        ctx = self.ctx
        download = lambda directory: self._download(digest, size, directory, consume, shown)
        return ctx.store.blob(digest, consume, download, ctx.sink, ctx.lock_wait, str(self.ref))

    def _download(
        self,
        digest: str,
        size: int | None,
        dest_dir: Path,
        consume: Callable[[Reader], T],
        shown: bool = True,
    ) -> tuple[Path, T]:
        """Stream the blob into a new file in ``dest_dir`` and through ``consume``; check size and digest."""
        url = f"{self.base}/blobs/{digest}"
        label = f"{self.ref} {digest[:19]}"
        too_large = FetchError(
            f"pull {self.ref}", f"blob {digest}: larger than the {size} bytes of its descriptor"
        )

        def attempt() -> tuple[Path, T]:
            response = self._get(url, {})
            self._check(response, f"blob {digest}")
            fd, name = tempfile.mkstemp(prefix="blob-", dir=dest_dir)
            try:
                with os.fdopen(fd, "wb") as out:

                    def tee(body: Reader) -> tuple[T | None, FetchError | None]:
                        teed = Tee(body, out, size)
                        result: tuple[T | None, FetchError | None]
                        try:
                            result = consume(teed), None
                        except LimitExceeded:
                            raise  # at once: nothing more is read
                        except FetchError as err:
                            # A corrupt blob often breaks the extraction first: read it all, blame the digest.
                            result = None, err
                        teed.drain()
                        if teed.over:
                            raise too_large
                        return result

                    (result, failure), got, count = stream_body(
                        response,
                        label,
                        self.ctx.sink.progress if shown else no_progress,
                        tee,
                        deadline=self.transport.download_deadline(),
                        guard=self.ctx.sink.guard,
                    )
                verify_digest(got, digest, f"pull {self.ref}", f"blob {digest}: digest mismatch: got {{got}}")
                if size is not None and count != size:
                    raise FetchError(
                        f"pull {self.ref}", f"blob {digest}: {count} bytes, but its descriptor says {size}"
                    )
                if failure is not None:
                    raise failure
            except BaseException:
                Path(name).unlink(missing_ok=True)
                raise
            return Path(name), cast(T, result)  # failure is None: consume returned a result

        return self._retrying(attempt)


def registry_says(response: requests.Response) -> str:
    """The registry's own words for an error answer (``errors[0]``: its code and message, as skopeo shows them),
    read from at most :data:`~preparer.fetch.oci.auth.MAX_ERROR_BODY` bytes of the body, printable and at most 300
    characters (:func:`~preparer.fetch.oci.auth.spoken`); ``""`` when
    the body says nothing readable. The response is closed."""
    import urllib3  # deferred (heavy), as everywhere a request was made

    # Any body at all: a registry's explanation is a courtesy, never a failure of its own.
    try:
        with response:
            data = response.raw.read(auth.MAX_ERROR_BODY, decode_content=True)
        errors = json.loads(data).get("errors")
        first = errors[0] if isinstance(errors, list) and errors else None
    except (OSError, ValueError, AttributeError, RecursionError, urllib3.exceptions.HTTPError):
        return ""
    if not isinstance(first, dict):
        return ""
    return auth.spoken([str(first.get(key) or "") for key in ("code", "message")])


def _endpoint_transport(base: Transport, endpoint: Host) -> Transport:
    """A transport for one hosts.toml host: its connect timeout, and its CA or ``skip_verify``; closed with the
    run's."""
    connect = endpoint.dial_timeout if endpoint.dial_timeout is not None else base.timeouts[0]
    verify = False if endpoint.skip_verify else endpoint.ca[0] if endpoint.ca else None
    # No retries: a mirror that fails gives way to the next host at once.
    return base.variant((connect, base.timeouts[1]), retries=0, verify=verify)
