"""PLUIE judge server for distributed RL frameworks (OpenRLHF, verl) and remote TRL rewards.

Needs fastapi + uvicorn: :func:`create_app`, :class:`Batcher`, ``pluie-reward serve``. Its clients
(:class:`~pluie_reward.integrations.client.RemotePluieReward` for TRL, ``compute_score`` for verl)
live in :mod:`pluie_reward.integrations.client`. Names are imported lazily so that the command line
works without the server's dependencies.

Example:
    >>> from pluie_reward.integrations.client import RemotePluieReward
    >>> reward = RemotePluieReward("http://127.0.0.1:8000")  # a TRL reward scored by `pluie-reward serve`
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
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
