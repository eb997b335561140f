"""The platform policy applied to a plan: every entry decided before anything is fetched or written."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, assert_never

from preparer import telemetry
from preparer._logger import log
from preparer.errors import InvalidInputsError
from preparer.plan import Fetch, Plan, Present, Step
from preparer.policy.rules import Decision, Policy, Target, decide_env, decide_source, refusal, written_as

if TYPE_CHECKING:
    from preparer.fetch.locator import Fetchable
    from preparer.fetch.store import Store


@telemetry.step("cnb.policy.enforce")
def enforce(plan: Plan, policy: Policy, cache_root: Path | None) -> Plan:
    """``plan`` with the policy's decisions recorded, include/exclude dropped when the policy forbids it.

    :raises InvalidInputsError: the first entry the policy refuses (exit 3); nothing has been fetched or written.
    """
    store = _store(cache_root) if any(isinstance(s, Fetch) for s in plan.steps) else None
    decisions = [_decide_step(step, policy, store) for step in plan.steps]
    decisions += [decide_env(policy, action.entry.key, action.entry.name) for action in plan.env]
    unmatched = _unmatched(plan, policy)
    decisions += [d for d in unmatched if not d.allowed]
    for decision in decisions:
        verdict = "allowed" if decision.allowed else "refused"
        log.debug("Policy: %s (%s): %s: %s", decision.key, decision.written, verdict, decision.rule)
    refused = next((d for d in decisions if not d.allowed), None)
    if refused is not None:
        raise refusal(policy, refused)
    warnings = plan.warnings
    for decision in unmatched:  # warned of: the image goes on unchecked, the platform told so
        warning = f"{decision.key}: {decision.rule}"
        log.warning("%s", warning)
        warnings = (*warnings, warning)
    removal = plan.removal
    if removal is not None and not policy.include_exclude:
        warning = (
            f"{plan.config.filter_key} is not applied by the preparer: the platform policy does not allow "
            f"include/exclude ({policy.rule('app.include-exclude')})"
        )
        log.warning("%s", warning)
        warnings, removal = (*warnings, warning), None
    return replace(plan, policy=tuple(decisions), rules=policy, removal=removal, warnings=warnings)


def describe_signatures(plan: Plan) -> list[str]:
    """The dry run's account of ``[[image.signed-by]]``: for each image entry, each rule that applies, its line, its
    keys (file and fingerprint), its identities (issuer, subject) and its trusted root (file and the SHA-256 of its
    bytes). Nothing is verified."""
    policy = plan.rules
    if policy is None or not policy.signed_by:
        return []
    lines = []
    for step in plan.steps:
        pulled = _pulled_image(step.locator) if isinstance(step, Fetch) else None
        if pulled is None:
            continue
        repository, named = pulled
        when = "" if named else ", if it resolves to that image"
        rules = policy.signed_by_rules(repository)
        if not rules:
            verdict = policy.no_match_policy()
            lines.append(
                f"  signatures: {step.entry.key} ({repository}{when}): no rule; "
                f"{policy.rule('image.no-match-policy')}: {verdict}"
            )
        for rule in rules:
            where = f"line {rule.line} of {policy.path}" if rule.line else policy.path
            trusted = [f"key {k.path} (sha256:{k.fingerprint})" for k in rule.keys]
            trusted += [f"identity {i.shown}" for i in rule.identities]
            if rule.root is not None:
                trusted.append(f"trusted root {rule.root.path} (sha256:{rule.root.sha256})")
            lines.append(
                f"  signatures: {step.entry.key} ({repository}{when}): image.signed-by, {where}: {', '.join(trusted)}"
            )
    return lines


def _unmatched(plan: Plan, policy: Policy) -> list[Decision]:
    """``image.no-match-policy`` applied to each image entry known before fetching that no ``[[image.signed-by]]``
    rule matches: a refusal (deny) or an allowed decision to warn of (warn); none under allow. Images known only
    once fetched (what a bare id or a registry entry resolves to) are decided by the fetch (:class:`Budget`)."""
    from preparer.fetch.locator import redact  # deferred, as in _decide_step

    found = []
    for step in plan.steps:
        repository = planned_image(step.locator) if isinstance(step, Fetch) else None
        said = policy.unmatched(repository) if repository is not None else None
        if said is not None:
            verdict, why = said
            written = written_as(step.entry.uri, step.entry.id, redact(step.entry.uri or ""))
            found.append(Decision(step.entry.key, written, verdict != "deny", why, "image.no-match-policy"))
    return found


def planned_image(locator: Fetchable) -> str | None:
    """The repository of the image ``locator`` names before anything is fetched (a ``docker://`` or image
    reference), in the form ``[[image.signed-by]]`` matches; ``None`` for any other source. The plan applies
    ``image.no-match-policy`` to these; the fetch, to the images it finds."""
    pulled = _pulled_image(locator)
    return pulled[0] if pulled is not None and pulled[1] else None


def _decide_step(step: Step, policy: Policy, store: Store | None) -> Decision:
    # Deferred: the locators are the fetch package's (kept off runs without a policy or a uri).
    from preparer.fetch import locator as locators
    from preparer.fetch.oci.reference import parse_reference

    entry = step.entry
    written = written_as(entry.uri, entry.id, locators.redact(entry.uri or ""))
    if isinstance(step, Present):
        return decide_source(policy, entry.key, written, ("builder",), Target())
    assert isinstance(step, Fetch)
    locator = step.locator
    match locator:
        case locators.InlineLocator():
            return decide_source(policy, entry.key, written, ("inline",), Target())
        case locators.PathLocator():
            kind = "cnb" if locator.is_cnb else "path"
            return decide_source(policy, entry.key, written, (kind,), Target())
        case locators.HttpLocator():
            kinds = ("http", "cnb") if locator.is_cnb else ("http",)
            target = Target(
                url=locator.shown,
                pinned=locator.sha256 is not None,
                cached_digest=store.digest_of(locator.url) if store is not None else None,
            )
            return decide_source(policy, entry.key, written, kinds, target)
        case locators.ImageLocator():
            ref = parse_reference(locator.reference)
            target = Target(image=ref.name, image_digest=ref.digest)
            return decide_source(policy, entry.key, written, ("image",), target)
        case locators.IdLocator():
            # Not installed: the buildpack registry is asked first, then Docker Hub: both must be allowed.
            target = Target(image=_bare_id_image(locator.id))
            return decide_source(policy, entry.key, written, ("registry", "image"), target)
        case locators.RegistryLocator():
            return decide_source(policy, entry.key, written, ("registry",), Target())
        case _ as never:
            assert_never(never)


def _pulled_image(locator: Fetchable) -> tuple[str, bool] | None:
    """The repository of the image an entry's source may be pulled as, in the form ``[[image.signed-by]]`` matches,
    and whether the source names that image (else it is pulled only if it resolves to it: a bare id); ``None`` for a
    source that is no image, or whose image only the buildpack registry's index names (known once fetched)."""
    # Deferred, as in _decide_step.
    from preparer.fetch import locator as locators
    from preparer.fetch.oci.reference import parse_reference

    match locator:
        case locators.ImageLocator():
            return parse_reference(locator.reference).name, True
        case locators.IdLocator():
            return _bare_id_image(locator.id), False
        case (
            locators.PathLocator()
            | locators.HttpLocator()
            | locators.RegistryLocator()
            | locators.InlineLocator()
        ):
            return None
        case _ as never:
            assert_never(never)


def _bare_id_image(bp_id: str) -> str:
    """The image a bare id not installed would be pulled as, in the form the policy matches (``docker.io/<id>``)."""
    from preparer.fetch.oci.reference import DOCKER_HUB_NAME, parse_reference  # deferred, as in _decide_step

    try:
        return parse_reference(bp_id).name
    except InvalidInputsError:
        return f"{DOCKER_HUB_NAME}/{bp_id}"  # never pulled as an image: the registry's answer decides


def _store(root: Path | None) -> Store | None:
    """The download cache as a store opened for reading only (nothing is made or changed), for the hints of pins."""
    if root is None:
        return None
    from preparer.fetch.store import Store  # deferred, as the locators below

    return Store.reading(root)
