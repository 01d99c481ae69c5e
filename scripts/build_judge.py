"""Rebuild the default judge's adapter: ``python scripts/build_judge.py`` (a maintainer script of the
repository, not installed with the package).

The embedded SmolLM2-135M-Instruct says No to nearly everything. This script tunes a LoRA adapter on
it with :func:`pluie_reward.tune` (labels, BCE on the PLUIE logit of the default template) and
writes it to ``pluie_reward/judges/smollm2-pluie/`` (or ``--output``), with its card. Seeded.

Training data (:data:`SOURCES`; never MRPC, ANLI nor TRUE, the PARAPHRASUS sets reported as held
out): rule-made pairs of :func:`~pluie_reward.tools.tune.synthetic.make_pairs`, and from PARAPHRASUS
files STS Benchmark pairs (similarity >= 4 / <= 1.5), OneStopEnglish simplifications (paraphrases)
and SNLI premise/hypothesis pairs (not paraphrases), and rule-made hard negatives
(:mod:`~pluie_reward.tools.tune.hard_negatives`: the hypothesis of an STS or SIMP paraphrase with one
meaning flip -- a negation, an antonym, a number, date or name changed, two roles swapped -- or with
a claim or a sentence of commentary added, paired with the same source, not a paraphrase). The STS-H, STS, SNLI and SIMP error rates are
therefore reported as *seen in training*. SICK (CC BY-NC-SA, non-commercial) is not used: this package
is Apache-2.0.

The files are read from ``../shared/data/paraphrasus`` (``--data``) at build time; none is shipped.

Example (shell):
    python scripts/build_judge.py --data ../shared/data/paraphrasus --output /tmp/smollm2-pluie
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any, Sequence

from pluie_reward.judges import DEFAULT_ADAPTER_DIR, DEFAULT_TEMPLATE
from pluie_reward.tools.tune.config import TuneConfig
from pluie_reward.tools.tune.hard_negatives import MEANING_RULES, hard_negatives
from pluie_reward.tools.tune.run import tune
from pluie_reward.tools.tune.synthetic import make_pairs

SOURCES = {
    "synthetic": "rule-made pairs of pluie_reward.tools.tune.synthetic.make_pairs (Apache-2.0, this package)",
    "snli": "SNLI via PARAPHRASUS stannlp-snli-pre-hyp.json, premise/hypothesis -> not a paraphrase (CC BY-SA 4.0)",
    "sts": "STS Benchmark test via PARAPHRASUS stsbenchmark-test-sts.json, similarity >= 4.0 -> paraphrase, <= 1.5 -> not "
           "(sentences from news, captions and forums; CC BY-SA 4.0 where the sources allow, see the STS Benchmark)",
    "simp": "OneStopEnglish via PARAPHRASUS onestop_parallel_all_pairs.json, a text and its simplification -> paraphrase "
            "(CC BY-SA 4.0)",
    "hard": "rule-made meaning flips and additions (pluie_reward.tools.tune.hard_negatives, Apache-2.0) of the hypotheses of "
            "the sts and simp paraphrases above, paired with their source -> not a paraphrase (the sentences' licence: CC BY-SA 4.0)",
}
# Never trained on: the PARAPHRASUS datasets reported as held out (MRPC, ANLI, TRUE), and SICK, whose
# licence (CC BY-NC-SA 3.0) forbids commercial use of an Apache-2.0 package's weights.
HELD_OUT = ("ms-mrpc.json", "fb-anli-pre-hyp.json", "fb-anli-hyp-pre.json", "amr_true_paraphrases.json")
NOT_LICENSED = ("sickr-sts.json",)


def _rows(folder: Path, name: str) -> list[dict[str, Any]]:
    if name in HELD_OUT:
        raise ValueError(f"{name} is a held-out benchmark: the default judge is never trained on it.")
    if name in NOT_LICENSED:
        raise ValueError(f"{name}: its licence does not allow training the package's Apache-2.0 default judge on it.")
    path = folder / name
    if not path.is_file():
        raise FileNotFoundError(f"{path}: PARAPHRASUS data not found; pass --data DIR (../shared/data/paraphrasus).")
    return list(json.loads(path.read_text(encoding="utf-8")).values())


def training_pairs(folder: Path, per_source: int = 200, seed: int = 0, hard: int = 0,
                   additions: int | None = None) -> list[dict[str, Any]]:
    """Balanced, seeded training pairs from the sources of :data:`SOURCES`: ``per_source`` synthetic
    pairs (half each way), and from the PARAPHRASUS files ``3/2 per_source`` STS and ``per_source``
    SIMP paraphrases, then as many negatives (``per_source`` STS, ``hard`` meaning flips of those
    paraphrases' hypotheses, the rest SNLI) as positives.

    Args:
        additions: how many of the ``hard`` negatives are additions, from 0 to ``hard`` (the rest meaning
            flips, each sentence edited once; more additions when the flips run out of sentences they can
            edit); ``None``: the rules take turns, so additions, which apply to every sentence, fill what
            the rarer rules leave (about a quarter).

    Returns:
        Dicts with ``source``, ``hypothesis``, ``label`` and ``origin``; a hard negative also has
        ``contrast``, the honest pair it was made from (``source``, ``hypothesis``, in the same order).

    Raises:
        ValueError: ``additions`` outside 0..``hard``; a held-out or non-commercial file.
    """
    if additions is not None and not 0 <= additions <= hard:
        raise ValueError(f"--additions {additions} (additions=): give a number from 0 to the hard negatives' "
                         f"count, --hard-negatives {hard} (hard=).")
    rng = random.Random(seed)

    def take(rows: list[dict[str, Any]], n: int, label: bool, origin: str) -> list[dict[str, Any]]:
        rows = [r for r in rows if r["sentence1"] != r["sentence2"]]
        rng.shuffle(rows)
        return [{"source": r["sentence1"], "hypothesis": r["sentence2"], "label": label, "origin": origin} for r in rows[:n]]

    pairs = [{**{k: p[k] for k in ("source", "hypothesis", "label")}, "origin": "synthetic"} for p in make_pairs(per_source, seed)]
    sts = _rows(folder, "stsbenchmark-test-sts.json")
    positives = (take([r for r in sts if r["score"] >= 4.0], 3 * per_source // 2, True, "sts")
                 + take(_rows(folder, "onestop_parallel_all_pairs.json"), per_source, True, "simp"))
    negatives = take([r for r in sts if r["score"] <= 1.5], per_source, False, "sts")
    if hard:  # the same source with its paraphrase's meaning flipped: one word apart from a Yes
        source_of = {p["hypothesis"]: p["source"] for p in positives}
        hard = min(hard, len(positives) - len(negatives))
        if additions is None:
            made = hard_negatives(list(source_of), hard, seed)
        else:
            made = hard_negatives(list(source_of), hard - min(additions, hard), seed, rules=MEANING_RULES)
            edited = {f["sentence"] for f in made}
            made += hard_negatives([s for s in source_of if s not in edited], hard - len(made), seed, rules=("addition",))
        negatives += [{"source": source_of[f["sentence"]], "hypothesis": f["flipped"], "label": False, "origin": "hard",
                       "contrast": {"source": source_of[f["sentence"]], "hypothesis": f["sentence"]}} for f in made]
    negatives += take(_rows(folder, "stannlp-snli-pre-hyp.json"), len(positives) - len(negatives), False, "snli")
    pairs += positives + negatives
    for p in pairs:  # both directions appear: a paraphrase judge should not care which sentence comes first
        if rng.random() < 0.5:
            p["source"], p["hypothesis"] = p["hypothesis"], p["source"]
            if "contrast" in p:  # the honest pair in the same order
                p["contrast"] = {"source": p["contrast"]["hypothesis"], "hypothesis": p["contrast"]["source"]}
    rng.shuffle(pairs)
    return pairs


def half_precision(path: Path) -> None:
    """Store the adapter's weights in float16 (half the package size; PEFT loads them into a float32
    model as float32, so the merged default judge is what the tests compare with the adapter file)."""
    import torch
    from safetensors.torch import load_file, save_file

    tensors = {k: v.to(torch.float16) for k, v in load_file(path).items()}
    save_file(tensors, path, metadata={"format": "pt"})


def build(data: Path, output: Path, per_source: int = 200, epochs: float = 1.5, learning_rate: float = 2e-4,
          lora_r: int = 16, seed: int = 0, overwrite: bool = True, progress: bool = True, hard: int = 200,
          additions: int | None = None, contrast_weight: float = 0.0) -> dict[str, Any]:
    """Tune the default judge's adapter and write it with its card; returns the card. ``hard`` and
    ``additions``: see :func:`training_pairs`; ``contrast_weight`` > 0: each hard negative also scored
    against the honest pair it was made from (:func:`~pluie_reward.tools.tune.loss.contrast_loss`)."""
    pairs = training_pairs(data, per_source, seed, hard, additions)
    config = TuneConfig(epochs=epochs, learning_rate=learning_rate, lora_r=lora_r, lora_alpha=2.0 * lora_r,
                        target_modules="all-linear", batch_size=16, heldout_fraction=0.1, seed=seed, progress=progress,
                        contrast_weight=contrast_weight)
    result = tune(None, template=DEFAULT_TEMPLATE, fields={"source": [p["source"] for p in pairs],
                                                           "hypothesis": [p["hypothesis"] for p in pairs]},
                  labels=[p["label"] for p in pairs], contrast=[p.get("contrast") for p in pairs] if contrast_weight else None,
                  config=config, output_dir=output, overwrite=overwrite)
    half_precision(output / "adapter_model.safetensors")
    counts: dict[str, dict[str, int]] = {}
    for p in pairs:
        counts.setdefault(p["origin"], {"paraphrase": 0, "not": 0})["paraphrase" if p["label"] else "not"] += 1
    provenance = {"sources": {k: {"what": SOURCES[k], **counts[k]} for k in counts},
                  "held_out_never_trained_on": list(HELD_OUT), "seed": seed,
                  "command": f"python scripts/build_judge.py --per-source {per_source} --epochs {epochs} "
                             f"--learning-rate {learning_rate} --lora-r {lora_r} --seed {seed} --hard-negatives {hard}"
                             + ("" if additions is None else f" --additions {additions}")
                             + (f" --contrast-weight {contrast_weight:g}" if contrast_weight else "")}
    (output / "data.json").write_text(json.dumps(provenance, indent=1), encoding="utf-8")
    return {**result.card, "provenance": provenance}


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of the build."""
    here = Path(__file__).resolve()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=here.parents[1].parent / "shared" / "data" / "paraphrasus",
                        help="PARAPHRASUS folder (default: ../shared/data/paraphrasus beside the checkout)")
    parser.add_argument("--output", type=Path, default=DEFAULT_ADAPTER_DIR, help="adapter folder (default: the packaged one)")
    for option, default in (("--per-source", 200), ("--epochs", 1.5), ("--learning-rate", 2e-4), ("--lora-r", 16), ("--seed", 0)):
        parser.add_argument(option, type=type(default), default=default)
    parser.add_argument("--hard-negatives", type=int, default=200,
                        help="rule-made meaning flips among the negatives (instead of as many SNLI pairs; 0: none)")
    parser.add_argument("--additions", type=int, default=None,
                        help="how many of the hard negatives are additions (default: the rules take turns, about a quarter)")
    parser.add_argument("--contrast-weight", type=float, default=0.0,
                        help="weight of a pairwise term: each hard negative at least 2 nats below the honest pair it was "
                             "made from (default 0: labels only)")
    args = parser.parse_args(argv)
    try:
        card = build(args.data, args.output, args.per_source, args.epochs, args.learning_rate, args.lora_r, args.seed,
                     hard=args.hard_negatives, additions=args.additions, contrast_weight=args.contrast_weight)
    except (FileNotFoundError, ValueError) as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(card["evaluation"], indent=1, default=str))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
