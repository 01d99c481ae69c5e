"""The shared-prefix attention reaches a model through transformers' public attention interfaces,
under its own name, selected on the judge's model only while it scores; the private PyTorch op it
uses on CPU is checked against the public SDPA here, so that a move breaks this test."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from transformers import AttentionInterface, AttentionMaskInterface

from pluie_reward.engines.transformers import attention
from pluie_reward.engines.transformers.attention import FUSED_OPS, PREFIX, partial_attention, register, selected
from pluie_reward.testing import make_tiny_causal_lm, make_tiny_judge, make_tiny_tokenizer


def test_registration_adds_a_name_and_replaces_nothing():
    before = AttentionInterface()["sdpa"]
    assert register("sdpa") == PREFIX + "sdpa"
    assert AttentionInterface()["sdpa"] is before  # the process's sdpa is untouched
    assert not getattr(AttentionInterface()["sdpa"], "pluie_dispatch", False)
    assert AttentionMaskInterface()[PREFIX + "sdpa"] is AttentionMaskInterface()["sdpa"]
    assert register("eager") is None


def test_the_judge_selects_it_only_while_scoring_and_other_models_never_see_it():
    judge = make_tiny_judge()
    other = make_tiny_causal_lm(make_tiny_tokenizer(), seed=5)
    own = judge.model.config._attn_implementation
    seen = []
    original = AttentionInterface()[PREFIX + own]

    def spy(module, *args, **kwargs):
        seen.append(module.config._attn_implementation)
        return original(module, *args, **kwargs)

    AttentionInterface.register(PREFIX + own, spy)
    try:
        judge.score("para-fs", source=["a b c", "a b c"], hypothesis=["c b a", "b a c"])
    finally:
        AttentionInterface.register(PREFIX + own, original)
    assert seen and set(seen) == {PREFIX + own}  # the judge's forwards ran through it
    assert judge.model.config._attn_implementation == own  # and the model got its own back
    assert other.config._attn_implementation == own


def test_selected_restores_after_an_error():
    model = make_tiny_causal_lm(make_tiny_tokenizer())
    own = model.config._attn_implementation
    with pytest.raises(RuntimeError):
        with selected(model, register(own)) as took:
            assert took and model.config._attn_implementation == PREFIX + own
            raise RuntimeError("boom")
    assert model.config._attn_implementation == own


def test_the_private_cpu_flash_op_still_exists_and_gives_sdpa_and_its_log_sum_exp():
    op = getattr(torch.ops.aten, FUSED_OPS["cpu"])  # breaks here if PyTorch moves or renames it
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
    out, lse = partial_attention(q, k, v, 1 / math.sqrt(8), causal=True)
    reference = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert torch.allclose(out, reference, atol=1e-5)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(8) + torch.triu(torch.full((5, 5), float("-inf")), 1)
    assert torch.allclose(lse, torch.logsumexp(scores, dim=-1), atol=1e-5)
    assert op is not None


def test_the_private_cuda_flash_op_still_exists_with_the_arguments_and_returns_partial_attention_uses():
    """partial_attention calls the CUDA flash kernel as ``op(q, k, v, dropout_p=, is_causal=, scale=)`` and reads
    ``(output, logsumexp)`` first (a CPU build registers the op too: breaks here if PyTorch moves or changes it)."""
    schema = getattr(torch.ops.aten, FUSED_OPS["cuda"]).default._schema
    names = [a.name for a in schema.arguments]
    assert names[:5] == ["query", "key", "value", "dropout_p", "is_causal"] and "scale" in names
    assert [r.name for r in schema.returns][:2] == ["output", "logsumexp"]


def test_a_failing_fused_kernel_warns_once_and_gives_the_same_attention_in_float32(monkeypatch):
    """A device whose fused kernel raises (a GPU without flash attention) gets the float32 scores, equal to
    SDPA and the log-sum-exp computed here, with one RuntimeWarning; later calls do not try the kernel again."""
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("FlashAttention only supports Ampere GPUs or newer.")

    monkeypatch.setattr(torch.ops.aten, "pluie_test_broken_op", broken, raising=False)
    monkeypatch.setitem(FUSED_OPS, "cpu", "pluie_test_broken_op")
    monkeypatch.setattr(attention, "_BROKEN", {})
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8) for _ in range(3))
    with pytest.warns(RuntimeWarning, match="Ampere"):
        out, lse = partial_attention(q, k, v, 1 / math.sqrt(8), causal=True)
    assert torch.allclose(out, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-5)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(8) + torch.triu(torch.full((5, 5), float("-inf")), 1)
    assert torch.allclose(lse, torch.logsumexp(scores, dim=-1), atol=1e-5)
    partial_attention(q, k, v, 1 / math.sqrt(8), causal=True)
    assert calls == [1] and attention.fused_kernel("cpu", torch.float32, 8, None) is None


@pytest.mark.parametrize(("device", "dtype", "head_dim", "softcap", "kernel"), [
    ("cpu", torch.float64, 64, None, "cpu"), ("cuda", torch.bfloat16, 128, None, "cuda"), ("cuda", torch.float16, 256, None, "cuda"),
    ("cuda", torch.float32, 128, None, None), ("cuda", torch.bfloat16, 264, None, None), ("cuda", torch.bfloat16, 100, None, None),
    ("cuda", torch.bfloat16, 128, 30.0, None), ("cpu", torch.float32, 64, 30.0, None), ("mps", torch.float16, 64, None, None)])
def test_the_fused_kernel_is_chosen_only_where_it_computes_the_attention(device, dtype, head_dim, softcap, kernel):
    """CUDA's flash kernel takes float16/bfloat16 with a head size <= 256 and a multiple of 8; a softcap needs the
    float32 scores everywhere."""
    assert attention.fused_kernel(device, dtype, head_dim, softcap) == kernel


def test_running_out_of_memory_in_the_fused_kernel_is_raised_not_hidden(monkeypatch):
    def out_of_memory(*args, **kwargs):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(torch.ops.aten, "pluie_test_oom_op", out_of_memory, raising=False)
    monkeypatch.setitem(FUSED_OPS, "cpu", "pluie_test_oom_op")
    monkeypatch.setattr(attention, "_BROKEN", {})
    q = torch.randn(1, 1, 2, 8)
    with pytest.raises(torch.cuda.OutOfMemoryError):
        partial_attention(q, q, q, 0.5, causal=True)
    assert attention._BROKEN == {}  # the kernel is not given up for a batch too large


def test_fused_attention_false_scores_through_the_float32_path_with_the_same_scores_and_restores(monkeypatch):
    """The bench times both paths in one run: inside ``fused_attention(False)`` no fused kernel runs, the scores
    are the fused path's (float32 tiny judge), and the switch comes back after the block, an error included."""
    calls = []
    real = getattr(torch.ops.aten, FUSED_OPS["cpu"])

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.ops.aten, "pluie_test_counted_op", counted, raising=False)
    monkeypatch.setitem(FUSED_OPS, "cpu", "pluie_test_counted_op")
    monkeypatch.setitem(attention._FUSED, "on", True)
    judge = make_tiny_judge()
    items = dict(source=["The cat sleeps.", "The cat sleeps."], hypothesis=["A cat is asleep.", "The dog barks loudly."])
    fused = judge.score("para-fs", **items, use_cache=False)
    assert calls  # the fused kernel ran
    calls.clear()
    with attention.fused_attention(False):
        plain = judge.score("para-fs", **items, use_cache=False)
    assert calls == [] and judge.engine.stats["plain_rows"] == 0  # the shared-prefix path, its float32 scores
    assert plain == pytest.approx(fused, abs=1e-4)
    with pytest.raises(KeyError), attention.fused_attention(False):
        raise KeyError("x")
    judge.score("para-fs", **items, use_cache=False)
    assert calls  # on again


def test_the_cuda_kernels_return_layout_is_read_right(monkeypatch):
    """What CUDA's kernel gives back, emulated on the CPU: nine values (output, logsumexp, then sequence lengths,
    RNG state and a debug mask) with a log-sum-exp longer than the queries (the memory-efficient kernel pads it to a
    multiple of 32): partial_attention reads the output and the first q_length log-sum-exps, equal to SDPA and an
    independent log-sum-exp; a shared-prefix forward through it equals the float32 path."""
    def cuda_like(query, key, value, dropout_p=0.0, is_causal=False, scale=None):
        out, lse = attention.partial_attention(query, key, value, scale, causal=is_causal, fused=False)
        padded = torch.cat([lse, torch.full((*lse.shape[:-1], 32 - lse.shape[-1] % 32), float("nan"))], dim=-1)
        empty = torch.empty(0)
        return out, padded, empty, empty, query.shape[-2], key.shape[-2], empty, empty, empty

    monkeypatch.setattr(torch.ops.aten, "pluie_test_cuda_like_op", cuda_like, raising=False)
    monkeypatch.setitem(FUSED_OPS, "cpu", "pluie_test_cuda_like_op")
    monkeypatch.setattr(attention, "_BROKEN", {})
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8)
    out, lse = partial_attention(q, k, v, 1 / math.sqrt(8), causal=False)
    assert lse.shape == (1, 2, 5) and torch.isfinite(lse).all()
    assert torch.allclose(out, torch.nn.functional.scaled_dot_product_attention(q, k, v), atol=1e-5)
    assert torch.allclose(lse, torch.logsumexp((q @ k.transpose(-1, -2)) / math.sqrt(8), dim=-1), atol=1e-5)
    judge = make_tiny_judge()
    items = dict(source=["The cat sleeps."] * 2, hypothesis=["A cat is asleep.", "The dog barks loudly."])
    emulated = judge.score("para-fs", **items, use_cache=False)
    with attention.fused_attention(False):
        assert emulated == pytest.approx(judge.score("para-fs", **items, use_cache=False), abs=1e-4)


def test_a_causal_call_with_fewer_queries_than_keys_is_aligned_top_left_whatever_the_kernel_aligns(monkeypatch):
    """CUDA's flash op aligns a causal mask with fewer queries than keys bottom-right (torch/nn/attention/bias.py:
    "for this particular op it means lower right"), the CPU op and the float32 scores top-left. Emulated here: such a
    call gives the top-left attention computed in the test (the kernel is not asked), a square one still uses it."""
    calls = []

    def lower_right(query, key, value, dropout_p=0.0, is_causal=False, scale=None):
        calls.append(query.shape[-2])
        scores = (query @ key.transpose(-1, -2)) * scale
        if is_causal:  # query i sees keys j <= i + (keys - queries)
            offset = key.shape[-2] - query.shape[-2]
            scores = scores + torch.triu(torch.full(scores.shape[-2:], float("-inf")), 1 + offset)
        return torch.softmax(scores, -1) @ value, torch.logsumexp(scores, -1)

    monkeypatch.setattr(torch.ops.aten, "pluie_test_lower_right_op", lower_right, raising=False)
    monkeypatch.setitem(FUSED_OPS, "cpu", "pluie_test_lower_right_op")
    monkeypatch.setattr(attention, "_BROKEN", {})
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 3, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    out, lse = partial_attention(q, k, v, 0.3, causal=True)
    scores = (q @ k.transpose(-1, -2)) * 0.3 + torch.triu(torch.full((3, 5), float("-inf")), 1)  # top-left
    assert torch.allclose(lse, torch.logsumexp(scores, dim=-1), atol=1e-5)
    assert torch.allclose(out, torch.softmax(scores, dim=-1) @ v, atol=1e-5)
    assert calls == []
    partial_attention(q, k[:, :, :3], v[:, :, :3], 0.3, causal=True)
    partial_attention(q, k, v, 0.3, causal=False)
    assert calls == [3, 3]  # square causal and non-causal calls keep the kernel


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("causal", [True, False])
def test_grouped_query_attention_reads_key_value_head_h_over_group_without_a_copy(fused, causal):
    """Keys/values with fewer heads (GQA) give the attention of the keys repeated per query head as transformers'
    repeat_kv does (query head h reads head h // group), in the fused kernel and in the float32 scores alike."""
    torch.manual_seed(0)
    length_k = 5 if causal else 7
    q, k, v = torch.randn(2, 6, 5, 8), torch.randn(2, 2, length_k, 8), torch.randn(2, 2, length_k, 8)
    out, lse = partial_attention(q, k, v, 0.3, causal=causal, fused=fused)
    k_rep, v_rep = k.repeat_interleave(3, dim=1), v.repeat_interleave(3, dim=1)  # head h <- h // 3
    scores = (q @ k_rep.transpose(-1, -2)) * 0.3
    if causal:
        scores = scores + torch.triu(torch.full((5, 5), float("-inf")), 1)
    assert torch.allclose(lse, torch.logsumexp(scores, dim=-1), atol=1e-5)
    assert torch.allclose(out, torch.softmax(scores, dim=-1) @ v_rep, atol=1e-5)



def test_the_float32_scores_take_values_of_another_head_size():
    """Values may have their own head size (multi-head latent attention: 192-wide keys, 128-wide values); the
    output takes the values' size."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 5, 12), torch.randn(1, 2, 5, 12), torch.randn(1, 2, 5, 8)
    out, _ = partial_attention(q, k, v, 0.3, causal=True, fused=False)
    scores = (q @ k.repeat_interleave(2, dim=1).transpose(-1, -2)) * 0.3 + torch.triu(torch.full((5, 5), float("-inf")), 1)
    assert out.shape == (1, 4, 5, 8)
    assert torch.allclose(out, torch.softmax(scores, dim=-1) @ v.repeat_interleave(2, dim=1), atol=1e-5)


def test_values_of_another_head_size_skip_the_fused_kernel_without_giving_it_up(monkeypatch):
    """The fused kernels refuse values narrower than the keys (CPU: "Q/K/V should have the same head size"): such a
    call takes the float32 scores quietly, and the device keeps its kernel for the other calls."""
    monkeypatch.setattr(attention, "_BROKEN", {})
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 5, 12), torch.randn(1, 2, 5, 12), torch.randn(1, 2, 5, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, _ = partial_attention(q, k, v, 0.3, causal=True)
    assert torch.allclose(out, partial_attention(q, k, v, 0.3, causal=True, fused=False)[0])
    assert attention._BROKEN == {} and attention.fused_kernel("cpu", torch.float32, 12, None) == "cpu"


def test_a_fused_kernel_without_grouped_query_attention_gets_the_heads_repeated_not_the_float32_path(monkeypatch):
    """A kernel that refuses fewer key/value heads than query heads (not PyTorch's flash kernels today) is called
    again with the heads repeated, from then on for that device, with no warning and the same attention."""
    calls = []

    def no_gqa(query, key, value, dropout_p=0.0, is_causal=False, scale=None):
        calls.append(key.shape[1])
        if key.shape[1] != query.shape[1]:
            raise RuntimeError("Number of heads in key/value must equal the query's")
        return attention.partial_attention(query, key, value, scale, causal=is_causal, fused=False)

    monkeypatch.setattr(torch.ops.aten, "pluie_test_no_gqa_op", no_gqa, raising=False)
    monkeypatch.setitem(FUSED_OPS, "cpu", "pluie_test_no_gqa_op")
    monkeypatch.setattr(attention, "_BROKEN", {})
    monkeypatch.setattr(attention, "_NO_GQA", set())
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    reference = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3, enable_gqa=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out, _ = partial_attention(q, k, v, 0.3, causal=True)
        again, _ = partial_attention(q, k, v, 0.3, causal=True)
    assert torch.allclose(out, reference, atol=1e-5) and torch.allclose(again, reference, atol=1e-5)
    assert calls == [2, 4, 4] and attention._BROKEN == {}  # refused once, then repeated heads only
