"""Names near a mistyped one, for "did you mean" in messages."""

from __future__ import annotations

from collections.abc import Sequence


def closest(word: str, candidates: Sequence[str], most: int = 2) -> str | None:
    """The candidate within ``most`` edits of ``word`` (insertions, deletions, substitutions, adjacent swaps), the
    nearest first; ``None`` when none is, or ``word`` is one of them. For "did you mean" in messages."""
    if word in candidates:
        return None
    # Case is no edit: ``No-Match-Policy`` is ``no-match-policy`` miswritten, not three letters away from it.
    folded = word.casefold()
    # Lengths further apart than ``most`` are further apart in edits too: a long or foreign word costs nothing.
    scored = sorted(
        (_distance(folded, c.casefold()), c) for c in candidates if abs(len(c) - len(word)) <= most
    )
    if scored and scored[0][0] <= most:
        return scored[0][1]
    return _shortened(folded, candidates)


def _shortened(folded: str, candidates: Sequence[str]) -> str | None:
    """The one candidate that ``folded`` begins, up to one of its ``-``, ``_`` or ``.`` (``no-match`` for
    ``no-match-policy``): a name written short, too many edits away to be found as a typo. ``None`` when several
    are (``no`` begins too much to say which), or the word is under four letters."""
    if len(folded) < 4:
        return None
    begun = [
        c for c in candidates
        if len(c) > len(folded) and c.casefold().replace("_", "-").startswith(folded.replace("_", "-"))
        and c[len(folded)] in "-_."
    ]  # fmt: skip
    return begun[0] if len(begun) == 1 else None


def _distance(a: str, b: str) -> int:
    """Damerau-Levenshtein distance (optimal string alignment) between two short strings."""
    previous2: list[int] = []
    previous = list(range(len(b) + 1))
    for i, char in enumerate(a, 1):
        current = [i]
        for j, other in enumerate(b, 1):
            cost = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (char != other))
            if i > 1 and j > 1 and char == b[j - 2] and a[i - 2] == other:
                cost = min(cost, previous2[j - 2] + 1)
            current.append(cost)
        previous2, previous = previous, current
    return previous[-1]
