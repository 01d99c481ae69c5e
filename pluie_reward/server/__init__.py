"""PLUIE judge server for distributed RL frameworks (OpenRLHF, verl) and remote TRL rewards.

Server side (needs fastapi + uvicorn): :func:`create_app`, :class:`Batcher`, ``pluie-reward serve``.
Client side (needs httpx): :class:`RemotePluieReward` (TRL), :func:`compute_score` (verl).
Names are imported lazily so that ``pluie_reward.cli`` works without the server's dependencies.

Example:
    >>> from pluie_reward.server import RemotePluieReward                  # doctest: +SKIP
    >>> reward = RemotePluieReward("http://127.0.0.1:8000")                 # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Batcher": "batcher",
    "ScoringError": "batcher",
    "RewardMapping": "mapping",
    "ServerMetrics": "metrics",
    "create_app": "app",
    "background": "runner",
    "run": "runner",
    "RemotePluieReward": "client",
    "RemoteJudgeError": "client",
    "compute_score": "client",
    "compute_score_batch": "client",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
