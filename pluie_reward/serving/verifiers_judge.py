"""PLUIE as a judge plugin of prime-intellect's verifiers (>= 0.4, ``verifiers.v1``): :class:`PluieJudge`, an entry of a
task config's ``judges`` with the id ``pluie-reward-verifiers`` (the top-level module verifiers imports for that id,
``pluie_reward_verifiers``, exports it). Its reward is :func:`~pluie_reward.serving.env_rewards.reward_for`'s for the
rollout's reply and the task's fields: PLUIE or a task's copy-proof reward, in process or on a judge server (docs/rewards.md).

Example:
    >>> from verifiers.v1.configs.task import TaskConfig
    >>> TaskConfig(judges=[{"id": "pluie-reward-verifiers", "task": "paraphrase"}]).judges[0]   # resolved by verifiers
    PluieJudgeConfig(...task='paraphrase'...)
"""

from __future__ import annotations

from typing import Any

from pydantic import Field
from verifiers.v1.configs.judge import JudgeConfig
from verifiers.v1.judge import Judge, JudgeView, judge_response

from pluie_reward.serving.env_rewards import ascore_one, reward_for


class PluieJudgeConfig(JudgeConfig):
    """:class:`PluieJudge`'s settings; ``name`` (the reward's key, default the id) and ``weight`` as verifiers' own."""

    id: str = "pluie-reward-verifiers"
    model: str = "embedded"  # the judge in process (HF id, folder, .gguf; default: the default judge)
    device: str | None = None
    template: str | None = None  # default: the task's, else para-fs (a judge server uses its own)
    task: str | None = None  # paraphrase, translation, revision: its copy-proof reward; unset: PLUIE's `output`
    fields: dict[str, str] = Field(default_factory=dict)  # template field -> task field ("prompt": the task's prompt)
    output: str = "logratio"
    url: str | None = None  # a judge server (pluie-reward serve)
    view: JudgeView = "last_reply"


class PluieJudge(Judge[float, PluieJudgeConfig]):
    """Scores the rollout's reply (``view``) against the task's fields with the configured reward."""

    async def score(self, task: Any, trace: Any) -> float:
        c = self.config
        reward = reward_for(template=c.template, task=c.task, fields=c.fields, output=c.output, url=c.url,
                            model=None if c.url else c.model, device=c.device)
        return await ascore_one(reward, judge_response(trace, c.view), task.model_dump(), prompt=task.prompt_text)


__all__ = ["PluieJudge", "PluieJudgeConfig"]
