"""A pool of judges on Ray Serve: the judge server's API (``/score``, ``/get_reward``, ``/health``,
``/metrics``) served by N replicas behind Ray's proxy, with autoscaling on queue length and
fractional GPUs per replica (``pluie-reward pool``; ``pip install 'pluie-reward[pool]'``).

Names are imported lazily, and Ray only inside the functions, so the command line works without Ray.

Example:
    >>> from pluie_reward.serving.client import RemotePluieReward
    >>> reward = RemotePluieReward("http://127.0.0.1:8000")  # a TRL reward scored by `pluie-reward pool`
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "JudgeReplica": "deployment",
    "PoolOptions": "deployment",
    "deploy": "deployment",
    "judge_deployment": "deployment",
    "pool_url": "deployment",
    "shutdown": "deployment",
    "start_ray": "deployment",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
