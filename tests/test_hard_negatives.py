"""Rule-made hard negatives (pluie_reward.tools.tune.hard_negatives) and their place in the default judge's build data."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from conftest import load_script
from pluie_reward.tools.tune.hard_negatives import (ADDED_CLAUSES, ADDED_SENTENCES, MEANING_RULES, MONTHS, RULES, WEEKDAYS,
                                                     flip, hard_negatives)


@pytest.mark.parametrize("text, want", [
    ("The museum will stay closed until the repairs are finished.", "The museum will not stay closed until the repairs are finished."),
    ("Prices have risen this year.", "Prices have not risen this year."),
    ("The shop did not open on Sunday.", "The shop did open on Sunday."),
    ("She isn't coming to the party.", "She is coming to the party."),
    ("He won't sign the contract.", "He will sign the contract."),
    ("They never eat meat.", "They eat meat."),
])
def test_negation_inserted_or_removed(text, want):
    assert flip(text, "negation") == want


@pytest.mark.parametrize("text", ["Can you open the window?", "I have the same problem.", "Dogs bark."])
def test_negation_leaves_questions_main_verb_have_and_plain_verbs_alone(text):
    assert flip(text, "negation") is None


@pytest.mark.parametrize("text, want", [
    ("The museum will stay closed until Monday.", "The museum will remain open until Monday."),
    ("Profits rose in the third quarter.", "Profits fell in the third quarter."),
    ("Open the door.", "Closed the door."),
])
def test_antonym_swapped(text, want):
    assert flip(text, "antonym") == want


def test_antonym_changes_exactly_one_word_of_several_candidates():
    text = "The early train was cheap."
    got = {flip(text, "antonym", random.Random(s)) for s in range(20)}
    assert got == {"The late train was cheap.", "The early train was expensive."}


@pytest.mark.parametrize("text, old", [
    ("The factory will hire 200 workers next year.", "200"),
    ("The report runs to 1,250 pages.", "1,250"),
    ("Inflation reached 6.1 percent.", "6.1"),
    ("The team has two coaches.", "two"),
])
def test_number_changed(text, old):
    for seed in range(10):
        got = flip(text, "number", random.Random(seed))
        before, after = text.split(old)
        assert got.startswith(before) and got.endswith(after), got
        new = got[len(before): len(got) - len(after)]
        assert new != old and new.strip() and " " not in new, got


def test_number_leaves_years_to_the_date_rule():
    assert flip("It was built in 1998.", "number") is None
    got = flip("It was built in 1998.", "date")
    assert got.startswith("It was built in ") and got[16:20] != "1998" and abs(int(got[16:20]) - 1998) <= 3


@pytest.mark.parametrize("text, pool", [("The shop opened on Monday.", WEEKDAYS), ("The vote is in March.", MONTHS)])
def test_date_changed(text, pool):
    for seed in range(10):
        got = flip(text, "date", random.Random(seed))
        word = got.split()[-1].rstrip(".")
        assert word in pool and word not in text and got.replace(word, "") == text.replace(text.split()[-1].rstrip("."), "")


def test_relative_day_changed():
    assert flip("He left yesterday.", "date") == "He left tomorrow."


def test_entity_swapped_for_another_of_the_same_kind():
    from pluie_reward.tools.tune.hard_negatives import ENTITIES

    for seed in range(10):
        got = flip("Talks between Microsoft and the union resumed in London.", "entity", random.Random(seed))
        words = got.rstrip(".").split()
        old = {"Microsoft", "London"} - set(words)
        new = set(words) - set("Talks between Microsoft and the union resumed in London".split())
        assert len(old) == 1 and len(new) == 1, got
        kind = "organisation" if old == {"Microsoft"} else "place"
        assert new.pop() in ENTITIES[kind]


@pytest.mark.parametrize("text, want", [
    ("The dog chased the cat.", "The cat chased the dog."),
    ("The company hired the young engineer last week.", "The young engineer hired the company last week."),
    ("Alice thanked Bob for the gift.", "Bob thanked Alice for the gift."),
    ("The bus goes from Boston to Chicago every day.", "The bus goes from Chicago to Boston every day."),
    ("Emma is taller than her brother.", "Her brother is taller than Emma."),
    ("Yesterday, Grace called David at noon.", "Yesterday, David called Grace at noon."),
])
def test_subject_and_object_swapped(text, want):
    assert flip(text, "swap") == want


@pytest.mark.parametrize("rule", MEANING_RULES)
def test_a_rule_with_nothing_to_edit_returns_none(rule):
    assert flip("Birds sing.", rule) is None


@pytest.mark.parametrize("text", ["The bakery sells vegan cakes.", "Prices rose in May!", "the shop is closed", "  It works.  "])
def test_addition_keeps_the_whole_sentence_and_adds_a_listed_clause_or_sentence(text):
    body = text.strip()
    stem, end = body.rstrip(".!?"), body[len(body.rstrip(".!?")):] or "."
    clauses = {stem + c + end for c in ADDED_CLAUSES}
    sentences = {stem + end + " " + a for a in ADDED_SENTENCES}
    seen = {flip(text, "addition", random.Random(seed)) for seed in range(40)}
    assert seen <= clauses | sentences
    assert seen & clauses and seen & sentences  # both kinds are drawn
    assert flip("", "addition") is None and flip(" ... ", "addition") is None  # nothing to add to


def test_unknown_rule_is_refused():
    with pytest.raises(ValueError, match="unknown hard-negative rule"):
        flip("The cat sleeps.", "sarcasm")


def test_hard_negatives_uses_every_rule_that_applies_and_is_seeded():
    sentences = ["The museum will stay closed until Monday.", "Alice met Bob in Paris.", "The shop sold 40 bikes.",
                 "The dog chased the cat.", "Prices rose in May.", "The bridge was not safe.", "IBM hired 300 people.",
                 "It is ready.", "They can swim."] * 3
    got = hard_negatives(sentences, 20, seed=1)
    assert got == hard_negatives(sentences, 20, seed=1)
    assert len(got) == len(set(sentences))  # one per distinct sentence
    for r in got:
        assert r["flipped"] != r["sentence"]
        if r["rule"] in ("negation", "swap"):  # the rules without random choices
            assert r["flipped"] == flip(r["sentence"], r["rule"])
    assert set(Counter(r["rule"] for r in got)) == set(RULES)


def _paraphrasus(tmp_path):
    folder = tmp_path / "paraphrasus"
    folder.mkdir()
    tag = ["z" * (i + 1) for i in range(40)]  # no digits: the number rule would edit them
    sts = {str(i): {"sentence1": f"Source {tag[i]} said the plan was approved.", "sentence2": f"Paraphrase {tag[i]}: the plan was approved.",
                    "score": 4.5} for i in range(20)}
    sts |= {str(100 + i): {"sentence1": f"Unrelated {tag[i]} a.", "sentence2": f"Unrelated {tag[i]} b.", "score": 0.5} for i in range(20)}
    (folder / "stsbenchmark-test-sts.json").write_text(json.dumps(sts))
    (folder / "onestop_parallel_all_pairs.json").write_text(json.dumps(
        {str(i): {"sentence1": f"Text {tag[i]} is long.", "sentence2": f"Text {tag[i]} is short."} for i in range(20)}))
    (folder / "stannlp-snli-pre-hyp.json").write_text(json.dumps(
        {str(i): {"sentence1": f"A man {tag[i]} runs.", "sentence2": f"A dog {tag[i]} sleeps."} for i in range(40)}))
    return folder


def test_build_data_has_the_hard_negatives_of_its_own_paraphrases(tmp_path):
    training_pairs = load_script("build_judge").training_pairs

    folder = _paraphrasus(tmp_path)
    with_hard = training_pairs(folder, per_source=8, seed=0, hard=6)
    without = training_pairs(folder, per_source=8, seed=0, hard=0)
    count = Counter((p["origin"], p["label"]) for p in with_hard)
    assert count[("hard", False)] == 6
    assert count[("snli", False)] == Counter((p["origin"], p["label"]) for p in without)[("snli", False)] - 6
    assert sum(p["label"] for p in with_hard) * 2 == len(with_hard) == len(without)  # still balanced, same size
    hypothesis_of = {p["source"]: p["hypothesis"] for p in with_hard if p["label"]}
    hypothesis_of |= {p["hypothesis"]: p["source"] for p in with_hard if p["label"]}
    for p in (p for p in with_hard if p["origin"] == "hard"):  # a positive's source beside its hypothesis, one edit away
        source = p["source"] if p["source"].startswith(("Source", "Text")) and p["source"] in hypothesis_of else p["hypothesis"]
        flipped = p["hypothesis"] if source == p["source"] else p["source"]
        paraphrase = hypothesis_of[source]
        assert flipped != paraphrase and flipped.startswith(("Paraphrase", "Text"))
        stem = paraphrase.rstrip(".")  # negation, antonym, or the paraphrase with something added
        assert (flipped.replace(" not", "").replace("long", "short") == paraphrase
                or (flipped.startswith(stem) and len(flipped) > len(paraphrase))), (flipped, paraphrase)


def test_build_data_takes_as_many_additions_as_asked_and_flips_for_the_rest(tmp_path):
    training_pairs = load_script("build_judge").training_pairs

    def added(pair):  # what the addition rule appends, on either side of the pair
        return any(a.strip(", ") in pair["source"] + pair["hypothesis"] for a in ADDED_CLAUSES + ADDED_SENTENCES)

    folder = _paraphrasus(tmp_path)
    for additions in (0, 2, 5):
        hard = [p for p in training_pairs(folder, per_source=8, seed=0, hard=9, additions=additions) if p["origin"] == "hard"]
        assert len(hard) == 9 and sum(map(added, hard)) == additions
        assert len({frozenset((p["source"], p["hypothesis"])) for p in hard}) == 9
    hard = [p for p in training_pairs(folder, per_source=8, seed=0, hard=9) if p["origin"] == "hard"]
    assert 0 < sum(map(added, hard)) < 9  # by default the rules take turns


def test_build_refuses_more_additions_than_hard_negatives(capsys, tmp_path):
    main, training_pairs = load_script("build_judge").main, load_script("build_judge").training_pairs

    for additions in (-1, 10):  # the Python API: -1 would have made more flips than asked (checked first: no data read)
        with pytest.raises(ValueError, match=f"--additions {additions}"):
            training_pairs(tmp_path, per_source=8, hard=9, additions=additions)
    code = main(["--hard-negatives", "3", "--additions", "5", "--output", str(tmp_path / "adapter")])
    assert code == 2 and "--additions 5" in capsys.readouterr().err
    assert not (tmp_path / "adapter").exists()  # refused before any tuning


def test_build_pairs_each_hard_negative_with_the_honest_pair_it_was_made_from(tmp_path):
    """The contrast of a hard negative is the labelled paraphrase it was edited from, in the same order:
    one side equal to the negative's, the other the unedited paraphrase."""
    training_pairs = load_script("build_judge").training_pairs

    pairs = training_pairs(_paraphrasus(tmp_path), per_source=8, seed=0, hard=9)
    positives = {(p["source"], p["hypothesis"]) for p in pairs if p["label"]}
    positives |= {(h, s) for s, h in positives}
    hard = [p for p in pairs if p["origin"] == "hard"]
    assert hard and all("contrast" not in p for p in pairs if p["origin"] != "hard")
    swapped = 0
    for p in hard:
        c = p["contrast"]
        assert (c["source"], c["hypothesis"]) in positives
        if c["source"] == p["source"]:  # source first: the hypothesis is the edit
            assert c["hypothesis"] != p["hypothesis"] and c["source"].startswith(("Source", "Text"))
        else:  # the pair was turned around: the edit comes first
            swapped += 1
            assert c["hypothesis"] == p["hypothesis"] and c["source"] != p["source"]
            assert c["hypothesis"].startswith(("Source", "Text"))
    assert 0 < swapped < len(hard)  # both orders occur


def test_build_passes_the_contrasts_to_tune_only_when_weighted(tmp_path, monkeypatch):
    build_module = load_script("build_judge")

    calls = []

    def fake_tune(model, **kwargs):  # no training here: what build hands to tune
        calls.append(kwargs)
        kwargs["output_dir"].mkdir(parents=True, exist_ok=True)
        return type("R", (), {"card": {}})()

    monkeypatch.setattr(build_module, "tune", fake_tune)
    monkeypatch.setattr(build_module, "half_precision", lambda path: None)
    folder = _paraphrasus(tmp_path)
    for weight in (0.0, 1.5):
        card = build_module.build(folder, tmp_path / f"out{weight}", per_source=8, hard=9, contrast_weight=weight)
        kwargs = calls[-1]
        assert kwargs["config"].contrast_weight == weight
        if not weight:
            assert kwargs["contrast"] is None and "--contrast-weight" not in card["provenance"]["command"]
            continue
        assert card["provenance"]["command"].endswith("--contrast-weight 1.5")
        labels, contrast = kwargs["labels"], kwargs["contrast"]
        assert len(contrast) == len(labels) and sum(c is not None for c in contrast) == 9
        assert all(not labels[i] for i, c in enumerate(contrast) if c is not None)


# held-out flips in the judge's evaluation (scripts/evaluate_judge.py) ------------------
class _TableJudge:
    """Scores from a fixed table keyed by the hypothesis or else the source (neither: +0.5), and every pair it was asked."""

    def __init__(self, table):
        self.table, self.asked = table, []

    def score(self, template, source, hypothesis):
        self.asked += list(zip(source, hypothesis))
        return [self.table.get(h, self.table.get(s, 0.5)) for s, h in zip(source, hypothesis)]


def test_held_out_flips_pair_each_flip_with_its_own_source_and_honest_score():
    held_out_flips = load_script("evaluate_judge").held_out_flips

    sources = ["Alice met Bob in Paris.", "The shop will stay open until Monday.", "Prices rose by 5 percent in 2019.",
               "The dog chased the cat."]
    hypotheses = ["In Paris, Alice met Bob.", "The shop will remain open until Monday.", "In 2019 prices rose by 5 percent.",
                  "The cat was chased by the dog."]
    honest = [3.0, -1.0, 0.2, 2.0]  # one honest score per pair, all different
    flip_scores = [2.5, -0.5, 1.0, 2.5]  # per source: above the honest score of its own pair for the last three only
    judge = _TableJudge(dict(zip(sources, flip_scores)))
    out = held_out_flips(judge, sources, hypotheses, honest)
    assert out["n"] == len(judge.asked) == 4
    for source, flipped in judge.asked:
        i = sources.index(source)  # each flip is scored against the source of the hypothesis it was made from
        assert flipped != hypotheses[i] and len(set(flipped.split()) & set(hypotheses[i].split())) >= 2
    assert out["accepted"] == 0.75 and out["above_honest"] == 0.75  # a neighbour's honest score gives 0.25
    assert out["mean"] == pytest.approx(5.5 / 4) and out["honest_mean"] == pytest.approx(sum(honest) / 4)
    assert out["honest_accepted"] == 0.75
    # unpaired: of the 16 (honest, flip) pairs, those where the honest score is higher (ties count half)
    wins = sum((a > b) + 0.5 * (a == b) for a in honest for b in flip_scores)
    assert out["roc_auc"] == pytest.approx(wins / 16)
    assert sum(r["n"] for r in out["by_rule"].values()) == 4 and set(out["by_rule"]) <= set(MEANING_RULES)


def test_held_out_flips_count_what_the_judge_rejects_per_rule():
    held_out_flips, markdown = load_script("evaluate_judge").held_out_flips, load_script("evaluate_judge").markdown

    sources, hypotheses = ["The museum will stay closed until Monday."] * 2, ["The museum stays closed until Monday.",
                                                                              "Until Monday, the museum will stay closed."]
    first = _TableJudge({})
    held_out_flips(first, sources, hypotheses, [1.0, 1.0])
    flipped = [h for _, h in first.asked]
    judge = _TableJudge({flipped[0]: -2.0, flipped[1]: 1.5})  # one rejected, one accepted above its honest +1.0
    out = held_out_flips(judge, sources, hypotheses, [1.0, 1.0])
    assert (out["n"], out["accepted"], out["above_honest"], out["mean"]) == (2, 0.5, 0.5, -0.25)
    result = {"judge": "t", "template": "para-fs", "mrpc": {"n": 2, "roc_auc": 1.0, "accuracy_at_0": 1.0, "said_yes_at_0": 1,
              "positives": 1, "accuracy_at_best": 1.0, "best_threshold": 0.0, "pairs_per_second": 1.0},
              "flips": out, "paraphrasus": {}}
    assert "(held out, 2): 50.0% accepted, 50.0% above their honest paraphrase" in markdown(result)


def test_the_evaluation_markdown_as_the_readme_shows_it():
    markdown = load_script("evaluate_judge").markdown
    flips = {"n": 3, "accepted": 1 / 3, "above_honest": 0.0, "mean": -1.5, "honest_mean": 2.25, "honest_accepted": 1.0,
             "roc_auc": 0.875, "by_rule": {"negation": {"n": 2, "accepted": 0.5, "above_honest": 0.0},
                                           "swap": {"n": 1, "accepted": 0.0, "above_honest": 0.0}}}
    result = {"judge": "t", "template": "para-fs", "mrpc": {"n": 4, "roc_auc": 0.75, "accuracy_at_0": 0.5, "said_yes_at_0": 1,
              "positives": 2, "accuracy_at_best": 0.75, "best_threshold": -0.5, "pairs_per_second": 12.0},
              "flips": flips, "paraphrasus": {"STS": {"n": 10, "error_rate": 0.1, "trained_on": True},
                                              "PAWSX": {"n": 8, "error_rate": 0.125, "trained_on": False}}}
    assert markdown(result) == (
        "`t`, template `para-fs`:\n\n"
        "MRPC (4 pairs, held out): ROC-AUC 0.750, accuracy 50.0% at 0 (1 Yes for 2 paraphrases), 75.0% at the best "
        "threshold -0.50; 12.0 pairs/s\n\n"
        "Meaning flips of MRPC's paraphrases (held out, 3): 33.3% accepted, 0.0% above their honest paraphrase; "
        "mean -1.50 (honest +2.25, 100.0% accepted); ROC-AUC honest vs flip 0.875\n\n"
        "| rule | n | accepted | above honest |\n|---|---:|---:|---:|\n"
        "| negation | 2 | 50.0% | 0.0% |\n| swap | 1 | 0.0% | 0.0% |\n\n"
        "| PARAPHRASUS dataset | n | error rate |  |\n|---|---:|---:|---|\n"
        "| STS | 10 | 10.0% | seen in training |\n| PAWSX | 8 | 12.5% | held out |\n")


def test_held_out_flips_refuse_bad_input():
    held_out_flips = load_script("evaluate_judge").held_out_flips

    with pytest.raises(ValueError, match="differ in length"):
        held_out_flips(_TableJudge({}), ["a"], ["b", "c"], [1.0])
    with pytest.raises(ValueError, match="no meaning-flip rule applies"):
        held_out_flips(_TableJudge({}), ["Hello."], ["Hi."], [1.0])


def test_the_scripts_doctests_and_help():
    """scripts/ is not among pytest's doctest paths: the maintainer scripts' examples run here, and both scripts answer --help."""
    import doctest

    result = doctest.testmod(load_script("evaluate_judge"))
    assert result.attempted > 0 and result.failed == 0
    for name in ("build_judge", "evaluate_judge"):
        with pytest.raises(SystemExit) as exit_info:
            load_script(name).main(["--help"])
        assert exit_info.value.code == 0
