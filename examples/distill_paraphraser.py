"""Distil a paraphraser with a PLUIE judge: a teacher samples N candidates per source, the judge
keeps the best by the copy-proof score (p_yes x min(1, novelty / 0.3) x the length floor: PLUIE alone would keep copies of
the source, which a judge rates above paraphrases), TRL's SFTTrainer trains a smaller or fresh student
on them, and (optionally) a short GRPO run rewarded by ParaphraseReward (the same score) follows. The kept
pairs' copy rate and novelty are printed beside their PLUIE, and beside those PLUIE best-of-n would have
kept; the student's mean PLUIE on held-out sources is reported before and after.

Defaults are CPU-sized (a few minutes on 2 cores): the embedded SmolLM2-135M-Instruct is teacher
and judge, and the student is a fresh 2-layer Llama sharing its tokenizer (which, trained on 16 pairs, learns little more
than the shape of an answer: the point is the pipeline). With a real budget use a
bigger teacher/judge and a pretrained student, e.g.::

    python examples/distill_paraphraser.py --teacher Qwen/Qwen2.5-7B-Instruct --judge Qwen/Qwen2.5-7B-Instruct \\
        --student HuggingFaceTB/SmolLM2-360M-Instruct --sources my_sentences.txt --n 8 --threshold 0 --epochs 2 --grpo

Tiny smoke run::

    python examples/distill_paraphraser.py --train-sources 4 --held-out 2 --n 2 --epochs 1 --max-new-tokens 16
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Sequence

PROMPT = "Paraphrase the following sentence. Answer with the paraphrase only.\n\n{source}"

SOURCES = [
    "The meeting was postponed because the manager was ill.",
    "She finished the report two days before the deadline.",
    "Heavy rain caused flooding in several neighbourhoods.",
    "The company plans to hire fifty new engineers next year.",
    "He forgot his umbrella and got soaked on the way home.",
    "The museum will be closed for renovation until spring.",
    "Prices of fresh vegetables rose sharply this month.",
    "The children were excited to see snow for the first time.",
    "Our train was delayed by almost an hour this morning.",
    "The new library has a large collection of rare books.",
    "Doctors recommend drinking water regularly during hot weather.",
    "The team celebrated after winning the national championship.",
    "Traffic on the bridge was stopped after an accident.",
    "The author signed copies of her novel at the bookstore.",
    "Scientists discovered a new species of frog in the rainforest.",
    "The restaurant is famous for its homemade pasta.",
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
    p.add_argument("--teacher", default=None, help="HF id/folder of the teacher causal LM (default: embedded SmolLM2-135M-Instruct)")
    p.add_argument("--judge", default=None, help="judge model for Judge.load (default: the teacher's weights, frozen)")
    p.add_argument("--template", default="para-fs", help="judge template (default para-fs)")
    p.add_argument("--student", default="fresh",
                   help="'fresh' (random small Llama with the teacher's tokenizer), 'embedded' (SmolLM2-135M), or an HF id/folder")
    p.add_argument("--student-layers", type=int, default=2, help="layers of a fresh student (default 2)")
    p.add_argument("--student-hidden", type=int, default=128, help="hidden size of a fresh student (default 128)")
    p.add_argument("--sources", type=Path, default=None, help="text file, one source sentence per line (default: 24 built-in sentences)")
    p.add_argument("--train-sources", type=int, default=16, help="sources used for distillation (default 16)")
    p.add_argument("--held-out", type=int, default=8, help="held-out sources for the before/after PLUIE (default 8)")
    p.add_argument("--n", type=int, default=4, help="teacher candidates per source (default 4)")
    p.add_argument("--k", type=int, default=1, help="best candidates kept per source (default 1)")
    p.add_argument("--threshold", type=float, default=None,
                   help="keep only candidates with PLUIE > threshold, e.g. 0 with a real judge (default: none, since "
                        "the 135M demo judge scores nearly everything below 0)")
    p.add_argument("--select", choices=["copy-proof", "pluie"], default="copy-proof",
                   help="rank each source's candidates by the copy-proof score (default) or by PLUIE (prefers copies)")
    p.add_argument("--target", type=float, default=None,
                   help="novelty that earns full credit in the copy-proof score and the GRPO reward (default: the task's, 0.3)")
    p.add_argument("--temperature", type=float, default=0.9)
    p.add_argument("--max-new-tokens", type=int, default=40)
    p.add_argument("--epochs", type=float, default=None, help="SFT epochs (default 10 for a fresh student, 3 otherwise)")
    p.add_argument("--learning-rate", type=float, default=None, help="default 3e-3 for a fresh student, 2e-5 otherwise")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--grpo", action="store_true", help="then run a short GRPO phase rewarded by ParaphraseReward")
    p.add_argument("--grpo-steps", type=int, default=2)
    p.add_argument("--output-dir", type=Path, default=Path("distill_out"))
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


if __name__ == "__main__":
    parse_args()  # --help and bad arguments are answered here, before torch loads (main parses again)

import torch  # noqa: E402  (after the early parse above)


def chat_prompt(source: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": PROMPT.format(source=source)}]


def clean(text: str) -> str:
    """First non-empty line of a generation, without surrounding quotes."""
    for line in text.strip().splitlines():
        line = line.strip().strip('"').strip()
        if line:
            return line
    return ""


@torch.no_grad()
def generate(model: Any, tokenizer: Any, sources: Sequence[str], *, n: int, sample: bool, temperature: float,
             max_new_tokens: int, batch_size: int = 8) -> list[list[str]]:
    """``n`` cleaned completions per source (greedy when ``sample`` is False, then n must be 1)."""
    was_training = model.training
    model.eval()
    tokenizer.padding_side = "left"
    out: list[list[str]] = []
    try:
        for start in range(0, len(sources), batch_size):
            chunk = sources[start : start + batch_size]
            texts = [tokenizer.apply_chat_template(chat_prompt(s), tokenize=False, add_generation_prompt=True) for s in chunk]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            kwargs = dict(do_sample=True, temperature=temperature, top_p=0.95) if sample else dict(do_sample=False)
            ids = model.generate(**enc, max_new_tokens=max_new_tokens, num_return_sequences=n,
                                 pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id, **kwargs)
            decoded = tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
            out.extend([clean(t) for t in decoded[i * n : (i + 1) * n]] for i in range(len(chunk)))
    finally:
        model.train(was_training)
    return out


def mean_pluie(judge: Any, template: str, model: Any, tokenizer: Any, sources: Sequence[str], max_new_tokens: int) -> tuple[float, list[dict]]:
    """Greedy paraphrase of each held-out source by ``model``, scored by the judge (an empty output,
    e.g. an untrained student's whitespace, is scored as the empty string)."""
    outputs = [c[0] for c in generate(model, tokenizer, sources, n=1, sample=False, temperature=1.0, max_new_tokens=max_new_tokens)]
    scores = judge.score(template, source=list(sources), hypothesis=outputs)
    return sum(scores) / len(scores), [{"source": s, "output": o, "pluie": round(v, 3)} for s, o, v in zip(sources, outputs, scores)]


def describe(mean: float, rows: Sequence[dict]) -> str:
    empty = sum(not r["output"] for r in rows)
    example = next((r["output"] for r in rows if r["output"]), "")
    return f"{mean:.2f} ({empty}/{len(rows)} outputs empty" + (f"; e.g. {example[:60]!r})" if example else ")")


def fresh_student(tokenizer: Any, layers: int, hidden: int, seed: int) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
    )
    return LlamaForCausalLM(config)


def load_causal_lm(name: str) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name)
    model = AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32)
    return model, tokenizer


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    from datasets import Dataset
    from transformers import set_seed
    from trl import SFTConfig, SFTTrainer

    from pluie_reward import Judge
    from pluie_reward.integrations.data import best_of_n, describe_pairs, filter_dataset, score_dataset
    from pluie_reward.core.novelty import TASKS, task_of
    from pluie_reward.engines.transformers.loading import load_trainable_embedded

    set_seed(args.seed)
    started = time.time()
    sources = [l.strip() for l in args.sources.read_text(encoding="utf-8").splitlines() if l.strip()] if args.sources else list(SOURCES)
    if args.train_sources + args.held_out > len(sources):
        sys.exit(f"need {args.train_sources + args.held_out} sources (--train-sources + --held-out), have {len(sources)}.")
    random.Random(args.seed).shuffle(sources)
    train_sources, held_out = sources[: args.train_sources], sources[args.train_sources : args.train_sources + args.held_out]

    # teacher and judge ---------------------------------------------------------------------
    teacher, teacher_tok = load_trainable_embedded() if args.teacher is None else load_causal_lm(args.teacher)
    if teacher_tok.pad_token_id is None:
        teacher_tok.pad_token = teacher_tok.eos_token
    judge = Judge.from_model(teacher, teacher_tok, name=args.teacher or "SmolLM2-135M-Instruct") if args.judge is None else Judge.load(args.judge)
    print(f"teacher {args.teacher or 'SmolLM2-135M-Instruct (embedded)'}; judge {judge.name}; template {args.template}")

    # 1. teacher candidates, judged, best-of-n ----------------------------------------------
    candidates = generate(teacher, teacher_tok, train_sources, n=args.n, sample=True, temperature=args.temperature,
                          max_new_tokens=args.max_new_tokens)
    rows = [(s, c) for s, cs in zip(train_sources, candidates) for c in cs if c]
    if not rows:
        sys.exit("the teacher produced only empty candidates; raise --max-new-tokens or change --teacher.")
    pool = Dataset.from_dict({"source": [r[0] for r in rows], "hypothesis": [r[1] for r in rows]})
    task = task_of(args.template) or TASKS["paraphrase"]
    if args.target is not None:
        task = dataclasses.replace(task, target=args.target)
    pool = score_dataset(pool, judge, args.template, desc="judging teacher candidates", task=task)
    threshold = args.threshold
    eligible = pool if threshold is None else filter_dataset(pool, threshold=threshold)  # PLUIE > threshold
    kept = {select: best_of_n(eligible, group_by="source", k=args.k,
                              score_column="pluie_copy_proof" if select == "copy-proof" else "pluie_logratio")
            for select in ("copy-proof", "pluie")}
    best = kept[args.select]
    print(f"teacher: {len(pool)} candidates for {len(train_sources)} sources, mean PLUIE {sum(pool['pluie_logratio']) / len(pool):.2f}; "
          f"kept {len(best)} by {args.select} (best {args.k} per source" + (f", PLUIE > {threshold:g})" if threshold is not None else ")"))
    for select, rows_kept in kept.items():
        stats = describe_pairs(rows_kept)
        print(f"  best-of-{args.n} by {select:10s}: {stats['pairs']} pairs, mean PLUIE {stats['pluie'] or 0:.2f}, "
              f"copy rate {stats['copy_rate'] or 0:.0%}, novelty {stats['novelty'] or 0:.2f}, copy-proof {stats['copy_proof'] or 0:.2f}"
              + ("  <- kept" if select == args.select else ""))
    if len(best) == 0:
        sys.exit("no candidate passed the threshold; lower or drop --threshold, or sample more (--n).")

    # 2. student ------------------------------------------------------------------------------
    if args.student == "fresh":
        student, student_tok = fresh_student(teacher_tok, args.student_layers, args.student_hidden, args.seed), teacher_tok
        default_lr, default_epochs = 3e-3, 10.0
    elif args.student == "embedded":
        (student, student_tok), default_lr, default_epochs = load_trainable_embedded(), 2e-5, 3.0
    else:
        (student, student_tok), default_lr, default_epochs = load_causal_lm(args.student), 2e-5, 3.0
    if student_tok.pad_token_id is None:
        student_tok.pad_token = student_tok.eos_token
    size = sum(p.numel() for p in student.parameters()) / 1e6
    before, before_rows = mean_pluie(judge, args.template, student, student_tok, held_out, args.max_new_tokens)
    print(f"student {args.student} ({size:.1f}M parameters): mean PLUIE on {len(held_out)} held-out sources before: "
          f"{describe(before, before_rows)}")

    # 3. SFT on the kept candidates ---------------------------------------------------------
    sft_data = Dataset.from_dict({
        "prompt": [chat_prompt(s) for s in best["source"]],
        "completion": [[{"role": "assistant", "content": h}] for h in best["hypothesis"]],
    })
    config = SFTConfig(
        output_dir=str(args.output_dir / "sft"), num_train_epochs=args.epochs or default_epochs, per_device_train_batch_size=args.batch_size,
        learning_rate=args.learning_rate or default_lr, logging_steps=1, save_strategy="no", report_to="none",
        max_length=256, use_cpu=not torch.cuda.is_available(), seed=args.seed, bf16=False,
    )
    SFTTrainer(model=student, args=config, train_dataset=sft_data, processing_class=student_tok).train()
    after, after_rows = mean_pluie(judge, args.template, student, student_tok, held_out, args.max_new_tokens)
    print(f"student after SFT: mean PLUIE {describe(after, after_rows)}; before {before:.2f}")
    report: dict[str, Any] = {"before": before, "after_sft": after, "kept": len(best), "candidates": len(pool),
                              "select": args.select, "kept_pairs": {s: describe_pairs(k) for s, k in kept.items()},
                              "held_out_before": before_rows, "held_out_after_sft": after_rows}

    # 4. optional GRPO with the judge as reward ---------------------------------------------
    if args.grpo:
        from trl import GRPOConfig, GRPOTrainer

        from pluie_reward import CopyProofReward

        # PLUIE alone rewards copying the source (a copy is a perfect paraphrase to a judge): the copy-proof
        # reward gates p_yes by novelty, so a copy scores 0
        rewards = [CopyProofReward(judge, task, template=args.template)]
        grpo_data = Dataset.from_dict({"prompt": [chat_prompt(s) for s in train_sources], "source": train_sources})
        grpo_config = GRPOConfig(
            output_dir=str(args.output_dir / "grpo"), max_steps=args.grpo_steps, per_device_train_batch_size=4,
            num_generations=4, max_completion_length=args.max_new_tokens, learning_rate=(args.learning_rate or default_lr) / 10,
            logging_steps=1, save_strategy="no", report_to="none",
            use_cpu=not torch.cuda.is_available(), seed=args.seed, bf16=False,
        )
        GRPOTrainer(model=student, reward_funcs=rewards, args=grpo_config, train_dataset=grpo_data,
                    processing_class=student_tok).train()
        report["after_grpo"], report["held_out_after_grpo"] = mean_pluie(judge, args.template, student, student_tok, held_out, args.max_new_tokens)
        print(f"student after GRPO: mean PLUIE {describe(report['after_grpo'], report['held_out_after_grpo'])}")

    args.output_dir.mkdir(parents=True, exist_ok=True)
    best.to_json(str(args.output_dir / "distilled.jsonl"))
    (args.output_dir / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"done in {time.time() - started:.0f} s; kept pairs in {args.output_dir / 'distilled.jsonl'}, report in {args.output_dir / 'report.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
