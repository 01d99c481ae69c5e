"""PluieCallback: real Trainer / Seq2SeqTrainer runs on tiny random models, checked against
independent generations and independent Judge.score calls."""

import json
from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import (
    EarlyStoppingCallback,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    T5Config,
    T5ForConditionalGeneration,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from pluie_reward import Judge
from pluie_reward.engines.transformers.compat import checkpointing_on, enable_checkpointing
from pluie_reward.integrations.callbacks import PluieCallback
from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

SOURCES = [
    "The cat sleeps on the mat.",
    "The dog barks at night.",
    "A cat is sleeping.",
    "Paraphrase this sentence.",
    "The dog is on the mat.",
]
KEYS = {"eval_pluie_mean", "eval_pluie_accept_rate", "eval_pluie_p10", "eval_pluie_p50", "eval_pluie_p90"}


@pytest.fixture(scope="module")
def tok():
    return make_tiny_tokenizer()


def chat_items(sources=SOURCES):
    return [{"prompt": [{"role": "user", "content": f"Paraphrase: {s}"}], "source": s} for s in sources]


def lm_dataset(tok, width=6):
    """A tiny tokenized dataset for the trainer's own loss (train and eval)."""
    rows = [tok(s)["input_ids"][:width] for s in SOURCES]
    return Dataset.from_dict(
        {
            "input_ids": [r + [tok.pad_token_id] * (width - len(r)) for r in rows],
            "attention_mask": [[1] * len(r) + [0] * (width - len(r)) for r in rows],
            "labels": [r + [-100] * (width - len(r)) for r in rows],
        }
    )


def training_args(tmp_path, **kw):
    base = dict(report_to=[], use_cpu=True, disable_tqdm=True, per_device_eval_batch_size=8)
    base.update(kw)
    return TrainingArguments(str(tmp_path), **base)


def read_table(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def lerp_quantile(sorted_values, q):
    """Hand-written linear interpolation (numpy's default), independent of the module's helper."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] * (1 - (pos - lo)) + sorted_values[hi] * (pos - lo)


def greedy_one(model, ids, max_new_tokens, encoder_decoder=False):
    """Reference generation: one unpadded prompt at a time, a plain greedy loop."""
    with torch.no_grad():
        out = model.generate(
            input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=model.config.pad_token_id,
        )
    return out[0] if encoder_decoder else out[0, len(ids):]


def test_evaluate_logs_pluie_metrics_matching_independent_scores(tok, tiny_judge, tmp_path):
    model = make_tiny_causal_lm(tok, seed=1)
    # batch_size=2 forces left padding of prompts of different lengths
    trainer = Trainer(model=model, args=training_args(tmp_path), eval_dataset=lm_dataset(tok), processing_class=tok)
    # the trainer given explicitly, as TRL's LogCompletionsCallback(trainer, ...)
    PluieCallback(tiny_judge, "para-fs", chat_items(), batch_size=2, max_new_tokens=6, threshold=0.0, trainer=trainer)
    metrics = trainer.evaluate()

    logged = [entry for entry in trainer.state.log_history if "eval_pluie_mean" in entry]
    assert len(logged) == 1 and KEYS <= set(logged[0])
    assert {k: metrics[k] for k in KEYS} == {k: logged[0][k] for k in KEYS}
    rows = read_table(tmp_path / "pluie" / "step-000000.jsonl")
    assert [r["source"] for r in rows] == SOURCES

    # generations: the same as greedy decoding of each prompt alone, without padding
    for row, item in zip(rows, chat_items()):
        text = tok.apply_chat_template(item["prompt"], tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert row["generation"] == tok.decode(greedy_one(model, ids, 6), skip_special_tokens=True).strip()

    # scores: an independent Judge.score call on the table's generations, summarised by hand
    scores = tiny_judge.score("para-fs", source=SOURCES, hypothesis=[r["generation"] for r in rows], use_cache=False)
    assert [r["score"] for r in rows] == pytest.approx(scores, abs=1e-5)
    ordered = sorted(scores)
    assert logged[0]["eval_pluie_mean"] == pytest.approx(sum(scores) / 5, abs=1e-5)
    assert logged[0]["eval_pluie_accept_rate"] == pytest.approx(sum(s > 0 for s in scores) / 5)
    assert logged[0]["eval_pluie_p50"] == pytest.approx(ordered[2], abs=1e-5)
    assert logged[0]["eval_pluie_p10"] == pytest.approx(lerp_quantile(ordered, 0.1), abs=1e-5)
    assert logged[0]["eval_pluie_p90"] == pytest.approx(ordered[3] + 0.6 * (ordered[4] - ordered[3]), abs=1e-5)


def test_accept_rate_follows_threshold(tok, tiny_judge):
    model = make_tiny_causal_lm(tok, seed=1)
    probe = PluieCallback(tiny_judge, "para-fs", chat_items(), max_new_tokens=4)
    records = probe.generate_and_score(model, tok)
    cut = sorted(r["score"] for r in records)[2]  # the median: two items are strictly above it
    callback = PluieCallback(tiny_judge, "para-fs", chat_items(), max_new_tokens=4, threshold=cut, write_table=False)
    assert callback.evaluate(model, tok)["eval_pluie_accept_rate"] == pytest.approx(2 / 5)


class MetricsSpy(TrainerCallback):
    """Records the metrics dict that callbacks placed before PluieCallback would see."""

    def __init__(self):
        self.seen = []

    def on_evaluate(self, args, state, control, metrics=None, **kwargs):
        self.seen.append(dict(metrics))


def test_best_model_selection_and_early_stopping_use_pluie_mean(tok, tiny_judge, tmp_path):
    model = make_tiny_causal_lm(tok, seed=2)
    callback = PluieCallback(tiny_judge, "para-fs", chat_items(), max_new_tokens=5)
    spy = MetricsSpy()
    args = training_args(
        tmp_path, max_steps=4, eval_strategy="steps", eval_steps=2, save_strategy="steps", save_steps=2,
        load_best_model_at_end=True, metric_for_best_model="eval_pluie_mean", greater_is_better=True,
        learning_rate=0.05, per_device_train_batch_size=5, logging_steps=100,
    )
    data = lm_dataset(tok)
    trainer = Trainer(
        model=model, args=args, train_dataset=data, eval_dataset=data, processing_class=tok,
        # given before PluieCallback: it must still see the PLUIE metrics
        callbacks=[spy, EarlyStoppingCallback(early_stopping_patience=10)],
    )
    callback.attach(trainer)
    names = [type(cb).__name__ for cb in trainer.callback_handler.callbacks]
    assert names.index("PluieCallback") < names.index("EarlyStoppingCallback")
    trainer.train()

    means = {e["step"]: e["eval_pluie_mean"] for e in trainer.state.log_history if "eval_pluie_mean" in e}
    assert sorted(means) == [2, 4]
    best_step = max(means, key=means.get)
    assert trainer.state.best_metric == pytest.approx(means[best_step])
    assert trainer.state.best_global_step == best_step
    assert trainer.state.best_model_checkpoint.endswith(f"checkpoint-{best_step}")
    assert all("eval_pluie_mean" in seen for seen in spy.seen) and len(spy.seen) >= 2
    assert (tmp_path / "pluie" / "step-000002.jsonl").is_file() and (tmp_path / "pluie" / "step-000004.jsonl").is_file()


def test_seq2seq_generator(tiny_judge, tmp_path):
    tok = make_tiny_tokenizer(chat=False)
    config = T5Config(
        vocab_size=len(tok), d_model=32, d_ff=64, d_kv=8, num_layers=2, num_decoder_layers=2, num_heads=4,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.pad_token_id,
        initializer_factor=1.0,
    )
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(config).eval()
    items = [{"prompt": f"paraphrase: {s}", "source": s} for s in SOURCES]
    callback = PluieCallback(tiny_judge, "para-fs", items, batch_size=3, max_new_tokens=5)
    args = Seq2SeqTrainingArguments(str(tmp_path), report_to=[], use_cpu=True, disable_tqdm=True, per_device_eval_batch_size=8)
    trainer = Seq2SeqTrainer(model=model, args=args, eval_dataset=lm_dataset(tok), processing_class=tok)
    callback.attach(trainer)
    metrics = trainer.evaluate()

    assert KEYS <= set(metrics)
    assert any("eval_pluie_mean" in e for e in trainer.state.log_history)
    rows = read_table(tmp_path / "pluie" / "step-000000.jsonl")
    for row, item in zip(rows, items):
        ids = tok(item["prompt"])["input_ids"]
        assert row["generation"] == tok.decode(greedy_one(model, ids, 5, encoder_decoder=True), skip_special_tokens=True).strip()
    scores = tiny_judge.score("para-fs", source=SOURCES, hypothesis=[r["generation"] for r in rows], use_cache=False)
    assert metrics["eval_pluie_mean"] == pytest.approx(sum(scores) / len(scores), abs=1e-5)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"eval_set": []}, ValueError, "empty"),
        ({"eval_set": Dataset.from_dict({"prompt": [], "source": []})}, ValueError, "empty"),
        ({"eval_set": [{"prompt": "p"}]}, ValueError, r"lacks \['source'\]"),
        ({"eval_set": [{"source": "s"}]}, ValueError, r"lacks \['prompt'\]"),
        ({"eval_set": [{"prompt": "p", "original": "o"}], "template": "rev"}, ValueError, "instruction"),
        ({"template": "no-such-template"}, ValueError, "unknown template"),
        ({"eval_set": [{"prompt": "p", "source": 3}]}, TypeError, "source"),
        ({"eval_set": [{"prompt": 3, "source": "s"}]}, TypeError, "prompt"),
        ({"judge": "tiny"}, TypeError, "judge"),
        ({"every_n_steps": 0}, ValueError, "every_n_steps"),
        ({"hypothesis_field": "answer"}, ValueError, "hypothesis_field"),
    ],
)
def test_bad_configuration_fails_at_construction(tiny_judge, kwargs, error, match):
    config = {"judge": tiny_judge, "template": "para-fs", "eval_set": [{"prompt": "p", "source": "s"}], **kwargs}
    with pytest.raises(error, match=match):
        PluieCallback(config.pop("judge"), config.pop("template"), config.pop("eval_set"), **config)


def test_every_n_steps_conflicts_with_metric_for_best_model(tok, tiny_judge, tmp_path):
    callback = PluieCallback(tiny_judge, "para-fs", chat_items(), every_n_steps=2)
    args = training_args(tmp_path, eval_strategy="steps", eval_steps=2, save_steps=2, load_best_model_at_end=True,
                         metric_for_best_model="eval_pluie_mean")
    with pytest.raises(ValueError, match="every_n_steps=None"):
        callback.attach(Trainer(model=make_tiny_causal_lm(tok), args=args, eval_dataset=lm_dataset(tok), processing_class=tok))


def test_every_n_steps_logs_during_training_with_lazy_judge_factory(tok, tiny_judge, tmp_path):
    calls = []

    def factory():
        calls.append(1)
        return tiny_judge

    callback = PluieCallback(factory, "para-fs", chat_items(SOURCES[:2]), every_n_steps=2, max_new_tokens=3)
    assert calls == []  # built lazily
    model = make_tiny_causal_lm(tok, seed=3)
    args = training_args(tmp_path, max_steps=4, per_device_train_batch_size=5, logging_steps=100, save_strategy="no")
    trainer = Trainer(model=model, args=args, train_dataset=lm_dataset(tok), processing_class=tok)
    callback.attach(trainer)  # explicit attach also adds the callback
    trainer.train()
    steps = [e["step"] for e in trainer.state.log_history if "eval_pluie_mean" in e]
    assert steps == [2, 4] and calls == [1]


def _training_flags(model):
    return [m.training for m in model.modules()]


def test_shared_judge_restores_training_state(tok):
    model = make_tiny_causal_lm(tok, seed=4)
    enable_checkpointing(model)
    model.config.use_cache = False
    model.train()
    model.model.layers[0].eval()  # a mixed state must come back exactly
    before = _training_flags(model)
    judge = Judge(model, tok)  # shares the generator's weights
    callback = PluieCallback(judge, "para-fs", chat_items(SOURCES[:3]), max_new_tokens=4, write_table=False)
    metrics = callback.evaluate(model, tok)
    assert _training_flags(model) == before
    assert checkpointing_on(model) and model.config.use_cache is False
    assert all(p.requires_grad for p in model.parameters())
    # the model still trains after the callback ran (no inference tensors left behind)
    out = model(input_ids=torch.tensor([[5, 6, 7]]), labels=torch.tensor([[5, 6, 7]]))
    out.loss.backward()
    assert metrics["eval_pluie_mean"] == pytest.approx(sum(r["score"] for r in callback.generate_and_score(model, tok)) / 3, abs=1e-5)


def test_peft_generator_with_adapter_disabled_judge(tok):
    peft = pytest.importorskip("peft")
    base = make_tiny_causal_lm(tok, seed=5)
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    model.train()
    before = _training_flags(model)
    judge = Judge(model, tok, disable_adapters=True)
    callback = PluieCallback(judge, "para-fs", chat_items(SOURCES[:3]), max_new_tokens=4, write_table=False)
    records = callback.generate_and_score(model, tok)
    assert _training_flags(model) == before and model.active_adapter == "default"
    # the judge scored with the base weights: same as a judge over the base model alone
    with model.disable_adapter():
        reference = Judge(base, tok).score("para-fs", source=SOURCES[:3], hypothesis=[r["generation"] for r in records])
    assert [r["score"] for r in records] == pytest.approx(reference, abs=1e-5)


def test_processes_score_disjoint_slices_covering_the_set(tok, tiny_judge):
    model = make_tiny_causal_lm(tok, seed=1)
    callback = PluieCallback(tiny_judge, "para-fs", chat_items(), max_new_tokens=3)
    slices = [callback.generate_and_score(model, tok, process_index=r, num_processes=2) for r in range(2)]
    assert [r["index"] for r in slices[0]] == [0, 1, 2] and [r["index"] for r in slices[1]] == [3, 4]
    whole = callback.generate_and_score(model, tok)
    assert [r["score"] for r in slices[0] + slices[1]] == pytest.approx([r["score"] for r in whole], abs=1e-5)


def _conversations(tok):
    return Dataset.from_dict(
        {"messages": [[{"role": "user", "content": f"Paraphrase: {s}"}, {"role": "assistant", "content": s}] for s in SOURCES]}
    )


def test_trl_sft_trainer(tok, tiny_judge, tmp_path):
    trl = pytest.importorskip("trl")
    callback = PluieCallback(tiny_judge, "para-fs", chat_items(), max_new_tokens=4)
    args = trl.SFTConfig(
        str(tmp_path), max_steps=2, eval_strategy="steps", eval_steps=2, save_strategy="no", report_to=[],
        use_cpu=True, disable_tqdm=True, per_device_train_batch_size=5, max_length=64, bf16=False,
    )
    data = _conversations(tok)
    trainer = trl.SFTTrainer(model=make_tiny_causal_lm(tok, seed=6), args=args, train_dataset=data, eval_dataset=data,
                             processing_class=tok)
    callback.attach(trainer)
    trainer.train()
    logged = [e for e in trainer.state.log_history if "eval_pluie_mean" in e]
    assert [e["step"] for e in logged] == [2]
    rows = read_table(tmp_path / "pluie" / "step-000002.jsonl")
    scores = tiny_judge.score("para-fs", source=SOURCES, hypothesis=[r["generation"] for r in rows], use_cache=False)
    assert logged[0]["eval_pluie_mean"] == pytest.approx(sum(scores) / len(scores), abs=1e-5)


def test_trl_grpo_trainer_with_shared_judge(tok, tmp_path):
    trl = pytest.importorskip("trl")
    model = make_tiny_causal_lm(tok, seed=7)
    shared = Judge(model, tok)  # the policy is its own judge: its state must survive both uses

    def pluie_reward(completions, source, **kwargs):
        return shared.score("para-fs", source=source, hypothesis=[c[-1]["content"] for c in completions])

    callback = PluieCallback(shared, "para-fs", chat_items(SOURCES[:4]), max_new_tokens=4)
    prompts = Dataset.from_list([{"prompt": item["prompt"], "source": item["source"]} for item in chat_items(SOURCES[:4])])
    args = trl.GRPOConfig(
        str(tmp_path), max_steps=2, eval_strategy="steps", eval_steps=2, save_strategy="no", report_to=[], use_cpu=True,
        disable_tqdm=True, per_device_train_batch_size=4, per_device_eval_batch_size=4, num_generations=2,
        max_completion_length=4, gradient_checkpointing=True, bf16=False, logging_steps=100,
    )
    trainer = trl.GRPOTrainer(model=model, args=args, reward_funcs=pluie_reward, train_dataset=prompts, eval_dataset=prompts,
                              processing_class=tok)
    callback.attach(trainer)
    trainer.train()
    logged = [e for e in trainer.state.log_history if "eval_pluie_mean" in e]
    assert len(logged) == 1 and KEYS <= set(logged[0])
    rows = read_table(tmp_path / "pluie" / "step-000002.jsonl")
    assert len(rows) == 4
    # evaluation ran at the last step: the weights are those that generated and scored the table
    scores = shared.score("para-fs", source=SOURCES[:4], hypothesis=[r["generation"] for r in rows], use_cache=False)
    assert logged[0]["eval_pluie_mean"] == pytest.approx(sum(scores) / 4, abs=1e-4)
    assert checkpointing_on(model)


DDP_SCRIPT = r'''
import json, sys
from datasets import Dataset
from transformers import Trainer, TrainingArguments
from pluie_reward.integrations.callbacks import PluieCallback
from pluie_reward.testing import make_tiny_causal_lm, make_tiny_judge, make_tiny_tokenizer

out, sources = sys.argv[1], json.loads(sys.argv[2])
tok = make_tiny_tokenizer()
items = [{"prompt": [{"role": "user", "content": "Paraphrase: " + s}], "source": s} for s in sources]
rows = [tok(s)["input_ids"][:6] for s in sources]
data = Dataset.from_dict({"input_ids": [r + [tok.pad_token_id] * (6 - len(r)) for r in rows],
                          "labels": [r + [-100] * (6 - len(r)) for r in rows]})
args = TrainingArguments(out, report_to=[], use_cpu=True, disable_tqdm=True, ddp_backend="gloo")
callback = PluieCallback(make_tiny_judge(), "para-fs", items, max_new_tokens=4, batch_size=2)
trainer = Trainer(model=make_tiny_causal_lm(tok, seed=1), args=args, eval_dataset=data, processing_class=tok)
callback.attach(trainer)
metrics = trainer.evaluate()
# one file per rank: two processes printing to one pipe can interleave their lines
with open(f"{out}/result-{args.process_index}.json", "w") as f:
    json.dump({"rank": args.process_index, "world": args.world_size,
               "metrics": {k: v for k, v in metrics.items() if "pluie" in k}}, f)
# PyTorch's shutdown: left to interpreter exit, gloo's threads can abort it ("terminate called without an active
# exception", SIGABRT: seen once in CI, 2026-11-29; pytorch/pytorch#190489)
import torch.distributed as dist
if dist.is_initialized():
    dist.destroy_process_group()
'''


def test_two_processes_gather_their_slices(tmp_path, tiny_judge):
    """A real 2-process (gloo) run: every rank gets the same metrics over the whole set, rank 0 writes it."""
    import os
    import subprocess
    import sys

    script = tmp_path / "ddp_eval.py"
    script.write_text(DDP_SCRIPT)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
               str(script), str(tmp_path / "out"), json.dumps(SOURCES)]
    checkout = str(Path(__file__).resolve().parents[1])  # this checkout's package, not an installed copy
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(filter(None, [checkout, os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(p.read_text()) for p in sorted((tmp_path / "out").glob("result-*.json"))]
    assert sorted(r["rank"] for r in results) == [0, 1] and all(r["world"] == 2 for r in results)
    assert results[0]["metrics"] == results[1]["metrics"]
    table = read_table(tmp_path / "out" / "pluie" / "step-000000.jsonl")
    assert [r["index"] for r in table] == [0, 1, 2, 3, 4] and [r["source"] for r in table] == SOURCES
    scores = tiny_judge.score("para-fs", source=SOURCES, hypothesis=[r["generation"] for r in table], use_cache=False)
    assert results[0]["metrics"]["eval_pluie_mean"] == pytest.approx(sum(scores) / 5, abs=1e-5)


def test_wandb_table_only_when_a_run_is_active(tok, tiny_judge, tmp_path, monkeypatch):
    """wandb is not installed here: a stand-in module records what the callback sends."""
    import sys
    import types
    from types import SimpleNamespace

    logged = []

    class Table:
        def __init__(self, columns, data):
            self.columns, self.data = columns, data

    fake = types.ModuleType("wandb")
    fake.Table, fake.run = Table, None
    monkeypatch.setitem(sys.modules, "wandb", fake)
    model = make_tiny_causal_lm(tok, seed=1)
    callback = PluieCallback(tiny_judge, "para-fs", chat_items(SOURCES[:2]), max_new_tokens=3)
    state = SimpleNamespace(global_step=7, is_world_process_zero=True)
    callback.evaluate(model, tok, args=SimpleNamespace(output_dir=str(tmp_path), process_index=0, world_size=1), state=state)
    assert logged == []  # no active run: nothing sent
    fake.run = SimpleNamespace(log=logged.append)
    callback.evaluate(model, tok, args=SimpleNamespace(output_dir=str(tmp_path), process_index=0, world_size=1), state=state)
    (payload,) = logged
    table = payload["eval_pluie_table"]
    rows = read_table(tmp_path / "pluie" / "step-000007.jsonl")
    assert table.columns[:4] == ["step", "prompt", "generation", "score"]
    assert [row[2] for row in table.data] == [r["generation"] for r in rows]
    assert [row[3] for row in table.data] == [r["score"] for r in rows]


def test_warns_when_the_starting_point_beat_every_checkpoint(tiny_judge, tmp_path, caplog):
    """transformers never compares a step-0 evaluation when choosing the best model (its first
    in-training evaluation is always "best"): the callback says so when step 0 scored higher."""
    import logging

    from transformers import TrainerState

    callback = PluieCallback(tiny_judge, "para-fs", chat_items(SOURCES[:1]))
    callback.history = [
        {"step": 0, "metrics": {"eval_pluie_mean": 1.0}, "table": None},
        {"step": 2, "metrics": {"eval_pluie_mean": 0.5}, "table": None},
        {"step": 4, "metrics": {"eval_pluie_mean": 0.25}, "table": None},
    ]
    state = TrainerState()
    state.best_metric, state.best_global_step = 0.5, 2  # what Trainer._determine_best_metric leaves
    args = training_args(tmp_path, metric_for_best_model="pluie_mean", greater_is_better=True)
    with caplog.at_level(logging.WARNING, logger="pluie_reward.integrations.callbacks"):
        callback.on_train_end(args, state, None)
    assert any("no checkpoint beat the starting point" in r.getMessage() and "1.0000 before training" in r.getMessage()
               and "step 2" in r.getMessage() for r in caplog.records)
    assert callback.best_evaluation()["step"] == 0
    assert callback.best_evaluation(greater_is_better=False)["step"] == 4
    caplog.clear()
    state.best_metric = 1.0  # a tie is not an improvement, and not a warning either
    callback.on_train_end(args, state, None)
    callback.history[0]["metrics"]["eval_pluie_mean"] = 0.1  # training improved on the start
    state.best_metric = 0.5
    callback.on_train_end(args, state, None)
    assert not caplog.records
    assert callback.best_evaluation()["step"] == 2


def test_a_callback_without_a_trainer_says_how_to_give_it(tiny_judge):
    callback = PluieCallback(tiny_judge, "para-fs", chat_items(SOURCES[:2]), max_new_tokens=3)
    with pytest.raises(RuntimeError, match="trainer=trainer.*attach"):
        callback.on_train_begin(None, None, None)


@pytest.mark.parametrize("declared", [True, False])
def test_reloading_the_best_checkpoint_of_tied_embeddings_warns_of_no_missing_key(tok, tmp_path, caplog, declared):
    """A checkpoint holds tied embeddings once; transformers' Trainer reloading the best one (load_best_model_at_end)
    warned "There were missing keys ... ['lm_head.weight']" (docs/callbacks.md's block) unless the model says they are
    saved once, as load_trainable_embedded's does (tied_saved_once); the reloaded model's embeddings are tied either way."""
    from pluie_reward.engines.transformers.loading import tied_saved_once

    model = make_tiny_causal_lm(tok, seed=2, tie=True)
    model = tied_saved_once(model) if declared else model
    args = training_args(tmp_path, max_steps=2, eval_strategy="steps", eval_steps=1, save_strategy="steps", save_steps=1,
                         load_best_model_at_end=True, learning_rate=0.05, per_device_train_batch_size=5, logging_steps=100)
    data = lm_dataset(tok)
    Trainer(model=model, args=args, train_dataset=data, eval_dataset=data, processing_class=tok).train()
    assert ("There were missing keys" in caplog.text) is not declared
    assert model.lm_head.weight is model.model.embed_tokens.weight


def test_a_validation_pass_says_how_far_its_generation_is(tok, tiny_judge, capsys):
    """The evaluation set's generation shows a bar on stderr (prompts done, tokens of the batch under way), so a
    validation pass on a slow CPU is not a silent minute; progress=False keeps it quiet."""
    model = make_tiny_causal_lm(tok, seed=2)
    for progress in (True, False):
        callback = PluieCallback(tiny_judge, "para-fs", chat_items(), max_new_tokens=5, min_new_tokens=5, batch_size=2,
                                 progress=progress)
        capsys.readouterr()
        callback.evaluate(model, tok)
        err = capsys.readouterr().err
        if progress:
            last = err.replace("\r", "\n").strip().splitlines()[-1]
            assert last.startswith("PLUIE eval: generating: 100%") and f"{len(chat_items())}/{len(chat_items())}" in last, err
            assert "token 5/5" in last, err  # the counter starts again with each batch of 2
        else:
            assert err == ""
