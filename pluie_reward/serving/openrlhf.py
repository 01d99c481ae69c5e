"""OpenRLHF's in-process reward option: ``--reward.remote_url /path/to/this/file.py``.

OpenRLHF loads a ``.py`` reward URL as a module and calls its ``reward_func(queries, prompts, labels)``
once per generated sample, in a worker thread, with lists of length 1; it reads ``"rewards"``,
``"scores"`` and ``"extra_logs"`` from the returned dict. The ``query`` is the prompt and the response.

:func:`reward_func` works two ways, chosen by environment variables (they must reach OpenRLHF's Ray workers):

- ``PLUIE_REWARD_URL`` set: it forwards the sample to the judge server's ``/get_reward`` with the
  bearer token ``PLUIE_REWARD_TOKEN`` (which OpenRLHF's own HTTP client cannot send) and
  ``PLUIE_REWARD_RM_REWARD`` if set (the server applies it to the request, whatever its ``--rm-reward``; the
  other variables below are the server's options then, and a warning names them). Needs httpx only.
- otherwise: it scores in-process with a judge loaded once per worker (``PLUIE_REWARD_MODEL``: HF id,
  folder or .gguf, default the embedded judge; ``PLUIE_REWARD_DEVICE``, ``PLUIE_REWARD_DTYPE``,
  ``PLUIE_REWARD_TEMPLATE`` (default ``para-fs``), ``PLUIE_REWARD_RM_FIELDS`` (``FIELD=SOURCE,...``,
  as the server's ``--rm-field``), ``PLUIE_REWARD_RM_REWARD`` (``logratio``, ``p_yes``, ``verdict``, or a
  task's copy-proof reward: ``paraphrase``, ``translation``, ``revision``, as the server's ``--rm-reward``)).
  Concurrent calls are batched into one ``Judge.score`` call (the server's batcher).

``PLUIE_REWARD_RM_REWARD`` (case does not matter) and, in process, the template, fields and reward together are checked
when the module loads: a bad setting fails OpenRLHF's start once, saying what to give, rather than every sample.

The answer is the server's: ``{"rewards": [...], "scores": [p_yes], "extra_logs": {...}}``. Failures are
logged at ERROR level (OpenRLHF logs them at INFO and drops the sample's reward). Absolute imports
only: OpenRLHF loads the file by path, outside the package. Point OpenRLHF at it::

    --reward.remote_url $(python -c "import pluie_reward.serving.openrlhf as m; print(m.__file__)") \\
    --data.label_key source
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Sequence

from pluie_reward.integrations.fields import parse_assignments
from pluie_reward.integrations.novelty import TASKS
from pluie_reward.serving.protocol import OUTPUTS, RM_REWARD_KEY, TOKEN_ENV, URL_ENV, choice

logger = logging.getLogger("pluie_reward.openrlhf")
_state: dict[str, Any] = {}
_lock = threading.Lock()
RM_REWARD_ENV = "PLUIE_REWARD_RM_REWARD"
LOCAL_ONLY_ENV = ("PLUIE_REWARD_MODEL", "PLUIE_REWARD_DEVICE", "PLUIE_REWARD_DTYPE", "PLUIE_REWARD_TEMPLATE", "PLUIE_REWARD_RM_FIELDS")
"""Settings of the in-process judge; with ``$PLUIE_REWARD_URL`` the server's options decide (a warning says so at load)."""


def rm_reward() -> str | None:
    """``$PLUIE_REWARD_RM_REWARD`` as a reward name (case does not matter), None when unset; checked when this module
    loads, so a bad value fails OpenRLHF's start once rather than every sample.

    Raises:
        ValueError: a name that is not ``logratio``, ``p_yes``, ``verdict`` or a task (``paraphrase``...), naming them.

    Example:
        >>> os.environ[RM_REWARD_ENV] = "Paraphrase"
        >>> rm_reward()
        'paraphrase'
        >>> del os.environ[RM_REWARD_ENV]
    """
    value = os.environ.get(RM_REWARD_ENV)
    return choice(value, OUTPUTS + tuple(TASKS), RM_REWARD_ENV) if value and value.strip() else None


def local_mapping() -> tuple[Any, Any]:
    """The in-process judge's template (``$PLUIE_REWARD_TEMPLATE``) and request mapping (``$PLUIE_REWARD_RM_FIELDS``,
    ``$PLUIE_REWARD_RM_REWARD``), checked against each other as ``pluie-reward serve`` checks its options.

    Raises:
        ValueError: an unknown template or field, a malformed ``FIELD=SOURCE``, a task the template cannot give.

    Example:
        >>> local_mapping()[1].fields
        {'source': 'label', 'hypothesis': 'response'}
    """
    # lazy: httpx-only client (the remote mode imports without yaml; tests/test_fields.py)
    from pluie_reward.core.template import load_template
    from pluie_reward.serving.mapping import RewardMapping

    template = load_template(os.environ.get("PLUIE_REWARD_TEMPLATE") or "para-fs")
    specs = [s for s in (os.environ.get("PLUIE_REWARD_RM_FIELDS") or "").split(",") if s.strip()]
    return template, RewardMapping.for_template(template, parse_assignments(specs, "PLUIE_REWARD_RM_FIELDS"),
                                                reward=rm_reward() or "logratio")


def _check_environment() -> None:
    """The environment checked once, at load: a bad reward name, and in process a template, fields and reward that do not
    fit, raise; in-process settings next to a URL are named."""
    rm_reward()
    if not os.environ.get(URL_ENV):
        try:
            local_mapping()
        except ImportError:  # without the judge's dependencies: the first call says what is missing
            pass
    ignored = [name for name in LOCAL_ONLY_ENV if os.environ.get(name)]
    if os.environ.get(URL_ENV) and ignored:
        logger.warning("pluie_reward reward_func: %s=%s is set, so %s are ignored: the judge server's options decide "
                       "(%s is sent with each request).", URL_ENV, os.environ[URL_ENV], ignored, RM_REWARD_ENV)


_check_environment()


def _reward_url(url: str) -> str:
    url = url.rstrip("/")
    return url if url.endswith("/get_reward") else url + "/get_reward"


def _remote(queries: list[Any], prompts: list[Any], labels: list[Any]) -> dict[str, Any]:
    from pluie_reward.serving.client import check_texts, post_json  # optional: httpx

    url = _reward_url(os.environ[URL_ENV])
    body: dict[str, Any] = {"query": queries, "prompts": prompts, "labels": labels}
    check_texts(body)
    reward = rm_reward()
    if reward is not None:  # the server applies it to this request, whatever its --rm-reward
        body[RM_REWARD_KEY] = reward
    return post_json(url, body, token=os.environ.get(TOKEN_ENV) or None)


def _local_scorer() -> tuple[Any, Any]:
    """The in-process judge's batcher and the request mapping, built once per process."""
    with _lock:
        if "batcher" not in _state:
            # lazy: httpx-only client (the remote mode imports without torch, transformers or yaml; tests/test_fields.py)
            from pluie_reward.core.judge import Judge
            from pluie_reward.serving.batcher import Batcher

            template, mapping = local_mapping()
            judge = Judge.load(
                os.environ.get("PLUIE_REWARD_MODEL") or None,
                device=os.environ.get("PLUIE_REWARD_DEVICE") or None,
                dtype=os.environ.get("PLUIE_REWARD_DTYPE") or None,
            )
            _state["mapping"] = mapping
            _state["batcher"] = Batcher(judge, template, max_wait_ms=5.0).start()
        return _state["batcher"], _state["mapping"]


def _local(queries: list[Any], prompts: list[Any], labels: list[Any]) -> dict[str, Any]:
    batcher, mapping = _local_scorer()
    columns = mapping.columns(queries, prompts, labels)
    if not queries:
        return mapping.answer([], columns)
    return mapping.answer(batcher.submit(mapping.request(columns)).result(), columns, batcher.judge.clean_text)


def reward_func(queries: Sequence[str], prompts: Sequence[str], labels: Sequence[Any], **kwargs: Any) -> dict[str, Any]:
    """OpenRLHF's custom reward function: PLUIE of each response (query minus prompt) against its label, or the
    copy-proof reward the server's ``--rm-reward`` (in process: ``PLUIE_REWARD_RM_REWARD``) names.

    Args:
        queries: prompt + response, as OpenRLHF decodes them (special tokens kept).
        prompts: the prompts (the response is what follows the prompt in the query).
        labels: the ``--data.label_key`` column (the source sentence for paraphrases); ``""`` when no
            label key is set, which is an error.

    Returns:
        ``{"rewards": [...], "scores": [p_yes ...], "extra_logs": {"pluie_logratio", "pluie_p_yes", "pluie_verdict"}}``;
        for a task's reward, ``scores`` holds the rewards and ``extra_logs`` adds ``pluie_novelty``.

    Example:
        Without ``PLUIE_REWARD_URL`` the default judge scores in this process (the default judge gives
        this sample 1.88); here a judge server (``pluie-reward serve``, on a tiny judge) answers:

        >>> from pluie_reward.serving import background, create_app
        >>> with background(create_app(judge, "para-fs")) as server:
        ...     os.environ[URL_ENV] = server.url
        ...     reward_func(["<|im_start|>user\\nHi<|im_end|>\\nHello<|im_end|>"], ["<|im_start|>user\\nHi<|im_end|>\\n"], ["Hi"])
        {'rewards': [...], 'scores': [...], 'extra_logs': {'pluie_logratio': [...], 'pluie_p_yes': [...], 'pluie_verdict': [...]}}
        >>> del os.environ[URL_ENV]
    """
    queries, prompts, labels = list(queries), list(prompts), list(labels)
    try:
        if os.environ.get(URL_ENV):
            return _remote(queries, prompts, labels)
        return _local(queries, prompts, labels)
    except Exception as err:
        logger.error("pluie_reward reward_func failed (OpenRLHF will drop this sample's reward): %s", err)
        raise
