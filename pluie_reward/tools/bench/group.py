"""Group-relative judging next to pointwise PLUIE on the same GRPO-shaped groups (:func:`.run.edit_variants`: a
human paraphrase, a copy, edits): rank agreement, which candidate each picks, cost per group, the position bias
left by K cyclic orders (:func:`~pluie_reward.integrations.group.judge_groups` reads all G candidates at once).

Example:
    >>> kendall_tau([1, 2, 3], [10, 20, 30]), kendall_tau([1, 2, 3], [3, 2, 1])
    (1.0, -1.0)
"""

from __future__ import annotations

import statistics
from typing import Any, Sequence

from ...integrations.group import judge_groups
from ..report import markdown_table
from .measure import column_table, timed
from .run import variant_groups


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Kendall's tau-a between two score lists (None for fewer than two items)."""
    import numpy as np  # lazy: CLI start-up

    if len(x) < 2:
        return None
    signs = np.sign(np.subtract.outer(x, x)) * np.sign(np.subtract.outer(y, y))  # each pair twice
    return float(signs.sum() / (len(x) * (len(x) - 1)))


def compare_group_judging(judge: Any, pairs: Sequence[tuple[str, str]], *, groups: int = 16, size: int = 4,
                          orders: Sequence[int] = (1, 2, 4), pointwise_template: str = "para-fs",
                          group_template: str = "para-group") -> dict[str, Any]:
    """Score the same groups pointwise and group-relatively (each K in ``orders``), side by side.

    Returns:
        ``rows`` (one per method: seconds per group, top-1 = the human paraphrase, top-1 = the copy,
        Kendall tau with pointwise PLUIE, top-1 agreement with it), ``bias`` (per K: mean spread of
        log p(best) over groups of ``size`` identical candidates, 0 with no position bias), and the setup.
    """
    data = variant_groups(pairs, groups, size, spare=16)  # candidate 0: the human paraphrase
    sources, candidates = [s for s, _ in data], [c for _, c in data]
    seconds, pointwise, _ = timed(None, lambda: [judge.score(pointwise_template, source=s, hypothesis=c, use_cache=False) for s, c in data])
    rows = [_row(f"pointwise {pointwise_template}", seconds / len(data), pointwise, pointwise, data)]
    for k in orders:
        seconds, out, _ = timed(None, lambda: judge_groups(judge, group_template, candidates, orders=k, source=sources))
        rows.append(_row(f"{group_template}, {k} order{'s' if k > 1 else ''}", seconds / len(data), [r["logp_best"] for r in out],
                         pointwise, data))
    same = [[c[0]] * size for _, c in data]
    bias = {k: statistics.fmean(max(r["logp_best"]) - min(r["logp_best"])
                                for r in judge_groups(judge, group_template, same, orders=k, source=sources)) for k in orders}
    return {"rows": rows, "bias": bias, "groups": len(data), "size": size}


def _row(method: str, seconds: float, scores: list[list[float]], pointwise: list[list[float]],
         data: list[tuple[str, list[str]]]) -> dict[str, Any]:
    top = [max(range(len(s)), key=s.__getitem__) for s in scores]
    ref = [max(range(len(s)), key=s.__getitem__) for s in pointwise]
    copies = [c.index(s) if s in c else -1 for s, c in data]
    taus = [t for t in (kendall_tau(a, b) for a, b in zip(scores, pointwise)) if t is not None]
    return {"method": method, "seconds_per_group": seconds, "top1_paraphrase": sum(t == 0 for t in top) / len(top),
            "top1_copy": sum(t == c for t, c in zip(top, copies)) / len(top),
            "kendall_vs_pointwise": statistics.fmean(taus) if taus else None,
            "top1_agreement": sum(a == b for a, b in zip(top, ref)) / len(top)}


def format_group_table(result: dict[str, Any]) -> str:
    """The comparison as Markdown: one row per method, then the position bias per number of orders."""
    table = column_table(result["rows"], [
        ("method", "method", None), ("s/group", "seconds_per_group", ".2f"), ("top-1 = human paraphrase", "top1_paraphrase", ".0%"),
        ("top-1 = copy", "top1_copy", ".0%"), ("Kendall τ vs pointwise", "kendall_vs_pointwise", ".2f"),
        ("same top-1 as pointwise", "top1_agreement", ".0%")])
    bias = markdown_table(["orders", "spread of log p(best), identical candidates"],
                          [[str(k), f"{v:.3f}"] for k, v in result["bias"].items()], align="rr")
    return f"{result['groups']} groups of {result['size']}:\n\n{table}\n\nPosition bias left:\n\n{bias}\n"
