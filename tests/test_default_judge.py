"""The default judge: the embedded SmolLM2-135M-Instruct with the packaged PLUIE adapter, merged.

Its scores are checked against an independent two-pass eq. 3 on the *unmerged* PEFT model (base +
adapter), so a wrong merge, a missing adapter or the base loaded instead all show; the same reference
checks the engine's settings on these real weights (the tiny model covers them at length in
``tests/test_reference.py``)."""

from __future__ import annotations

import copy
import json

import pytest

from pluie_reward import Judge, load_template
from pluie_reward.engines.transformers.engine import TransformersEngine
from pluie_reward.engines.transformers.loading import (
    EMBEDDED_NAME,
    display_name,
    load_adapter,
    load_model_and_tokenizer,
    load_tokenizer,
    model_source,
)
from pluie_reward.engines.vllm import VLLMEngine
from pluie_reward.judges import DEFAULT_ADAPTER_DIR, DEFAULT_TEMPLATE, default_adapter_dir

from conftest import load_script
from test_chat_templates import eq3

PAIRS = {
    "source": ["The cat sleeps on the mat.", "The cat sleeps on the mat.", "Prices rose sharply in March."],
    "hypothesis": ["A cat is sleeping on the mat.", "The stock market closed early on Friday.", "In March, prices went up steeply."],
}


@pytest.fixture
def default_judge(embedded_judge):
    """``Judge.load()``: the session's copy (tests/conftest.py), back on its default batch size after each test."""
    yield embedded_judge
    embedded_judge.engine.batch_tokens = None


def test_the_package_ships_the_adapter_and_its_card():
    assert default_adapter_dir() == DEFAULT_ADAPTER_DIR
    card = json.loads((DEFAULT_ADAPTER_DIR / "pluie_tune.json").read_text())
    data = json.loads((DEFAULT_ADAPTER_DIR / "data.json").read_text())
    assert card["template"] == DEFAULT_TEMPLATE
    assert "ms-mrpc.json" in data["held_out_never_trained_on"]
    assert set(data["sources"]) == {"synthetic", "snli", "sts", "simp", "hard"}
    assert all("CC" in s["what"] or "Apache" in s["what"] for s in data["sources"].values())  # every licence said
    assert not any("-NC" in s["what"] for s in data["sources"].values())  # no non-commercial data in Apache-2.0 weights
    assert not {"ms-mrpc.json", "amr_true_paraphrases.json", "fb-anli-pre-hyp.json"} & {s["what"].split()[2] for s in data["sources"].values()}
    positives = sum(s["paraphrase"] for s in data["sources"].values())
    assert positives == sum(s["not"] for s in data["sources"].values())  # balanced
    size = sum(p.stat().st_size for p in DEFAULT_ADAPTER_DIR.iterdir())
    assert size < 20_000_000, size  # small package data


def test_a_forgotten_default_adapter_is_an_error_not_the_untuned_model():
    """Every function that resolves ``None``/"embedded" to a model takes the default judge's adapter as a
    required keyword (``None``: the untuned model, said explicitly)."""
    calls = [lambda: display_name(None), lambda: model_source(None), lambda: load_tokenizer(),
             lambda: load_model_and_tokenizer(), lambda: TransformersEngine.load(), lambda: VLLMEngine.load()]
    for call in calls:
        with pytest.raises(TypeError, match="default_adapter"):
            call()
    assert display_name(None, default_adapter=None) == EMBEDDED_NAME
    assert display_name("embedded", default_adapter=DEFAULT_ADAPTER_DIR) == f"{EMBEDDED_NAME}+{DEFAULT_ADAPTER_DIR.name}"


@pytest.mark.slow  # ~25 s on 2 cores, ~55 s on one pytest-xdist worker's single thread
def test_default_judge_scores_equal_eq3_on_the_unmerged_adapter(default_judge, embedded_base_judge):
    """Under the engine's settings too: its default, small batches (64 tokens) and one batch, the result
    cache off and on (then a second call served from it), inputs shuffled (results come back in input order)."""
    assert default_judge.name == f"{EMBEDDED_NAME}+{DEFAULT_ADAPTER_DIR.name}"
    base, tokenizer = load_model_and_tokenizer("embedded-base", default_adapter=None)
    unmerged = copy.deepcopy(load_adapter(base, DEFAULT_ADAPTER_DIR)).double()
    template = load_template(DEFAULT_TEMPLATE)
    want = [eq3(unmerged, tokenizer, template.chat({"source": s, "hypothesis": h}), template.answers)
            for s, h in zip(PAIRS["source"], PAIRS["hypothesis"])]
    assert max(want) - min(want) > 0.05, "the reference scores do not vary: the comparisons could not fail"
    got = default_judge.score(DEFAULT_TEMPLATE, **PAIRS)
    assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-3, (got, want)
    order = [2, 0, 1]
    for batch_tokens, use_cache in [(64, False), (100_000, True)]:
        default_judge.clear_cache()
        default_judge.engine.batch_tokens = batch_tokens
        shuffled = default_judge.score(DEFAULT_TEMPLATE, source=[PAIRS["source"][i] for i in order],
                                       hypothesis=[PAIRS["hypothesis"][i] for i in order], use_cache=use_cache)
        got = [shuffled[order.index(i)] for i in range(len(order))]
        assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-3, (batch_tokens, use_cache, got, want)
        again = default_judge.score(DEFAULT_TEMPLATE, **PAIRS, use_cache=use_cache)
        assert max(abs(a - b) for a, b in zip(again, want)) <= 1e-3, (batch_tokens, use_cache, again, want)
    base_judge = embedded_base_judge
    assert base_judge.name == EMBEDDED_NAME
    untuned = base_judge.score(DEFAULT_TEMPLATE, **PAIRS)
    assert max(abs(a - b) for a, b in zip(got, untuned)) > 0.5  # the adapter is really there


def test_default_judge_says_yes_to_the_readme_pair_and_no_to_an_unrelated_sentence(default_judge):
    yes, no, paraphrase = default_judge.score(DEFAULT_TEMPLATE, **PAIRS)
    assert yes > 0 > no
    assert paraphrase > no


def test_an_adapter_without_a_model_goes_on_the_untuned_base(default_judge):
    judge = Judge.load(adapter=DEFAULT_ADAPTER_DIR)  # the packaged adapter, unmerged, on the base
    assert judge.name == f"{EMBEDDED_NAME}+{DEFAULT_ADAPTER_DIR.name}"
    merged = default_judge
    a = judge.score(DEFAULT_TEMPLATE, **PAIRS)
    b = merged.score(DEFAULT_TEMPLATE, **PAIRS)
    assert max(abs(x - y) for x, y in zip(a, b)) <= 1e-3


@pytest.mark.parametrize("name", ["ms-mrpc.json", "fb-anli-pre-hyp.json", "amr_true_paraphrases.json", "sickr-sts.json"])
def test_the_build_refuses_held_out_and_non_commercial_files(name, tmp_path):
    (tmp_path / name).write_text("{}")
    with pytest.raises(ValueError, match="held-out benchmark|licence"):
        load_script("build_judge")._rows(tmp_path, name)


def test_load_warms_the_embedded_judge_up():
    """Judge.load returns the embedded judge ready: para-fs bound and its prefix computed, so that the first
    call computes no prefix; warm_up=False leaves it cold."""
    cold = Judge.load(warm_up=False)
    assert cold.engine.stats["prefix_passes"] == 0
    warm = Judge.load()
    passes = warm.engine.stats["prefix_passes"]
    assert passes == 1
    fields = {"source": ["The cat sleeps."], "hypothesis": ["A cat is asleep."]}
    got = warm.score("para-fs", **fields)
    assert warm.engine.stats["prefix_passes"] == passes  # the first real call reused it
    assert got == pytest.approx(cold.score("para-fs", **fields), abs=1e-5)
    assert cold.engine.stats["prefix_passes"] == 1


RACE = """
import threading, torch
from pluie_reward.engines.transformers.loading import load_model_and_tokenizer
from pluie_reward.judges import default_adapter_dir
alone = load_model_and_tokenizer(default_adapter=default_adapter_dir())[0].state_dict()
loaded, errors = [None] * 3, []
def load(i):
    try:
        loaded[i] = load_model_and_tokenizer(default_adapter=default_adapter_dir(), device="cpu")[0].state_dict()
    except Exception as err:
        errors.append(repr(err))
threads = [threading.Thread(target=load, args=(i,)) for i in range(3)]
[thread.start() for thread in threads]
[thread.join() for thread in threads]
same = all(s.keys() == alone.keys() and all(torch.equal(s[k], alone[k]) for k in alone) for s in loaded if s is not None)
print("RESULT", errors[:1], same)
"""


def test_judges_loaded_at_once_in_threads_are_the_judge_loaded_alone():
    """TRL's async trainer calls its rewards in threads, so two reward factories load their judges at once: transformers'
    from_pretrained sets torch-wide state while it builds a model (the meta device), and three loads at once in a fresh
    process failed ("Cannot copy out of meta tensor") in each of 3 tries before loads were serialised."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True, timeout=600)
    assert "RESULT [] True" in done.stdout, (done.stdout + done.stderr)[-3000:]
