"""The judge server and its clients, one package: the HTTP protocol (:mod:`.protocol`), the batcher
(:mod:`.batcher`), OpenRLHF's field mapping (:mod:`.mapping`), the metrics (:mod:`.metrics`), the
FastAPI app (:mod:`.app`: one router per endpoint in :mod:`.routes`, the middleware in
:mod:`.middleware`), uvicorn's runner (:mod:`.runner`), and the clients: TRL's
:class:`~pluie_reward.serving.client.RemotePluieReward` and verl's ``compute_score``
(:mod:`.client`; on verl's own reward model: :mod:`.genrm`), OpenRLHF's in-process ``reward_func`` (:mod:`.openrlhf`).

The server needs fastapi + uvicorn (``pip install 'pluie-reward[serve]'``), the clients httpx only.
``pluie-reward serve`` and ``pluie-reward pool`` start the app. Names are imported lazily, so that
importing a client loads nothing of the server.

Example:
    >>> from pluie_reward.serving.client import RemotePluieReward
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
