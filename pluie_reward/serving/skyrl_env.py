"""A SkyRL text environment rewarded by PLUIE (skyrl-gym >= 0.4): :class:`PluieTextEnv`, one turn, its reward
:func:`~pluie_reward.serving.env_rewards.reward_for`'s (PLUIE or a task's copy-proof reward, in process or on a judge
server) for the reply against the dataset row (``extras``). Register it in the training entrypoint, as SkyRL's
LLM-as-a-judge example registers its environment (docs/rewards.md)::

    register(id="pluie", entry_point="pluie_reward.serving.skyrl_env:PluieTextEnv")   # from skyrl_gym.envs
"""

from __future__ import annotations

from typing import Any, Mapping

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from pluie_reward.integrations.novelty import resolve_task
from pluie_reward.serving.env_rewards import reward_for, score_one

SETTINGS = ("template", "task", "fields", "output", "url", "model", "device")


class PluieTextEnv(BaseTextEnv):
    """One turn: the reply's reward against the row's fields.

    Args:
        env_config: :func:`~pluie_reward.serving.env_rewards.reward_for`'s settings (:data:`SETTINGS`), a mapping (SkyRL's
            ``environment.skyrl_gym.<id>``); ``fields`` defaults to the source field read from ``ground_truth``.
        extras: the dataset row (``reward_spec.ground_truth``, ``extra_info``...; ``ground_truth`` names the first).

    Raises:
        ValueError: a setting that is not one of :data:`SETTINGS`.
    """

    def __init__(self, env_config: Mapping[str, Any] | None = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        settings = {k: v for k, v in dict(env_config or {}).items() if v is not None}
        if set(settings) - set(SETTINGS):
            raise ValueError(f"PluieTextEnv: unknown setting(s) {sorted(set(settings) - set(SETTINGS))}; the settings are {SETTINGS}.")
        source = resolve_task(settings["task"]).source_field if settings.get("task") else "source"
        self.reward = reward_for(**{**settings, "fields": dict(settings.get("fields") or {source: "ground_truth"})})
        self.record = {**(extras or {}), "ground_truth": ((extras or {}).get("reward_spec") or {}).get("ground_truth")}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """The reward of the reply ``action``; the episode ends."""
        reward = score_one(self.reward, action, self.record)
        return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata={"pluie_reward": reward})


__all__ = ["PluieTextEnv"]
