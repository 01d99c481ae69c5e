"""pluie_reward.integrations.data: scoring a datasets.Dataset with the judge, filtering, best-of-n selection."""

import math

import pytest
from datasets import Dataset

from pluie_reward.integrations.data import best_of_n, describe_pairs, filter_dataset, score_dataset

SOURCES = ["The cat sleeps.", "The cat sleeps.", "The dog barks at night.", "The dog barks at night.", "Paraphrase this."]
HYPOTHESES = ["A cat is sleeping.", "The dog barks.", "At night the dog barks.", "The cat sleeps.", "Yes"]
# what a copy-proof reward's judge reads (Task.read): "Yes" ends as its source does
READINGS = HYPOTHESES[:4] + ["Yes."]


def test_score_dataset_adds_columns_equal_to_direct_scoring(tiny_judge):
    ds = Dataset.from_dict({"src": SOURCES, "hypothesis": HYPOTHESES, "id": list(range(5))})
    scored = score_dataset(ds, tiny_judge, "para-fs", columns={"source": "src"}, batch_size=2, desc=None)
    assert scored.column_names == ["src", "hypothesis", "id", "pluie_logratio", "pluie_p_yes", "pluie_verdict",
                                   "pluie_novelty", "pluie_copy", "pluie_copy_proof"]
    expected = tiny_judge.score("para-fs", source=SOURCES, hypothesis=READINGS, use_cache=False)
    assert scored["pluie_logratio"] == pytest.approx(expected, abs=1e-4)
    # independent reference for the derived columns: the logistic function and the sign
    assert scored["pluie_p_yes"] == pytest.approx([1 / (1 + math.exp(-s)) for s in expected], abs=1e-4)
    assert scored["pluie_verdict"] == [s > 0 for s in expected]
    # copy-proof columns, by hand (words): "a cat is sleeping" vs "the cat sleeps": the -> a, sleeps -> is,
    # + sleeping: 3 of 4; "the dog barks" vs "the cat sleeps": 2 of 3; "at night" moved to the front: 4 of 5;
    # "the cat sleeps" vs "the dog barks at night": 2 changed, 2 dropped, of 5; "yes" vs "paraphrase this": 2 of 2
    novelty = [3 / 4, 2 / 3, 4 / 5, 4 / 5, 1.0]
    assert scored["pluie_novelty"] == pytest.approx(novelty)
    assert scored["pluie_copy"] == [False] * 5
    # the paraphrase length floor (0.67 of the source's words): words 4/3, 3/3, 5/5, 3/5, 1/2
    length = [1.0, 1.0, 1.0, min(1.0, 3 / 5 / 0.67), 1 / 2 / 0.67]
    assert scored["pluie_copy_proof"] == pytest.approx(
        [1 / (1 + math.exp(-s)) * min(1.0, v / 0.3) * f for s, v, f in zip(expected, novelty, length)], abs=1e-4)
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
    assert "j_copy_proof" in scored.column_names
    with pytest.raises(ValueError, match="unknown task 'summary'"):
        score_dataset(ds, tiny_judge, task="summary")
    with pytest.raises(ValueError, match="reads the field 'original', which template 'para-fs' does not have"):
        score_dataset(ds, tiny_judge, task="revision")


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
    scores = tiny_judge.score(source=SOURCES, hypothesis=READINGS)  # para-fs: the paraphrase task's readings
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
    pluie = {"score_column": "pluie_logratio"}
    # k=1: s1 -> c (2.0; ties with d, c comes first), s2 -> e (-0.5 > -1.0), s3 -> g (-2.0 > -3.0)
    assert best_of_n(ds, **pluie)["cand"] == ["c", "e", "g"]
    # k=2 with threshold 0: s1 -> c, d (0.5 is third); s2 and s3 have nothing above 0 and disappear
    assert best_of_n(ds, k=2, threshold=0.0, **pluie)["cand"] == ["c", "d"]
    # k=3, threshold -1.5: s1 -> c, d, a ; s2 -> e (-0.5; -1.0 is above -1.5 too) -> e, b ; s3 -> none
    assert best_of_n(ds, k=3, threshold=-1.5, **pluie)["cand"] == ["c", "d", "a", "e", "b"]
    # a score exactly at the threshold is not above it: k=3, threshold 0.5 keeps c and d, not a (0.5)
    assert best_of_n(ds, k=3, threshold=0.5, **pluie)["cand"] == ["c", "d"]


def test_best_of_n_prefers_paraphrases_to_copies_by_default():
    """The copy has the higher PLUIE (as on the default judge: copies +4..+5, paraphrases ~+3.5); the
    default ranking (the copy-proof score) keeps the paraphrase, and describe_pairs reports it."""
    sources = ["The cat sleeps on the mat."] * 3
    candidates = ["The cat sleeps on the mat.", "The cat sleeps on the mat. The cat sleeps on the mat.",
                  "A cat is asleep on the mat."]
    logratio = [4.8, 5.5, 3.5]
    p_yes = [1 / (1 + math.exp(-x)) for x in logratio]
    ds = Dataset.from_dict({"source": sources, "hypothesis": candidates, "pluie_logratio": logratio,
                            "pluie_p_yes": p_yes, "pluie_verdict": [True] * 3})
    from pluie_reward.integrations.data import _copy_proof_columns
    from pluie_reward.integrations.novelty import TASKS

    columns = _copy_proof_columns(TASKS["paraphrase"], sources, candidates, p_yes, "pluie_", True)
    ds = ds.add_column("pluie_novelty", columns["pluie_novelty"]).add_column("pluie_copy", columns["pluie_copy"])
    ds = ds.add_column("pluie_copy_proof", columns["pluie_copy_proof"])
    assert best_of_n(ds, score_column="pluie_logratio")["hypothesis"] == [candidates[1]]  # PLUIE keeps a copy
    kept = best_of_n(ds)
    assert kept["hypothesis"] == [candidates[2]]
    # "a cat is asleep on the mat" vs "the cat sleeps on the mat": the -> a, sleeps -> is, + asleep: 3/7
    assert describe_pairs(kept) == {"pairs": 1, "pluie": 3.5, "accept_rate": 1.0, "copy_rate": 0.0,
                                    "novelty": pytest.approx(3 / 7), "copy_proof": pytest.approx(p_yes[2])}
    assert describe_pairs(best_of_n(ds, score_column="pluie_logratio"))["copy_rate"] == 1.0
    with pytest.raises(ValueError, match="score_column='pluie_logratio' ranks by PLUIE"):
        best_of_n(ds.remove_columns("pluie_copy_proof"))


def test_best_of_n_bad_input():
    ds = Dataset.from_dict({"source": ["s"], "pluie_copy_proof": [float("nan")]})
    with pytest.raises(ValueError, match="finite score"):
        best_of_n(ds)
    with pytest.raises(ValueError, match="score it first"):
        best_of_n(Dataset.from_dict({"source": ["s"]}))
    with pytest.raises(ValueError, match="group by"):
        best_of_n(ds, group_by="prompt")
    with pytest.raises(ValueError, match="k must be"):
        best_of_n(ds, k=0)


def test_score_dataset_names_the_absolute_row_of_a_bad_item(tiny_judge):
    """A None at row 13 of a dataset judged 8 rows at a time is row 13, not item 5 of its batch."""
    hypotheses = [f"Candidate number {i}." for i in range(16)]
    hypotheses[13] = None
    ds = Dataset.from_dict({"source": ["The cat sleeps."] * 16, "hypothesis": hypotheses})
    with pytest.raises(TypeError, match=r"field 'hypothesis', row 13: expected a string, got NoneType") as info:
        score_dataset(ds, tiny_judge, "para-fs", batch_size=8, desc=None)
    assert "item 5" not in str(info.value)


def test_score_dataset_refuses_to_overwrite_score_columns_unless_asked(tiny_judge):
    ds = Dataset.from_dict({"source": SOURCES[:2], "hypothesis": HYPOTHESES[:2], "pluie_logratio": [9.0, 9.0]})
    with pytest.raises(ValueError, match=r"already has the column\(s\) \['pluie_logratio'\].*overwrite=True.*prefix="):
        score_dataset(ds, tiny_judge, desc=None)
    # a copy-proof column counts too (the template's task adds it)
    with pytest.raises(ValueError, match=r"\['pluie_copy'\]"):
        score_dataset(Dataset.from_dict({"source": ["a"], "hypothesis": ["b"], "pluie_copy": [True]}), tiny_judge, desc=None)
    scored = score_dataset(ds, tiny_judge, overwrite=True, desc=None)
    assert scored["pluie_logratio"] == pytest.approx(tiny_judge.score(source=SOURCES[:2], hypothesis=HYPOTHESES[:2]), abs=1e-4)
    assert scored.column_names.count("pluie_logratio") == 1
    # another prefix leaves the old column alone
    assert score_dataset(ds, tiny_judge, prefix="j_", desc=None)["pluie_logratio"] == [9.0, 9.0]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_thresholds_must_be_finite(bad, tiny_judge):
    """A nan threshold would drop every row (nothing is > nan) without a word: refused, as is an infinite one."""
    ds = Dataset.from_dict({"source": ["s", "s"], "hypothesis": ["a", "b"], "pluie_logratio": [1.0, -1.0],
                            "pluie_copy_proof": [0.9, 0.1]})
    with pytest.raises(ValueError, match="threshold must be a finite number"):
        filter_dataset(ds, threshold=bad)
    with pytest.raises(ValueError, match="threshold must be a finite number"):
        best_of_n(ds, threshold=bad)
    with pytest.raises(ValueError, match="threshold must be a finite number"):
        score_dataset(ds.remove_columns(["pluie_logratio", "pluie_copy_proof"]), tiny_judge, threshold=bad, desc=None)


def test_best_of_n_novel_keeps_the_most_novel_accepted_candidate_never_a_copy():
    """select="novel": the floor (and the judge's verdict, the copy flag) gate, novelty chooses, the score breaks ties."""
    ds = Dataset.from_dict({
        "source":           ["s1", "s1", "s1", "s1", "s1", "s2", "s2", "s3"],
        "hypothesis":       ["a",  "b",  "c",  "d",  "e",  "f",  "g",  "h"],
        "pluie_copy_proof": [0.90, 0.75, 0.60, 0.95, 0.80, 0.85, 0.72, 0.50],
        "pluie_novelty":    [0.20, 0.60, 0.80, 0.90, 0.60, 0.70, 0.10, 0.90],
        "pluie_verdict":    [True, True, True, True, True, False, True, True],
        "pluie_copy":       [False, False, False, True, False, False, False, False],
    })
    # by hand, floor 0.7: s1 -> a, b, d, e pass the floor; d is a copy; of a (0.2), b (0.6), e (0.6): b and e tie on
    # novelty, e scores higher -> e, then b. s2 -> f is rejected by the judge, g passes. s3 -> h is under the floor.
    assert best_of_n(ds, threshold=0.7, select="novel")["hypothesis"] == ["e", "g"]
    assert best_of_n(ds, threshold=0.7, select="novel", k=2)["hypothesis"] == ["e", "b", "g"]
    # floor 0.55: c (novelty 0.8) now passes and wins s1
    assert best_of_n(ds, threshold=0.55, select="novel")["hypothesis"] == ["c", "g"]
    # the default still ranks by the score alone (a real copy scores 0 there, so the floor drops it)
    assert best_of_n(ds, threshold=0.7)["hypothesis"] == ["d", "f"]
    # without the verdict and copy columns, the floor alone gates
    assert best_of_n(ds.remove_columns(["pluie_verdict", "pluie_copy"]), threshold=0.7, select="novel")["hypothesis"] == ["d", "f"]
    with pytest.raises(ValueError, match="pass threshold="):
        best_of_n(ds, select="novel")
    with pytest.raises(ValueError, match="reads the column 'pluie_novelty'"):
        best_of_n(ds.remove_columns("pluie_novelty"), threshold=0.7, select="novel")
    with pytest.raises(ValueError, match="select must be 'score' or 'novel'"):
        best_of_n(ds, threshold=0.7, select="novelty")


def test_best_of_n_novel_on_real_copy_proof_columns():
    """On the copy-proof columns of real candidates: the least-copying accepted paraphrase, never a copy."""
    from pluie_reward.integrations.data import _copy_proof_columns
    from pluie_reward.integrations.novelty import TASKS

    source = "The cat sleeps on the mat."
    candidates = ["The cat sleeps on the mat.", "The cat sleeps on the rug.", "On the mat, a cat is sleeping.", "A cat naps on a rug."]
    p_yes = [0.99, 0.95, 0.9, 0.8]
    columns = _copy_proof_columns(TASKS["paraphrase"], [source] * 4, candidates, p_yes, "pluie_", True)
    ds = Dataset.from_dict({"source": [source] * 4, "hypothesis": candidates, "pluie_verdict": [True] * 4, **columns})
    # by hand, words of the source: the cat sleeps on the mat (6); "the cat sleeps on the rug": 1 of 6 changed
    # (novelty 1/6, credit 0.556: 0.53 < 0.7); "on the mat a cat is sleeping": 7 words, edit distance 6 (insert "on the
    # mat", then the -> a, sleeps -> is, on -> sleeping, delete "the mat") -> 6/7; "a cat naps on a rug": the, sleeps,
    # the, mat -> a, naps, a, rug: 4 of 6
    assert columns["pluie_novelty"] == pytest.approx([0.0, 1 / 6, 6 / 7, 4 / 6])
    assert best_of_n(ds, threshold=0.7, select="novel")["hypothesis"] == [candidates[2]]
    assert best_of_n(ds, threshold=0.7)["hypothesis"] == [candidates[2]]  # p_yes 0.9 > 0.8: the score agrees here
    # floor 0: everything but the copy (score 0), by decreasing novelty 6/7, 4/6, 1/6
    assert best_of_n(ds, threshold=0.0, select="novel", k=4)["hypothesis"] == [candidates[2], candidates[3], candidates[1]]


def test_best_of_n_length_ratio_gates_in_both_modes():
    """length_ratio=(0.8, 1.5): words of the candidate over words of its source, counted by hand."""
    source = "The cat sleeps on the mat."  # 6 words
    candidates = ["A cat naps.",  # 3/6 = 0.5: too short
                  "On the mat, a cat is sleeping, which is a new idea for everyone.",  # 14/6 = 2.33: too long
                  "On the mat, a cat is sleeping.",  # 7/6
                  "A cat is asleep on the mat."]  # 7/6
    ds = Dataset.from_dict({"source": [source] * 4, "hypothesis": candidates, "pluie_copy_proof": [0.95, 0.9, 0.8, 0.85],
                            "pluie_novelty": [0.7, 0.9, 0.78, 0.38], "pluie_verdict": [True] * 4, "pluie_copy": [False] * 4})
    assert best_of_n(ds, threshold=0.7, select="novel")["hypothesis"] == [candidates[1]]  # the commentary is the most novel
    assert best_of_n(ds, threshold=0.7, select="novel", length_ratio=(0.8, 1.5))["hypothesis"] == [candidates[2]]
    assert best_of_n(ds, threshold=0.7, length_ratio=(0.8, 1.5))["hypothesis"] == [candidates[3]]  # by score
    assert best_of_n(ds, k=4, length_ratio=(0.5, 2.4))["hypothesis"] == [candidates[i] for i in (0, 1, 3, 2)]  # bounds included
    for bad in [(1.5, 0.8), (float("nan"), 1.0), (1.0,), "0.8,1.5"]:
        with pytest.raises(ValueError, match="length_ratio must be"):
            best_of_n(ds, length_ratio=bad)
    with pytest.raises(ValueError, match="pass text_column="):
        best_of_n(ds.rename_column("hypothesis", "text"), length_ratio=(0.8, 1.5))
