"""Make a small judge better: tune a judge adapter on synthetic pairs, evaluate it on PARAPHRASUS.

Two runs of ``pluie-reward tune`` on the untuned embedded SmolLM2-135M-Instruct (``embedded-base``)
with the zero-shot ``para-direct`` template (the student):

* **distill**: the teacher is the default judge (the same base with the packaged PLUIE adapter)
  with the few-shot ``para-fs`` template; the student's adapter learns to give, zero-shot, the
  log-ratios the default judge gives. ``--teacher embedded-base`` distils the untuned model's
  few-shot template instead.
* **labels**: the adapter learns the synthetic pairs' labels.

Training pairs are *synthetic* (:mod:`pluie_reward.tools.tune.synthetic`: templated sentences and
rule-made edits, labels known by construction); the PARAPHRASUS files are only used for evaluation
(labelled MRPC and STS-H pairs). Writes ``OUT/{distill,labels}/`` (adapter folders with their cards)
and ``OUT/summary.md``.

    python examples/tune_small_judge.py --threads 1                  # CPU-sized: ~16 min on 2 shared CPU cores
    python examples/tune_small_judge.py --train 32 --eval-per-dataset 8 --epochs 1   # smoke run
    python examples/tune_small_judge.py --model Qwen/Qwen2.5-0.5B-Instruct --teacher Qwen/Qwen2.5-7B-Instruct
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from pluie_reward.common.threads import fit_threads
from pluie_reward.tools.shared import comma_list


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("out/tune_demo"))
    parser.add_argument("--data-dir", default=None, help="PARAPHRASUS folder (default: $PARAPHRASUS_DIR or ../shared/data/paraphrasus)")
    parser.add_argument("--train", type=int, default=240, help="synthetic pairs (20%% held out)")
    parser.add_argument("--eval-per-dataset", type=int, default=120, help="PARAPHRASUS pairs per dataset (MRPC, STS-H)")
    parser.add_argument("--epochs", type=float, default=2.0)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--model", default=None, help="the student's base (default: the embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--teacher", default="embedded", help="the teacher judge (default: embedded, the default judge; "
                        "embedded-base: the untuned model; or an HF id / folder), with para-fs")
    parser.add_argument("--runs", type=comma_list(["distill", "labels"], unique=True), default="distill,labels",
                        help="comma-separated: distill, labels")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's, one per core)")
    args = parser.parse_args(argv)
    fit_threads()  # before torch loads: on a busy CPU, sleeping threads, one per free core (it does not collapse them)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    from pluie_reward.tools.cli.main import main as cli
    from pluie_reward.tools.evaluation.paraphrasus import load_pairs
    from pluie_reward.tools.tune.report import metrics_table
    from pluie_reward.tools.tune.synthetic import make_pairs

    args.out.mkdir(parents=True, exist_ok=True)
    train_file, eval_file = args.out / "synthetic_pairs.jsonl", args.out / "paraphrasus.jsonl"
    with train_file.open("w", encoding="utf-8") as handle:
        for pair in make_pairs(args.train, seed=args.seed):
            handle.write(json.dumps(pair) + "\n")
    pairs = load_pairs(args.data_dir, datasets=["MRPC", "STS-H"], limit=args.eval_per_dataset, seed=args.seed)
    with eval_file.open("w", encoding="utf-8") as handle:
        for dataset, items in pairs.items():
            for p in items:
                row = {"source": p.sentence1, "hypothesis": p.sentence2, "label": p.expected, "dataset": dataset}
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")

    common = ["tune", "--template", "para-direct", "--input", str(train_file), "--eval-input", str(eval_file),
              "--eval-label-column", "label", "--epochs", str(args.epochs), "--learning-rate", str(args.learning_rate),
              "--seed", str(args.seed), "--overwrite"]
    if args.model:
        common += ["--model", args.model]
    runs = {
        "distill": ["--teacher-template", "para-fs", "--teacher", args.teacher],
        "labels": ["--label-column", "label"],
    }
    summary = ["# Tuning a small judge: measured on this machine", ""]
    for name in args.runs:
        start = time.time()
        code = cli(common + runs[name] + ["--output", str(args.out / name)])
        if code:
            return code
        card = json.loads((args.out / name / "pluie_tune.json").read_text())
        minutes = (time.time() - start) / 60
        summary += [f"## {name}: {card['supervision']}", "",
                    f"{card['data']['train']} training pairs, {card['data']['heldout']} held-out; loss {card['loss']}; "
                    f"{minutes:.1f} min.", "", metrics_table(card["evaluation"]), ""]
    (args.out / "summary.md").write_text("\n".join(summary), encoding="utf-8")
    print("\n".join(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
