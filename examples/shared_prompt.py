"""GRPO where the prompt is most of every sequence: each distinct prompt of a batch runs once, and a step says what
it is doing.

In ``grpo_paraphrase.py`` a prompt is ~150 tokens (the instruction, a worked example, the sentence) and a completion
~20. TRL's ``GRPOTrainer`` runs the whole prompt again for each of a group's 8 completions: in the policy's forward
and backward passes, and in the prefill of sampling. :class:`SharedPromptGRPOTrainer` runs each distinct prompt of a
batch once, keeps its keys and values (with their gradient while training), hands them to every row of that prompt
(``DynamicCache.reorder_cache``: an ``index_select``, through which the gradient flows back and is summed), and runs
only the completions on top. Log-probabilities, entropies and gradients are TRL's up to float rounding, and
sampling from a seed draws the same tokens (``tests/test_examples.py`` compares both with TRL's own path). Measured
side by side on one machine (the example's batch of 16 completions, 2 cores shared with other work, alternated),
the policy's forward and backward took 4.2-9.4x less time and sampling 1.6x less.

It also prints what a step is doing (``progress``: sampling, with the tokens drawn so far; judging; each policy
pass), so that no stretch of a step is silent for long on a slow CPU.

Only the text-only, single-turn path is changed: a batch with images, tools or an MoE auxiliary loss goes through
TRL's own methods. It overrides two of ``GRPOTrainer``'s private methods (``_get_per_token_logps_and_entropies``,
``_generate_single_turn``, TRL 1.16) and ``_calculate_rewards`` for its progress line; the tests compare with TRL's
own results, so they fail if TRL changes them.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import torch
from transformers import StoppingCriteria, StoppingCriteriaList
from trl import GRPOTrainer

from pluie_reward.engines.transformers.compat import cache_argument, checkpointing_on, output_cache


def _shared_prefix(model: Any, ids: torch.Tensor, mask: torch.Tensor, split: int, positions: bool) -> Any:
    """The key/value cache of ``ids[:, :split]`` with one row per row of ``ids``, each distinct prefix (tokens and
    mask) computed once. ``positions``: number them from the attention mask (as ``generate`` does) rather than from 0
    (as a plain forward does)."""
    unique, inverse = torch.unique(torch.cat([ids[:, :split], mask[:, :split]], dim=1), dim=0, return_inverse=True)
    prefix_ids, prefix_mask = unique[:, :split], unique[:, split:]
    extra = {"position_ids": (prefix_mask.cumsum(-1) - 1).clamp(min=0)} if positions else {}
    cache = output_cache(model(input_ids=prefix_ids, attention_mask=prefix_mask, use_cache=True, logits_to_keep=1, **extra))
    cache.reorder_cache(inverse.to(ids.device))
    return cache


def shared_prompt_logps(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, logits_to_keep: int,
                        temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities and entropies of the last ``logits_to_keep`` tokens of each row (TRL's completion
    part; 0 where the mask is 0), each distinct prompt run once.

    Args:
        model: the policy (a causal LM, PEFT or not).
        input_ids: prompt (left-padded) then completion (right-padded) ids, one row per completion.
        attention_mask: its mask.
        logits_to_keep: the completion's width.
        temperature: the logits are divided by it (as TRL's sampling and loss do).

    Returns:
        ``(log_probs, entropies)``, each ``(rows, logits_to_keep)``.
    """
    split = input_ids.size(1) - logits_to_keep - 1  # the prompt but its last token, whose output predicts the first one
    cache = _shared_prefix(model, input_ids, attention_mask, split, positions=False)  # numbered from 0, as TRL's forward
    logits = model(input_ids=input_ids[:, split:], attention_mask=attention_mask, use_cache=True,
                   **{cache_argument(model): cache}).logits[:, :-1].float() / temperature
    log_probs = logits.log_softmax(-1)
    mask = attention_mask[:, split + 1:]
    token_logps = log_probs.gather(-1, input_ids[:, split + 1:].unsqueeze(-1)).squeeze(-1) * mask
    entropies = -(log_probs.exp() * log_probs).sum(-1) * mask
    return token_logps, entropies


class TokenProgress(StoppingCriteria):
    """A stopping criterion that never stops: it says how many tokens have been drawn, at most every ``every``
    seconds (``say``: one line)."""

    def __init__(self, say: Callable[[str], None], what: str, limit: int, every: float) -> None:
        self.say, self.what, self.limit, self.every = say, what, limit, every
        self.drawn, self.last = 0, time.monotonic()

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        self.drawn += 1
        if time.monotonic() - self.last >= self.every:
            self.say(f"{self.what}: token {self.drawn}/{self.limit}")
            self.last = time.monotonic()
        return torch.zeros(input_ids.size(0), dtype=torch.bool, device=input_ids.device)


def prefilled_generate(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, progress: TokenProgress | None = None,
                       **kwargs: Any) -> torch.Tensor:
    """``model.generate`` on left-padded rows, each distinct prompt prefilled once (the rows of a GRPO group share
    theirs); rows without a repeated prompt go straight to ``generate``.

    Example:
        >>> from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer
        >>> model = make_tiny_causal_lm(make_tiny_tokenizer())
        >>> ids = torch.tensor([[5, 6, 7, 8]] * 3)
        >>> plain = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, do_sample=False)
        >>> torch.equal(prefilled_generate(model, ids, torch.ones_like(ids), max_new_tokens=4, do_sample=False), plain)
        True
    """
    generate = type(model).generate  # the class's: a trainer may have put this function on the instance
    if progress is not None:
        kwargs["stopping_criteria"] = StoppingCriteriaList([*kwargs.get("stopping_criteria", []), progress])
    rows = torch.cat([input_ids, attention_mask], dim=1)
    if input_ids.size(1) < 2 or len(torch.unique(rows, dim=0)) == len(rows):
        return generate(model, input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    with torch.no_grad():
        cache = _shared_prefix(model, input_ids, attention_mask, input_ids.size(1) - 1, positions=True)
    return generate(model, input_ids=input_ids, attention_mask=attention_mask, **{cache_argument(model): cache}, **kwargs)


class SharedPromptGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer``, each distinct prompt of a batch run once (module docstring) and a step's phases said
    through ``progress`` (e.g. ``print``; None: silent) at most every ``every`` seconds while sampling."""

    def __init__(self, *args: Any, progress: Callable[[str], None] | None = None, every: float = 5.0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.progress, self.every = progress, every
        self._passes = 0

    def _say(self, text: str) -> None:
        if self.progress is not None:
            self.progress(f"step {self.state.global_step + 1}: {text}")

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        if self.use_vllm or self.use_transformers_continuous_batching or images is not None or multimodal_fields:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
        model = self.accelerator.unwrap_model(self.model_wrapped)  # what TRL's own path generates with
        what = f"sampling {len(prompt_ids)} completions"
        self._say(f"{what} (at most {self.max_completion_length} tokens each)...")
        tracker = TokenProgress(self._say, what, self.max_completion_length, self.every) if self.progress else None
        model.generate = lambda **kwargs: prefilled_generate(model, progress=tracker, **kwargs)
        try:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations, has_tool_images)
        finally:
            del model.generate

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._say(f"judging {len(completions)} completions...")
        self._passes = 0
        return super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                           compute_entropy=False, compute_aux_loss=False, **extra):
        if (compute_aux_loss or any(value is not None for value in extra.values()) or input_ids.size(1) <= logits_to_keep + 1
                or checkpointing_on(self.accelerator.unwrap_model(model))):  # checkpointing keeps no cache
            return super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, batch_size,
                                                              compute_entropy, compute_aux_loss, **extra)
        if torch.is_grad_enabled():
            self._passes += 1
            passes = self.args.gradient_accumulation_steps
            self._say(f"policy forward and backward, pass {self._passes}/{passes} ({input_ids.size(0)} completions)...")
        batch_size = batch_size or input_ids.size(0)
        parts = []
        for start in range(0, input_ids.size(0), batch_size):
            with self.accelerator.autocast():
                parts.append(shared_prompt_logps(model, input_ids[start:start + batch_size], attention_mask[start:start + batch_size],
                                                 logits_to_keep, self.temperature))
        logps = torch.cat([p[0] for p in parts])
        return logps, (torch.cat([p[1] for p in parts]) if compute_entropy else None), None
