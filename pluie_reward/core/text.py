"""Levenshtein distance over any sequences (characters or words), shared by rewards and baselines."""

from __future__ import annotations

from typing import Any, Sequence


def edit_distance(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Levenshtein distance between two sequences (insertions, deletions, substitutions cost 1).

    Example:
        >>> edit_distance(["a", "b", "c"], ["a", "c", "d"])
        2
    """
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]
