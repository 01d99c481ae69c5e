"""Judge placement: shared PEFT judge, frozen judge adapter, offloaded judge, gathered parameters,
and the embedded model as a trainable policy."""

import sys
import types
from contextlib import contextmanager

import pytest
import torch

peft = pytest.importorskip("peft")
from peft import LoraConfig, get_peft_model  # noqa: E402

from pluie_reward import Judge, load_trainable_embedded  # noqa: E402
from pluie_reward.engines.transformers.compat import checkpointing_on, enable_checkpointing  # noqa: E402
from pluie_reward.engines.transformers.placement import belongs_to_adapter, gathered_parameters  # noqa: E402
from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer  # noqa: E402

SOURCES = ["The cat sleeps on the mat.", "The dog barks at night.", "The cat sleeps on the mat."]
HYPOTHESES = ["A cat is sleeping on the mat.", "The dog sleeps.", "Paraphrase this sentence."]


@pytest.fixture(scope="module")
def tokenizer():
    return make_tiny_tokenizer()


def lora(adapter_seed: int = 1) -> LoraConfig:
    # init_lora_weights=False: random A and B, so an active adapter really changes the scores
    torch.manual_seed(adapter_seed)
    return LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"], lora_dropout=0.0, init_lora_weights=False)


def make_policy(tokenizer, seed: int = 0):
    policy = get_peft_model(make_tiny_causal_lm(tokenizer, seed=seed), lora())
    enable_checkpointing(policy)
    policy.enable_input_require_grads()
    policy.train()
    return policy


def reference_scores(tokenizer, seed: int = 0, **fields):
    """Scores of a separately built copy of the base model (same seed, no adapters)."""
    reference = Judge.from_model(make_tiny_causal_lm(tokenizer, seed=seed), tokenizer)
    return reference.score("para-fs", **fields)


def test_shared_judge_scores_equal_a_separate_copy_of_the_base(tokenizer):
    policy = make_policy(tokenizer)
    judge = Judge.from_peft(policy, tokenizer)
    assert judge.engine.disable_adapters and judge.engine.adapter_name is None
    got = judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES)
    want = reference_scores(tokenizer, source=SOURCES, hypothesis=HYPOTHESES)
    assert got == pytest.approx(want, abs=1e-3)
    # the adapter matters: the policy with its adapter on scores differently, so the test can fail
    with_adapter = Judge.from_model(policy, tokenizer).score("para-fs", source=SOURCES, hypothesis=HYPOTHESES)
    assert max(abs(a - b) for a, b in zip(with_adapter, want)) > 1e-2


def test_shared_judge_holds_no_second_copy_of_the_weights(tokenizer):
    policy = make_policy(tokenizer)
    storages = {n: p.untyped_storage().data_ptr() for n, p in policy.named_parameters()}
    judge = Judge.from_peft(policy, tokenizer)
    judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES)
    assert judge.model is policy
    judge_storages = {n: p.untyped_storage().data_ptr() for n, p in judge.model.named_parameters()}
    assert judge_storages == storages
    watched = {p.untyped_storage().data_ptr() for n, p in judge.engine.watched_parameters()}
    base = {p.untyped_storage().data_ptr() for n, p in policy.named_parameters() if "lora_" not in n}
    assert watched == base  # the judge watches exactly the base weights, not the adapter


def test_shared_judge_restores_modes_checkpointing_and_adapter_and_makes_no_grads(tokenizer):
    policy = make_policy(tokenizer)
    policy.add_adapter("other", lora(adapter_seed=2))
    policy.set_adapter("other")
    layers = policy.base_model.model.model.layers
    layers[1].mlp.eval()  # a mixed state must come back exactly
    modes = [m.training for m in policy.modules()]
    requires = {n: p.requires_grad for n, p in policy.named_parameters()}
    assert checkpointing_on(policy.base_model.model)

    seen = []
    hook = layers[0].register_forward_hook(
        lambda m, i, o: seen.append((m.training, torch.is_grad_enabled(), torch.is_inference_mode_enabled()))
    )
    judge = Judge.from_peft(policy, tokenizer)
    with torch.enable_grad():
        scores = judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES)
    hook.remove()

    assert seen and all(state == (False, False, True) for state in seen)  # eval, no autograd, inference mode
    assert scores == pytest.approx(reference_scores(tokenizer, source=SOURCES, hypothesis=HYPOTHESES), abs=1e-3)
    assert [m.training for m in policy.modules()] == modes
    assert policy.active_adapter == "other"
    assert {n: p.requires_grad for n, p in policy.named_parameters()} == requires
    assert checkpointing_on(policy.base_model.model)
    assert all(p.grad is None for p in policy.parameters())

    # training still works after scoring (no inference tensors leaked into the graph), with checkpointing
    ids = tokenizer(["The cat sleeps on the mat."], return_tensors="pt").input_ids
    policy(input_ids=ids, labels=ids).loss.backward()
    grads = {n for n, p in policy.named_parameters() if p.grad is not None}
    assert grads and all(".other." in n for n in grads)  # only the trainable adapter, never the judge's base


def test_judge_adapter_scores_like_the_merged_adapter_and_is_restored(tokenizer):
    from peft import get_peft_model_state_dict, set_peft_model_state_dict

    policy = make_policy(tokenizer)
    policy.add_adapter("judge", lora(adapter_seed=3))
    policy.set_adapter("default")
    judge = Judge.from_peft(policy, tokenizer, adapter_name="judge")
    assert all(not p.requires_grad for n, p in policy.named_parameters() if ".judge." in n)  # frozen
    requires = {n: p.requires_grad for n, p in policy.named_parameters()}
    got = judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES)

    reference = get_peft_model(make_tiny_causal_lm(tokenizer, seed=0), lora(adapter_seed=3), adapter_name="judge")
    set_peft_model_state_dict(reference, get_peft_model_state_dict(policy, adapter_name="judge"), adapter_name="judge")
    merged = reference.merge_and_unload()
    want = Judge.from_model(merged, tokenizer).score("para-fs", source=SOURCES, hypothesis=HYPOTHESES)
    assert got == pytest.approx(want, abs=1e-3)
    assert max(abs(a - b) for a, b in zip(got, reference_scores(tokenizer, source=SOURCES, hypothesis=HYPOTHESES))) > 1e-2
    assert policy.active_adapter == "default"
    assert {n: p.requires_grad for n, p in policy.named_parameters()} == requires
    assert policy.training


def test_shared_judge_cache_survives_policy_updates_but_not_base_updates(tokenizer):
    policy = make_policy(tokenizer)
    judge = Judge.from_peft(policy, tokenizer)
    judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES)
    calls = judge.engine.stats["forward_calls"]
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_" in n:
                p.add_(0.1)  # an optimizer step on the adapter: the judge (base) is unchanged
    judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES)
    assert judge.engine.stats["forward_calls"] == calls
    with torch.no_grad():
        policy.base_model.model.lm_head.weight.mul_(1.5)
    judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES)
    assert judge.engine.stats["forward_calls"] > calls


def test_from_peft_bad_input(tokenizer):
    with pytest.raises(TypeError, match="PEFT model"):
        Judge.from_peft(make_tiny_causal_lm(tokenizer), tokenizer)
    with pytest.raises(ValueError, match=r"adapter 'judge' is not loaded.*\['default'\]"):
        Judge.from_peft(make_policy(tokenizer), tokenizer, adapter_name="judge")


def test_belongs_to_adapter():
    assert belongs_to_adapter("base_model.model.model.layers.0.self_attn.q_proj.lora_B.default.weight", ["default"])
    assert belongs_to_adapter("base_model.model.lm_head.modules_to_save.default.weight", ["default"])
    assert not belongs_to_adapter("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight", ["default"])
    assert not belongs_to_adapter("base_model.model.model.default_proj.weight", ["default_proj_x"])


def test_offloaded_judge_scores_like_a_resident_judge(tokenizer):
    resident = Judge.from_model(make_tiny_causal_lm(tokenizer, seed=0), tokenizer)
    model = make_tiny_causal_lm(tokenizer, seed=0)
    moves = []
    original_to = model.to

    def spy_to(*args, **kwargs):
        moves.append(str(args[0]))
        return original_to(*args, **kwargs)

    model.to = spy_to
    judge = Judge(model, tokenizer, device="cpu", offload_device="cpu")
    moves.clear()
    got = judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES)
    assert got == pytest.approx(resident.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES), abs=1e-3)
    assert moves == ["cpu", "cpu"]  # to the scoring device, then back to the offload device
    assert not judge.engine._prefixes  # prefix key/values on the accelerator are released
    calls = judge.engine.stats["forward_calls"]
    assert judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES) == got
    assert judge.engine.stats["forward_calls"] == calls  # results stay cached across moves


def test_gathered_parameters_uses_deepspeed_zero3_gather(tokenizer, monkeypatch):
    events = []

    @contextmanager
    def gathered(params, modifier_rank=None):
        events.append(("gather", len(params), modifier_rank))
        yield
        events.append(("release",))

    fake = types.ModuleType("deepspeed")
    fake.zero = types.SimpleNamespace(GatheredParameters=gathered)
    monkeypatch.setitem(sys.modules, "deepspeed", fake)
    policy = make_policy(tokenizer)
    for i, p in enumerate(policy.parameters()):
        p.ds_id = i  # what ZeRO-3 puts on partitioned parameters
    n = len(list(policy.parameters()))
    judge = Judge.from_peft(policy, tokenizer)
    judge.score("para-fs", source=SOURCES[:1], hypothesis=HYPOTHESES[:1])
    assert events == [("gather", n, None), ("release",)]
    with gathered_parameters(torch.nn.Linear(2, 2)):  # nothing sharded: no gather
        pass
    assert len(events) == 2


def test_trainable_embedded_model_is_accepted_by_trainer_and_matches_the_judge(tmp_path, embedded_base_judge):
    from transformers import Trainer, TrainingArguments
    from transformers.trainer_utils import validate_quantization_for_training

    embedded_judge = embedded_base_judge  # the untuned model (the default judge has its adapter merged)
    policy, tokenizer = load_trainable_embedded()
    assert getattr(policy, "hf_quantizer", None) is None and not getattr(policy, "is_quantized", False)
    validate_quantization_for_training(policy)  # raises for a GGUF-flagged model
    Trainer(model=policy, args=TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[]))
    judge_model = embedded_judge.model
    judge_storages = {p.untyped_storage().data_ptr() for p in judge_model.parameters()}
    assert not judge_storages & {p.untyped_storage().data_ptr() for p in policy.parameters()}  # a separate copy
    ids = tokenizer(["The cat sleeps on the mat.", "A dog barks."], return_tensors="pt", padding=True)
    with torch.no_grad():
        want = judge_model(**ids).logits
        got = policy.eval()(**ids).logits
    assert torch.allclose(got, want, atol=1e-4)


MIXED_PRECISION_SCRIPT = """
import json, torch
from accelerate import Accelerator
from peft import LoraConfig, get_peft_model
from pluie_reward import Judge
from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

sources = ["The cat sleeps on the mat.", "The dog barks at night."]
hypotheses = ["A cat is sleeping on the mat.", "The dog sleeps."]
tokenizer = make_tiny_tokenizer()
want = Judge.from_model(make_tiny_causal_lm(tokenizer, seed=0), tokenizer).score("para-fs", source=sources, hypothesis=hypotheses)
policy = get_peft_model(make_tiny_causal_lm(tokenizer, seed=0), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
policy = Accelerator(mixed_precision="bf16", cpu=True).prepare_model(policy)   # the real wrapper
patched = policy.forward
ids = tokenizer(["The cat sleeps on the mat."], return_tensors="pt").input_ids
with torch.no_grad(), policy.disable_adapter():
    reference = make_tiny_causal_lm(tokenizer, seed=0)(input_ids=ids).logits
    changed = float((policy(input_ids=ids).logits.float() - reference).abs().max())
got = Judge.from_peft(policy, tokenizer).score("para-fs", source=sources, hypothesis=hypotheses)
print("RESULT " + json.dumps({"want": want, "got": got, "changed": changed, "restored": policy.forward == patched}))
"""


def test_shared_judge_ignores_the_trainers_mixed_precision_wrapper(tmp_path):
    """accelerate's bf16 mixed precision (the real ``Accelerator.prepare_model``, in a subprocess: its
    state is process-wide) wraps the policy's forward in autocast; the shared judge scores in the
    weights' float32 anyway and puts the wrapper back. Breaks if accelerate moves ``_original_forward``."""
    import json
    import subprocess

    script = tmp_path / "mixed_precision.py"
    script.write_text(MIXED_PRECISION_SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["changed"] > 1e-3  # bf16 autocast really changes this model's outputs
    assert result["got"] == pytest.approx(result["want"], abs=1e-3)
    assert result["restored"]  # the trainer's wrapper is back


def test_both_shared_judge_constructions_are_the_same_judge(tokenizer, monkeypatch):
    """Judge(policy, tok, disable_adapters=True) keeps its caches across adapter-only steps and
    gathers sharded weights exactly like Judge.from_peft(policy, tok)."""
    events = []

    @contextmanager
    def gathered(params, modifier_rank=None):
        events.append(len(params))
        yield

    fake = types.ModuleType("deepspeed")
    fake.zero = types.SimpleNamespace(GatheredParameters=gathered)
    monkeypatch.setitem(sys.modules, "deepspeed", fake)
    for build in (lambda p: Judge(p, tokenizer, disable_adapters=True), lambda p: Judge.from_peft(p, tokenizer)):
        policy = make_policy(tokenizer)
        for i, p in enumerate(policy.parameters()):
            p.ds_id = i
        judge = build(policy)
        judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES)
        rows = judge.engine.stats["rows"]
        with torch.no_grad():
            for n, p in policy.named_parameters():
                if "lora_" in n:
                    p.data.add_(0.1)  # an adapter-only step, through .data as TRL's syncs do
        judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES)
        assert judge.engine.stats["rows"] == rows  # cached: the judge's own weights did not change
        assert events and events[-1] == len(list(policy.parameters()))
        events.clear()


def test_a_policy_forward_from_another_thread_while_the_shared_judge_scores_is_refused(tokenizer):
    """The exact limit of the thread-safety claim: a judge sharing a policy's weights switches the shared
    modules' mode and adapters while it scores, so a policy forward entering from another thread then
    is refused clearly (not run with the judge's state); before and after, it runs and equals a plain
    forward of the policy in training mode with its adapter on."""
    import threading

    from pluie_reward.engines.transformers.model_state import SharedModelBusy

    policy = make_policy(tokenizer)
    judge = Judge.from_peft(policy, tokenizer)
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        want = policy(input_ids=ids).logits
    outcome = []

    def policy_forward():
        try:
            with torch.no_grad():
                outcome.append(torch.equal(policy(input_ids=ids).logits, want))
        except SharedModelBusy as err:
            outcome.append(str(err))

    with judge.engine.session():  # what every Judge.score call is inside of
        thread = threading.Thread(target=policy_forward)
        thread.start()
        thread.join()
        assert policy.training is False  # the judge's state: eval mode, adapters off
    thread = threading.Thread(target=policy_forward)
    thread.start()
    thread.join()
    assert "shared with the judge" in outcome[0] and "in one thread" in outcome[0]
    assert outcome[1] is True and policy.training is True
    # a separate judge (its own weights) never touches the policy: no refusal
    separate = Judge.from_model(make_tiny_causal_lm(tokenizer, seed=0), tokenizer)
    with separate.engine.session():
        thread = threading.Thread(target=policy_forward)
        thread.start()
        thread.join()
    assert outcome[2] is True
