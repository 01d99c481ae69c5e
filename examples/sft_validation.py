"""Fine-tune a paraphraser with TRL's SFTTrainer and validate it with PLUIE during training.

At every evaluation, PluieCallback makes the generator paraphrase held-out sentences, the judge
scores the paraphrases (PLUIE, log p(Yes) - log p(No)), and ``eval_pluie_mean`` drives best-model
selection and early stopping. Tables of (prompt, generation, score) go to ``OUTPUT/pluie/``.

Defaults are CPU-sized: the embedded SmolLM2-135M-Instruct is both the generator (a trainable
copy) and the frozen judge, trained on 16 built-in pairs. With ``--lora --shared-judge`` a single
copy of the weights serves both: the judge scores with the LoRA adapter disabled. Examples::

    python examples/sft_validation.py                        # ~minutes on 2 CPU cores
    python examples/sft_validation.py --steps 4 --eval-steps 2 --eval-items 4 --max-new-tokens 12   # smoke run
    python examples/sft_validation.py --generator tiny --judge tiny --steps 4 --eval-steps 2       # seconds, random models
    python examples/sft_validation.py --generator HuggingFaceTB/SmolLM2-360M-Instruct --judge Qwen/Qwen2.5-1.5B-Instruct \\
        --data my_pairs.jsonl --steps 500 --eval-steps 50 --eval-items 128 --lora
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from pluie_reward.common.threads import fit_threads

PROMPT = "Paraphrase the following sentence. Answer with the paraphrase only.\n\n{source}"

# hand-written (source, paraphrase) pairs: the default training data
PAIRS = [
    ("The meeting was postponed because the manager was ill.", "Because the manager was sick, the meeting was put off."),
    ("She finished the report two days before the deadline.", "She completed the report two days ahead of the deadline."),
    ("Heavy rain caused flooding in several neighbourhoods.", "Several neighbourhoods were flooded after heavy rain."),
    ("The company plans to hire fifty new engineers next year.", "Next year the firm intends to recruit fifty more engineers."),
    ("He forgot his umbrella and got soaked on the way home.", "Having forgotten his umbrella, he got drenched walking home."),
    ("The museum will be closed for renovation until spring.", "The museum is shut for renovation works until the spring."),
    ("Prices of fresh vegetables rose sharply this month.", "Fresh vegetables became much more expensive this month."),
    ("The children were excited to see snow for the first time.", "Seeing snow for the first time thrilled the children."),
    ("Our train was delayed by almost an hour this morning.", "This morning our train ran nearly an hour late."),
    ("The new library has a large collection of rare books.", "The new library holds many rare books."),
    ("Doctors recommend drinking water regularly during hot weather.", "In hot weather, doctors advise drinking water often."),
    ("The team celebrated after winning the national championship.", "After taking the national title, the team celebrated."),
    ("Traffic on the bridge was stopped after an accident.", "An accident brought traffic on the bridge to a halt."),
    ("The author signed copies of her novel at the bookstore.", "At the bookshop, the writer signed copies of her novel."),
    ("Scientists discovered a new species of frog in the rainforest.", "A new frog species was found in the rainforest by scientists."),
    ("The restaurant is famous for its homemade pasta.", "The restaurant is well known for the pasta it makes itself."),
]
# held-out sources the generator paraphrases at each evaluation
HELD_OUT = [
    "Many students struggle to find affordable housing in the city.",
    "The old factory was turned into a modern art gallery.",
    "He apologised for arriving late to the interview.",
    "The festival attracts thousands of visitors every summer.",
    "The software update fixed several security problems.",
    "She learned to play the piano when she was seven.",
    "The village has no shop, so residents drive to the next town.",
    "Volunteers cleaned the beach on Saturday morning.",
]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--generator", default="embedded", help="'embedded' (SmolLM2-135M-Instruct), 'tiny' (random, for smoke runs) or an HF id/folder")
    p.add_argument("--judge", default="embedded", help="'embedded', 'tiny' or an HF id/folder/.gguf for Judge.load (ignored with --shared-judge)")
    p.add_argument("--template", default="para-fs", help="judge template (default para-fs)")
    p.add_argument("--data", type=Path, default=None,
                   help="JSONL of {source, target} training pairs; the last --eval-items sources are held out (default: built-in pairs)")
    p.add_argument("--steps", type=int, default=40, help="optimizer steps (default 40)")
    p.add_argument("--eval-steps", type=int, default=10, help="evaluate (and checkpoint) every N steps (default 10)")
    p.add_argument("--eval-items", type=int, default=8, help="held-out sources scored at each evaluation (default 8)")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--learning-rate", type=float, default=None, help="default 2e-5 (full), 2e-4 (--lora), 1e-3 (tiny)")
    p.add_argument("--lora", action="store_true", help="train a LoRA adapter (peft) instead of all weights")
    p.add_argument("--shared-judge", action="store_true", help="with --lora: the generator's base weights are the judge (one copy in memory)")
    p.add_argument("--patience", type=int, default=3, help="early stopping after N evaluations without improvement (default 3)")
    p.add_argument("--threshold", type=float, default=0.0, help="PLUIE above this counts as accepted (default 0)")
    p.add_argument("--output-dir", type=Path, default=Path("runs/sft_validation"))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.shared_judge and not args.lora:
        p.error("--shared-judge needs --lora: the judge reads the base weights with the adapter disabled.")
    if args.eval_steps < 1 or args.steps < 1 or args.eval_items < 1:
        p.error("--steps, --eval-steps and --eval-items must be positive.")
    return args


def load_pairs(path: Path | None, eval_items: int) -> tuple[list[tuple[str, str]], list[str]]:
    """Training pairs and held-out sources."""
    if path is None:
        return PAIRS, HELD_OUT[:eval_items]
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if any("source" not in r or "target" not in r for r in rows):
        raise SystemExit(f"{path}: every line needs 'source' and 'target' keys.")
    if len(rows) <= eval_items:
        raise SystemExit(f"{path}: {len(rows)} pairs, need more than --eval-items={eval_items}.")
    return [(r["source"], r["target"]) for r in rows[:-eval_items]], [r["source"] for r in rows[-eval_items:]]


def load_generator(name: str) -> tuple[Any, Any]:
    if name == "embedded":
        from pluie_reward.engines.transformers.loading import load_trainable_embedded

        return load_trainable_embedded()
    if name == "tiny":
        from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

        tokenizer = make_tiny_tokenizer()
        return make_tiny_causal_lm(tokenizer), tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(name), AutoTokenizer.from_pretrained(name)


def chat(source: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": PROMPT.format(source=source)}]


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    fit_threads()  # before torch loads: on a busy CPU, sleeping threads, one per free core (it does not collapse them)
    from datasets import Dataset
    from transformers import EarlyStoppingCallback, set_seed
    from trl import SFTConfig, SFTTrainer

    from pluie_reward import Judge
    from pluie_reward.engines.transformers.compat import quiet_renames, training_arguments
    from pluie_reward.integrations.callbacks import PluieCallback
    from pluie_reward.testing import make_tiny_judge

    set_seed(args.seed)
    pairs, held_out = load_pairs(args.data, args.eval_items)
    print(f"loading the generator {args.generator!r}...", file=sys.stderr, flush=True)
    model, tokenizer = load_generator(args.generator)
    if args.lora:
        from peft import LoraConfig, get_peft_model

        with quiet_renames():  # PEFT reads a checkpointing flag under its old name (a FutureWarning about its call)
            model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    if args.shared_judge:
        judge: Any = Judge(model, tokenizer, disable_adapters=True, name="shared-base")
    elif args.judge == "tiny":
        judge = make_tiny_judge
    else:  # built on first evaluation
        judge_name = None if args.judge == "embedded" else args.judge

        def judge() -> Judge:
            return Judge.load(judge_name, device="cpu")

    to_rows = lambda items: [{"prompt": chat(s), "completion": [{"role": "assistant", "content": t}]} for s, t in items]
    train = Dataset.from_list(to_rows(pairs))
    # the trainer's own eval loss uses the same held-out sources, with themselves as targets
    dev = Dataset.from_list(to_rows([(s, s) for s in held_out]))
    callback = PluieCallback(
        judge, args.template, [{"prompt": chat(s), "source": s} for s in held_out],
        threshold=args.threshold, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
    )
    default_lr = 1e-3 if args.generator == "tiny" else (2e-4 if args.lora else 2e-5)
    config = SFTConfig(
        output_dir=str(args.output_dir),
        max_steps=args.steps,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        learning_rate=args.learning_rate or default_lr,
        eval_strategy="steps",
        eval_steps=args.eval_steps,
        save_strategy="steps",
        save_steps=args.eval_steps,
        save_total_limit=2,
        load_best_model_at_end=True,
        metric_for_best_model="eval_pluie_mean",
        greater_is_better=True,
        logging_steps=args.eval_steps,
        max_length=256,
        report_to=[],
        use_cpu=True,
        bf16=False,
        seed=args.seed,
        **training_arguments(False),  # a 135M policy needs no memory saved; the names this transformers has (no FutureWarning)
    )
    trainer = SFTTrainer(
        model=model, args=config, train_dataset=train, eval_dataset=dev, processing_class=tokenizer,
        callbacks=[EarlyStoppingCallback(early_stopping_patience=args.patience)],
    )
    callback.attach(trainer)  # explicit; re-adds the early stopping after it, to read its metrics
    # a score for the starting point, so that improvement is visible
    print(f"evaluating the starting point: generating for {len(held_out)} held-out sources and judging them"
          + (" (the first use of the embedded judge converts it, ~30 s)" if args.judge == "embedded" and not args.shared_judge else "")
          + "...", file=sys.stderr, flush=True)
    trainer.evaluate()
    print(f"training: {args.steps} step(s), evaluated by the judge every {args.eval_steps}...", file=sys.stderr, flush=True)
    trainer.train()
    trainer.save_state()  # trainer_state.json for pluie-reward plot-run

    print("\nstep  pluie_mean  accept_rate  p10     p50     p90")
    for entry in callback.history:
        m = entry["metrics"]
        print(f"{entry['step']:>4}  {m['eval_pluie_mean']:>10.3f}  {m['eval_pluie_accept_rate']:>11.2f}  "
              f"{m['eval_pluie_p10']:>6.2f}  {m['eval_pluie_p50']:>6.2f}  {m['eval_pluie_p90']:>6.2f}")
    # transformers chooses the best checkpoint among the evaluations made during training only: the
    # step-0 evaluation above is never compared (PluieCallback warns when it beat every checkpoint)
    best = callback.best_evaluation("eval_pluie_mean")
    start = next((e["metrics"]["eval_pluie_mean"] for e in callback.history if e["step"] == 0), None)
    print(f"best checkpoint (the trainer's choice, loaded at the end): step {trainer.state.best_global_step}, "
          f"eval_pluie_mean {trainer.state.best_metric:.3f} ({trainer.state.best_model_checkpoint})")
    if best is not None and start is not None:
        verdict = "training improved on it" if best["step"] != 0 else "no checkpoint beat it: the untrained model scored best"
        print(f"starting point: step 0, eval_pluie_mean {start:.3f}; best of all evaluations: step {best['step']} "
              f"({best['metrics']['eval_pluie_mean']:.3f}): {verdict}")
    print(f"tables in {args.output_dir / 'pluie'}; curves: pluie-reward plot-run {args.output_dir}")
    last = callback.history[-1]["table"]
    if last:
        print("\nlast evaluation, first generations:")
        for line in Path(last).read_text(encoding="utf-8").splitlines()[:3]:
            row = json.loads(line)
            print(f"  [{row['score']:+.2f}] {row['source']!r} -> {row['generation']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
