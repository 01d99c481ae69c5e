"""pluie_reward.tools.evaluation: hand-computed metrics, baselines, plots, the PARAPHRASUS protocol, the CLI."""

import json

import pytest

from pluie_reward.integrations.novelty import edit_distance
from pluie_reward.tools.cli import main
from pluie_reward.tools.evaluation import baselines as bl
from pluie_reward.tools.evaluation.metrics import (
    as_labels,
    as_preferences,
    as_scores,
    best_threshold,
    classification_metrics,
    classification_report,
    cohens_kappa,
    cramers_v,
    preference_metrics,
    tie_calibrated_accuracy,
)
from pluie_reward.tools.evaluation.paraphrasus import load_pairs, markdown_report, peer_results, run_paraphrasus, summarise
from pluie_reward.tools.evaluation.plots import (
    plot_edit_distance,
    plot_error_rates,
    plot_facts,
    plot_score_histograms,
    plot_sts_bins,
    plot_threshold_curves,
    sts_bin_shares,
)
from pluie_reward.tools.evaluation.tasks import evaluate_classification, evaluate_preference

from conftest import shared_path

# ---------------------------------------------------------------------------------------------
# classification, hand-computed
#   scores  -2.0  -0.5  0.5  1.0  3.0  -1.0
#   labels    F     T    T    F    T     F         (3 positives, 3 negatives)
# threshold 0 (score > 0 is positive): predicted positive = {0.5, 1.0, 3.0}
#   TP = 2 (0.5, 3.0), FP = 1 (1.0), FN = 1 (-0.5), TN = 2 (-2.0, -1.0)
#   accuracy 4/6, precision 2/3, recall 2/3, F1 2/3
# candidate thresholds: -3 (min-1), -1.5, -0.75, 0.0, 0.75, 2.0, 4 (max+1)
#   -0.75: positives {-0.5, 0.5, 1.0, 3.0}: TP 3, FP 1, TN 2 -> acc 5/6, P 3/4, R 1, F1 = 1.5/1.75 = 6/7
#   (-3: F1 2/3, -1.5: F1 0.75, 0: 2/3, 0.75: 0.4, 2: 0.5, 4: 0) -> best F1 and best accuracy at -0.75
SCORES = [-2.0, -0.5, 0.5, 1.0, 3.0, -1.0]
LABELS = [False, True, True, False, True, False]


def test_classification_at_natural_threshold_hand_computed():
    m = classification_metrics(SCORES, LABELS, 0.0)
    assert m["accuracy"] == pytest.approx(4 / 6)
    assert m["precision"] == pytest.approx(2 / 3)
    assert m["recall"] == pytest.approx(2 / 3)
    assert m["f1"] == pytest.approx(2 / 3)
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == (2, 1, 2, 1)


def test_a_posteriori_thresholds_hand_computed():
    r = classification_report(SCORES, LABELS)
    assert r["n"] == 6 and r["positives"] == 3
    assert r["best_f1"]["threshold"] == pytest.approx(-0.75)
    assert r["best_f1"]["f1"] == pytest.approx(6 / 7)
    assert r["best_f1"]["accuracy"] == pytest.approx(5 / 6)
    assert r["best_f1"]["precision"] == pytest.approx(0.75)
    assert r["best_f1"]["recall"] == pytest.approx(1.0)
    assert r["best_accuracy"]["threshold"] == pytest.approx(-0.75)


def test_best_accuracy_and_best_f1_can_differ():
    # scores 1 2 3 4, labels T F F F.
    # all positive (threshold 0 = min-1): acc 1/4, P 1/4, R 1, F1 = 2*(1/4)/(5/4) = 0.4  <- best F1
    # all negative (threshold 5 = max+1): acc 3/4, F1 0 (P, R defined as 0)              <- best accuracy
    scores, labels = [1, 2, 3, 4], [True, False, False, False]
    f1 = best_threshold(scores, labels, "f1")
    acc = best_threshold(scores, labels, "accuracy")
    assert (f1["threshold"], f1["f1"], f1["accuracy"]) == (0.0, pytest.approx(0.4), pytest.approx(0.25))
    assert (acc["threshold"], acc["accuracy"], acc["f1"], acc["precision"]) == (5.0, pytest.approx(0.75), 0.0, 0.0)
    # natural threshold None (a baseline): no "natural" entry
    assert "natural" not in classification_report(scores, labels, natural_threshold=None)


def test_score_equal_to_threshold_is_negative():
    # verdict is score > threshold, like Judge.score: 0.0 at threshold 0 is a negative
    m = classification_metrics([0.0, 1.0], [True, True], 0.0)
    assert (m["tp"], m["fn"]) == (1, 1)


def test_zero_denominators_give_zero_without_a_warning():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a 0/0 would warn
        nothing_predicted = classification_metrics([1.0, 2.0], [True, False], 5.0)  # tp = fp = 0
        no_positive = classification_metrics([1.0, 2.0], [False, False], 0.0)  # every item predicted, none positive
        one_right = classification_metrics([1.0, 2.0], [True, False], 1.5)  # tp = 0, fp = 1, fn = 1
    assert [nothing_predicted[k] for k in ("accuracy", "precision", "recall", "f1")] == [0.5, 0.0, 0.0, 0.0]
    assert [no_positive[k] for k in ("accuracy", "precision", "recall", "f1")] == [0.0, 0.0, 0.0, 0.0]
    assert [one_right[k] for k in ("accuracy", "precision", "recall", "f1")] == [0.0, 0.0, 0.0, 0.0]
    m = classification_metrics([1.0, 2.0, 3.0], [True, False, True], 1.5)  # tp = 1, fp = 1, fn = 1
    assert (m["precision"], m["recall"], m["f1"]) == (0.5, 0.5, 0.5)


# ---------------------------------------------------------------------------------------------
# preference, hand-computed
#   a     = 3   1   2    0    5
#   b     = 1   2   2    0.5  4.8
#   d=a-b = 2  -1   0   -0.5  0.2
#   human = A   B  tie  tie   A
# epsilon candidates 0, 0.2, 0.5, 1, 2 (tie when |d| <= eps):
#   0   -> A B tie B A       : 4/5 correct        <- best (smallest of the ties)
#   0.2 -> A B tie B tie     : 3/5
#   0.5 -> A B tie tie tie   : 4/5
#   1   -> A tie tie tie tie : 3/5
#   2   -> all tie           : 2/5
# At eps 0: contingency human x predicted (A, B, tie):
#   A: 2 0 0 | B: 0 1 0 | tie: 0 1 1 ; row sums 2 1 2, column sums 2 2 1, n 5
#   chi2 = 3.0 + 1.5 + 1.75 = 6.25 ; V = sqrt(6.25 / (5 * 2)) = sqrt(0.625) = 0.790569...
#   kappa: p_o = 0.8, p_e = (2*2 + 1*2 + 2*1)/25 = 0.32 -> 0.48/0.68 = 0.705882...
# At fixed eps 0.5: predicted A B tie tie tie
#   A: 1 0 1 | B: 0 1 0 | tie: 0 0 2 ; column sums 1 1 3
#   chi2 = 1.3333 + 4.0 + 1.3333 = 6.6667 ; V = sqrt(0.66667) = 0.816497
#   kappa: p_e = (2*1 + 1*1 + 2*3)/25 = 0.36 -> (0.8-0.36)/0.64 = 0.6875
A = [3, 1, 2, 0, 5]
B = [1, 2, 2, 0.5, 4.8]
HUMAN = ["A", "B", "tie", "tie", "A"]


def test_tie_calibrated_pairwise_accuracy_hand_computed():
    assert tie_calibrated_accuracy(A, B, HUMAN) == (pytest.approx(0.8), 0.0)
    m = preference_metrics(A, B, HUMAN)
    assert m["pairwise_accuracy"] == pytest.approx(0.8)
    assert m["epsilon"] == 0.0 and m["tie_calibrated"]
    assert m["cramers_v"] == pytest.approx(0.7905694150)
    assert m["cohens_kappa"] == pytest.approx(0.7058823529)
    assert m["predicted_counts"] == {"A": 2, "B": 2, "tie": 1}
    assert m["human_counts"] == {"A": 2, "B": 1, "tie": 2}


def test_preference_at_fixed_epsilon_hand_computed():
    m = preference_metrics(A, B, HUMAN, epsilon=0.5)
    assert m["pairwise_accuracy"] == pytest.approx(0.8)
    assert m["cramers_v"] == pytest.approx(0.8164965809)
    assert m["cohens_kappa"] == pytest.approx(0.6875)


def test_tie_calibration_picks_a_positive_epsilon_when_it_helps():
    # d = 0.1, 3, -0.2 ; human tie, A, tie -> eps 0.2 makes all three right (eps 0: only the A)
    assert tie_calibrated_accuracy([1.1, 4, 0.8], [1, 1, 1], ["tie", "A", "tie"]) == (1.0, pytest.approx(0.2))


def test_a_decided_margin_equal_to_a_tie_margin_becomes_a_tie():
    # d = 0.5 (human A), 0.5 (human tie), 2 (human A); candidates 0, 0.5, 2 (tie when |d| <= eps)
    #   eps 0   -> A A A     : A right, tie wrong, A right  -> 2/3   <- best, smallest
    #   eps 0.5 -> tie tie A : the A with |d| = 0.5 is now a tie (wrong), the tie right -> 2/3
    #   eps 2   -> all tie   : 1/3
    # counting |d| == eps as still decided (searchsorted side="left") would give 3/3 at 0.5
    assert tie_calibrated_accuracy([1.5, 1.5, 3.0], [1.0, 1.0, 1.0], ["A", "tie", "A"]) == (pytest.approx(2 / 3), 0.0)


def test_equally_good_epsilons_and_the_range_of_v_and_kappa():
    # the hand-computed example above: eps 0 and eps 0.5 both reach 4/5; V and kappa at each are
    # computed above (0.7906 / 0.7059 at 0, 0.8165 / 0.6875 at 0.5)
    m = preference_metrics(A, B, HUMAN)
    assert m["equally_good_epsilons"] == {"count": 2, "min": 0.0, "max": 0.5}
    assert m["cramers_v_range"] == [pytest.approx(0.7905694150), pytest.approx(0.8164965809)]
    assert m["cohens_kappa_range"] == [pytest.approx(0.6875), pytest.approx(0.7058823529)]
    assert "equally_good_epsilons" not in preference_metrics(A, B, HUMAN, epsilon=0.5)


def test_best_threshold_ties_go_to_the_lowest():
    # scores 1 2 3 4, labels F T F T; accuracy at the candidates:
    #   0 (all positive) 2/4 ; 1.5 -> {2,3,4} positive: 3/4 ; 2.5 -> {3,4}: 2/4 ; 3.5 -> {4}: 3/4 ; 5: 2/4
    # two maxima (1.5 and 3.5): the README promises the lowest
    best = best_threshold([1, 2, 3, 4], [False, True, False, True], by="accuracy")
    assert (best["threshold"], best["accuracy"]) == (1.5, 0.75)


def test_missing_and_synonym_preferences():
    assert as_preferences(["Both", "None", "neither", "b"]) == ["tie", "tie", "tie", "B"]
    with pytest.raises(ValueError, match=r"human\[1\]: the human choice is missing"):
        as_preferences(["A", None], "human")
    assert as_preferences(["win"], synonyms={"win": "A"}) == ["A"]
    with pytest.raises(ValueError, match="label is missing"):
        as_labels([True, None])


def test_undefined_association_is_none_not_nan():
    # metric always says tie (like BLEU = 0 for both candidates): V has one column -> N/A;
    # kappa: p_o = 1/2 (the human tie), p_e = (1/2)(1) = 1/2 -> 0
    m = preference_metrics([0.0, 0.0], [0.0, 0.0], ["A", "tie"])
    assert m["cramers_v"] is None
    assert m["cohens_kappa"] == pytest.approx(0.0)
    assert cohens_kappa(["A", "A"], ["A", "A"]) is None
    # perfect association on two categories
    assert cramers_v(["A", "B", "A"], ["B", "A", "B"]) == pytest.approx(1.0)


def test_kappa_and_v_of_a_2x2_table_by_hand():
    """cohens_kappa (scikit-learn) and cramers_v (scipy) on a 2x2 table written out.

    x: A A A B B B B B B B,  y: A A B A B B B B B B  ->  table (rows x, columns y) [[2, 1], [1, 6]], n 10
    kappa: p_o = 8/10, p_e = (3*3 + 7*7)/100 = 0.58 -> (0.8 - 0.58) / 0.42 = 0.523809...
    V: expected [[0.9, 2.1], [2.1, 4.9]]; chi2 = 1.21/0.9 + 1.21/2.1 + 1.21/2.1 + 1.21/4.9 = 2.744...
       V = sqrt(chi2 / 10) = 0.523809... (for a 2x2 table, V = |phi| = |ad - bc| / sqrt(row and column sums) = 11/21)
    """
    x = ["A"] * 3 + ["B"] * 7
    y = ["A", "A", "B", "A"] + ["B"] * 6
    assert cohens_kappa(x, y) == pytest.approx(0.22 / 0.42, abs=1e-12)
    chi2 = 1.21 / 0.9 + 2 * 1.21 / 2.1 + 1.21 / 4.9
    assert cramers_v(x, y) == pytest.approx((chi2 / 10) ** 0.5, abs=1e-12) == pytest.approx(11 / 21, abs=1e-12)
    # kappa against chance only: y flips x on every item -> p_o = 0, p_e = (3*7 + 7*3)/100 = 0.42 -> -0.42/0.58
    flipped = ["B" if v == "A" else "A" for v in x]
    assert cohens_kappa(x, flipped) == pytest.approx(-0.42 / 0.58, abs=1e-12)
    # a 2x3 table: rows A: [1, 1, 0], B: [0, 0, 2] -> chi2 = 4 (expected 0.5 0.5 1 | 0.5 0.5 1), V = sqrt(4 / 4) = 1
    assert cramers_v(["A", "A", "B", "B"], ["A", "tie", "B", "B"]) == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError, match="at least one item"):
        cohens_kappa([], [])
    with pytest.raises(ValueError, match="same length"):
        cramers_v(["A"], ["A", "B"])


@pytest.mark.parametrize("missing, call, what", [
    ("sklearn", lambda: cohens_kappa(["A", "B"], ["A", "A"]), "cohens_kappa"),
    ("scipy", lambda: cramers_v(["A", "B"], ["A", "B"]), "cramers_v"),
])
def test_kappa_and_v_without_the_eval_extra_say_what_to_install(monkeypatch, missing, call, what):
    import sys

    for name in [m for m in sys.modules if m == missing or m.startswith(missing + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, missing, None)
    with pytest.raises(ModuleNotFoundError, match=f"{what} needs {missing}, which is not installed: pip install"):
        call()


def test_eval_and_calibrate_without_the_eval_extra_stop_before_scoring(monkeypatch, tmp_path, capsys):
    """Without scikit-learn the metrics cannot be computed: the commands say which extra to install, exit 2, and
    load no judge (nothing is scored in vain)."""
    import sys

    import pluie_reward.tools.evaluation.cli as ecli

    def no_judge(args):
        raise AssertionError("the judge was loaded")

    monkeypatch.setattr(ecli, "judge_from_args", no_judge)
    for name in [m for m in sys.modules if m == "sklearn" or m.startswith("sklearn.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "sklearn", None)
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps({"source": "a", "hypothesis": "b", "label": True, "out": {"logratio": 1.0}}) + "\n")
    assert main(["eval", "classification", "-i", str(data), "--baselines", "none", "--no-progress"]) == 2
    assert main(["calibrate", "-i", str(data), "--score-column", "out.logratio", "-o", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err.splitlines()
    want = 'this command needs sklearn, which is not installed: pip install "pluie-reward[eval]"'
    assert err == [f"pluie-reward eval: error: {want}", f"pluie-reward calibrate: error: {want}"], err
    assert not (tmp_path / "c.json").exists()
    # PARAPHRASUS counts error rates, which need neither library: its own checks speak
    assert main(["eval", "paraphrasus", "--data-dir", str(tmp_path / "missing")]) == 2
    assert "no PARAPHRASUS data" in capsys.readouterr().err


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="NaN/infinite"):
        as_scores([1.0, float("nan")])
    with pytest.raises(ValueError, match="not a binary label"):
        as_labels(["maybe"])
    with pytest.raises(ValueError, match="A, B or tie"):
        as_preferences(["C"])
    with pytest.raises(ValueError, match="same length"):
        classification_metrics([1.0, 2.0], [True])
    with pytest.raises(ValueError, match="epsilon"):
        preference_metrics(A, B, HUMAN, epsilon=-1.0)
    with pytest.raises(ValueError, match="by must be"):
        best_threshold([1.0], [True], by="auc")


# ---------------------------------------------------------------------------------------------
def test_baselines_hand_computed():
    # kitten -> sitting: 3 edits, longer string 7 characters -> 1 - 3/7
    assert bl.levenshtein_similarity("kitten", "sitting") == pytest.approx(4 / 7)
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance("flaw", "lawn") == 2
    assert bl.levenshtein_similarity("", "") == 1.0
    assert bl.bleu("the cat sat on the mat", "the cat sat on the mat") == pytest.approx(1.0)
    assert bl.bleu("the cat sat on the mat", "dogs bark loudly") == pytest.approx(0.0)
    assert bl.parse_baselines("none") == [] and "levenshtein" in bl.parse_baselines("all")
    with pytest.raises(ValueError, match="unknown baseline"):
        bl.parse_baselines("rouge")


def test_embedding_baseline_when_installed():
    pytest.importorskip(bl.EMBEDDING_PACKAGE)
    same, other = bl.embedding_cosine(["A cat sleeps on the mat.", "A cat sleeps on the mat."],
                                      ["A cat sleeps on the mat.", "Stock markets fell sharply today."])
    assert same == pytest.approx(1.0, abs=1e-4)
    assert other < 0.5


# ---------------------------------------------------------------------------------------------
def test_plots_are_written(tmp_path):
    curves = plot_threshold_curves(SCORES, LABELS, tmp_path / "a" / "curves.png", title="t")
    hist = plot_score_histograms(SCORES, LABELS, tmp_path / "hist.png", label_names=("no", "yes"))
    scatter = plot_edit_distance(SCORES, LABELS, [0.1, 0.5, 0.2, 0.9, 0.3, 0.4], tmp_path / "ed.png")
    bins = plot_sts_bins([0.5, 1.5, 4.5, 5.0], [False, True, True, True], tmp_path / "sts.png", human=([4.5, 5.0], [False, True]))
    errors = plot_error_rates({"judge": {"MRPC": 0.5, "overall": 0.4}, "peer": {"MRPC": 0.24, "STS": 0.1}}, tmp_path / "err.png")
    for path in (curves, hist, scatter, bins, errors):
        data = path.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert plot_facts(errors)["rows"] == ["MRPC", "overall", "STS"]  # the judge's rows, then those only a peer has


def test_sts_bins_write_share_and_count_above_each_bar(tmp_path, monkeypatch):
    from pluie_reward.tools.evaluation import plots

    drawn = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda figure, path, facts=None, **kw: drawn.append(kw["ax"]) or save(figure, path, facts, **kw))
    plot_sts_bins([0.5, 1.5, 4.5, 5.0], [False, True, True, True], tmp_path / "sts.png", human=([4.5, 5.0], [False, True]))
    # judge: 0-1 holds 0.5 (no), 1-2 holds 1.5 (yes), 4-5 holds 4.5 and 5.0 (yes); annotators: 4-5 holds one yes of two
    assert [t.get_text() for t in drawn[0].texts] == ["0%\nn=1", "100%\nn=1", "–", "–", "100%\nn=2", "–", "–", "–", "–", "50%\nn=2"]


def test_plot_marks_the_tables_best_threshold_on_a_plateau(tmp_path):
    # F1 at the candidates of scores 1..6 / labels F T F T T F: a plateau the table resolves to its
    # lowest threshold; the plot must mark that same threshold (not another point of the plateau)
    scores, labels = [1, 2, 3, 4, 5, 6], [False, True, False, True, True, False]
    table = classification_report(scores, labels)["best_f1"]
    facts = plot_facts(plot_threshold_curves(scores, labels, tmp_path / "c.png"))
    assert facts["best_f1_threshold"] == table["threshold"] and facts["best_f1"] == pytest.approx(table["f1"])
    # the x-range is the scores' range (and the natural threshold), padded by 3 %, not by +-1
    facts = plot_facts(plot_threshold_curves([0.2, 0.4, 0.9], [False, True, True], tmp_path / "d.png", natural_threshold=None))
    assert facts["xlim"] == [pytest.approx(0.2 - 0.021), pytest.approx(0.9 + 0.021)]


def test_histograms_have_integer_counts_and_few_bins_for_few_items(tmp_path):
    facts = plot_facts(plot_score_histograms([0.1, 0.2, 0.25, 3.0], [True, False, True, True], tmp_path / "h.png"))
    assert facts["bins"] == 5 and all(t == int(t) for t in facts["yticks"])
    # 5 bins of width 0.58 from 0.1: the negative 0.2 in the first; the positives 0.1 and 0.25 there, 3.0 in the last
    assert facts["counts"] == [[1, 0, 0, 0, 0], [2, 0, 0, 0, 1]]
    # a single-label set (PARAPHRASUS Minimize!/Maximize!) is drawn too
    assert plot_facts(plot_score_histograms([-1.0, 0.5], [False, False], tmp_path / "one.png"))["counts"] == [[1, 0, 0, 0, 1]]


def test_sts_bin_shares_hand_computed():
    # bins 0-1: 0.2 (no), 0.9 (yes) -> 1/2 ; 1-2: none ; 4-5: 4.0 (yes), 5.0 (yes) -> 2/2
    shares = sts_bin_shares([0.2, 0.9, 4.0, 5.0], [False, True, True, True])
    assert shares == [("0-1", 2, 0.5), ("1-2", 0, None), ("2-3", 0, None), ("3-4", 0, None), ("4-5", 2, 1.0)]


def test_evaluate_tasks_score_through_the_judge(tiny_judge, tmp_path):
    src = ["The cat sleeps.", "The dog barks.", "A man walks.", "Rain falls."]
    hyp = ["A cat is asleep.", "The dog is silent.", "A man is walking.", "The sun shines."]
    labels = [True, False, True, False]
    r = evaluate_classification(tiny_judge, {"source": src, "hypothesis": hyp}, labels, plots_dir=tmp_path, progress=False)
    direct = tiny_judge.score("para-fs", source=src, hypothesis=hyp)
    assert r["scores"]["PLUIE"] == pytest.approx(direct)
    assert r["scores"]["levenshtein"] == pytest.approx([bl.levenshtein_similarity(s, h) for s, h in zip(src, hyp)])
    expected_acc = sum((s > 0) == y for s, y in zip(direct, labels)) / 4
    assert r["metrics"]["PLUIE"]["natural"]["accuracy"] == pytest.approx(expected_acc)
    # 3 rows x (curves, histogram, edit distance) + the reliability diagram of PLUIE (a Yes/No row)
    assert len(r["plots"]) == 10 and all((tmp_path / p).exists() for p in r["plots"])

    p = evaluate_preference(tiny_judge, {"source": src}, hyp, src[::-1], ["A", "B", "tie", "A"], progress=False)
    assert p["scores"]["PLUIE"]["A"] == pytest.approx(direct)
    assert p["scores"]["PLUIE"]["B"] == pytest.approx(tiny_judge.score(source=src, hypothesis=src[::-1]))
    # the baselines compare each candidate with the source: A's and B's, not the other way round
    assert p["scores"]["levenshtein"]["A"] == pytest.approx([bl.levenshtein_similarity(s, h) for s, h in zip(src, hyp)])
    assert p["scores"]["levenshtein"]["B"] == pytest.approx([bl.levenshtein_similarity(s, h) for s, h in zip(src, src[::-1])])


# ---------------------------------------------------------------------------------------------
# PARAPHRASUS protocol (counts from the data folder's README)
def _raw(name):
    return json.loads(shared_path(f"data/paraphrasus/{name}").read_text())


def test_paraphrasus_pair_selection_follows_the_readme():
    paraphrasus = shared_path("data/paraphrasus")
    pairs = load_pairs(paraphrasus)
    counts = {k: len(v) for k, v in pairs.items()}
    assert counts["MRPC"] == 1725 and counts["STS-H"] == 338 and counts["STS"] == 706
    assert counts["SICK"] == 2305 and counts["TRUE"] == 167 and counts["SIMP"] == 600
    assert counts["SNLI"] == len(_raw("stannlp-snli-pre-hyp.json")) + len(_raw("stannlp-snli-hyp-pre.json"))
    assert counts["ANLI"] == 2 * 798
    sts = _raw("stsbenchmark-test-sts.json")
    assert all("label" in sts[p.pair_id] and p.expected == sts[p.pair_id]["label"] for p in pairs["STS-H"])
    assert all(0 <= sts[p.pair_id]["score"] < 3 and not p.expected for p in pairs["STS"])
    sick = _raw("sickr-sts.json")
    assert all(1 <= sick[p.pair_id]["score"] < 3 and not p.expected for p in pairs["SICK"])
    assert all(p.expected for p in pairs["TRUE"] + pairs["SIMP"])
    assert not any(p.expected for p in pairs["SNLI"] + pairs["ANLI"])
    mrpc = _raw("ms-mrpc.json")
    assert sum(p.expected for p in pairs["MRPC"]) == sum(e["label"] for e in mrpc.values())


def test_paraphrasus_limit_keeps_both_directions():
    paraphrasus = shared_path("data/paraphrasus")
    pairs = load_pairs(paraphrasus, limit=5, seed=1)
    assert all(len(v) == 5 for v in pairs.values())
    for name in ("SNLI", "ANLI"):
        files = [p.file for p in pairs[name]]
        assert files.count(files[0]) == 3 and len(set(files)) == 2  # 5 shared as 3 + 2
    with pytest.raises(ValueError, match="unknown PARAPHRASUS dataset"):
        load_pairs(paraphrasus, datasets=["PAWS"])
    with pytest.raises(ValueError, match="PAWSX: .* lacks paws-x-test.json"):  # a dataset of the benchmark, not in the folder
        load_pairs(paraphrasus, datasets=["PAWSX"])


def test_summary_hand_computed():
    # Classify: MRPC 1/4, STS-H 1/2 -> 0.375 ; Minimize: SNLI 0/5 -> 0 ; Maximize: TRUE 2/2 -> 1
    # overall (0.375 + 0 + 1) / 3 = 0.458333...
    s = summarise({"MRPC": (1, 4), "STS-H": (1, 2), "SNLI": (0, 5), "TRUE": (2, 2)})
    assert s["challenges"] == {"Classify!": 0.375, "Minimize!": 0.0, "Maximize!": 1.0}
    assert s["overall"] == pytest.approx(1.375 / 3)


def test_partial_run_note():
    from pluie_reward.tools.evaluation.paraphrasus import partial_note

    assert partial_note({"n": 2, "planned": 6}, "pairs") == " PARTIAL RUN: 2 of 6 pairs scored so far."
    assert partial_note({"n": 2, "planned": 6}) == " PARTIAL RUN: 2 of 6 items scored so far."
    assert partial_note({"n": 6, "planned": 6}) == "" and partial_note({"n": 6}) == ""  # runs saved before "planned"


def test_peer_figures_are_read_as_fractions():
    paraphrasus = shared_path("data/paraphrasus")
    peers = peer_results(paraphrasus, "llama3")
    assert peers["llama_3_8b_ins_q4_k_m"]["MRPC"] == pytest.approx(0.241)
    assert peers["llama_3_3_70b_ins_q8"]["averages"]["Overall Average"] == pytest.approx(0.158)


def test_paraphrasus_runner_with_a_tiny_judge(tiny_judge):
    paraphrasus = shared_path("data/paraphrasus")
    results = run_paraphrasus(tiny_judge, paraphrasus, limit=3, progress=False, keep_pairs=True, peers="llama3")
    pairs = load_pairs(paraphrasus, limit=3)
    for name, items in pairs.items():
        # independent recomputation: score each pair as (source=sentence1, hypothesis=sentence2)
        scores = tiny_judge.score("para-fs", source=[p.sentence1 for p in items], hypothesis=[p.sentence2 for p in items])
        wrong = sum((s > 0) != p.expected for s, p in zip(scores, items))
        assert results["datasets"][name]["errors"] == wrong
        assert results["datasets"][name]["error_rate"] == pytest.approx(wrong / 3)
    rates = {k: v["error_rate"] for k, v in results["datasets"].items()}
    classify = (rates["MRPC"] + rates["STS-H"]) / 2
    minimize = (rates["SNLI"] + rates["ANLI"] + rates["STS"] + rates["SICK"]) / 4
    maximize = (rates["TRUE"] + rates["SIMP"]) / 2
    assert results["overall"] == pytest.approx((classify + minimize + maximize) / 3)
    # the Llama 3 8B means over the same datasets: Classify (24.1 + 55.6) / 2 = 39.85 %
    assert results["peers"]["llama_3_8b_ins_q4_k_m"]["challenges_same_datasets"]["Classify!"] == pytest.approx(0.3985)
    table = markdown_report(results)
    assert "| Classify! | MRPC | 3 |" in table and "24.1%" in table and "**overall**" in table


# ---------------------------------------------------------------------------------------------
@pytest.fixture
def cli_tiny_judge(monkeypatch, tiny_judge):
    import pluie_reward.tools.evaluation.cli as ecli

    monkeypatch.setattr(ecli, "judge_from_args", lambda args: tiny_judge)
    return tiny_judge


def test_cli_classification_and_preference(cli_tiny_judge, tmp_path, capsys):
    rows = [
        {"src": "The cat sleeps.", "hypothesis": "A cat is asleep.", "label": True, "b": "Dogs bark.", "human": "A"},
        {"src": "The dog barks.", "hypothesis": "Cats sleep.", "label": False, "b": "A dog barks.", "human": "B"},
        {"src": "Rain falls.", "hypothesis": "It rains.", "label": "yes", "b": "It is raining.", "human": "tie"},
    ]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "cls"
    code = main(["eval", "classification", "-i", str(data), "--column", "source=src", "-o", str(out), "--plots", "--no-progress"])
    assert code == 0
    saved = json.loads((out / "results.json").read_text())
    assert saved["n"] == 3 and saved["positives"] == 2 and set(saved["metrics"]) == {"PLUIE", "levenshtein", "bleu"}
    assert (out / "results.md").read_text().startswith("3 pairs")
    assert (out / "plots" / "PLUIE_thresholds.png").exists()
    assert "| PLUIE | tiny-random (this run) | natural threshold | 0.00 |" in capsys.readouterr().out

    code = main(["eval", "preference", "-i", str(data), "--column", "source=src", "--a-column", "hypothesis",
                 "--baselines", "none", "--no-progress", "-o", str(tmp_path / "pref")])
    assert code == 0
    saved = json.loads((tmp_path / "pref" / "results.json").read_text())
    assert saved["metrics"]["PLUIE"]["human_counts"] == {"A": 1, "B": 1, "tie": 1}
    # CSV input: labels arrive as strings
    csv_path = tmp_path / "pairs.csv"
    csv_path.write_text("source,hypothesis,label\nThe cat sleeps.,A cat is asleep.,True\nThe dog barks.,Cats sleep.,False\n")
    assert main(["eval", "classification", "-i", str(csv_path), "--baselines", "none", "--no-progress"]) == 0
    assert "2 pairs, 1 positive" in capsys.readouterr().out
    # a missing column is a usage error (exit 2) that names the columns
    assert main(["eval", "classification", "-i", str(data), "--no-progress"]) == 2
    assert "no column(s) ['source']" in capsys.readouterr().err


def test_cli_paraphrasus(cli_tiny_judge, tmp_path, capsys):
    paraphrasus = shared_path("data/paraphrasus")
    out = tmp_path / "para"
    code = main(["eval", "paraphrasus", "--data-dir", str(paraphrasus), "--limit", "2", "--datasets", "MRPC,SNLI",
                 "--peers", "llama3", "--plots", "-o", str(out), "--no-progress"])
    assert code == 0
    saved = json.loads((out / "results.json").read_text())
    assert set(saved["datasets"]) == {"MRPC", "SNLI"} and saved["limit_per_dataset"] == 2
    assert (out / "plots" / "SNLI_histogram.png").exists()
    for name in ("MRPC_thresholds.png", "edit_distance.png", "error_rates.png"):
        assert (out / "plots" / name).exists(), name
    assert (out / "scores.jsonl").read_text().count("\n") == 4  # saved as it went
    printed = capsys.readouterr().out
    assert "llama_3_8b_ins_q4_k_m" in printed and "| Minimize! | SNLI | 2 |" in printed
    assert "pairs" not in saved and saved["plots"][-1] == str(out / "plots" / "error_rates.png")  # pairs: --save-pairs
    assert main(["eval", "paraphrasus", "--data-dir", str(paraphrasus), "--limit", "2", "--datasets", "MRPC,SNLI",
                 "--peers", "llama3", "-o", str(out), "--no-progress", "--save-pairs"]) == 0  # resumed: scored already
    kept = json.loads((out / "results.json").read_text())["pairs"]
    expected = load_pairs(paraphrasus, datasets=["MRPC", "SNLI"], limit=2)
    assert {name: [p["pair_id"] for p in pairs] for name, pairs in kept.items()} == \
        {name: [p.pair_id for p in pairs] for name, pairs in expected.items()}
    assert main(["eval", "paraphrasus", "--data-dir", str(tmp_path), "--no-progress"]) == 2


def test_roc_auc_by_hand_and_against_scikit_learn():
    import numpy as np

    from pluie_reward.tools.evaluation.metrics import roc_auc

    sklearn = pytest.importorskip("sklearn.metrics")  # roc_auc calls it (the eval extra)

    # positives 0.35, 0.8 vs negatives 0.1, 0.4: pairs won 1 + 2 of 4
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == 0.75
    assert roc_auc([2, 1], ["yes", "no"]) == 1.0 and roc_auc([1, 2], [True, False]) == 0.0
    # positives 1, 2 vs negatives 1, 0: (1, 1) a tie counts one half, the other three pairs are won: 3.5 of 4
    assert roc_auc([1, 1, 2, 0], [True, False, True, False]) == 0.875
    # 3 positives x 2 negatives, by hand: 3 > 1, 3 > 2, 2 = 2 (half), 2 > 1, 0 < both: 3.5 of 6
    assert roc_auc([3, 2, 0, 1, 2], [1, 1, 1, 0, 0]) == pytest.approx(3.5 / 6, abs=1e-15)
    with pytest.raises(ValueError, match="both positive and negative"):
        roc_auc([1, 2], [True, True])
    rng = np.random.default_rng(0)
    scores, labels = np.round(rng.normal(size=300), 1), rng.random(300) < 0.4  # rounded: many ties
    assert roc_auc(scores, labels) == pytest.approx(sklearn.roc_auc_score(labels, scores), abs=1e-12)


def test_pearson_of_a_constant_series_is_undefined_even_when_its_float_std_is_not_zero():
    """``np.std([0.1] * 3)`` is 1.4e-17, not 0: Pearson's r must still say undefined (it said 0.0)."""
    import numpy as np

    from pluie_reward.tools.evaluation.plots import pearson

    stats = pytest.importorskip("scipy.stats")
    assert pearson([0.1] * 3, [1, 2, 3]) is None and pearson([1, 2, 3], [0.1] * 3) is None and pearson([1], [2]) is None
    x, y = np.array([0.2, 1.5, 0.7, 3.1]), np.array([1.0, 2.0, 0.5, 4.0])
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0])


def test_the_scoring_loop_prints_the_tools_progress_line_per_chunk(tiny_judge, capsys):
    """One loop scores for eval, calibrate, tune's teacher and the probe: chunks of ``chunk_size`` items, the
    progress line (one per tenth of the work off a terminal, never the last twice) moving per chunk."""
    from pluie_reward.tools.evaluation.scoring import score_in_chunks

    sources = ["The cat sleeps.", "Prices rose.", "It rained."]
    hypotheses = ["A cat is asleep.", "Prices fell.", "Rain fell."]
    scores = score_in_chunks(tiny_judge, "para-fs", {"source": sources, "hypothesis": hypotheses}, 3, chunk_size=2,
                             desc="teacher", units="pairs")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("teacher")]
    assert lines == ["teacher: 2/3 pairs (66%)", "teacher: 3/3 pairs (100%)"]
    want = [tiny_judge.score("para-fs", source=[s], hypothesis=[h], use_cache=False)[0] for s, h in zip(sources, hypotheses)]
    assert scores == pytest.approx(want, abs=1e-4)
    score_in_chunks(tiny_judge, "para-fs", {"source": sources, "hypothesis": hypotheses}, 3, progress=False)
    assert capsys.readouterr().err == ""


# shapes the round-2 rewrite must keep ---------------------------------------------------------
def test_binary_label_reads_whole_floats_and_rejects_others():
    from pluie_reward.tools.evaluation.metrics import binary_label

    assert (binary_label(1.0), binary_label(0.0), binary_label(1), binary_label(False)) == (True, False, True, False)
    for bad in (2, 0.5, -1.0):
        with pytest.raises(ValueError, match="is not a binary label"):
            binary_label(bad)


def test_summarise_refuses_a_dataset_without_pairs():
    with pytest.raises(ValueError, match="dataset SNLI has no pairs"):
        summarise({"MRPC": (1, 2), "SNLI": (0, 0)})


def _scored(dataset, score, expected, i):
    return {"dataset": dataset, "file": f"{dataset}.json", "pair_id": str(i), "expected": expected, "scores": {"PLUIE": score}}


def test_paraphrasus_report_rows_follow_the_benchmark_order():
    from pluie_reward.tools.evaluation.paraphrasus import paraphrasus_results

    # lines arrive in another order than the benchmark's (MRPC, STS-H; SNLI, ..., SICK)
    lines = [_scored("SICK", 1.0, False, 0), _scored("STS-H", 1.0, True, 1), _scored("SNLI", -1.0, False, 2),
             _scored("MRPC", -1.0, True, 3)]
    results = paraphrasus_results({"judge": "j", "template": "t", "threshold": 0.0, "n": 4, "not_in_data_folder": []}, lines)
    assert list(results["datasets"]) == ["MRPC", "STS-H", "SNLI", "SICK"]
    rows = [line.split(" | ")[1] for line in markdown_report(results).splitlines() if line.startswith("| ")][1:]
    assert rows == ["MRPC", "STS-H", "**mean**", "SNLI", "SICK", "**mean**", "mean of challenge means"]
    # by hand: MRPC wrong (-1 <= 0, expected True), STS-H right; SNLI right, SICK wrong
    assert results["challenges"] == {"Classify!": 0.5, "Minimize!": 0.5}


def test_grouped_preference_table_puts_plain_and_gold_rows_in_their_columns():
    from pluie_reward.tools.evaluation.tables import preference_markdown

    plain = preference_metrics([1.0, -1.0], [0.0, 0.0], ["A", "A"])  # accuracy 1/2 by hand
    gold = preference_metrics([1.0, 1.0], [0.0, 0.0], ["A", "A"])  # accuracy 1
    results = {"n": 2, "judge": "j", "template": "rev", "metrics": {"Rev-PLUIE": plain, "Rev-PLUIE w.g.": gold},
               "conditions": [{"name": "Rev-PLUIE", "template": "rev", "row": "Rev-PLUIE", "variant": ""},
                              {"name": "Rev-PLUIE w.g.", "template": "rev", "row": "Rev-PLUIE", "variant": "w.g."}],
               "paper": {"caption": "c", "reference": "r",
                         "rows": [{"metric": "Rev-PLUIE", "judge": "P", "pairwise_accuracy": 0.61, "cramers_v": 0.2,
                                   "cohens_kappa": 0.1, "with_gold": {"pairwise_accuracy": 0.62, "cramers_v": 0.3,
                                                                      "cohens_kappa": 0.15}}]}}
    text = preference_markdown(results)
    assert "| metric | judge | Pair acc. | Pair acc. w.g. | V | V w.g. | κ | κ w.g. |" in text
    assert "| Rev-PLUIE | j (this run) | 0.50 | 1.00 |" in text
    assert "| Rev-PLUIE | P (paper) | 0.61 | 0.62 | 0.20 | 0.30 | 0.10 | 0.15 |" in text


def test_baselines_all_leaves_out_those_not_installed(monkeypatch):
    monkeypatch.setattr(bl, "missing_baselines", lambda: {"embedding": "pip install it"})
    assert bl.parse_baselines("all") == ["levenshtein", "bleu"]
    monkeypatch.setattr(bl, "missing_baselines", lambda: {"bleu": "x", "embedding": "y"})
    assert bl.parse_baselines("all") == ["levenshtein"]
    assert bl.parse_baselines("none") == bl.parse_baselines("") == bl.parse_baselines(None) == []
