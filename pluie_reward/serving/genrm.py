"""PLUIE as verl's own generative reward model (GenRM): scoring on the vLLM servers verl runs for it.

With ``reward.reward_model.enable=True`` and ``reward.reward_model.model_path``, verl serves the reward model on
vLLM (colocated with the actor or on its own resource pool), behind a router that forwards every path, and calls
the custom reward function with ``reward_router_address`` (``host:port``) and ``reward_model_tokenizer``. When no
judge server URL is configured, :func:`~pluie_reward.serving.client.compute_score` (and ``compute_score_batch``,
``compute_score_sync``: :func:`score`) scores there: the judge is the
remote engine (:meth:`~pluie_reward.Judge.connect`) at ``http://<reward_router_address>``, rendering with
``reward_model_tokenizer``; one judge per address per process, checked once when it is made:

* the server is vLLM (``/v1/models``' ``owned_by``): SGLang's OpenAI server is refused, by name;
* its tokenizer is ``reward_model_tokenizer``'s (``/tokenize`` of a rendered prompt gives the same ids);
* it returns the log-probabilities of chosen tokens (``logprob_token_ids``): a vLLM whose OpenAI server ignores
  the field is refused with its version (``/version``);

the last check's prompt is the template's prefix alone (the instructions every item shares, as token ids that
start every prompt the judge sends), so vLLM's prefix cache holds it before the first batch and every prompt
finds it there. Concurrent calls of one event loop go out together (gathered by the client, scored by
:func:`ascore_batch`: one :meth:`~pluie_reward.Judge.ascore`, one ``/v1/completions`` request for up to
``max_batch_items`` prompts).

Example:
    >>> reward = compute_score(data_source="mrpc", solution_str="A cat is asleep.", ground_truth="The cat sleeps.",  # doctest: +SKIP
    ...                        extra_info={}, reward_router_address="10.0.0.5:40123", reward_model_tokenizer=tokenizer)
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
from typing import Any, Mapping

from pluie_reward.common.errors import RemoteError
from pluie_reward.common.http import HTTPClient, HTTPConfig, base_url
from pluie_reward.core.judge import Judge
from pluie_reward.core.template import load_template
from pluie_reward.integrations.novelty import TASKS
from pluie_reward.serving.protocol import OUTPUTS

PROBE = "Ünïcödé, 数字 and 🙂: 12,345.67 — tabs\tand  spaces; <b>markup</b> \"quotes\" it's."
"""Text the tokenizer check renders into the template's fields (accents, CJK, emoji, spacing, markup)."""
SERVER = "verl's reward model server"
TESTED_VLLM = "0.31.0"
TODO = ("or score on a pluie judge server instead (pluie-reward serve, then reward_kwargs.url=http://judge-host:8000; "
        "docs/server.md)")


class GenRMError(RemoteError):
    """verl's reward model server cannot give what PLUIE needs (not vLLM, a tokenizer other than
    ``reward_model_tokenizer``, no ``logprob_token_ids``); the message names the server and what to do."""


def default_template(output: str) -> str:
    """The template a GenRM judge asks with: a task's own for a copy-proof ``output``, else ``para-fs``.

    Example:
        >>> default_template("translation"), default_template("logratio")
        ('net', 'para-fs')
    """
    return TASKS[output].template if output in TASKS else "para-fs"


@functools.lru_cache(maxsize=64)
def check_template(template: str, output: str) -> None:
    """``compute_score`` reads a Yes/No template (``logratio``, ``p_yes``, ``verdict``); a task's output also needs its fields
    (checked once per template and output: verl calls once per sample).

    Raises:
        ValueError: the template has N answers, or lacks the task's source field.

    Example:
        >>> check_template("net-likert", "logratio")
        Traceback (most recent call last):
        ...
        ValueError: compute_score on verl's reward model: template 'net-likert' does not answer Yes/No ...
    """
    loaded = load_template(template)
    if loaded.kind != "binary":
        raise ValueError(f"compute_score on verl's reward model: template {loaded.name!r} does not answer Yes/No "
                         f"({list(loaded.answers)}), so it has no logratio, p_yes or verdict: use a Yes/No template "
                         "(reward_kwargs.template=para-fs, net, rev...).")
    if output in TASKS:
        TASKS[output].check_template(loaded, who="compute_score on verl's reward model: ")


def _served_model(http: HTTPClient, where: str) -> dict[str, Any]:
    """The first model ``/v1/models`` lists; SGLang and other non-vLLM servers refused here."""
    served = http.request("GET", "/v1/models").get("data") or []
    if not served:
        raise GenRMError(f"{SERVER} at {where} serves no model (/v1/models is empty).", url=where)
    entry = served[0]
    owner = entry.get("owned_by")
    if owner == "sglang":
        raise GenRMError(
            f"{SERVER} at {where} is SGLang (/v1/models: owned_by='sglang'), whose OpenAI server does not return the "
            "log-probabilities of chosen tokens (logprob_token_ids) that PLUIE reads: serve the reward model on vLLM "
            f"(reward.reward_model.rollout.name=vllm), {TODO}.", url=where)
    if owner != "vllm":
        raise GenRMError(f"{SERVER} at {where} is not vLLM (/v1/models: owned_by={owner!r}); PLUIE scores through vLLM's "
                         f"/v1/completions with logprob_token_ids: serve the reward model on vLLM "
                         f"(reward.reward_model.rollout.name=vllm), {TODO}.", url=where)
    return entry


def _check_tokenizer(http: HTTPClient, where: str, model: str, tokenizer: Any, text: str) -> None:
    """The served model tokenizes ``text`` (a rendered prompt, markup included) as ``tokenizer`` does."""
    served = list(http.request("POST", "/tokenize", json={"model": model, "prompt": text, "add_special_tokens": False})["tokens"])
    local = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if served != local:
        at = next((i for i, (a, b) in enumerate(zip(served, local)) if a != b), min(len(served), len(local)))
        name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
        raise GenRMError(
            f"{SERVER} at {where} serves {model!r}, whose tokenizer differs from reward_model_tokenizer ({name!r}, "
            f"{len(tokenizer)} tokens): a rendered prompt is {len(served)} tokens there and {len(local)} here, first "
            f"different at token {at} (server {served[at:at + 3]}, here {local[at:at + 3]}). verl loads "
            "reward_model_tokenizer from reward.reward_model.model_path: serve that same model.", url=where)


def _check_logprob_token_ids(http: HTTPClient, where: str, model: str, version: str, ids: list[int], wanted: list[int]) -> None:
    """One ``/v1/completions`` asking ``logprobs=1`` but the log-probabilities of 3 chosen tokens: a vLLM that
    ignores ``logprob_token_ids`` answers with its top token only."""
    body = {"model": model, "prompt": [ids], "max_tokens": 1, "temperature": 0, "logprobs": 1,
            "logprob_token_ids": wanted, "return_tokens_as_token_ids": True}
    try:
        choice = http.request("POST", "/v1/completions", json=body)["choices"][0]
        got = set((choice.get("logprobs") or {}).get("top_logprobs", [{}])[0] or {})
    except (RemoteError, KeyError, IndexError, TypeError) as err:
        raise GenRMError(f"{SERVER} at {where} (vLLM {version}) refused /v1/completions with logprob_token_ids ({err}): "
                         f"PLUIE needs a vLLM whose OpenAI server takes logprob_token_ids ({TESTED_VLLM} tested), {TODO}.",
                         url=where) from None
    missing = [t for t in wanted if f"token_id:{t}" not in got]
    if missing:
        raise GenRMError(
            f"{SERVER} at {where} runs vLLM {version}, whose OpenAI server ignores logprob_token_ids (asked for tokens "
            f"{wanted}, it returned {sorted(got)}): PLUIE reads exactly the answer tokens' log-probabilities, so it needs a "
            f"vLLM that takes them on /v1/completions ({TESTED_VLLM} tested): upgrade verl's vLLM, {TODO}.", url=where)


def connect(address: str, tokenizer: Any, template: str, *, timeout: float = 120.0, retries: int = 3, backoff: float = 0.5,
            chunk_size: int = 256) -> Judge:
    """A judge on verl's reward model server at ``address``, checked (see the module docstring) with ``template``'s prefix.

    Args:
        address: verl's ``reward_router_address``.
        tokenizer: verl's ``reward_model_tokenizer`` (loaded by verl from ``reward.reward_model.model_path``).
        template: the template whose prefix the checks send (into vLLM's prefix cache).
        timeout, retries, backoff: per HTTP request (:class:`~pluie_reward.common.http.HTTPConfig`).
        chunk_size: the most prompts one ``/v1/completions`` request carries.

    Returns:
        The judge (:meth:`~pluie_reward.Judge.connect`'s).

    Raises:
        GenRMError: the server is not vLLM, its tokenizer is not ``tokenizer``, or it ignores ``logprob_token_ids``.
    """
    where = base_url(address)
    if tokenizer is None or isinstance(tokenizer, str):
        raise ValueError(f"compute_score on verl's reward model ({where}) needs verl's reward_model_tokenizer (a tokenizer "
                         f"object), got {tokenizer!r}: verl passes it with reward_router_address when "
                         "reward.reward_model.enable=True.")
    config = HTTPConfig(timeout=timeout, retries=retries, backoff=backoff)
    with HTTPClient(where, config, name=SERVER, error=GenRMError) as http:
        model = _served_model(http, where)["id"]
        try:
            version = str(http.request("GET", "/version").get("version", "unknown"))
        except GenRMError:
            version = "unknown"
        judge = Judge.connect(where, model=model, tokenizer=tokenizer, timeout=timeout, retries=retries, backoff=backoff,
                              chunk_size=chunk_size)
        try:
            bound = judge.bind(template)
            _check_tokenizer(http, where, model, tokenizer, bound.render({f: PROBE for f in bound.template.all_fields}))
            answers = [a[0] for a in bound.answer_ids]
            other = next(t for t in (tokenizer.eos_token_id, 0, 1, 2) if t is not None and t not in answers)
            _check_logprob_token_ids(http, where, model, version, list(bound.prefix_ids) or [other], answers + [other])
        except BaseException:
            judge.close()
            raise
    return judge


_judges: dict[tuple[int, str], "Judge | GenRMError"] = {}
_judges_lock = threading.Lock()


def judge_for(address: str, tokenizer: Any, template: str, **options: Any) -> Judge:
    """The process's judge for ``address`` (made by :func:`connect` at the first call, then reused; a
    :class:`GenRMError` is kept too, so that every later call fails at once with the same message).

    Args:
        address, tokenizer, template, options: as :func:`connect`.

    Returns:
        The judge.
    """
    key = (os.getpid(), base_url(address))
    with _judges_lock:
        if key not in _judges:
            try:
                _judges[key] = connect(address, tokenizer, template, **options)
            except GenRMError as err:
                _judges[key] = err
        found = _judges[key]
    if isinstance(found, GenRMError):
        raise found
    return found


def _columns(records: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """The ``logratio``, ``p_yes`` and ``verdict`` columns of a judge's records, as a judge server's ``/score`` answers them."""
    return {output: [record[output] for record in records] for output in OUTPUTS}


def _scoring(address: str, output: str, settings: Mapping[str, Any], max_items: int) -> tuple[str, str, float, dict[str, Any]]:
    """The base URL, template (checked), threshold and :func:`connect` options of a call with ``settings``."""
    template = str(settings.get("template") or default_template(output))
    check_template(template, output)
    options = {"timeout": float(settings.get("timeout", 120.0)), "retries": int(settings.get("retries", 3)),
               "backoff": float(settings.get("backoff", 0.5)), "chunk_size": max_items}
    return base_url(address), template, float(settings.get("threshold", 0.0)), options


def score(address: str, tokenizer: Any, body: Mapping[str, Any], output: str, settings: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Score a batch on verl's reward model, synchronously (``compute_score_batch``, ``compute_score_sync``): one
    :meth:`~pluie_reward.Judge.score` of the process's judge for ``address`` (``/v1/completions`` requests of up to
    ``max_batch_items`` prompts, default 256).

    Args:
        address: verl's ``reward_router_address``.
        tokenizer: verl's ``reward_model_tokenizer``.
        body: the template fields, a list per field (one value per item).
        output: ``compute_score``'s ``output`` (a task's name picks its template).
        settings: ``compute_score``'s settings (``template``, ``threshold``, ``timeout``, ``retries``, ``backoff``,
            ``max_batch_items``).

    Returns:
        The batch's ``logratio``, ``p_yes`` and ``verdict`` columns.
    """
    where, template, threshold, options = _scoring(address, output, settings, int(settings.get("max_batch_items", 256)))
    judge = judge_for(where, tokenizer, template, **options)
    return _columns(judge.score(template, details=True, threshold=threshold, **body))


async def ready(address: str, tokenizer: Any, output: str, settings: Mapping[str, Any], max_items: int) -> tuple[str, str, float]:
    """Make the process's judge for ``address`` at the first call (in a thread: verl's event loop goes on), and say
    under which key ``compute_score``'s calls are gathered for :func:`ascore_batch`.

    Args:
        address: verl's ``reward_router_address``.
        tokenizer: verl's ``reward_model_tokenizer``.
        output: ``compute_score``'s ``output`` (a task's name picks its template).
        settings: ``compute_score``'s settings (``template``, ``threshold``, ``timeout``, ``retries``, ``backoff``).
        max_items: the most items of one batch (the judge's ``chunk_size``).

    Returns:
        ``(base URL, template, threshold)``.

    Raises:
        GenRMError: the server cannot give what PLUIE needs (kept: later calls fail at once).
    """
    where, template, threshold, options = _scoring(address, output, settings, max_items)
    if (os.getpid(), where) not in _judges:
        await asyncio.to_thread(judge_for, where, tokenizer, template, **options)
    judge_for(where, tokenizer, template)  # raises the kept GenRMError, if any
    return where, template, threshold


async def ascore_batch(key: tuple[str, str, float], body: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The ``logratio``, ``p_yes`` and ``verdict`` columns of a batch of ``compute_score`` calls gathered under ``key``
    (:func:`ready`'s): one :meth:`~pluie_reward.Judge.ascore`, i.e. one ``/v1/completions`` request."""
    where, template, threshold = key
    judge = judge_for(where, None, template)  # made by ready() before any item was queued
    return _columns(await judge.ascore(template, details=True, threshold=threshold, **body))
