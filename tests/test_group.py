"""Group-relative judging against an independent softmax over the label logits of a plain forward,
with the orders of the group permuted by hand."""

from __future__ import annotations

import copy
import math

import pytest

from pluie_reward.integrations.group import judge_groups, load_group_template, residual_bias, shifts
from pluie_reward.integrations.group_reward import GroupPluieReward
from pluie_reward.testing import make_tiny_judge

from test_chat_templates import answer_probs, load_tokenizer, tiny_model

SOURCE = "The committee approved the budget on Monday."
CANDIDATES = ["On Monday the committee passed the budget.", "The weather was cold.", SOURCE]
QUESTION = ("You will receive a sentence S and 3 candidate paraphrases of it, labelled A to C. Which candidate is the "
            "best paraphrase of S: it means the same thing as S, is fluent, and does not just copy S? Answer with only its letter.")


def by_hand(judge, slots_per_order):
    """log p(best = candidate) from plain forwards: each order's slots written out, softmax over A/B/C."""
    model64 = copy.deepcopy(judge.model).double()
    per_candidate = {c: [] for c in CANDIDATES}
    for slots in slots_per_order:
        shown = "\n".join(f'{label}: "{text}"' for label, text in zip("ABC", slots))
        messages = [{"role": "user", "content": QUESTION},
                    {"role": "assistant", "content": "Please provide the sentence and the candidates."},
                    {"role": "user", "content": f'S: "{SOURCE}"\n{shown}'}]
        probs = answer_probs(model64, judge.tokenizer, messages, ["A", "B", "C"])
        for slot, text in enumerate(slots):
            per_candidate[text].append(math.log(probs[slot]))
    means = [sum(v) / len(v) for v in per_candidate.values()]
    norm = math.log(sum(math.exp(m) for m in means))
    return [m - norm for m in means]


@pytest.fixture(scope="module")
def judge():
    return make_tiny_judge(seed=3)


def test_group_probabilities_equal_a_plain_forward_over_hand_permuted_orders(judge):
    a, b, c = CANDIDATES
    got = judge_groups(judge, "para-group", [CANDIDATES], source=SOURCE)[0]
    # shift s puts candidate i in slot (i + s) mod 3
    want = by_hand(judge, [[a, b, c], [c, a, b], [b, c, a]])
    assert got["shifts"] == [0, 1, 2]
    assert got["logp_best"] == pytest.approx(want, abs=1e-4)
    assert sum(got["p_best"]) == pytest.approx(1.0) and got["best"] == max(range(3), key=want.__getitem__)
    one = judge_groups(judge, "para-group", [CANDIDATES], source=SOURCE, orders=1)[0]
    assert one["logp_best"] == pytest.approx(by_hand(judge, [[a, b, c]]), abs=1e-4)
    assert max(abs(x - y) for x, y in zip(one["logp_best"], want)) > 1e-3  # orders matter on this judge


def test_identical_candidates_show_the_position_bias_and_all_orders_cancel_it(judge):
    same = [CANDIDATES[0]] * 4
    one = judge_groups(judge, "para-group", [same], source=SOURCE, orders=1)[0]
    slot_bias = one["per_order"][0]                        # the judge's preference per slot, content equal
    assert max(slot_bias) - min(slot_bias) > 1e-3
    assert one["logp_best"] == pytest.approx(slot_bias, abs=1e-9)
    every = judge_groups(judge, "para-group", [same], source=SOURCE)[0]
    assert every["p_best"] == pytest.approx([0.25] * 4, abs=1e-9)
    two = judge_groups(judge, "para-group", [same], source=SOURCE, orders=2)[0]
    spread = max(two["logp_best"]) - min(two["logp_best"])
    assert spread == pytest.approx(residual_bias(slot_bias, 2), abs=1e-6) and spread <= max(slot_bias) - min(slot_bias)


def test_groups_of_several_sizes_in_one_call_keep_their_order(judge):
    groups = [CANDIDATES, CANDIDATES[:2], ["x", "y", "z", "w", "v"]]
    out = judge_groups(judge, "para-group", groups, source=[SOURCE, SOURCE, "s"])
    assert [len(r["p_best"]) for r in out] == [3, 2, 5]
    alone = [judge_groups(judge, "para-group", [g], source=s)[0]["logp_best"] for g, s in zip(groups, [SOURCE, SOURCE, "s"])]
    for result, want in zip(out, alone):
        assert result["logp_best"] == pytest.approx(want, abs=1e-5)


def test_shifts_and_residual_bias_by_hand():
    assert shifts(8, 4) == [0, 2, 4, 6] and shifts(6, 4) == [0, 1, 3, 4] and shifts(5, 5) == [0, 1, 2, 3, 4]
    # slot bias 0, -1, -2, -3: two orders (shifts 0, 2) give candidates (0 + -2)/2, (-1 + -3)/2, ... -> spread 1
    assert residual_bias([0, -1, -2, -3], 2) == pytest.approx(1.0)
    assert residual_bias([0, -1, -2, -3], None) == 0.0
    with pytest.raises(ValueError, match="orders must be an integer from 1 to the group size 4"):
        shifts(4, 5)


@pytest.mark.parametrize("name", ["mistral-7b-instruct-v0.2", "llama3-8b-instruct", "qwen25-7b-instruct", "qwen3-8b", "gpt-oss-20b"])
def test_sixteen_labels_bind_as_one_token_each_on_real_tokenizers(name):
    from pluie_reward import Judge

    tokenizer = load_tokenizer(name)
    judge = Judge.from_model(tiny_model(len(tokenizer)), tokenizer)
    for template in ("para-group", "rev-group", "trans-group"):
        bound = judge.bind(load_group_template(template).for_size(16))
        assert len(bound.answer_ids) == 16 and all(len(ids) == 1 for ids in bound.answer_ids)


def test_group_template_errors():
    group = load_group_template("para-group")
    with pytest.raises(ValueError, match="2 to 16 candidates"):
        group.for_size(17)
    with pytest.raises(ValueError, match="missing \\['source'\\]"):
        judge_groups(make_tiny_judge(), "para-group", [["a", "b"]])
    with pytest.raises(TypeError, match="group 0 must be a list"):
        judge_groups(make_tiny_judge(), "para-group", ["ab"], source="s")


def test_group_reward_splits_trl_groups_and_reads_each_output(judge):
    prompts = ["p1"] * 3 + ["p2"] * 2
    completions = CANDIDATES + ["Hello there.", "Hi."]
    sources = [SOURCE] * 3 + ["Hello."] * 2
    logged = {}
    prob = GroupPluieReward(judge, "para-group", output="prob")(prompts=prompts, completions=completions, source=sources,
                                                               log_metric=logged.__setitem__)
    first = judge_groups(judge, "para-group", [CANDIDATES], source=SOURCE)[0]
    assert prob[:3] == pytest.approx(first["p_best"], abs=1e-6)
    assert sum(prob[3:]) == pytest.approx(1.0) and logged["pluie_group/groups"] == 2.0
    centered = GroupPluieReward(judge, "para-group", output="centered")(prompts=prompts, completions=completions, source=sources)
    assert sum(centered[:3]) == pytest.approx(0.0, abs=1e-9)
    assert centered[:3] == pytest.approx([v - sum(first["logp_best"]) / 3 for v in first["logp_best"]], abs=1e-6)
    fixed = GroupPluieReward(judge, "para-group", group_size=5)
    with pytest.raises(ValueError, match="are not groups of 5"):
        fixed(prompts=prompts[:4], completions=completions[:4], source=sources[:4])
    with pytest.raises(ValueError, match="no other completion of the same prompt"):
        GroupPluieReward(judge)(prompts=["a", "b"], completions=["x", "y"], source=["s", "t"])


FOUR = CANDIDATES + ["The budget was approved by the committee."]


def _grpo_trainer(reward, num_generations, num_generations_eval=None):
    """A TRL GRPOTrainer holding only what its own ``_calculate_rewards`` reads, so that the reward is called by
    TRL 1.16's real code with TRL's keyword arguments (``trainer_state``, ``log_metric``, ``log_extra``...)."""
    import collections
    import types

    import torch
    from accelerate import Accelerator
    from transformers import TrainerState
    from trl import GRPOTrainer

    trainer = object.__new__(GRPOTrainer)
    trainer.accelerator, trainer.args, trainer.state = Accelerator(cpu=True), types.SimpleNamespace(report_to=[]), TrainerState()
    trainer.reward_funcs, trainer.reward_processing_classes, trainer.reward_func_names = [reward], [None], ["group"]
    trainer._log_completion_extra, trainer.environments = lambda *args: None, None
    trainer._pending_metrics = collections.defaultdict(list)
    trainer.num_generations, trainer.num_generations_eval = num_generations, num_generations_eval
    trainer.model = torch.nn.Linear(1, 1)
    return trainer


def _trl_rewards(trainer, completions):
    from trl import GRPOTrainer

    n = len(completions)
    inputs = [{"prompt": "Paraphrase it.", "source": SOURCE}] * n
    return GRPOTrainer._calculate_rewards(trainer, inputs, ["Paraphrase it."] * n, completions, [[1]] * n)[:, 0].tolist()


def test_neighbouring_groups_of_one_prompt_stay_separate_groups(judge):
    """Two GRPO groups of 4 with the same prompt side by side (a repeated dataset row): each is judged alone, as
    GRPO's group size says, whether given, attached or read from TRL's own call; never as one group of 8."""
    alone = judge_groups(judge, "para-group", [FOUR], source=SOURCE)[0]["p_best"]
    joined = judge_groups(judge, "para-group", [FOUR + FOUR], source=SOURCE)[0]["p_best"]
    assert max(abs(a - b) for a, b in zip(alone, joined)) > 0.05  # what joining the groups gave
    batch = {"prompts": ["Paraphrase it."] * 8, "completions": FOUR + FOUR, "source": [SOURCE] * 8}
    assert GroupPluieReward(judge, group_size=4)(**batch) == pytest.approx(alone + alone, abs=1e-6)
    reward = GroupPluieReward(judge)
    trainer = _grpo_trainer(reward, 4, num_generations_eval=2)
    assert _trl_rewards(trainer, FOUR + FOUR) == pytest.approx(alone + alone, abs=1e-6)  # TRL's call names its trainer
    assert trainer._pending_metrics["pluie_group/groups"] == [2.0]
    trainer.model.eval()  # evaluation: num_generations_eval completions per prompt
    pairs = [judge_groups(judge, "para-group", [FOUR[i:i + 2]], source=SOURCE)[0]["p_best"] for i in (0, 2)]
    assert _trl_rewards(trainer, FOUR) == pytest.approx(pairs[0] + pairs[1], abs=1e-6)
    attached = GroupPluieReward(judge)
    assert attached.attach(_grpo_trainer(attached, 4)) is not None
    assert attached(**batch) == pytest.approx(alone + alone, abs=1e-6)  # attached: known without TRL's call
    # five groups of one prompt (20 completions, more than a group template shows): five groups of 4
    five = GroupPluieReward(judge, group_size=4)(prompts=["p"] * 20, completions=FOUR * 5, source=[SOURCE] * 20)
    assert five == pytest.approx(alone * 5, abs=1e-6)


def test_without_a_group_size_runs_of_one_prompt_are_groups_and_a_mismatch_is_refused(judge):
    batch = {"prompts": ["p"] * 8, "completions": FOUR + FOUR, "source": [SOURCE] * 8}
    joined = judge_groups(judge, "para-group", [FOUR + FOUR], source=SOURCE)[0]["p_best"]
    assert GroupPluieReward(judge)(**batch) == pytest.approx(joined, abs=1e-6)  # outside a trainer, as documented
    with pytest.raises(ValueError, match="one group of 20, more than the template's 16; pass group_size="):
        GroupPluieReward(judge)(prompts=["p"] * 20, completions=FOUR * 5, source=[SOURCE] * 20)
    with pytest.raises(ValueError, match="completions 0 and 2 are in one group of 4 but have different prompts"):
        GroupPluieReward(judge, group_size=4)(prompts=["p", "p", "q", "q"], completions=FOUR, source=[SOURCE] * 4)
    with pytest.raises(TypeError, match="has no num_generations"):
        GroupPluieReward(judge).attach(object())


def test_an_attached_reward_pickles_without_its_trainer():
    import functools
    import pickle

    reward = GroupPluieReward(functools.partial(make_tiny_judge, seed=3))
    trainer = _grpo_trainer(reward, 4)
    trainer.unpicklable = lambda: None  # a trainer does not pickle (and should not travel with its rewards)
    reward.attach(trainer)
    restored = pickle.loads(pickle.dumps(reward))
    assert restored.trainer is None and reward.trainer is trainer and restored.size_for(trainer._log_metric) == 4
