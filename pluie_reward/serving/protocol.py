"""The judge server's HTTP protocol, in one place: its endpoints, the options a request may set, the
columns of its answers and the environment variables its clients read. Standard library only: the
clients (httpx alone) and the server import it.

Endpoints:
- ``POST /score``: ``{"source": [...], "hypothesis": [...]}`` (the template's fields, lists of
  strings, or one string shared by all items; a request may also set the :data:`CLIENT_OPTIONS`
  ``threshold``, ``use_cache`` and ``task``) -> ``{"logratio": [...], "p_yes": [...], "verdict": [...]}``
  (:data:`OUTPUTS`; a template with N answers gives its records' columns instead); with
  ``"task": "paraphrase"`` (``translation``, ``revision``) also ``"reward"`` (the task's copy-proof
  reward, as :class:`~pluie_reward.ParaphraseReward` computes it) and ``"novelty"``.
- ``POST /get_reward``: OpenRLHF's remote reward model protocol,
  ``{"query": [...], "prompts": [...], "labels": [...]}`` -> ``{"rewards": [...], "scores": [...], "extra_logs": {...}}``
  (:class:`~pluie_reward.serving.mapping.RewardMapping`); ``"rm_reward"`` (:data:`RM_REWARD_KEY`) sets that
  request's reward. An empty request gets empty lists.
- ``GET /health`` (and ``HEAD``): liveness plus the template's fields and the server's limits
  (``max_items_per_request``, ``max_item_chars``, ``max_body_bytes``: larger requests get 413, which the clients
  meet by splitting); no token needed (:data:`PUBLIC_PATHS`).
- ``GET /metrics``: requests (by path, by status, 5xx as ``server_errors``), items, batches and batch
  sizes, latency percentiles.

Every 4xx answer is also logged (WARNING, logger ``pluie_reward.server``) with the request path and the
message, every 5xx (ERROR; 503, "retry elsewhere", WARNING) with its reason (OpenRLHF logs only the status). A body
that does not arrive whole in time gets 408; one still arriving when the server stops, 503.
"""

from __future__ import annotations

from typing import Any, Iterable

PUBLIC_PATHS = frozenset({"/health"})
"""The paths answered without the bearer token."""
KNOWN_PATHS = frozenset({"/score", "/get_reward", "/health", "/metrics", "/docs", "/openapi.json"})
"""The paths ``/metrics`` counts by name (any other is ``other``)."""
CLIENT_OPTIONS = ("threshold", "use_cache", "task")
"""The options a ``/score`` request may set besides the template's fields
(:func:`~pluie_reward.serving.batcher.split_request` checks them)."""
SERVER_OPTIONS = ("details", "truncate", "max_new_tokens", "template")
"""Scoring options the server sets: a request naming one is refused (422)."""
OUTPUTS = ("logratio", "p_yes", "verdict")
"""The columns of a Yes/No server's ``/score`` answer (verl's ``output`` setting picks one, or a task of
:data:`~pluie_reward.integrations.novelty.TASKS`: its copy-proof reward, which the client computes from ``p_yes``)."""
COLUMNS = {"logratio": "logratio", "prob": "p_yes", "clip": "logratio", "calibrated": "p_calibrated", "verdict": "verdict"}
"""The ``/score`` column each Yes/No output of :class:`~pluie_reward.serving.client.RemotePluieReward` reads."""
URL_ENV, TOKEN_ENV = "PLUIE_REWARD_URL", "PLUIE_REWARD_TOKEN"
"""The environment variables of the server's URL (clients) and bearer token (clients and server)."""
RM_REWARD_KEY = "rm_reward"
"""The ``/get_reward`` key that sets the request's reward (what ``--rm-reward`` sets for the server): OpenRLHF's
in-process ``reward_func`` sends ``$PLUIE_REWARD_RM_REWARD`` with it, so a server started without ``--rm-reward``
still gives the copy-proof reward the client asked for."""


def choice(value: Any, allowed: Iterable[str], setting: str) -> str:
    """``value`` as one of ``allowed`` names, compared case-insensitively and without surrounding spaces (a task or
    output name read from an environment variable, a CLI flag, ``reward_kwargs`` or a request), else a
    ``ValueError`` naming the setting and the allowed values.

    Example:
        >>> choice(" Paraphrase", ("logratio", "paraphrase"), "PLUIE_REWARD_RM_REWARD")
        'paraphrase'
        >>> choice("para", ("logratio", "paraphrase"), "PLUIE_REWARD_RM_REWARD")
        Traceback (most recent call last):
        ...
        ValueError: PLUIE_REWARD_RM_REWARD must be one of ['logratio', 'paraphrase'] (case does not matter), got 'para'.
    """
    names = list(allowed)
    key = value.strip().lower() if isinstance(value, str) else None
    for name in names:
        if name.lower() == key:
            return name
    raise ValueError(f"{setting} must be one of {names} (case does not matter), got {value!r}.")
