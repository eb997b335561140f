"""Buildpack archives over ``http(s)``: streamed, verified, retried, cached (contract §4, §7.13).

The body is extracted while it arrives (one pass, memory flat), hashed on the way, and checked against the
``Content-Length`` and any ``#sha256=`` pin before the result is used. With a download cache, the extracted tree
is kept under the archive's digest and later runs revalidate it with ``If-None-Match`` / ``If-Modified-Since``
and hard-link it into staging; a pinned digest already in the cache needs no request at all. That revalidation
is first tried with the standard library alone (:func:`probe_unchanged`), so a warm run never imports requests.
"""

from __future__ import annotations

import base64
import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from preparer._fs import make_dirs
from preparer.errors import FetchError, NotFoundError
from preparer.fetch import FetchContext, Fetched
from preparer.fetch.archive import Extracted, extract_tar
from preparer.fetch.cache import DownloadCache
from preparer.fetch.local import HashingReader, staged_buildpack
from preparer.fetch.locator import HttpLocator, redact

if TYPE_CHECKING:
    import requests

_CHUNK = 1 << 20
_PROGRESS_EVERY = 0.25  # seconds between progress reports of one download


class NetworkError(Exception):
    """A transient failure while talking to a server: worth another attempt."""


#: Where Linux distributions keep the system CA store.
_SYSTEM_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
)


def ca_bundle() -> str:
    """The CA certificates HTTPS trusts (contract §7.13): ``REQUESTS_CA_BUNDLE`` or ``CURL_CA_BUNDLE`` (requests'
    variables), else ``SSL_CERT_FILE`` (OpenSSL's), else the system store, else certifi's bundle (the lifecycle image,
    which has no system store)."""
    for name in ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "SSL_CERT_FILE"):
        if os.environ.get(name):
            return os.environ[name]
    for path in _SYSTEM_BUNDLES:
        if Path(path).is_file():
            return path
    import certifi

    return str(certifi.where())


def tls_failure(err: BaseException) -> str:
    """Why a TLS connection failed, without URLs: not retried, as another attempt cannot succeed."""
    if "CERTIFICATE_VERIFY_FAILED" in str(err):
        return (
            "the server's TLS certificate is not trusted (for a private CA, set SSL_CERT_FILE or "
            "REQUESTS_CA_BUNDLE to its certificate)"
        )
    return "the TLS handshake failed"


def new_session() -> requests.Session:
    """A session for the whole run: pooled connections, and the CA certificates of :func:`ca_bundle`."""
    import requests
    from requests.adapters import HTTPAdapter

    from preparer import __version__

    session = requests.Session()
    session.verify = ca_bundle()
    session.headers["User-Agent"] = f"cnb-preparer/{__version__}"
    adapter = HTTPAdapter(pool_connections=8, pool_maxsize=8, max_retries=0)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def describe(err: BaseException) -> str:
    """A cause to show for a network failure, without URLs, queries or credentials."""
    import requests
    import urllib3

    cause = err.__cause__ if isinstance(err, NetworkError) and err.__cause__ else err
    if isinstance(err, NetworkError) and not err.__cause__:
        return str(err)
    if isinstance(cause, requests.Timeout | urllib3.exceptions.TimeoutError | TimeoutError):
        return "timed out"
    if isinstance(cause, requests.ConnectionError | urllib3.exceptions.ProtocolError | ConnectionError):
        return "connection failed or closed early"
    return type(cause).__name__


class NetworkReader:
    """A response body as a file: counts bytes, reports progress, and turns any read error into NetworkError."""

    def __init__(
        self, raw: Any, source: str, total: int | None, progress: Callable[[str, int, int | None], None]
    ):
        self.raw, self.source, self.total, self.progress = raw, source, total, progress
        self.size = 0
        self.reported = 0.0

    def read(self, size: int = -1) -> bytes:
        try:
            data: bytes = self.raw.read(size if size >= 0 else None)
        except Exception as err:
            raise NetworkError(describe(err)) from err
        self.size += len(data)
        now = time.monotonic()
        if now - self.reported >= _PROGRESS_EVERY or not data:
            self.reported = now
            self.progress(self.source, self.size, self.total)
        return data


def _attempts(ctx: FetchContext, source: str) -> Iterator[int]:
    """Attempt numbers, sleeping with exponential backoff between them."""
    for attempt in range(ctx.retries + 1):
        if attempt:
            time.sleep(ctx.backoff * 2 ** (attempt - 1))
        yield attempt


def get(
    ctx: FetchContext, url: str, headers: dict[str, str] | None = None, label: str | None = None
) -> requests.Response:
    """GET ``url`` streaming; connection errors and timeouts become NetworkError, 5xx too.

    :raises FetchError: a 4xx answer (not retried), naming ``label`` or the redacted URL.
    """
    import requests

    source = label or redact(url)
    try:
        response = ctx.sessions.get().get(url, headers=headers or {}, stream=True, timeout=ctx.timeouts)
    except requests.exceptions.SSLError as err:
        raise FetchError(f"download {source}", tls_failure(err)) from None
    except requests.RequestException as err:
        raise NetworkError(describe(err)) from err
    check_status(response, f"download {source}")
    response.raw.decode_content = False
    return response


def check_status(response: requests.Response, action: str, what: str = "") -> None:
    """Raise for an error answer: a 5xx is transient (NetworkError, retried), a 4xx is final (FetchError)."""
    if response.status_code < 400:
        return
    response.close()
    status = f"HTTP {response.status_code} {response.reason}"
    if response.status_code >= 500:
        raise NetworkError(status)
    error = NotFoundError if response.status_code == 404 else FetchError
    raise error(action, f"{what}: {status}" if what else status)


def stream_body(
    ctx: FetchContext, response: requests.Response, source: str, consume: Callable[[IO[bytes]], Any]
) -> tuple[Any, str, int]:
    """Feed the body to ``consume`` while hashing it; check its length. Returns (result, digest, size)."""
    length = response.headers.get("Content-Length")
    total = int(length) if length and length.isdigit() else None
    body = NetworkReader(response.raw, source, total, ctx.progress)
    hashing = HashingReader(body)  # type: ignore[arg-type]
    with contextlib.closing(response):
        result = consume(hashing)  # type: ignore[arg-type]
        hashing.drain()
    if total is not None and hashing.size != total:
        raise NetworkError(f"the body ended after {hashing.size} of {total} bytes")
    ctx.progress(source, hashing.size, hashing.size)
    return result, hashing.digest, hashing.size


def _check_pin(locator: HttpLocator, digest: str, source: str) -> None:
    if locator.sha256 is not None and digest != "sha256:" + locator.sha256:
        raise FetchError(
            f"verify {source}",
            f"sha256 mismatch: the uri pins sha256:{locator.sha256}, the download is {digest}",
        )


def fetch_http(locator: HttpLocator, ctx: FetchContext) -> Fetched:
    """Download, verify and stage the buildpack archive at ``locator.url``.

    :raises FetchError: HTTP errors, exhausted retries, digest or length mismatch, unsafe archives (exit 1).
    """
    source = redact(locator.url)
    if locator.url.split("?", 1)[0].endswith(".cnb"):
        return _fetch_cnb(locator, ctx, source)
    if ctx.download_cache is None:
        staged = _download_tree(locator, ctx, source, None)
        assert staged is not None
        return staged
    cache = DownloadCache(ctx.download_cache)
    # Trees are never modified and metadata is replaced atomically, so a revalidation needs no lock;
    # only a download takes the URL's lock, and then looks at the cache again.
    revalidated = _download_tree(locator, ctx, source, cache, revalidate_only=True)
    if revalidated is not None:
        return revalidated
    with cache.lock("http:" + locator.url):
        fetched = _download_tree(locator, ctx, source, cache)
    assert fetched is not None
    return fetched


def link_tree(src: Path, dest: Path) -> None:
    """Recreate the tree ``src`` at ``dest`` with hard links, copying where the filesystem refuses links."""
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        target_dir = dest / rel
        make_dirs(target_dir)
        for name in dirnames + filenames:
            from_path, to_path = Path(dirpath) / name, target_dir / name
            if from_path.is_symlink():
                os.symlink(os.readlink(from_path), to_path)
            elif name in filenames:
                try:
                    os.link(from_path, to_path)
                except OSError:
                    shutil.copy2(from_path, to_path)
        dirnames[:] = [d for d in dirnames if not (Path(dirpath) / d).is_symlink()]


def _staged(tree: Path, ctx: FetchContext, source: str, digest: str) -> Fetched:
    root = Path(tempfile.mkdtemp(prefix="http-", dir=ctx.staging))
    root.chmod(0o755)
    link_tree(tree, root)
    staged = staged_buildpack(root, source)
    return Fetched(staged.descriptor, (staged,), source, digest)


def _download_tree(
    locator: HttpLocator,
    ctx: FetchContext,
    source: str,
    cache: DownloadCache | None,
    revalidate_only: bool = False,
) -> Fetched | None:
    """Stage the archive: from the cache while the server says it is unchanged, else downloaded and extracted.

    With ``revalidate_only``, return ``None`` rather than download (the caller takes the URL's lock first).
    """
    if cache is not None and locator.sha256 is not None:
        tree = cache.tree_path("sha256:" + locator.sha256)
        if tree is not None:
            return _staged(tree, ctx, source, "sha256:" + locator.sha256)
    meta = cache.http_meta(locator.url) if cache is not None else None
    cached_tree = cache.tree_path(meta["digest"]) if cache is not None and meta is not None else None
    if revalidate_only and cached_tree is None:
        return None
    headers: dict[str, str] = {}
    if meta is not None and cached_tree is not None:
        if meta.get("etag"):
            headers["If-None-Match"] = meta["etag"]
        if meta.get("last-modified"):
            headers["If-Modified-Since"] = meta["last-modified"]
    if revalidate_only and meta is not None and cached_tree is not None and headers:
        unchanged = probe_unchanged(locator.url, headers, ctx)
        if unchanged:
            _check_pin(locator, meta["digest"], source)
            ctx.progress(source, 0, 0)
            return _staged(cached_tree, ctx, source, meta["digest"])
        if unchanged is False:
            return None  # changed, or an error answer: the caller downloads (with retries) under the lock
    last: NetworkError | None = None
    for _ in _attempts(ctx, source):
        dest: Path | None = None
        kept = False  # whether ``dest`` is the result (staged without a cache)
        try:
            response = get(ctx, locator.url, headers)
            if response.status_code == 304 and meta is not None and cached_tree is not None:
                response.close()
                _check_pin(locator, meta["digest"], source)
                ctx.progress(source, 0, 0)
                return _staged(cached_tree, ctx, source, meta["digest"])
            if revalidate_only:
                response.close()
                return None
            dest = (
                cache.new_tree()
                if cache is not None
                else Path(tempfile.mkdtemp(prefix="http-", dir=ctx.staging))
            )

            def extract(body: IO[bytes], into: Path = dest) -> Extracted | FetchError:
                try:
                    return extract_tar(body, into, archive=source)
                except FetchError as err:
                    if locator.sha256 is None:
                        raise
                    # Pinned: read the rest, so a tampered or corrupt body is reported as the mismatch it is.
                    return err

            outcome, digest, _ = stream_body(ctx, response, source, extract)
            _check_pin(locator, digest, source)
            if isinstance(outcome, FetchError):
                raise outcome
            extracted: Extracted = outcome
            if "oci-layout" in extracted.top_level:
                return _fetch_cnb(locator, ctx, source)
            dest.chmod(0o755)
            staged = staged_buildpack(dest, source)  # checked before it enters the cache
            if cache is None:
                kept = True
                return Fetched(staged.descriptor, (staged,), source, digest)
            tree = cache.add_tree(dest, digest)
            cache.put_http_meta(
                locator.url,
                {"etag": response.headers.get("ETag", ""), "last-modified": response.headers.get("Last-Modified", ""),
                 "digest": digest},
            )  # fmt: skip
            return _staged(tree, ctx, source, digest)
        except NetworkError as err:
            last = err
        finally:
            # A tree that is neither the result nor in the cache (a failure, or handed over) is removed.
            if dest is not None and not kept and dest.exists():
                shutil.rmtree(dest, ignore_errors=True)
    assert last is not None
    raise FetchError(f"download {source}", f"{last} (after {ctx.retries + 1} attempts)")


_TLS_CONTEXT: Any = None
_TLS_LOCK = threading.Lock()


def _tls_context() -> Any:
    """The trust the requests session has (:func:`ca_bundle`, a file or a directory)."""
    global _TLS_CONTEXT
    with _TLS_LOCK:
        if _TLS_CONTEXT is None:
            import ssl

            bundle = ca_bundle()
            if Path(bundle).is_dir():
                _TLS_CONTEXT = ssl.create_default_context(capath=bundle)
            else:
                _TLS_CONTEXT = ssl.create_default_context(cafile=bundle)
        return _TLS_CONTEXT


def _requests_would_differ() -> bool:
    """Whether requests would not go straight to the server: a proxy, or a netrc file it reads credentials from."""
    for name, value in os.environ.items():
        if value and name.lower().endswith("_proxy") and name.lower() != "no_proxy":
            return True
    if os.environ.get("NETRC"):
        return True
    home = Path("~").expanduser()
    return (home / ".netrc").exists() or (home / "_netrc").exists()


def probe_unchanged(url: str, headers: dict[str, str], ctx: FetchContext) -> bool | None:
    """Ask the server, with ``http.client`` only, whether ``url`` is unchanged (the conditional ``headers``).

    Importing requests costs more than a warm run's whole revalidation, so this asks first. ``True`` means a
    304: the cached tree (verified when it was downloaded) is current. ``False`` means any other answer.
    ``None`` means no answer (errors, redirects), or that requests would not go straight to the server (a proxy,
    a netrc file): the regular path then decides. The response body is never read, so nothing from this request
    is ever installed; credentials in the URL are sent as requests sends them (Basic) and never shown.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or _requests_would_differ():
        return None
    import http.client

    from preparer import __version__

    request_headers = {"User-Agent": f"cnb-preparer/{__version__}", "Accept": "*/*", **headers}
    if parts.username is not None:
        userinfo = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        request_headers["Authorization"] = "Basic " + base64.b64encode(userinfo.encode("latin-1")).decode()
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    connect, read = ctx.timeouts
    connection: http.client.HTTPConnection
    try:
        if parts.scheme == "https":
            connection = http.client.HTTPSConnection(
                parts.hostname, parts.port, timeout=connect, context=_tls_context()
            )
        else:
            connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=connect)
        try:
            connection.connect()
            if connection.sock is not None:
                connection.sock.settimeout(read)
            connection.request("GET", path, headers=request_headers)
            status = connection.getresponse().status
        finally:
            connection.close()
    except (OSError, http.client.HTTPException, ValueError):  # the regular path retries and reports it
        return None
    if status == 304:
        return True
    return None if 300 <= status < 400 else False


def download_blob(
    ctx: FetchContext,
    url: str,
    expected: str | None,
    dest_dir: Path,
    headers: dict[str, str] | None = None,
    label: str | None = None,
) -> tuple[Path, str]:
    """Download ``url`` into a new file in ``dest_dir``, retrying transient failures; return (path, digest).

    :param expected: ``sha256:<hex>`` the body must have (OCI blobs, pinned archives).
    :param label: how progress names the download (default: the redacted URL).
    :raises FetchError: HTTP errors, exhausted retries, digest or length mismatch.
    """
    source = label or redact(url)
    last: NetworkError | None = None
    for _ in _attempts(ctx, source):
        fd, name = tempfile.mkstemp(prefix="blob-", dir=dest_dir)
        path = Path(name)
        try:
            response = get(ctx, url, headers, label=source)
            with os.fdopen(fd, "wb") as out:
                _, digest, _ = stream_body(
                    ctx, response, source, lambda body: shutil.copyfileobj(body, out, _CHUNK)
                )
            if expected is not None and digest != expected:
                raise FetchError(f"verify {source}", f"digest mismatch: expected {expected}, got {digest}")
            return path, digest
        except NetworkError as err:
            last = err
            path.unlink(missing_ok=True)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
    assert last is not None
    raise FetchError(f"download {source}", f"{last} (after {ctx.retries + 1} attempts)")


def _fetch_cnb(locator: HttpLocator, ctx: FetchContext, source: str) -> Fetched:
    """A ``.cnb`` (OCI layout tar) over http: downloaded whole, then read as a buildpackage."""
    from preparer.fetch.oci import fetch_cnb

    expected = None if locator.sha256 is None else "sha256:" + locator.sha256
    cache = DownloadCache(ctx.download_cache) if ctx.download_cache is not None else None
    if cache is not None and expected is not None and (blob := cache.blob_path(expected)) is not None:
        return fetch_cnb(blob, source=source, digest=expected, ctx=ctx)
    path, digest = download_blob(ctx, locator.url, expected, cache.tmp_dir() if cache else ctx.staging)
    _check_pin(locator, digest, source)
    if cache is not None:
        path = cache.add_blob(path, digest)
    return fetch_cnb(path, source=source, digest=digest, ctx=ctx)
