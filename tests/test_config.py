"""Options as config dataclasses: RewardConfig (the rewards' one output vocabulary), JudgeConfig and
TransformersEngineConfig. Each check raises a clear message; the rewards of each output are checked
against values computed here from ``judge.score`` (sigmoid, clipping, the calibration's formula, the
verdict's cut by hand); ``config=`` equals the keyword form."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import warnings

import pytest

from pluie_reward import Calibration, PluieReward, RewardConfig
from pluie_reward.testing import make_tiny_judge

SOURCES = ["The cat sleeps on the mat.", "The cat sleeps on the mat.", "It rains in Paris.", "It rains in Paris."]
COMPLETIONS = ["A cat is asleep on the mat.", "The dog barks.", "Paris has rain.", ""]


@pytest.fixture(scope="module")
def judge():
    return make_tiny_judge(seed=3)


@pytest.fixture(scope="module")
def logratios(judge):
    """PLUIE of the batch, straight from the judge (what every Yes/No output is computed from)."""
    values = judge.score("para-fs", source=SOURCES, hypothesis=COMPLETIONS)
    assert len({round(v, 4) for v in values}) == len(values)  # distinct, so a mix-up shows
    return values


def call(reward):
    return reward(prompts=["p"] * len(COMPLETIONS), completions=COMPLETIONS, src=SOURCES)


def sig(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# RewardConfig's own checks ----------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,error", [
    ({"output": "sigmoid"}, r"unknown output 'sigmoid'; use one of \['logratio', 'prob', 'clip', 'calibrated', 'verdict'\]"),
    ({"output": "clip", "clip": 0}, r"clip must be a positive number .* got 0"),
    ({"output": "clip", "clip": -2.0}, r"clip must be a positive number"),
    ({"clip": float("inf")}, r"clip must be a positive number"),
    ({"threshold": float("nan")}, r"threshold must be a finite number"),
    ({"threshold": "high"}, r"threshold must be a finite number"),
    ({"output": "expected", "normalize": 1}, r"normalize must be True or False"),
    ({"output": "prob", "answer": "A", "both_orders": "yes"}, r"both_orders must be True or False"),
    ({"output": "prob", "answer": 1}, r"answer must be an answer's label"),
    ({"answer": "A"}, r"answer=, normalize=, both_orders= and scale= go with output='prob'.*output='logratio' reads a Yes/No"),
    ({"output": "clip", "normalize": True}, r"go with output='prob'.*output='clip'"),
    ({"output": "verdict", "scale": (1, 5)}, r"go with output='prob'"),
    ({"output": "logprob"}, r"output='logprob' reads the probability of one answer: name it"),
    ({"output": "prob", "both_orders": True}, r"name it, e\.g\. answer='A'"),
    ({"output": "prob", "answer": "A", "normalize": True}, r"normalize=True maps an expected rating"),
    ({"output": "expected", "answer": "5"}, r"leave answer out"),
    ({"output": "expected", "scale": (5, 1)}, r"lowest < highest"),
    ({"output": "prob", "answer": "A", "threshold": 0.5}, r"threshold= is the acceptance cut"),
])
def test_reward_config_checks(kwargs, error):
    with pytest.raises(ValueError, match=error):
        RewardConfig(**kwargs)


def test_reward_config_fields_are_documented_and_frozen():
    for f in dataclasses.fields(RewardConfig):
        assert len(f.metadata.get("help", "")) > 20, f.name
    config = RewardConfig(output="clip", clip=3)
    assert config.clip == 3.0 and isinstance(config.clip, float)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.output = "prob"
    assert RewardConfig(**config.to_dict()) == config
    assert RewardConfig(output="expected", scale=(1, 5)).scale == (1.0, 5.0)
    # which kind of template an output reads, known before any template is
    assert [RewardConfig(output=o).reads_answers for o in ("logratio", "clip", "calibrated", "verdict")] == [False] * 4
    assert RewardConfig(output="prob").reads_answers is None  # p_yes, or p(answer) on a choice (which then asks for answer=)
    assert RewardConfig(output="prob", answer="A").reads_answers and RewardConfig(output="expected").reads_answers


# each output, against values computed here ------------------------------------------------------
def test_yes_no_outputs_are_computed_from_the_logratio(judge, logratios):
    c = sorted(abs(s) for s in logratios)[1] + 1e-3  # some scores beyond it, some within
    cut = sorted(logratios)[1]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # no output warns
        got = {o: call(PluieReward(judge, fields={"source": "src"}, output=o, clip=c, threshold=cut))
               for o in ("logratio", "prob", "clip", "verdict")}
    assert got["logratio"] == pytest.approx(logratios, abs=1e-6)
    assert got["prob"] == pytest.approx([sig(s) for s in logratios], abs=1e-6)
    assert got["clip"] == pytest.approx([max(-c, min(c, s)) for s in logratios], abs=1e-6)
    assert any(abs(x) == pytest.approx(c) for x in got["clip"]) and got["clip"] != pytest.approx(logratios)
    assert got["verdict"] == [1.0 if s > cut else 0.0 for s in logratios] and sum(got["verdict"]) == 2


def test_calibrated_output_is_the_calibration_formula(logratios):
    judge = make_tiny_judge(seed=3, calibration=Calibration(a=0.5, b=-0.25))
    got = call(PluieReward(judge, fields={"source": "src"}, output="calibrated"))
    assert got == pytest.approx([sig(0.5 * s - 0.25) for s in logratios], abs=1e-6)


# config= and the keyword form --------------------------------------------------------------------
@pytest.mark.parametrize("options", [
    {},
    {"output": "clip", "clip": 0.05},
    {"output": "verdict", "threshold": -0.01},
    {"output": "prob", "threshold": 0.02},
])
def test_config_equals_the_keyword_form(judge, options):
    by_keywords = PluieReward(judge, fields={"source": "src"}, name="kw", **options)
    by_config = PluieReward(judge, fields={"source": "src"}, name="kw", config=RewardConfig(**options))
    assert by_config.config == by_keywords.config == RewardConfig(**options)
    assert repr(by_config) == repr(by_keywords)
    logs_a: dict = {}
    logs_b: dict = {}
    a = by_keywords(prompts=["p"] * 4, completions=COMPLETIONS, src=SOURCES, log_metric=logs_a.__setitem__)
    b = by_config(prompts=["p"] * 4, completions=COMPLETIONS, src=SOURCES, log_metric=logs_b.__setitem__)
    assert a == b and logs_a == logs_b


def test_config_equals_the_keyword_form_on_a_choice(judge):
    options = {"output": "prob", "answer": "A", "both_orders": True}
    by_keywords = PluieReward(judge, "net-choice", fields={"alternative": "ref"}, **options)
    by_config = PluieReward(judge, "net-choice", fields={"alternative": "ref"}, config=RewardConfig(**options))
    assert by_config.reading == by_keywords.reading
    columns = {"source": SOURCES, "ref": list(reversed(COMPLETIONS))}
    assert by_config(completions=COMPLETIONS, **columns) == by_keywords(completions=COMPLETIONS, **columns)


def test_config_and_keywords_together_or_wrong(judge):
    with pytest.raises(TypeError, match=r"either in config= or as keywords, not both .*\['output'\]"):
        PluieReward(judge, output="prob", config=RewardConfig())
    with pytest.raises(TypeError, match="config must be a RewardConfig, not dict"):
        PluieReward(judge, config={"output": "prob"})
    # the checks that need the template are the reward's, with its name
    with pytest.raises(ValueError, match=r"^pref: scale= is for a remote judge"):
        PluieReward(judge, "net-likert", name="pref", config=RewardConfig(output="expected", normalize=True, scale=(1, 5)))
    with pytest.raises(ValueError, match=r"^pref: clip must be a positive number"):
        PluieReward(judge, name="pref", output="clip", clip=0)


# the remote reward: the same vocabulary over the judge server ----------------------------------------
def test_remote_reward_outputs(logratios):
    pytest.importorskip("uvicorn")
    from pluie_reward.serving import background, create_app
    from pluie_reward.serving.client import RemoteJudgeError, RemotePluieReward

    def remote(url, **options):
        reward = RemotePluieReward(url, fields={"source": "src"}, **options)
        return asyncio.run(reward(prompts=["p"] * 4, completions=COMPLETIONS, src=SOURCES))

    c = sorted(abs(s) for s in logratios)[1] + 1e-3
    calibrated = make_tiny_judge(seed=3, calibration=Calibration(a=0.5, b=-0.25))
    with background(create_app(calibrated, "para-fs", max_wait_ms=5), host="127.0.0.1", port=0) as server:
        assert remote(server.url, output="prob") == pytest.approx([sig(s) for s in logratios], abs=1e-4)
        assert remote(server.url, output="clip", clip=c) == pytest.approx([max(-c, min(c, s)) for s in logratios], abs=1e-4)
        assert remote(server.url, config=RewardConfig(output="clip", clip=c)) == remote(server.url, output="clip", clip=c)
        assert remote(server.url, output="calibrated") == pytest.approx([sig(0.5 * s - 0.25) for s in logratios], abs=1e-4)
        assert remote(server.url, output="verdict") == [1.0 if s > 0 else 0.0 for s in logratios]
        with pytest.raises(RemoteJudgeError, match=r"Yes/No \(PLUIE\), so output='prob' with answer= does not apply"):
            remote(server.url, output="prob", answer="A")
    with background(create_app(make_tiny_judge(seed=3), "para-fs", max_wait_ms=5), host="127.0.0.1", port=0) as server:
        with pytest.raises(RemoteJudgeError, match="has no calibration"):
            remote(server.url, output="calibrated")
        with pytest.raises(ValueError, match=r"threshold= is the judge server's"):
            RemotePluieReward(server.url, config=RewardConfig(threshold=1.0))
        with pytest.raises(TypeError, match="not both"):
            RemotePluieReward(server.url, output="prob", config=RewardConfig())


# JudgeConfig and TransformersEngineConfig ----------------------------------------------------------
@pytest.mark.parametrize("kwargs,error", [
    ({"cache_size": -1}, (ValueError, r"cache_size must be a non-negative integer, got -1")),
    ({"cache_size": 2.5}, (ValueError, r"cache_size must be a non-negative integer")),
    ({"threshold": float("nan")}, (ValueError, r"threshold must be a finite number")),
    ({"threshold": None}, (ValueError, r"threshold must be a finite number")),
    ({"threshold": 10**400}, (ValueError, r"threshold must be a finite number")),
    ({"allow_multi_token": "yes"}, (TypeError, r"allow_multi_token must be True or False")),
    ({"name": 3}, (TypeError, r"name must be a string")),
    ({"chat_template_kwargs": {"tokenize": True}}, (ValueError, r"cannot set 'tokenize'")),
    ({"chat_template_kwargs": ["enable_thinking"]}, (ValueError, r"must be a mapping")),
    ({"calibration": 0.5}, (TypeError, r"calibration must be a Calibration, a path")),
])
def test_judge_config_checks(judge, kwargs, error):
    from pluie_reward import Judge, JudgeConfig

    kind, message = error
    with pytest.raises(kind, match=message):
        JudgeConfig(**kwargs)
    with pytest.raises(kind, match=message):  # the same check when the judge is made
        Judge(judge.model, judge.tokenizer, **kwargs)


@pytest.mark.parametrize("kwargs,error", [
    ({"batch_tokens": 0}, (ValueError, r"batch_tokens must be a positive integer or None")),
    ({"batch_tokens": 1.5}, (ValueError, r"batch_tokens must be a positive integer or None")),
    ({"check_weights": "no"}, (TypeError, r"check_weights must be True or False")),
    ({"disable_adapters": 1}, (TypeError, r"disable_adapters must be True or False")),
    ({"adapter_name": ""}, (ValueError, r"adapter_name must be the name of a PEFT adapter")),
    ({"min_shared_tokens": 0}, (ValueError, r"min_shared_tokens must be a positive integer, got 0")),
    ({"max_cached_prefixes": -3}, (ValueError, r"max_cached_prefixes must be a positive integer, got -3")),
])
def test_transformers_engine_config_checks(judge, kwargs, error):
    from pluie_reward import Judge, TransformersEngineConfig

    kind, message = error
    with pytest.raises(kind, match=message):
        TransformersEngineConfig(**kwargs)
    with pytest.raises(kind, match=message):  # through Judge(model, tokenizer, **options)
        Judge(judge.model, judge.tokenizer, **kwargs)


def test_configs_are_documented():
    from pluie_reward import JudgeConfig, TransformersEngineConfig

    for config in (JudgeConfig, TransformersEngineConfig, RewardConfig):
        for f in dataclasses.fields(config):
            assert len(f.metadata.get("help", "")) > 20, (config.__name__, f.name)


def test_judge_splits_options_by_the_configs_fields(tmp_path):
    import inspect

    from pluie_reward import Judge, JudgeConfig, TransformersEngineConfig
    from pluie_reward.engines.transformers.engine import TransformersEngine

    # the configs' fields are the constructors' keyword arguments, nothing more and nothing missing
    judge_params = inspect.signature(Judge.__init__).parameters
    assert [n for n in judge_params if n not in ("self", "model", "tokenizer", "engine_options")] == \
        [f.name for f in dataclasses.fields(JudgeConfig)]
    engine_params = inspect.signature(TransformersEngine.__init__).parameters
    assert [n for n in engine_params if n not in ("self", "model", "tokenizer", "config")] == \
        [f.name for f in dataclasses.fields(TransformersEngineConfig)]
    # each option lands where its config says, including the engine's two that Judge did not pass on before
    path = tmp_path / "calibration.json"
    Calibration(a=2.0, b=0.5).save(path)
    judge = make_tiny_judge(seed=3, cache_size=7, threshold=0.25, calibration=path, batch_tokens=300,
                            check_weights=False, min_shared_tokens=3, max_cached_prefixes=5)
    assert judge.config == JudgeConfig(cache_size=7, threshold=0.25, name="tiny-random", calibration=Calibration.load(path))
    assert judge.threshold == 0.25 and judge.results.max_size == 7 and judge.calibration.a == 2.0
    assert judge.engine.config == TransformersEngineConfig(batch_tokens=300, check_weights=False, min_shared_tokens=3,
                                                           max_cached_prefixes=5)
    assert (judge.engine.batch_tokens, judge.engine.check_weights, judge.engine.min_shared_tokens,
            judge.engine.max_cached_prefixes) == (300, False, 3, 5)
    with pytest.raises(TypeError, match=r"unexpected argument\(s\) \['tensor_parallel_size'\]; the judge's options are"):
        make_tiny_judge(tensor_parallel_size=2)
    with pytest.raises(TypeError, match=r"Judge\(engine\) takes only the judge's options"):
        Judge(judge.engine, batch_tokens=10)
    with pytest.raises(TypeError, match="not both"):
        TransformersEngine(judge.model, judge.tokenizer, batch_tokens=10, config=TransformersEngineConfig())
