"""Judge.score against an independent implementation of the seeds' eq. 3 (two passes, mean losses), on tiny
random models. The embedded default judge's real weights are checked the same way, under the engine's
settings, against eq. 3 on its unmerged adapter (tests/test_default_judge.py)."""

import random

import pytest
import torch
import yaml

from pluie_reward import Judge
from pluie_reward.testing import make_tiny_judge

from conftest import mrpc_pairs


def seed_messages(name: str) -> list[dict]:
    """The template's chat turns read straight from the package's YAML file (not via the package)."""
    import pluie_reward

    from pathlib import Path

    path = Path(pluie_reward.__file__).parent / "templates" / f"{name}.yaml"
    return yaml.safe_load(path.read_text())["messages"]


def reference_pluie(model, tokenizer, source: str, hypothesis: str, template: str = "para-fs",
                    answers=("Yes", "No")) -> float:
    """(T+1) * (loss(prompt o No) - loss(prompt o Yes)) with two full forward passes.

    The dialogue is rendered with the answer as the assistant turn and the end-of-turn marker cut
    off (star-pluie appendix A); T+1 is the number of tokens the mean loss averages over.
    """
    turns = [dict(m) for m in seed_messages(template)]
    turns[-1]["content"] = turns[-1]["content"].replace("{source}", source).replace("{hypothesis}", hypothesis)
    losses = {}
    for answer in answers:
        text = tokenizer.apply_chat_template(turns + [{"role": "assistant", "content": answer}], tokenize=False)
        text = text[: text.rindex(answer) + len(answer)]
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0].double()  # float64 mean: float32 loses ~1e-3 over 10^3 tokens
        loss = torch.nn.functional.cross_entropy(logits[:-1], ids[0, 1:])
        losses[answer] = (loss, ids.shape[1] - 1)
    (loss_yes, n_yes), (loss_no, n_no) = losses[answers[0]], losses[answers[1]]
    return float(n_no * loss_no - n_yes * loss_yes)


SETTINGS = [(64, False), (700, True), (100_000, False), (2048, True)]


def check_against_reference(judge: Judge, n: int, settings=SETTINGS) -> None:
    sources, hypotheses, _ = mrpc_pairs(n)
    reference = [reference_pluie(judge.model, judge.tokenizer, s, h) for s, h in zip(sources, hypotheses)]
    assert max(reference) - min(reference) > 0.05, "reference scores do not vary: the test could not fail"
    order = list(range(n))
    random.Random(0).shuffle(order)
    for batch_tokens, use_cache in settings:
        judge.clear_cache()
        judge.engine.batch_tokens = batch_tokens
        # shuffled inputs: results must come back in input order
        got = judge.score("para-fs", source=[sources[i] for i in order],
                          hypothesis=[hypotheses[i] for i in order], use_cache=use_cache)
        got = [got[order.index(i)] for i in range(n)]
        diff = max(abs(a - b) for a, b in zip(got, reference))
        assert diff <= 1e-3, f"batch_tokens={batch_tokens} cache={use_cache}: max |diff| = {diff}"
        # second call served from the result cache
        again = judge.score("para-fs", source=sources, hypothesis=hypotheses, use_cache=use_cache)
        assert max(abs(a - b) for a, b in zip(again, reference)) <= 1e-3
    judge.engine.batch_tokens = None


def test_tiny_random_model_matches_reference():
    check_against_reference(make_tiny_judge(seed=3), n=24)


def test_group_reuse_matches_reference(tiny_judge):
    """Many hypotheses after one source (GRPO shape) use the group prefix; scores stay exact."""
    sources, hypotheses, _ = mrpc_pairs(8)
    source = sources[0]
    reference = [reference_pluie(tiny_judge.model, tiny_judge.tokenizer, source, h) for h in hypotheses]
    tiny_judge.clear_cache()
    calls = tiny_judge.engine.stats["prefix_passes"]
    got = tiny_judge.score("para-fs", source=source, hypothesis=hypotheses, use_cache=False)
    assert tiny_judge.engine.stats["prefix_passes"] > calls  # a group prefix was computed
    assert max(abs(a - b) for a, b in zip(got, reference)) <= 1e-3


def test_multi_token_answers_follow_eq4():
    """With allow_multi_token, the score is sum log p(yes tokens) - sum log p(no tokens) (eq. 4)."""
    judge = make_tiny_judge(seed=1, allow_multi_token=True)
    from pluie_reward import Template, load_template

    base = load_template("para-direct")
    template = Template(**{**base.__dict__, "name": "multi", "answers": ("Yes indeed", "No")})
    source, hypothesis = "The cat sleeps.", "A cat is sleeping."
    turns = [dict(m) for m in seed_messages("para-direct")]
    turns[-1]["content"] = f'A: "{source}"; B: "{hypothesis}"'
    prompt = judge.tokenizer.apply_chat_template(turns, tokenize=False, add_generation_prompt=True)
    sums = []
    for answer in template.answers:
        prompt_ids = judge.tokenizer(prompt, add_special_tokens=False).input_ids
        ids = judge.tokenizer(prompt + answer, add_special_tokens=False).input_ids
        with torch.no_grad():
            logp = torch.log_softmax(judge.model(torch.tensor([ids])).logits[0].double(), -1)
        sums.append(sum(float(logp[t - 1, ids[t]]) for t in range(len(prompt_ids), len(ids))))
    got = judge.score(template, source=[source], hypothesis=[hypothesis])[0]
    assert abs(got - (sums[0] - sums[1])) <= 1e-3


def test_plain_path_matches_reference():
    """With the fast path off (whole prompts, the model's own attention) scores stay exact, groups included."""
    judge = make_tiny_judge(seed=4)
    judge.engine.fast = False
    sources, hypotheses, _ = mrpc_pairs(6)
    sources = sources[:3] + [sources[0]] * 3  # three loose items and a group of three
    reference = [reference_pluie(judge.model, judge.tokenizer, s, h) for s, h in zip(sources, hypotheses)]
    with pytest.warns(RuntimeWarning, match="without prefix caching"):
        got = judge.score("para-fs", source=sources, hypothesis=hypotheses, use_cache=False)
    assert max(abs(a - b) for a, b in zip(got, reference)) <= 1e-3
    assert judge.engine.stats["prefix_passes"] == 0 and judge.engine.stats["plain_rows"] == 6
