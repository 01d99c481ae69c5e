"""LoRA GRPO of a paraphrase generator with a reward that is hard to game: the copy-proof
ParaphraseReward + guards.

Two reward functions, combined with ``reward_weights``:

* ``paraphrase``: ``ParaphraseReward``, the judge's p_yes gated by novelty against the source
  (``p_yes × min(1, novelty / 0.3)``, floored on length), so that copying the source (also with zero-width characters,
  homoglyphs, case or spacing changes, or repeated) earns 0; wrapped in ``GuardedReward``: a
  completion flagged by the guard (the template's "yes" word as a standalone answer, its field
  delimiters 'B: "', or the judge's control tokens such as ``<|im_end|>``) gets 0 instead of its score,
  and ``escape_delimiters=True`` keeps quotes in the fields from closing the template's quotes;
* ``guard``: a separate penalty (``GuardReward``, -1 per flagged completion) whose mean shows up as
  ``rewards/guard/mean``.

Each guard logs its rate through TRL's ``log_metric`` (``guard/answer_word_rate``,
``guard/delimiter_rate``, ``guard/control_token_rate``, ``guard/flagged_rate``), averaged per logging
step; this script prints them with the rewards at each step. A rate that climbs is a policy learning
to hack the judge.

    python examples/grpo_guarded.py --max-steps 2        # CPU smoke run (the embedded 135M model)
    python examples/grpo_guarded.py --max-steps 200 --num-generations 8

The embedded SmolLM2-135M-Instruct is a demo judge (it says "No" to nearly everything); use a 7B+
instruct model for real runs and check it first with ``pluie-reward probe --model ...``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from typing import Sequence

from pluie_reward.common.threads import fit_threads

INSTRUCTION = "Paraphrase the following sentence. Reply with the paraphrase only.\n\n{}"
METRICS = ("guard/answer_word_rate", "guard/delimiter_rate", "guard/control_token_rate", "guard/flagged_rate", "paraphrase/accept_rate",
           "paraphrase/copy_rate")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-steps", type=int, default=20)
    parser.add_argument("--num-generations", type=int, default=4, help="completions per source (the GRPO group)")
    parser.add_argument("--batch-size", type=int, default=4, help="completions per step")
    parser.add_argument("--max-completion-length", type=int, default=32)
    parser.add_argument("--guard-weight", type=float, default=1.0)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--output-dir", default=None)
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


if __name__ == "__main__":
    parse_args()  # --help and bad arguments are answered here, before torch, TRL and PEFT load (main parses again)
    fit_threads()  # before torch loads: on a busy CPU, sleeping threads, one per free core (it does not collapse them)

import torch  # noqa: E402  (the heavy imports come after the early parse above)
from datasets import Dataset  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from pluie_reward import Judge, ParaphraseReward, load_trainable_embedded  # noqa: E402
from pluie_reward.engines.transformers.compat import quiet_renames, training_arguments  # noqa: E402
from pluie_reward.integrations.guards import GuardedReward, GuardReward  # noqa: E402
from pluie_reward.tools.probe import builtin_sample  # noqa: E402


class PrintMetrics(TrainerCallback):
    """Print the rewards and the guards' rates TRL logs at each step."""

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "rewards/paraphrase/mean" in logs:
            rewards = "  ".join(f"{k.split('/')[1]} {logs[k]:+.3f}" for k in logs if k.startswith("rewards/") and k.endswith("/mean"))
            rates = "  ".join(f"{k} {logs[k]:.2f}" for k in METRICS if k in logs)
            print(f"step {state.global_step:>3}  reward {logs['reward']:+.3f}  {rewards}\n          {rates}", flush=True)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)

    sources, _ = builtin_sample("para-fs")  # the probe's built-in English sentences
    sources = [s["source"] for s in sources]
    dataset = Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": INSTRUCTION.format(s)}] for s in sources], "source": sources}
    )

    print("loading the policy and its judge (the embedded SmolLM2-135M-Instruct; its first use converts it, ~30 s)...",
          file=sys.stderr, flush=True)
    policy, tokenizer = load_trainable_embedded()
    with quiet_renames():  # PEFT reads a checkpointing flag under its old name (a FutureWarning about its call)
        policy = get_peft_model(policy, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    judge = Judge.from_peft(policy, tokenizer)  # the base weights, adapter disabled while scoring
    paraphrase = GuardedReward(
        ParaphraseReward(judge, template="para-fs", fields={"source": "source"}),
        guard=True,                 # the default guard of para-fs and the judge's tokenizer
        escape_delimiters=True,     # quotes inside fields become ” before scoring
    )
    guard = GuardReward("para-fs", judge, penalty=-1.0)

    on_gpu = torch.cuda.is_available()
    config = GRPOConfig(
        output_dir=args.output_dir or tempfile.mkdtemp(prefix="grpo-guarded-"),
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        learning_rate=args.learning_rate,
        reward_weights=[1.0, args.guard_weight],
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=args.seed,
        use_cpu=not on_gpu,
        bf16=on_gpu and torch.cuda.is_bf16_supported(),
        disable_tqdm=True,
        **training_arguments(False),  # a 135M policy needs no memory saved; the names this transformers has (no FutureWarning)
    )
    trainer = GRPOTrainer(
        model=policy,
        reward_funcs=[paraphrase, guard],
        args=config,
        train_dataset=dataset,
        processing_class=tokenizer,
        callbacks=[PrintMetrics()],
    )
    print(f"GRPO: {args.max_steps} step(s) of {args.num_generations} completions per prompt; each step samples, judges "
          "and trains before its line (a minute or more on a CPU)...", file=sys.stderr, flush=True)
    with quiet_renames():  # TRL reads a checkpointing flag under its old name at each generation
        trainer.train()
    last = [log for log in trainer.state.log_history if "rewards/paraphrase/mean" in log][-1]
    print("\nlast step's metrics:")
    for key in sorted(last):
        if key.startswith(("rewards/", "guard/", "paraphrase/")) or key == "reward":
            print(f"  {key:28s} {last[key]:+.4f}")


if __name__ == "__main__":
    main()
