"""Built-in templates render the seeds' prompts; answer words are validated as single tokens."""

import re

import pytest

from pluie_reward import AnswerTokenError, Template, builtin_template_names, load_template
from pluie_reward.testing import make_tiny_judge

from conftest import shared_path

ITEM = {"source": "SRC", "hypothesis": "HYP", "original": "ORIG", "instruction": "INSTR", "alternative": "ALT", "generated": "GEN"}


def squash(text: str) -> str:
    return re.sub(r"\s+", " ", text)


# Key lines copied by hand from the seeds (parapluie_coling2025 A.4 / 3.1.1; star-pluie_2026 E).
SEED_LINES = {
    "para-direct": [
        'You will receive two sentences A and B. Do these two sentences mean the same thing? Answer with only one word "yes" or "no".',
        "Please provide the sentences for me to evaluate.",
        'A: "SRC"; B: "HYP"',
    ],
    "para-fs": [
        'You will receive two sentences A and B. Do these two sentences mean the same thing? Answer with only one word "yes" or "no".',
        'A: "Pennmakkal is an Indian Malayalam film from 1966, produced by J. Sasikumar and directed by KP Kottarakkara."',
        'B: "Despite being accused of conspiring to obstruct justice and perjury, Sorkin was supposed to stand trial on his own."',
        'A: "The Jidanul River is a tributary of the Jiul de Vest River in Romania."; B: "The Jidanul River is a mere insignificant stream that flows into the grand Jiul de Vest River in Romania."',
        'A: "SRC"; B: "HYP"',
    ],
    "para-fs-fr": [
        'Tu vas recevoir deux phrases, A et B. Est-ce que ces deux phrases veulent dire la même chose ? Réponds avec un seul mot : "oui" ou "non".',
        "S'il te plaît, fournis-moi les deux phrases que je dois évaluer.",
        'B: "Malgré les accusations de complot pour entraver la justice et de parjure, Sorkin devait être jugé seul ."',
        'A: "SRC"; B: "HYP"',
    ],
    "net": [
        'Do these two sentences express the same network policy? Answer with only one word "Yes" or "No".',
        "Please provide the data for me to evaluate.",
        'A: "Housing does not normally limit the amount of bandwidth"; B: "There is no bandwidth limit for the dorms"',
        'A: "SRC"; B: "HYP"',
    ],
    "para-indirect": [
        "You will receive two sentences A and B. Do these two sentences mean the same thing?",
        'A: "SRC"; B: "HYP"',
        'Summarize your answer with only one word "yes" or "no".',
    ],
    "net-choice": [
        "You are an evaluator of Nile network policies to English translations. In this task, two translation models have been provided with the original Nile sentence and translated it to English.",
        '[Nile network policy]: "SRC"',
        '[Sentence B]: "ALT"',
        "Which sentence is the best translation of the Nile network policy?",
    ],
    "net-likert": [
        "You will answer this affirmation with a grade (int) from 1 to 5 as follows: 1 = Strongly disagree, 2 = Disagree, 3 = Neutral, 4 = Agree, 5 = Strongly agree.",
        '[Model proposed translation]: "HYP"',
        "The model proposed a correct translation of the Nile network policy?",
    ],
    "rev-choice": [
        'P1: "ORIG"; I: "INSTR"; A: "HYP"; B: "ALT"',
        'Answer with only one letter: "A" if A is better, "B" if B is better, "C" if they are equally good.',
    ],
    "rev": [
        "P1 is a paragraph written for a scientific article, I is an instruction on how to revise P1 and P2 is a revised version of P1. Did P2 address the instruction I?",
        'P1: "ORIG"; I: "INSTR"; P2: "HYP"',
    ],
}
FEW_SHOT_ANSWERS = {"para-fs": ["No", "Yes", "No", "No", "Yes", "No"],
                    "para-fs-fr": ["non", "oui", "non", "non", "oui", "non"],
                    "net": ["Yes", "Yes", "No", "No", "Yes", "No"],
                    "para-indirect": ["GEN"]}


def test_all_builtins_listed():
    assert builtin_template_names() == sorted(SEED_LINES)


@pytest.mark.parametrize("name", sorted(SEED_LINES))
def test_renders_seed_text(name, tiny_judge):
    bound = tiny_judge.bind(name) if name != "para-fs-fr" else make_tiny_judge().bind(name)
    text = bound.render({f: ITEM.get(f) for f in (*bound.template.all_fields, "generated")})
    for line in SEED_LINES[name]:
        assert line in text, f"{name}: missing seed line {line!r}"
    # the prompt ends where the answer token comes: after the generation prompt, no end-of-turn
    assert text.endswith("<|im_start|>assistant\n")
    turns = load_template(name).chat({f: ITEM.get(f) for f in (*bound.template.fields, "generated")})
    assert [t["content"] for t in turns if t["role"] == "assistant"][1:] == FEW_SHOT_ANSWERS.get(name, [])



def test_hand_copied_lines_are_in_the_seeds():
    """The seeds' own text holds the lines copied above (modulo their PDF line breaks and quote doubling)."""
    seeds = shared_path("seeds/parapluie_coling2025.txt").read_text() + shared_path("seeds/star-pluie_2026.txt").read_text()
    seed_words = squash(" ".join(re.findall(r"[A-Za-zÀ-ÿ]+", seeds)))
    for name, lines in SEED_LINES.items():
        for line in lines:
            words = [w for w in re.findall(r"[A-Za-zÀ-ÿ]+", line) if w not in {"SRC", "HYP", "ORIG", "INSTR"}]
            if len(words) > 6 and name != "rev-choice":  # rev-choice adapts Rev-PLUIE's wording to a choice
                assert squash(" ".join(words)) in seed_words, f"{name}: {line!r} is not in the seeds"

def test_rev_gold_one_shot(tiny_judge):
    bound = tiny_judge.bind("rev")
    with_gold = bound.render({**ITEM, "gold": "GOLD"})
    assert 'P1: "ORIG"; I: "INSTR"; P2: "GOLD"<|im_end|>\n<|im_start|>assistant\nYes<|im_end|>' in with_gold
    assert "GOLD" not in bound.render({**ITEM, "gold": None})
    scores = tiny_judge.score("rev", original=["o", "o"], instruction=["i", "i"], hypothesis=["h", "h"], gold=["g", None])
    assert scores[0] != scores[1]


def test_plain_rendering_without_chat_template():
    judge = make_tiny_judge(chat=False)
    bound = judge.bind("para-fs")
    text = bound.render({"source": "SRC", "hypothesis": "HYP"})
    assert text.startswith("User: You will receive two sentences")
    assert text.endswith('User: A: "SRC"; B: "HYP"\n\nAssistant: ')  # the answer follows the space
    assert [judge.tokenizer.decode(a) for a in bound.answer_ids] == [" Yes", " No"]


def test_plain_rendering_of_the_judges_own_turn():
    """Without a chat template, the judge's own turn (INDIRECT) starts after the turns before it and the
    assistant label, and its prompt ids are that text's."""
    judge = make_tiny_judge(chat=False)
    bound, values = judge.bind("para-indirect"), {"source": "SRC", "hypothesis": "HYP"}
    text = ("User: You will receive two sentences A and B. Do these two sentences mean the same thing?\n\n"
            "Assistant: Please provide the sentences for me to evaluate.\n\nUser: A: \"SRC\"; B: \"HYP\"\n\nAssistant:")
    assert bound.generation_text(values) == text
    assert bound.encode_generation_prompt(values) == judge.tokenizer(text, add_special_tokens=False)["input_ids"]


def test_multi_token_answer_fails_clearly(tiny_judge):
    base = load_template("para-direct")
    template = Template(**{**base.__dict__, "name": "wordy", "answers": ("Absolutely certain", "No")})
    with pytest.raises(AnswerTokenError, match=r"template 'wordy': answer 'Absolutely certain' is \d+ tokens.*allow_multi_token"):
        tiny_judge.score(template, source=["a"], hypothesis=["b"])


def test_french_template_on_embedded_tokenizer_needs_opt_in(embedded_judge):
    # SmolLM2 splits "oui" in two tokens: a clear error, naming the pieces
    with pytest.raises(AnswerTokenError, match="para-fs-fr.*'oui' is 2 tokens"):
        embedded_judge.score("para-fs-fr", source=["a"], hypothesis=["b"])


def test_yaml_path_and_template_object(tmp_path, tiny_judge):
    path = tmp_path / "mine.yaml"
    path.write_text(
        "name: mine\nfields: [text]\nanswers: {yes: 'Yes', no: 'No'}\n"
        "messages:\n  - role: user\n    content: 'Is this polite? {text}'\n"
    )
    from_path = tiny_judge.score(str(path), text=["Thanks!", "Go away."])
    from_object = tiny_judge.score(load_template(path), text=["Thanks!", "Go away."])
    assert from_path == pytest.approx(from_object, abs=1e-5)
    with pytest.raises(ValueError, match=r"missing field\(s\) \['text'\].*fields \['text'\]"):
        tiny_judge.score(str(path), source=["x"])


def test_bad_template_definitions():
    with pytest.raises(ValueError, match="placeholder {other}"):
        Template.from_dict({"name": "t", "fields": ["a"], "answers": ["Y", "N"],
                            "messages": [{"role": "user", "content": "{a} {other}"}]})
    with pytest.raises(ValueError, match="unknown template 'nope'"):
        load_template("nope")


def test_chat_template_kwargs_in_yaml_and_on_templates():
    base = {"name": "t", "fields": ["a"], "answers": ["Yes", "No"], "messages": [{"role": "user", "content": "{a}?"}]}
    t = Template.from_dict({**base, "chat_template_kwargs": {"enable_thinking": False}})
    assert t.chat_template_kwargs == {"enable_thinking": False}
    more = t.with_chat_template_kwargs({"reasoning_effort": "low"}, enable_thinking=True)
    assert more.chat_template_kwargs == {"enable_thinking": True, "reasoning_effort": "low"}
    assert t.chat_template_kwargs == {"enable_thinking": False}  # unchanged
    from pluie_reward.tools.tune.run import template_to_dict

    assert Template.from_dict(template_to_dict(more)).chat_template_kwargs == more.chat_template_kwargs
    with pytest.raises(ValueError, match="must be a mapping"):
        Template.from_dict({**base, "chat_template_kwargs": ["enable_thinking"]})
    with pytest.raises(ValueError, match="cannot set 'add_generation_prompt'"):
        t.with_chat_template_kwargs(add_generation_prompt=True)


def test_clean_text_is_words_per_line_without_blank_lines():
    """clean_text against a reference written here: each non-blank line's words joined by one space, the lines by
    one newline (texts of spaces, tabs, no-break spaces, \\n and \\r\\n only, where str.split/splitlines agree)."""
    from pluie_reward.core.template import clean_text

    texts = ["A cat.", " A cat.\n", "\n\nA  cat\tsleeps.\r\n\r\nIt purrs. \n", "a\u00a0\u00a0b", "  \n \t", "x\n \ny", "",
             "Line one\n  line two  \n\nline three"]
    for text in texts:
        want = "\n".join(" ".join(line.split()) for line in text.splitlines() if line.strip())
        assert clean_text(text) == want, text
