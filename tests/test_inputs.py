"""Bad input gets a clear error; odd but valid input gets a finite score."""

import math
import warnings

import pytest

from pluie_reward.testing import make_tiny_judge


def test_none_and_non_strings_name_field_and_index(tiny_judge):
    with pytest.raises(TypeError, match=r"field 'hypothesis', item 1: expected a string, got NoneType"):
        tiny_judge.score("para-fs", source=["a", "b"], hypothesis=["x", None])
    with pytest.raises(TypeError, match=r"field 'source', item 0: expected a string, got int"):
        tiny_judge.score("para-fs", source=[3], hypothesis=["x"])
    with pytest.raises(TypeError, match="field 'source' must be a string or a list"):
        tiny_judge.score("para-fs", source=3, hypothesis=["x"])


def test_lengths_must_match(tiny_judge):
    with pytest.raises(ValueError, match="different lengths"):
        tiny_judge.score("para-fs", source=["a", "b"], hypothesis=["x"])


def test_missing_and_unknown_fields_list_the_template_fields(tiny_judge):
    with pytest.raises(ValueError, match=r"missing field\(s\) \['hypothesis'\].*\['source', 'hypothesis'\]"):
        tiny_judge.score("para-fs", source=["a"])
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['candidate'\]"):
        tiny_judge.score("para-fs", source=["a"], hypothesis=["b"], candidate=["c"])


def test_a_field_named_self_is_an_unknown_field_not_a_python_error(tiny_judge):
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['self'\]"):
        tiny_judge.score("para-fs", source=["a"], hypothesis=["b"], **{"self": ["c"]})
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['self'\]"):
        tiny_judge.plan("para-fs", source=["a"], hypothesis=["b"], **{"self": ["c"]})


@pytest.mark.parametrize("threshold, error", [(float("nan"), ValueError), (float("inf"), ValueError), (10**400, ValueError),
                                              ("1", TypeError), (True, TypeError)],
                         ids=["nan", "inf", "400 digits", "str", "bool"])
def test_threshold_of_a_call_must_be_a_finite_number(tiny_judge, threshold, error):
    with pytest.raises(error, match=r"threshold must be a finite number .*got"):
        tiny_judge.score("para-fs", source=["a"], hypothesis=["b"], threshold=threshold)
    record = tiny_judge.score("para-fs", source=["a"], hypothesis=["b"], threshold=-1, details=True)[0]
    assert record["verdict"] == (record["logratio"] > -1)  # an int threshold is a number


def test_empty_strings_and_empty_batch(tiny_judge):
    scores = tiny_judge.score("para-fs", source=["", "a"], hypothesis=["", ""])
    assert all(math.isfinite(s) for s in scores)
    assert tiny_judge.score("para-fs", source=[], hypothesis=[]) == []


def test_single_string_broadcasts(tiny_judge):
    one = tiny_judge.score("para-fs", source="The cat.", hypothesis=["A cat.", "A dog."])
    each = tiny_judge.score("para-fs", source=["The cat.", "The cat."], hypothesis=["A cat.", "A dog."])
    assert one == pytest.approx(each, abs=1e-4)


def test_details_records(tiny_judge):
    records = tiny_judge.score("para-fs", source=["a", "b"], hypothesis=["a", "c"], details=True, threshold=-1e9)
    for r in records:
        assert set(r) == {"logratio", "p_yes", "verdict"}
        assert r["p_yes"] == pytest.approx(1 / (1 + math.exp(-r["logratio"])))
        assert r["verdict"] is True


def test_overlong_prompt_is_truncated_from_the_middle():
    judge = make_tiny_judge()
    judge.model.config.max_position_embeddings = 1400  # para-fs alone is ~1240 tokens here
    long_text = "START " + "word " * 2000 + " END"
    with pytest.warns(UserWarning, match=r"item 1: prompt longer than the judge's context.*\['hypothesis'\]"):
        scores = judge.score("para-fs", source=["a", "a"], hypothesis=["short", long_text])
    assert all(math.isfinite(s) for s in scores)
    bound = judge.bind("para-fs")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        items = bound.encode_items({"source": ["a"], "hypothesis": [long_text]}, 1)
    text = judge.tokenizer.decode(items[0].ids)
    assert len(items[0].ids) < 1400 and "START" in text and "END" in text
    with pytest.raises(ValueError, match="longer than the judge's context.*truncate=True"):
        judge.score("para-fs", source=["a"], hypothesis=[long_text], truncate=False)


def test_weight_change_invalidates_caches():
    import torch

    judge = make_tiny_judge(seed=5)
    before = judge.score("para-fs", source=["a"], hypothesis=["b"])
    with torch.no_grad():
        judge.model.lm_head.weight.mul_(2.0)
    after = judge.score("para-fs", source=["a"], hypothesis=["b"])
    assert after[0] == pytest.approx(2 * before[0], rel=1e-3)


def test_model_state_is_restored(tiny_judge):
    tiny_judge.model.train()
    tiny_judge.score("para-fs", source=["a"], hypothesis=["b"])
    assert tiny_judge.model.training
    tiny_judge.model.eval()


def test_scores_ignore_ambient_autocast():
    """Under a trainer's bf16 autocast the judge still scores in its own float32 weights."""
    import torch

    judge = make_tiny_judge(seed=2)
    items = {"source": ["The cat sleeps.", "x"], "hypothesis": ["A cat sleeps.", "y"]}
    reference = judge.score("para-fs", use_cache=False, **items)
    with torch.no_grad():  # bf16 autocast really changes this model's logit differences
        ids = torch.tensor([judge.bind("para-fs").encode_items({k: v[:1] for k, v in items.items()}, 1)[0].ids])
        plain = judge.model(ids).logits[0, -1].float()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = judge.model(ids).logits[0, -1].float()
    assert (plain - mixed).abs().max() > 1e-3
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = judge.score("para-fs", use_cache=False, **items)
    assert got == pytest.approx(reference, abs=1e-4)
