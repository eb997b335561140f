"""What fetching asks of the platform's policy, in one narrow protocol: the fetch floor decides nothing itself.

The top of the package hands each fetch a :class:`Guard` (``preparer.policy`` makes it from the policy file), and
fetchers consult it at every point only fetching can reach: each byte downloaded, file extracted and entry written
(the limits), each redirect hop, a kind of source the content reveals, and an image found while resolving. Without a
policy there is no guard, and nothing is asked.
"""

from __future__ import annotations

from typing import Protocol

from preparer.errors import FetchError, RunLimitReached


class LimitExceeded(FetchError):
    """A fetch went past one of the policy's limits: it stops at once (nothing more is read), exit 1."""


class RunLimitExceeded(LimitExceeded, RunLimitReached):
    """The fetches of the run together went past one of the policy's limits for the whole run."""


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
        """An image is about to be pulled: ``repository`` is ``registry/repository``, ``digest`` its pin if any."""
