"""The policy as one buildpack's fetch sees it: a :class:`Budget` (a :class:`preparer.fetch.guard.Guard`) charges
its limits, and the run's totals, as bytes and entries arrive, and decides what only fetching can ask (each
redirect hop, a kind of source its content reveals, an image found while resolving).

An exceeded limit stops the download or the extraction at once (exit 1).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from preparer._logger import log
from preparer.errors import PolicyRefused
from preparer.fetch.guard import LimitExceeded, RunLimitExceeded
from preparer.policy.rules import Decision, Policy, check_image, matches, refusal, with_rule

if TYPE_CHECKING:
    from preparer.policy.signatures import Check


class RunTotals:
    """What every buildpack of the run has used so far (fetches run in parallel: guarded by a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.used = {"download_bytes": 0, "extract_bytes": 0, "entries": 0}


_WHAT = {
    "download_bytes": ("bytes downloaded", "download-bytes"),
    "extract_bytes": ("bytes extracted", "extract-bytes"),
    "entries": ("entries written", "entries"),
}


class Budget:
    """The policy as one buildpack's fetch sees it (a :class:`preparer.fetch.guard.Guard`): its limits, charged to
    the run's totals as well, and the decisions that only fetching can ask for (each redirect hop, a kind of source
    its content reveals, an image found while resolving)."""

    def __init__(
        self,
        policy: Policy,
        source: str,
        run: RunTotals,
        key: str = "",
        written: str = "",
        planned: str | None = None,
    ) -> None:
        """``planned``: the image the plan named and applied ``image.no-match-policy`` to already."""
        self.policy, self.source, self.run, self.planned = policy, source, run, planned
        self.key, self.written = key or source, written or f'uri = "{source}"'
        self.used = {"download_bytes": 0, "extract_bytes": 0, "entries": 0}

    def redirect(self, url: str) -> None:
        """A server redirects this fetch to ``url`` (canonical, shown form): ``http.allow`` decides it as it
        decided the URL written.

        :raises InvalidInputsError: the policy does not allow ``url`` (exit 3); nothing more is asked of it.
        """
        if self.policy.http_allow is not None and matches(url, self.policy.http_allow) is None:
            rule = f"it redirects to {url}, which matches no pattern of {self.policy.rule('http.allow')}"
            raise refusal(self.policy, Decision(self.key, self.written, False, rule, "http.allow"))

    def image(self, reference: str, repository: str, digest: str | None) -> None:
        """An image found while fetching (what a registry entry or a bare id resolves to) meets the image rules.

        :raises InvalidInputsError: the policy refuses it (exit 3).
        """
        problem = check_image(self.policy, repository, digest)
        if problem is not None:
            by, why = problem
            error = PolicyRefused(
                "prepare", f"the image {reference} is not allowed by the platform policy: {why}"
            )
            raise with_rule(error, self.policy, self.key, by)

    def signatures(self, repository: str) -> Check | None:
        """The ``[[image.signed-by]]`` rules the image ``repository`` must meet, or ``None`` when none applies."""
        rules = self.policy.signed_by_rules(repository) if self.policy.signed_by else ()
        if not rules:
            self._unmatched(repository)
            return None
        from preparer.policy.signatures import Check  # deferred: only policies with signature rules

        entry = self.key if self.key != self.source else ""
        return Check(rules, self.policy.path, entry, self.policy.signature_max_age)

    def _unmatched(self, repository: str) -> None:
        """``image.no-match-policy`` applied to an image found while fetching that no rule matches.

        :raises InvalidInputsError: the setting is deny (exit 3).
        """
        said = self.policy.unmatched(repository) if repository != self.planned else None
        if said is None:
            return
        verdict, why = said
        if verdict == "deny":
            raise refusal(self.policy, Decision(self.key, self.written, False, why, "image.no-match-policy"))
        log.warning("%s: %s", self.key, why)

    def revealed(self, kind: str, what: str) -> None:
        """The content shows the source to be of ``kind`` (``what`` says how): it must be allowed too.

        :raises InvalidInputsError: ``kind`` is not in ``sources.allow`` (exit 3).
        """
        if self.policy.kinds is not None and kind not in self.policy.kinds:
            rule = f"{what}, and {kind} sources are not allowed ({self.policy.rule('sources.allow')})"
            raise refusal(self.policy, Decision(self.key, self.written, False, rule, "sources.allow"))

    def downloaded(self, count: int) -> None:
        self._charge("download_bytes", count)

    def extracted(self, count: int) -> None:
        self._charge("extract_bytes", count)

    def entry(self, count: int = 1) -> None:
        self._charge("entries", count)

    def _charge(self, what: str, count: int) -> None:
        if not count:
            return
        self.used[what] += count
        mine = getattr(self.policy.buildpack_limits, what)
        if mine is not None and self.used[what] > mine:
            self._exceeded(what, "limits.buildpack", mine)
        with self.run.lock:
            self.run.used[what] += count
            total = self.run.used[what]
        theirs = getattr(self.policy.run_limits, what)
        if theirs is not None and total > theirs:
            self._exceeded(what, "limits.run", theirs)

    def _exceeded(self, what: str, table: str, limit: int) -> None:
        noun, key = _WHAT[what]
        scope = "this buildpack" if table == "limits.buildpack" else "the run"
        raise (LimitExceeded if table == "limits.buildpack" else RunLimitExceeded)(
            f"fetch {self.source}",
            f"more than {limit} {noun} for {scope}: the platform policy's limit ({self.policy.rule(f'{table}.{key}')})",
        )
