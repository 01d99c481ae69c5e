"""LoRA GRPO of a small paraphrase generator rewarded by PLUIE + novelty, with a shared judge.

The policy is the embedded SmolLM2-135M-Instruct (as a plain trainable model) with a LoRA adapter;
the judge is the default judge -- the same base weights with the packaged PLUIE adapter, loaded
frozen beside the policy's (``add_default_judge_adapter`` + ``Judge.from_peft(..., adapter_name="judge")``),
so no second copy of the model is held. ``--judge base`` judges with the untuned base instead. PLUIE alone would reward copying the source, so a novelty reward (1 - word
edit similarity to the source) is added with ``reward_weights``.

The default run is sized to show learning on a CPU: 8 fixed training sentences seen over and over
(each step: 2 of them x 4 completions), 4 held-out sentences paraphrased greedily before and after
training and scored by the judge. It prints one line per step, the held-out PLUIE before/after and
writes ``run_curves.png`` (reward, PLUIE, novelty and accept rate per step) in the output folder
(``pluie-reward plot-run DIR`` redraws it).

    python examples/grpo_paraphrase.py                        # ~20-30 min on 2 CPU cores
    python examples/grpo_paraphrase.py --max-steps 2 --held-out 1   # smoke run, a few minutes
    python examples/grpo_paraphrase.py --max-steps 300 --num-generations 8 --batch-size 16 --data ../shared/data/paraphrasus/ms-mrpc.json
    python examples/grpo_paraphrase.py --novelty-weight 0 --alarm   # unguarded PLUIE, watched by a hack alarm

``--alarm`` wraps the PLUIE reward in :class:`~pluie_reward.AlarmedReward` with two independent views
of the same completions, novelty against the source and the guard (0 clean, -1 flagged): the
``alarm/*`` metrics are printed each step and a ``HackWarning`` says when PLUIE rises while they do not.

The embedded 135M judge is for demos, not quality: use a 7B+ instruct model as judge for real runs
(e.g. a policy and judge on the same 7B base via ``Judge.from_peft``, or ``Judge.load(..., offload_device="cpu")``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import torch
from datasets import Dataset
from peft import LoraConfig, get_peft_model
from transformers import PrinterCallback, TrainerCallback, set_seed
from trl import GRPOConfig, GRPOTrainer

from pluie_reward import (AlarmedReward, GuardReward, HackAlarm, Judge, PluieCallback, PluieReward, add_default_judge_adapter,
                          load_trainable_embedded, novelty)
from pluie_reward.integrations.rewards import novelty_score
from pluie_reward.tools.runs import plot_run, read_run, summary

TRAIN = [  # the fixed training prompts (seen again and again: learning, not prompt-to-prompt noise)
    "The company said its profit rose sharply in the third quarter.",
    "Officials closed the bridge after the storm damaged its supports.",
    "The new library will open to the public next spring.",
    "Researchers found that the drug reduced symptoms in most patients.",
    "The mayor announced a plan to build more affordable housing.",
    "Heavy rain delayed several flights at the city airport on Monday.",
    "The team won the championship for the second year in a row.",
    "Prices for fresh vegetables went up during the dry summer.",
]
HELD_OUT = [  # never trained on: paraphrased greedily before and after training
    "The museum will stay closed until the repairs are finished.",
    "Many parents worry about how much time their children spend online.",
    "The factory plans to hire two hundred workers next year.",
    "A strong wind knocked down trees across the northern suburbs.",
]
INSTRUCTION = "Paraphrase the following sentence. Reply with the paraphrase only.\n\n{}"


def load_sentences(path: Path | None, n: int) -> list[str]:
    """The training sentences: the built-in ones, or the first ``n`` distinct ``sentence1`` of a PARAPHRASUS-style JSON."""
    if path is None:
        return TRAIN[:n]
    rows = json.loads(path.read_text()).values()
    return list(dict.fromkeys(r["sentence1"] for r in rows if len(r["sentence1"]) < 160))[:n]


def chat(sentence: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": INSTRUCTION.format(sentence)}]


class PrintRewards(TrainerCallback):
    """One line per logged step (TRL's own printer is removed, so lines are not printed twice)."""

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "eval_pluie_mean" in logs:
            print(f"step {state.global_step:>3}  held-out PLUIE {logs['eval_pluie_mean']:+.3f}  "
                  f"accept {logs['eval_pluie_accept_rate']:.2f}", flush=True)
        if logs and "rewards/pluie/mean" in logs:
            print(
                f"step {state.global_step:>3}  {time.monotonic() - self.start:6.0f}s  reward {logs['reward']:+.3f}  "
                f"pluie {logs['rewards/pluie/mean']:+.3f}  novelty {logs.get('rewards/novelty/mean', float('nan')):.3f}  "
                f"accept {logs.get('pluie/accept_rate', float('nan')):.2f}  "
                f"length {logs.get('completions/mean_length', float('nan')):.1f}"
                + (f"  alarm: shift {logs['alarm/reward_shift']:+.2f} divergence {logs['alarm/divergence']:+.2f} "
                   f"fired {int(logs['alarm/fired'])}" if "alarm/divergence" in logs else ""),
                flush=True,
            )


def describe(name: str, table: list[dict]) -> float:
    """Print the held-out paraphrases of one evaluation; return their mean PLUIE."""
    scores = [r["score"] for r in table]
    novelties = [novelty_score(r["source"], r["generation"]) for r in table]
    print(f"\nheld-out {name}: mean PLUIE {sum(scores) / len(scores):+.3f}, mean novelty {sum(novelties) / len(novelties):.3f}")
    for r in table:
        print(f"  [{r['score']:+.2f}] {r['source']!r}\n          -> {r['generation']!r}")
    return sum(scores) / len(scores)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-steps", type=int, default=60)
    parser.add_argument("--data", type=Path, default=None, help="PARAPHRASUS-style JSON whose sentence1 are the training sources (default: 8 built-in sentences)")
    parser.add_argument("--sentences", type=int, default=8, help="number of training sentences (default 8)")
    parser.add_argument("--held-out", type=int, default=len(HELD_OUT), help="held-out sentences scored before/after (default 4)")
    parser.add_argument("--num-generations", type=int, default=4, help="completions per source (the GRPO group)")
    parser.add_argument("--batch-size", type=int, default=8, help="completions per step (batch-size / num-generations sources)")
    parser.add_argument("--max-completion-length", type=int, default=32)
    parser.add_argument("--novelty-weight", type=float, default=0.5, help="reward = pluie + w * novelty (0 turns novelty off)")
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--eval-every", type=int, default=20, help="held-out PLUIE every N steps (and before/after)")
    parser.add_argument("--output-dir", type=Path, default=Path("runs/grpo_paraphrase"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--judge", choices=("default", "base"), default="default",
                        help="default: the default judge (its adapter beside the policy's); base: the untuned embedded model")
    parser.add_argument("--alarm", action="store_true", help="watch the PLUIE reward with a hack alarm (novelty and guard views)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's); 1 is much faster on a CPU shared with other jobs")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.batch_size % args.num_generations:
        parser.error("--batch-size must be a multiple of --num-generations.")
    if args.max_steps < 1 or args.eval_every < 1 or args.held_out < 1:
        parser.error("--max-steps, --eval-every and --held-out must be at least 1.")

    set_seed(args.seed)
    shutil.rmtree(args.output_dir / "pluie", ignore_errors=True)  # held-out tables of an earlier run
    sources = load_sentences(args.data, args.sentences)
    held_out = HELD_OUT[: args.held_out]
    dataset = Dataset.from_dict({"prompt": [chat(s) for s in sources], "source": sources})

    policy, tokenizer = load_trainable_embedded()
    policy = get_peft_model(
        policy,
        LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, lora_dropout=0.0,
                   target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM"),
    )
    if args.judge == "default":  # the default judge: the packaged adapter, frozen, on the policy's base weights
        judge = Judge.from_peft(add_default_judge_adapter(policy), tokenizer, adapter_name="judge")
    else:  # the untuned base: the policy's weights with its adapter disabled while scoring
        judge = Judge.from_peft(policy, tokenizer)
    pluie = PluieReward(judge, template="para-fs", fields={"source": "source"})
    if args.alarm:  # PLUIE's values unchanged; alarm/* metrics from two views of the same completions
        pluie = AlarmedReward(pluie, {"novelty": novelty, "guard": GuardReward("para-fs", tokenizer)}, HackAlarm(warmup=5))
    reward_funcs, weights = [pluie], [1.0]
    if args.novelty_weight:
        reward_funcs.append(novelty)
        weights.append(args.novelty_weight)

    # held-out PLUIE: greedy paraphrases of sentences never trained on, scored by the judge, before
    # training, every --eval-every steps and at the end (tables in OUTPUT/pluie/step-*.jsonl)
    held_out_eval = PluieCallback(
        judge, "para-fs", [{"prompt": chat(s), "source": s} for s in held_out], every_n_steps=args.eval_every,
        max_new_tokens=args.max_completion_length, batch_size=4,
    )

    on_gpu = torch.cuda.is_available()
    config = GRPOConfig(
        output_dir=str(args.output_dir),
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        learning_rate=args.learning_rate,
        reward_weights=weights,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=args.seed,
        use_cpu=not on_gpu,  # TRL configs default to bf16=True: on a CPU say use_cpu=True, bf16=False
        bf16=on_gpu and torch.cuda.is_bf16_supported(),
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=policy, reward_funcs=reward_funcs, args=config, train_dataset=dataset,
        processing_class=tokenizer, callbacks=[PrintRewards()],
    )
    trainer.remove_callback(PrinterCallback)  # disable_tqdm=True adds it: it would print every log dict again
    held_out_eval.attach(trainer)
    before = held_out_eval.evaluate(policy, tokenizer, args=config, state=trainer.state)  # step 0
    trainer.train()
    if trainer.state.global_step % args.eval_every:  # the last step was not evaluated yet
        trainer.state.log_history.append({"step": trainer.state.global_step,
                                          **held_out_eval.evaluate(policy, tokenizer, args=config, state=trainer.state)})
    trainer.state.log_history.insert(0, {"step": 0, **before})  # train() starts a fresh state
    trainer.save_state()  # trainer_state.json: what plot_run / pluie-reward plot-run read

    tables = read_run(args.output_dir).tables
    first, last = min(tables), max(tables)
    start = describe("before training (step 0)", tables[first])
    end = describe(f"after training (step {last})", tables[last])
    print(f"\nheld-out mean PLUIE: before {start:+.3f}, after {end:+.3f} ({end - start:+.3f})")
    run = read_run(args.output_dir)
    print("\n" + "\n".join(summary(run)))
    path = plot_run(run, title=f"GRPO paraphrase, {args.max_steps} steps, PLUIE + {args.novelty_weight} x novelty")
    print(f"curves: {path}")


if __name__ == "__main__":
    main()
