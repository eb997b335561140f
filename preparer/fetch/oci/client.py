"""A registry v2 client over ``requests``: manifests, indexes and blobs, with the token challenge flow.

Every blob and every manifest fetched by digest is checked against its sha256, and blobs against the size their
descriptor gives; blobs stream to disk and are kept in the download cache by digest, so a second run of a digest
reference makes no request at all. Credentials are looked up only when a request is about to be made.
"""

from __future__ import annotations

import os
import tempfile
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
from preparer.fetch.oci.remote import Remote, Unanswered, registry_says
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
    """One repository of one registry, for one run: what it pulls verified and kept in the store, its requests
    made by the run's one registry client (:class:`~preparer.fetch.oci.remote.Remote`: credentials, the challenge)."""

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
        registries = ctx.registries
        self.remote = Remote(
            root, ref.repository, registry=ref.registry, environ=registries.environ, transport=self.transport,
            send=self._send, host=endpoint.netloc if endpoint is not None else None,  # a mirror's own credentials
            warn=ctx.sink.warn, warned=registries.warned,
        )  # fmt: skip
        self.base = self.remote.base

    @property
    def name(self) -> str:
        """``registry/repository``, for messages."""
        return f"{self.ref.registry}/{self.ref.repository}"

    @property
    def used_credential(self) -> bool:
        """Whether a request went with the run's credentials (the repository is then private for the cache)."""
        return self.remote.used_credential

    # Requests

    def _get(self, url: str, headers: dict[str, str]) -> requests.Response:
        """GET with the current authorization; a 401 is answered once (basic or bearer challenge), then retried."""
        try:
            return self.remote.request("GET", url, headers)
        except Unanswered as why:
            raise self._unauthorized(why.says) from None

    def _send(
        self, method: str, url: str, headers: dict[str, str], body: Any, blob: bool
    ) -> requests.Response:
        """One request through the run's transport: redirects decided hop by hop, a hosts.toml host's headers."""
        sent = {**self.endpoint.headers, **headers} if self.endpoint is not None else headers
        return self.transport.get(url, sent, action=f"pull {self.ref}", check=False, method=method)

    def _unauthorized(self, says: str = "") -> FetchError:
        credential = self.remote.credential
        said = f" ({says})" if says else ""
        if credential is not None:
            return FetchError(
                f"pull {self.name}", f"unauthorized with credentials from {credential.source}{said}"
            )
        why = auth.why_anonymous(self.remote.host, self.ctx.registries.environ)
        return FetchError(f"pull {self.name}", f"unauthorized anonymously{said}: {why}")

    def _check(self, response: requests.Response, what: str) -> None:
        if response.status_code < 400:
            return
        says = registry_says(response)  # a 401 is the client's (:meth:`_get`)
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
            cached = self.ctx.store.blobs.manifest(identifier, self.name, what, self.ctx.sink)
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
        self.ctx.store.blobs.keep_manifest(data, digest, self.name, self.used_credential, str(self.ref))
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
        return ctx.store.blobs.blob(digest, consume, download, ctx.sink, ctx.lock_wait, str(self.ref))

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


def _endpoint_transport(base: Transport, endpoint: Host) -> Transport:
    """A transport for one hosts.toml host: its connect timeout, and its CA or ``skip_verify``; closed with the
    run's."""
    connect = endpoint.dial_timeout if endpoint.dial_timeout is not None else base.timeouts[0]
    verify = False if endpoint.skip_verify else endpoint.ca[0] if endpoint.ca else None
    # No retries: a mirror that fails gives way to the next host at once.
    return base.variant((connect, base.timeouts[1]), retries=0, verify=verify)
