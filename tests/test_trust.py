"""Scores a user can trust: exact on several architectures and on every engine path, never stale
after any kind of weight update, safe under concurrency, loud (not silent) when a slower path is taken."""

from __future__ import annotations

import asyncio
import copy
import functools
import threading
import warnings

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from pluie_reward import AsyncPluieReward, Judge, load_template
from pluie_reward.engines.transformers import attention
from pluie_reward.engines.transformers.engine import read_positions
from pluie_reward.testing import make_tiny_causal_lm, make_tiny_judge, make_tiny_tokenizer

from conftest import mrpc_pairs
from test_chat_templates import eq3


@pytest.fixture(scope="module")
def tokenizer():
    return make_tiny_tokenizer()


def tiny(arch: str, tokenizer, seed: int = 0, **overrides):
    """A tiny random model of a real architecture, sized to the tiny ChatML tokenizer."""
    ids = dict(pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    if arch == "gpt2":
        kw = dict(vocab_size=len(tokenizer), n_embd=64, n_layer=2, n_head=4, n_positions=4096, initializer_range=0.3)
    else:
        kw = dict(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, initializer_range=0.3)
    if arch == "gemma2":
        kw["head_dim"] = 16
    config = AutoConfig.for_model(arch, **kw, **ids, **overrides)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config).eval()


def reference(model, tokenizer, template: str, fields: dict) -> list[float]:
    t = load_template(template)
    model64 = copy.deepcopy(model).double()
    n = len(next(iter(fields.values())))
    return [eq3(model64, tokenizer, t.chat({k: v[i] for k, v in fields.items()}), t.answers) for i in range(n)]


def pairs(n: int = 5, group: int = 3) -> dict[str, list[str]]:
    """Loose pairs and a group sharing one source (the GRPO shape)."""
    sources, hypotheses, _ = mrpc_pairs(n + group)
    return {"source": sources[:n] + [sources[0]] * group, "hypothesis": hypotheses[: n + group]}


ARCHITECTURES = {
    "llama": {},
    "qwen2": {},
    "mistral": {"sliding_window": 4096},
    "gemma2": {},  # attention soft-capping, sliding window on alternate layers
    "phi3": {},
    "gpt2": {},  # absolute position embeddings
}


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_architectures_take_the_fast_path_and_match_eq3(arch, tokenizer):
    model = tiny(arch, tokenizer, **ARCHITECTURES[arch])
    fields = pairs()
    if model.config._attn_implementation == "eager":
        # transformers >= 5.20 runs Gemma-2 with eager attention only (SDPA cannot soft-cap); eager has no
        # registry entry to route through, so the judge says so once, when it is made, and runs whole prompts
        assert arch == "gemma2" and not type(model)._supports_sdpa
        with pytest.warns(RuntimeWarning, match="whole prompts without prefix caching.*'eager'"):
            judge = Judge.from_model(model, tokenizer, batch_tokens=256)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # said once, not again per call
            got = judge.score("para-fs", **fields)
        want = reference(model, tokenizer, "para-fs", fields)
        assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-3
        assert judge.engine.fast is False and "eager" in judge.engine.plain_reason()
        return
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no silent (or loud) slow path here
        judge = Judge.from_model(model, tokenizer, batch_tokens=256)
        got = judge.score("para-fs", **fields)
    want = reference(model, tokenizer, "para-fs", fields)
    assert max(want) - min(want) > 1e-2
    assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-3
    assert judge.engine.fast is True and judge.engine.stats["prefix_passes"] >= 2  # template + the group


def test_sliding_window_shorter_than_the_prompt_runs_those_prompts_whole(tokenizer):
    model = tiny("mistral", tokenizer, sliding_window=64)
    judge = Judge.from_model(model, tokenizer)
    fields = {"source": ["a b", "The cat sleeps on the mat."], "hypothesis": ["c", "A cat is sleeping on the mat."]}
    with pytest.warns(RuntimeWarning, match="longer than the sliding window"):
        got = judge.score("para-direct", **fields)
    want = reference(model, tokenizer, "para-direct", fields)
    assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-3
    assert judge.engine.stats["plain_rows"] >= 1


def test_unknown_attention_input_is_refused_loudly_and_scores_stay_exact(tokenizer):
    """An attention argument the shared-prefix function does not know (here attention sinks) is not
    silently dropped: the engine switches to whole prompts with a warning."""
    model = make_tiny_causal_lm(tokenizer, seed=2)
    judge = Judge.from_model(model, tokenizer)
    fields = pairs(3, 2)
    want = reference(model, tokenizer, "para-fs", fields)
    model.forward = functools.partial(model.forward, sinks=torch.zeros(4))
    with pytest.warns(RuntimeWarning, match=r"whole prompts.*\['sinks'\]"):
        got = judge.score("para-fs", **fields)
    assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-3
    assert judge.engine.fast is False


def test_the_first_call_runs_no_check_forward(tokenizer):
    """Exactness is proven by the tests (tests/test_families.py), not checked per judge at its first call:
    the first call runs the forwards its work needs and no other (a check forward would be one more)."""
    model = make_tiny_causal_lm(tokenizer, seed=5)
    judge = Judge.from_model(model, tokenizer, batch_tokens=10**6)  # every unit in one batch
    fields = pairs(3, 2)  # three loose pairs and a group of two sharing a source
    forwards = []
    model.register_forward_pre_hook(lambda module, args, kwargs: forwards.append(kwargs["input_ids"].shape), with_kwargs=True)
    got = judge.score("para-fs", **fields)
    # the template prefix, the group's source (one batch), the group's rows, the loose rows: 4 forwards
    assert len(forwards) == 4, forwards
    assert sum(shape[0] for shape in forwards) == 1 + 1 + 2 + 3
    assert judge.engine.stats["plain_rows"] == 0 and judge.engine.fast is True
    assert max(abs(a - b) for a, b in zip(got, reference(model, tokenizer, "para-fs", fields))) <= 1e-3


def test_a_transient_error_does_not_switch_the_fast_path_off(tokenizer):
    judge = make_tiny_judge(seed=6)
    fields = pairs(2, 2)
    first = judge.score("para-fs", **fields, use_cache=False)
    assert judge.engine.fast is True
    forward = judge.model.forward
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("CUDA out of memory (simulated)")
        return forward(*args, **kwargs)

    judge.model.forward = flaky
    with pytest.raises(RuntimeError, match="out of memory"):
        judge.score("para-fs", **fields, use_cache=False)
    assert judge.engine.fast is True
    assert judge.score("para-fs", **fields, use_cache=False) == pytest.approx(first, abs=1e-5)


def test_read_positions_cover_every_row():
    # rows ending at 7, 4 and 5 in a batch of width 7, reading the last 2 positions of each
    keep, index = read_positions([7, 4, 5], reads=2, width=7)
    assert keep == 5  # positions 2..6 are kept
    assert index.tolist() == [[3, 4], [0, 1], [1, 2]]  # positions (5,6), (2,3), (3,4) minus 2


# weight updates --------------------------------------------------------------------------------
def _sgd_step(model, tokenizer):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    ids = tokenizer(["The cat sleeps."], return_tensors="pt").input_ids
    with torch.enable_grad():
        model.train()
        model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    model.eval()


def _ema(model, tokenizer):
    other = make_tiny_causal_lm(tokenizer, seed=11)
    for p, q in zip(model.parameters(), other.parameters()):
        p.data.mul_(0.5).add_(q.data, alpha=0.5)  # TRL's reference-model sync / EMA style


UPDATES = {
    "data mul_": lambda m, t: m.lm_head.weight.data.mul_(1.5),
    "ema through .data": _ema,
    "one element through .data": lambda m, t: m.model.layers[0].self_attn.q_proj.weight.data[0, :].add_(3.0),
    "replaced Parameter": lambda m, t: setattr(m.lm_head, "weight", torch.nn.Parameter(m.lm_head.weight.detach() * 1.5)),
    "load_state_dict assign": lambda m, t: m.load_state_dict(make_tiny_causal_lm(t, seed=12).state_dict(), assign=True),
    "optimizer step": _sgd_step,
}


@pytest.mark.parametrize("update", sorted(UPDATES))
def test_cached_results_never_outlive_a_weight_update(update, tokenizer):
    model = make_tiny_causal_lm(tokenizer, seed=7)
    judge = Judge.from_model(model, tokenizer)
    fields = pairs(2, 2)
    before = judge.score("para-fs", **fields)
    assert judge.score("para-fs", **fields) == before  # served from the cache
    with torch.no_grad():
        UPDATES[update](model, tokenizer)
    after = judge.score("para-fs", **fields)
    fresh = Judge.from_model(model, tokenizer).score("para-fs", **fields)
    assert after == pytest.approx(fresh, abs=1e-4)
    assert max(abs(a - b) for a, b in zip(after, before)) > 1e-3


def test_unchanged_weights_keep_the_caches(tokenizer):
    judge = make_tiny_judge(seed=8, keep_group_prefixes=True)
    fields = pairs(2, 2)
    judge.score("para-fs", **fields)
    rows, passes = judge.engine.stats["rows"], judge.engine.stats["prefix_passes"]
    judge.score("para-fs", **fields)
    judge.score("para-fs", source=fields["source"], hypothesis=[h + "!" for h in fields["hypothesis"]])
    assert judge.engine.stats["prefix_passes"] == passes + 0  # the template prefix and the group's are reused
    assert judge.engine.stats["rows"] == rows + len(fields["source"])  # only the new items ran


def kept_bytes(engine) -> int:
    """Bytes of the storages behind the engine's cached prefix keys/values (each storage once)."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for kv in engine._prefixes.values() for pair in kv for t in pair}
    return sum(storages.values())


def test_group_prefixes_do_not_outlast_their_call(tokenizer):
    """A GRPO-shaped call (each source shared by several candidates) leaves only the template prefix
    cached: a group's source is never scored again, and keeping it grew the cache call after call."""
    sources, hypotheses, _ = mrpc_pairs(12)
    grpo = {"source": [s for s in sources[:3] for _ in range(4)], "hypothesis": hypotheses[:12]}
    judge = make_tiny_judge(seed=8)
    got = judge.score("para-fs", **grpo, use_cache=False)
    assert judge.engine.stats["prefix_passes"] == 2  # the template prefix, then the three groups at once
    assert len(judge.engine._prefixes) == 1
    (template,) = judge.engine._prefixes
    assert not any(s[:20] in judge.tokenizer.decode(list(template)) for s in sources[:3])  # no group's source
    template_bytes = kept_bytes(judge.engine)
    again = {"source": [s for s in sources[3:6] for _ in range(4)], "hypothesis": hypotheses[:12]}
    judge.score("para-fs", **again, use_cache=False)
    assert judge.engine.stats["prefix_passes"] == 3  # the template prefix reused; only the new groups run
    assert kept_bytes(judge.engine) == template_bytes
    keeping = make_tiny_judge(seed=8, keep_group_prefixes=True)
    assert keeping.score("para-fs", **grpo, use_cache=False) == pytest.approx(got, abs=1e-5)
    assert len(keeping.engine._prefixes) == 4 and kept_bytes(keeping.engine) > 2 * template_bytes


def test_result_cache_is_least_recently_used(tokenizer):
    judge = make_tiny_judge(seed=9, cache_size=2)
    score = lambda h: judge.score("para-direct", source="s", hypothesis=[h])  # noqa: E731
    score("a"), score("b"), score("a")  # "a" used last
    score("c")  # evicts "b", the least recently used
    rows = judge.engine.stats["rows"]
    score("a")
    assert judge.engine.stats["rows"] == rows  # still cached
    score("b")
    assert judge.engine.stats["rows"] == rows + 1  # was evicted


# concurrency -----------------------------------------------------------------------------------
def test_concurrent_score_calls_on_one_judge(tokenizer):
    judge = make_tiny_judge(seed=10)
    fields = pairs(4, 3)
    want = judge.score("para-fs", **fields, use_cache=False)
    judge.model.train()  # e.g. a policy sharing its weights: its mode must come back whatever the interleaving
    errors, results = [], []

    def worker():
        try:
            for _ in range(3):
                results.append(judge.score("para-fs", **fields, use_cache=False))
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(results) == 6 and all(r == pytest.approx(want, abs=1e-5) for r in results)
    assert all(m.training for m in judge.model.modules())


def test_a_data_parallel_wrapper_is_unwrapped_as_peft_is_by_every_reader(tokenizer):
    """compat.base_model unwraps (Distributed)DataParallel's .module and PEFT alike, for every reader: the
    checkpointing flag, the forward's parameters and the scoring lock a trainer's wrapped policy shares with the
    judge are the transformers model's (each reader used to unwrap its own way: the lock and the flag missed .module)."""
    from peft import LoraConfig, get_peft_model

    from pluie_reward.engines.transformers.compat import base_model, checkpointing_on, enable_checkpointing, forward_parameters
    from pluie_reward.engines.transformers.engine import model_lock

    model = make_tiny_causal_lm(tokenizer, seed=14)
    wrapped = torch.nn.DataParallel(get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"], task_type="CAUSAL_LM")))
    assert base_model(wrapped) is model and base_model(model) is model
    assert model_lock(wrapped) is model_lock(model)
    assert checkpointing_on(wrapped) is False
    enable_checkpointing(wrapped)
    assert checkpointing_on(model) is True
    assert "input_ids" in forward_parameters(wrapped)


def test_other_forwards_of_the_model_are_unchanged_while_scoring(tokenizer):
    model = make_tiny_causal_lm(tokenizer, seed=13)
    judge = Judge.from_model(model, tokenizer)
    tokenizer.padding_side = "left"  # a padded batch with a mask: attention that ignored it would differ
    batch = tokenizer(["The dog barks at night.", "Hi"], return_tensors="pt", padding=True)
    tokenizer.padding_side = "right"
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")  # transformers' own attention, which pluie-reward never wraps
    with torch.no_grad():
        want = eager(**batch).logits
    fields = pairs(4, 3)
    stop, errors, outputs = threading.Event(), [], []

    def forwards():
        while not stop.is_set():
            try:
                with torch.no_grad():
                    outputs.append(model(**batch).logits)
            except Exception as err:  # noqa: BLE001
                errors.append(err)

    thread = threading.Thread(target=forwards)
    thread.start()
    try:
        for _ in range(3):
            judge.score("para-fs", **fields, use_cache=False)
    finally:
        stop.set()
        thread.join()
    assert not errors and outputs
    assert all(torch.allclose(o[:, -2:], want[:, -2:], atol=1e-4) for o in outputs)  # the real tokens


def test_two_async_rewards_on_one_judge(tokenizer):
    judge = make_tiny_judge(seed=14)
    fields = pairs(3, 2)
    want = judge.score("para-fs", **fields, use_cache=False)
    rewards = [AsyncPluieReward(judge, fields={"source": "source"}, name=f"r{i}") for i in range(2)]

    async def both():
        return await asyncio.gather(*[
            r(prompts=["p"] * len(fields["source"]), completions=fields["hypothesis"], source=fields["source"]) for r in rewards
        ])

    for _ in range(2):
        judge.clear_cache()
        got = asyncio.run(both())
        assert all(g == pytest.approx(want, abs=1e-5) for g in got)
