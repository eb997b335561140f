"""The platform policy, in one room: which buildpacks, sources, sizes and env names a project may bring.

- :mod:`.rules`: the policy file (``-policy``), its decisions on sources and env names, and its limits (a
  :class:`~preparer.policy.rules.Budget` per fetch, the :class:`~preparer.fetch.guard.Guard` fetching consults on
  each byte, entry, redirect hop, revealed kind and image);
- :mod:`.enforce`: the policy applied to a plan, every entry decided before anything is fetched or written.

The top hands one :class:`~preparer.policy.rules.Policy` down; fetching sees it only as a ``Guard``.
"""

from preparer.policy.rules import Budget, Decision, Policy, RunTotals, Target, load_policy, written_as

__all__ = ["Budget", "Decision", "Policy", "RunTotals", "Target", "load_policy", "written_as"]
