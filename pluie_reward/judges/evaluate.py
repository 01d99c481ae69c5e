"""Measure a judge the way the README reports the default one: ``python -m pluie_reward.judges.evaluate``.

* MRPC (held out: never trained on): the first ``--mrpc`` pairs of ``ms-mrpc.json``; ROC-AUC,
  accuracy at threshold 0 and at the best threshold (a posteriori), pairs/s of ``Judge.score``.
* PARAPHRASUS error rates (threshold 0) on a seeded sample of ``--limit`` pairs per dataset, marked
  ``held out`` or ``seen in training`` (STS, SIMP and SNLI files were training sources of the default adapter).

Example (shell):
    python -m pluie_reward.judges.evaluate --model embedded-base     # the untuned model
    python -m pluie_reward.judges.evaluate                           # the default judge
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from ..core.judge import Judge
from ..tools.evaluation.metrics import best_threshold, classification_metrics, roc_auc
from ..tools.evaluation.paraphrasus import DATASET_NAMES, find_data_dir, load_pairs
from . import DEFAULT_TEMPLATE

TRAINED_ON = ("STS-H", "SNLI", "STS", "SIMP")  # PARAPHRASUS datasets the default adapter saw (judges.build)


def evaluate(judge: Any, data_dir: "str | Path | None" = None, mrpc: int = 400, limit: int = 100, seed: int = 0,
             template: str = DEFAULT_TEMPLATE) -> dict[str, Any]:
    """MRPC and PARAPHRASUS numbers of ``judge`` with ``template``.

    Returns:
        ``{"mrpc": {n, roc_auc, accuracy_at_0, best_threshold, accuracy_at_best, pairs_per_second},
        "paraphrasus": {dataset: {n, error_rate, trained_on}}}``.
    """
    folder = find_data_dir(data_dir)
    rows = list(json.loads((folder / "ms-mrpc.json").read_text(encoding="utf-8")).values())[:mrpc]
    sources, hypotheses, labels = [r["sentence1"] for r in rows], [r["sentence2"] for r in rows], [r["label"] for r in rows]
    judge.clear_cache()
    start = time.perf_counter()
    scores = judge.score(template, source=sources, hypothesis=hypotheses, use_cache=False)
    seconds = time.perf_counter() - start
    best = best_threshold(scores, labels, by="accuracy")
    out: dict[str, Any] = {"judge": judge.name, "template": template, "mrpc": {
        "n": len(rows), "roc_auc": roc_auc(scores, labels),
        "accuracy_at_0": classification_metrics(scores, labels, 0.0)["accuracy"],
        "best_threshold": best["threshold"], "accuracy_at_best": best["accuracy"],
        "positives": sum(labels), "said_yes_at_0": sum(s > 0 for s in scores),
        "pairs_per_second": len(rows) / seconds,
    }}
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
             f"threshold {m['best_threshold']:+.2f}; {m['pairs_per_second']:.1f} pairs/s", "",
             "| PARAPHRASUS dataset | n | error rate | |", "|---|---:|---:|---|"]
    for name, r in result["paraphrasus"].items():
        lines.append(f"| {name} | {r['n']} | {r['error_rate']:.1%} | {'seen in training' if r['trained_on'] else 'held out'} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: evaluate a judge and print Markdown (``--json FILE`` also writes the numbers)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="judge to load (default: the default judge; embedded-base: untuned)")
    parser.add_argument("--data-dir", default=None, help="PARAPHRASUS folder (default: ../shared/data/paraphrasus)")
    parser.add_argument("--mrpc", type=int, default=400)
    parser.add_argument("--limit", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    try:
        result = evaluate(Judge.load(args.model), args.data_dir, args.mrpc, args.limit, args.seed)
    except (FileNotFoundError, ValueError) as err:
        print(f"pluie_reward.judges.evaluate: error: {err}", file=sys.stderr)
        return 2
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
