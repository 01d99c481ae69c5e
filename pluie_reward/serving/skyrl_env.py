"""A SkyRL text environment rewarded by PLUIE (skyrl-gym >= 0.4): :class:`PluieTextEnv`, one turn, its reward that of
:func:`~pluie_reward.serving.env_rewards.reward_for` (PLUIE, or a task's copy-proof reward, where a copy scores 0; in this
process, or on a judge server with ``url``). Register it in your entrypoint, as SkyRL's LLM-as-a-judge example does::

    from skyrl_gym.envs import register
    register(id="pluie", entry_point="pluie_reward.serving.skyrl_env:PluieTextEnv")

then ``environment.env_class=pluie environment.skyrl_gym.pluie.task=paraphrase``: each dataset row's
``reward_spec.ground_truth`` is the source (``fields`` maps template fields to ``ground_truth``, ``extra_info.<key>``
or another row key). Where the example generates a verdict and parses "### Final Score", this reads p(Yes) and p(No).
"""

from __future__ import annotations

from typing import Any, Mapping

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from pluie_reward.integrations.novelty import resolve_task
from pluie_reward.serving.env_rewards import reward_for, score_one

SETTINGS = ("template", "task", "fields", "output", "url", "model", "device")


class PluieTextEnv(BaseTextEnv):
    """One turn: the reply's reward against the row's fields (see the module docstring).

    Args:
        env_config: the settings of :func:`~pluie_reward.serving.env_rewards.reward_for` (``task``, ``fields``, ``url``...;
            a mapping, e.g. SkyRL's ``environment.skyrl_gym.<id>`` config); ``fields`` defaults to the source field
            read from ``ground_truth``.
        extras: the dataset row (``reward_spec.ground_truth``, ``extra_info``...).

    Raises:
        ValueError: a setting that is not one of :data:`SETTINGS`.
    """

    def __init__(self, env_config: Mapping[str, Any] | None = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        settings = {k: v for k, v in dict(env_config or {}).items() if v is not None}
        unknown = sorted(set(settings) - set(SETTINGS))
        if unknown:
            raise ValueError(f"PluieTextEnv: unknown setting(s) {unknown}; the settings are {list(SETTINGS)}.")
        source = resolve_task(settings["task"]).source_field if settings.get("task") else "source"
        settings["fields"] = dict(settings.get("fields") or {source: "ground_truth"})
        self.reward = reward_for(**settings)
        row = dict(extras or {})
        self.record = {**row, "ground_truth": (row.get("reward_spec") or {}).get("ground_truth")}
        self.prompt: Any = None

    def init(self, prompt: Any) -> tuple[Any, dict[str, Any]]:
        """Keep the prompt (a ``prompt`` field mapping reads its last user message)."""
        self.prompt = prompt
        return prompt, {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """The reward of the reply ``action``; the episode ends."""
        reward = score_one(self.reward, action, self.record, self.prompt)
        return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata={"pluie_reward": reward})


__all__ = ["PluieTextEnv"]
