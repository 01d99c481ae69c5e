"""Exact by construction: the shared-prefix path, proven on float64 tiny random models of every
architecture family the transformers engine accepts, against eq. 3 computed here (a full forward of
each chat rendering, ``test_chat_templates.eq3``), so that no check forward runs at scoring time.

In float64 both sides agree to ~1e-14: a wrong log-sum-exp merge of the prefix and suffix parts, a
causal mask shifted by one or a prefix run twice moves a score by far more than the 1e-9 allowed.
A family whose attention the fast path cannot compute (gpt-oss: attention sinks) is refused when the
judge is made, with the reason, and scored whole, still exactly.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from pluie_reward import Judge, load_template
from pluie_reward.testing import make_tiny_tokenizer

from test_chat_templates import eq3

WINDOW = 120  # tokens (the tiny tokenizer's): the long pair below is beyond it, the other prompts (80-106) within

# family -> config overrides; the windowed ones have prompts on both sides of the window
FAMILIES = {
    "llama": {},
    "qwen2": {},
    "qwen3": {},
    "mistral": {"sliding_window": WINDOW},
    "gemma3_text": {"sliding_window": WINDOW, "head_dim": 16, "layer_types": ["sliding_attention", "full_attention"]},
    "phi3": {},
    "gpt_oss": {"sliding_window": WINDOW, "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2,
                "layer_types": ["sliding_attention", "full_attention"]},
}
TOLERANCE = 1e-9


@pytest.fixture(scope="module")
def tokenizer():
    return make_tiny_tokenizer()


def tiny64(family: str, tokenizer, seed: int = 0):
    """A tiny random float64 model of ``family`` (2 layers, hidden 64, grouped key/value heads)."""
    kw = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=4096, initializer_range=0.3, pad_token_id=tokenizer.pad_token_id,
              bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    config = AutoConfig.for_model(family, **{**kw, **FAMILIES[family]})
    torch.manual_seed(seed)
    # gpt-oss's grouped-matmul experts take no float64: its plain per-expert loop computes the same
    extra = {"experts_implementation": "eager"} if family == "gpt_oss" else {}
    return AutoModelForCausalLM.from_config(config, **extra).double().eval()


def items() -> dict[str, list[str]]:
    """Loose pairs, a group sharing one source (the GRPO shape), and a group whose shared source alone is
    beyond the window (its prompts run whole)."""
    long = "The committee met on Tuesday and agreed, after a long debate about the budget, to delay the vote."
    return {
        "source": ["The cat sleeps.", "Prices rose in May.", "It rained all day.", "It rained all day.", "It rained all day.",
                   long, long, "Short one."],
        "hypothesis": ["A cat is asleep.", "In May prices went up.", "The rain never stopped.", "It was sunny.", "Rain, all day.",
                       long.replace("Tuesday", "Monday"), "No vote.", "A long answer that goes on and on about many other things."],
    }


def eq3_scores(model, tokenizer, template: str, fields: dict[str, list[str]]) -> list[float]:
    t = load_template(template)
    n = len(fields["source"])
    return [eq3(model, tokenizer, t.chat({k: v[i] for k, v in fields.items()}), t.answers) for i in range(n)]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_family_matches_eq3_in_float64(family, tokenizer):
    model = tiny64(family, tokenizer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        judge = Judge.from_model(model, tokenizer, batch_tokens=256)
    made = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    fields = items()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = judge.score("para-direct", **fields)
    scored = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    want = eq3_scores(model, tokenizer, "para-direct", fields)
    assert max(want) - min(want) > 1e-2  # the scores differ: a swapped row would show
    assert max(abs(a - b) for a, b in zip(got, want)) <= TOLERANCE, (got, want)
    stats = judge.engine.stats
    if family == "gpt_oss":  # refused when the judge is made, with the reason, once; never discovered per call
        assert judge.engine.fast is False and stats["prefix_passes"] == 0
        assert "sinks" in judge.engine.plain_reason() or "eager" in judge.engine.plain_reason()
        assert len(made) == 1 and judge.engine.plain_reason() in made[0] and not scored
        return
    assert judge.engine.fast is True and not made
    assert stats["prefix_passes"] >= 2  # the template prefix and the group's source
    assert stats["rows"] > stats["plain_rows"]  # most rows attended a cached prefix
    if "sliding_window" in FAMILIES[family]:
        assert stats["plain_rows"] >= 1 and any("sliding window" in m for m in scored)
    else:
        assert stats["plain_rows"] == 0 and not scored


def test_attention_sinks_are_refused_from_the_model_itself(tokenizer):
    """gpt-oss runs eager attention today (refused for that); were it given a wrappable implementation, its
    sinks (an extra softmax term the shared-prefix attention does not add) would be refused, when the judge
    is made, from the model's own modules."""
    from pluie_reward.engines.transformers.engine import fast_path_refusal

    assert "sinks" in fast_path_refusal(tiny64("gpt_oss", tokenizer), "sdpa", True)
    assert fast_path_refusal(tiny64("llama", tokenizer), "sdpa", True) == ""
