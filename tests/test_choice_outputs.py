"""Rewards and ``eval preference`` on templates with N answers (choices, rating scales), against
independent computations written here: a softmax over the answers' logits from a plain forward of
the chat rendering (``answer_softmax``), hand-swapped candidate orders, and metrics computed by
brute force in this file."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from pluie_reward import Judge, PluieReward, load_template
from pluie_reward.integrations.outputs import AnswerOutput
from pluie_reward.testing import make_tiny_causal_lm, make_tiny_tokenizer
from pluie_reward.tools import cli
from pluie_reward.tools.evaluation import cli as eval_cli
from pluie_reward.tools.evaluation.scoring import choice_preference
from pluie_reward.tools.evaluation.tasks import preference_results

from test_answers import answer_softmax
from test_eval_runs import Recorder, ref_kappa, ref_tie_calibrated

SOURCES = ["allow traffic from A to B", "block port 22", "deny all from C", "permit web to D"]
COMPLETIONS = ["A may reach B.", "Port 22 is closed.", "x", "Web traffic can reach D."]
REFERENCES = ["Nothing is allowed.", "Port 22 is open.", "Everything from C is denied.", "D is reachable from the web."]


def tiny(seed: int = 21) -> Judge:
    tokenizer = make_tiny_tokenizer()
    return Judge.from_model(make_tiny_causal_lm(tokenizer, seed=seed), tokenizer)


@pytest.fixture(scope="module")
def judge() -> Judge:
    return tiny()


def softmax_of(judge: Judge, name: str, **columns) -> list[list[float]]:
    """p(answer_k) per item, renormalised over the answers, from a plain forward (the reference)."""
    template = load_template(name)
    n = len(next(iter(columns.values())))
    return [answer_softmax(judge.model, judge.tokenizer, template, {k: v[i] for k, v in columns.items()}) for i in range(n)]


# rewards ----------------------------------------------------------------------------------------
def test_expected_rating_reward_is_the_probability_weighted_mean(judge):
    want = [sum(p * v for p, v in zip(ps, (1, 2, 3, 4, 5))) for ps in softmax_of(judge, "net-likert", source=SOURCES, hypothesis=COMPLETIONS)]
    assert max(want) - min(want) > 1e-3  # the items differ, so a wrong pairing would show
    logs: dict = {}
    reward = PluieReward(judge, "net-likert", output="expected", name="likert")
    got = reward(prompts=["p"] * 4, completions=COMPLETIONS, source=SOURCES, log_metric=logs.__setitem__, log_extra=logs.__setitem__)
    assert got == pytest.approx(want, abs=1e-4)
    assert logs["likert/accept_rate"] == sum(w > 3 for w in want) / 4  # above the middle of the scale
    assert logs["likert/expected"] == pytest.approx(want, abs=1e-3)
    unit = PluieReward(judge, "net-likert", output="expected", normalize=True)(completions=COMPLETIONS, source=SOURCES)
    assert unit == pytest.approx([(w - 1) / 4 for w in want], abs=1e-4)
    assert all(0 <= u <= 1 for u in unit)
    # the probability of one grade of the scale, by its label
    five = PluieReward(judge, "net-likert", output="prob", answer="5")(completions=COMPLETIONS, source=SOURCES)
    assert five == pytest.approx([ps[4] for ps in softmax_of(judge, "net-likert", source=SOURCES, hypothesis=COMPLETIONS)], abs=1e-4)


def test_choice_reward_reads_the_named_answer_with_the_reference_in_the_other_slot(judge):
    probs = softmax_of(judge, "net-choice", source=SOURCES, hypothesis=COMPLETIONS, alternative=REFERENCES)
    columns = {"source": SOURCES, "ref": REFERENCES}
    a = PluieReward(judge, "net-choice", fields={"alternative": "ref"}, output="prob", answer="A")(completions=COMPLETIONS, **columns)
    assert a == pytest.approx([p[0] for p in probs], abs=1e-4)
    tie = PluieReward(judge, "net-choice", fields={"alternative": "ref"}, output="logprob", answer="tie")(completions=COMPLETIONS, **columns)
    assert tie == pytest.approx([math.log(p[2]) for p in probs], abs=1e-4)


def test_both_orders_average_p_a_first_with_p_b_swapped(judge):
    first = softmax_of(judge, "net-choice", source=SOURCES, hypothesis=COMPLETIONS, alternative=REFERENCES)
    second = softmax_of(judge, "net-choice", source=SOURCES, hypothesis=REFERENCES, alternative=COMPLETIONS)
    # the judge has a position bias here, so averaging the orders is not reading one order twice
    assert max(abs(f[0] - s[1]) for f, s in zip(first, second)) > 1e-2
    calls = judge.engine.stats["forward_calls"]
    logs: dict = {}
    reward = PluieReward(judge, "net-choice", fields={"alternative": "ref"}, output="prob", answer="A", both_orders=True, name="pref")
    got = reward(completions=COMPLETIONS, source=SOURCES, ref=REFERENCES, log_metric=logs.__setitem__)
    assert got == pytest.approx([(f[0] + s[1]) / 2 for f, s in zip(first, second)], abs=1e-4)
    assert judge.engine.stats["forward_calls"] > calls  # scored (not only cached)
    argmax = lambda p: max(range(3), key=p.__getitem__)  # noqa: E731
    assert logs["pref/accept_rate"] == (sum(argmax(f) == 0 for f in first) + sum(argmax(s) == 1 for s in second)) / 8
    # "B" mirrors to "A", a tie stays a tie; log-probabilities are averaged as log-probabilities
    b = PluieReward(judge, "net-choice", fields={"alternative": "ref"}, output="logprob", answer="B", both_orders=True)
    assert b(completions=COMPLETIONS, source=SOURCES, ref=REFERENCES) == pytest.approx(
        [(math.log(f[1]) + math.log(s[0])) / 2 for f, s in zip(first, second)], abs=1e-4)
    tie = PluieReward(judge, "net-choice", fields={"alternative": "ref"}, output="prob", answer="tie", both_orders=True)
    assert tie(completions=COMPLETIONS, source=SOURCES, ref=REFERENCES) == pytest.approx(
        [(f[2] + s[2]) / 2 for f, s in zip(first, second)], abs=1e-4)


@pytest.mark.parametrize("kwargs,message", [
    ({"template": "net-likert"}, r"5 answers, not Yes/No.*pass output='expected'"),
    ({"template": "rev-choice"}, r"choice between \['A', 'B', 'tie'\]: pass output='prob'.*answer="),
    ({"template": "net-choice", "output": "expected"}, r"expected rating of a scale template.*net-choice.*output='prob'"),
    ({"template": "net-choice", "output": "prob", "answer": "C"}, r"answer 'C' is not an answer of template 'net-choice'; its answers are \['A', 'B', 'tie'\]"),
    ({"template": "net-choice", "output": "prob"}, r"name it, e\.g\. answer='A'"),
    ({"template": "net-likert", "output": "expected", "both_orders": True}, r"one candidate"),
    ({"template": "net-likert", "output": "prob", "answer": "5", "both_orders": True}, r"rating scale with one candidate"),
    ({"template": "net-choice", "output": "prob", "answer": "A", "normalize": True}, r"normalize=True .* output='expected'"),
    ({"template": "para-fs", "output": "prob", "answer": "yes"}, r"Yes/No template.*'prob' \(p_yes, without answer=\)"),
    ({"template": "net-likert", "output": "clip"}, r"output='clip' \(read from PLUIE\) does not apply.*output='expected'"),
    ({"template": "net-choice", "output": "verdict"}, r"3 answers, not Yes/No, so output='verdict' \(read from PLUIE\) does not apply.*output='prob'"),
    ({"template": "para-fs", "both_orders": True}, r"go with output="),
    ({"template": "para-fs", "output": "yes"}, r"unknown output 'yes'"),
    ({"template": "net-choice", "output": "prob", "answer": "A", "threshold": 0.5}, r"threshold= is the acceptance cut"),
])
def test_outputs_that_do_not_fit_the_template_fail_when_built(judge, kwargs, message):
    with pytest.raises(ValueError, match=message):
        PluieReward(judge, **kwargs)


def test_guarded_n_answer_rewards_floor_at_their_lowest_value(judge):
    from pluie_reward.integrations.guards import GuardedReward

    choice = PluieReward(judge, "net-choice", output="prob", answer="A")
    assert GuardedReward(choice, guard=None).flagged_value == 0.0
    assert GuardedReward(PluieReward(judge, "net-likert", output="expected"), guard=None).flagged_value == 1.0
    assert GuardedReward(PluieReward(judge, "net-likert", output="expected", normalize=True), guard=None).flagged_value == 0.0
    with pytest.raises(ValueError, match="pass flagged_value="):
        GuardedReward(PluieReward(judge, "net-choice", output="logprob", answer="A"), guard=None)


def test_answer_output_checks_a_template_without_the_second_slot():
    with pytest.raises(ValueError, match=r"swaps the fields 'hypothesis' and 'alternative'"):
        AnswerOutput("prob", "A", both_orders=True).check("choice", ["A", "B", "tie"], fields=["source", "hypothesis"], template="mine")
    assert AnswerOutput("expected").check("scale", list("12345"), (1, 2, 3, 4, 5)).scale == (1.0, 5.0)
    # a server's record tells the kind and labels, not the scale's range: normalize needs scale=
    record = {"probs": {"1": 0.5, "2": 0.5}, "logprobs": {}, "choice": "1", "expected": 1.5}
    with pytest.raises(ValueError, match=r"pass scale=\(lowest, highest\)"):
        AnswerOutput("expected", normalize=True).check_record(record)
    assert AnswerOutput("expected", normalize=True, scale=(1, 2)).check_record(record).rewards([record], 1) == [0.5]
    with pytest.raises(ValueError, match="Yes/No template"):
        AnswerOutput("prob", "A").check_record({"logratio": 1.0, "p_yes": 0.7, "verdict": True})


# the same reads through the judge server ----------------------------------------------------------
@pytest.fixture(scope="module")
def choice_server():
    pytest.importorskip("uvicorn")
    from pluie_reward.serving import background, create_app

    with background(create_app(tiny(), "net-choice", max_wait_ms=5), host="127.0.0.1", port=0) as server:
        yield server


def test_remote_reward_reads_the_server_records_like_the_local_one(judge, choice_server):
    from pluie_reward.serving.client import RemoteJudgeError, RemotePluieReward

    first = softmax_of(judge, "net-choice", source=SOURCES, hypothesis=COMPLETIONS, alternative=REFERENCES)
    second = softmax_of(judge, "net-choice", source=SOURCES, hypothesis=REFERENCES, alternative=COMPLETIONS)
    logs: dict = {}
    remote = RemotePluieReward(choice_server.url, fields={"source": "source", "alternative": "ref"}, output="prob",
                               answer="A", both_orders=True, chunk_size=3, name="pref_remote")
    got = asyncio.run(remote(completions=COMPLETIONS, source=SOURCES, ref=REFERENCES, log_extra=logs.__setitem__))
    assert got == pytest.approx([(f[0] + s[1]) / 2 for f, s in zip(first, second)], abs=1e-3)
    assert logs["pref_remote/prob"] == pytest.approx(got, abs=1e-3)
    one = RemotePluieReward(choice_server.url, fields={"source": "source", "alternative": "ref"}, output="logprob", answer="B")
    assert asyncio.run(one(completions=COMPLETIONS, source=SOURCES, ref=REFERENCES)) == pytest.approx(
        [math.log(f[1]) for f in first], abs=1e-3)
    with pytest.raises(RemoteJudgeError, match=r"N answers .*output='prob'"):
        asyncio.run(RemotePluieReward(choice_server.url, fields={"source": "source", "alternative": "ref"})(
            completions=COMPLETIONS, source=SOURCES, ref=REFERENCES))
    wrong = RemotePluieReward(choice_server.url, fields={"source": "source", "alternative": "ref"}, output="expected")
    with pytest.raises(ValueError, match="expected rating of a scale template"):
        asyncio.run(wrong(completions=COMPLETIONS, source=SOURCES, ref=REFERENCES))
    with pytest.raises(ValueError, match=r"map the field 'alternative'"):
        RemotePluieReward(choice_server.url, output="prob", answer="A", both_orders=True)
    with pytest.raises(ValueError, match=r"go with output='prob'"):
        RemotePluieReward(choice_server.url, answer="A")



def test_remote_expected_rating_reads_the_scale_from_health(judge):
    """normalize=True without scale=: the range comes from the server's /health, and the reward
    equals (E - 1) / 4 with E the expected grade of a plain-forward softmax over the answers 1..5."""
    pytest.importorskip("uvicorn")
    import httpx

    from pluie_reward.serving import background, create_app
    from pluie_reward.serving.client import RemotePluieReward

    probs = softmax_of(judge, "net-likert", source=SOURCES, hypothesis=COMPLETIONS)
    expected = [sum(p * grade for p, grade in zip(row, (1, 2, 3, 4, 5))) for row in probs]
    with background(create_app(tiny(), "net-likert", max_wait_ms=5), host="127.0.0.1", port=0) as server:
        health = httpx.get(server.url + "/health").json()
        assert (health["kind"], health["answers"], health["values"]) == ("scale", ["1", "2", "3", "4", "5"], [1, 2, 3, 4, 5])
        remote = RemotePluieReward(server.url, output="expected", normalize=True)
        got = asyncio.run(remote(completions=COMPLETIONS, source=SOURCES))
        raw = asyncio.run(RemotePluieReward(server.url, output="expected")(completions=COMPLETIONS, source=SOURCES))
    assert raw == pytest.approx(expected, abs=1e-3)
    assert got == pytest.approx([(e - 1) / 4 for e in expected], abs=1e-3)

# eval preference with a choice template --------------------------------------------------------------
ROWS = [
    {"original": "We propose a metod.", "instruction": "Fix typos.", "a": a, "b": b, "human": h}
    for a, b, h in [("We propose a method.", "We propose a metod.", "A"), ("Results are great.", "Results.", "B"),
                    ("The model is fast.", "Model fast is the.", "A"), ("x", "The model runs quickly and well.", "B"),
                    ("We study cats and dogs.", "cats", "tie"), ("Tables are good.", "Tables are good.", "tie")]
]


def test_eval_preference_with_a_choice_template_one_call_per_instance(judge, monkeypatch, tmp_path, capsys):
    data = tmp_path / "prefs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    recorder = Recorder(judge)
    monkeypatch.setattr(eval_cli, "judge_from_args", lambda args: recorder)
    argv = ["eval", "preference", "-t", "rev-choice", "-i", str(data), "--baselines", "none", "--no-progress", "-o", str(tmp_path / "out")]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "tie calibration (the ε search) does not apply" in printed and "none: argmax" in printed
    # one call per chunk, each instance once with A and B in the template's two slots
    assert recorder.items == len(ROWS)
    assert [f["alternative"] for _, f in recorder.calls][0][:2] == ["We propose a metod.", "Results."]
    probs = [answer_softmax(judge.model, judge.tokenizer, load_template("rev-choice"),
                            {"original": r["original"], "instruction": r["instruction"], "hypothesis": r["a"], "alternative": r["b"]})
             for r in ROWS]
    predicted = [["A", "B", "tie"][max(range(3), key=p.__getitem__)] for p in probs]
    assert len(set(predicted)) == 3  # every outcome occurs, so a mislabelled answer would show
    human = [r["human"] for r in ROWS]
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    m = results["metrics"]["LLM-choice"]
    assert results["scores"]["LLM-choice"]["choice"] == predicted
    assert m["pairwise_accuracy"] == pytest.approx(sum(p == h for p, h in zip(predicted, human)) / len(human))
    assert m["cohens_kappa"] == pytest.approx(ref_kappa(human, predicted))
    assert m["epsilon"] is None and m["tie_calibrated"] is False
    la, lb = [math.log(p[0]) for p in probs], [math.log(p[1]) for p in probs]
    assert results["scores"]["LLM-choice"]["A"] == pytest.approx(la, abs=1e-4)
    assert results["scores"]["LLM-choice"]["B"] == pytest.approx(lb, abs=1e-4)
    ratio = results["metrics"]["LLM-choice, log p(A) − log p(B)"]
    want_acc, _ = ref_tie_calibrated(la, lb, human)
    assert ratio["pairwise_accuracy"] == pytest.approx(want_acc) and ratio["tie_calibrated"] is True
    # a rerun resumes (no judge call), and the report recomputes the same tables without the judge
    recorder.calls.clear()
    assert cli.main(argv) == 0 and recorder.calls == []
    monkeypatch.setattr(eval_cli, "judge_from_args", lambda args: pytest.fail("report loaded a judge"))
    assert cli.main(["eval", "report", str(tmp_path / "out")]) == 0
    again = json.loads((tmp_path / "out" / "results.json").read_text())
    assert again["metrics"] == results["metrics"]


def test_choice_lines_map_first_answer_to_a_and_second_to_b():
    assert [choice_preference(["first", "second", "same", "neither"], x) for x in ("first", "second", "same", "neither")] == \
        ["A", "B", "tie", "tie"]
    meta = {"task": "preference", "conditions": [{"name": "C", "labels": ["A", "B", "tie"]}], "baselines": []}
    lines = [{"human": h, "scores": {"C": {"logprobs": {"A": a, "B": b, "tie": -5.0}, "choice": c}}}
             for h, a, b, c in [("A", -0.1, -3.0, "A"), ("B", -2.0, -0.2, "B"), ("tie", -1.0, -1.1, "tie"), ("A", -2.0, -0.5, "B")]]
    r = preference_results(meta, lines)
    assert r["metrics"]["C"]["pairwise_accuracy"] == 0.75
    assert r["scores"]["C"]["A"] == [-0.1, -2.0, -1.0, -2.0] and r["scores"]["C"]["B"] == [-3.0, -0.2, -1.1, -0.5]
    # tie-calibrated on log p(A) - log p(B) = [2.9, -1.8, 0.1, -1.5]: eps in [0.1, 1.5) gets 3 of 4
    ratio = r["metrics"]["C, log p(A) − log p(B)"]
    assert ratio["pairwise_accuracy"] == 0.75 and ratio["epsilon"] == pytest.approx(0.1)


def test_eval_bad_choice_inputs_exit_2(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(eval_cli, "judge_from_args", lambda args: pytest.fail("a judge was loaded for bad input"))
    data = tmp_path / "prefs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    base = ["eval", "preference", "-i", str(data), "--baselines", "none", "--no-progress"]
    assert cli.main([*base, "-t", "rev-choice", "--column", "alternative=b"]) == 2
    assert "choose their columns with --a-column and --b-column" in capsys.readouterr().err
    odd = tmp_path / "odd.yaml"
    odd.write_text("name: odd\nfields: [original, hypothesis]\nanswers: [A, B, C]\n"
                   "messages:\n  - role: user\n    content: '{original} {hypothesis}'\n")
    assert cli.main([*base, "-t", str(odd)]) == 2
    assert "needs the fields 'hypothesis' (candidate A) and 'alternative'" in capsys.readouterr().err
    assert cli.main([*base, "-t", "rev-choice", "--b-column", "nope"]) == 2
    assert "nope" in capsys.readouterr().err
    assert cli.main(["eval", "classification", "-i", str(data), "-t", "rev-choice", "--no-progress"]) == 2
    assert "evaluate it with 'pluie-reward eval preference'" in capsys.readouterr().err
    from pluie_reward.tools.evaluation.scoring import Condition
    from pluie_reward.tools.evaluation.tasks import run_classification

    with pytest.raises(ValueError, match="with a preference task"):
        run_classification(None, [Condition("C", "rev-choice", {"original": ["o"], "instruction": ["i"]})], [True])
