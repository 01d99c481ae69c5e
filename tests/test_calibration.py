"""Calibrated probabilities: ECE (per-bin rows), Brier, log loss, the Platt fit with its seeded
held-out split, the calibration file, and ``Judge(calibration=...)`` / ``p_calibrated``.

Hand-computed cases run everywhere; comparisons with scikit-learn run where it is installed."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from pluie_reward.core.calibration import Calibration
from pluie_reward.tools.evaluation.calibration import (
    CalibrationConfig,
    brier_score,
    calibration_metrics,
    calibration_report,
    expected_calibration_error,
    fit_calibration,
    fit_platt,
    heldout_split,
    log_loss,
    logit_log_loss,
    reliability_bins,
)


def sig(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


# metrics, by hand ---------------------------------------------------------------------------------
def test_ece_by_hand_two_bins():
    # bin [0, .5]: p .1 (neg), .4 (pos): mean .25, share .5; bin (.5, 1]: p .8, .9 (pos): mean .85, share 1
    r = expected_calibration_error([0.1, 0.4, 0.8, 0.9], [False, True, True, True], n_bins=2)
    assert r["ece"] == pytest.approx(0.5 * 0.25 + 0.5 * 0.15)
    assert r["mce"] == pytest.approx(0.25)
    assert r["n_bins"] == 2 and r["n"] == 4
    first, second = r["bins"]
    assert (first["lo"], first["hi"], first["count"]) == (0.0, 0.5, 2)
    assert first["mean_probability"] == pytest.approx(0.25) and first["positive_rate"] == 0.5
    assert first["gap"] == pytest.approx(0.25)
    assert (second["lo"], second["hi"], second["count"]) == (0.5, 1.0, 2)
    assert second["mean_probability"] == pytest.approx(0.85) and second["positive_rate"] == 1.0
    # bins of unequal size are weighted by their share of the items: 2/3 * |.5 - .2| + 1/3 * |1 - .9|
    uneven = expected_calibration_error([0.2, 0.2, 0.9], [False, True, True], n_bins=5)
    assert uneven["ece"] == pytest.approx(2 / 3 * 0.3 + 1 / 3 * 0.1) and uneven["mce"] == pytest.approx(0.3)


def test_bins_are_closed_on_the_right_and_empty_bins_are_rows():
    # 0 and an inner edge (.5) go to the bin on their left; 1 to the last bin
    rows = reliability_bins([0.0, 0.5, 1.0, 0.25], [False, True, True, False], n_bins=4)
    assert [r["count"] for r in rows] == [2, 1, 0, 1]
    assert [(r["lo"], r["hi"]) for r in rows] == [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]
    assert rows[2] == {"lo": 0.5, "hi": 0.75, "count": 0, "mean_probability": None, "positive_rate": None, "gap": None}
    assert rows[1]["positive_rate"] == 1.0 and rows[1]["mean_probability"] == 0.5
    default = expected_calibration_error([0.05, 0.95], [False, True])
    assert default["n_bins"] == 10 and len(default["bins"]) == 10
    assert default["ece"] == pytest.approx(0.05)


def test_perfectly_calibrated_and_constant_half():
    p = [0.25] * 4 + [0.75] * 4
    y = [True, False, False, False, True, True, True, False]
    assert expected_calibration_error(p, y)["ece"] == pytest.approx(0.0)
    m = calibration_metrics([0.5] * 6, [True, False, True, False, True, True])
    assert m["brier"] == 0.25 and m["log_loss"] == pytest.approx(math.log(2))
    assert m["ece"] == pytest.approx(abs(4 / 6 - 0.5))


def test_brier_and_log_loss_by_hand():
    assert brier_score([1.0, 0.5, 0.2], [True, True, False]) == pytest.approx((0 + 0.25 + 0.04) / 3)
    assert log_loss([0.5, 0.8], [True, False]) == pytest.approx((math.log(2) + math.log(5)) / 2)
    assert log_loss([0.9, 0.1], [1, 0]) == pytest.approx(-math.log(0.9))
    assert math.isfinite(log_loss([0.0, 1.0], [True, False]))  # clipped, not infinite
    # from logits: exact where probabilities would be clipped
    assert logit_log_loss([0.0, 50.0], [True, False]) == pytest.approx((math.log(2) + 50.0) / 2)
    z = np.array([-2.0, -0.3, 0.4, 3.0])
    y = [False, True, True, False]
    assert logit_log_loss(z, y) == pytest.approx(log_loss(sig(z), y))


def test_log_loss_clips_at_eps_by_hand():
    # p = 0 for a positive is clipped to eps = 1e-15: -log(1e-15) = 34.538776...; p = 1 for a negative to the float
    # 1 - 1e-15, whose distance to 1 is 9.992e-16 after rounding: -log(1 - (1 - 1e-15)) = 34.539576...
    assert log_loss([0.0], [True]) == pytest.approx(-math.log(1e-15), abs=1e-9)
    assert log_loss([1.0, 0.0], [False, True]) == pytest.approx((-math.log(1 - (1 - 1e-15)) - math.log(1e-15)) / 2, abs=1e-9)
    assert log_loss([1.0], [False], eps=1e-3) == pytest.approx(-math.log(1e-3), abs=1e-12)
    # one label only (no negatives): the loss is still defined, -log 0.8
    assert log_loss([0.8, 0.8], [True, True]) == pytest.approx(-math.log(0.8), abs=1e-12)
    assert brier_score([0.8, 0.6], [False, False]) == pytest.approx((0.64 + 0.36) / 2, abs=1e-12)


@pytest.mark.parametrize("call", [lambda: brier_score([0.5], [True]), lambda: log_loss([0.5], [True]),
                                  lambda: fit_platt([0.0, 1.0], [False, True])])
def test_brier_log_loss_and_fit_without_the_eval_extra_say_what_to_install(monkeypatch, call):
    import sys

    for name in [m for m in sys.modules if m == "sklearn" or m.startswith("sklearn.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "sklearn", None)
    with pytest.raises(ModuleNotFoundError, match=r'needs sklearn, which is not installed: pip install "pluie-reward\[eval\]"'):
        call()


def test_bad_inputs_say_what_is_wrong():
    with pytest.raises(ValueError, match=r"\[0, 1\].*sigmoid"):
        expected_calibration_error([0.2, 1.5], [True, False])
    with pytest.raises(ValueError, match="same length"):
        brier_score([0.2, 0.5], [True])
    with pytest.raises(ValueError, match="n_bins"):
        reliability_bins([0.5], [True], n_bins=0)
    with pytest.raises(ValueError, match="NaN"):
        log_loss([float("nan")], [True])
    with pytest.raises(ValueError, match="binary label"):
        brier_score([0.5], ["maybe"])


# metrics against scikit-learn -------------------------------------------------------------------
def _random(n=400, seed=3):
    rng = np.random.default_rng(seed)
    p = rng.uniform(size=n)
    p[:20] = np.round(p[:20], 1)  # values on bin edges too
    p[20] = 0.0
    p[21] = 1.0
    y = rng.uniform(size=n) < p ** 1.5
    return p, y


def test_brier_and_log_loss_match_sklearn():
    sk = pytest.importorskip("sklearn.metrics")
    p, y = _random()
    assert brier_score(p, y) == pytest.approx(sk.brier_score_loss(y, p), abs=1e-12)
    q = np.clip(p, 1e-6, 1 - 1e-6)  # sklearn's own clipping differs from ours at exactly 0 and 1
    assert log_loss(q, y) == pytest.approx(sk.log_loss(y, q), abs=1e-12)


@pytest.mark.parametrize("n_bins", [1, 5, 10, 13])
def test_bins_match_sklearn_calibration_curve(n_bins):
    calibration = pytest.importorskip("sklearn.calibration")
    p, y = _random()
    prob_true, prob_pred = calibration.calibration_curve(y, p, n_bins=n_bins, strategy="uniform")
    rows = [r for r in reliability_bins(p, y, n_bins) if r["count"]]
    assert np.allclose([r["positive_rate"] for r in rows], prob_true, atol=1e-12)
    assert np.allclose([r["mean_probability"] for r in rows], prob_pred, atol=1e-12)
    # ECE from sklearn's curve and bin counts (np.histogram is right-open: count with sklearn's rule)
    index = np.searchsorted(np.linspace(0, 1, n_bins + 1)[1:-1], p, side="left")
    counts = np.bincount(index, minlength=n_bins)
    assert [r["count"] for r in rows] == [int(c) for c in counts if c]
    ece = float(np.sum(counts[counts > 0] / len(p) * np.abs(prob_true - prob_pred)))
    assert expected_calibration_error(p, y, n_bins)["ece"] == pytest.approx(ece, abs=1e-12)


# the Platt fit --------------------------------------------------------------------------------------
def test_fit_by_hand_saturated_case():
    # two distinct scores: the maximum-likelihood fit reproduces each group's share of positives
    a, b = fit_platt([0, 0, 0, 0, 1, 1, 1, 1], [1, 0, 0, 0, 1, 1, 1, 0], l2=0)
    assert b == pytest.approx(-math.log(3), abs=1e-8)       # sigmoid(b) = 1/4
    assert a == pytest.approx(2 * math.log(3), abs=1e-8)    # sigmoid(a + b) = 3/4
    # a pure shift: scores 2 and 4 with shares 1/2 and 1/2 -> a = 0, b = 0
    a, b = fit_platt([2, 2, 4, 4], [1, 0, 1, 0], l2=0)
    assert (a, b) == pytest.approx((0.0, 0.0), abs=1e-8)


def test_fit_recovers_a_known_temperature_and_bias():
    rng = np.random.default_rng(0)
    s = rng.normal(0, 3, size=20000)
    y = rng.uniform(size=s.size) < sig(0.4 * s - 1.0)
    a, b = fit_platt(s, y, l2=0)
    assert a == pytest.approx(0.4, abs=0.03) and b == pytest.approx(-1.0, abs=0.06)


def test_fit_matches_sklearn_logistic_regression():
    linear = pytest.importorskip("sklearn.linear_model")
    rng = np.random.default_rng(1)
    s = rng.normal(1.0, 2.0, size=300)
    y = rng.uniform(size=s.size) < sig(0.7 * s + 0.3)
    model = linear.LogisticRegression(C=np.inf, tol=1e-12, max_iter=10000).fit(s[:, None], y)
    a, b = fit_platt(s, y, l2=0)
    assert a == pytest.approx(float(model.coef_[0, 0]), abs=1e-5)
    assert b == pytest.approx(float(model.intercept_[0]), abs=1e-5)


def test_fit_lowers_the_log_loss_it_minimises():
    rng = np.random.default_rng(2)
    s = rng.normal(0, 4, size=500)
    y = rng.uniform(size=s.size) < sig(0.3 * s + 0.8)  # an over-confident, shifted judge
    a, b = fit_platt(s, y, l2=0)
    best = logit_log_loss(a * s + b, y)
    for da, db in ((0.01, 0), (-0.01, 0), (0, 0.01), (0, -0.01)):
        assert logit_log_loss((a + da) * s + (b + db), y) > best
    assert best < logit_log_loss(s, y)


@pytest.mark.parametrize("l2", [1e-4, 0.05, 1.0])
def test_fit_penalises_slope_and_bias_as_documented(l2):
    """At the minimum of mean log loss + 0.5 * l2 * (a^2 + b^2) the gradient is zero:
    mean((p - y) s) + l2 a = 0 and mean(p - y) + l2 b = 0 (the bias penalised as the slope is)."""
    rng = np.random.default_rng(4)
    s = rng.normal(0.5, 2.0, size=200)
    y = rng.uniform(size=s.size) < sig(0.6 * s - 0.7)
    a, b = fit_platt(s, y, l2=l2)
    p = sig(a * s + b)
    assert np.mean((p - y) * s) + l2 * a == pytest.approx(0.0, abs=1e-8)
    assert np.mean(p - y) + l2 * b == pytest.approx(0.0, abs=1e-8)


def test_separable_scores_stay_finite_with_the_default_ridge():
    a, b = fit_platt([-3, -2, -1, 1, 2, 3], [0, 0, 0, 1, 1, 1])
    assert math.isfinite(a) and math.isfinite(b) and a > 1  # sharper than raw, but finite
    with pytest.raises(ValueError, match="both positive and negative"):
        fit_platt([1, 2], [True, True])


def test_heldout_split_is_seeded_and_sized_like_the_tuner():
    fit, held = heldout_split(10, 0.3, seed=0)
    assert len(held) == 3 and len(fit) == 7 and sorted([*fit, *held]) == list(range(10))
    assert np.array_equal(heldout_split(10, 0.3, seed=0)[1], held)
    assert not np.array_equal(heldout_split(10, 0.3, seed=1)[1], held)
    assert len(heldout_split(10, 0.0)[1]) == 0 and len(heldout_split(10, 0.01)[1]) == 1
    with pytest.raises(ValueError, match="cannot be split"):
        heldout_split(1, 0.5)


def test_fit_calibration_reports_before_after_on_the_heldout_items():
    rng = np.random.default_rng(4)
    s = rng.normal(0, 4, size=200)
    y = rng.uniform(size=s.size) < sig(0.3 * s + 0.8)
    c = fit_calibration(s, y, heldout_fraction=0.3, seed=7, template="para-fs", judge="j")
    fit, held = heldout_split(200, 0.3, seed=7)
    assert (c.n_fit, c.n_heldout, c.seed, c.template, c.judge) == (140, 60, 7, "para-fs", "j")
    assert (c.a, c.b) == pytest.approx(fit_platt(s[fit], y[fit]))
    before, after = c.metrics["heldout"]["before"], c.metrics["heldout"]["after"]
    assert before["n"] == after["n"] == 60
    assert before["ece"] == pytest.approx(expected_calibration_error(sig(s[held]), y[held])["ece"])
    assert after["brier"] == pytest.approx(brier_score(sig(c.a * s[held] + c.b), y[held]))
    assert after["log_loss"] < before["log_loss"] and after["ece"] < before["ece"]
    assert c.metrics["fit"]["after"]["n"] == 140
    assert c(1.5) == pytest.approx(float(sig(c.a * 1.5 + c.b)))
    # no held-out part: in-sample metrics only
    whole = fit_calibration(s, y, heldout_fraction=0)
    assert "heldout" not in whole.metrics and whole.n_heldout == 0 and whole.n_fit == 200


def test_fit_calibration_errors():
    with pytest.raises(ValueError, match="both positive and negative.*fit part"):
        fit_calibration([1.0, 2.0, 3.0, -1.0], [True, True, True, False], heldout_fraction=0.25, seed=2)  # holds out item 3
    with pytest.raises(ValueError, match="heldout_fraction"):
        CalibrationConfig(heldout_fraction=-0.1)
    with pytest.raises(ValueError, match="l2"):
        CalibrationConfig(l2=-1)


def test_calibration_report_of_an_evaluation():
    r = calibration_report([-2.0, 1.0, 3.0, -1.0, 0.5, -0.2], [False, True, True, False, False, True], heldout_fraction=0.5)
    assert r["n"] == 6 and r["fit"]["n_heldout"] == 3 and set(r["fit"]["metrics"]) == {"heldout", "fit"}
    one_class = calibration_report([1.0, 2.0], [True, True])
    assert one_class["fit"] is None and "both positive and negative" in one_class["fit_error"]


# the calibration file ---------------------------------------------------------------------------------
def test_calibration_file_round_trip(tmp_path):
    c = fit_calibration([-3, -1, -2, 0.5, 2, 3, -0.5, 1, 4, -4], [0, 0, 0, 1, 1, 1, 1, 0, 1, 0], template="para-fs")
    path = c.save(tmp_path / "adapter")  # a folder: calibration.json inside
    assert path == tmp_path / "adapter" / "calibration.json"
    data = json.loads(path.read_text())
    assert data["format"] == "pluie-calibration/1" and data["a"] == c.a and data["n_heldout"] == 3
    assert Calibration.load(tmp_path / "adapter") == c == Calibration.load(path)
    assert Calibration.resolve(str(path)) == c
    assert c.save(tmp_path / "c.json") == tmp_path / "c.json"
    (tmp_path / "bad.json").write_text('{"a": 1}')
    with pytest.raises(ValueError, match="both 'a' and 'b'"):
        Calibration.load(tmp_path / "bad.json")
    (tmp_path / "typo.json").write_text('{"a": 1, "b": 0, "bias": 2}')
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['bias'\]"):
        Calibration.load(tmp_path / "typo.json")
    with pytest.raises(FileNotFoundError, match="pluie-reward calibrate"):
        Calibration.load(tmp_path / "nowhere")
    with pytest.raises(TypeError):
        Calibration.resolve(3)


# applied by the judge ----------------------------------------------------------------------------------
SOURCES = ["The cat sleeps on the mat.", "The dog barks at night.", "Alice bought a car."]
HYPOTHESES = ["A cat is asleep on the mat.", "The dog sleeps all day.", "Alice purchased a car."]


@pytest.fixture(scope="module")
def judges():
    from pluie_reward.testing import make_tiny_judge

    c = Calibration(a=0.5, b=-0.25, template="para-fs", judge="tiny-random")
    return make_tiny_judge(), make_tiny_judge(calibration=c), c


def test_judge_adds_p_calibrated_and_keeps_raw_scores(judges, tmp_path):
    raw, calibrated, c = judges
    assert raw.calibration is None and calibrated.calibration is c
    plain = raw.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES)
    assert calibrated.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES) == plain  # floats: raw PLUIE, exactly
    records = calibrated.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES, details=True)
    reference = raw.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES, details=True)
    for record, before, logratio in zip(records, reference, plain):
        assert set(record) == {"logratio", "p_yes", "verdict", "p_calibrated"} and "p_calibrated" not in before
        assert record["p_calibrated"] == pytest.approx(1 / (1 + math.exp(-(0.5 * logratio - 0.25))), abs=1e-12)
        assert (record["logratio"], record["p_yes"], record["verdict"]) == (before["logratio"], before["p_yes"], before["verdict"])
    # from a file or folder, as Judge.load(..., calibration=path) passes it on
    from pluie_reward.testing import make_tiny_judge

    c.save(tmp_path)
    again = make_tiny_judge(calibration=tmp_path).score("para-fs", source=SOURCES[:1], hypothesis=HYPOTHESES[:1], details=True)
    assert again[0]["p_calibrated"] == pytest.approx(records[0]["p_calibrated"])


def test_templates_with_n_answers_and_other_templates(judges):
    _, calibrated, _ = judges
    choice = calibrated.score("rev-choice", original=["P"], instruction=["Fix"], hypothesis=["P."], alternative=["Q"],
                              details=True)
    assert "p_calibrated" not in choice[0]  # a calibration of PLUIE: Yes/No templates only
    with pytest.warns(UserWarning, match="fitted on template 'para-fs'.*para-direct"):
        calibrated.score("para-direct", source=SOURCES[:1], hypothesis=HYPOTHESES[:1], details=True)


def test_load_passes_calibration_on():
    import inspect

    from pluie_reward.core import judge as judge_module

    from pluie_reward.core.judge_config import JudgeConfig, option_names

    assert "calibration" in option_names(JudgeConfig)  # vllm and connect hand it to Judge(...)
    assert "calibration" in inspect.signature(judge_module.Judge.__init__).parameters


def test_reward_output_calibrated(judges):
    from pluie_reward import PluieReward

    raw, calibrated, c = judges
    reward = PluieReward(calibrated, fields={"source": "src"}, output="calibrated")
    values = reward(prompts=["p"] * 3, completions=HYPOTHESES, src=SOURCES)
    logratios = raw.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES)
    assert values == pytest.approx([c(s) for s in logratios], abs=1e-12)
    details = calibrated.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES, details=True)
    assert values == pytest.approx([r["p_calibrated"] for r in details], abs=1e-12)
    with pytest.raises(ValueError, match="output='calibrated'.*has none"):
        PluieReward(raw, fields={"source": "src"}, output="calibrated")


def test_server_score_passes_p_calibrated_through(judges):
    testclient = pytest.importorskip("fastapi.testclient")
    from pluie_reward.serving.app import create_app

    _, calibrated, c = judges
    with testclient.TestClient(create_app(calibrated, "para-fs", max_wait_ms=1)) as client:
        body = client.post("/score", json={"source": SOURCES, "hypothesis": HYPOTHESES}).json()
    assert body["p_calibrated"] == pytest.approx([c(s) for s in body["logratio"]], abs=1e-12)


# in evaluation reports ----------------------------------------------------------------------------------
def test_classification_results_markdown_and_reliability_plot(tmp_path):
    from pluie_reward.tools.evaluation.calibration import heldout_calibrated
    from pluie_reward.tools.evaluation.plots import plot_facts
    from pluie_reward.tools.evaluation.tables import task_markdown
    from pluie_reward.tools.evaluation.tasks import classification_plots, classification_results

    rng = np.random.default_rng(5)
    scores = [float(v) for v in rng.normal(0, 3, size=40)]
    labels = [bool(v) for v in rng.uniform(size=40) < sig(0.4 * np.array(scores) + 0.5)]
    meta = {"task": "classification", "judge": "j", "template": "para-fs", "threshold": 0.0, "baselines": ["bleu"],
            "conditions": [{"name": "PLUIE", "template": "para-fs", "kind": "binary"},
                           {"name": "Likert", "template": "net-likert", "kind": "scale"},
                           {"name": "Old run", "template": "para-fs"}]}  # saved before "kind": looked up
    lines = [{"i": i, "label": y, "scores": {"PLUIE": s, "Likert": 3.0, "Old run": s, "bleu": 0.5}}
             for i, (s, y) in enumerate(zip(scores, labels))]
    results = classification_results(meta, lines)
    assert set(results["calibration"]) == {"PLUIE", "Old run"}  # not the scale, not the baseline
    cal = results["calibration"]["PLUIE"]
    assert cal["ece"] == pytest.approx(expected_calibration_error(sig(scores), labels)["ece"])
    assert cal["brier"] == pytest.approx(brier_score(sig(scores), labels))
    assert len(cal["bins"]) == 10 and sum(b["count"] for b in cal["bins"]) == 40
    fit = cal["fit"]
    assert (fit["n_fit"], fit["n_heldout"], fit["seed"]) == (28, 12, 0)
    assert (fit["a"], fit["b"]) == pytest.approx((fit_calibration(scores, labels).a, fit_calibration(scores, labels).b))
    held = fit["metrics"]["heldout"]
    table = task_markdown(results)
    assert "| PLUIE | 40 | " in table and f"| {held['before']['ece']:.3f} → {held['after']['ece']:.3f} |" in table
    assert "Platt fit p = sigmoid(a · score + b) on 28 items" in table and "| 0.0–0.1 |" in table
    plots = classification_plots(results, tmp_path)
    reliability = tmp_path / "PLUIE_reliability.png"
    assert str(reliability) in plots and not (tmp_path / "Likert_reliability.png").exists()
    facts = plot_facts(reliability)
    assert facts["p_yes = sigmoid(score), all items"]["ece"] == pytest.approx(cal["ece"])
    assert facts["p_yes = sigmoid(score), all items"]["counts"] == [b["count"] for b in cal["bins"]]
    after_p, after_y = heldout_calibrated(scores, labels, fit)
    calibrated_series = next(v for k, v in facts.items() if k.startswith("Platt-calibrated"))
    assert sum(calibrated_series["counts"]) == 12
    assert calibrated_series["ece"] == pytest.approx(held["after"]["ece"]) == pytest.approx(
        expected_calibration_error(after_p, after_y)["ece"])


# the command ------------------------------------------------------------------------------------------
def _labelled(tmp_path, n=40, seed=0):
    from pluie_reward.tools.tune.synthetic import make_pairs

    rng = np.random.default_rng(seed)
    rows = [{"s1": p["source"], "hypothesis": p["hypothesis"], "label": p["label"],
             "out": {"logratio": float(rng.normal(2 if p["label"] else -1, 3))}} for p in make_pairs(n, seed=seed)]
    path = tmp_path / "labelled.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, rows


def test_calibrate_options_are_the_config_fields():
    """calibrate's fit options are CalibrationConfig's fields (the old names --heldout and --bins kept as aliases)."""
    from pluie_reward.tools.cli.common import config_from_args
    from pluie_reward.tools.cli.main import build_parser

    parser = build_parser()
    base = ["calibrate", "-i", "x.jsonl", "-o", "c.json"]
    args = parser.parse_args(base + ["--bins", "5", "--heldout", "0.2", "--l2", "0", "--max-iter", "50", "--tol", "1e-8",
                                     "--seed", "2"])
    assert config_from_args(CalibrationConfig, args) == CalibrationConfig(n_bins=5, heldout_fraction=0.2, l2=0.0, max_iter=50,
                                                                          tol=1e-8, seed=2)
    assert config_from_args(CalibrationConfig, parser.parse_args(base)) == CalibrationConfig()


def test_cli_fits_from_a_score_column(tmp_path, capsys):
    from pluie_reward.tools.cli.main import main

    path, rows = _labelled(tmp_path)
    out = tmp_path / "adapter"
    assert main(["calibrate", "-i", str(path), "--score-column", "out.logratio", "-o", str(out), "--seed", "3",
                 "--judge-name", "big", "--plot"]) == 0
    saved = Calibration.load(out)
    expected = fit_calibration([r["out"]["logratio"] for r in rows], [r["label"] for r in rows], seed=3)
    assert (saved.a, saved.b, saved.n_fit, saved.n_heldout, saved.seed) == (expected.a, expected.b, 28, 12, 3)
    assert (saved.template, saved.judge) == ("para-fs", "big")
    printed = capsys.readouterr().out
    held = saved.metrics["heldout"]
    assert f"| calibrated p | {held['after']['ece']:.4f} |" in printed and "On 12 held-out items" in printed
    assert (out / "calibration.png").exists()
    assert main(["calibrate", "-i", str(path), "--score-column", "out.logratio", "-o", str(out)]) == 2  # exists
    assert "--overwrite" in capsys.readouterr().err


def test_cli_scores_with_the_judge(tmp_path, monkeypatch, judges):
    import pluie_reward.tools.evaluation.calibrate_cli as calibrate_cli
    from pluie_reward.tools.cli.main import main

    raw, _, _ = judges
    monkeypatch.setattr(calibrate_cli, "judge_from_args", lambda args: raw)
    path, rows = _labelled(tmp_path, n=20)
    target = tmp_path / "c.json"
    assert main(["calibrate", "-i", str(path), "--column", "source=s1", "-o", str(target), "--no-progress",
                 "--heldout", "0.25"]) == 0
    scores = raw.score("para-fs", source=[r["s1"] for r in rows], hypothesis=[r["hypothesis"] for r in rows])
    expected = fit_calibration(scores, [r["label"] for r in rows], heldout_fraction=0.25)
    saved = Calibration.load(target)
    assert (saved.a, saved.b) == pytest.approx((expected.a, expected.b)) and saved.judge == "tiny-random"


@pytest.mark.parametrize("rows, extra, message", [
    ([{"out": {"logratio": 1}, "label": "maybe"}], [], "line 1: column 'label'.*not a binary label"),
    ([{"out": {"logratio": 1}, "label": True}, {"out": {"logratio": "x"}, "label": False}], [], "line 2: column 'out.logratio'.*not a number"),
    ([{"out": {"logratio": v}, "label": True} for v in (1, 2, 3)], [], "both positive and negative"),
    ([{"out": {"logratio": 1}, "label": True}], ["--heldout", "1"], "--heldout-fraction/--heldout: heldout_fraction must be"),
    ([{"out": {"logratio": 1}, "label": True}], ["-t", "rev-choice"], "Yes/No template"),
    ([{"out": {"logratio": 1}, "label": True}], ["--column", "source=s1"], "nothing is scored"),
    ([{"out": {"logratio": 1}, "label": True}], ["--bins", "0"], "--n-bins/--bins: n_bins must be a positive integer"),
    ([{"out": {"logratio": 1}, "label": True}], ["--seed", "-1"], "--seed: seed must be a whole number >= 0"),
    ([{"out": {"logratio": 1}, "label": True}], ["--tol", "0"], "--tol: tol must be a positive number"),
])
def test_cli_bad_input_exits_2_with_a_message(tmp_path, capsys, rows, extra, message):
    import re

    from pluie_reward.tools.cli.main import main

    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = main(["calibrate", "-i", str(path), "--score-column", "out.logratio", "-o", str(tmp_path / "c.json"), *extra])
    err = capsys.readouterr().err
    assert code == 2 and re.search(message, err) and "Traceback" not in err
    assert not (tmp_path / "c.json").exists()


def test_callback_records_pass_p_calibrated_through(judges):
    from pluie_reward.integrations.callbacks import PluieCallback
    from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

    _, calibrated, c = judges
    tok = make_tiny_tokenizer()
    items = [{"prompt": [{"role": "user", "content": f"Paraphrase: {s}"}], "source": s} for s in SOURCES]
    records = PluieCallback(calibrated, "para-fs", items, max_new_tokens=3).generate_and_score(make_tiny_causal_lm(tok, seed=1), tok)
    assert [r["p_calibrated"] for r in records] == pytest.approx([c(r["score"]) for r in records], abs=1e-12)


def test_judge_load_reads_a_calibration_file(tmp_path):
    from pluie_reward import Judge

    Calibration(a=0.5, b=1.0, template="para-fs").save(tmp_path)
    judge = Judge.load(calibration=tmp_path)  # the embedded judge
    record = judge.score("para-fs", source=["The cat sleeps."], hypothesis=["A cat is asleep."], details=True)[0]
    assert record["p_calibrated"] == pytest.approx(1 / (1 + math.exp(-(0.5 * record["logratio"] + 1.0))), abs=1e-12)


def test_threshold_on_the_raw_logratio_for_a_calibrated_verdict(judges):
    c = Calibration(a=0.5, b=-0.25)
    assert c.threshold() == pytest.approx(0.5) and c(c.threshold(0.8)) == pytest.approx(0.8)
    with pytest.raises(ValueError, match="wrong way"):
        Calibration(a=-1.0).threshold()
    _, calibrated, judge_c = judges
    cut = judge_c.threshold(0.5)
    records = calibrated.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES, details=True, threshold=cut)
    assert [r["verdict"] for r in records] == [r["p_calibrated"] > 0.5 for r in records]


def test_calibration_report_fit_is_the_calibration_record_without_its_format():
    scores, labels = [-2.0, 1.0, 3.0, -1.0, 0.5, -0.2], [0, 1, 1, 0, 0, 1]
    fit = calibration_report(scores, labels, heldout_fraction=0)["fit"]
    c = fit_calibration(scores, labels, heldout_fraction=0)
    assert "format" in c.to_dict() and "format" not in fit
    assert set(fit) == set(c.to_dict()) - {"format"} and (fit["a"], fit["b"], fit["n_fit"]) == (c.a, c.b, 6)
