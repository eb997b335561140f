"""A registry v2 client over ``requests``: manifests, indexes and blobs, with the token challenge flow.

Every blob and every manifest fetched by digest is checked against its sha256; blobs stream to disk and are
kept in the download cache by digest, so a second run of a digest reference makes no request at all.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from preparer.errors import FetchError
from preparer.fetch import FetchContext
from preparer.fetch.cache import DownloadCache
from preparer.fetch.http import NetworkError, _attempts, describe, download_blob
from preparer.fetch.oci import auth
from preparer.fetch.oci.reference import Reference, scheme_for

if TYPE_CHECKING:
    import requests

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFESTS = (OCI_MANIFEST, DOCKER_MANIFEST)
INDEXES = (OCI_INDEX, DOCKER_LIST)
_ACCEPT = ", ".join((*MANIFESTS, *INDEXES))
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True, slots=True)
class Blob:
    """A verified blob on local disk."""

    path: Path
    digest: str


def sha256_of(data: bytes) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(data).hexdigest()


class Registry:
    """One repository of one registry, for one run: credentials looked up once, tokens kept per scope."""

    def __init__(self, ref: Reference, ctx: FetchContext) -> None:
        self.ref, self.ctx = ref, ctx
        self.base = (
            f"{scheme_for(ref.registry, ctx.insecure_registries)}://{ref.api_host}/v2/{ref.repository}"
        )
        self.credential = auth.lookup(ref.registry, ctx.environ)
        self.authorization: str | None = None
        if self.credential is not None and self.credential.header is not None:
            self.authorization = (
                self.credential.header
            )  # the lifecycle sends CNB_REGISTRY_AUTH headers as they are
        self.cache = DownloadCache(ctx.download_cache) if ctx.download_cache is not None else None
        self.lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"{self.ref.registry}/{self.ref.repository}"

    # Requests

    def _get(self, url: str, headers: dict[str, str]) -> requests.Response:
        """GET with the current authorization; a 401 is answered once (basic or bearer challenge), then retried."""
        response = self._send(url, headers)
        if response.status_code == 401:
            challenge = response.headers.get("WWW-Authenticate", "")
            response.close()
            self._answer_challenge(challenge)
            response = self._send(url, headers)
        return response

    def _send(self, url: str, headers: dict[str, str]) -> requests.Response:
        import requests

        sent = dict(headers)
        if self.authorization:
            sent["Authorization"] = self.authorization
        try:
            return self.ctx.sessions.get().get(url, headers=sent, stream=True, timeout=self.ctx.timeouts)
        except requests.RequestException as err:
            raise NetworkError(describe(err)) from err

    def _answer_challenge(self, header: str) -> None:
        scheme = header.split(" ", 1)[0].lower()
        params = dict(_CHALLENGE.findall(header))
        if scheme == "basic":
            if self.credential is None or self.credential.header is None:
                raise self._unauthorized()
            self.authorization = self.credential.header
        elif scheme == "bearer" and "realm" in params:
            self.authorization = "Bearer " + self._token(params)
        else:
            raise self._unauthorized()

    def _token(self, params: dict[str, str]) -> str:
        """A bearer token from the challenge's realm, with the credential if there is one."""
        import requests

        query = {"service": params.get("service", ""), "scope": f"repository:{self.ref.repository}:pull"}
        session = self.ctx.sessions.get()
        try:
            if self.credential is not None and self.credential.identity_token is not None:
                response = session.post(
                    params["realm"],
                    data={**query, "grant_type": "refresh_token", "client_id": "cnb-preparer",
                          "refresh_token": self.credential.identity_token},
                    timeout=self.ctx.timeouts,
                )  # fmt: skip
            else:
                headers = {}
                if self.credential is not None and (self.credential.header or "").lower().startswith(
                    "basic "
                ):
                    headers["Authorization"] = self.credential.header or ""
                response = session.get(
                    params["realm"], params=query, headers=headers, timeout=self.ctx.timeouts
                )
        except requests.RequestException as err:
            raise NetworkError(describe(err)) from err
        if response.status_code in (401, 403):
            raise self._unauthorized()
        if response.status_code >= 400:
            raise FetchError(
                f"authenticate to {self.ref.registry}", f"token endpoint answered {response.status_code}"
            )
        try:
            body = response.json()
            token = body.get("token") or body.get("access_token")
        except ValueError:
            token = None
        if not isinstance(token, str) or not token:
            raise FetchError(f"authenticate to {self.ref.registry}", "the token endpoint gave no token")
        return token

    def _unauthorized(self) -> FetchError:
        how = f"with credentials from {self.credential.source}" if self.credential else "anonymously"
        return FetchError(f"pull {self.name}", f"unauthorized {how}")

    def _check(self, response: requests.Response, what: str) -> None:
        if response.status_code == 401:
            response.close()
            raise self._unauthorized()
        if response.status_code == 404:
            response.close()
            raise FetchError(f"pull {self.ref}", f"{what} not found in {self.name}")
        if response.status_code >= 500:
            response.close()
            raise NetworkError(f"HTTP {response.status_code} {response.reason}")
        if response.status_code >= 400:
            response.close()
            raise FetchError(f"pull {self.ref}", f"{what}: HTTP {response.status_code} {response.reason}")

    def _retrying(self, action: Any) -> Any:
        last: NetworkError | None = None
        for _ in _attempts(self.ctx, self.name):
            try:
                return action()
            except NetworkError as err:
                last = err
        assert last is not None
        raise FetchError(f"pull {self.ref}", f"{last} (after {self.ctx.retries + 1} attempts)")

    # Manifests

    def manifest(self, identifier: str) -> tuple[dict[str, Any], str, str]:
        """The manifest or index named by a tag or digest: ``(document, media type, digest)``.

        A digest is checked, and a manifest with a digest in the cache needs no request.
        """
        if identifier.startswith("sha256:") and self.cache is not None:
            cached = self.cache.blob_path(identifier)
            if cached is not None:
                return self._parse_manifest(cached.read_bytes(), identifier)
        data, digest = self._retrying(lambda: self._fetch_manifest(identifier))
        if identifier.startswith("sha256:") and digest != identifier:
            raise FetchError(
                f"pull {self.ref}", f"manifest digest mismatch: expected {identifier}, got {digest}"
            )
        if self.cache is not None:
            with self.cache.temp_file() as tmp:
                tmp.write_bytes(data)
                self.cache.add_blob(tmp, digest)
        return self._parse_manifest(data, digest)

    def _fetch_manifest(self, identifier: str) -> tuple[bytes, str]:
        response = self._get(f"{self.base}/manifests/{identifier}", {"Accept": _ACCEPT})
        self._check(response, f"manifest '{identifier}'")
        try:
            data = response.content
        except Exception as err:
            raise NetworkError(describe(err)) from err
        return data, sha256_of(data)

    def _parse_manifest(self, data: bytes, digest: str) -> tuple[dict[str, Any], str, str]:
        try:
            doc = json.loads(data)
        except ValueError:
            raise FetchError(f"pull {self.ref}", "the manifest is not JSON") from None
        if not isinstance(doc, dict):
            raise FetchError(f"pull {self.ref}", "the manifest is not a JSON object")
        media_type = doc.get("mediaType") or (OCI_INDEX if "manifests" in doc else OCI_MANIFEST)
        return doc, str(media_type), digest

    # Blobs

    def blob(self, digest: str, size: int | None = None) -> Blob:
        """The verified blob ``digest``: from the cache, or downloaded (streamed and hashed) into it."""
        if self.cache is not None:
            cached = self.cache.blob_path(digest)
            if cached is not None:
                return Blob(cached, digest)
            with self.cache.lock("blob:" + digest):
                cached = self.cache.blob_path(digest)
                if cached is not None:
                    return Blob(cached, digest)
                path = self._download(digest, self.cache.tmp_dir())
                return Blob(self.cache.add_blob(path, digest), digest)
        return Blob(self._download(digest, self.ctx.staging), digest)

    def _download(self, digest: str, dest_dir: Path) -> Path:
        url = f"{self.base}/blobs/{digest}"
        # Make sure the authorization is current (a blob request may be the first one of this run).
        if self.authorization is None:
            probe = self._retrying(lambda: self._get(url, {"Range": "bytes=0-0"}))
            self._check(probe, f"blob {digest}")
            probe.close()
        headers = {"Authorization": self.authorization} if self.authorization else {}
        try:
            path, _ = download_blob(
                self.ctx, url, digest, dest_dir, headers, label=f"{self.ref} {digest[:19]}"
            )
        except FetchError as err:
            # Name the image, not the blob URL, and keep the cause (digest mismatch, HTTP status).
            raise FetchError(f"pull {self.ref}", f"blob {digest}: {err.cause}") from None
        return path
