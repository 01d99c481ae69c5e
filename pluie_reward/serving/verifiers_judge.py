"""PLUIE as a judge plugin of prime-intellect's ``verifiers`` (>= 0.4, ``verifiers.v1``): :class:`PluieJudge`, plugged
through a task config's ``judges`` (``--taskset.task.judges``) under the id ``pluie-reward-verifiers`` (the top-level
module :mod:`pluie_reward_verifiers`, which verifiers imports by that id). It reads the rollout's reply and the task's
fields, and returns the reward of :func:`~pluie_reward.serving.env_rewards.reward_for`: PLUIE, a task's copy-proof
reward (a copy scores 0), in this process or on a judge server (``url``). Where verifiers' built-in judges generate a
verdict and parse it, this one reads p(Yes) and p(No) in one forward pass.

Example:
    >>> import verifiers.v1 as vf  # doctest: +SKIP
    >>> config = vf.TaskConfig(judges=[{"id": "pluie-reward-verifiers", "task": "paraphrase"}])  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from verifiers.v1.configs.judge import JudgeConfig
from verifiers.v1.judge import Judge, JudgeView, judge_response
from verifiers.v1.types import ID

from pluie_reward.serving.env_rewards import ascore_one, reward_for

PLUGIN_ID = "pluie-reward-verifiers"


class PluieJudgeConfig(JudgeConfig):
    """:class:`PluieJudge`'s settings (an entry of ``judges``); ``name`` and ``weight`` as verifiers' (the reward's key)."""

    id: ID = PLUGIN_ID
    model: str = "embedded"
    """The judge in this process: HF id, folder or .gguf (default: the default judge); unused with ``url``."""
    device: str | None = None
    template: str | None = None
    """The judge's template (default: the task's, else para-fs); a judge server uses its own."""
    task: str | None = None
    """paraphrase, translation or revision: that task's copy-proof reward; empty: PLUIE's ``output``."""
    fields: dict[str, str] = Field(default_factory=dict)
    """Template field -> task field (default: the field of the same name; "prompt": the task's prompt)."""
    output: str = "logratio"
    url: str | None = None
    """A judge server (pluie-reward serve): scored there (RemotePluieReward)."""
    view: JudgeView = "last_reply"


class PluieJudge(Judge[float, PluieJudgeConfig]):
    """A verifiers judge scoring the reply with PLUIE or a task's copy-proof reward (see the module docstring)."""

    async def score(self, task: Any, trace: Any) -> float:
        """The reward of the rollout's reply (``view``) against the task's fields."""
        c = self.config
        reward = reward_for(template=c.template, task=c.task, fields=c.fields, output=c.output, url=c.url,
                            model=None if c.url else c.model, device=c.device)
        return await ascore_one(reward, judge_response(trace, c.view), task.model_dump(), prompt=task.prompt_text)


__all__ = ["PluieJudge", "PluieJudgeConfig"]
