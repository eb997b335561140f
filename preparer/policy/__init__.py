"""The platform policy, in one room: which buildpacks, sources, sizes and env names a project may bring.

- :mod:`.rules`: the policy as data (:class:`~preparer.policy.rules.Policy`) and its decisions on sources, images
  and env names;
- :mod:`.reader`: the policy file (``-policy``) read and checked, every problem found (:mod:`.problems`), its
  ``[[image.signed-by]]`` rules by :mod:`.signed_by`;
- :mod:`.budget`: its limits, a :class:`~preparer.policy.budget.Budget` per fetch, the
  :class:`~preparer.fetch.guard.Guard` fetching consults on each byte, entry, redirect hop, revealed kind and image;
- :mod:`.enforce`: the policy applied to a plan, every entry decided before anything is fetched or written.

The top hands one :class:`~preparer.policy.rules.Policy` down; fetching sees it only as a ``Guard``.
"""

from preparer.policy.budget import Budget, RunTotals
from preparer.policy.reader import load_policy
from preparer.policy.rules import Decision, Policy, Target, written_as

__all__ = ["Budget", "Decision", "Policy", "RunTotals", "Target", "load_policy", "written_as"]
