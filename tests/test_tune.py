"""Tuning a judge adapter (issue 14): the loss, the training, where the adapter is read, the CLI.

References are computed here, independently of the library's forward: a plain forward of the
model (adapter on or off) on the exact prompt ids, logits at the last prompt position, yes minus no.
"""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from pluie_reward import BoundTemplate, Judge, load_template
from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer
from pluie_reward.tools.cli.main import main
from pluie_reward.tools.tune import PairData, TuneConfig, tune
from pluie_reward.tools.tune.data import PairCollator, encode
from pluie_reward.tools.tune.loss import contrast_loss, pluie_scores, tune_loss
from pluie_reward.tools.tune.report import agreement
from pluie_reward.tools.tune.synthetic import make_pairs

peft = pytest.importorskip("peft")

TEMPLATE = "para-direct"
HYPOTHESES = ["Yes a cat.", "No no dog."]


def cat_dog(n: int, offset: int = 0) -> tuple[dict[str, list[str]], list[bool], list[float]]:
    """Pairs whose target is a surface rule a tiny LoRA learns in a few steps: +2.5 for the cat, -2.5 for the dog."""
    sources = [f"The animal number {i + offset} sleeps." for i in range(n)]
    hypotheses = [HYPOTHESES[(i + offset) % 2] for i in range(n)]
    labels = [(i + offset) % 2 == 0 for i in range(n)]
    targets = [2.5 if y else -2.5 for y in labels]
    return {"source": sources, "hypothesis": hypotheses}, labels, targets


def reference_scores(model, tokenizer, template, fields) -> np.ndarray:
    """yes - no logits at the last prompt position of a plain, unbatched forward (model as it is)."""
    bound = BoundTemplate(load_template(template), tokenizer, None)  # the exact prompt ids and answer tokens
    n = len(next(iter(fields.values())))
    yes, no = bound.answer_ids[0][0], bound.answer_ids[1][0]
    out = []
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for item in bound.encode_items(fields, n):
            logits = model(input_ids=torch.tensor([list(item.ids)])).logits[0, -1]
            out.append(float(logits[yes] - logits[no]))
    model.train(was_training)
    return np.array(out)


def fast_config(**kw) -> TuneConfig:
    defaults = dict(epochs=6, learning_rate=5e-3, batch_size=8, progress=False, heldout_fraction=0.25, lora_r=4,
                    lora_alpha=8, lora_dropout=0.0, logging_steps=1)
    defaults.update(kw)
    return TuneConfig(**defaults)


@pytest.fixture(scope="module")
def tokenizer():
    return make_tiny_tokenizer()


@pytest.fixture(scope="module")
def tuned(tokenizer, tmp_path_factory):
    """One tuning run on a tiny random model (teacher targets given), with a snapshot of the base."""
    base_dir = tmp_path_factory.mktemp("base")
    model = make_tiny_causal_lm(tokenizer, seed=0)
    model.save_pretrained(base_dir)
    tokenizer.save_pretrained(base_dir)
    snapshot = {k: v.detach().clone() for k, v in model.state_dict().items()}
    fields, labels, targets = cat_dog(48)
    test_fields, _, test_targets = cat_dog(16, offset=48)  # sources never trained on
    before_test = reference_scores(model, tokenizer, TEMPLATE, test_fields)
    out = tmp_path_factory.mktemp("adapter")
    result = tune(model, tokenizer, template=TEMPLATE, fields=fields, targets=targets, config=fast_config(loss="mse"),
                  output_dir=out, overwrite=True,
                  eval_sets={"test": PairData.build(TEMPLATE, test_fields, targets=test_targets)})
    return SimpleNamespace(result=result, base_dir=base_dir, snapshot=snapshot, fields=fields, targets=np.array(targets),
                           test_fields=test_fields, test_targets=np.array(test_targets), before_test=before_test, out=out)


# the loss -----------------------------------------------------------------------------------------
def test_tune_loss_matches_the_formulas():
    s = torch.tensor([1.5, -0.5, 3.0])
    y = torch.tensor([1.0, 0.0, 0.0])
    t = torch.tensor([2.0, -1.0, 0.5])

    def bce(logit, p):  # written out: -(p log sigmoid(x) + (1 - p) log(1 - sigmoid(x)))
        q = 1 / (1 + math.exp(-logit))
        return -(p * math.log(q) + (1 - p) * math.log(1 - q))

    labels_ref = np.mean([bce(a, b) for a, b in zip(s.tolist(), y.tolist())])
    T = 2.0
    soft_ref = T * T * np.mean([bce(a / T, 1 / (1 + math.exp(-b / T))) for a, b in zip(s.tolist(), t.tolist())])
    mse_ref = np.mean([(a - b) ** 2 for a, b in zip(s.tolist(), t.tolist())])
    assert float(tune_loss(s, labels=y)) == pytest.approx(labels_ref, rel=1e-5)
    assert float(tune_loss(s, targets=t, temperature=T)) == pytest.approx(soft_ref, rel=1e-5)
    assert float(tune_loss(s, targets=t, loss="mse")) == pytest.approx(mse_ref, rel=1e-5)
    mixed = float(tune_loss(s, labels=y, targets=t, loss="mse", label_weight=0.3))
    assert mixed == pytest.approx(0.3 * labels_ref + 0.7 * mse_ref, rel=1e-5)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 4.0])
def test_soft_bce_is_minimal_at_the_teacher_score(temperature):
    t = torch.tensor([1.7, -2.2])
    s = t.clone().requires_grad_(True)
    tune_loss(s, targets=t, temperature=temperature).backward()
    assert s.grad.abs().max() < 1e-6
    assert float(tune_loss(t + 0.5, targets=t, temperature=temperature)) > float(tune_loss(t, targets=t, temperature=temperature))


def test_training_forward_with_a_shared_prefix_equals_whole_rows(tokenizer):
    """Same scores and same gradients whether the template prefix runs once or in every row."""
    from peft import LoraConfig, get_peft_model

    model = make_tiny_causal_lm(tokenizer, seed=3)
    bound = Judge(model, tokenizer).bind("para-fs")
    data = PairData.build("para-fs", {"source": ["The cat sleeps.", "A dog", "x y z w v"],
                                      "hypothesis": ["A cat is asleep now on the mat.", "dog", "q"]})
    batch = PairCollator(0)([row for row in encode(bound, data)])
    answers = (bound.answer_ids[0][0], bound.answer_ids[1][0])
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False, lora_dropout=0.0))
    peft_model.train()
    results = []
    for shared in (0, len(bound.prefix_ids)):
        peft_model.zero_grad()
        scores = pluie_scores(peft_model, batch["input_ids"], batch["attention_mask"], answers, shared_prefix=shared)
        scores.sum().backward()
        grads = {n: p.grad.clone() for n, p in peft_model.named_parameters() if p.grad is not None}
        results.append((scores.detach(), grads))
    (s0, g0), (s1, g1) = results
    assert torch.allclose(s0, s1, atol=1e-4)
    assert g0.keys() == g1.keys() and g0
    scale = max(g.abs().max() for g in g0.values())
    assert max((g0[n] - g1[n]).abs().max() for n in g0) <= 1e-4 * scale
    # and both equal the independent plain forward of each prompt
    reference = reference_scores(peft_model, tokenizer, "para-fs", data.columns)
    assert np.allclose(s0.numpy(), reference, atol=1e-4)


def test_contrast_loss_matches_the_formula():
    s, c = torch.tensor([0.5, -1.0, 2.0]), torch.tensor([1.0, 3.0, -0.5])
    for margin in (0.0, 2.0):  # softplus written out: log(1 + e^x)
        ref = np.mean([math.log(1 + math.exp(margin - (b - a))) for a, b in zip(s.tolist(), c.tolist())])
        assert float(contrast_loss(s, c, margin)) == pytest.approx(ref, rel=1e-6)
    assert float(contrast_loss(s, c + 1, 2.0)) < float(contrast_loss(s, c, 2.0))  # a wider gap costs less


def test_contrast_items_are_encoded_and_collated_with_their_rows(tokenizer):
    bound = BoundTemplate(load_template("para-fs"), tokenizer, None)
    fields = {"source": ["The cat sleeps.", "Prices rose.", "A dog"], "hypothesis": ["A cat is asleep.", "Prices fell.", "dog"]}
    honest = {"source": "Prices rose.", "hypothesis": "Prices went up."}
    data = PairData.build("para-fs", fields, labels=[True, False, True], contrast=[None, honest, None])
    assert data.subset([1]).contrast == [honest] and data.split(0.34, seed=0)[0].contrast is not None
    rows = list(encode(bound, data))
    expected = list(bound.encode_items({k: [v] for k, v in honest.items()}, 1)[0].ids)
    assert [r["pluie_contrast_ids"] for r in rows] == [[], expected, []]
    batch = PairCollator(0)(rows)
    assert batch["contrast_rows"].tolist() == [1]
    assert batch["contrast_input_ids"][0].tolist() == expected and batch["contrast_attention_mask"].all()
    assert "contrast_rows" not in PairCollator(0)([rows[0], rows[2]])  # no contrast in the batch: no keys


def test_training_loss_adds_the_contrast_term_on_its_rows(tokenizer, tmp_path):
    """compute_loss = label BCE + w * softplus(m - (s_contrast - s)) over the rows with a contrast, all
    scores from the independent plain forward (the shared prefix on, as in training)."""
    from peft import LoraConfig, get_peft_model

    from pluie_reward.tools.tune.trainer import JudgeTuneTrainer, training_arguments

    model = get_peft_model(make_tiny_causal_lm(tokenizer, seed=5),
                           LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False, lora_dropout=0.0))
    fields = {"source": ["The cat sleeps.", "Prices rose.", "It rained."], "hypothesis": ["A cat is asleep.", "Prices fell.", "It did not rain."]}
    contrast = [None, {"source": "Prices rose.", "hypothesis": "Prices went up."}, {"source": "It rained.", "hypothesis": "Rain fell."}]
    labels = [True, False, False]
    data = PairData.build("para-fs", fields, labels=labels, contrast=contrast)
    bound = Judge(model, tokenizer).bind("para-fs")
    batch = PairCollator(0)(list(encode(bound, data)))
    config = fast_config(contrast_weight=0.7, contrast_margin=1.5)
    trainer = JudgeTuneTrainer(model=model, args=training_arguments(config, str(tmp_path), False, "pluie_label"),
                               answer_ids=(bound.answer_ids[0][0], bound.answer_ids[1][0]), tune_config=config,
                               shared_prefix=len(bound.prefix_ids))
    s = reference_scores(model, tokenizer, "para-fs", fields)
    c = reference_scores(model, tokenizer, "para-fs", {k: [contrast[i][k] for i in (1, 2)] for k in fields})
    bce = np.mean([math.log(1 + math.exp(-x)) if y else math.log(1 + math.exp(x)) for x, y in zip(s, labels)])
    pairwise = np.mean([math.log(1 + math.exp(1.5 - (c[j] - s[i]))) for j, i in enumerate((1, 2))])
    calls = []
    hook = model.get_base_model().register_forward_hook(lambda module, args, kwargs, out: calls.append(1), with_kwargs=True)
    assert float(trainer.compute_loss(model, batch).detach()) == pytest.approx(bce + 0.7 * pairwise, rel=1e-4)
    hook.remove()
    assert len(calls) == 2  # the shared prefix once, then the items and their contrasts together
    trainer.tune_config = fast_config(contrast_weight=0.0)  # off: the label loss alone
    assert float(trainer.compute_loss(model, batch).detach()) == pytest.approx(bce, rel=1e-4)


# training -------------------------------------------------------------------------------------------
def test_training_loss_decreases(tokenizer):
    """The label loss on the training pairs, from the independent forward, drops after tuning."""
    model = make_tiny_causal_lm(tokenizer, seed=1)
    fields, labels, _ = cat_dog(32)
    y = torch.tensor([float(v) for v in labels])
    before = tune_loss(torch.tensor(reference_scores(model, tokenizer, TEMPLATE, fields)), labels=y)
    result = tune(model, tokenizer, template=TEMPLATE, fields=fields, labels=labels, config=fast_config(heldout_fraction=0.0, epochs=4))
    after = tune_loss(torch.tensor(reference_scores(result.model, tokenizer, TEMPLATE, fields)), labels=y)
    assert float(after) < 0.5 * float(before)
    logged = [h["loss"] for h in result.card["history"] if "loss" in h]
    assert logged[-1] < logged[0]


def test_gradient_checkpointing_trains_and_is_switched_off_afterwards(tokenizer):
    from pluie_reward.engines.transformers.compat import checkpointing_on

    model = make_tiny_causal_lm(tokenizer, seed=4)
    fields, labels, _ = cat_dog(16)
    y = torch.tensor([float(v) for v in labels])
    before = tune_loss(torch.tensor(reference_scores(model, tokenizer, TEMPLATE, fields)), labels=y)
    result = tune(model, tokenizer, template=TEMPLATE, fields=fields, labels=labels,
                  config=fast_config(heldout_fraction=0.0, epochs=4, gradient_checkpointing=True))
    after = tune_loss(torch.tensor(reference_scores(result.model, tokenizer, TEMPLATE, fields)), labels=y)
    assert float(after) < 0.5 * float(before)
    assert not checkpointing_on(result.model.get_base_model())


def test_tuned_adapter_moves_held_out_scores_toward_the_targets(tuned):
    """On pairs never trained on, the adapter-on forward is much closer to the teacher targets."""
    after = reference_scores(tuned.result.model, tuned.result.judge.tokenizer, TEMPLATE, tuned.test_fields)
    before_error = np.abs(tuned.before_test - tuned.test_targets).mean()
    after_error = np.abs(after - tuned.test_targets).mean()
    assert after_error < 0.5 * before_error, (before_error, after_error)
    assert np.mean((after > 0) == (tuned.test_targets > 0)) >= 0.9
    # the report says the same, from Judge.score
    report = tuned.result.card["evaluation"]["test"]
    assert report["after"]["teacher"]["mean_abs_difference"] == pytest.approx(after_error, abs=1e-3)
    assert report["before"]["teacher"]["mean_abs_difference"] == pytest.approx(before_error, abs=1e-3)


def test_tuned_judge_score_is_the_trained_logit_difference(tuned):
    """Judge.score of the tuned judge = the independent adapter-on forward (same ids, threshold 0)."""
    scores = tuned.result.judge.score(TEMPLATE, **tuned.test_fields)
    reference = reference_scores(tuned.result.model, tuned.result.judge.tokenizer, TEMPLATE, tuned.test_fields)
    assert np.allclose(scores, reference, atol=1e-4)
    records = tuned.result.judge.score(TEMPLATE, details=True, **tuned.test_fields)
    assert [r["verdict"] for r in records] == list(reference > 0)


# placements ---------------------------------------------------------------------------------------
def test_every_placement_reads_the_same_adapter(tuned, tokenizer):
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM

    fields = tuned.test_fields
    expected = reference_scores(tuned.result.model, tokenizer, TEMPLATE, fields)
    assert (tuned.out / "adapter_config.json").is_file() and (tuned.out / "template.yaml").is_file()

    loaded = Judge.load(str(tuned.base_dir), adapter=tuned.out, device="cpu")
    # the template saved beside the adapter is the one it was tuned with
    from_folder = loaded.score(str(tuned.out / "template.yaml"), **fields)

    policy = get_peft_model(AutoModelForCausalLM.from_pretrained(tuned.base_dir),
                            LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    policy.load_adapter(str(tuned.out), adapter_name="judge", is_trainable=False)
    shared = Judge.from_peft(policy, tokenizer, adapter_name="judge")

    wrapped = Judge(PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tuned.base_dir), str(tuned.out)), tokenizer)

    results = {
        "in memory": tuned.result.judge.score(TEMPLATE, **fields),
        "Judge.load(base, adapter=)": loaded.score(TEMPLATE, **fields),
        "template.yaml": from_folder,
        "Judge.from_peft(policy, adapter_name='judge')": shared.score(TEMPLATE, **fields),
        "Judge(PeftModel)": wrapped.score(TEMPLATE, **fields),
    }
    for name, scores in results.items():
        assert np.abs(np.array(scores) - expected).max() <= 1e-3, name
    assert policy.active_adapter == "default"  # the policy's own adapter is back after scoring
    # and the adapter really does something: the base alone scores differently
    base_only = Judge.from_peft(policy, tokenizer).score(TEMPLATE, **fields)
    assert np.abs(np.array(base_only) - expected).max() > 0.1


def test_base_model_is_unchanged_after_tuning(tuned):
    """Every base weight has its old value (the adapter is removed with PEFT's unload at the end)."""
    import copy

    model = copy.deepcopy(tuned.result.model)
    plain = model.unload()
    state = plain.state_dict()
    assert state.keys() == tuned.snapshot.keys()
    changed = [k for k, v in state.items() if not torch.equal(v, tuned.snapshot[k])]
    assert not changed, changed[:5]


def test_tuning_on_a_policy_adds_a_frozen_judge_adapter_and_restores_the_policy(tokenizer):
    from peft import LoraConfig, get_peft_model

    policy = get_peft_model(make_tiny_causal_lm(tokenizer, seed=2),
                            LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    policy.train()
    # parameters by object: adding LoRA layers renames the base weights (x.weight -> x.base_layer.weight)
    before = [(p, p.requires_grad, p.detach().clone()) for p in policy.parameters()]
    fields, labels, _ = cat_dog(24)
    result = tune(policy, tokenizer, template=TEMPLATE, fields=fields, labels=labels, config=fast_config(epochs=3))
    assert result.model is policy and set(policy.peft_config) == {"default", "judge"}
    assert policy.active_adapter == "default" and policy.training
    assert [p.requires_grad for p, _, _ in before] == [flag for _, flag, _ in before]
    assert any(flag for _, flag, _ in before)  # the policy's own adapter is still trainable
    assert all(torch.equal(p, value) for p, _, value in before)
    judge_weights = [p for n, p in policy.named_parameters() if ".judge." in n]
    assert judge_weights and not any(p.requires_grad for p in judge_weights)
    shared = Judge.from_peft(policy, tokenizer, adapter_name="judge").score(TEMPLATE, **fields)
    assert np.allclose(shared, result.judge.score(TEMPLATE, **fields), atol=1e-4)
    with peft_adapter(policy, "judge"):
        reference = reference_scores(policy, tokenizer, TEMPLATE, fields)
    assert np.allclose(shared, reference, atol=1e-4)


def test_the_adapter_block_restores_what_it_changed(tokenizer):
    """Inside trainable_adapter only the new adapter trains; afterwards a policy gets back its own trainable flags
    (one of its LoRA weights frozen by hand stays frozen), and a plain base is left frozen, in eval mode."""
    from peft import LoraConfig, get_peft_model

    from pluie_reward.tools.tune.run import trainable_adapter

    policy = get_peft_model(make_tiny_causal_lm(tokenizer, seed=2), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    frozen = next(p for n, p in policy.named_parameters() if "lora_A.default" in n)
    frozen.requires_grad_(False)
    flags = [(p, p.requires_grad) for p in policy.parameters()]
    with trainable_adapter(policy, TuneConfig()) as model:
        assert all((".judge." in n) == p.requires_grad for n, p in model.named_parameters())
    assert [p.requires_grad for p, _ in flags] == [flag for _, flag in flags] and not frozen.requires_grad
    plain = make_tiny_causal_lm(tokenizer, seed=2).train()
    with trainable_adapter(plain, TuneConfig()) as model:
        model.train()  # as the Trainer leaves it
    assert not any(m.training for m in model.modules()) and not any(p.requires_grad for p in model.parameters())


class peft_adapter:
    """Activate a PEFT adapter for the reference forward and restore the previous one."""

    def __init__(self, model, name):
        self.model, self.name = model, name

    def __enter__(self):
        self.previous = self.model.active_adapter
        self.model.set_adapter(self.name)

    def __exit__(self, *exc):
        self.model.set_adapter(self.previous)


# the card and report ------------------------------------------------------------------------------
def test_card_and_report(tuned):
    card = json.loads((tuned.out / "pluie_tune.json").read_text())
    assert card["template"] == TEMPLATE and card["data"] == {"train": 36, "heldout": 12, "eval": {"test": 16}}
    assert card["evaluation"]["held-out"]["before"]["loss"] > card["evaluation"]["held-out"]["after"]["loss"]
    assert (tuned.out / "README.md").read_text().count("| held-out (n=12) |") >= 3
    assert all((tuned.out / p).is_file() for p in card["plots"]) and card["plots"]
    rows = [json.loads(line) for line in (tuned.out / "scores.jsonl").read_text().splitlines()]
    test_rows = [r for r in rows if r["set"] == "test"]
    assert len(rows) == 28 and [r["after"] for r in test_rows] == tuned.result.scores["test"]["after"]
    assert [r["teacher"] for r in test_rows] == list(tuned.test_targets)
    # the Trainer's last held-out loss (training forward) equals the loss recomputed from Judge.score
    eval_losses = [h["eval_loss"] for h in card["history"] if "eval_loss" in h]
    assert eval_losses[-1] == pytest.approx(card["evaluation"]["held-out"]["after"]["loss"], rel=1e-3)


def test_the_report_loss_weighs_labels_and_teacher_as_training_does():
    from pluie_reward.tools.tune.run import _evaluate

    data = PairData.build(TEMPLATE, {"source": ["a", "b"], "hypothesis": ["c", "d"]}, labels=[True, False], targets=[1.0, -2.0])
    scores = [0.5, -1.0]

    def log_sigmoid(x):
        return -math.log1p(math.exp(-x))

    label = -(log_sigmoid(0.5) + log_sigmoid(1.0)) / 2  # BCE(sigmoid(s), y)
    p = [1 / (1 + math.exp(-t)) for t in (1.0, -2.0)]  # the teacher's p_yes at T = 1
    teacher = -sum(q * log_sigmoid(x) + (1 - q) * log_sigmoid(-x) for q, x in zip(p, scores)) / 2
    report = _evaluate(data, scores, scores, TuneConfig(label_weight=0.25))
    assert report["before"]["loss"] == pytest.approx(0.25 * label + 0.75 * teacher, rel=1e-6)


def test_agreement_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    s = rng.normal(size=50).round(1)  # ties
    t = s + rng.normal(size=50)
    r = agreement(s, t)
    assert r["pearson"] == pytest.approx(stats.pearsonr(s, t)[0])
    assert r["spearman"] == pytest.approx(stats.spearmanr(s, t)[0])
    assert r["verdict_agreement"] == pytest.approx(np.mean((s > 0) == (t > 0)))
    assert agreement([1.0, 1.0], [0.5, 2.0])["pearson"] is None


def test_spearman_by_hand_and_without_the_eval_extra(monkeypatch):
    """Spearman = Pearson of the average ranks: s ranks 1, 2.5, 2.5, 4 (a tie), t ranks 1, 3, 2, 4; deviations
    (-1.5, 0, 0, 1.5) and (-1.5, 0.5, -0.5, 1.5): r = 4.5 / sqrt(4.5 * 5) = sqrt(0.9). Tune runs without the eval
    extra (no scipy, no scikit-learn)."""
    import sys

    for name in [m for m in sys.modules if m.split(".")[0] in ("scipy", "sklearn")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "sklearn", None)
    r = agreement([1.0, 2.0, 2.0, 4.0], [10.0, 30.0, 20.0, 40.0])
    assert r["spearman"] == pytest.approx(0.9 ** 0.5, abs=1e-12)
    assert agreement([3.0, 2.0, 1.0], [1.0, 5.0, 9.0])["spearman"] == pytest.approx(-1.0, abs=1e-12)
    assert agreement([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])["spearman"] is None  # constant ranks: undefined


@pytest.mark.parametrize("n, fraction, held", [(10, 0.2, 2), (7, 0.5, 4), (3, 0.01, 1), (5, 0.0, 0)])
def test_split_is_a_partition(n, fraction, held):
    sources = [f"s{i}" for i in range(n)]
    data = PairData.build(TEMPLATE, {"source": sources, "hypothesis": [f"h{i}" for i in range(n)]},
                          labels=[i % 2 == 0 for i in range(n)], targets=[float(i) for i in range(n)])
    train, heldout = data.split(fraction, seed=3)
    assert len(heldout) == held and len(train) == n - held
    assert sorted(train.columns["source"] + heldout.columns["source"]) == sorted(sources)
    for part in (train, heldout):  # labels and targets travel with their pair
        index = [int(s[1:]) for s in part.columns["source"]]
        assert part.columns["hypothesis"] == [f"h{i}" for i in index]
        assert part.targets.tolist() == [float(i) for i in index] and part.labels.tolist() == [i % 2 == 0 for i in index]
    assert data.split(fraction, seed=3)[1].columns == heldout.columns  # reproducible
    with pytest.raises(ValueError, match="cannot be split"):
        PairData.build(TEMPLATE, {"source": ["a"], "hypothesis": ["b"]}).split(0.5)


def test_template_yaml_round_trips_with_only_the_keys_set():
    """template.yaml beside an adapter: every shipped Yes/No or choice template read back equal; optional keys written
    only when set (system "" is set), in the order written here."""
    from dataclasses import replace as replaced

    from pluie_reward import Template
    from pluie_reward.tools.tune.run import template_to_dict

    required = ["name", "description", "reference", "language", "fields", "answers", "messages", "plain", "generation"]
    for name in ("para-direct", "para-fs", "net-choice", "net-likert", "rev"):
        t = load_template(name)
        assert Template.from_dict(template_to_dict(t)) == t
    bare = replaced(load_template("para-direct"), system=None, chat_template_kwargs={})
    assert list(template_to_dict(bare)) == required
    full = replaced(load_template("net-choice"), system="", chat_template_kwargs={"enable_thinking": False})
    data = template_to_dict(full)
    assert list(data)[len(required):] == ["labels", "system", "chat_template_kwargs"] and data["system"] == ""
    assert Template.from_dict(data) == full


def test_synthetic_pairs():
    pairs = make_pairs(200, seed=5)
    assert pairs == make_pairs(200, seed=5)
    assert [p["label"] for p in pairs[:4]] == [True, False, True, False]
    assert all(p["source"] != p["hypothesis"] for p in pairs)
    assert {p["edit"] for p in pairs if not p["label"]} >= {"agent", "swap", "antonym", "negation", "time", "place"}
    from pluie_reward.tools.tune.synthetic import PEOPLE, PLACES, TIMES

    def found(words, text):
        return {w for w in words if w.lower() in text.lower()}

    for p in pairs:  # each non-paraphrase changes the fact its edit names, and only the roles for a swap
        s, h = p["source"], p["hypothesis"]
        if p["edit"] == "swap":
            assert found(PEOPLE, s) == found(PEOPLE, h) and len(found(PEOPLE, s)) == 2, p
        elif p["edit"] in ("agent", "time", "place"):
            words = {"agent": PEOPLE, "time": TIMES, "place": PLACES}[p["edit"]]
            assert found(words, s) != found(words, h), p
        elif p["edit"] == "negation":
            assert " not " in h and " not " not in s, p


# bad input ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    ({"loss": "hinge"}, "loss must be one of"),
    ({"temperature": 0}, "temperature must be a positive number"),
    ({"heldout_fraction": 1.0}, "heldout_fraction"),
    ({"batch_size": 0}, "batch_size"),
    ({"label_weight": 1.5}, "label_weight"),
    ({"target_modules": []}, "target_modules"),
    ({"target_modules": ""}, r"target_modules must be 'all-linear' or a non-empty list of module names, got ''\."),
    ({"target_modules": ["q_proj", ""]}, r"module names, got \['q_proj', ''\]\."),
    ({"target_modules": ("q_proj", 3)}, r"module names, got \('q_proj', 3\)\."),
    ({"adapter_name": "my judge"}, "adapter_name"),
    ({"max_steps": 0}, "max_steps"),
    ({"contrast_weight": -1}, "contrast_weight must be a number >= 0"),
    ({"contrast_margin": float("nan")}, "contrast_margin must be a number >= 0"),
    ({"learning_rate": float("inf")}, "learning_rate must be a positive number"),
    ({"weight_decay": -0.5}, "weight_decay must be a number >= 0"),
    ({"lora_dropout": 1.0}, r"lora_dropout must be a number with 0 <= x < 1"),
    ({"lora_r": 2.0}, "lora_r must be a positive integer"),
    ({"epochs": True}, "epochs must be a positive number"),
    ({"max_steps": -2}, "max_steps must be a positive integer or -1"),
    ({"seed": 1.5}, "seed must be a whole number >= 0"),
])
def test_bad_config(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TuneConfig(**kwargs)


def test_target_modules_keep_a_name_and_become_a_list():
    assert TuneConfig(target_modules="q_proj").target_modules == "q_proj"  # one name (or PEFT's regex) stays a string
    assert TuneConfig(target_modules=("q_proj", "v_proj")).target_modules == ["q_proj", "v_proj"]


def test_bf16_on_cpu_is_refused():
    from pluie_reward.tools.tune.trainer import resolve_bf16

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(ValueError, match="bf16=True needs a CUDA GPU"):
        resolve_bf16(TuneConfig(bf16=True))
    assert resolve_bf16(TuneConfig()) is False


@pytest.mark.parametrize("kwargs, error, message", [
    ({}, ValueError, "nothing to learn from"),
    ({"labels": [True, "maybe"] * 4}, ValueError, "is not a binary label"),
    ({"targets": [1.0, float("nan")] * 4}, ValueError, "NaN"),
    ({"targets": [1.0] * 3}, ValueError, "3 values for 8 items"),
    ({"labels": [True] * 8, "config": TuneConfig(loss="mse")}, ValueError, "loss='mse' is on teacher log-ratios"),
    ({"labels": [True] * 8, "template": "three-answers"}, ValueError, "has 3 answers"),
    ({"labels": [True] * 8, "template": "para-indirect"}, ValueError, "writes a turn|write a turn"),
    ({"targets": [1.0] * 8, "teacher": "x"}, ValueError, "not both"),
    ({"labels": [True] * 8, "teacher_template": "para-fs"}, ValueError, "needs a teacher"),
    ({"labels": [False] * 8, "contrast": [None] * 7}, ValueError, "contrast has 7 entries for 8 items"),
    ({"labels": [False] * 8, "contrast": [{"source": "a", "answer": "b"}] * 8}, ValueError, "unknown field"),
])
def test_bad_tune_input(tokenizer, kwargs, error, message):
    fields = {"source": ["a"] * 8, "hypothesis": ["b"] * 8}
    call = {"template": TEMPLATE, "fields": fields, **kwargs}
    if call["template"] == "three-answers":
        from pluie_reward.core.template import Message, Template

        call["template"] = Template(name="three", messages=(Message("user", "A: {source} B: {hypothesis}"),),
                                    fields=("source", "hypothesis"), answers=("Yes", "No", "yes"))
    with pytest.raises(error, match=message):
        tune(make_tiny_causal_lm(tokenizer), tokenizer, **call)


def test_output_folder_must_be_new(tokenizer, tmp_path):
    (tmp_path / "old.txt").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        tune(make_tiny_causal_lm(tokenizer), tokenizer, template=TEMPLATE, fields={"source": ["a"], "hypothesis": ["b"]},
             labels=[True], output_dir=tmp_path)


def test_load_adapter_from_a_folder_that_is_not_one(tuned, tmp_path):
    with pytest.raises(FileNotFoundError, match="not a PEFT adapter folder"):
        Judge.load(str(tuned.base_dir), adapter=tmp_path, device="cpu")


# the command line ---------------------------------------------------------------------------------
def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_cli_tune_then_score_with_the_adapter(tuned, tmp_path, capsys):
    fields, labels, _ = cat_dog(20)
    rows = [{"s1": s, "s2": h, "gold": y} for s, h, y in zip(fields["source"], fields["hypothesis"], labels)]
    data = _write(tmp_path / "pairs.jsonl", rows)
    out = tmp_path / "adapter"
    code = main(["tune", "--template", TEMPLATE, "--input", str(data), "--column", "source=s1", "--column", "hypothesis=s2",
                 "--label-column", "gold", "--output", str(out), "--model", str(tuned.base_dir), "--device", "cpu",
                 "--epochs", "1", "--no-progress", "--lora-r", "2", "--target-modules", "q_proj,v_proj",
                 "--chat-template-kwargs", '{"enable_thinking": false}'])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "| held-out (n=4) | accuracy at 0 |" in captured.out
    card = json.loads((out / "pluie_tune.json").read_text())
    assert card["config"]["target_modules"] == ["q_proj", "v_proj"] and card["data"]["train"] == 16
    # the chat-template keywords go with the saved template and the card
    assert card["chat_template_kwargs"] == {"enable_thinking": False}
    assert load_template(out / "template.yaml").chat_template_kwargs == {"enable_thinking": False}
    code = main(["score", "--model", str(tuned.base_dir), "--adapter", str(out), "--device", "cpu", "-t", TEMPLATE,
                 fields["source"][0], fields["hypothesis"][0]])
    scored = json.loads(capsys.readouterr().out.splitlines()[0])
    reference = Judge.load(str(tuned.base_dir), adapter=out, device="cpu").score(
        TEMPLATE, source=fields["source"][:1], hypothesis=fields["hypothesis"][:1])
    assert code == 0 and scored["logratio"] == pytest.approx(reference[0], abs=1e-4)


def test_cli_distills_a_better_template_of_the_same_model(tuned, tmp_path, capsys):
    """--teacher-template alone: the student's own base with another template computes the targets
    (before the adapter exists); labelled --eval-input sets get the teacher's own metrics too."""
    fields, labels, _ = cat_dog(12)
    data = _write(tmp_path / "pairs.jsonl", [{"source": s, "hypothesis": h} for s, h in zip(fields["source"], fields["hypothesis"])])
    test_fields, test_labels, _ = cat_dog(6, offset=48)
    extra = _write(tmp_path / "extra.jsonl", [{"source": s, "hypothesis": h, "gold": y}
                                              for s, h, y in zip(test_fields["source"], test_fields["hypothesis"], test_labels)])
    out = tmp_path / "distilled"
    code = main(["tune", "--input", str(data), "--teacher-template", "para-fs", "--eval-input", str(extra),
                 "--eval-label-column", "gold", "--output", str(out), "--model", str(tuned.base_dir), "--device", "cpu",
                 "--epochs", "1", "--no-progress", "--heldout", "0.25"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    card = json.loads((out / "pluie_tune.json").read_text())
    teacher = Judge.load(str(tuned.base_dir), device="cpu")
    expected = teacher.score("para-fs", **test_fields)
    rows = [json.loads(line) for line in (out / "scores.jsonl").read_text().splitlines() if '"extra"' in line]
    assert np.allclose([r["teacher"] for r in rows], expected, atol=1e-4)
    assert card["evaluation"]["extra"]["teacher"]["labels"]["n"] == 6 and "teacher" in card["evaluation"]["extra"]["after"]
    assert "| teacher |" in captured.out.splitlines()[0]
    assert card["supervision"].startswith("teacher log-ratios") and card["data"] == {"train": 9, "heldout": 3, "eval": {"extra": 6}}


def test_tune_options_are_the_config_fields(capsys):
    """tune's training options are TuneConfig's fields (one each, their names, the old aliases kept): given
    values reach the config, absent ones keep TuneConfig's defaults."""
    import dataclasses

    from pluie_reward.tools.cli.common import config_from_args
    from pluie_reward.tools.cli.main import build_parser

    parser = build_parser()
    base = ["tune", "--input", "x.jsonl", "--output", "out"]
    args = parser.parse_args(base + ["--lr", "1e-3", "--heldout", "0.1", "--no-progress", "--target-modules", "q_proj, v_proj",
                                     "--weight-decay", "0.01", "--no-share-prefix", "--bf16", "--max-steps", "-1",
                                     "--gradient-checkpointing", "--loss", "mse", "--lora-r", "4", "--seed", "3"])
    assert config_from_args(TuneConfig, args) == TuneConfig(
        learning_rate=1e-3, heldout_fraction=0.1, progress=False, target_modules=["q_proj", "v_proj"], weight_decay=0.01,
        share_prefix=False, bf16=True, max_steps=-1, gradient_checkpointing=True, loss="mse", lora_r=4, seed=3)
    assert config_from_args(TuneConfig, parser.parse_args(base)) == TuneConfig()
    commands = next(a for a in parser._actions if isinstance(a.choices, dict))  # argparse lists no sub-commands publicly
    options = {o for a in commands.choices["tune"]._actions for o in a.option_strings}
    for f in dataclasses.fields(TuneConfig):
        flag = "--" + f.name.replace("_", "-")
        assert (flag in options) == (f.name not in ("contrast_weight", "contrast_margin")), flag
    assert main(base + ["--label-column", "y", "--seed", "-1"]) == 2
    assert "--seed: seed must be a whole number >= 0" in capsys.readouterr().err


@pytest.mark.parametrize("extra, rows, message", [
    ([], None, "nothing to learn from"),
    (["--label-column", "nope"], None, "label column 'nope' is missing"),
    (["--target-column", "t", "--teacher", "embedded"], None, "not both"),
    (["--target-column", "t"], [{"source": "a", "hypothesis": "b", "t": "high"}] * 4, "pairs.jsonl, row 1: 'high' is not a number"),
    (["--label-column", "y"], [{"source": "a", "hypothesis": "b", "y": "maybe"}] * 4, "is not a binary label"),
    (["--label-column", "y", "--heldout", "1.5"], None, "heldout_fraction"),
    (["--label-column", "y", "--template", "no-such-template"], None, "unknown template"),
    (["--label-column", "y", "--column", "source=missing"], None, "column 'missing'"),
    (["--label-column", "y", "--limit", "0"], None, "--limit"),
])
def test_cli_bad_input_exits_2(tmp_path, capsys, extra, rows, message):
    rows = rows or [{"source": "a", "hypothesis": "b", "y": True}] * 4
    data = _write(tmp_path / "pairs.jsonl", rows)
    code = main(["tune", "--input", str(data), "--output", str(tmp_path / "out")] + extra)
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err


def test_cli_refuses_an_input_without_rows(tmp_path, capsys):
    (tmp_path / "pairs.jsonl").write_text("")  # the reader refuses it: no training, no folder
    assert main(["tune", "--input", str(tmp_path / "pairs.jsonl"), "--label-column", "y", "--output", str(tmp_path / "out")]) == 2
    assert "pairs.jsonl holds no items" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_cli_refuses_a_non_empty_output(tmp_path, capsys):
    data = _write(tmp_path / "pairs.jsonl", [{"source": "a", "hypothesis": "b", "y": True}])
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("x")
    assert main(["tune", "--input", str(data), "--label-column", "y", "--output", str(tmp_path / "out")]) == 2
    assert "not empty" in capsys.readouterr().err


def test_cli_tunes_the_untuned_embedded_base_by_default(tmp_path, capsys, embedded_judge):
    """Without --model the student is ``embedded-base`` (as ``tune(None)``), the base
    ``Judge.load(adapter=DIR)`` puts the adapter on -- not the default judge's merged weights."""
    from pluie_reward.engines.transformers.loading import embedded_model_dir

    fields, labels, _ = cat_dog(8)
    data = _write(tmp_path / "pairs.jsonl", [{"source": s, "hypothesis": h, "label": y}
                                               for s, h, y in zip(fields["source"], fields["hypothesis"], labels)])
    out = tmp_path / "adapter"
    code = main(["tune", "--template", "para-direct", "--input", str(data), "--label-column", "label", "--output", str(out),
                 "--max-steps", "1", "--no-progress", "--lora-r", "2", "--target-modules", "q_proj,v_proj"])
    assert code == 0, capsys.readouterr().err
    base = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base == str(embedded_model_dir())
    row = json.loads((out / "scores.jsonl").read_text().splitlines()[0])  # a held-out pair, scored by the tuned student
    reloaded = Judge.load(adapter=out).score("para-direct", source=[row["source"]], hypothesis=[row["hypothesis"]])[0]
    assert reloaded == pytest.approx(row["after"], abs=1e-4)
    merged = embedded_judge.score("para-direct", source=[row["source"]], hypothesis=[row["hypothesis"]])[0]  # Judge.load()
    assert abs(row["after"] - merged) > 1e-3


def test_card_metrics_table_best_threshold_rows():
    from pluie_reward.tools.tune.report import metrics_table

    def ev(accuracy, f1, best_acc, best_f1):
        return {"n": 4, "mean_score": 0.0, "labels": {
            "natural": {"accuracy": accuracy, "f1": f1, "tp": 1, "fp": 1},
            "best_accuracy": {"accuracy": best_acc[0], "threshold": best_acc[1], "f1": 0.0},
            "best_f1": {"f1": best_f1[0], "threshold": best_f1[1], "accuracy": 0.0}}}

    table = metrics_table({"s": {"before": ev(0.5, 0.4, (0.75, 1.0), (0.25, -2.0)), "after": ev(1.0, 1.0, (1.0, 0.5), (0.8, 0.25))}})
    assert "| s (n=4) | best accuracy (threshold) | 75.0% (1.00) | 100.0% (0.50) |" in table
    assert "| s (n=4) | best F1 (threshold) | 25.0% (-2.00) | 80.0% (0.25) |" in table
    assert "| s (n=4) | positive verdicts at 0 | 50.0% | 50.0% |" in table
