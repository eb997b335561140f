"""What fetching asks of the platform's policy, in one narrow protocol: the fetch floor decides nothing itself.

The top of the package hands each fetch a :class:`Guard` (``preparer.policy`` makes it from the policy file), and
fetchers consult it at every point only fetching can reach: each byte downloaded, file extracted and entry written
(the limits), each redirect hop, a kind of source the content reveals, and an image found while resolving. Without a
policy there is no guard, and nothing is asked.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Literal, Protocol

from preparer._record import record
from preparer.errors import FetchError, RunLimitReached

#: Seconds a recorded signature verdict is trusted by default: the policy's ``image.signature-max-age`` (24 h).
SIGNATURE_MAX_AGE = 24 * 3600.0


class LimitExceeded(FetchError):
    """A fetch went past one of the policy's limits: it stops at once (nothing more is read), exit 1.

    Attributes:
        rule: the policy's key of the limit (``limits.buildpack.download-bytes``, ``limits.run.entries``).
        policy: the policy file.
        line: the line of the policy file where the limit is written.
        limit: the limit's value (bytes, or entries).
    """

    rule: str | None = None
    policy: str | None = None
    line: int | None = None
    limit: int | None = None


class RunLimitExceeded(LimitExceeded, RunLimitReached):
    """The fetches of the run together went past one of the policy's limits for the whole run."""


@record
class SignatureObject:
    """One signature as a registry holds it, not yet interpreted: fetching finds these, the policy judges them.

    ``cosign``: a layer of the ``sha256-<hex>.sig`` manifest: ``payload`` its simple-signing blob, ``signature``
    the layer's ``dev.cosignproject.cosign/signature`` annotation as written (base64), ``annotations`` the layer's
    keyless material (``dev.sigstore.cosign/certificate``, ``…/chain``, ``…/bundle``) when it has any. ``bundle``:
    a Sigstore bundle attached as a referrer: ``payload`` the bundle's JSON, ``signature`` ``None``. ``found``:
    where it was, for messages (``sha256-<hex>.sig layer 2``, ``referrer sha256:...``).
    """

    format: Literal["cosign", "bundle"]
    found: str
    payload: bytes
    signature: str | None = None
    annotations: tuple[tuple[str, str], ...] = ()


@record
class Verified:
    """A signature that satisfied one ``[[image.signed-by]]`` rule: its format, the digest it is for, the key's
    fingerprint (``""`` for a keyless signature), and where it was found; for a keyless signature, the certificate's
    ``issuer`` and ``subject``, the log entry's ``log_index`` and the verified signing time (``integrated_time``,
    seconds since the epoch); ``line``: the line of the rule's ``[[image.signed-by]]`` header."""

    format: str
    digest: str
    key: str
    found: str
    issuer: str = ""
    subject: str = ""
    log_index: int | None = None
    integrated_time: int | None = None
    line: int | None = None


def signature_tag(digest: str) -> str:
    """The tag of cosign's tag scheme that holds the signatures of ``digest``: ``sha256-<hex>.sig``."""
    return digest.replace(":", "-") + ".sig"


class SignatureCheck(Protocol):
    """The ``[[image.signed-by]]`` rules that apply to one image."""

    #: Seconds after the registry was asked that a recorded verdict spares asking it again (0: never spares it).
    max_age: float

    def satisfying(
        self, objects: Sequence[SignatureObject], digests: Sequence[str]
    ) -> tuple[Verified, ...] | None:
        """The signature of ``objects`` that satisfies each rule for one of ``digests`` (the index's, the
        manifest's); ``None`` when a rule is not satisfied."""

    def verify(
        self,
        objects: Iterable[SignatureObject],
        digests: Sequence[str],
        image: str,
        keep: Callable[[SignatureObject], None] | None = None,
    ) -> tuple[Verified, ...]:
        """The signature that satisfies each rule. ``objects`` are judged one at a time, as they come, and no
        more is taken from them once every rule is satisfied; none is kept but those ``keep`` is given: each
        object that satisfies a rule, when it does.

        :raises SignatureRefused: a rule that none satisfies, and why (exit 1).
        """

    def refuse(self, image: str, digest: str, why: str) -> FetchError:
        """The refusal of an image whose signature objects are past a bound (``why``), even if a valid signature
        is among them (exit 1)."""


class Guard(Protocol):
    """The platform policy as one buildpack's fetch sees it. Every method returns when allowed and raises when not:
    :class:`LimitExceeded` (exit 1) past a limit, ``InvalidInputsError`` (exit 3) for a source the policy refuses.
    """

    def downloaded(self, count: int) -> None:
        """``count`` more bytes arrived."""

    def extracted(self, count: int) -> None:
        """``count`` more bytes of files are about to be written (unpacked, copied or installed from a cache)."""

    def entry(self, count: int = 1) -> None:
        """``count`` more files, directories or links are about to be written."""

    def redirect(self, url: str) -> None:
        """A server redirects the fetch to ``url`` (canonical, without user information or query)."""

    def revealed(self, kind: str, what: str) -> None:
        """The content shows the source to be of ``kind`` (``cnb``); ``what`` says how, for the refusal."""

    def image(self, reference: str, repository: str, digest: str | None) -> None:
        """An image is about to be pulled: ``repository`` is its ``registry/repository`` as the policy matches it
        (:attr:`preparer.fetch.oci.reference.Reference.name`), ``digest`` its pin if any."""

    def signatures(self, repository: str) -> SignatureCheck | None:
        """The signature rules the image ``repository`` (its ``Reference.name``) must meet; ``None``: none."""
