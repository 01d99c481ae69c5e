"""PluieReward and novelty: TRL's reward contract, bad input, and real GRPO/RLOO runs on tiny models."""

import copy
import functools
import math
import pickle

import pytest

from pluie_reward import Judge, NoveltyReward, PluieReward, novelty
from pluie_reward.engines.transformers.compat import checkpointing_on
from pluie_reward.integrations.fields import completion_text
from pluie_reward.integrations.novelty import edit_distance, novelty_score
from pluie_reward.testing import make_tiny_causal_lm, make_tiny_judge, make_tiny_tokenizer

SOURCES = ["The cat sleeps on the mat and the dog barks at night.", "The dog barks at night in the garden of the house."]
COMPLETIONS = ["A cat is sleeping on the mat.", "The dog sleeps.", "Paraphrase this sentence.", ""]
PROMPTS = [f"Paraphrase this sentence. {s}" for s in SOURCES]


def batch(conversational: bool = False, group: int = 2) -> dict:
    """A TRL-like call: G=group completions per prompt, dataset columns repeated per completion."""
    n = len(COMPLETIONS)
    prompts = [PROMPTS[i // group] for i in range(n)]
    completions = list(COMPLETIONS)
    if conversational:
        prompts = [[{"role": "user", "content": p}] for p in prompts]
        completions = [[{"role": "assistant", "content": c}] for c in completions]
    return {
        "prompts": prompts,
        "completions": completions,
        "src": [SOURCES[i // group] for i in range(n)],
        "completion_ids": [[1]] * n,
        "trainer_state": None,
    }


@pytest.fixture(scope="module")
def reference():
    """An independently built copy of the tiny judge and its scores for the batch."""
    judge = make_tiny_judge(seed=0)
    sources = batch()["src"]
    return judge.score("para-fs", source=sources, hypothesis=COMPLETIONS)


@pytest.mark.parametrize("conversational", [False, True])
def test_reward_matches_judge_scores(tiny_judge, reference, conversational):
    reward = PluieReward(tiny_judge, fields={"source": "src"})
    got = reward(**batch(conversational))
    assert got == pytest.approx(reference, abs=1e-3)
    assert all(math.isfinite(x) for x in got)  # the empty completion too
    assert len(set(round(x, 3) for x in got)) > 2  # scores differ between completions


def test_outputs_are_computed_from_the_logratio(tiny_judge, reference):
    prob = PluieReward(tiny_judge, fields={"source": "src"}, output="prob")(**batch())
    assert prob == pytest.approx([1 / (1 + math.exp(-s)) for s in reference], abs=1e-4)
    c = min(abs(s) for s in reference) + 0.5 * (max(abs(s) for s in reference) - min(abs(s) for s in reference))
    clipped = PluieReward(tiny_judge, fields={"source": "src"}, output="clip", clip=c)(**batch())
    assert clipped == pytest.approx([max(-c, min(c, s)) for s in reference], abs=1e-3)
    assert any(abs(x) == pytest.approx(c) for x in clipped)  # the bound was hit
    with pytest.raises(ValueError, match="unknown output 'sigmoid'"):
        PluieReward(tiny_judge, output="sigmoid")


def test_log_metric_and_log_extra(tiny_judge, reference):
    metrics, extra = {}, {}
    threshold = sorted(reference)[1]  # exactly two of the four scores are above it
    reward = PluieReward(tiny_judge, fields={"source": "src"}, threshold=threshold, name="para")
    reward(**batch(), log_metric=lambda k, v: metrics.setdefault(k, v), log_extra=lambda k, v: extra.setdefault(k, v))
    assert metrics == {"para/accept_rate": 0.5}
    assert extra["para/logratio"] == pytest.approx(reference, abs=1e-3)


def test_trl_sees_a_named_sync_callable(tiny_judge):
    import torch
    from trl.trainer.utils import get_callable_name, is_async_callable

    reward = PluieReward(tiny_judge, name="pluie_para")
    assert get_callable_name(reward) == "pluie_para"
    assert get_callable_name(novelty) == "novelty"
    assert not is_async_callable(reward)
    assert not isinstance(reward, torch.nn.Module)  # TRL would treat a Module as a reward model


def test_prompt_column_and_field_defaults(tiny_judge, reference):
    # fields default to the column of the same name; "prompt" reads the (last user message of the) prompt
    b = batch(conversational=True)
    by_name = PluieReward(tiny_judge)(prompts=b["prompts"], completions=b["completions"], source=b["src"])
    assert by_name == pytest.approx(reference, abs=1e-3)
    from_prompt = PluieReward(tiny_judge, fields={"source": "prompt"})(prompts=b["prompts"], completions=b["completions"])
    want = make_tiny_judge(seed=0).score("para-fs", source=[PROMPTS[i // 2] for i in range(4)], hypothesis=COMPLETIONS)
    assert from_prompt == pytest.approx(want, abs=1e-3)


def test_rev_template_with_optional_gold_column(tiny_judge):
    original, instruction = "We propose a metod for parsing.", "Fix the typos."
    reward = PluieReward(tiny_judge, template="rev", fields={"original": "p1", "instruction": "i", "gold": "ref"})
    completions = ["We propose a method for parsing.", "We parse."]
    got = reward(completions=completions, p1=[original] * 2, i=[instruction] * 2, ref=["We propose a method for parsing.", None])
    judge = make_tiny_judge(seed=0)
    want = [
        judge.score("rev", original=original, instruction=instruction, hypothesis=[completions[0]], gold="We propose a method for parsing.")[0],
        judge.score("rev", original=original, instruction=instruction, hypothesis=[completions[1]])[0],
    ]
    assert got == pytest.approx(want, abs=1e-3)


def test_missing_column_fails_on_first_call_listing_columns(tiny_judge):
    reward = PluieReward(tiny_judge, fields={"source": "sentence1"})
    calls = tiny_judge.engine.stats["forward_calls"]
    with pytest.raises(KeyError, match=r"'sentence1'.*Available columns: \['src', 'prompt'\]"):
        reward(**batch())
    assert tiny_judge.engine.stats["forward_calls"] == calls  # failed before scoring anything


def test_bad_completions_and_fields(tiny_judge):
    reward = PluieReward(tiny_judge, fields={"source": "src"})
    b = batch()
    b["completions"][1] = None
    with pytest.raises(TypeError, match="completion 1 is None"):
        reward(**b)
    b = batch()
    b["completions"][2] = 42
    with pytest.raises(TypeError, match="completion 2: expected a string or a list of chat messages, got int"):
        reward(**b)
    b = batch()
    b["src"] = b["src"][:3]
    with pytest.raises(ValueError, match="column 'src' has 3 values for 4 completions"):
        reward(**b)
    with pytest.raises(ValueError, match=r"'src' is not a field of template 'para-fs'; its fields are \['source', 'hypothesis'\]"):
        PluieReward(tiny_judge, fields={"src": "source"})
    with pytest.raises(ValueError, match="filled by the integration itself"):
        PluieReward(tiny_judge, fields={"hypothesis": "answer"})


def test_a_string_column_is_refused_not_read_as_characters(tiny_judge):
    reward = PluieReward(tiny_judge, fields={"source": "src"})
    with pytest.raises(TypeError, match=r"column 'src' is one string.*\[text\] \* 3"):
        reward(completions=["x", "y", "z"], src="abc")  # was: 'a', 'b' and 'c' as the sources


def test_a_reward_holding_a_loaded_judge_says_how_to_pickle_it(tiny_judge):
    with pytest.raises(TypeError, match=r"PluieReward holds a loaded judge.*factory.*functools.partial"):
        pickle.dumps(PluieReward(tiny_judge))
    assert copy.copy(PluieReward(tiny_judge)).judge is tiny_judge  # a shallow copy needs no pickling


def test_the_group_reward_pickles_as_the_others_do(tiny_judge):
    """GroupPluieReward holding a loaded judge says what to pass (was: the judge's own pickling error); with a
    factory it pickles without the model and builds its judge on first use."""
    from pluie_reward.integrations.group_reward import GroupPluieReward

    with pytest.raises(TypeError, match=r"GroupPluieReward holds a loaded judge.*factory"):
        pickle.dumps(GroupPluieReward(tiny_judge))
    assert copy.copy(GroupPluieReward(tiny_judge)).judge is tiny_judge
    reward = GroupPluieReward(functools.partial(make_tiny_judge, seed=0))
    reward.judge  # built, then dropped by pickling
    restored = pickle.loads(pickle.dumps(reward))
    assert restored._judge is None and restored.judge.name == "tiny-random" and restored.judge is not reward.judge


def test_group_prefix_is_computed_once_per_prompt():
    judge = make_tiny_judge(seed=0)
    reward = PluieReward(judge, fields={"source": "src"})
    reward(**batch(group=2))
    # the template + source prefix is run once per source (2), then one row per completion (4)
    assert judge.engine.stats["prefix_passes"] == 2
    assert judge.engine.stats["rows"] == 4


def test_pickles_without_the_model_when_given_a_factory(reference):
    reward = PluieReward(functools.partial(make_tiny_judge, seed=0), fields={"source": "src"})
    before = reward(**batch())
    blob = pickle.dumps(reward)
    assert len(blob) < 20_000  # no weights inside
    copy = pickle.loads(blob)
    assert copy(**batch()) == pytest.approx(before, abs=1e-6)
    assert before == pytest.approx(reference, abs=1e-3)
    assert pickle.loads(pickle.dumps(novelty))(completions=["A b."], source=["A b."]) == [0.0]


# novelty ------------------------------------------------------------------------------------------
def test_edit_distance_and_novelty_by_hand():
    assert edit_distance(list("kitten"), list("sitting")) == 3
    assert edit_distance([], ["a", "b"]) == 2
    assert novelty_score("The cat sleeps.", "The cat sleeps.") == 0.0
    assert novelty_score("The cat sleeps.", "the CAT sleeps .") == 0.0  # case and spacing are not novelty
    # [the, cat, sleeps] -> [a, cat, is, asleep]: 2 substitutions + 1 insertion over 4 words (punctuation is no word)
    assert novelty_score("The cat sleeps.", "A cat is asleep.") == pytest.approx(3 / 4)
    assert novelty_score("The cat sleeps.", "The cat, sleeps!!") == 0.0  # nor are punctuation marks
    assert novelty_score("The cat sleeps.", "Dogs bark loudly") == 1.0
    assert novelty_score("The cat sleeps.", "") == 0.0  # generating nothing is not novelty


def test_novelty_reward_contract():
    conv = [[{"role": "assistant", "content": "A cat is asleep."}], [{"role": "assistant", "content": "The cat sleeps."}]]
    assert novelty(prompts=["p", "p"], completions=conv, source=["The cat sleeps."] * 2) == pytest.approx([0.75, 0.0])
    from_prompt = NoveltyReward("prompt")(prompts=["The cat sleeps."], completions=["The cat sleeps."])
    assert from_prompt == [0.0]
    with pytest.raises(KeyError, match=r"'source', which is not in the batch. Available columns: \['src', 'prompt'\]"):
        novelty(prompts=["p"], completions=["x"], src=["y"], trainer_state=None)
    assert completion_text([{"role": "assistant", "content": [{"type": "text", "text": "Hi"}, {"type": "image"}]}]) == "Hi"


def test_novelty_up_to_a_target():
    # [the, cat, sleeps, on, the, mat]: "A cat sleeps on the mat." changes 1 word of 6 -> 1/6, "/ 0.3" -> 0.556;
    # "On the mat, the cat sleeps." -> novelty 0.75 >= 0.3 -> 1.0 (capped); a copy -> 0
    capped = NoveltyReward("source", "novelty_to_target", target=0.3)
    got = capped(completions=["A cat sleeps on the mat.", "On the mat, the cat sleeps.", "the cat sleeps on the mat"],
                 source=["The cat sleeps on the mat."] * 3)
    assert got == pytest.approx([(1 / 6) / 0.3, 1.0, 0.0])
    assert capped.__name__ == "novelty_to_target" and pickle.loads(pickle.dumps(capped)).target == 0.3
    for bad in (0, 1.5, True, "0.3"):
        with pytest.raises(ValueError, match="target must be a novelty in"):
            NoveltyReward("source", target=bad)


# real trainer runs --------------------------------------------------------------------------------
def _dataset(conversational: bool):
    from datasets import Dataset

    sources = ["The cat sleeps on the mat.", "The dog barks at night.", "A cat is sleeping.", "The dog sleeps."]
    prompts = [f"Paraphrase this sentence. {s}" for s in sources]
    if conversational:
        prompts = [[{"role": "user", "content": p}] for p in prompts]
    return Dataset.from_dict({"prompt": prompts, "source": sources})


class Recording(PluieReward):
    """Keeps what TRL passed and what the reward returned, to check them independently."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.calls = []

    def state(self):
        model = self.judge.model
        return (
            [m.training for m in model.modules()],
            model.active_adapter,
            checkpointing_on(model.base_model.model),
            {n: p.requires_grad for n, p in model.named_parameters()},
        )

    def __call__(self, prompts=None, completions=None, **kwargs):
        before = self.state()
        out = super().__call__(prompts=prompts, completions=completions, **kwargs)
        self.calls.append(([completion_text(c) for c in completions], list(kwargs["source"]), out, before, self.state()))
        return out


def _run(trainer_name: str, conversational: bool, tmp_path):
    import torch
    from peft import LoraConfig
    from peft import get_peft_model
    import trl

    torch.manual_seed(0)
    tokenizer = make_tiny_tokenizer()
    policy = get_peft_model(make_tiny_causal_lm(tokenizer, seed=0), LoraConfig(r=4, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    reward = Recording(Judge.from_peft(policy, tokenizer), fields={"source": "source"})
    common = dict(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, max_completion_length=6,
        max_steps=2, logging_steps=1, report_to=[], use_cpu=True, gradient_checkpointing=True,
        save_strategy="no", learning_rate=1e-3, reward_weights=[1.0, 0.5], disable_tqdm=True,
    )
    config_cls, trainer_cls = (trl.GRPOConfig, trl.GRPOTrainer) if trainer_name == "grpo" else (trl.RLOOConfig, trl.RLOOTrainer)
    trainer = trainer_cls(
        model=policy, reward_funcs=[reward, novelty], args=config_cls(**common),
        train_dataset=_dataset(conversational), processing_class=tokenizer,
    )
    trainer.train()
    return trainer, reward, tokenizer


@pytest.mark.parametrize("trainer_name,conversational", [("grpo", False), ("grpo", True), ("rloo", False)])
def test_real_trainer_run_logs_pluie_rewards(trainer_name, conversational, tmp_path):
    trainer, reward, tokenizer = _run(trainer_name, conversational, tmp_path)
    logs = [r for r in trainer.state.log_history if "rewards/pluie/mean" in r]
    assert len(logs) == 2 and len(reward.calls) == 2
    reference = Judge.from_model(make_tiny_causal_lm(tokenizer, seed=0), tokenizer)  # a separate base copy
    for log, (completions, sources, returned, before, after) in zip(logs, reward.calls):
        assert before[0][0] and before[2]  # TRL calls rewards with the policy in train mode, checkpointing on
        assert after == before  # the policy's modes, adapter, checkpointing and requires_grad, mid-training
        assert len(completions) == 4 and all(isinstance(c, str) for c in completions)
        # the shared judge scored with the base weights, mid-training
        assert returned == pytest.approx(reference.score("para-fs", source=sources, hypothesis=completions), abs=1e-3)
        assert log["rewards/pluie/mean"] == pytest.approx(sum(returned) / 4, abs=1e-3)
        want_novelty = [novelty_score(s, c) for s, c in zip(sources, completions)]
        assert log["rewards/novelty/mean"] == pytest.approx(sum(want_novelty) / 4, abs=1e-4)
        assert 0.0 <= log["pluie/accept_rate"] <= 1.0
        assert math.isfinite(log["reward"])


def test_async_reward_is_awaited_and_matches(tiny_judge, reference):
    import asyncio

    from trl.trainer.utils import is_async_callable

    from pluie_reward import AsyncPluieReward

    reward = AsyncPluieReward(tiny_judge, fields={"source": "src"}, name="pluie_async")
    assert is_async_callable(reward)
    assert asyncio.run(reward(**batch(conversational=True))) == pytest.approx(reference, abs=1e-3)
