"""The judge server's endpoints, one :class:`fastapi.APIRouter` each (:data:`ROUTERS`; their JSON is
described in :mod:`.protocol`). The handlers read what :func:`~pluie_reward.serving.app.create_app`
puts on ``request.app.state``: ``judge``, ``batcher``, ``metrics``, ``max_items_per_request`` and
``mapping`` (None when ``/get_reward`` is not configured: ``mapping_problem`` says why).

FastAPI is imported here, so import this module only where it is installed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Mapping

from fastapi import APIRouter, Body, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from ..core.judge import answer_record
from ..integrations.novelty import TASKS
from .batcher import ItemTooLarge, ScoringError, ShuttingDown, split_request


class RewardRequest(BaseModel):
    """OpenRLHF's request body (other keys some OpenRLHF versions add are ignored); each field's description is what a
    request of the wrong type is told it must be (:func:`~pluie_reward.serving.app.validation_message`)."""

    model_config = ConfigDict(extra="ignore")
    query: list[str] = Field(description="a list of strings, one per sample (its prompt and response)")
    prompts: list[str] | None = Field(None, description="a list of strings, one prompt per query (or null)")
    labels: list[Any] | None = Field(None, description="a list of the queries' labels (their source texts; or null)")
    # protocol.RM_REWARD_KEY: this request's reward, instead of the server's --rm-reward
    rm_reward: str | None = Field(None, description="a string naming this request's reward, e.g. 'paraphrase' (or null)")


async def _disconnected(request: Request) -> None:
    """Return when the client has closed the connection (the body is read already: the next ASGI
    message is ``http.disconnect``, sent when the client leaves or after the response)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def score_items(fields: Mapping[str, Any], request: Request) -> list[dict[str, Any]]:
    """The app's batcher's results for one request's fields: 499 when the client leaves first (its remaining
    work is dropped), 413 for an item over the server's ``max_item_chars``, 422 for bad fields or options, 503
    while shutting down, 500 when scoring fails."""
    state = request.app.state
    work = asyncio.ensure_future(state.batcher.score(fields))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this handler is cancelled: the batcher drops the request's remaining parts
        for task in (work, gone):
            task.cancel()
    if not work.done() or work.cancelled():
        raise HTTPException(499, "the client closed the connection; the rest of its request was dropped.")
    try:
        results = work.result()
    except ItemTooLarge as err:
        raise HTTPException(413, str(err)) from None
    except (ValueError, TypeError) as err:
        raise HTTPException(422, str(err)) from None
    except ShuttingDown as err:
        raise HTTPException(503, str(err)) from None
    except ScoringError as err:
        raise HTTPException(422 if err.client_error else 500, str(err)) from None
    state.metrics.record_items(len(results))
    return results


def check_size(request: Request, n: int) -> None:
    """413 for a request of more items than the app's ``max_items_per_request``."""
    limit = request.app.state.max_items_per_request
    if n > limit:
        raise HTTPException(413, f"{n} items in one request; this server takes at most {limit}: split the request.")


def public_name(name: str) -> str:
    """The judge's name as shown without a token: a Hub id as is, a local path reduced to its last
    component (``/models/qwen-7b`` -> ``qwen-7b``), so ``/health`` does not reveal the filesystem.

    Example:
        >>> public_name("Qwen/Qwen2.5-7B-Instruct"), public_name("/srv/models/judge-v2/"), public_name("./ckpt/step-10")
        ('Qwen/Qwen2.5-7B-Instruct', 'judge-v2', 'step-10')
    """
    text = str(name).rstrip("/\\")
    parts = [p for p in text.replace("\\", "/").split("/") if p]
    looks_like_path = text.startswith(("/", "~", ".")) or ":" in text[:3] or len(parts) > 2 or Path(text).exists()
    return parts[-1] if looks_like_path and parts else text


score_router = APIRouter()


@score_router.post("/score")
async def score(
    request: Request,
    body: dict[str, Any] = Body(..., examples=[{"source": ["The cat sleeps."], "hypothesis": ["The cat is asleep."]}]),
) -> dict[str, Any]:
    """Score items given as template fields (lists of strings, or one string for all items); a
    request may also set ``threshold`` (a finite number), ``use_cache`` (true/false) and ``task``
    (``paraphrase``, ``translation``, ``revision``: adds the task's copy-proof ``reward`` and ``novelty``)."""
    bound = request.app.state.batcher.bound
    lengths = [len(v) for v in body.values() if isinstance(v, list)]
    check_size(request, max(lengths, default=1))
    results = await score_items(body, request)  # checks the fields and options (422)
    keys = list(results[0]) if results else list(answer_record(bound.template, [0.0] * len(bound.answer_ids)))
    answer = {key: [r[key] for r in results] for key in keys}  # logratio/p_yes/verdict for Yes/No templates
    task = split_request(bound.template, body)[1].get("task")
    if task is None:
        return answer
    scores = TASKS[task].answer_scores(answer, body, request.app.state.judge.clean_text)
    return {**answer, "reward": scores.rewards, "novelty": scores.novelty}


get_reward_router = APIRouter()


@get_reward_router.post("/get_reward")
async def get_reward(body: RewardRequest, request: Request) -> dict[str, Any]:
    """OpenRLHF remote reward model: rewards (the configured score, or the request's ``rm_reward``), scores (p_yes,
    in [0, 1]), extra_logs."""
    mapping = request.app.state.mapping
    if mapping is None:
        raise HTTPException(501, request.app.state.mapping_problem)
    if body.rm_reward is not None:  # the client's reward (OpenRLHF's in-process client sends $PLUIE_REWARD_RM_REWARD)
        try:
            mapping = mapping.with_reward(body.rm_reward, request.app.state.batcher.bound.template)
        except ValueError as err:
            raise HTTPException(422, str(err)) from None
    check_size(request, len(body.query))
    try:
        columns = mapping.columns(body.query, body.prompts, body.labels)
    except ValueError as err:
        raise HTTPException(422, str(err)) from None
    if not body.query:
        return mapping.answer([], columns)
    results = await score_items(mapping.request(columns), request)
    return mapping.answer(results, columns, request.app.state.judge.clean_text)


health_router = APIRouter()


@health_router.api_route("/health", methods=["GET", "HEAD"])
async def health(request: Request) -> dict[str, Any]:
    """Liveness and what the server scores (the judge's model name, never its filesystem path)."""
    batcher = request.app.state.batcher
    template = batcher.bound.template
    return {
        "status": "ok",
        "judge": public_name(request.app.state.judge.name),
        "template": template.name,
        "fields": list(batcher.fields),
        "optional_fields": list(batcher.optional_fields),
        "kind": template.kind,  # binary (Yes/No), choice or scale
        "answers": list(template.labels),
        "values": list(template.values) or None,  # a scale's ratings, in the answers' order
        "chat_template_kwargs": batcher.bound.chat_template_kwargs,  # incl. the date a template writes as today
        # the limits a client must keep to (larger requests get 413): clients split their batches by them
        "max_items_per_request": request.app.state.max_items_per_request,
        "max_item_chars": batcher.max_item_chars,
        "max_body_bytes": request.app.state.max_body_bytes,
    }


metrics_router = APIRouter()


@metrics_router.get("/metrics")
async def get_metrics(request: Request) -> dict[str, Any]:
    """Counters since start: requests, items, batches, batch sizes, latency (ms)."""
    state = request.app.state
    snapshot = state.metrics.snapshot()
    queued_requests, queued_items = state.batcher.pending
    snapshot["queue"] = {"requests": queued_requests, "items": queued_items}
    snapshot["judge"] = {"name": state.judge.name, "template": state.batcher.bound.template.name,
                         **dict(state.judge.engine.stats)}
    return snapshot


ROUTERS = (score_router, get_reward_router, health_router, metrics_router)
"""The app's routers, in the order of its OpenAPI page."""
