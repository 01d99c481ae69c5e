"""The reward's share of a GRPO step's wall time, per judge placement, each in a fresh process: a small real
``trl.GRPOTrainer`` (the embedded model as a LoRA policy, 2 prompts x 4 completions of up to 24 tokens, CPU) with
:class:`~pluie_reward.PluieReward` on ``para-fs`` in a timer, over the wall time of ``trainer.train()``.

Placements: ``shared`` (``Judge.from_peft(policy)``), ``separate`` (``Judge.load()``, a second copy) and ``vllm``
(``Judge.load(engine="vllm")`` in the trainer's process, its start not timed).

Example:
    $ pluie-reward bench grpo --steps 4 --placements shared,separate,vllm
"""

from __future__ import annotations

import tempfile
from typing import Any, Sequence

from ...core.judge import Judge
from ...integrations.rewards import PluieReward
from ..report import markdown_table
from ..shared import Progress
from .measure import Clock, cell, in_fresh_process, mib, peak_rss_mb, timed
from .run import builtin_pairs

PLACEMENTS = ("shared", "separate", "vllm")


class TimedReward:
    """A reward callable that adds up the seconds spent inside it (TRL sees the wrapped reward's name).

    Example:
        >>> timed = TimedReward(lambda completions, **kw: [0.0] * len(completions))
        >>> timed(completions=["a", "b"]), timed.calls
        ([0.0, 0.0], 1)
    """

    def __init__(self, reward: Any) -> None:
        self.reward = reward
        self.__name__ = getattr(reward, "__name__", "reward")
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        clock = Clock()
        try:
            return self.reward(*args, **kwargs)
        finally:
            self.seconds += clock.seconds
            self.calls += 1


def grpo_child(placement: str, steps: int, output_dir: str, threads: int | None = None) -> dict[str, Any]:
    """Run ``steps`` GRPO steps with the judge ``placement`` in this (fresh) process; return the timings and the
    process's peak memory (RSS, and CUDA max allocated where CUDA is available)."""
    import torch

    if threads is not None:
        torch.set_num_threads(threads)
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from trl import GRPOConfig, GRPOTrainer

    from ...engines.transformers.loading import load_trainable_embedded  # lazy: CLI start-up (torch)

    policy, tokenizer = load_trainable_embedded()
    policy = get_peft_model(policy, LoraConfig(target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; choose from {PLACEMENTS}.")
    load_seconds, judge, _ = timed(None, {"shared": lambda: Judge.from_peft(policy, tokenizer), "separate": Judge.load,
                                          "vllm": lambda: Judge.load(engine="vllm")}[placement])
    sources = [s for s, _ in builtin_pairs()[:4]]  # the prompts: the first four built-in sources
    ds = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"Paraphrase: {s}"}] for s in sources], "source": sources})
    reward = TimedReward(PluieReward(judge, template="para-fs", fields={"source": "source"}))
    args = GRPOConfig(output_dir=output_dir, num_generations=4, per_device_train_batch_size=8, max_completion_length=24,
                      max_steps=steps, logging_steps=1, report_to="none", save_strategy="no", use_cpu=True, bf16=False, seed=0)
    trainer = GRPOTrainer(model=policy, processing_class=tokenizer, train_dataset=ds, args=args, reward_funcs=[reward])
    train_seconds, _, _ = timed(None, trainer.train)
    judge.close()
    return {"placement": placement, "steps": steps, "train_seconds": train_seconds, "reward_seconds": reward.seconds,
            "reward_calls": reward.calls, "judge_load_seconds": load_seconds, "share": reward.seconds / train_seconds,
            "peak_rss_mb": peak_rss_mb(), "cuda_max_mb": mib(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else None}


def grpo_share(placements: Sequence[str], steps: int, threads: int | None = None) -> list[dict[str, Any]]:
    """Each placement's timings, each in a fresh subprocess (so memory and threads do not leak between them).

    Example:
        >>> grpo_share(["shared", "separate"], steps=4)[0]["share"]  # GRPO training in subprocesses: minutes  # doctest: +SKIP
        0.04
    """
    out = []
    for placement in placements:  # the child's output is captured: a line with the time elapsed every 10 s meanwhile
        with tempfile.TemporaryDirectory(prefix="pluie-bench-grpo-") as folder, \
                Progress(0, f"bench grpo: judge {placement}, {steps} GRPO steps in a fresh process"):
            out.append(in_fresh_process(grpo_child, placement, steps, folder, threads))
    return out


def format_grpo_table(rows: Sequence[dict[str, Any]]) -> str:
    """GRPO timings and each placement's peak memory as a Markdown table."""
    if not rows:
        return ""
    title = (f"Reward share of GRPO steps (trl.GRPOTrainer, LoRA policy = embedded model, {rows[0]['steps']} steps of 2 prompts x 4 "
             "completions <= 24 tokens, CPU; reward = PluieReward para-fs, timed inside the reward callable):")
    return markdown_table(
        ["judge placement", "judge load s", "train s", "s per step", "reward s", "reward share of the step", "peak RSS MB",
         "CUDA max MB"],
        [[r["placement"], f"{r['judge_load_seconds']:.1f}", f"{r['train_seconds']:.1f}",
          f"{r['train_seconds'] / r['steps']:.1f}", f"{r['reward_seconds']:.2f}", f"{r['share']:.1%}", f"{r['peak_rss_mb']:.0f}",
          cell(r.get("cuda_max_mb"), ".0f")] for r in rows], "lrrrrrrr", title)
