"""pluie_reward.integrations.data: scoring a datasets.Dataset with the judge, filtering, best-of-n selection."""

import math

import pytest
from datasets import Dataset

from pluie_reward.integrations.data import best_of_n, filter_dataset, score_dataset

SOURCES = ["The cat sleeps.", "The cat sleeps.", "The dog barks at night.", "The dog barks at night.", "Paraphrase this."]
HYPOTHESES = ["A cat is sleeping.", "The dog barks.", "At night the dog barks.", "The cat sleeps.", "Yes"]


def test_score_dataset_adds_columns_equal_to_direct_scoring(tiny_judge):
    ds = Dataset.from_dict({"src": SOURCES, "hypothesis": HYPOTHESES, "id": list(range(5))})
    scored = score_dataset(ds, tiny_judge, "para-fs", columns={"source": "src"}, batch_size=2, desc=None)
    assert scored.column_names == ["src", "hypothesis", "id", "pluie_logratio", "pluie_p_yes", "pluie_verdict"]
    expected = tiny_judge.score("para-fs", source=SOURCES, hypothesis=HYPOTHESES, use_cache=False)
    assert scored["pluie_logratio"] == pytest.approx(expected, abs=1e-4)
    # independent reference for the derived columns: the logistic function and the sign
    assert scored["pluie_p_yes"] == pytest.approx([1 / (1 + math.exp(-s)) for s in expected], abs=1e-4)
    assert scored["pluie_verdict"] == [s > 0 for s in expected]
    assert scored["id"] == [0, 1, 2, 3, 4]
    # the scores vary between items (the tiny judge is not constant), so the check above can fail
    assert max(expected) - min(expected) > 0.01


def test_score_dataset_threshold_and_prefix(tiny_judge):
    ds = Dataset.from_dict({"source": SOURCES, "hypothesis": HYPOTHESES})
    plain = tiny_judge.score(source=SOURCES, hypothesis=HYPOTHESES)
    cut = sorted(plain)[2]  # the middle score: 2 items are above it
    scored = score_dataset(ds, tiny_judge, threshold=cut, prefix="j_", desc=None)
    assert sum(scored["j_verdict"]) == 2
    assert "j_logratio" in scored.column_names and "pluie_logratio" not in scored.column_names


def test_score_dataset_missing_column_says_what_to_do(tiny_judge):
    ds = Dataset.from_dict({"text": ["a"], "hypothesis": ["b"]})
    with pytest.raises(ValueError, match=r"reads the column 'source', which is not in the dataset\. Available columns: \['hypothesis', 'text'\]\. Pass columns=\{'source': '<column>'\}"):
        score_dataset(ds, tiny_judge)
    with pytest.raises(KeyError):  # the same error as a TRL reward's for a missing column
        score_dataset(ds, tiny_judge)
    with pytest.raises(ValueError, match="'sentence' is not a field of template 'para-fs'"):
        score_dataset(ds, tiny_judge, columns={"sentence": "text"})


def test_filter_dataset_keeps_rows_above_threshold():
    ds = Dataset.from_dict({"x": ["a", "b", "c", "d"], "pluie_logratio": [1.5, -0.2, 0.0, 3.0]})
    # > 0 keeps 1.5 and 3.0 (0.0 is not above 0)
    assert filter_dataset(ds)["x"] == ["a", "d"]
    # > -1 keeps everything but nothing is below -1 -> all four
    assert filter_dataset(ds, threshold=-1.0)["x"] == ["a", "b", "c", "d"]


def test_filter_dataset_scores_first_when_given_a_judge(tiny_judge):
    ds = Dataset.from_dict({"source": SOURCES, "hypothesis": HYPOTHESES})
    scores = tiny_judge.score(source=SOURCES, hypothesis=HYPOTHESES)
    cut = sorted(scores)[1]
    kept = filter_dataset(ds, tiny_judge, threshold=cut, desc=None)
    assert kept["hypothesis"] == [h for h, s in zip(HYPOTHESES, scores) if s > cut]
    assert len(kept) == 3


def test_best_of_n_hand_computed():
    ds = Dataset.from_dict({
        "source": ["s1", "s2", "s1", "s1", "s2", "s3", "s3"],
        "cand":   ["a",  "b",  "c",  "d",  "e",  "f",  "g"],
        "pluie_logratio": [0.5, -1.0, 2.0, 2.0, -0.5, -3.0, -2.0],
    })
    # k=1: s1 -> c (2.0; ties with d, c comes first), s2 -> e (-0.5 > -1.0), s3 -> g (-2.0 > -3.0)
    assert best_of_n(ds)["cand"] == ["c", "e", "g"]
    # k=2 with threshold 0: s1 -> c, d (0.5 is third); s2 and s3 have nothing above 0 and disappear
    assert best_of_n(ds, k=2, threshold=0.0)["cand"] == ["c", "d"]
    # k=3, threshold -1.5: s1 -> c, d, a ; s2 -> e (-0.5; -1.0 is above -1.5 too) -> e, b ; s3 -> none
    assert best_of_n(ds, k=3, threshold=-1.5)["cand"] == ["c", "d", "a", "e", "b"]
    # a score exactly at the threshold is not above it: k=3, threshold 0.5 keeps c and d, not a (0.5)
    assert best_of_n(ds, k=3, threshold=0.5)["cand"] == ["c", "d"]


def test_best_of_n_bad_input():
    ds = Dataset.from_dict({"source": ["s"], "pluie_logratio": [float("nan")]})
    with pytest.raises(ValueError, match="finite score"):
        best_of_n(ds)
    with pytest.raises(ValueError, match="score it first"):
        best_of_n(Dataset.from_dict({"source": ["s"]}))
    with pytest.raises(ValueError, match="group by"):
        best_of_n(ds, group_by="prompt")
    with pytest.raises(ValueError, match="k must be"):
        best_of_n(ds, k=0)
