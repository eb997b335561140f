"""A registry v2 client over ``requests``: manifests, indexes and blobs, with the token challenge flow.

Every blob and every manifest fetched by digest is checked against its sha256; blobs stream to disk and are
kept in the download cache by digest, so a second run of a digest reference makes no request at all.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

from preparer.errors import FetchError
from preparer.fetch import FetchContext
from preparer.fetch.cache import DownloadCache
from preparer.fetch.http import NetworkError, _attempts, check_status, describe, stream_body
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
T = TypeVar("T")
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
        check_status(response, f"pull {self.ref}", what)

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

    def blob(self, digest: str) -> Blob:
        """The verified blob ``digest``: from the cache, or downloaded (streamed and hashed) into it."""
        path, _ = self.read_blob(digest, lambda body: None)
        return Blob(path, digest)

    def read_blob(self, digest: str, consume: Callable[[IO[bytes]], T]) -> tuple[Path, T]:
        """Feed the blob to ``consume`` as it arrives, while keeping it (cache or staging) and checking its digest.

        ``consume`` may be called again when an attempt fails; whatever it made of a blob whose digest turns out
        wrong is the caller's to discard (the error is raised after it returns).
        """
        if self.cache is not None:
            cached = self.cache.blob_path(digest)
            if cached is None:
                with self.cache.lock("blob:" + digest):
                    cached = self.cache.blob_path(digest)
                    if cached is None:
                        return self._download(digest, self.cache.tmp_dir(), consume, keep=self.cache)
            with open(cached, "rb") as f:
                return cached, consume(f)
        return self._download(digest, self.ctx.staging, consume, keep=None)

    def _download(
        self, digest: str, dest_dir: Path, consume: Callable[[IO[bytes]], T], keep: DownloadCache | None
    ) -> tuple[Path, T]:
        """Stream the blob into a new file in ``dest_dir`` and through ``consume``; check length and digest."""
        url = f"{self.base}/blobs/{digest}"
        label = f"{self.ref} {digest[:19]}"

        def attempt() -> tuple[Path, T]:
            response = self._get(url, {})
            self._check(response, f"blob {digest}")
            fd, name = tempfile.mkstemp(prefix="blob-", dir=dest_dir)
            try:
                with os.fdopen(fd, "wb") as out:

                    def tee(body: IO[bytes]) -> tuple[T | None, FetchError | None]:
                        teed = _Tee(body, out)
                        try:
                            return consume(teed), None  # type: ignore[arg-type]
                        except FetchError as err:
                            # A corrupt blob often breaks the extraction first: read it all, blame the digest.
                            return None, err
                        finally:
                            teed.drain()

                    (result, failure), got, _ = stream_body(self.ctx, response, label, tee)
                if got != digest:
                    raise FetchError(f"pull {self.ref}", f"blob {digest}: digest mismatch: got {got}")
                if failure is not None:
                    raise failure
            except BaseException:
                Path(name).unlink(missing_ok=True)
                raise
            path = keep.add_blob(Path(name), digest) if keep is not None else Path(name)
            return path, result

        outcome: tuple[Path, T] = self._retrying(attempt)
        return outcome


class _Tee:
    """Reads ``stream`` and writes what it read to ``out``."""

    def __init__(self, stream: IO[bytes], out: IO[bytes]) -> None:
        self.stream, self.out = stream, out

    def read(self, size: int = -1) -> bytes:
        data = self.stream.read(size)
        self.out.write(data)
        return data

    def drain(self) -> None:
        while self.read(1 << 20):
            pass
