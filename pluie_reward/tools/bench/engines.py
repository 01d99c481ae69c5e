"""Engines side by side: the same :meth:`Judge.score` calls on the transformers engine and on vLLM, each in the
steady state of a training loop (caches cleared, vLLM's too, then an untimed one-item call leaves the static
prefix), in rounds whose first engine rotates; pairs/s is the median over rounds, scores compared with the first's.

Example:
    $ pluie-reward bench engines --engines transformers,vllm --workloads mrpc,grpo
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ...core.judge import Judge
from ..shared import UsageError
from ..report import markdown_table
from .measure import quiet_vllm_logs, timed
from .run import two_fields

ENGINES = ("transformers", "vllm")
MAX_DIFF = 1e-3


def load_vllm_judge(model: str | None, dtype: str, **options: Any) -> Any:
    """The judge on vLLM in this process (its INFO logs kept off the report unless asked for)."""
    quiet_vllm_logs()
    try:
        return Judge.load(model, engine="vllm", dtype=dtype, **options)
    except ImportError as err:
        raise UsageError(f"--engines vllm: {err}") from None


@dataclass
class EngineComparison:
    """Pairs/s per round and scores of each engine on one workload."""

    workload: str
    description: str
    n: int
    rates: dict[str, list[float]] = field(default_factory=dict)
    scores: dict[str, list[float]] = field(default_factory=dict)

    def pairs_per_second(self, engine: str) -> float:
        """Median over rounds."""
        return statistics.median(self.rates[engine])

    def ratio(self, engine: str, baseline: str) -> float:
        """pairs/s of ``engine`` over ``baseline``'s."""
        return self.pairs_per_second(engine) / self.pairs_per_second(baseline)

    def max_diff(self, engine: str) -> float:
        """max |score(engine) - score(first engine)| over the workload.

        Example:
            >>> c = EngineComparison("w", "", 2, scores={"a": [1.0, 2.0], "b": [1.0, 2.5]})
            >>> c.max_diff("b")
            0.5
        """
        first = next(iter(self.scores.values()))
        return max(abs(a - b) for a, b in zip(self.scores[engine], first, strict=True))


def compare_engines(judges: dict[str, Any], workload: Any, template: str = "para-fs", rounds: int = 3,
                    log: Callable[[str], None] = lambda _: None) -> EngineComparison:
    """Time ``Judge.score`` of every judge (engine name -> judge, the first the reference of the score differences)
    on a :class:`~pluie_reward.tools.bench.run.Workload`, interleaved in ``rounds``; the per-round rates and the
    last round's scores.

    Example:
        >>> from pluie_reward.tools.bench.run import Workload
        >>> workload = Workload("demo", ["The cat sleeps.", "Prices rose."], ["A cat is asleep.", "Prices fell."])
        >>> small = Judge.from_model(judge.model, judge.tokenizer, batch_tokens=256)  # e.g. Judge.load(engine="vllm")
        >>> c = compare_engines({"transformers": judge, "batch_tokens=256": small}, workload, rounds=1)
        >>> c.ratio("batch_tokens=256", "transformers") > 0, c.max_diff("batch_tokens=256") < 1e-3
        (True, True)
    """
    if rounds < 1:
        raise UsageError("--rounds must be at least 1.")
    names = list(judges)
    fields = two_fields(judges[names[0]], template).template.fields
    out = EngineComparison(workload.name, workload.description, len(workload))
    items = dict(zip(fields, (workload.sources, workload.hypotheses)))
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            judge = judges[name]
            judge.clear_cache()
            judge.score(template, **dict(zip(fields, (workload.sources[:1], ["-"]))))  # the static prefix, as a run leaves it
            seconds, scores, _ = timed(None, lambda: judge.score(template, **items))
            out.rates.setdefault(name, []).append(len(workload) / seconds)
            out.scores[name] = list(scores)
            log(f"  {workload.name} round {r + 1}/{rounds} engine {name}: {seconds:.1f} s")
    return out


def format_engine_table(comparisons: Sequence[EngineComparison]) -> str:
    """The engine comparison as a Markdown table (ratios and differences against the first engine)."""
    if not comparisons:
        return ""
    names = list(comparisons[0].rates)
    base = names[0]
    title = f"Engines side by side (Judge.score, steady state, median of rounds; ratio and max |diff| against {base}):"
    lines = [markdown_table(
        ["workload", "engine", "pairs/s", "per round", "ratio", "max abs diff"],
        [[c.workload, name, f"{c.pairs_per_second(name):.2f}", " ".join(f"{x:.2f}" for x in c.rates[name]),
          f"{c.ratio(name, base):.2f}", "-" if name == base else f"{c.max_diff(name):.1e}"]
         for c in comparisons for name in names], "llrlrr", title)]
    worst = max((c.max_diff(n) for c in comparisons for n in names[1:]), default=None)
    if worst is not None:
        verdict = "within" if worst <= MAX_DIFF else "OUTSIDE"
        lines += ["", f"Largest score difference between engines: {worst:.1e} ({verdict} the tolerance {MAX_DIFF:g})."]
    return "\n".join(lines)


def comparison_json(c: EngineComparison) -> dict[str, Any]:
    """One comparison as JSON-ready numbers."""
    names = list(c.rates)
    return {"workload": c.workload, "description": c.description, "n": c.n,
            "engines": {n: {"pairs_per_second": c.pairs_per_second(n), "rates": c.rates[n], "ratio": c.ratio(n, names[0])}
                        for n in names},
            "max_diff": {n: c.max_diff(n) for n in names[1:]}}
