"""Measure a judge the way the README reports the default one: ``python scripts/evaluate_judge.py`` (a maintainer
script of the repository, not installed with the package).

* MRPC (held out: never trained on): the first ``--mrpc`` pairs of ``ms-mrpc.json``; ROC-AUC,
  accuracy at threshold 0 and at the best threshold (a posteriori), pairs/s of ``Judge.score``.
* Meaning flips of held-out sentences: each MRPC paraphrase's hypothesis with one rule-made meaning
  flip (:mod:`~pluie_reward.tools.tune.hard_negatives`: negation, antonym, number, date, name, role
  swap), paired with its source: the share the judge accepts (above 0), the share scoring above the
  honest paraphrase it was made from, and both per rule. The build trains on such flips of *other*
  sentences (STS, SIMP); these sentences it never saw.
* PARAPHRASUS error rates (threshold 0) on a seeded sample of ``--limit`` pairs per dataset, marked
  ``held out`` or ``seen in training`` (STS, SIMP and SNLI files were training sources of the default adapter).

Example (shell):
    python scripts/evaluate_judge.py --model embedded-base     # the untuned model
    python scripts/evaluate_judge.py                           # the default judge
    python scripts/evaluate_judge.py --adapter out/judge-adapter   # a rebuilt adapter
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from pluie_reward.core.judge import Judge
from pluie_reward.judges import DEFAULT_TEMPLATE
from pluie_reward.tools.bench.measure import timed
from pluie_reward.tools.evaluation.metrics import best_threshold, classification_metrics, roc_auc
from pluie_reward.tools.evaluation.paraphrasus import DATASET_NAMES, find_data_dir, load_pairs
from pluie_reward.tools.report import markdown_table, percent
from pluie_reward.tools.tune.hard_negatives import MEANING_RULES, hard_negatives

TRAINED_ON = ("STS-H", "SNLI", "STS", "SIMP")  # PARAPHRASUS datasets the default adapter saw (build_judge)


def held_out_flips(judge: Any, sources: Sequence[str], hypotheses: Sequence[str], honest: Sequence[float],
                   template: str = DEFAULT_TEMPLATE, seed: int = 0) -> dict[str, Any]:
    """How often ``judge`` accepts a meaning flip of a paraphrase it has scored: one rule-made flip per
    hypothesis (the rules that apply, least used first), paired with the same source.

    Args:
        judge: a :class:`~pluie_reward.core.judge.Judge`.
        sources, hypotheses: paraphrase pairs (e.g. MRPC's label-1 pairs).
        honest: the judge's scores of those pairs, in the same order.
        template: the judge's template.
        seed: the flips' random choices.

    Returns:
        ``{"n", "accepted", "above_honest", "mean", "honest_mean", "honest_accepted", "roc_auc", "by_rule":
        {rule: {"n", "accepted", "above_honest"}}}``: shares in [0, 1], means in nats; accepted = score > 0;
        ``honest_*``: the paraphrases the flips were made from; ``roc_auc``: those paraphrases against the
        flips, unpaired (how far one threshold can tell them apart; ``above_honest`` is the paired view).

    Example:
        >>> class Overlap:  # a judge that only counts shared words: a flip keeps nearly all of them
        ...     def score(self, template, source, hypothesis):
        ...         return [len(set(s.split()) & set(h.split())) - 2.0 for s, h in zip(source, hypothesis)]
        >>> src, hyp = ["The shop opened on Monday."], ["The shop was opened on Monday."]
        >>> out = held_out_flips(Overlap(), src, hyp, Overlap().score("", src, hyp))
        >>> out["n"], out["accepted"], out["by_rule"]
        (1, 1.0, {'date': {'n': 1, 'accepted': 1.0, 'above_honest': 0.0}})
    """
    if not len(sources) == len(hypotheses) == len(honest):
        raise ValueError(f"sources, hypotheses and honest scores differ in length: {len(sources)}, {len(hypotheses)}, "
                         f"{len(honest)}.")
    pair = {h: (s, score) for s, h, score in zip(sources, hypotheses, honest)}  # a repeated hypothesis: its last pair
    flips = hard_negatives(list(pair), n=len(pair), seed=seed, rules=MEANING_RULES)
    if not flips:
        raise ValueError("no meaning-flip rule applies to any of these hypotheses.")
    scores = judge.score(template, source=[pair[f["sentence"]][0] for f in flips],
                         hypothesis=[f["flipped"] for f in flips])
    honest_scores = [pair[f["sentence"]][1] for f in flips]
    above = [s > h for s, h in zip(scores, honest_scores)]
    by_rule: dict[str, dict[str, Any]] = {}
    for rule in MEANING_RULES:
        rows = [i for i, f in enumerate(flips) if f["rule"] == rule]
        if rows:
            by_rule[rule] = {"n": len(rows), "accepted": sum(scores[i] > 0 for i in rows) / len(rows),
                             "above_honest": sum(above[i] for i in rows) / len(rows)}
    return {"n": len(flips), "accepted": sum(s > 0 for s in scores) / len(flips), "above_honest": sum(above) / len(flips),
            "mean": sum(scores) / len(scores), "honest_mean": sum(honest_scores) / len(flips),
            "honest_accepted": sum(s > 0 for s in honest_scores) / len(flips),
            "roc_auc": roc_auc(honest_scores + list(scores), [1] * len(flips) + [0] * len(flips)), "by_rule": by_rule}


def evaluate(judge: Any, data_dir: "str | Path | None" = None, mrpc: int = 400, limit: int = 100, seed: int = 0,
             template: str = DEFAULT_TEMPLATE) -> dict[str, Any]:
    """MRPC and PARAPHRASUS numbers of ``judge`` with ``template``.

    Returns:
        ``{"mrpc": {n, roc_auc, accuracy_at_0, best_threshold, accuracy_at_best, pairs_per_second},
        "flips": held_out_flips(...) of MRPC's paraphrases, "paraphrasus": {dataset: {n, error_rate, trained_on}}}``.
    """
    folder = find_data_dir(data_dir)
    rows = list(json.loads((folder / "ms-mrpc.json").read_text(encoding="utf-8")).values())[:mrpc]
    sources, hypotheses, labels = [r["sentence1"] for r in rows], [r["sentence2"] for r in rows], [r["label"] for r in rows]
    judge.clear_cache()
    seconds, scores, _ = timed(None, lambda: judge.score(template, source=sources, hypothesis=hypotheses, use_cache=False))
    best = best_threshold(scores, labels, by="accuracy")
    out: dict[str, Any] = {"judge": judge.name, "template": template, "mrpc": {
        "n": len(rows), "roc_auc": roc_auc(scores, labels),
        "accuracy_at_0": classification_metrics(scores, labels, 0.0)["accuracy"],
        "best_threshold": best["threshold"], "accuracy_at_best": best["accuracy"],
        "positives": sum(labels), "said_yes_at_0": sum(s > 0 for s in scores),
        "pairs_per_second": len(rows) / seconds,
    }}
    positive = [i for i, label in enumerate(labels) if label]
    out["flips"] = held_out_flips(judge, [sources[i] for i in positive], [hypotheses[i] for i in positive],
                                  [scores[i] for i in positive], template, seed)
    others = [d for d in DATASET_NAMES if d != "MRPC"]
    pairs = load_pairs(folder, datasets=others, limit=limit, seed=seed)
    out["paraphrasus"] = {}
    for name, items in pairs.items():
        got = judge.score(template, source=[p.sentence1 for p in items], hypothesis=[p.sentence2 for p in items])
        wrong = sum((s > 0) != p.expected for s, p in zip(got, items))
        out["paraphrasus"][name] = {"n": len(items), "error_rate": wrong / len(items), "trained_on": name in TRAINED_ON}
    return out


def markdown(result: dict[str, Any]) -> str:
    """The numbers as the README shows them."""
    m = result["mrpc"]
    lines = [f"`{result['judge']}`, template `{result['template']}`:", "",
             f"MRPC ({m['n']} pairs, held out): ROC-AUC {m['roc_auc']:.3f}, accuracy {m['accuracy_at_0']:.1%} at 0 "
             f"({m['said_yes_at_0']} Yes for {m['positives']} paraphrases), {m['accuracy_at_best']:.1%} at the best "
             f"threshold {m['best_threshold']:+.2f}; {m['pairs_per_second']:.1f} pairs/s", ""]
    if "flips" in result:
        f = result["flips"]
        lines += [f"Meaning flips of MRPC's paraphrases (held out, {f['n']}): {f['accepted']:.1%} accepted, "
                  f"{f['above_honest']:.1%} above their honest paraphrase; mean {f['mean']:+.2f} "
                  f"(honest {f['honest_mean']:+.2f}, {f['honest_accepted']:.1%} accepted); ROC-AUC honest vs flip "
                  f"{f['roc_auc']:.3f}", "",
                  markdown_table(["rule", "n", "accepted", "above honest"], [
                      [rule, r["n"], percent(r["accepted"]), percent(r["above_honest"])] for rule, r in f["by_rule"].items()
                  ], align="lrrr"), ""]
    lines.append(markdown_table(["PARAPHRASUS dataset", "n", "error rate", ""], [
        [name, r["n"], percent(r["error_rate"]), "seen in training" if r["trained_on"] else "held out"]
        for name, r in result["paraphrasus"].items()
    ], align="lrrl"))
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: evaluate a judge and print Markdown (``--json FILE`` also writes the numbers)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="judge to load (default: the default judge; embedded-base: untuned)")
    parser.add_argument("--adapter", default=None, help="a judge adapter folder on the embedded base (e.g. a rebuild)")
    parser.add_argument("--data-dir", default=None, help="PARAPHRASUS folder (default: ../shared/data/paraphrasus)")
    for option, default in (("--mrpc", 400), ("--limit", 100), ("--seed", 0)):
        parser.add_argument(option, type=int, default=default)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    try:
        result = evaluate(Judge.load(args.model, adapter=args.adapter), args.data_dir, args.mrpc, args.limit, args.seed)
    except (FileNotFoundError, ValueError) as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 2
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
