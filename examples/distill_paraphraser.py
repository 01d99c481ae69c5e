"""Distil a small paraphraser without an RL loop: self-distillation by rejection sampling (as in ReST,
RAFT or expert iteration), judged by the same copy-proof score the GRPO example's reward uses.

The student is the embedded SmolLM2-135M-Instruct (as a plain trainable model) with a LoRA adapter; the
judge is the default judge on the same base weights (its adapter loaded frozen beside the student's, as in
``examples/grpo_paraphrase.py``). Each round:

1. the teacher samples ``--n`` paraphrases of every training sentence (round 1: the untrained student,
   i.e. the base model, or any HF causal LM given by ``--teacher``; later rounds: the student so far);
   with ``--no-repeat-ngram 3`` it samples with transformers' ``no_repeat_ngram_size`` (as Impossible
   Distillation does: no 3-gram of the prompt, which holds the source, is repeated), which never touches the
   held-out outputs;
2. ``score_dataset`` judges them and adds the copy-proof score of
   :class:`~pluie_reward.ParaphraseReward` (``p_yes x min(1, novelty / 0.3) x min(1, length ratio / 0.67)``,
   0 for a copy or a disguised copy), and ``best_of_n`` keeps each sentence's best candidate if its score
   is above ``--floor`` (0.7: the judge accepts it, it is no copy and no fragment; a sentence without such a
   candidate gives nothing), so copies, fragments and rejected candidates are never trained on; with
   ``--select novel`` the floor (and the judge's verdict) is a gate and the most novel candidate past it is kept
   (ties: the score); ``--length-ratio 0.8 1.5`` adds Impossible Distillation's length gate. A sentence with no
   candidate past the gate gets ``--n`` more samples, drawn as the first ones, until ``--n-max`` in all; each
   round reports how many sentences had none after each draw;
3. TRL's ``SFTTrainer`` trains the student's adapter on the kept pairs (prompt -> paraphrase); or, with
   ``--objective dpo``, the pool also holds the teacher's greedy answer (and ``n - 1`` samples), and TRL's
   ``DPOTrainer`` trains each kept candidate against that sentence's greedy answer when it scores below the
   floor (else its worst candidate below the floor), DPO loss plus SFT on the kept candidate, against a frozen
   copy of the adapter (``pairs-round-R.jsonl``; not chosen as the default on the dev file: docs/evaluation.md).

Data and proof as in the GRPO example: ``--train FILE`` (default ``examples/data/paraphrase_train.txt``,
120 sentences) and ``--held-out FILE`` (default ``examples/data/paraphrase_held_out.txt``, 24 others; a
held-out sentence that is also a training sentence is refused), one sentence per line or JSONL with a
``source`` field. The held-out sentences are paraphrased greedily before and after distillation and judged;
``result.json`` in ``--output-dir`` has the GRPO example's ``held_out`` rows and ``before``/``after``
metrics (accept rate, p_yes, novelty, copy rate, accepted-and-novel share, PLUIE, meaning), each round's
kept pairs (``describe_pairs``, beside what PLUIE best-of-n would have kept), how many sentences had no
candidate kept after each draw (``no_survivor``) and the seconds spent;
``kept-round-R.jsonl`` holds the pairs trained on.

``--time-budget MINUTES`` (default 35; 0: none) bounds the whole run, loading and both evaluations included:
sampling (16 training sentences at a time, in a new random order each round) stops where one more chunk
would not leave a minute of fine-tuning and the final evaluation, and fine-tuning stops where one more step
would not leave the final evaluation (``result.json``: ``rounds``, ``stopped_by_time_budget``).

    python examples/distill_paraphraser.py --seed 0 --output-dir runs/distill-s0 --threads 2   # the default run
    python examples/distill_paraphraser.py --rounds 1 --n 2 --sentences 4 --max-held-out 2 --epochs 1   # smoke run
    python examples/distill_paraphraser.py --teacher Qwen/Qwen2.5-1.5B-Instruct     # round 1 sampled from another model
    python examples/distill_paraphraser.py --no-repeat-ngram 3 --select novel --n-max 18   # a teacher kept off the source's 3-grams

The embedded 135M judge is for demos, not quality (docs/rewards.md reads its accepted outputs by hand).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # examples/paraphrase_common.py, shared with the GRPO example

from paraphrase_common import HELD_OUT_FILE, TARGET, TRAIN_FILE, chat, held_out_metrics, print_held_out, read_data, say  # noqa: E402

from pluie_reward.common.threads import fit_threads  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring); bad values exit with status 2 and one line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--train", type=Path, default=TRAIN_FILE, help="training sentences: one per line, or JSONL with 'source'")
    parser.add_argument("--held-out", type=Path, default=HELD_OUT_FILE,
                        help="held-out sentences (never trained on), paraphrased greedily before and after")
    parser.add_argument("--sentences", type=int, default=None, help="use only the first N training sentences")
    parser.add_argument("--max-held-out", type=int, default=None, help="use only the first N held-out sentences")
    parser.add_argument("--teacher", default=None,
                        help="HF id or folder of a causal LM that samples round 1 (default: the student's base, self-distillation)")
    parser.add_argument("--rounds", type=int, default=3, help="sample, filter and fine-tune rounds (default 3)")
    parser.add_argument("--n", type=int, default=6, help="candidates sampled per training sentence and round (default 6)")
    parser.add_argument("--n-max", type=int, default=None,
                        help="a sentence with no candidate past the floor gets --n more samples "
                             "until this many in all (default: --n, no more samples)")
    parser.add_argument("--floor", type=float, default=0.7,
                        help="keep a sentence's best candidate only if its copy-proof score is above this (default 0.7)")
    parser.add_argument("--select", choices=("score", "novel"), default="score",
                        help="score: the best copy-proof score past the floor; novel: the most novel candidate past the "
                             "floor that the judge accepts (ties: the score)")
    parser.add_argument("--length-ratio", type=float, nargs=2, metavar=("LOW", "HIGH"), default=None,
                        help="keep only candidates whose word count over the sentence's lies in [LOW, HIGH] "
                             "(Impossible Distillation: 0.8 1.5; default: no such gate)")
    parser.add_argument("--no-repeat-ngram", type=int, default=0,
                        help="the teacher samples with no_repeat_ngram_size N, prompt included (0: off; 3 as Impossible Distillation)")
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of the candidates")
    parser.add_argument("--max-new-tokens", type=int, default=40)
    parser.add_argument("--objective", choices=("sft", "dpo"), default="sft",
                        help="sft: fine-tune on the kept candidates; dpo: also push down each sentence's greedy answer "
                             "(or worst candidate) when it scores below the floor (DPO + SFT; not better on the dev file, docs/evaluation.md)")
    parser.add_argument("--beta", type=float, default=0.1, help="DPO's beta (--objective dpo)")
    parser.add_argument("--epochs", type=float, default=2.0, help="fine-tuning epochs over each round's kept pairs")
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--judge", choices=("default", "base"), default="default",
                        help="default: the default judge (its adapter beside the student's); base: the untuned embedded model")
    parser.add_argument("--output-dir", type=Path, default=Path("runs/distill_paraphraser"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-budget", type=float, default=35.0, help="minutes for the whole run, evaluations included (0: no limit)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's, one per core)")
    args = parser.parse_args(argv)
    optional = [v for v in (args.sentences, args.max_held_out) if v is not None]
    if min([args.rounds, args.n, args.batch_size, args.max_new_tokens, *optional]) < 1:
        parser.error("--rounds, --n, --batch-size, --max-new-tokens, --sentences and --max-held-out must be at least 1.")
    args.n_max = args.n if args.n_max is None else args.n_max
    if args.n_max < args.n or args.no_repeat_ngram < 0:
        parser.error(f"--n-max must be at least --n ({args.n}) and --no-repeat-ngram at least 0 (0: off).")
    if args.length_ratio is not None and not 0 <= args.length_ratio[0] <= args.length_ratio[1] < float("inf"):  # also nan
        parser.error("--length-ratio LOW HIGH needs 0 <= LOW <= HIGH (finite), e.g. 0.8 1.5.")
    if not 0 <= args.floor < 1:  # also refuses nan; the copy-proof score lies in [0, 1]
        parser.error("--floor must lie in [0, 1): the copy-proof score is p_yes x novelty credit x length credit.")
    if not args.time_budget >= 0 or not args.epochs > 0:
        parser.error("--time-budget must be >= 0 minutes (0: no limit) and --epochs > 0.")
    if not 0 < args.beta < float("inf"):  # also refuses nan
        parser.error("--beta must be a positive number (DPO's strength against the reference; 0.1 by default).")
    read_data(parser, args)
    return args


if __name__ == "__main__":
    parse_args()  # --help and bad arguments are answered here, before torch, TRL and PEFT load (main parses again)
    fit_threads()  # before torch loads: on a busy CPU, sleeping threads, one per free core (it does not collapse them)

import torch  # noqa: E402  (the heavy imports come after the early parse above)
from datasets import Dataset, concatenate_datasets  # noqa: E402
from grpo_paraphrase import TimeBudget, checkpointing_arguments, load_policy_and_judge  # noqa: E402
from transformers import PrinterCallback, set_seed  # noqa: E402
from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer  # noqa: E402

from pluie_reward import Judge, PluieCallback  # noqa: E402
from pluie_reward.integrations.callbacks import generate_texts  # noqa: E402
from pluie_reward.integrations.data import best_of_n, describe_pairs, score_dataset  # noqa: E402

TEMPLATE = "para-fs"
CHUNK = 16  # training sentences sampled and judged at a time (the time budget is checked between chunks)
SAMPLE_BATCH = 32  # prompts per generate call
FINE_TUNE_RESERVE = 60.0  # seconds of a round kept for fine-tuning when the time budget cuts its sampling


def sample_candidates(model: Any, tokenizer: Any, sources: list[str], n: int, args: argparse.Namespace, *,
                      greedy: bool | None = None) -> Dataset:
    """``n`` paraphrases of each source (``source``, ``hypothesis``, ``greedy``; empty answers dropped): sampled,
    or with ``greedy`` (default: ``--objective dpo``) the greedy answer and ``n - 1`` sampled ones. The sampled
    ones are drawn with ``--no-repeat-ngram``; the greedy answers never are."""
    greedy = sources if (args.objective == "dpo" if greedy is None else greedy) else []
    repeated = [s for s in sources for _ in range(n - 1 if greedy else n)]
    settings = {"batch_size": SAMPLE_BATCH, "max_new_tokens": args.max_new_tokens, "progress": "sampling candidates"}
    texts = generate_texts(model, tokenizer, [chat(s) for s in greedy], **settings) if greedy else []
    sampling = dict(settings, do_sample=True, temperature=args.temperature, top_p=1.0, top_k=0)
    if args.no_repeat_ngram:
        sampling["no_repeat_ngram_size"] = args.no_repeat_ngram
    texts += generate_texts(model, tokenizer, [chat(s) for s in repeated], **sampling)
    rows = [(s, t, i < len(greedy)) for i, (s, t) in enumerate(zip(greedy + repeated, texts)) if t]
    return Dataset.from_dict({"source": [r[0] for r in rows], "hypothesis": [r[1] for r in rows], "greedy": [r[2] for r in rows]})


def keep(pool: Dataset, args: argparse.Namespace) -> Dataset:
    """Each sentence's kept candidate: past the copy-proof ``--floor`` (and ``--length-ratio``), the best score or
    (``--select novel``) the most novel that the judge accepts."""
    ratio = tuple(args.length_ratio) if args.length_ratio is not None else None
    return best_of_n(pool, group_by="source", k=1, threshold=args.floor, select=args.select, length_ratio=ratio)


def sample_and_judge(model: Any, tokenizer: Any, sources: list[str], args: argparse.Namespace, judge: Judge,
                     round_: int) -> tuple[Dataset | None, dict[int, int]]:
    """``--n`` candidates of each source, judged; then, while a source has no candidate :func:`keep` keeps, ``--n``
    more of its own (sampled as the first ``--n``), until ``--n-max`` in all.

    Args:
        model: the teacher.
        tokenizer: its tokenizer.
        sources: the sentences.
        args: :func:`parse_args`'s namespace.
        judge: the judge.
        round_: the round (for the progress bar).

    Returns:
        The judged candidates (None when every answer was empty) and, after each draw (by the samples per source
        drawn so far), how many sources had no candidate kept.
    """
    pools: list[Dataset] = []
    none_after: dict[int, int] = {}
    drawn, todo = 0, list(sources)
    while todo and drawn < args.n_max:
        n, retry = min(args.n, args.n_max - drawn), drawn > 0
        chunk = sample_candidates(model, tokenizer, todo, n, args, greedy=False if retry else None)
        drawn += n
        if chunk.num_rows:
            pools.append(score_dataset(chunk, judge, TEMPLATE, desc=f"round {round_}: judging candidates", batch_size=16))
        found = set(keep(concatenate_datasets(pools), args)["source"]) if pools else set()
        todo = [s for s in todo if s not in found]
        none_after[drawn] = len(todo)
    return (concatenate_datasets(pools) if pools else None), none_after


def preference_pairs(pool: Dataset, kept: Dataset, floor: float, score_column: str = "pluie_copy_proof") -> Dataset:
    """``--objective dpo``'s pairs: each kept sentence's kept candidate (chosen) against its greedy answer when that
    scores below ``floor``, else its lowest-scored candidate below ``floor`` (rejected); a sentence without a
    candidate below the floor gives no pair.

    Args:
        pool: the judged candidates (``source``, ``hypothesis``, ``greedy``, ``score_column``).
        kept: each sentence's best candidate above the floor (``best_of_n``'s output).
        floor: the copy-proof floor of ``--floor``.
        score_column: the column ranking the candidates.

    Returns:
        A dataset of ``source``, ``chosen``, ``rejected``, ``rejected_greedy``.

    Example:
        >>> pool = Dataset.from_dict({"source": ["a b c"] * 3 + ["d e"] * 2,
        ...                           "hypothesis": ["a b", "c a b", "x y z", "d e", "e d f"],
        ...                           "greedy": [True, False, False, True, False], "pluie_copy_proof": [0.3, 0.1, 0.9, 0.8, 0.9]})
        >>> kept = Dataset.from_dict({"source": ["a b c", "d e"], "hypothesis": ["x y z", "e d f"]})
        >>> preference_pairs(pool, kept, 0.7).to_list()
        [{'source': 'a b c', 'chosen': 'x y z', 'rejected': 'a b', 'rejected_greedy': True}]
    """
    chosen = dict(zip(kept["source"], kept["hypothesis"]))
    rejected: dict[str, tuple] = {}
    for source, text, greedy, value in zip(pool["source"], pool["hypothesis"], pool["greedy"], pool[score_column]):
        rank = (not greedy, value)  # the greedy answer first (the one the held-out test reads), then the lowest score
        if source in chosen and value < floor and (source not in rejected or rank < rejected[source][0]):
            rejected[source] = (rank, text, greedy)
    return Dataset.from_dict({"source": list(rejected), "chosen": [chosen[s] for s in rejected],
                              "rejected": [r[1] for r in rejected.values()], "rejected_greedy": [r[2] for r in rejected.values()]})


def fine_tune(student: Any, tokenizer: Any, rows: Dataset, args: argparse.Namespace, round_: int, deadline: float | None) -> dict:
    """One pass of the student's adapter over a round's kept pairs (``source``, ``hypothesis``: SFT) or, with
    ``--objective dpo``, its preference pairs (``source``, ``chosen``, ``rejected``: DPO against a frozen copy of
    the adapter, plus SFT on the chosen answer); returns its steps, loss and whether the deadline cut it."""
    def answer(texts: list[str]) -> list[list[dict]]:
        return [[{"role": "assistant", "content": t}] for t in texts]

    on_gpu = torch.cuda.is_available()
    settings = dict(
        output_dir=str(args.output_dir / f"{args.objective}-round-{round_}"), num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size, learning_rate=args.learning_rate, lr_scheduler_type="linear",
        logging_steps=5, save_strategy="no", report_to=[], seed=args.seed + round_, max_length=1024,
        use_cpu=not on_gpu, bf16=on_gpu and torch.cuda.is_bf16_supported(), disable_tqdm=True,
        **checkpointing_arguments(False),  # a 135M student needs no memory saved (as in the GRPO example)
    )
    prompts = [chat(s) for s in rows["source"]]
    if args.objective == "dpo":
        data = Dataset.from_dict({"prompt": prompts, "chosen": answer(rows["chosen"]), "rejected": answer(rows["rejected"])})
        config = DPOConfig(**settings, beta=args.beta, loss_type=["sigmoid", "sft"], loss_weights=[1.0, 1.0])
        trainer = DPOTrainer(model=student, args=config, train_dataset=data, processing_class=tokenizer)
    else:
        data = Dataset.from_dict({"prompt": prompts, "completion": answer(rows["hypothesis"])})
        trainer = SFTTrainer(model=student, args=SFTConfig(**settings), train_dataset=data, processing_class=tokenizer)
    trainer.remove_callback(PrinterCallback)
    stop = TimeBudget(deadline, reserve=0.0) if deadline is not None else None  # the GRPO example's step-pace stop
    if stop:
        trainer.add_callback(stop)
    try:
        output = trainer.train()
    finally:
        if "ref" in student.peft_config:  # DPOTrainer's frozen copy of the adapter: the next round copies it afresh
            student.delete_adapter("ref")
    return {"steps": trainer.state.global_step, "loss": output.training_loss, "stopped_by_time_budget": bool(stop and stop.stopped)}


def distill(args: argparse.Namespace, student: Any, tokenizer: Any, judge: Judge, started: float | None = None,
            teacher: tuple[Any, Any] | None = None) -> dict:
    """Greedy held-out outputs before, ``--rounds`` rounds of sample / keep / fine-tune, greedy held-out
    outputs after; writes and returns result.json's content.

    Args:
        args: :func:`parse_args`'s namespace.
        student: a PEFT model whose active adapter is trained (the judge may share its base weights).
        tokenizer: the student's tokenizer.
        judge: the judge of the candidates and of the held-out outputs.
        started: the ``time.monotonic()`` the time budget counts from (default: now).
        teacher: (model, tokenizer) that samples round 1 (default: the student).

    Returns:
        result.json's content.
    """
    started = time.monotonic() if started is None else started
    deadline = started + 60 * args.time_budget if args.time_budget else None
    set_seed(args.seed)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    held_out = PluieCallback(judge, TEMPLATE, [{"prompt": chat(s), "source": s} for s in args.held_out_sentences],
                             max_new_tokens=args.max_new_tokens, batch_size=8, write_table=False)
    evaluation_start = time.monotonic()
    say(f"held-out: paraphrasing {len(args.held_out_sentences)} sentence(s) greedily before distilling, judged by {judge.name}...")
    first = held_out.generate_and_score(student, tokenizer)
    reserve = 1.5 * (time.monotonic() - evaluation_start) + 30  # the final evaluation and writing
    print(f"held-out before: {summary_line(held_out_metrics(first))}", flush=True)

    rounds: list[dict] = []
    stopped, pace = False, 0.0  # pace: the longest chunk of sampling and judging so far, in seconds
    # sampling stops where the fine-tuning (at least FINE_TUNE_RESERVE s) and the final evaluation would not fit
    sampling_deadline = None if deadline is None else deadline - reserve - FINE_TUNE_RESERVE
    for round_ in range(1, args.rounds + 1):
        round_start = time.monotonic()
        model, model_tokenizer = teacher if (teacher is not None and round_ == 1) else (student, tokenizer)
        sources = list(args.train_sentences)
        random.Random(f"{args.seed}-{round_}").shuffle(sources)  # a round cut short still samples from the whole file
        say(f"round {round_}: sampling {args.n} candidates for each of {len(sources)} sentences "
            f"({'the teacher' if model is not student else 'the student'}) and judging them...")
        pools, none_after = [], {}
        for start in range(0, len(sources), CHUNK):
            begin = time.monotonic()
            if sampling_deadline is not None and begin + 1.2 * pace > sampling_deadline:
                stopped = True
                break
            chunk, missing = sample_and_judge(model, model_tokenizer, sources[start : start + CHUNK], args, judge, round_)
            if chunk is not None:
                pools.append(chunk)
            for drawn, count in missing.items():
                none_after[drawn] = none_after.get(drawn, 0) + count
            pace = max(pace, time.monotonic() - begin)
        if not pools:
            print(f"--time-budget {args.time_budget:g} min: round {round_} not started (the final evaluation must fit)"
                  if stopped else f"round {round_}: no candidate (every answer was empty)", flush=True)
            break
        pool = concatenate_datasets(pools)
        kept = keep(pool, args)
        by_pluie = best_of_n(pool, group_by="source", k=1, score_column="pluie_logratio")
        kept.to_json(str(args.output_dir / f"kept-round-{round_}.jsonl"))
        sampled = len(set(pool["source"]))
        info = {"round": round_, "teacher": "--teacher" if model is not student else "student", "sentences": sampled,
                "candidates": pool.num_rows, "sampled": describe_pairs(pool), "kept": describe_pairs(kept),
                "best_by_pluie": describe_pairs(by_pluie),
                "no_survivor": [{"samples": drawn, "sentences": count} for drawn, count in sorted(none_after.items())]}
        print(f"round {round_}: {pool.num_rows} candidates for {sampled} sentences (copy rate {info['sampled']['copy_rate']:.2f}), "
              f"kept {kept.num_rows} (copy-proof > {args.floor:g}, by {args.select}; mean novelty {info['kept']['novelty'] or 0:.2f}, "
              f"copies {info['kept']['copy_rate'] or 0:.2f}); PLUIE best-of-{args.n} would keep copy rate "
              f"{info['best_by_pluie']['copy_rate'] or 0:.2f}", flush=True)
        print(f"round {round_}: sentences with no candidate past the floor: "
              + ", ".join(f"{r['sentences']} after {r['samples']} samples" for r in info["no_survivor"]), flush=True)
        rows = kept
        if args.objective == "dpo":
            rows = preference_pairs(pool, kept, args.floor)
            rows.to_json(str(args.output_dir / f"pairs-round-{round_}.jsonl"))
            info["pairs"] = {"pairs": rows.num_rows, "rejected_greedy": sum(rows["rejected_greedy"])}
            print(f"round {round_}: {rows.num_rows} preference pairs ({info['pairs']['rejected_greedy']} against the greedy answer)", flush=True)
        if rows.num_rows:
            say(f"round {round_}: fine-tuning the student on {rows.num_rows} {'pair' if args.objective == 'dpo' else 'example'}(s)...")
            info["fine_tune"] = fine_tune(student, tokenizer, rows, args, round_, None if deadline is None else deadline - reserve)
            print(f"round {round_}: fine-tuned {info['fine_tune']['steps']} steps, loss {info['fine_tune']['loss']:.3f}", flush=True)
        info["seconds"] = time.monotonic() - round_start
        rounds.append(info)
        if stopped or info.get("fine_tune", {}).get("stopped_by_time_budget"):
            stopped = True
            print(f"--time-budget {args.time_budget:g} min: stopped in round {round_} (the final evaluation must fit)", flush=True)
            break

    say(f"held-out: paraphrasing {len(args.held_out_sentences)} sentence(s) greedily after distilling...")
    last = held_out.generate_and_score(student, tokenizer)
    result = {
        "method": "distillation",
        "seed": args.seed,
        "rounds": len(rounds),
        "stopped_by_time_budget": stopped,
        "judge": judge.name,
        "teacher": args.teacher or "the student's base (self-distillation)",
        "target": TARGET,
        "floor": args.floor,
        "train": {"file": str(args.train), "sentences": len(args.train_sentences)},
        "held_out": [{"source": a["source"], "before": a["generation"], "after": b["generation"]} for a, b in zip(first, last)],
        "before": held_out_metrics(first),
        "after": held_out_metrics(last),
        "round_stats": rounds,
        "seconds": time.monotonic() - started,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if not k.endswith("_sentences")},
    }
    (args.output_dir / "result.json").write_text(json.dumps(result, indent=1, ensure_ascii=False), encoding="utf-8")
    return result


def summary_line(metrics: dict) -> str:
    """One line of held-out metrics."""
    return " ".join(f"{k} {v:.3f}" for k, v in metrics.items() if v is not None)


def report(result: dict, output_dir: Path) -> None:
    """Print the held-out outputs and the before/after numbers."""
    print_held_out(result)
    print(f"{result['rounds']} round(s) in {result['seconds'] / 60:.1f} min; result: {output_dir / 'result.json'}")


def main(argv: list[str] | None = None) -> None:
    started = time.monotonic()  # the time budget counts from here: loading the models is part of the run
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    student, tokenizer, judge = load_policy_and_judge(args)
    teacher = None
    if args.teacher:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        teacher = (AutoModelForCausalLM.from_pretrained(args.teacher, dtype=torch.float32), AutoTokenizer.from_pretrained(args.teacher))
    report(distill(args, student, tokenizer, judge, started, teacher), args.output_dir)


if __name__ == "__main__":
    main()
