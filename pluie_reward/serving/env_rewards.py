"""The package's rewards inside other frameworks' judges and environments (verifiers, :mod:`.verifiers_judge`; SkyRL,
:mod:`.skyrl_env`): the reward of a setting (:func:`reward_for`), scoring one completion against a record's
text fields (:func:`ascore_one`, :func:`score_one`). The rewards score; nothing is scored here.

Example:
    >>> reward = reward_for(task="paraphrase")            # ParaphraseReward on the default judge
    >>> record = {"source": "The cat sleeps.", "reward_spec": {"ground_truth": "The cat sleeps."}}
    >>> score_one(reward, "A cat is asleep.", record), score_one(reward, "The cat sleeps.", record)  # a copy scores 0
    (0.8..., 0.0)
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from typing import Any, Mapping

from pluie_reward.core.judge import Judge
from pluie_reward.integrations.reward_base import Reward
from pluie_reward.integrations.rewards import PluieReward
from pluie_reward.integrations.task_rewards import CopyProofReward


def reward_for(*, template: str | None = None, task: str | None = None, fields: Mapping[str, str] | None = None,
               output: str = "logratio", url: str | None = None, model: str | None = None, device: str | None = None) -> Reward:
    """The reward of these settings, built once per process (a framework builds its judge or environment per rollout;
    a reward binds its template to the judge once).

    Args:
        template: the judge's template in process (default: the task's, else ``para-fs``); a judge server uses its own.
        task: ``"paraphrase"``, ``"translation"`` or ``"revision"``: that task's copy-proof reward (a copy scores 0).
        fields: template field -> record field (``key.sub`` in a nested record; default: the field of the same name).
        output: without a task, as :class:`~pluie_reward.PluieReward` (``"logratio"``, ``"prob"``...).
        url: a judge server (``pluie-reward serve``): :class:`~pluie_reward.serving.client.RemotePluieReward`.
        model, device: the judge in this process (:meth:`Judge.load <pluie_reward.Judge.load>`; default: the default judge).
    """
    return _reward(template, task, tuple(sorted(dict(fields or {}).items())), output, url, model, device)


@functools.cache
def _reward(template: str | None, task: str | None, fields: tuple, output: str, url: str | None, model: str | None,
            device: str | None) -> Reward:
    if url is not None:
        from pluie_reward.serving.client import RemotePluieReward  # optional: httpx

        return RemotePluieReward(url, fields=dict(fields) or None, **({"task": task} if task else {"output": output}))
    judge = _judge(model, device)
    return CopyProofReward(judge, task, template, dict(fields)) if task else PluieReward(judge, template or "para-fs", dict(fields),
                                                                                        output=output)


@functools.cache
def _judge(model: str | None, device: str | None) -> Judge:
    return Judge.load(model, device=device)


def columns(record: Mapping[str, Any], prefix: str = "") -> dict[str, list[Any]]:
    """One-item columns of a record: each text value under its key, a nested mapping's as ``key.sub``.

    Example:
        >>> columns({"reward_spec": {"ground_truth": "S"}, "idx": 3})
        {'reward_spec.ground_truth': ['S']}
    """
    out: dict[str, list[Any]] = {}
    for key, value in record.items():
        if isinstance(value, Mapping):
            out.update(columns(value, f"{prefix}{key}."))
        elif isinstance(value, str):
            out[f"{prefix}{key}"] = [value]
    return out


async def ascore_one(reward: Reward, completion: str, record: Mapping[str, Any], prompt: Any = None) -> float:
    """``reward``'s value of one completion against ``record`` (:func:`columns`), ``prompt`` its prompt (a blocking reward
    in a worker thread)."""
    call = functools.partial(reward, prompts=None if prompt is None else [prompt], completions=[completion], **columns(record))
    return float((await (call() if inspect.iscoroutinefunction(type(reward).__call__) else asyncio.to_thread(call)))[0])


def score_one(reward: Reward, completion: str, record: Mapping[str, Any], prompt: Any = None) -> float:
    """:func:`ascore_one` for blocking code (a thread without a running event loop)."""
    return asyncio.run(ascore_one(reward, completion, record, prompt))
