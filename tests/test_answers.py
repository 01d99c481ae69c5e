"""Answers beyond Yes/No (choices, rating scales) and the judge-generated turn of INDIRECT, against
independent computations written here: greedy generation with transformers, then the seeds' eq. 3 or
a softmax over the answers' logits from a plain forward of the full chat rendering."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from pluie_reward import AnswerTokenError, Judge, Template, load_template
from pluie_reward.core.template import GENERATED
from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer

from conftest import shared_tokenizer
from test_chat_templates import chat_ids, eq3


@pytest.fixture(scope="module")
def judge():
    tokenizer = make_tiny_tokenizer()
    return Judge.from_model(make_tiny_causal_lm(tokenizer, seed=21), tokenizer)


def greedy(model, tokenizer, messages, max_new_tokens: int) -> str:
    """Greedy continuation of the conversation, one prompt alone (no padding), decoded as text."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                             do_sample=False, eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
                             pad_token_id=tokenizer.pad_token_id)
    return tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True).strip()


INDIRECT_ITEMS = {
    "source": ["The cat sleeps on the mat.", "The dog barks at night.", "A bird sings."],
    "hypothesis": ["A cat is sleeping on the mat.", "Paraphrase this sentence.", "The dog barks."],
}


def test_indirect_equals_generate_then_eq3_on_the_whole_conversation(judge):
    template = load_template("para-indirect")
    records = judge.score("para-indirect", **INDIRECT_ITEMS, details=True, max_new_tokens=12)
    model64 = copy.deepcopy(judge.model).double()
    want = []
    for i, record in enumerate(records):
        values = {k: v[i] for k, v in INDIRECT_ITEMS.items()}
        generated = greedy(judge.model, judge.tokenizer, template.chat(values, until_generated=True), 12)
        assert record["generated"] == generated
        want.append(eq3(model64, judge.tokenizer, template.chat({**values, GENERATED: generated}), template.answers))
    got = [r["logratio"] for r in records]
    assert max(want) - min(want) > 1e-2
    assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-3
    # the conversation really contains the generation, then the seed's summary question
    rendered = judge.bind("para-indirect").render({**{k: v[0] for k, v in INDIRECT_ITEMS.items()}, GENERATED: "E!"})
    assert '<|im_start|>assistant\nE!<|im_end|>\n<|im_start|>user\nSummarize your answer with only one word "yes" or "no".' in rendered


def test_indirect_generation_does_not_depend_on_the_batch(judge):
    alone = [judge.score("para-indirect", source=[s], hypothesis=[h], details=True, max_new_tokens=12, use_cache=False)[0]
             for s, h in zip(INDIRECT_ITEMS["source"], INDIRECT_ITEMS["hypothesis"])]
    together = judge.score("para-indirect", **INDIRECT_ITEMS, details=True, max_new_tokens=12, use_cache=False)
    assert [r["generated"] for r in together] == [r["generated"] for r in alone]
    assert [r["logratio"] for r in together] == pytest.approx([r["logratio"] for r in alone], abs=1e-4)


def test_indirect_results_and_generations_are_cached_on_the_full_prompt(judge):
    judge.clear_cache()
    first = judge.score("para-indirect", **INDIRECT_ITEMS, max_new_tokens=8)
    calls = judge.engine.stats["forward_calls"]
    assert judge.score("para-indirect", **INDIRECT_ITEMS, max_new_tokens=8) == first
    assert judge.engine.stats["forward_calls"] == calls
    judge.score("para-indirect", **INDIRECT_ITEMS, max_new_tokens=9)  # another generation length: recomputed
    assert judge.engine.stats["forward_calls"] > calls


def answer_softmax(model, tokenizer, template, values) -> list[float]:
    """p(answer_k) renormalised over the N answers, from one plain forward of the chat rendering cut
    before the answer (the common prefix of the N full renderings)."""
    full = [chat_ids(tokenizer, template.chat(values) + [{"role": "assistant", "content": a}]) for a in template.answers]
    prefix = 0
    while all(len(f) > prefix for f in full) and len({f[prefix] for f in full}) == 1:
        prefix += 1
    answer_ids = [f[prefix] for f in full]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([full[0][:prefix]])).logits[0, -1].double()
    return torch.softmax(logits[answer_ids], dim=0).tolist()


@pytest.mark.parametrize("name", ["rev-choice", "net-choice", "net-likert"])
def test_n_way_answers_equal_a_softmax_over_their_logits(judge, name):
    template = load_template(name)
    if "original" in template.fields:
        fields = {"original": ["We propose a metod.", "Results are good."], "instruction": ["Fix typos."] * 2,
                  "hypothesis": ["We propose a method.", "Results are great."], "alternative": ["We propose a metod.", "Results."]}
    else:
        fields = {"source": ["allow traffic from A to B", "block port 22"], "hypothesis": ["A may reach B.", "Port 22 is closed."]}
        if "alternative" in template.fields:
            fields["alternative"] = ["Nothing is allowed.", "Port 22 is open."]
    records = judge.score(name, **fields, details=True)
    for i, record in enumerate(records):
        want = answer_softmax(judge.model, judge.tokenizer, template, {k: v[i] for k, v in fields.items()})
        got = [record["probs"][label] for label in template.labels]
        assert got == pytest.approx(want, abs=1e-4)
        assert record["choice"] == template.labels[max(range(len(want)), key=want.__getitem__)]
        assert sum(math.exp(lp) for lp in record["logprobs"].values()) == pytest.approx(1.0)
        if template.kind == "scale":
            assert record["expected"] == pytest.approx(sum(p * v for p, v in zip(want, template.values)), abs=1e-4)
            assert record["score"] == record["expected"]
        else:
            assert record["score"] == pytest.approx(math.log(want[0]) - math.log(want[1]), abs=1e-4)
    assert judge.score(name, **fields) == [r["score"] for r in records]


def test_n_way_answers_are_validated_on_the_chat_rendering():
    tokenizer = shared_tokenizer("mistral-7b-instruct-v0.2")
    judge = Judge.from_model(make_tiny_causal_lm(tokenizer), tokenizer)
    assert judge.bind("rev-choice").answer_ids == ((330,), (365,), (334,))  # ▁A ▁B ▁C, as Mistral writes them
    assert tokenizer.convert_ids_to_tokens([330, 365, 334]) == ["▁A", "▁B", "▁C"]
    base = load_template("rev-choice")
    tie = Template(**{**base.__dict__, "name": "tie", "answers": ("A", "B", "Tie")})
    with pytest.raises(AnswerTokenError, match=r"answer 'Tie' is 2 tokens.*'▁T'"):
        judge.bind(tie)


def test_bad_answer_definitions_fail_clearly():
    base = load_template("rev-choice")
    with pytest.raises(ValueError, match="repeat"):
        Template(**{**base.__dict__, "answers": ("A", "A", "C")})
    with pytest.raises(ValueError, match="one number per answer"):
        Template(**{**base.__dict__, "values": (1, 2)})
    with pytest.raises(ValueError, match="name each"):
        Template(**{**base.__dict__, "answer_labels": ("x",)})
    with pytest.raises(ValueError, match="boolean"):
        Template.from_dict({"fields": ["source"], "answers": [True, False], "messages": [{"role": "user", "content": "{source}"}]})
