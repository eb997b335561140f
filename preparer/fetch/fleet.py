"""A download cache shared by a fleet of build pods: an OCI repository the platform already runs (docs/fleet.md).

Archives fetched over http are kept there as OCI artifacts holding the origin's bytes unchanged: one manifest
(``artifactType`` :data:`ARTIFACT_TYPE`, the empty config, one layer), tagged ``sha256-<hex>`` (the archive's
digest, what a ``#sha256=`` pin names) and ``url-<sha256 of the URL>``, its annotations the redacted source, the
validators (ETag, Last-Modified) and when the origin last confirmed them (``checked``). Images named by digest are
copied unchanged (manifest, config, layers) and tagged ``sha256-<hex>`` of the manifest.

Everything read from the repository is verified as origin bytes are (digests, sizes, pins, the archive rules):
a record only says where to look. The repository never fails a build: any problem with it is one warning, after
which the run goes on as if there were no repository (a circuit breaker: the repository is not asked again in
the run). This module names what the repository holds and reads it; what a run writes back, after its commit and
only in ``read-write`` mode, is :mod:`~preparer.fetch.fleet_writeback`'s.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from preparer._jsondoc import loads
from preparer._record import field, record
from preparer.errors import FetchError, InvalidInputsError
from preparer.fetch.failures import NetworkError
from preparer.fetch.oci.reference import scheme_for
from preparer.fetch.oci.remote import PushRefused, Remote, Unanswered
from preparer.fetch.streams import is_digest, sha256_of
from preparer.fetch.transport import Transport, describe, read_capped
from preparer.fetch.url import parse_http_url

if TYPE_CHECKING:
    import requests

T = TypeVar("T")

ARTIFACT_TYPE = "application/vnd.buildpacks.preparer.archive.v1"
REF_TYPE = "application/vnd.buildpacks.preparer.ref.v1"
DIGEST = "io.buildpacks.preparer.digest"
#: A ``ref-`` record's: the image index the tag named, when it named one (its platform manifest is :data:`DIGEST`).
INDEX = "io.buildpacks.preparer.index"
LAYER_TYPE = "application/vnd.buildpacks.preparer.archive.v1.content"
#: A record of the signature objects that satisfied a policy for an image (re-verified by every reader).
SIGNATURES_TYPE = "application/vnd.buildpacks.preparer.signatures.v1"
SIGNATURES_LAYER = "application/vnd.buildpacks.preparer.signatures.v1+json"
#: A signature record larger than this is not read.
MAX_SIGNATURES_RECORD = 1 << 20
#: A record of an image index an image was pulled through: its one layer is the index's bytes, unchanged.
INDEX_TYPE = "application/vnd.buildpacks.preparer.index.v1"
INDEX_LAYER = "application/vnd.buildpacks.preparer.index.v1+json"
#: An index larger than this is not read (the registry client's bound on a manifest).
MAX_INDEX = 4 << 20
#: What a warning about a malformed record calls a record of each type.
_KINDS = {ARTIFACT_TYPE: "archive", REF_TYPE: "reference", SIGNATURES_TYPE: "signature", INDEX_TYPE: "index"}
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
EMPTY_CONFIG = {
    "mediaType": "application/vnd.oci.empty.v1+json",
    "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
    "size": 2,
}
#: Seconds to connect to the repository (a cache that is down must cost little), and to wait between bytes.
CONNECT_SECONDS = 2.0
READ_SECONDS = 30.0
#: Seconds a request for a record (a manifest, a tag, a HEAD) may take in all: a repository that trickles its
#: answers costs a build this once, then the breaker is open. Blobs have the download deadline.
RECORD_SECONDS = 10.0
MAX_RECORD = 1 << 20
#: The annotations of an archive record.
SOURCE = "org.opencontainers.image.source"
CHECKED = "io.buildpacks.preparer.checked"
ETAG = "io.buildpacks.preparer.etag"
LAST_MODIFIED = "io.buildpacks.preparer.last-modified"
Mode = Literal["read-write", "read", "offline"]
MODES: tuple[Mode, ...] = ("read-write", "read", "offline")


@record
class FleetConfig:
    """``-download-cache-repo`` and its mode and max-age."""

    #: ``<registry>/<repository>``.
    repo: str
    mode: Mode = "read-write"
    #: Seconds an unpinned URL's record may go unchecked by its origin (0: always ask the origin).
    max_age: float = 0.0

    @property
    def registry(self) -> str:
        return self.repo.split("/", 1)[0]

    @property
    def repository(self) -> str:
        return self.repo.split("/", 1)[1]


def parse_repo(text: str) -> str:
    """``<registry>/<repository>``, checked.

    :raises InvalidInputsError: anything else (exit 3).
    """
    registry, slash, repository = text.strip().partition("/")
    if (
        not slash
        or not registry
        or not repository
        or "@" in text
        or ":" in repository
        or text != text.strip()
    ):
        raise InvalidInputsError(
            "resolve inputs",
            f"-download-cache-repo '{text}' is not <registry>/<repository> (no tag, no digest)",
        )
    return text


def canonical_url(url: str) -> str:
    """The URL as the repository keys it: its canonical form (:mod:`preparer.fetch.url`), without user information
    or query (a URL that has either is never looked up or written back)."""
    return parse_http_url(url).shown


def url_tag(url: str) -> str:
    return "url-" + hashlib.sha256(canonical_url(url).encode()).hexdigest()


def offline_miss(action: str, tag: str) -> FetchError:
    """The error of an offline run that finds nothing at ``tag``: it names the tag to seed (exit 1)."""
    return FetchError(action, f"not in the download cache repository (seed {tag})")


def signatures_tag(repository: str, digest: str) -> str:
    """The tag of the record of the signatures of the image ``digest`` of ``registry/repository``."""
    return "sig-" + hashlib.sha256(f"{repository}@{digest}".encode()).hexdigest()


def index_tag(digest: str) -> str:
    """The tag of the record of the image index ``digest``."""
    return "index-" + digest.removeprefix("sha256:")


def ref_tag(reference: str) -> str:
    """The tag of the record of an image reference's digest (``registry/repository:tag``, normalised)."""
    return "ref-" + hashlib.sha256(reference.encode()).hexdigest()


@record
class Hit:
    """An archive the repository holds: its layer's digest and size, and the record's annotations."""

    digest: str
    size: int
    annotations: dict[str, str]

    @property
    def validators(self) -> dict[str, str]:
        """The origin's validators the record holds, as the local download cache keeps them."""
        return {
            "etag": self.annotations.get(ETAG, ""),
            "last-modified": self.annotations.get(LAST_MODIFIED, ""),
        }


@record(frozen=False)
class Fleet:
    """One run's connection to the repository (its client, the breaker) and its lookups while fetching; the
    write-back after the commit is a :class:`~preparer.fetch.fleet_writeback.WriteBack` of it."""

    config: FleetConfig
    environ: dict[str, str] = field(default_factory=dict, repr=False)
    insecure_registries: tuple[str, ...] = ()
    #: Told every warning (once for the breaker).
    warn: Any = None
    transport: Transport = field(
        default_factory=lambda: Transport(timeouts=(CONNECT_SECONDS, READ_SECONDS), retries=0), repr=False
    )
    _broken: bool = field(default=False, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    #: The repository's client (the run's one registry client: credentials, the challenge, pushes).
    remote: Remote = field(default=None, init=False, repr=False)  # type: ignore[assignment]  # made just below

    def __post_init__(self) -> None:
        config = self.config
        root = f"{scheme_for(config.registry, self.insecure_registries)}://{config.registry}/v2"
        self.remote = Remote(
            root, config.repository, registry=config.registry, environ=self.environ, transport=self.transport,
            send=self._send, push=config.mode == "read-write",
        )  # fmt: skip

    @property
    def usable(self) -> bool:
        return not self._broken

    def give_up(self, why: str) -> None:
        """Stop using the repository for this run, with one warning."""
        with self._lock:
            if self._broken:
                return
            self._broken = True
        if self.warn is not None:
            self.warn(f"the download cache repository {self.config.repo} is not used: {why}")

    # Reading

    def archive_by_digest(self, hex_digest: str) -> Hit | None:
        """The archive of digest ``sha256:<hex_digest>``, when the repository has it."""
        hit = self._archive(f"sha256-{hex_digest}")
        if hit is not None and hit.digest != f"sha256:{hex_digest}":
            self._malformed(f"sha256-{hex_digest}", "its layer is not the digest it is tagged with")
            return None
        return hit

    def archive_by_url(self, url: str) -> Hit | None:
        """The last archive recorded for ``url``."""
        return self._archive(url_tag(url))

    def ref_digest(self, reference: str) -> tuple[str, str | None] | None:
        """The digest recorded for the image reference ``reference`` (a tag), and the image index it was pulled
        through (``None``: none, or none recorded); ``None`` when there is no record."""
        tag = ref_tag(reference)
        doc = self._record(tag, REF_TYPE)
        annotations = (doc.get("annotations") or {}) if doc is not None else {}
        digest = annotations.get(DIGEST)
        if doc is not None and not is_digest(digest):
            self._malformed(tag, "not a preparer reference record")
            return None
        index = annotations.get(INDEX)
        return (str(digest), str(index) if is_digest(index) else None) if digest else None

    def signatures(self, repository: str, digest: str) -> bytes | None:
        """The signature record of the image ``digest`` of ``repository`` (its JSON), or ``None``."""
        hit = self._layer(signatures_tag(repository, digest), SIGNATURES_TYPE)
        return None if hit is None else self.small_blob(hit, MAX_SIGNATURES_RECORD)

    def index(self, digest: str) -> bytes | None:
        """The image index ``digest`` (its bytes, verified against the digest), when the repository records it."""
        tag = index_tag(digest)
        hit = self._layer(tag, INDEX_TYPE)
        if hit is None:
            return None
        if hit.digest != digest:
            self._malformed(tag, "its layer is not the digest it is tagged with")
            return None
        return self.small_blob(hit, MAX_INDEX)

    def image_manifest(self, hex_digest: str) -> bool:
        """Whether the repository holds the image manifest ``sha256:<hex_digest>`` (to pull it from there)."""
        accept = f"{OCI_MANIFEST}, application/vnd.docker.distribution.manifest.v2+json, {OCI_INDEX}, {DOCKER_LIST}"
        response = self._request("HEAD", self.remote.manifest_url(f"sha256:{hex_digest}"), {"Accept": accept})
        if response is None:
            return False
        response.close()
        return response.status_code == 200

    def blob(self, digest: str) -> requests.Response | None:
        """The blob ``digest``, streaming (the caller verifies it within the download deadline); ``None`` on any
        problem (then: the origin)."""
        response = self._request("GET", self.remote.blob_url(digest), blob=True)
        if response is None:
            return None
        if response.status_code != 200:
            response.close()
            self.give_up(f"blob {digest[:19]}: HTTP {response.status_code}")
            return None
        return response

    def small_blob(self, hit: Hit, limit: int) -> bytes | None:
        """The whole blob of ``hit`` when it is at most ``limit`` bytes and matches its digest, else ``None``."""
        if hit.size > limit:
            return None
        response = self.blob(hit.digest)
        if response is None:
            return None
        try:
            data = read_capped(response, limit, "read the download cache repository", f"blob {hit.digest[:19]}",
                               self.transport.download_deadline())  # fmt: skip
        except (FetchError, NetworkError) as err:
            self.give_up(str(err.cause) if isinstance(err, FetchError) else describe(err))
            return None
        if sha256_of(data) != hit.digest:
            self._malformed(hit.digest[:19], "the blob is not the digest its record names")
            return None
        return data

    def fresh(self, hit: Hit) -> bool:
        """Whether ``hit`` was confirmed by its origin within max-age (offline: always)."""
        if self.config.mode == "offline":
            return True
        try:
            checked = int(hit.annotations.get(CHECKED, "0"))
        except ValueError:
            return False
        return self.config.max_age > 0 and 0 <= time.time() - checked <= self.config.max_age

    def _archive(self, tag: str) -> Hit | None:
        return self._layer(tag, ARTIFACT_TYPE)

    def _layer(self, tag: str, artifact_type: str) -> Hit | None:
        """The one layer of the record of ``artifact_type`` tagged ``tag`` (its digest, size and the record's
        annotations), or ``None`` when there is none, or it is malformed (then said once)."""
        doc = self._record(tag, artifact_type)
        if doc is None:
            return None
        try:
            layer = doc["layers"][0]
            digest, size = str(layer["digest"]), int(layer["size"])
            annotations = {str(k): str(v) for k, v in (doc.get("annotations") or {}).items()}
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            self._malformed(tag, f"not a preparer {_KINDS[artifact_type]} record")
            return None
        if not is_digest(digest) or size < 0:
            self._malformed(tag, "its layer has no sha256 digest")
            return None
        return Hit(digest, size, annotations)

    def _record(self, tag: str, artifact_type: str) -> dict[str, Any] | None:
        """The record tagged ``tag`` when it is one of ``artifact_type``; ``None`` when absent (404), malformed
        (with a warning) or when the repository fails (the breaker opens)."""
        deadline = self.transport.clock.deadline(RECORD_SECONDS, _slow(RECORD_SECONDS))
        response = self._request("GET", self.remote.manifest_url(tag), {"Accept": OCI_MANIFEST})
        if response is None:
            return None
        if response.status_code != 200:
            response.close()
            if response.status_code != 404:
                self.give_up(f"{tag}: HTTP {response.status_code}")
            return None
        try:
            body = read_capped(response, MAX_RECORD, "read the download cache repository", tag, deadline)
        except (FetchError, NetworkError) as err:  # a cache never fails a build: the breaker opens
            self.give_up(str(err.cause) if isinstance(err, FetchError) else describe(err))
            return None
        try:
            doc = loads(body)  # bounded in what it builds: any pusher writes records
        except (ValueError, RecursionError):
            doc = None
        if not isinstance(doc, dict) or doc.get("artifactType") != artifact_type:
            self._malformed(tag, f"not a preparer {_KINDS[artifact_type]} record")
            return None
        return doc

    def _malformed(self, tag: str, why: str) -> None:
        if self.warn is not None:
            self.warn(f"the download cache repository's {tag} is ignored: {why}")

    def _request(
        self, method: str, url: str, headers: dict[str, str] | None = None, *, blob: bool = False
    ) -> requests.Response | None:
        """One request with the repository's credentials (a 401 answered once); ``None`` when it cannot be made
        or is refused (the breaker is then open). Its body is streamed, for the caller to read within its own
        deadline."""
        return self.guarded(lambda remote: remote.request(method, url, headers, blob=blob))

    def guarded(self, call: Callable[[Remote], T]) -> T | None:
        """What ``call`` makes of the repository's client; ``None`` when a request fails or is refused (the breaker
        is then open, with one warning)."""
        if self._broken:
            return None
        try:
            self.remote.credential  # noqa: B018 (looked up before the first request, as for every registry)
        except FetchError as err:
            self.give_up(str(err))
            return None
        try:
            return call(self.remote)
        except _Off:  # said when it happened
            return None
        except (Unanswered, FetchError, NetworkError):  # a challenge without an answer, or no token
            self.give_up(f"HTTP 401 (credentials for {self.config.registry})")
        except PushRefused as refused:
            self.give_up(f"the write-back could not {refused}")
        return None

    def _send(
        self, method: str, url: str, headers: dict[str, str], body: Any, blob: bool
    ) -> requests.Response:
        """How the client's requests go out: the repository's short timeouts, its answer to start within
        :data:`RECORD_SECONDS` (a blob's, within the download deadline) and the run's time; a request that fails
        or is refused opens the breaker."""
        import requests  # deferred (heavy): only runs with a repository import it

        if self._broken:
            raise _Off
        within = self.transport.deadline if blob else RECORD_SECONDS
        timeout = self.transport.request_timeouts(min(within, READ_SECONDS))
        try:
            session = self.transport.session()
        except NetworkError:  # the run is over (an upload it left): nothing more is asked
            raise _Off from None
        try:
            response = session.request(  # bodies but those of GETs are a few bytes
                method, url, headers=headers, data=body, stream=method == "GET", timeout=timeout
            )
        except requests.RequestException as err:
            self.give_up(_slow(timeout[1]) if isinstance(err, requests.Timeout) else describe(err))
            raise _Off from None
        if response.status_code == 403:
            response.close()
            self.give_up(f"HTTP 403 (credentials for {self.config.registry})")
            raise _Off
        return response


class _Off(Exception):
    """A request to the repository was not made, or failed or was refused: the breaker is open (said once)."""


def _slow(seconds: float) -> str:
    return f"it did not answer within {seconds:g} s"
