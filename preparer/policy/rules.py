"""The platform's policy as data, and what it decides of each entry of the plan (docs/policy.md).

A policy is checked against the whole plan before anything is fetched or written: a refused entry stops the run
with exit 3 and no request made. Without a policy nothing changes. The policy file is read by
:mod:`preparer.policy.reader`; its limits travel with each fetch as a :class:`preparer.policy.budget.Budget`.
"""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING

from preparer._record import field, record
from preparer.errors import PolicyRefused, with_fields
from preparer.fetch.guard import SIGNATURE_MAX_AGE

if TYPE_CHECKING:
    from preparer.policy.signatures import SignedBy

#: The kinds of source a policy names in ``sources.allow``.
KINDS = ("builder", "path", "http", "image", "cnb", "registry", "inline")


@record
class Rule:
    """A value of the policy and the line where it is written (``None``: no line names it alone)."""

    key: str
    line: int | None


@record
class Limits:
    """Bytes downloaded, bytes extracted (or copied), entries written; ``None`` is unlimited."""

    download_bytes: int | None = None
    extract_bytes: int | None = None
    entries: int | None = None


@record
class Policy:
    """A parsed policy file. ``None`` in an allow list means "not restricted"."""

    path: str
    kinds: tuple[str, ...] | None = None
    http_allow: tuple[str, ...] | None = None
    http_pin: bool = False
    #: ``image.allow`` in canonical form (:func:`canonical_globs`), as the images it is matched against.
    image_allow: tuple[str, ...] | None = None
    image_pin: bool = False
    buildpack_limits: Limits = field(default_factory=Limits)
    run_limits: Limits = field(default_factory=Limits)
    env_allow: tuple[str, ...] | None = None
    env_deny: tuple[str, ...] = ()
    include_exclude: bool = True
    #: ``[[image.signed-by]]``: images that must carry a signature by a trusted key, in the file's order.
    signed_by: tuple[SignedBy, ...] = ()
    #: ``image.signature-max-age``: seconds a recorded signature verdict spares asking the registry (0: never).
    signature_max_age: float = SIGNATURE_MAX_AGE
    #: ``image.no-match-policy`` as written (``None``: not written; see :meth:`no_match_policy`).
    no_match: str | None = None
    #: Where each key is written, for messages.
    rules: dict[str, Rule] = field(default_factory=dict)

    def no_match_policy(self) -> str:
        """What becomes of an image no ``[[image.signed-by]]`` rule matches (policy-controller's no-match policy):
        as written, else ``warn`` when the policy has a rule (its images were meant to be checked), else ``allow``."""
        return self.no_match or ("warn" if self.signed_by else "allow")

    def unmatched(self, repository: str) -> tuple[str, str] | None:
        """When the image ``repository`` matches no ``[[image.signed-by]]`` rule and the no-match policy is not
        ``allow``: that policy (``deny`` or ``warn``) and why, naming the image and the rules' patterns; else
        ``None``."""
        verdict = self.no_match_policy()
        if verdict == "allow" or self.signed_by_rules(repository):
            return None
        patterns = list(dict.fromkeys(p for rule in self.signed_by for p in rule.images))
        rules = (
            f"images {', '.join(patterns)} in {self.path}"
            if patterns
            else f"no rule is written in {self.path}"
        )
        why = f"the image {repository} matches no [[image.signed-by]] rule ({rules})"
        setting = self.rule("image.no-match-policy")
        if verdict == "deny":
            return verdict, f"{why}, and image.no-match-policy refuses such images ({setting})"
        return (
            verdict,
            f'{why}, so its signatures are not checked ({setting} is warn: write "deny" to refuse such images, "allow" to say nothing)',
        )

    def rule(self, key: str) -> str:
        """``key`` and where it is: ``http.allow, line 7 of policy.toml``."""
        found = self.rules.get(key)
        if found is None:
            return f"{key} (the default) of {self.path}"
        return f"{key}, line {found.line} of {self.path}" if found.line else f"{key}, {self.path}"

    def signed_by_rules(self, repository: str) -> tuple[SignedBy, ...]:
        """The ``[[image.signed-by]]`` rules whose ``images`` match ``repository`` (``registry/repository`` in the
        canonical form of :attr:`preparer.fetch.oci.reference.Reference.name`).

        A rule restricts, so it applies to both spellings of an https registry's default port: ``ghcr.io:443/x``
        and ``ghcr.io/x`` reach one server, and a rule naming either must be met by both (``image.allow``, which
        permits, names the one spelling it allows)."""
        names = https_spellings(repository)
        return tuple(
            rule
            for rule in self.signed_by
            if any(
                matches(name, patterns) is not None for name in names for patterns in _spelled(rule.images)
            )
        )


#: ``image.no-match-policy``'s words, policy-controller's.
NO_MATCH = ("deny", "warn", "allow")


def https_spellings(name: str) -> tuple[str, ...]:
    """``name`` (an image's ``registry/repository``, or a glob of them) and, when its registry is written with the
    https default port ``:443`` and is not reached over plain http (loopback), the same without it."""
    registry, slash, path = name.partition("/")
    host, colon, port = registry.rpartition(":")
    if not slash or not colon or port != "443" or not host or host.endswith(":"):
        return (name,)
    from preparer.fetch.oci.reference import is_loopback  # deferred: only policies with signature rules

    return (name,) if is_loopback(host) else (name, f"{host}/{path}")


def _spelled(patterns: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """``patterns`` as written, and each without an https default port (:func:`https_spellings`)."""
    return (patterns, tuple(spelling for pattern in patterns for spelling in https_spellings(pattern)[1:]))


def matches(value: str, patterns: tuple[str, ...]) -> str | None:
    """The first glob of ``patterns`` that ``value`` matches (``*`` matches ``/`` too), else ``None``."""
    return next((p for p in patterns if fnmatch.fnmatchcase(value, p)), None)


def canonical_globs(globs: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Image globs in the form :attr:`preparer.fetch.oci.reference.Reference.name` is (docs/policy.md, "Matching").

    :raises ValueError: one can never match an image: ``'<glob>' can never match an image: <why>``.
    """
    from preparer.fetch.oci.reference import canonical_glob  # deferred: only policies with image globs

    canonical = []
    for glob in globs:
        try:
            canonical.append(canonical_glob(glob))
        except ValueError as err:
            raise ValueError(f"'{glob}' can never match an image: {err}") from None
    return tuple(canonical)


# Deciding each entry of the plan, before anything is fetched.


@record
class Decision:
    """One entry (a group entry or a build env variable) and what the policy says of it."""

    #: Where the entry is written: ``io.buildpacks.group[2]``.
    key: str
    #: The entry as written (credentials removed): ``uri = "https://host/bp.tgz"``.
    written: str
    allowed: bool
    #: Why, and which key of the policy says so (where it is written).
    rule: str
    #: The policy's key that decides it (``sources.allow``), when one does.
    by: str | None = None


def decide_source(policy: Policy, key: str, written: str, kinds: tuple[str, ...], target: Target) -> Decision:
    """What ``policy`` says of a buildpack source of ``kinds`` (all must be allowed) at ``target``."""
    for kind in kinds:
        if policy.kinds is not None and kind not in policy.kinds:
            rule = f"{kind} sources are not allowed ({policy.rule('sources.allow')})"
            return Decision(key, written, False, rule, "sources.allow")
    problem = None
    if target.url is not None:
        problem = _check_http(policy, target)
    elif target.image is not None:
        problem = check_image(policy, target.image, target.image_digest)
    if problem:
        by, why = problem
        return Decision(key, written, False, why, by)
    return Decision(key, written, True, _allowed_by(policy, kinds, target))


@record
class Target:
    """Where a source points: an http URL (with its pin and what the cache knows of it), or an image."""

    url: str | None = None
    pinned: bool = False
    cached_digest: str | None = None
    image: str | None = None
    image_digest: str | None = None


def _check_http(policy: Policy, target: Target) -> tuple[str, str] | None:
    url = target.url or ""
    if policy.http_allow is not None and matches(url, policy.http_allow) is None:
        return "http.allow", f"{url} matches no pattern of {policy.rule('http.allow')}"
    if policy.http_pin and not target.pinned:
        hint = ""
        if target.cached_digest:
            hex_digest = target.cached_digest.removeprefix("sha256:")
            hint = f'; the cached copy of this URL is sha256:{hex_digest}: write uri = "{url}#sha256={hex_digest}"'
        return (
            "http.require-pin",
            f"it must be pinned with #sha256=<digest> ({policy.rule('http.require-pin')}){hint}",
        )
    return None


def check_image(policy: Policy, repository: str, digest: str | None) -> tuple[str, str] | None:
    """Which key of ``policy`` refuses the image ``repository`` (``registry/repository`` in the canonical form of
    :attr:`preparer.fetch.oci.reference.Reference.name`) and why, or ``None``."""
    if policy.image_allow is not None and matches(repository, policy.image_allow) is None:
        return "image.allow", f"{repository} matches no pattern of {policy.rule('image.allow')}"
    if policy.image_pin and not digest:
        return (
            "image.require-pin",
            f"it must be pinned with @sha256:<digest> ({policy.rule('image.require-pin')})",
        )
    return None


def _allowed_by(policy: Policy, kinds: tuple[str, ...], target: Target) -> str:
    reasons = []
    if policy.kinds is not None:
        reasons.append(f"{', '.join(kinds)} in {policy.rule('sources.allow')}")
    if target.url is not None and policy.http_allow is not None:
        reasons.append(f"matches '{matches(target.url, policy.http_allow)}' of {policy.rule('http.allow')}")
    if target.image is not None and policy.image_allow is not None:
        reasons.append(
            f"matches '{matches(target.image, policy.image_allow)}' of {policy.rule('image.allow')}"
        )
    return "; ".join(reasons) or "nothing in the policy restricts it"


def decide_env(policy: Policy, key: str, name: str) -> Decision:
    """What ``policy`` says of the build env variable ``name``."""
    written = f'name = "{name}"'
    denied = matches(name, policy.env_deny)
    if denied is not None:
        return Decision(
            key, written, False, f"it matches '{denied}' of {policy.rule('env.deny')}", "env.deny"
        )
    if policy.env_allow is not None:
        allowed = matches(name, policy.env_allow)
        if allowed is None:
            return Decision(
                key, written, False, f"it matches no pattern of {policy.rule('env.allow')}", "env.allow"
            )
        return Decision(key, written, True, f"matches '{allowed}' of {policy.rule('env.allow')}")
    return Decision(key, written, True, "nothing in the policy restricts it")


def written_as(uri: str | None, bp_id: str | None, shown: str) -> str:
    """An entry as written, for messages: ``uri = "<shown>"``, ``id = "<id>"`` or ``script``."""
    return f'uri = "{shown}"' if uri else f'id = "{bp_id}"' if bp_id else "script"


def refusal(policy: Policy, decision: Decision) -> PolicyRefused:
    """The error of a refused entry (exit 3), with the rule that refuses it as data."""
    error = PolicyRefused(
        "prepare",
        f"{decision.key} ({decision.written} as written) is not allowed by the platform policy: {decision.rule}",
    )
    return with_rule(error, policy, decision.key, decision.by)


def with_rule(error: PolicyRefused, policy: Policy, entry: str, by: str | None) -> PolicyRefused:
    """``error`` with the entry it refuses and the policy's key that refuses it (and that key's line) as data."""
    found = policy.rules.get(by) if by else None
    return with_fields(error, entry=entry, rule=by, policy=policy.path, line=found.line if found else None)
