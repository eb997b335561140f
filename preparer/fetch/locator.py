"""Classify a group entry's ``uri`` into the kind of source it names. Pure: no IO but ``exists``.

Order of the decision (pack's ``GetLocatorType`` made the same choices; docs/decisions.md, "Resolving uri"):

1. ``urn:cnb:builder:<id>[@<version>]`` and ``urn:buildpack:<id>``: a buildpack already in ``<buildpacks>``.
2. ``urn:cnb:registry:<ns>/<name>[@<version>]``: a buildpack registry entry.
3. ``http://`` and ``https://``: an archive to download; ``#sha256=<hex>`` pins its digest.
4. ``file://``: a local path (``file:`` without ``//``, a relative file URL, is refused: exit 3).
5. ``docker://<ref>``: a buildpackage image.
6. Any other ``<scheme>://``: unsupported (exit 3).
7. No scheme (pack's order, which descriptors in the wild are written for):

   a. a path when it starts with ``.`` or ``/``, ends in ``/``, ``.tgz``, ``.tar.gz``, ``.tar`` or ``.cnb``, or
      exists relative to the descriptor's directory;
   b. a buildpack id when it reads ``<ns>/<name>`` or ``<ns>/<name>@<version>`` with no registry host (a first
      component holding ``.`` or ``:``, or ``localhost``), no ``:tag`` and no ``@sha256:`` digest: the buildpack
      installed in ``<buildpacks>``, else the buildpack registry, else an image (see :class:`IdLocator`);
   c. otherwise an image reference.

``#sha256=`` (in any case) in a ``uri`` of any kind but ``http(s)://`` is refused first, whatever is on disk: a
pin is never read as part of an id, a version, a tag or a file name, where nothing would check it.

Image references are parsed here too, so that a malformed one exits 3 before any request, in a dry run as well.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote_to_bytes, urlsplit

from preparer._near import closest
from preparer._record import field, record
from preparer.errors import InvalidInputsError
from preparer.fetch.url import HttpUrl, UrlError, parse_http_url

ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar", ".cnb")
_SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
#: A fragment that is a digest pin, the only one shown: any other may be a secret.
_PIN = re.compile(r"sha256=[0-9a-fA-F]{64}\Z")
_REGISTRY_ID = re.compile(r"^([a-z0-9.-]{1,253})/([a-z0-9.-]{1,253})\Z")
#: ``<ns>/<name>[@<version>]``: buildpack id characters, one slash, and a version that is not a digest.
_BARE_ID = re.compile(r"^([A-Za-z0-9_-][A-Za-z0-9._-]*)/([A-Za-z0-9._-]+)(?:@([^@/:\s]+))?\Z")


@record
class BuilderLocator:
    """A buildpack already in ``<buildpacks>``; ``version`` ``None`` means the highest present."""

    id: str
    version: str | None = None


@record
class PathLocator:
    """A directory or archive on local disk (absolute)."""

    path: Path

    @property
    def is_cnb(self) -> bool:
        """Whether the path names a ``.cnb`` file (a buildpackage as an OCI layout tar), in any case."""
        return self.path.name.lower().endswith(".cnb")


@record
class HttpLocator:
    """An archive at an ``http(s)`` URL; ``sha256`` is the pinned hex digest.

    ``url`` is made canonical (:mod:`preparer.fetch.url`) as the locator is made: the policy, the caches, the
    report and the transport all read this one form.

    :raises UrlError: ``url`` is not an http(s) URL that reads one way only.
    """

    url: str
    sha256: str | None = None
    target: HttpUrl = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        target = parse_http_url(self.url)
        object.__setattr__(self, "target", target)
        object.__setattr__(self, "url", target.request)

    @property
    def shown(self) -> str:
        """The URL as matched by the policy and printed: no user information, no query."""
        return self.target.shown

    @property
    def is_cnb(self) -> bool:
        """Whether the URL names a ``.cnb`` file (a buildpackage as an OCI layout tar), in any case."""
        return self.target.path.lower().endswith(".cnb")


@record
class ImageLocator:
    """A buildpackage image reference, without the ``docker://`` prefix."""

    reference: str


@record
class IdLocator:
    """A bare buildpack id in a ``uri`` (``heroku/python``, ``heroku/procfile@1.0.1``); ``version`` ``None`` means
    the highest. Resolved in this order: the buildpack installed in ``<buildpacks>`` (no request at
    all), else the buildpack registry's entry, else, only when the registry has no such id and no version is
    given, the image reference of the same name."""

    id: str
    version: str | None = None

    @property
    def namespace(self) -> str:
        return self.id.partition("/")[0]

    @property
    def name(self) -> str:
        return self.id.partition("/")[2]


@record
class RegistryLocator:
    """A buildpack registry entry ``<namespace>/<name>``; ``version`` ``None`` means the highest."""

    namespace: str
    name: str
    version: str | None = None


@record
class InlineLocator:
    """An inline buildpack: a group entry's ``script`` table, generated rather than fetched (its ``version``, 0.0.0
    when the entry gives none)."""

    id: str
    api: str
    inline: str
    shell: str = "/bin/sh"
    version: str | None = None


#: Every kind of source a fetcher stages (a plan's ``Fetch``). A closed union: each decision on the kind of a source
#: is a ``match`` over it ending in ``assert_never``, so that a kind added here fails type-checking at every place
#: that must handle it (docs/layout.md, "A new source of buildpacks", names them).
Fetchable = PathLocator | HttpLocator | ImageLocator | RegistryLocator | IdLocator | InlineLocator
#: What a ``uri`` names: a source to fetch, or a buildpack already in ``<buildpacks>`` (which the plan never fetches).
Locator = BuilderLocator | Fetchable


def _split_version(text: str) -> tuple[str, str | None]:
    name, sep, version = text.partition("@")
    if sep and not version:
        return name, ""
    return name, (version if sep else None)


#: The forms a ``uri`` may take, for messages.
ACCEPTED = (
    "https:// or http:// (an archive), file:// or a path (a directory or an archive), docker:// or an image "
    "reference, urn:cnb:builder:<id>, urn:cnb:registry:<id>, or a buildpack id"
)
#: The URN prefixes a ``uri`` may start with.
_URNS = ("urn:cnb:builder:", "urn:cnb:registry:", "urn:buildpack:")
#: A URN's head (``urn:cnb:buidler:``), or a scheme written with one slash (``https:/``).
_URN_HEAD = re.compile(r"urn:(?:[A-Za-z0-9-]+:)+", re.IGNORECASE)
_ONE_SLASH = re.compile(r"(https?|file|docker):/(?!/)", re.IGNORECASE)


def _refuse_misspelled_scheme(uri: str, action: str) -> None:
    """Refuse a ``uri`` that starts with a URN the preparer does not read (``urn:cnb:buidler:``) or a scheme with
    one slash (``https:/host``): read on, they would be taken for an image reference with a strange port; and
    ``file:`` without ``//`` (``file:bp.tgz``), which would be read as a file named so.

    :raises InvalidInputsError: naming the scheme, and the one meant when it is a typo away (exit 3).
    """
    urn = _URN_HEAD.match(uri)
    if urn is not None:
        meant = closest(urn[0].lower(), _URNS)
        hint = f"did you mean {meant}?" if meant else f"the preparer reads {', '.join(_URNS)}"
        raise InvalidInputsError(action, f"unsupported URN '{urn[0]}' ({hint})")
    slash = _ONE_SLASH.match(uri)
    if slash is not None:
        raise InvalidInputsError(action, f"'{slash[0]}' has one slash: did you mean {slash[1]}://?")
    if uri[:5].lower() == "file:" and not uri[5:6] == "/":  # file:bp.tgz: no relative file URL is read
        raise InvalidInputsError(
            action,
            f"'{uri[:5]}' without '//': a file:// URI names an absolute path (file:///srv/bp.tgz); a relative path"
            f" is written without a scheme ({uri[5:] or 'bp.tgz'})",
        )


def parse_locator(uri: str, base_dir: Path, exists: Callable[[Path], bool] = os.path.exists) -> Locator:
    """Classify ``uri``; relative paths resolve against ``base_dir``.

    :raises InvalidInputsError: for an unsupported scheme or a malformed URN or digest pin.
    """
    action = f"parse buildpack uri '{redact(uri)}'"
    pinned = "#sha256=" in uri.lower()  # refused on every kind but http(s) (file:// says so itself)
    for prefix in ("urn:cnb:builder:", "urn:buildpack:"):
        if uri.startswith(prefix):
            _refuse_pin(pinned, action)
            bp_id, version = _split_version(uri.removeprefix(prefix))
            if not bp_id or version == "":
                raise InvalidInputsError(action, f"expected {prefix}<id>[@<version>]")
            return BuilderLocator(bp_id, None if version == "latest" else version)
    if uri.startswith("urn:cnb:registry:"):
        _refuse_pin(pinned, action)
        rest, version = _split_version(uri.removeprefix("urn:cnb:registry:"))
        match = _REGISTRY_ID.match(rest)
        if match is None or version == "":
            raise InvalidInputsError(action, "expected urn:cnb:registry:<namespace>/<name>[@<version>]")
        return RegistryLocator(match[1], match[2], None if version == "latest" else version)
    _refuse_misspelled_scheme(uri, action)
    scheme, sep, _ = uri.partition("://")
    if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        scheme = scheme.lower()
        if scheme in ("http", "https"):
            return _http(uri, action)
        if scheme == "file":
            return _file(uri, action)
        if scheme == "docker":
            _refuse_pin(pinned, action)
            return _docker(uri[len("docker://") :], action)
    if sep and scheme and "/" not in scheme:  # any other <scheme>://: never a file's or an image's name
        meant = closest(scheme.lower(), ("http", "https", "file", "docker"), most=1)
        hint = f"did you mean {meant}://?" if meant else f"a uri is {ACCEPTED}"
        raise InvalidInputsError(action, f"unsupported protocol '{scheme}' ({hint})")
    if not uri:
        raise InvalidInputsError(action, "empty uri")
    _refuse_pin(pinned, action)  # a path, a buildpack id or an image reference, whatever is on disk
    candidate = base_dir / uri
    if uri.startswith((".", "/")) or uri.endswith(("/", *ARCHIVE_SUFFIXES)) or exists(candidate):
        return PathLocator(Path(os.path.normpath(candidate)))
    bare = _BARE_ID.match(uri)
    if bare is not None and not _is_registry_host(bare[1]):
        version = bare[3]
        return IdLocator(f"{bare[1]}/{bare[2]}", None if version in (None, "latest") else version)
    return _naked_image(uri, action)


def _docker(reference: str, action: str) -> ImageLocator:
    """A ``docker://`` uri's image: a reference, with no user information (exit 3 otherwise)."""
    if not reference:
        raise InvalidInputsError(action, "expected docker://<image reference>")
    if _image_userinfo(reference):
        raise InvalidInputsError(
            action,
            "an image reference takes no user name or password: give the registry's credentials in "
            "CNB_REGISTRY_AUTH or a Docker config.json (DOCKER_CONFIG)",
        )
    return _image(reference, action)


def _naked_image(uri: str, action: str) -> ImageLocator:
    """A ``uri`` without a scheme that is neither a path nor a buildpack id: an image reference, unless it is a
    mistake read so (exit 3)."""
    if uri == "~" or uri.startswith(
        "~/"
    ):  # a home directory a shell would have expanded: never an image's name
        raise InvalidInputsError(
            action, "'~' is not expanded (no shell reads the value): write the path absolute, or relative"
        )
    if uri.endswith("@"):  # an id's version left empty (pack reads no image of it); never the tag 'latest'
        raise InvalidInputsError(
            action, "nothing follows '@': write <id>@<version>, an image's @sha256:<digest>, or no '@'"
        )
    return _image(uri, action)


def _refuse_pin(pinned: bool, action: str) -> None:
    """Refuse a ``#sha256=`` pin where nothing would check it: read on, it would be part of an id, a version, a
    tag or a file name, and read as held (exit 3)."""
    if pinned:
        raise InvalidInputsError(action, _NO_PIN_HERE + _PIN_IN_A_NAME)


def _is_registry_host(component: str) -> bool:
    """Whether the first component of a reference names a registry (Docker's rule; ``localhost`` in any case, as
    :func:`preparer.fetch.oci.reference.parse_reference` reads it)."""
    return "." in component or ":" in component or component.lower() == "localhost"


def _image(reference: str, action: str) -> ImageLocator:
    """An image locator, once the reference parses (exit 3 otherwise)."""
    try:
        from preparer.fetch.oci.reference import parse_reference  # deferred: only image references need it

        parse_reference(reference)
    except InvalidInputsError as err:
        raise InvalidInputsError(action, err.cause) from err
    return ImageLocator(reference)


#: Why no source but an http(s) archive takes a pin: the preparer would neither check it nor could it tell the user.
_NO_PIN_HERE = (
    "a #sha256= pin is checked on http(s) URIs only: remove it (an image is pinned by its digest, <image>@sha256:"
    "<digest>; a local path is read as it is: serve the archive over https and pin that URI)"
)


#: How a file whose name holds what reads as a pin is still named.
_PIN_IN_A_NAME = "; a file whose name holds '#sha256=' is named by a file:// URI with '#' written as %23"


#: What follows a digest's ``@`` in an image reference: ``<algorithm>:<hex>``.
_DIGEST_AFTER_AT = re.compile(r"[A-Za-z0-9_+.-]+:[0-9a-fA-F]")


def _image_userinfo(reference: str) -> int:
    """Where an image reference begins after the user information written before it (``me:secret@ghcr.io/bp``):
    after the last ``@`` that a name, not a digest, follows (the only ``@`` an image reference has is its
    digest's; one at the end is an empty digest); 0 when there is none."""
    ats = [
        n for n, c in enumerate(reference[:-1]) if c == "@" and not _DIGEST_AFTER_AT.match(reference, n + 1)
    ]
    return ats[-1] + 1 if ats else 0


def _file(uri: str, action: str) -> PathLocator:
    """A ``file://`` URI's path. A query or fragment is refused, never passed over: a ``#sha256=`` pin would read as
    checked when it is not, and what else either holds may be a secret."""
    parts = urlsplit(uri)
    if "@" in parts.netloc:  # never shown (redacted): say what is wrong with it
        raise InvalidInputsError(
            action, "a file:// URI takes no user information ('user@'): write file:///<path>"
        )
    if parts.netloc.lower() not in ("", "localhost"):  # a host name has no case
        raise InvalidInputsError(
            action,
            f"file:// URIs must name a local path, and '{parts.netloc}' is read as a host: write file:///<absolute"
            " path>, or a relative path without a scheme",
        )
    if not parts.path:
        raise InvalidInputsError(action, "it names no path: write file:///<absolute path>")
    if parts.fragment.startswith("sha256="):
        raise InvalidInputsError(action, _NO_PIN_HERE)
    if "#" in uri or "?" in uri:
        raise InvalidInputsError(
            action,
            "a file:// URI takes no query (?) or fragment (#): write a '?' or '#' in a file name as %3F or %23",
        )
    # Escapes decoded to bytes, as the file system names files: %C3%28 is those two bytes, not U+FFFD.
    return PathLocator(Path(os.fsdecode(unquote_to_bytes(parts.path))))


def _http(uri: str, action: str) -> HttpLocator:
    try:
        parse_http_url(uri)  # the whole uri: a '#' in a password must not pass for a pin
    except UrlError as err:
        raise InvalidInputsError(action, f"not a valid URL: {err}") from err
    url, _, fragment = uri.partition("#")
    if not fragment:
        return HttpLocator(url)
    algorithm, _, digest = fragment.partition("=")
    if algorithm != "sha256" or not _SHA256.match(digest.lower()):
        raise InvalidInputsError(action, "a digest pin must read #sha256=<64 hex digits>")
    return HttpLocator(url, digest.lower())


def redact(uri: str) -> str:
    """``uri`` without what may be a secret, safe to print however malformed it is: the user information (all
    that comes before the last ``@`` of what follows ``://``, when it holds a ``:`` or no ``/``, so a password
    with ``#``, ``/`` or ``?`` in it goes whole), the query string, and a fragment unless it is a ``#sha256=`` pin.

    >>> pin = "#sha256=" + "0" * 64
    >>> redact("https://user:Pa#SE/CRET@host/bp.tgz?token=abc" + pin) == "https://host/bp.tgz" + pin
    True
    >>> redact("file:///srv/bp.tgz#token=abc"), redact("file://me:secret@localhost/bp.tgz")
    ('file:///srv/bp.tgz', 'file://localhost/bp.tgz')
    >>> redact("https://host/bp@1.0.tgz"), redact("https://ghp_token@host/x")
    ('https://host/bp@1.0.tgz', 'https://host/x')

    An image reference's ``@`` introduces a digest, kept; user information written before its registry (which no
    image reference takes, and which the preparer refuses) goes.

    >>> redact("docker://registry:5000/bp@sha256:00"), redact("docker://me:secret@ghcr.io/bp@sha256:00")
    ('docker://registry:5000/bp@sha256:00', 'docker://ghcr.io/bp@sha256:00')
    """
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    if scheme == "docker":
        return f"docker://{rest[_image_userinfo(rest) :]}"
    at = rest.rfind("@")
    if at >= 0 and (":" in rest[:at] or "/" not in rest[:at]):
        rest = rest[at + 1 :]
    path, mark, fragment = rest.partition("#")
    pin = f"{mark}{fragment}" if _PIN.match(fragment) else ""
    return f"{scheme}://{path.split('?', 1)[0]}{pin}"
