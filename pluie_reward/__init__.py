"""pluie-reward: a frozen chat LLM as a cheap, interpretable judge (PLUIE) for text generators.

Example:
    >>> from pluie_reward import Judge
    >>> judge = Judge.load()  # the embedded default judge (SmolLM2-135M-Instruct + its PLUIE adapter), offline
    >>> judge.score("para-fs", source=["The cat sleeps."], hypothesis=["The cat is asleep."])
    [1.4...]
"""

from __future__ import annotations

import importlib
from typing import Any

# Names are imported on first use (PEP 562), so that light modules (the HTTP client with httpx
# alone, pluie_reward.integrations.fields, the command line's --help) do not pull in torch and transformers.
_EXPORTS = {
    "PluieError": "common.errors",
    "RemoteError": "common.errors",
    "AnswerTokenError": "core.prompt",
    "BoundTemplate": "core.prompt",
    "Judge": "core.judge",
    "JudgeConfig": "core.judge_config",
    "TransformersEngineConfig": "engines.transformers.config",
    "sigmoid": "core.calibration",
    "Template": "core.template",
    "builtin_template_names": "core.template",
    "load_template": "core.template",
    "PluieReward": "integrations.rewards",
    "AsyncPluieReward": "integrations.rewards",
    "RewardConfig": "integrations.reward_config",
    "NoveltyReward": "integrations.rewards",
    "novelty": "integrations.rewards",
    "CopyProofReward": "integrations.task_rewards",
    "ParaphraseReward": "integrations.task_rewards",
    "TranslationReward": "integrations.task_rewards",
    "RevisionReward": "integrations.task_rewards",
    "GuardReward": "integrations.guards",
    "GuardedReward": "integrations.guards",
    "CompletionGuard": "integrations.guards",
    "Calibration": "core.calibration",
    "fit_calibration": "tools.evaluation.calibration",
    "GroupPluieReward": "integrations.group_reward",
    "judge_groups": "integrations.group",
    "load_group_template": "integrations.group",
    "HackAlarm": "integrations.alarm",
    "AlarmedReward": "integrations.alarm",
    "HackWarning": "integrations.alarm",
    "load_trainable_embedded": "engines.transformers.loading",
    "add_default_judge_adapter": "core.judge",
    "PluieCallback": "integrations.callbacks",
    "answer_record": "core.judge",
    "tune": "tools.tune",
    "TuneConfig": "tools.tune",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'pluie_reward' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)


__version__ = "0.1.0"
