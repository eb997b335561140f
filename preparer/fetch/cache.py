"""The download cache: content-addressed blobs and extracted trees, shared by concurrent preparers of one user.

Layout under the cache root (``-download-cache``)::

    blobs/sha256/<hex>                 verified content, never modified once in place
    trees/sha256/<hex>/root/           a buildpack archive with that digest, extracted
    trees/sha256/<hex>/manifest.json   what that tree holds: every directory, file and link, with inodes and times
    http/<sha256(url)>.json            the ETag, Last-Modified and body digest a server gave for a URL
    private/<sha256(registry/repo)>    marks a repository that asked for credentials
    signatures/<sha256(repo@digest)>.json  the signatures that satisfied a policy for an image, as the registry
                                       held them, and when it was asked (verified again on every read, never
                                       trusted as verified, used for the policy's signature-max-age only)
    tmp/run-<random>/                  one run's partial downloads and extractions, renamed into place after the
                                       checks; the run holds a lock on it, and a later run removes it if it died
    locks/<sha256(key)>.lock           inter-process locks (filelock), one per blob or URL being fetched

The cache is a trust boundary (docs/security.md). It is used only when its root and every directory in it are
real directories owned by the effective user and writable by nobody else, and when every directory above the
root is writable only by its owner (root or the user) or is sticky, as ``/tmp`` is: then no one else can plant a
link or swap a directory in it. Otherwise the run goes on without it, with a warning (:class:`CacheUnusable`).
What is read back is verified: a blob against its digest, a tree against its manifest; a mismatch is removed and
fetched again, never installed. Entries appear only by renaming complete, verified temporary ones, so a failed or
truncated download never poisons the cache, and readers take no lock. A lock is waited for a bounded time
(:meth:`DownloadCache.lock`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from preparer import interrupt, telemetry
from preparer._fs import (
    PER_FILE_WORK,
    claimed_dir,
    dir_record,
    file_record,
    new_dir,
    shared_with_others,
    sweep,
    temp_file,
)
from preparer._record import record
from preparer.errors import FetchError

#: The run directories in ``tmp/`` (:meth:`DownloadCache.claim`).
_RUN_PREFIX = "run-"
#: The directories of the cache, made 0700 on first use.
_SUBDIRS = ("blobs", "blobs/sha256", "trees", "trees/sha256", "http", "private", "signatures", "tmp", "locks")
#: A signature record larger than this is not read.
MAX_SIGNATURE_RECORD = 1 << 20


class CacheUnusable(Exception):
    """The cache directory cannot be trusted or used; the reason is the warning a user sees."""


class CacheMismatch(Exception):
    """What was read back from the cache is not what was put there; the entry is removed and fetched again."""


def split_digest(digest: str) -> tuple[str, str]:
    """``("sha256", hex)`` from ``sha256:<hex>``.

    :raises FetchError: for any other algorithm or a malformed digest.
    """
    if not _sha256(digest):
        raise FetchError("verify digest", f"unsupported or malformed digest '{digest}'")
    algorithm, _, hexdigest = digest.partition(":")
    return algorithm, hexdigest


def _sha256(digest: str) -> bool:
    """Whether ``digest`` reads ``sha256:<64 lowercase hex>``."""
    algorithm, _, hexdigest = digest.partition(":")
    return algorithm == "sha256" and len(hexdigest) == 64 and all(c in "0123456789abcdef" for c in hexdigest)


@record
class CachedTree:
    """An extracted tree in the cache and its manifest, recorded when it entered the cache: for every directory
    ``(inode, mtime_ns, uid, mode)``, for every file ``(inode, size, mtime_ns, mode, uid)``, for every symbolic link
    its target; keys are paths relative to the tree (``""`` is the tree itself)."""

    path: Path
    digest: str
    dirs: dict[str, list[int]]
    files: dict[str, list[int]]
    links: dict[str, str]


def changed_dir(tree: CachedTree) -> str | None:
    """The first directory of ``tree`` that is not as its manifest recorded it (inode, modification time, owner,
    mode: an entry added, removed or replaced in it changes its time), ``""`` for the tree itself; ``None`` when
    every one is. A volume restored from a backup or a CI cache has every inode changed: nothing of it is trusted."""
    base = str(tree.path)
    for rel, recorded in tree.dirs.items():
        try:
            info = os.lstat(f"{base}/{rel}" if rel else base)
        except OSError:
            return rel
        if recorded != dir_record(info):
            return rel
    return None


@record
class SignatureRecord:
    """A record of the signature objects that satisfied a policy for an image: the objects as the registry held
    them, and when the registry was asked for them (Unix seconds; ``None`` in a record an older preparer wrote)."""

    objects: list[dict[str, Any]]
    verified: int | None = None

    def fresh(self, max_age: float, now: float) -> bool:
        """Whether the record is at most ``max_age`` seconds old at ``now`` (0: never; one without a time, or from
        the future, is not)."""
        return self.verified is not None and max_age > 0 and 0 <= now - self.verified <= max_age


def dumps_signature_record(objects: list[dict[str, Any]], verified: int) -> bytes:
    """A signature record's bytes (read back by :func:`signature_record`): ``verified`` is when the registry was
    asked (Unix seconds)."""
    import json  # deferred, as in every method here: a run without a download cache never reads a record

    return json.dumps({"objects": objects, "verified": verified}, sort_keys=True).encode()


def signature_record(data: bytes) -> SignatureRecord | None:
    """The record in ``data`` (``{"objects": [{...}], "verified": <seconds>}``, every value of an object a string
    but ``annotations``, a table of strings), or ``None``. A record without ``verified``, or with one that is no
    whole number, has no time."""
    from preparer._jsondoc import loads  # deferred, as json above; bounded: a fleet pusher writes it

    try:
        record = loads(data)
    except (ValueError, RecursionError):
        return None
    objects = record.get("objects") if isinstance(record, dict) else None
    if not isinstance(objects, list) or not all(
        isinstance(o, dict) and all(map(_recorded, o.items())) for o in objects
    ):
        return None
    verified = record.get("verified")
    if not isinstance(verified, int) or isinstance(verified, bool):
        verified = None
    return SignatureRecord(objects, verified)


def _recorded(item: tuple[str, Any]) -> bool:
    """Whether a signature record holds ``item`` as it writes it."""
    key, value = item
    if key == "annotations":
        return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())
    return isinstance(value, str)


class DownloadCache:
    """A content-addressed store of downloaded bytes and extracted trees at ``root``, checked by :meth:`open`."""

    def __init__(self, root: Path) -> None:
        """Use :meth:`open`, which makes and checks the directories."""
        self.root = root
        self._run_tmp: Path | None = None

    @classmethod
    def open(cls, root: Path) -> DownloadCache:
        """The cache at ``root`` (made, 0700, when missing), after the checks of the module's docstring.

        :raises CacheUnusable: naming what is wrong.
        """
        tilde = next(
            (p for p in (root, *root.parents) if p.name.startswith("~") and not os.path.lexists(p)), None
        )
        if tilde is not None:
            # -download-cache '~/cache', or a variable set where no shell expands '~': a directory named '~' would
            # be made in the working directory, run after run.
            raise CacheUnusable(
                f"{root} would be made with a directory named {tilde.name}: a '~' no shell expanded; write the"
                " home directory's path"
            )
        _check_ancestors(root.parent)
        root = Path(os.path.realpath(root))  # a link to the cache is fine where its directory is
        try:
            root.mkdir(mode=0o700, parents=False)
        except FileNotFoundError:
            _make_parents(root.parent)
            root.mkdir(mode=0o700)
        except FileExistsError:
            pass
        except OSError as err:
            raise CacheUnusable(f"{root} cannot be made ({err.strerror})") from err
        _check_private(root)
        for name in _SUBDIRS:  # all checked now, so that nothing planted in them is found mid-run
            path = root / name
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:
                pass
            except OSError as err:
                raise CacheUnusable(f"{path} cannot be made ({err.strerror})") from err
            _check_private(path)
        return cls(root)

    @classmethod
    def existing(cls, root: Path) -> DownloadCache | None:
        """The cache at ``root`` for reading only, when it exists and passes the checks; nothing is made.

        Used before a run may write anything (a policy's hints); ``None`` stands for any problem.
        """
        try:
            _check_ancestors(root.parent)
            real = Path(os.path.realpath(root))
            for path in (real, real / "http"):
                _check_private(path)
        except (CacheUnusable, OSError):
            return None
        return cls(real)

    def _dir(self, name: str) -> Path:
        """The subdirectory ``name`` (checked by :meth:`open`)."""
        return self.root / name

    # Blobs

    def blob_path(self, digest: str) -> Path | None:
        """The cached blob with ``digest`` (``sha256:<hex>``), or ``None`` when absent. Not yet verified: the
        caller hashes what it reads (:func:`verify_file`, or while streaming) and calls :meth:`discard_blob` on a
        mismatch."""
        algorithm, hexdigest = split_digest(digest)
        path = self._dir(f"blobs/{algorithm}") / hexdigest
        return path if _regular_file_of_ours(path) else None

    def discard_blob(self, digest: str) -> None:
        """Remove a blob that failed its verification."""
        algorithm, hexdigest = split_digest(digest)
        (self._dir(f"blobs/{algorithm}") / hexdigest).unlink(missing_ok=True)

    def tmp_dir(self) -> Path:
        """A directory on the cache's filesystem for partial downloads (so :meth:`add_blob` can rename): the
        run's own in ``tmp/`` while it holds :meth:`claim`."""
        return self._run_tmp or self._dir("tmp")

    @contextmanager
    def claim(self) -> Iterator[list[str]]:
        """For the block, give this run a directory of its own in ``tmp/`` for its partial downloads, removed
        when the block ends; first remove those of runs that died (:func:`preparer._fs.sweep`). The block gets
        the names removed."""
        tmp = self._dir("tmp")
        removed = sweep(tmp, _RUN_PREFIX)
        with claimed_dir(tmp, _RUN_PREFIX) as own:
            self._run_tmp = own
            try:
                yield removed
            finally:
                self._run_tmp = None

    def add_blob(self, src: Path, digest: str) -> Path:
        """Move the complete file ``src``, whose sha256 the caller verified, into the store.

        An existing blob is never replaced (a reader may have it open): it is linked into place when absent, and
        a concurrent writer's identical blob is kept.
        """
        algorithm, hexdigest = split_digest(digest)
        dest = self._dir(f"blobs/{algorithm}") / hexdigest
        os.chmod(src, 0o644)
        try:
            os.link(src, dest)
        except FileExistsError:
            pass
        finally:
            src.unlink(missing_ok=True)
        return dest

    def temp_file(self) -> AbstractContextManager[Path]:
        """A fresh temporary file in ``tmp/``; removed on exit unless it was moved away."""
        return temp_file(self.tmp_dir(), "dl-")

    @contextmanager
    def lock(self, key: str, timeout: float) -> Iterator[bool]:
        """Hold the inter-process lock named ``key`` (any string; hashed into a file name) for the block, waiting
        at most ``timeout`` seconds: the block gets ``False`` when it could not be taken (a stuck peer, or
        anyone who can open the file), and should then go on without the cache."""
        from filelock import FileLock, Timeout  # deferred (third-party): only runs that download take locks

        name = hashlib.sha256(key.encode()).hexdigest()
        lock = FileLock(str(self._dir("locks") / f"{name}.lock"), mode=0o600)
        try:  # tried every 20 ms, and given up at once when the run is called off
            with telemetry.span("cnb.lock.wait"):
                lock.acquire(timeout=timeout, poll_interval=0.02, cancel_check=interrupt.called_off)
        except Timeout:
            interrupt.check()
            yield False
            return
        try:
            yield True
        finally:
            lock.release()

    def lock_name(self, key: str) -> str:
        """The lock file of ``key``, for messages."""
        return str(self.root / "locks" / f"{hashlib.sha256(key.encode()).hexdigest()}.lock")

    # Extracted buildpack trees, keyed by the digest of the archive they came from.

    def tree(self, digest: str) -> CachedTree | None:
        """The extracted tree of the archive with ``digest`` and its manifest, or ``None`` when absent. The tree
        is checked against the manifest when it is installed (:func:`preparer.fetch.tree.install_cached`)."""
        import json  # deferred, as above

        algorithm, hexdigest = split_digest(digest)
        entry = self._dir(f"trees/{algorithm}") / hexdigest
        manifest = entry / "manifest.json"
        if not _regular_file_of_ours(manifest):
            return None
        try:
            # Not through preparer._jsondoc: a tree's manifest lists every entry extraction allowed (100,000, more than
            # its element bound), and only this user's own runs write it, into a cache no one else can write (checked
            # at every open).
            raw = json.loads(manifest.read_bytes())
            return CachedTree(
                entry / "root", digest, dict(raw["dirs"]), dict(raw["files"]), dict(raw["links"])
            )
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            return None

    def has_tree(self, digest: str) -> bool:
        """Whether a tree for ``digest`` is here (its manifest: the tree itself is checked when it is used)."""
        algorithm, hexdigest = split_digest(digest)
        return _regular_file_of_ours(self._dir(f"trees/{algorithm}") / hexdigest / "manifest.json")

    def new_tree(self) -> Path:
        """An empty directory on the cache's filesystem to extract into, before :meth:`add_tree`."""
        entry = new_dir(self.tmp_dir(), "tree-")
        root = entry / "root"
        root.mkdir(mode=0o700)
        return root

    def add_tree(self, src: Path, digest: str, known: KnownTree | None = None) -> CachedTree:
        """Record the manifest of the tree ``src`` (from :meth:`new_tree`) beside it, and move both into place in
        one rename: an entry is complete or absent, whenever a run dies. The caller holds the lock of the download
        that made it (by URL: two URLs of one archive may race here). A tree already there is kept, never
        replaced, since a reader may be installing it; a damaged entry (no manifest, or directories that are not as
        recorded: :func:`changed_dir`) is replaced.

        :param known: what the extraction recorded as it wrote the tree; without it, the tree is walked.
        """
        import json  # deferred, as above

        algorithm, hexdigest = split_digest(digest)
        dest = self._dir(f"trees/{algorithm}") / hexdigest
        entry = src.parent
        existing = self.tree(digest)
        if existing is not None and changed_dir(existing) is None:
            shutil.rmtree(entry, ignore_errors=True)
            return existing
        if existing is not None:  # not what was cached (a restored volume): the new tree takes its place
            self.discard_tree(digest)
        if known is not None:
            tree = CachedTree(src, digest, record_dirs(src, known.dirs), known.files, known.links)
        else:
            with PER_FILE_WORK:
                tree = record_tree(src, digest)
        manifest = entry / "manifest.json"
        manifest.write_text(json.dumps({"dirs": tree.dirs, "files": tree.files, "links": tree.links}))
        manifest.chmod(0o600)
        for _ in range(2):
            try:
                os.rename(
                    entry, dest
                )  # never over an existing entry: another run (or thread) may be installing it
                return replace(tree, path=dest / "root")
            except OSError as err:
                if err.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
            existing = self.tree(digest)
            if existing is not None and changed_dir(existing) is None:
                # The same archive, put here meanwhile (another URL, another preparer).
                shutil.rmtree(entry, ignore_errors=True)
                return existing
            shutil.rmtree(dest, ignore_errors=True)  # a damaged entry (no manifest, or changed): replaced
        raise OSError(errno.EEXIST, f"{dest} keeps being replaced")

    def discard_tree(self, digest: str) -> None:
        """Remove a tree (and its manifest) that failed its verification."""
        algorithm, hexdigest = split_digest(digest)
        shutil.rmtree(self._dir(f"trees/{algorithm}") / hexdigest, ignore_errors=True)

    # What an HTTP server said about a URL: its validators and the digest of the body.

    def _meta_path(self, url: str) -> Path:
        # The URL is hashed: it may carry credentials, which must not be written anywhere.
        return self._dir("http") / (hashlib.sha256(url.encode()).hexdigest() + ".json")

    def http_meta(self, url: str) -> dict[str, str] | None:
        """The stored ``etag``, ``last-modified`` and ``digest`` of ``url``, or ``None`` (also for a record that is
        not one: see below)."""
        from preparer._jsondoc import loads  # deferred, as json above

        path = self._meta_path(url)
        try:
            meta = loads(path.read_bytes()) if _regular_file_of_ours(path) else None
        except (OSError, ValueError, RecursionError):
            return None
        # Read back as distrusted as any input: a record naming no well-formed digest, or with validators that are no
        # strings, is no record (the URL is downloaded again, and the record written anew).
        if (
            not isinstance(meta, dict)
            or not isinstance(meta.get("digest"), str)
            or not _sha256(meta["digest"])
        ):
            return None
        if not all(isinstance(meta.get(name, ""), str) for name in ("etag", "last-modified")):
            return None
        return meta

    def put_http_meta(self, url: str, meta: dict[str, str]) -> None:
        """Record ``meta`` for ``url`` atomically."""
        import json  # deferred, as above

        path = self._meta_path(url)
        with self.temp_file() as tmp:
            tmp.write_text(json.dumps(meta))
            os.replace(tmp, path)

    # Signatures an image was found to carry: re-verified on every read; a record only spares the requests.

    def _signatures_path(self, repository: str, digest: str) -> Path:
        name = hashlib.sha256(f"{repository}@{digest}".encode()).hexdigest()
        return self._dir("signatures") / (name + ".json")

    def signatures(self, repository: str, digest: str) -> SignatureRecord | None:
        """The signature record of the image ``digest`` of ``registry/repository``, or ``None``."""
        path = self._signatures_path(repository, digest)
        try:
            if not _regular_file_of_ours(path) or path.stat().st_size > MAX_SIGNATURE_RECORD:
                return None
            return signature_record(path.read_bytes())
        except OSError:
            return None

    def put_signatures(self, repository: str, digest: str, data: bytes) -> None:
        """Keep the signature record ``data`` (:func:`dumps_signature_record`) of the image ``digest`` of
        ``registry/repository``, atomically."""
        if len(data) > MAX_SIGNATURE_RECORD:
            return
        path = self._signatures_path(repository, digest)
        with self.temp_file() as tmp:
            tmp.write_bytes(data)
            os.replace(tmp, path)

    # Repositories that asked for credentials: what is cached from them is served only after the registry
    # confirms the run's own credentials.

    def _private_path(self, repository: str) -> Path:
        return self._dir("private") / hashlib.sha256(repository.encode()).hexdigest()

    def is_private(self, repository: str) -> bool:
        """Whether a run fetched from ``registry/repository`` with credentials the registry asked for."""
        return _regular_file_of_ours(self._private_path(repository))

    def mark_private(self, repository: str) -> None:
        """Remember that ``registry/repository`` asks for credentials."""
        path = self._private_path(repository)
        if not path.exists():
            with self.temp_file() as tmp:
                os.replace(tmp, path)


@record
class KnownTree:
    """What an extraction knows of the tree it wrote: the records of its files (as :class:`CachedTree` has them),
    the relative names of its directories (``""`` the root), and its symbolic links."""

    files: dict[str, list[int]]
    dirs: frozenset[str]
    links: dict[str, str]


def record_dirs(root: Path, names: frozenset[str]) -> dict[str, list[int]]:
    records = {}
    for name in names:
        records[name] = dir_record(os.lstat(f"{root}/{name}" if name else root))
    return records


def record_tree(root: Path, digest: str) -> CachedTree:
    """What :class:`CachedTree` records of the tree at ``root``, read from the disk."""
    dirs: dict[str, list[int]] = {}
    files: dict[str, list[int]] = {}
    links: dict[str, str] = {}

    def walk(directory: str, rel: str) -> None:
        dirs[rel] = dir_record(os.lstat(directory))
        prefix = f"{rel}/" if rel else ""
        with os.scandir(directory) as scan:
            for item in scan:
                name = prefix + item.name
                if item.is_dir(follow_symlinks=False):
                    walk(item.path, name)
                elif item.is_symlink():
                    links[name] = os.readlink(item.path)
                else:
                    files[name] = file_record(item.stat(follow_symlinks=False))

    walk(str(root), "")
    return CachedTree(root, digest, dirs, files, links)


def _regular_file_of_ours(path: Path) -> bool:
    """A regular file (not a link) owned by the effective user and writable by nobody else."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid() and not info.st_mode & 0o022


def _check_private(path: Path) -> None:
    """``path`` must be a real directory owned by the effective user and writable by nobody else."""
    try:
        info = path.lstat()
    except OSError as err:
        raise CacheUnusable(f"{path} cannot be read ({err.strerror})") from err
    if stat.S_ISLNK(info.st_mode):
        raise CacheUnusable(f"{path} is a symbolic link")
    if not stat.S_ISDIR(info.st_mode):
        raise CacheUnusable(f"{path} is not a directory: {_ANOTHER}")
    if info.st_uid != os.geteuid():
        raise CacheUnusable(
            f"{path} is owned by uid {info.st_uid}, not by the user the preparer runs as (one cache serves one"
            f" user: {_ANOTHER})"
        )
    if info.st_mode & 0o022:
        raise CacheUnusable(
            f"{path} is writable by its group or by others (mode {stat.S_IMODE(info.st_mode):o}): chmod go-w"
            f" {path}, or {_ANOTHER}"
        )


#: What to do when a cache directory is not private.
_ANOTHER = "give -download-cache (CNB_DOWNLOAD_CACHE_DIR) a directory only this user can write"


def _check_ancestors(directory: Path) -> None:
    """Every existing directory above the cache root: owned by root or the user, and writable only by its owner
    unless sticky (then no one else can rename or replace what is ours in it)."""
    problem = shared_with_others(directory)
    if problem is not None:
        where, why = problem
        raise CacheUnusable(f"{where}, above the cache, {why} ({_ANOTHER})")


def _make_parents(directory: Path) -> None:
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as err:
        raise CacheUnusable(f"{directory} cannot be made ({err.strerror})") from err
