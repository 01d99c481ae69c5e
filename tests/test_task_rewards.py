"""Copy-proof generation rewards (ParaphraseReward, TranslationReward, RevisionReward): a copy, every
disguised copy and an empty completion score below any accepted completion at the novelty target,
for random judge outputs and random texts; values against a hand computation; TRL's contract; the
default judge's probe (copies below honest answers, for the three tasks)."""

import math
import pickle
import random
import re

import pytest

from pluie_reward import CopyProofReward, Judge, ParaphraseReward, RevisionReward, TranslationReward
from pluie_reward.integrations.novelty import TASKS, copy_proof_novelty, copy_proof_score, is_copy

VOCAB = ("the cat dog sleeps barks mat night garden house river boat flour salt concert tickets summer fence "
         "rain flights airport monday team won championship year museum roof repaired library public spring").split()
HOMOGLYPHS = {"a": "а", "c": "с", "e": "е", "o": "о", "p": "р", "x": "х", "y": "у"}  # Latin -> Cyrillic


def logistic(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def sentence(rng: random.Random, n: int) -> str:
    words = [rng.choice(VOCAB) for _ in range(n)]
    return " ".join(words).capitalize() + "."


def disguises(rng: random.Random, source: str) -> list[str]:
    """Copies of ``source`` written here, independently of the package's normalisation."""
    no_punct = "".join(c for c in source if c.isalnum() or c.isspace())
    return [
        source,
        source.upper(),
        source.lower(),
        "  " + source.replace(" ", "   ") + "\n",
        no_punct,
        source + "!!!",
        source.replace(" ", " , "),
        source.replace(" ", "", 1),                 # two words joined ("peer-to-peer" without its hyphens)
        "\u200b".join(source),                      # zero-width space between all characters
        "\u00ad".join(source),                      # soft hyphen
        "".join(HOMOGLYPHS.get(c, c) for c in source),
        "".join(HOMOGLYPHS.get(c, c) if i % 2 else c for i, c in enumerate(source)),
        source + " " + source,                      # the source repeated
        source + " " + source + " " + source,
        source + " " + sentence(rng, rng.randint(1, 8)),  # the source followed by anything
        sentence(rng, rng.randint(1, 5)) + " " + source,  # ... or preceded
    ]


def test_copies_never_beat_accepted_novel_completions():
    """The property: over random judge outputs and random texts, every copy scores strictly below every
    completion the judge accepts (p_yes > 0.5) whose novelty reaches the target."""
    rng = random.Random(0)
    checked = 0
    for _ in range(300):
        source = sentence(rng, rng.randint(3, 14))
        target = rng.choice([TASKS["paraphrase"].target, TASKS["revision"].target, rng.uniform(0.01, 1.0)])
        copies = [copy_proof_score(rng.choice([1.0, rng.random()]), source, c, target=target) for c in disguises(rng, source)]
        assert all(c == 0.0 for c in copies), (source, copies)
        for _ in range(10):
            # a candidate: some source words kept, some replaced, some added (random novelty)
            words = [w if rng.random() < rng.random() else rng.choice(VOCAB) for w in source[:-1].split()]
            words += [rng.choice(VOCAB) for _ in range(rng.randint(0, 4))]
            candidate = " ".join(words).capitalize() + rng.choice([".", "!", ""])
            p_yes = rng.uniform(0.5, 1.0) + 1e-9
            if p_yes > 1 or copy_proof_novelty(source, candidate) < target:
                continue
            checked += 1
            assert copy_proof_score(p_yes, source, candidate, target=target) > max(copies)
    assert checked > 500  # the loop did test accepted-and-novel candidates


def test_score_by_hand():
    # "The cat sleeps" -> "A cat is asleep": the -> a, sleeps -> is, + asleep: 3 edits over 4 words
    assert copy_proof_score(0.8, "The cat sleeps.", "A cat is asleep.") == pytest.approx(0.8)
    assert copy_proof_score(0.8, "The cat sleeps.", "A cat is asleep.", target=0.9) == pytest.approx(0.8 * 0.75 / 0.9)
    # "the cat sleeps on the mat" -> "... a mat": 1 edit over 6 words, below the 0.3 target
    assert copy_proof_score(0.9, "The cat sleeps on the mat.", "The cat sleeps on a mat.") == pytest.approx(0.9 * (1 / 6) / 0.3)
    # an empty, blank or word-less completion: 0 whatever the judge says
    for text in ("", " ", "\n", "...", ":", "\u200b"):
        assert copy_proof_score(1.0, "The cat sleeps.", text) == 0.0
    with pytest.raises(ValueError, match=r"p_yes must be a probability in \[0, 1\]"):
        copy_proof_score(1.5, "a", "b")
    with pytest.raises(ValueError, match=r"target must be a novelty in \(0, 1\]"):
        copy_proof_score(0.5, "a", "b", target=0)


def test_repetition_does_not_reach_the_maximum():
    source = "The committee approved the budget on Monday."
    once = "On Monday the budget was passed by the committee."
    # the 9 words said k times: 9k - 2 trigrams, 9 distinct (7 inside a copy, 2 across the joint)
    for k in (2, 3, 5):
        repeated = " ".join([once] * k)
        expected = 1.0 * (1 - (9 * k - 2 - 9) / (9 * k - 2))
        assert copy_proof_score(1.0, source, repeated) == pytest.approx(expected)
        assert copy_proof_score(1.0, source, repeated) < 0.5 * copy_proof_score(1.0, source, once) + 0.1
    assert copy_proof_score(1.0, source, once) == 1.0


def test_length_floor_by_hand():
    source = "The chef prepares every dish with vegetables from his own garden."  # 11 words
    fragment = "With vegetables from his own garden."                                 # 6 words
    novelty = copy_proof_novelty(source, fragment)
    assert novelty >= 0.3
    # no floor: the judge's probability; the paraphrase floor: times (6 / 11) / 0.67
    assert copy_proof_score(0.9, source, fragment) == pytest.approx(0.9)
    assert copy_proof_score(0.9, source, fragment, min_length=0.67) == pytest.approx(0.9 * 6 / 11 / 0.67)
    assert TASKS["paraphrase"].min_length == 0.67
    assert TASKS["translation"].min_length is None and TASKS["revision"].min_length is None
    # at or above two thirds of the words: nothing lost; longer completions are the judge's business
    whole = "Every dish the chef makes uses vegetables grown in his own garden."  # 12 words
    assert copy_proof_score(0.9, source, whole, min_length=0.67) == pytest.approx(0.9)
    eight = "The chef cooks with vegetables from his garden."  # 8 words: 8 / 11 = 0.727 >= 0.67
    assert copy_proof_score(0.9, source, eight, min_length=0.67) == pytest.approx(0.9)
    seven = "The chef uses vegetables from his garden."  # 7 words: 0.636 < 0.67
    assert copy_proof_score(0.9, source, seven, min_length=0.67) == pytest.approx(0.9 * 7 / 11 / 0.67)
    for bad in (0, -0.5, 1.5, True, "0.67"):
        with pytest.raises(ValueError, match=r"min_length must be a share"):
            copy_proof_score(0.9, source, fragment, min_length=bad)


def test_paraphrase_reward_applies_the_floor_and_the_others_do_not(tiny_judge):
    source = "The chef prepares every dish with vegetables from his own garden."
    fragment = "With vegetables from his own garden."
    p = logistic(tiny_judge.score("para-fs", source=[source], hypothesis=[fragment], use_cache=False)[0])
    metrics = {}
    got = ParaphraseReward(tiny_judge)(completions=[fragment], source=[source], log_metric=metrics.__setitem__)
    assert got == pytest.approx([p * 6 / 11 / 0.67], abs=1e-4)
    assert metrics["paraphrase/short_rate"] == 1.0
    assert ParaphraseReward(tiny_judge, min_length=None)(completions=[fragment], source=[source]) == pytest.approx([p], abs=1e-4)
    assert ParaphraseReward(tiny_judge, min_length=0.5)(completions=[fragment], source=[source]) == pytest.approx([p], abs=1e-4)
    q = logistic(tiny_judge.score("net", source=[source], hypothesis=[fragment], use_cache=False)[0])
    assert TranslationReward(tiny_judge)(completions=[fragment], source=[source]) == pytest.approx([q], abs=1e-4)
    with pytest.raises(ValueError, match="min_length must be a share"):
        ParaphraseReward(tiny_judge, min_length=2)


def test_translation_and_revision_copies():
    nile = "for endpoint('guests') block service('ssh')"
    assert copy_proof_score(1.0, nile, nile) == 0.0                                   # untranslated
    assert copy_proof_score(1.0, nile, nile + " Guests cannot use SSH.") == 0.0       # untranslated, then translated
    assert copy_proof_score(1.0, nile, "FOR ENDPOINT ( 'guests' ) block service ('ssh')") == 0.0
    assert copy_proof_score(0.7, nile, "Guests cannot use SSH.") == pytest.approx(0.7)
    rev = TASKS["revision"]
    original = "We propose a metod for parsing sentences wich is faster then previous work."
    revised = "We propose a method for parsing sentences which is faster than previous work."
    kwargs = {"target": rev.target, "source_inside_is_copy": rev.source_inside_is_copy}
    assert copy_proof_score(1.0, original, original, **kwargs) == 0.0                 # unrevised
    assert copy_proof_score(1.0, original, " " + original.upper(), **kwargs) == 0.0   # unrevised, disguised
    assert copy_proof_score(0.9, original, revised, **kwargs) == pytest.approx(0.9)   # 3 of 15 tokens: 0.2 >= 0.05
    # adding a sentence to an unchanged paragraph can be the instruction: judged, not zeroed
    added = original + " It also uses less memory."
    assert not is_copy(original, added, source_inside_is_copy=False)
    assert copy_proof_score(0.9, original, added, **kwargs) == pytest.approx(0.9)


def test_reward_is_the_judge_probability_gated_by_novelty(tiny_judge):
    sources = ["The cat sleeps.", "The cat sleeps.", "The cat sleeps.", "The dog barks at night."]
    completions = ["A cat is asleep.", "the CAT sleeps", "", "At night the dog barks loudly."]
    reward = ParaphraseReward(tiny_judge, fields={"source": "src"})
    metrics, extra = {}, {}
    got = reward(prompts=["p"] * 4, completions=[[{"role": "assistant", "content": c}] for c in completions], src=sources,
                 log_metric=metrics.__setitem__, log_extra=extra.__setitem__)
    # the judge reads each completion's reading: the final punctuation as the source's
    readings = ["A cat is asleep.", "the CAT sleeps.", "", "At night the dog barks loudly."]
    logratios = tiny_judge.score("para-fs", source=sources, hypothesis=readings, use_cache=False)
    # novelty by hand: 3/4 (above), a disguised copy 0, empty 0; "at night the dog barks loudly" vs
    # "the dog barks at night": 6 words, 4 edits (insert "at night", then "at night" -> "loudly": 1 change, 1 deletion)
    novelty = [0.75, 0.0, 0.0, 4 / 6]
    assert got == pytest.approx([logistic(x) * min(1, v / 0.3) for x, v in zip(logratios, novelty)], abs=1e-4)
    assert got[1] == got[2] == 0.0 and got[0] > 0 and got[3] > 0
    assert reward.__name__ == "paraphrase"
    assert metrics["paraphrase/copy_rate"] == 0.25
    assert metrics["paraphrase/novelty"] == pytest.approx((0.75 + 4 / 6) / 4)
    assert metrics["paraphrase/accept_rate"] == sum(x > 0 for x in logratios) / 4
    assert metrics["paraphrase/accepted_novel_rate"] == sum(x > 0 for x in (logratios[0], logratios[3])) / 4
    assert extra["paraphrase/novelty"] == pytest.approx(novelty, abs=1e-4)


def test_task_rewards_defaults_and_errors(tiny_judge):
    translation, revision = TranslationReward(tiny_judge), RevisionReward(tiny_judge)
    assert (translation.__name__, translation.template.name, translation.target) == ("translation", "net", 0.3)
    assert (revision.__name__, revision.template.name, revision.target) == ("revision", "rev", 0.05)
    got = revision(completions=["We propose a method.", "We propose a metod."], original=["We propose a metod."] * 2,
                   instruction=["Fix the spelling."] * 2)
    p = logistic(tiny_judge.score("rev", original="We propose a metod.", instruction="Fix the spelling.",
                                  hypothesis=["We propose a method."])[0])
    assert got == pytest.approx([p, 0.0], abs=1e-4)  # 1 edit of 5 tokens = 0.2 >= 0.05
    assert ParaphraseReward(tiny_judge, target=0.5, name="para").target == 0.5
    with pytest.raises(ValueError, match="unknown task 'summary'"):
        CopyProofReward(tiny_judge, "summary")
    with pytest.raises(ValueError, match=r"target must be a novelty in \(0, 1\]"):
        ParaphraseReward(tiny_judge, target=1.5)
    with pytest.raises(ValueError, match="does not answer Yes/No"):
        ParaphraseReward(tiny_judge, template="net-likert")
    with pytest.raises(ValueError, match="has no field 'original'"):
        RevisionReward(tiny_judge, template="para-fs")
    with pytest.raises(KeyError, match="source"):
        ParaphraseReward(tiny_judge)(completions=["a"], text=["b"])
    with pytest.raises(TypeError, match="completions"):
        ParaphraseReward(tiny_judge)(prompts=["a"])


def test_pickles_without_the_judge_and_composes():
    from functools import partial

    from pluie_reward.testing import make_tiny_judge

    reward = ParaphraseReward(partial(make_tiny_judge, seed=0))
    copy = pickle.loads(pickle.dumps(reward))
    batch = {"completions": ["A cat is asleep.", "The cat sleeps."], "source": ["The cat sleeps."] * 2}
    assert copy(**batch) == pytest.approx(reward(**batch))
    assert copy.__name__ == "paraphrase" and reward(**batch)[1] == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("template", ["para-fs", "net", "rev"])
def test_default_judge_probe_copies_below_honest(embedded_judge, template):
    """On the default judge, the probe's copies (plain, disguised, repeated) of each built-in source
    score strictly below its honest paraphrase / translation / revision, with the task's reward."""
    from pluie_reward.tools.probe import probe_items

    families = ["copy", "copy_case", "copy_spacing", "copy_punctuation", "copy_zero_width", "copy_homoglyph", "repeat"]
    records = probe_items(embedded_judge, template, families=families, limit=4)
    honest = {r["source_index"]: r for r in records if r["family"] == "honest"}
    copies = [r for r in records if r["kind"] == "copy"]
    assert len(honest) == 4 and len(copies) >= 10 * len(honest)
    for r in copies:
        if template == "rev" and r["family"] == "repeat":
            # revision: an unchanged paragraph said twice is judged (not a copy), and must still lose
            assert r["copy_proof"] < r["honest_copy_proof"], r
            continue
        assert r["copy_proof"] == 0.0, r
        assert r["honest_copy_proof"] > 0.0
    # independent check of the honest values: p_yes x min(1, novelty / target) x the paraphrase length floor
    # (honest answers do not repeat); words counted here with \w+
    target = {"para-fs": 0.3, "net": 0.3, "rev": 0.05}[template]
    source_of = {r["source_index"]: r["hypothesis"] for r in records if r["family"] == "copy"}  # the plain copy
    for i, r in honest.items():
        floor = 1.0
        if template == "para-fs":
            floor = min(1.0, len(re.findall(r"\w+", r["hypothesis"])) / len(re.findall(r"\w+", source_of[i])) / 0.67)
        assert r["honest_copy_proof"] == pytest.approx(logistic(r["score"]) * min(1, r["novelty"] / target) * floor)
