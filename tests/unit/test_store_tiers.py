"""The store's ways through its tiers, in memory: fakes of the tiers' roles (preparer/fetch/store/tiers.py), as
pypa/installer tests its core through fakes of a wheel's source and destination.

The fleet's repository is a :class:`MemoryFleet` (the ``Shared`` role) and its write-back a :class:`MemoryWrites`
(the ``Writes`` role), both over one :class:`Repository` that two pods can share; this pod's download cache is the
real one in a temporary directory (:class:`FullCache`: one on a full disk); an origin answers from memory
(preparer.fetch.mock), an image's origin and copies are a ``pull`` that records what it was asked. The same
behaviours against Debian's docker-registry and a real HTTP server are tests/integration/test_fleet*.py; this is
the level below them, where every path through the tiers can be reached in a few milliseconds.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import requests

from preparer.errors import FetchError
from preparer.fetch.base import FetchContext, Fetched
from preparer.fetch.cache import DownloadCache
from preparer.fetch.fleet import CHECKED, ETAG, Fleet, FleetConfig, Hit, Mode, ref_tag, url_tag
from preparer.fetch.fleet_writeback import Upload, WriteBack
from preparer.fetch.guard import SignatureObject
from preparer.fetch.http import fetch_http
from preparer.fetch.locator import HttpLocator
from preparer.fetch.mock import Answer, Script, mock_transport
from preparer.fetch.sink import Sink
from preparer.fetch.store import Store
from preparer.fetch.store.tiers import Local, Shared, Writes
from preparer.fetch.streams import Reader
from preparer.fetch.transport import Unreachable
from tests.buildpacks import make_tgz

URL = "http://buildpacks.example/bp.tgz"
OTHER = "http://buildpacks.example/other.tgz"
LONG_AGO = time.time() - 86400


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# The tiers, faked


class Repository:
    """What a fleet's repository holds, in memory: blobs, archive records by digest and by URL, what tags named,
    image indexes and manifests, signature records."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.archives: dict[str, Hit] = {}
        self.urls: dict[str, Hit] = {}
        self.refs: dict[str, tuple[str, str | None]] = {}
        self.indexes: set[str] = set()
        self.images: set[str] = set()
        self.signatures: dict[tuple[str, str], bytes] = {}

    def archive(
        self, data: bytes, url: str | None = None, *, checked: float | None = None, etag: str = ""
    ) -> Hit:
        digest = sha256(data)
        self.blobs[digest] = data
        hit = Hit(
            digest, len(data), {CHECKED: str(int(time.time() if checked is None else checked)), ETAG: etag}
        )
        self.archives[digest] = hit
        if url is not None:
            self.urls[url] = hit
        return hit


class MemoryFleet:
    """The fleet's repository, looked up (the ``Shared`` role), every ask counted. ``down``: each ask fails, as a
    repository that refuses connections does: the first opens the breaker, with one warning."""

    def __init__(
        self, repository: Repository, mode: Mode = "read-write", max_age: float = 0.0, *, down: bool = False
    ):
        self.repository, self.down = repository, down
        self.config = FleetConfig("cache.example/fleet", mode, max_age)
        self.environ = {"CNB_REGISTRY_AUTH": '{"cache.example": "Basic cHVzaGVyOnB3"}'}
        self.asked: list[str] = []
        self.warnings: list[str] = []
        self._broken = False

    @property
    def usable(self) -> bool:
        return not self._broken

    def give_up(self, why: str) -> None:
        if not self._broken:
            self._broken = True
            self.warnings.append(why)

    def _ask(self, what: str) -> bool:
        """Whether ``what`` may be asked: never again once the breaker is open (the real tier's rule)."""
        if self._broken:
            return False
        self.asked.append(what)
        if self.down:
            self.give_up("connection refused")
        return not self._broken

    def fresh(self, hit: Hit) -> bool:
        if self.config.mode == "offline":
            return True
        checked = int(hit.annotations.get(CHECKED, "0"))
        return self.config.max_age > 0 and 0 <= time.time() - checked <= self.config.max_age

    def archive_by_digest(self, hex_digest: str) -> Hit | None:
        return (
            self.repository.archives.get("sha256:" + hex_digest)
            if self._ask(f"sha256-{hex_digest}")
            else None
        )

    def archive_by_url(self, url: str) -> Hit | None:
        return self.repository.urls.get(url) if self._ask(url_tag(url)) else None

    def blob(self, digest: str) -> requests.Response | None:
        data = self.repository.blobs.get(digest) if self._ask(f"blob {digest}") else None
        if data is None:
            return None
        return mock_transport(lambda _: Answer(200, {}, data)).get("http://cache.example/blob", action="read")

    def small_blob(self, hit: Hit, limit: int) -> bytes | None:
        data = self.repository.blobs.get(hit.digest) if self._ask(f"blob {hit.digest}") else None
        return data if data is not None and len(data) <= limit and sha256(data) == hit.digest else None

    def ref_digest(self, reference: str) -> tuple[str, str | None] | None:
        return self.repository.refs.get(reference) if self._ask(ref_tag(reference)) else None

    def index(self, digest: str) -> bytes | None:
        found = self._ask(f"index {digest}") and digest in self.repository.indexes
        return self.repository.blobs[digest] if found else None

    def image_manifest(self, hex_digest: str) -> bool:
        return self._ask(f"manifest {hex_digest}") and "sha256:" + hex_digest in self.repository.images

    def signatures(self, repository: str, digest: str) -> bytes | None:
        return self.repository.signatures.get((repository, digest)) if self._ask(f"sig {digest}") else None


class MemoryWrites:
    """The write-back (the ``Writes`` role): what is remembered is pushed to the repository at :meth:`write_back`,
    an archive's bytes taken from its upload as they were downloaded."""

    def __init__(self, repository: Repository) -> None:
        self.repository = repository
        self.pending: list[tuple[str, Any]] = []
        self.closed = False

    def remember_archive(self, path: Path, digest: str, url: str, validators: dict[str, str]) -> None:
        self.pending.append(("archive", (url, path.read_bytes(), validators)))

    def remember_record(self, hit: Hit, url: str) -> None:
        self.pending.append(("record", (url, hit)))

    def upload(self, directory: Path, expected: str | None, length: int | None) -> Upload | None:
        return Upload(directory, expected, length)

    def remember_upload(
        self, upload: Upload, digest: str, size: int, url: str, validators: dict[str, str]
    ) -> None:
        upload.keep(digest)
        data = b"".join(upload.pieces(1.0))
        assert sha256(data) == digest and len(data) == size
        self.pending.append(("archive", (url, data, validators)))

    def remember_ref(self, reference: str, digest: str, index: str | None = None) -> None:
        self.pending.append(("ref", (reference, digest, index)))

    def remember_image(
        self, manifest: Path, digest: str, blobs: dict[str, Path | None], media_type: str
    ) -> None:
        self.pending.append(("image", (digest, sorted(blobs))))

    def remember_index(self, path: Path, digest: str, source: str) -> None:
        self.pending.append(("index", (digest, path.read_bytes())))

    def remember_signatures(self, path: Path, digest: str, repository: str, image: str) -> None:
        self.pending.append(("signatures", (repository, image, path.read_bytes())))

    def write_back(self) -> int:
        for kind, item in self.pending:
            if kind == "archive":
                url, data, validators = item
                self.repository.archive(data, url, etag=validators.get("etag", ""))
            elif kind == "ref":
                reference, digest, index = item
                self.repository.refs[reference] = (digest, index)
            elif kind == "signatures":
                repository, image, data = item
                self.repository.signatures[(repository, image)] = data
        written, self.pending = len(self.pending), []
        return written

    def close(self) -> None:
        self.closed = True


class FullCache(DownloadCache):
    """This pod's download cache on a full disk: what is read from it is there, what is put in it fails."""

    def _full(self) -> OSError:
        return OSError(errno.ENOSPC, "No space left on device", str(self.root / "tmp" / "new"))

    def add_tree(self, *args: Any, **kwargs: Any) -> Any:
        raise self._full()

    def add_blob(self, *args: Any, **kwargs: Any) -> Any:
        raise self._full()

    def put_signatures(self, *args: Any, **kwargs: Any) -> None:
        raise self._full()


def _as_roles(cache: DownloadCache, fleet: Fleet) -> tuple[Local, Shared, Writes]:
    """The real tiers, as the roles the ways ask for (mypy checks that each plays its role)."""
    return cache, fleet, WriteBack(fleet)


def _players() -> list[tuple[type, list[object]]]:
    local, shared, writes = _as_roles(
        DownloadCache(Path("/nonexistent")), Fleet(FleetConfig("cache.example/r"))
    )
    return [
        (Local, [local, FullCache(Path("/nonexistent"))]),
        (Shared, [shared, MemoryFleet(Repository())]),
        (Writes, [writes, MemoryWrites(Repository())]),
    ]


@pytest.mark.parametrize(("role", "players"), _players(), ids=["Local", "Shared", "Writes"])
def test_the_real_tiers_and_the_fakes_play_each_role_whole(role: type, players: list[object]) -> None:
    """What the ways ask of a tier is one protocol per role: every member of it is there on the real tier and on
    its fake alike (and mypy checks their signatures)."""
    members = {name for name in vars(role) if not name.startswith("_")} | set(role.__annotations__)
    assert len(members) > 5  # the role names what the ways ask
    for player in players:
        assert sorted(name for name in members if not hasattr(player, name)) == [], type(player).__name__


# The fetch, and an origin


class Pod:
    """One build pod: its own download cache (``None``: none) and staging, a store over the tiers given."""

    def __init__(
        self,
        root: Path,
        fleet: MemoryFleet | None = None,
        writes: MemoryWrites | None = None,
        *,
        cache: type[DownloadCache] | None = DownloadCache,
    ) -> None:
        self.root, self.fleet, self.writes = root, fleet, writes
        self.local = cache.open(root / "cache") if cache is not None else None
        #: What the fetches were told (their sink's warnings), and the store itself (a full cache, said once).
        self.warnings: list[str] = []
        self.warned: list[str] = []
        self.store = Store.with_tiers(self.local, fleet, writes, warn=self.warned.append)

    @property
    def sink(self) -> Sink:
        staging = self.root / "staging"
        staging.mkdir(parents=True, exist_ok=True)
        return Sink(staging, warn=self.warnings.append)

    def fetch(self, origin: Script, url: str = URL, sha: str | None = None) -> Fetched:
        transport = mock_transport(origin, backoff=0.01, retries=1)
        return fetch_http(HttpLocator(url, sha), FetchContext(self.sink, self.store, transport))


@pytest.fixture
def archive(tmp_path: Path) -> bytes:
    return make_tgz(tmp_path / "src" / "bp.tgz", "me/tiers", payload=b"t" * 500).read_bytes()


@pytest.fixture
def newer(tmp_path: Path) -> bytes:
    return make_tgz(tmp_path / "src" / "newer.tgz", "me/tiers", "2.0.0").read_bytes()


# Archives: pinned, fresh, stale, offline


def test_a_pinned_archive_the_fleet_holds_asks_no_origin_and_fills_this_pods_cache(
    tmp_path: Path, archive: bytes
) -> None:
    repository = Repository()
    repository.archive(archive)
    pin = sha256(archive).removeprefix("sha256:")
    fleet = MemoryFleet(repository)
    first = Pod(tmp_path / "pod", fleet, MemoryWrites(repository))
    origin = Script(Answer(500))
    assert first.fetch(origin, sha=pin).via == "cache repository"
    again = Pod(tmp_path / "pod", MemoryFleet(repository, down=True))  # the same cache, a repository now down
    assert again.fetch(origin, sha=pin).via == "download cache"
    assert origin.seen == [] and again.fleet is not None and again.fleet.asked == []


def test_an_unpinned_record_within_max_age_is_used_without_asking_the_origin(
    tmp_path: Path, archive: bytes
) -> None:
    repository = Repository()
    repository.archive(archive, URL)
    origin = Script(Answer(500))
    fetched = Pod(tmp_path, MemoryFleet(repository, max_age=3600)).fetch(origin)
    assert (fetched.via, fetched.digest, origin.seen) == ("cache repository", sha256(archive), [])


def test_a_stale_record_with_an_opaque_etag_is_not_asked_about_the_origins_bytes_are_downloaded(
    tmp_path: Path, archive: bytes, newer: bytes
) -> None:
    repository = Repository()
    repository.archive(archive, URL, checked=LONG_AGO, etag='"v1"')
    fleet = MemoryFleet(repository)
    origin = Script(Answer(200, {"ETag": '"v2"'}, newer))
    fetched = Pod(tmp_path, fleet).fetch(origin)
    assert (fetched.via, fetched.digest) == (None, sha256(newer))
    assert [r.headers.get("If-None-Match") for r in origin.seen] == [None]  # a plain download, not a question
    assert not any(ask.startswith("blob") for ask in fleet.asked)


def test_a_stale_record_whose_etag_names_its_blob_is_confirmed_by_a_304_and_recorded_again(
    tmp_path: Path, archive: bytes
) -> None:
    repository = Repository()
    etag = '"' + sha256(archive).removeprefix("sha256:") + '"'
    hit = repository.archive(archive, URL, checked=LONG_AGO, etag=etag)
    writes = MemoryWrites(repository)
    origin = Script(Answer(304))
    fetched = Pod(tmp_path, MemoryFleet(repository), writes).fetch(origin)
    assert fetched.via == "cache repository"
    assert [r.headers.get("If-None-Match") for r in origin.seen] == [etag]
    assert writes.pending == [("record", (URL, hit))]


def test_an_origin_that_cannot_be_reached_is_stood_in_for_only_with_a_max_age(
    tmp_path: Path, archive: bytes
) -> None:
    repository = Repository()
    repository.archive(archive, URL, checked=LONG_AGO, etag='"' + sha256(archive)[7:] + '"')
    refused = ConnectionRefusedError(111, "Connection refused")
    with pytest.raises(Unreachable):  # max-age 0: an unpinned URL's bytes are the origin's, or none
        Pod(tmp_path / "strict", MemoryFleet(repository)).fetch(Script(refused))
    lenient = Pod(tmp_path / "lenient", MemoryFleet(repository, max_age=60))  # the record is older still
    assert lenient.fetch(Script(refused)).via == "cache repository"
    assert lenient.warnings == [
        f"{URL} could not be revalidated with its origin; the download cache repository's copy is used"
    ]


def test_offline_the_fleets_record_is_used_however_old_and_a_miss_names_the_tag_to_seed(
    tmp_path: Path, archive: bytes
) -> None:
    repository = Repository()
    repository.archive(archive, URL, checked=LONG_AGO)
    origin = Script(Answer(200, {}, archive))
    pod = Pod(tmp_path, MemoryFleet(repository, "offline"))
    assert pod.fetch(origin).via == "cache repository"
    with pytest.raises(FetchError) as unpinned:
        pod.fetch(origin, OTHER)
    with pytest.raises(FetchError) as pinned:
        pod.fetch(origin, OTHER, sha="0" * 64)
    assert origin.seen == []
    assert unpinned.value.cause == f"not in the download cache repository (seed {url_tag(OTHER)})"
    assert pinned.value.cause == f"not in the download cache repository (seed sha256-{'0' * 64})"


def test_a_url_with_a_query_is_never_looked_up_nor_written_back(tmp_path: Path, archive: bytes) -> None:
    private = URL + "?token=s3cr3t"
    repository = Repository()
    repository.archive(archive, HttpLocator(private).url)  # a pusher's record for it is not even asked for
    fleet, writes = MemoryFleet(repository, max_age=3600), MemoryWrites(repository)
    pod = Pod(tmp_path, fleet, writes)
    assert pod.fetch(Script(Answer(200, {}, archive)), private).via is None
    assert pod.store.commit() == 0
    assert fleet.asked == [] and writes.pending == []


# Archives: the write-back, and tiers that fail


def test_what_the_origin_gave_is_written_back_at_the_commit_and_served_to_the_next_pod(
    tmp_path: Path, archive: bytes
) -> None:
    repository = Repository()
    origin = Script(Answer(200, {"ETag": '"v1"'}, archive))
    first = Pod(tmp_path / "first", MemoryFleet(repository, max_age=3600), MemoryWrites(repository))
    assert first.fetch(origin).via is None
    assert repository.urls == {}  # nothing is published before the run's commit
    assert first.store.commit() == 1
    assert repository.blobs[repository.urls[URL].digest] == archive
    assert repository.urls[URL].validators["etag"] == '"v1"'
    second = Pod(tmp_path / "second", MemoryFleet(repository, max_age=3600))
    assert second.fetch(origin).via == "cache repository"
    assert len(origin.seen) == 1


def test_a_read_mode_run_writes_nothing_and_one_that_does_not_commit_ends_its_uploads(
    tmp_path: Path, archive: bytes
) -> None:
    repository = Repository()
    reader = Pod(tmp_path / "reader", MemoryFleet(repository, "read"))
    reader.fetch(Script(Answer(200, {}, archive)))
    assert reader.store.commit() == 0
    writes = MemoryWrites(repository)
    failed = Pod(tmp_path / "failed", MemoryFleet(repository), writes)
    failed.fetch(Script(Answer(200, {}, archive)))
    failed.store.close()  # the run failed after this fetch: no commit
    assert writes.closed and repository.urls == {} and repository.blobs == {}


def test_a_fleet_that_is_down_is_one_warning_and_is_not_asked_again(
    tmp_path: Path, archive: bytes, newer: bytes
) -> None:
    fleet = MemoryFleet(Repository(), max_age=3600, down=True)
    pod = Pod(tmp_path, fleet, MemoryWrites(fleet.repository))
    assert pod.fetch(Script(Answer(200, {}, archive))).via is None
    assert pod.fetch(Script(Answer(200, {}, newer)), OTHER).via is None
    assert fleet.warnings == ["connection refused"] and fleet.asked == [url_tag(URL)]
    assert pod.warnings == []  # the repository's one warning is the breaker's, not each fetch's


def test_a_blob_that_is_not_the_digest_its_record_names_is_one_warning_and_the_origin_is_used(
    tmp_path: Path, archive: bytes, newer: bytes
) -> None:
    repository = Repository()
    hit = repository.archive(archive, URL)
    repository.blobs[hit.digest] = newer  # a pusher's bytes under the record's digest
    pod = Pod(tmp_path, MemoryFleet(repository, max_age=3600))
    fetched = pod.fetch(Script(Answer(200, {}, archive)))
    assert (fetched.via, fetched.digest) == (None, sha256(archive))
    assert pod.warnings == [
        f"the download cache repository's copy of {URL} is not used: the repository's blob is not the digest its "
        + "record names"
    ]


def test_a_full_download_cache_is_one_warning_and_the_archive_is_downloaded_without_it(
    tmp_path: Path, archive: bytes
) -> None:
    origin = Script(Answer(200, {}, archive))
    pod = Pod(tmp_path, cache=FullCache)
    fetched = pod.fetch(origin)
    assert fetched.via is None and (fetched.buildpacks[0].path / "data.bin").read_bytes() == b"t" * 500
    assert pod.warnings == [
        f"no space left on device in the download cache ({tmp_path / 'cache'}): {URL} is downloaded without it"
    ]
    assert len(origin.seen) == 2  # the attempt into the cache, then one into staging


# Registry blobs and manifests


def consume(body: Reader) -> bytes:
    return body.read()


def test_a_blob_this_pod_holds_is_read_from_it_verified_and_a_damaged_one_is_pulled_again(
    tmp_path: Path,
) -> None:
    pod = Pod(tmp_path)
    assert pod.local is not None
    data = b"layer bytes"
    digest = sha256(data)
    kept = pod.local.tmp_dir() / "blob"
    kept.write_bytes(data)
    path = pod.local.add_blob(kept, digest)
    pulled: list[Path] = []

    def download(directory: Path) -> tuple[Path, bytes]:
        pulled.append(directory)
        (directory / "pulled").write_bytes(data)
        return directory / "pulled", data

    assert pod.store.blobs.blob(digest, consume, download, pod.sink, 1.0) == (path, data)
    assert pulled == []
    path.write_bytes(b"damaged")
    assert pod.store.blobs.blob(digest, consume, download, pod.sink, 1.0)[1] == data
    assert pod.warnings == [f"the download cache's copy of blob {digest} was damaged and was removed"]
    assert pulled == [pod.local.tmp_dir()]  # pulled again into the cache


def test_a_full_cache_keeps_none_of_the_runs_blobs_and_says_so_once(tmp_path: Path) -> None:
    pod = Pod(tmp_path, cache=FullCache)
    staging = pod.sink.staging
    pulled: list[Path] = []

    def download(directory: Path) -> tuple[Path, bytes]:
        pulled.append(directory)
        return directory / "x", b""

    for digest in (sha256(b"one"), sha256(b"two")):
        pod.store.blobs.blob(digest, consume, download, pod.sink, 1.0, image="registry.example/bp:1")
    assert pulled == [tmp_path / "cache" / "tmp", staging, staging]  # the first tried the cache, once
    assert pod.warned == [
        f"no space left on device in the download cache ({tmp_path / 'cache'}): registry.example/bp:1 is pulled "
        + "without it (and so are the run's other images)"
    ]


def test_a_manifest_from_a_repository_that_asked_for_credentials_is_not_served_from_this_pod(
    tmp_path: Path,
) -> None:
    pod = Pod(tmp_path)
    data = b'{"schemaVersion": 2}'
    blobs = pod.store.blobs
    blobs.keep_manifest(data, sha256(data), "registry.example/private", private=True)
    assert blobs.manifest(sha256(data), "registry.example/private", "its manifest", pod.sink) is None
    blobs.keep_manifest(data, sha256(data), "registry.example/public", private=False)
    assert blobs.manifest(sha256(data), "registry.example/public", "its manifest", pod.sink) == data


# Images


class Pull:
    """An image's pull: from its origin (``copy`` ``None``) or from a copy; records each, fails the copies told to."""

    def __init__(self, failing_copy: bool = False) -> None:
        self.asked: list[tuple[str | None, Mapping[str, str]]] = []
        self.failing_copy = failing_copy

    def __call__(self, copy: str | None, environ: Mapping[str, str]) -> str:
        self.asked.append((copy, environ))
        if copy is not None and self.failing_copy:
            raise FetchError("pull it", "blob sha256:1234: digest mismatch")
        return copy or "origin"


IMAGE = "registry.example/buildpacks/bp"
MANIFEST = "sha256:" + "ab" * 32


def test_an_image_by_digest_the_fleet_holds_is_pulled_from_its_copy_with_its_credentials(
    tmp_path: Path,
) -> None:
    repository = Repository()
    repository.images.add(MANIFEST)
    fleet = MemoryFleet(repository)
    pod, pull = Pod(tmp_path, fleet), Pull()
    found = pod.store.images.pull(f"{IMAGE}@{MANIFEST}", MANIFEST, pull, pod.sink)
    assert found == (f"cache.example/fleet@{MANIFEST}", "cache repository")
    assert pull.asked == [(f"cache.example/fleet@{MANIFEST}", fleet.environ)]


def test_a_copy_that_fails_is_one_warning_and_the_origin_is_pulled(tmp_path: Path) -> None:
    repository = Repository()
    repository.images.add(MANIFEST)
    pod = Pod(tmp_path, MemoryFleet(repository))
    pull = Pull(failing_copy=True)
    assert pod.store.images.pull(f"{IMAGE}@{MANIFEST}", MANIFEST, pull, pod.sink) == ("origin", None)
    assert [copy for copy, _ in pull.asked] == [f"cache.example/fleet@{MANIFEST}", None]
    assert pod.warnings == [
        f"the download cache repository's copy of {IMAGE}@{MANIFEST} is not used: blob sha256:1234: digest mismatch"
    ]


def test_a_tag_is_resolved_by_its_origin_online_and_by_its_record_offline(tmp_path: Path) -> None:
    repository = Repository()
    repository.refs[f"{IMAGE}:1"] = (MANIFEST, None)
    repository.images.add(MANIFEST)
    online = Pod(tmp_path / "online", MemoryFleet(repository, max_age=3600))
    assert online.store.images.pull(f"{IMAGE}:1", None, Pull(), online.sink) == ("origin", None)
    offline = Pod(tmp_path / "offline", MemoryFleet(repository, "offline"))
    pull = Pull()
    assert offline.store.images.pull(f"{IMAGE}:1", None, pull, offline.sink)[1] == "cache repository"
    with pytest.raises(FetchError) as missing:
        offline.store.images.pull(f"{IMAGE}:2", None, pull, offline.sink)
    assert missing.value.cause == f"not in the download cache repository (seed {ref_tag(f'{IMAGE}:2')})"
    assert None not in [copy for copy, _ in pull.asked]  # offline: never the origin


def test_a_pin_is_never_resolved_through_a_record_of_a_name(tmp_path: Path) -> None:
    repository = Repository()
    repository.refs[f"{IMAGE}@{MANIFEST}"] = ("sha256:" + "cd" * 32, None)  # a pusher's word for the digest
    repository.images.add("sha256:" + "cd" * 32)
    pod = Pod(tmp_path, MemoryFleet(repository, "offline"))
    with pytest.raises(FetchError, match=f"seed sha256-{'ab' * 32}"):
        pod.store.images.pull(f"{IMAGE}@{MANIFEST}", MANIFEST, Pull(), pod.sink)


def test_a_pinned_index_the_fleet_records_is_read_as_the_manifest_of_its_copy(tmp_path: Path) -> None:
    index = b'{"mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []}'
    repository = Repository()
    repository.blobs[sha256(index)] = index
    repository.indexes.add(sha256(index))
    pod = Pod(tmp_path, MemoryFleet(repository))
    served: list[bytes | None] = []

    def pull(copy: str | None, environ: Mapping[str, str]) -> str:
        served.append(pod.store.blobs.manifest(sha256(index), "cache.example/fleet", "the index", pod.sink))
        return str(copy)

    assert (
        pod.store.images.pull(f"{IMAGE}@{sha256(index)}", sha256(index), pull, pod.sink)[1]
        == "cache repository"
    )
    assert served == [index]


def test_an_image_from_its_origin_is_written_back_with_the_tag_that_named_it_and_a_pin_without(
    tmp_path: Path,
) -> None:
    repository = Repository()
    writes = MemoryWrites(repository)
    pod = Pod(tmp_path, MemoryFleet(repository), writes)
    assert pod.local is not None
    layers = {"config": b"{}", "layer": b"layer", "manifest": b'{"layers": []}'}
    for name, data in layers.items():
        (pod.local.tmp_dir() / name).write_bytes(data)
        pod.local.add_blob(pod.local.tmp_dir() / name, sha256(data))
    manifest = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                "layers": [{"digest": sha256(layers["layer"])}]}  # fmt: skip
    digest, config = sha256(layers["manifest"]), sha256(layers["config"])
    pod.store.images.keep(f"{IMAGE}:1", None, digest, manifest, config)
    pod.store.images.keep(f"{IMAGE}@{digest}", digest, digest, manifest, config)
    assert writes.pending == [
        ("ref", (f"{IMAGE}:1", digest, None)),
        ("image", (digest, sorted([config, sha256(layers["layer"])]))),
        ("image", (digest, sorted([config, sha256(layers["layer"])]))),  # the pin: its image, no ref record
    ]


# Signature records


def objects() -> list[SignatureObject]:
    return [SignatureObject("cosign", "sha256-ab.sig layer 1", b'{"critical": {}}', "c2ln")]


def test_a_signature_record_within_max_age_spares_the_registry_this_pods_first_then_the_fleets(
    tmp_path: Path,
) -> None:
    repository = Repository()
    writes = MemoryWrites(repository)
    first = Pod(tmp_path / "first", MemoryFleet(repository), writes)
    first.store.signatures.keep(IMAGE, MANIFEST, objects(), private=False, spool=first.sink.staging)
    assert first.store.signatures.recorded(IMAGE, MANIFEST, 60) == objects()
    assert first.fleet is not None and first.fleet.asked == []  # this pod's record was enough
    assert first.store.signatures.recorded(IMAGE, MANIFEST, 0) is None  # no max-age: the registry is asked
    writes.write_back()
    second = Pod(tmp_path / "second", MemoryFleet(repository))
    assert second.store.signatures.recorded(IMAGE, MANIFEST, 60) == objects()


def test_the_signatures_of_a_repository_that_asked_for_credentials_are_neither_shared_nor_used_again(
    tmp_path: Path,
) -> None:
    repository = Repository()
    writes = MemoryWrites(repository)
    pod = Pod(tmp_path, MemoryFleet(repository), writes)
    pod.store.signatures.keep(IMAGE, MANIFEST, objects(), private=True, spool=pod.sink.staging)
    assert writes.pending == []
    assert pod.store.signatures.recorded(IMAGE, MANIFEST, 60) is None


def test_a_record_whose_payload_is_no_base64_is_not_used(tmp_path: Path) -> None:
    repository = Repository()
    good = base64.b64encode(b"payload").decode()
    record = b'{"objects": [{"format": "cosign", "found": "x", "payload": "%s!"}], "verified": %d}'
    repository.signatures[(IMAGE, MANIFEST)] = record % (good.encode(), int(time.time()))
    pod = Pod(tmp_path, MemoryFleet(repository))
    assert pod.store.signatures.recorded(IMAGE, MANIFEST, 60) is None


# Small files (the buildpack registry's index)

INDEX_FILE = "https://index.example/3/bu/buildpacks_bp"


def test_an_index_file_fresh_in_the_fleet_is_not_fetched_and_a_stale_one_is_fetched_and_shared(
    tmp_path: Path,
) -> None:
    repository = Repository()
    repository.archive(b"old entries\n", INDEX_FILE, checked=LONG_AGO)
    repository.archive(b"fresh entries\n", INDEX_FILE + "_fresh")
    writes = MemoryWrites(repository)
    pod = Pod(tmp_path, MemoryFleet(repository, max_age=3600), writes)
    fetched: list[str] = []

    def fetch(url: str) -> bytes:
        fetched.append(url)
        return b"new entries\n"

    files = pod.store.files
    fresh = files.read(
        INDEX_FILE + "_fresh", 1 << 20, "look it up", lambda: fetch(INDEX_FILE + "_fresh"), pod.sink
    )
    stale = files.read(INDEX_FILE, 1 << 20, "look it up", lambda: fetch(INDEX_FILE), pod.sink)
    assert (fresh, stale, fetched) == (b"fresh entries\n", b"new entries\n", [INDEX_FILE])
    assert writes.pending == [("archive", (INDEX_FILE, b"new entries\n", {}))]


def test_an_index_file_whose_origin_cannot_be_reached_is_stood_in_for_only_with_a_max_age(
    tmp_path: Path,
) -> None:
    repository = Repository()
    repository.archive(b"old entries\n", INDEX_FILE, checked=LONG_AGO)

    def unreachable() -> bytes:
        raise Unreachable("look it up", "connection refused by index.example port 443 (after 4 attempts)")

    strict = Pod(tmp_path / "strict", MemoryFleet(repository))
    with pytest.raises(Unreachable):
        strict.store.files.read(INDEX_FILE, 1 << 20, "look it up", unreachable, strict.sink)
    lenient = Pod(tmp_path / "lenient", MemoryFleet(repository, max_age=60))
    assert (
        lenient.store.files.read(INDEX_FILE, 1 << 20, "look it up", unreachable, lenient.sink)
        == b"old entries\n"
    )
    assert lenient.warnings == [
        f"{INDEX_FILE} cannot be reached; the download cache repository's copy is used"
    ]


def test_offline_an_index_file_the_fleet_lacks_names_the_tag_to_seed(tmp_path: Path) -> None:
    pod = Pod(tmp_path, MemoryFleet(Repository(), "offline"))
    with pytest.raises(FetchError) as missing:
        pod.store.files.read(INDEX_FILE, 1 << 20, "look it up", lambda: b"never asked", pod.sink)
    assert missing.value.cause == f"not in the download cache repository (seed {url_tag(INDEX_FILE)})"
