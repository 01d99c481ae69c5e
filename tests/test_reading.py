"""What a copy-proof reward reads: the words a reader reads (integrations/skeleton.py: separators, look-alikes from
Unicode's confusables, small capitals, words mixing scripts) and the one reading of a completion its judge reads
(integrations/reading.py: labels, preambles, notes, markdown, quotes, the answer said again, final punctuation).
Expected values are written out by hand; issue 62's cases are each here."""

from __future__ import annotations

import pytest

from pluie_reward.integrations.novelty import TASKS, copy_proof_score, is_copy, is_disguised, novelty_score, repetition
from pluie_reward.integrations.reading import read_completion
from pluie_reward.integrations.skeleton import compare, mixes_scripts, normalize_text, words

SOURCE = "Heavy rain forced the organisers to cancel the outdoor concert."
HONEST = "Because of the heavy rain, the organisers called off the open-air concert."
SOURCE_WORDS = ["heavy", "rain", "forced", "the", "organisers", "to", "cancel", "the", "outdoor", "concert"]


@pytest.mark.parametrize("separator", ["_", "-", ".", "/", "|", "·", "\u2800", "~", "+"])
def test_every_character_that_is_not_a_letter_or_digit_separates_words(separator):
    joined = "Heavy rain forced{0}the organisers to{0}cancel the outdoor{0}concert.".format(separator)
    assert words(joined) == SOURCE_WORDS
    assert is_copy(SOURCE, joined) and novelty_score(SOURCE, joined) == 0.0


def test_words_joined_by_underscores_are_a_copy_at_every_spacing():
    """Issue 62, case 1: every 2nd, 3rd, 4th space made an underscore."""
    parts = SOURCE.split(" ")
    for k in (2, 3, 4):
        joined = "".join(p + ("_" if (i + 1) % k and i < len(parts) - 1 else " ") for i, p in enumerate(parts)).strip()
        assert "_" in joined and is_copy(SOURCE, joined)
        assert copy_proof_score(0.99, SOURCE, joined) == 0.0


def test_small_capitals_and_look_alikes_read_as_their_letters():
    """Issue 62, case 2: Latin small capitals (by their Unicode names), Armenian and Greek look-alikes."""
    assert words("Heᴀvy rain forced thᴇ organisers to cᴀncel the outdoor concᴇrt.") == SOURCE_WORDS
    assert words("ʜᴇᴀᴠʏ ʀᴀɪɴ") == ["heavy", "rain"]
    assert words("օ ո հ ս ց") == ["o", "n", "h", "u", "g"]  # Armenian oh, vo, ho, seh, co
    assert words("becaυse failυre") == ["because", "failure"]  # Greek upsilon reads as u, not y
    assert normalize_text("η") == "n" and normalize_text("ν") == "v"  # eta reads as n, nu as v
    assert normalize_text("Ｔｈｅ ｃａｔ.") == "the cat."  # compatibility forms, punctuation kept
    for copy in ("Heᴀvy rain forced thᴇ organisers to cᴀncel the outdoor concᴇrt.",
                 "Heavy rain fօrced the օrganisers to cancel the օutdoor concert.",
                 "Heavy rain forced the organisers to cancel the outdoor concert.".replace("e", "е")):  # Cyrillic ie
        assert is_copy(SOURCE, copy) and copy_proof_score(0.99, SOURCE, copy) == 0.0
    source = "The train to Lyon was delayed because of a signal failure."
    assert is_copy(source, "The train to Lyon was delayed becaυse of a signal failυre.")


def test_a_symbol_that_looks_like_a_letter_reads_as_it_where_that_gives_the_source():
    """⊤ (DOWN TACK) looks like T and ∨ (LOGICAL OR) like v: not letters, but a reader reads "⊤he" as "The";
    "|" looks like l, yet "forced|the" reads as two words (the reading that gives the source's words wins)."""
    source = "The company said its profit rose sharply in the third quarter."
    assert is_copy(source, "⊤he company said 𝞲ts profit rose ꜱharply in the tᏂird quarter.")
    assert is_copy("Heavy rain forced the organisers.", "Heavy rain forced|the organisers.")
    assert is_copy("The river is very wide.", "The river is ∨ery wide.")
    assert compare("The cat.", "⊤he dog.")[1] == ["the", "dog"] and words("⊤he") == ["he"]


def test_a_word_is_read_against_its_source_by_its_shape_too():
    """Greek capitals: Ν looks like N (its lower case, ν, like v), Η like H (η like n)."""
    assert compare("It is hot.", "ΙΤ is ΗΟΤ!") == (["it", "is", "hot"], ["it", "is", "hot"], False)
    assert compare("It is not.", "ΙΤ is ΗΟΤ!")[1] == ["it", "is", "not"]  # against "not", the case-folded reading
    assert is_copy("The new car is red.", "The ΝEW car is red.")


def test_a_word_mixing_scripts_is_a_disguise():
    assert mixes_scripts("heաvy") and mixes_scripts("ΝEW") and mixes_scripts("raіn")  # Armenian, Greek, Cyrillic i
    for word in ("heavy", "кот", "οδός", "iPhoneを", "東京タワー", "서울시", "COVID19", "naïve"):
        assert not mixes_scripts(word), word
    # an Armenian letter with no Latin look-alike keeps the word new, but the word mixes scripts: a disguise (0)
    disguised = "Heաvy rain forced the organisers to cancel the outdoor concert."
    assert words(disguised)[0] != "heavy" and is_disguised(SOURCE, disguised) and is_copy(SOURCE, disguised)
    assert copy_proof_score(0.99, SOURCE, disguised) == 0.0
    assert copy_proof_score(0.99, SOURCE, "Because of the heաvy rain, the organisers called off the open-air concert.") == 0.0
    # a mixed word the source itself holds is not a disguise
    assert not is_disguised("Heաvy rain fell.", "The heաvy rain fell hard.")


def test_punctuation_is_no_word_and_earns_no_novelty():
    assert novelty_score(SOURCE, SOURCE.replace(" ", ", ")) == 0.0
    # one word changed of ten, whatever the commas around it
    changed = "Heavy rain forced the organisers to cancel the open concert."
    assert novelty_score(SOURCE, changed) == pytest.approx(1 / 10)
    assert novelty_score(SOURCE, changed.replace(" ", " , ")) == pytest.approx(1 / 10)


READINGS = {  # completion -> what the paraphrase task's judge reads (issue 62, cases 3 and 4)
    HONEST: HONEST,
    "Paraphrase: " + HONEST: HONEST,
    "Sure! Here is a paraphrase: " + HONEST: HONEST,
    "Here's a paraphrase of the sentence:\n\n" + HONEST: HONEST,
    "**Paraphrase:** " + HONEST: HONEST,
    "**" + HONEST + "**": HONEST,
    "Because of the *heavy* rain, the organisers called off the __open-air__ concert.": HONEST,
    '"' + HONEST + '"': HONEST,
    "“" + HONEST[:-1] + "”": HONEST,
    HONEST[:-1]: HONEST,
    HONEST[:-1] + "!": HONEST,
    HONEST + " " + HONEST: HONEST,
    HONEST + "\n" + HONEST: HONEST,
    HONEST.replace(", ", ",\n"): HONEST,
    HONEST + "\n\nNote: I kept the meaning.": HONEST,
    HONEST + " (Note: paraphrased.)": HONEST,
    "# " + HONEST: HONEST,
    "- " + HONEST: HONEST,
    "  " + HONEST.replace(" ", "  ") + "\n": HONEST,
}


@pytest.mark.parametrize("completion", list(READINGS))
def test_the_judge_reads_the_answer_without_its_presentation(completion):
    reading = read_completion(completion, SOURCE)
    assert reading == READINGS[completion]
    assert read_completion(reading, SOURCE) == reading  # reading twice changes nothing
    assert TASKS["paraphrase"].read(SOURCE, completion) == reading


def test_what_the_source_does_itself_is_no_presentation():
    # a source with a colon: a colon in the answer is no label
    assert read_completion("Weather: the concert was called off.", "Weather: rain cancelled the concert.") == \
        "Weather: the concert was called off."
    # "10:30" and a URL are no labels
    assert read_completion("At 10:30 the rain stopped", SOURCE) == "At 10:30 the rain stopped."
    # a source using emphasis marks keeps the answer's; a source in quotes keeps the answer's quotes
    assert read_completion("A *very* wet day.", "It was a *really* rainy day.") == "A *very* wet day."
    assert read_completion('"A wet day."', '"A rainy day."') == '"A wet day."'
    # a question stays a question; a source without a final mark reads none
    assert read_completion("Is the concert off.", "Was the concert cancelled?") == "Is the concert off?"
    assert read_completion("The concert is off.", "The concert was cancelled") == "The concert is off"
    # paragraphs: a source with line breaks keeps one line break in the answer
    assert read_completion("First part.\n\n\nSecond part.", "One.\nTwo.") == "First part.\nSecond part."
    # an answer whose sentences differ keeps them all
    assert read_completion("Rain fell. The concert was cancelled.", SOURCE) == "Rain fell. The concert was cancelled."


def test_each_task_reads_final_punctuation_its_way():
    assert TASKS["paraphrase"].read("Rain fell.", "It rained!") == "It rained."
    assert TASKS["translation"].read("Il pleut.", "It rains") == "It rains."  # missing: the source's
    assert TASKS["translation"].read("Il pleut.", "下雨了。") == "下雨了。"  # present: kept (languages differ)
    assert TASKS["revision"].read("We propose a metod.", "Revised: We propose a method") == "We propose a method"
    assert TASKS["revision"].read("A b.", "**A c**!") == "A c!"
    with pytest.raises(ValueError, match="final must be one of"):
        read_completion("a", "b", final="strip")
    with pytest.raises(ValueError, match="final must be one of"):
        TASKS["paraphrase"].__class__("x", "para-fs", "source", 0.3, final="nope")


def test_what_the_reading_leaves_out_never_earns_anything():
    """Task.batch on the same p_yes: a label, a preamble, emphasis, a dropped stop get exactly the bare answer's
    reward; the answer said twice gets the bare reward times (1 - its repeated trigrams), about half."""
    task = TASKS["paraphrase"]
    edited = ["Paraphrase: " + HONEST, "Sure! Here is a paraphrase: " + HONEST, "**" + HONEST + "**", HONEST[:-1],
              HONEST.replace(", ", ",\n"), '"' + HONEST + '"']
    bare = task.batch([0.8], [True], [SOURCE], [HONEST]).rewards[0]
    # by hand: [because of the heavy rain the organisers called off the open air concert] vs the source's ten words:
    # novelty well above 0.3, 13 words of 10: the reward is p_yes
    assert bare == pytest.approx(0.8)
    assert task.batch([0.8] * len(edited), [True] * len(edited), [SOURCE] * len(edited), edited).rewards == pytest.approx(
        [bare] * len(edited))
    twice = task.batch([0.8], [True], [SOURCE], [HONEST + " " + HONEST]).rewards[0]
    # 26 words, 24 trigrams: the 11 of the second copy are all seen (as are none across the joint): 11 / 24 repeat
    assert repetition(HONEST + " " + HONEST) == pytest.approx(11 / 24)
    assert twice == pytest.approx(0.8 * (1 - 11 / 24))
    # a judge reading the completions as given (clean_text=False): nothing is read away
    raw = task.batch([0.8], [True], [SOURCE], [HONEST + " " + HONEST], read=False).rewards[0]
    assert raw == pytest.approx(0.8 * (1 - 11 / 24))  # novelty already full: the same here, but from the raw text
    label_copy = "Paraphrase: " + SOURCE  # the reading is the source: a copy
    assert task.batch([0.99], [True], [SOURCE], [label_copy]).rewards == [0.0]
