"""Clients of the judge server: a TRL reward function and verl ``compute_score`` functions.

They send the template fields to ``POST /score`` through :mod:`pluie_reward.common.http` (its timeouts and
retries) and fail with :class:`RemoteJudgeError`. httpx only (no torch), absolute imports: verl can load it
as ``pkg://pluie_reward.serving.client`` or by file path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
import weakref
from typing import Any, Mapping, Sequence

from pluie_reward.common.errors import RemoteError, invalid_text, missing_extra

try:
    import httpx
except ModuleNotFoundError as err:
    raise missing_extra(err, "the judge server's client (RemotePluieReward, verl's compute_score)") from None
from pluie_reward.common.http import RETRY_STATUS, AsyncHTTPClient, HTTPClient, HTTPConfig, base_url
from pluie_reward.integrations.fields import FieldMap, completion_texts
from pluie_reward.integrations.novelty import TASKS, Task, check_blank_sources, check_sources, resolve_task
from pluie_reward.integrations.outputs import SECOND_CANDIDATE, AnswerOutput
from pluie_reward.integrations.reward_base import AsyncReward, Batch, Scores
from pluie_reward.integrations.reward_config import RewardConfig, reward_config
from pluie_reward.serving.protocol import COLUMNS, OUTPUTS, TOKEN_ENV, URL_ENV, choice


class RemoteJudgeError(RemoteError):
    """The judge server refused the request (``status``: its HTTP status, ``detail``: its message),
    could not be reached after the retries (``status`` None), or answered something unexpected."""


def _score_url(url: str | None) -> str:
    url = url or os.environ.get(URL_ENV)
    if not url:
        raise ValueError(f"no judge server URL: pass url=... or set {URL_ENV}=http://host:port.")
    url = url.rstrip("/")
    return url if url.endswith("/score") else url + "/score"


def _headers(token: str | None) -> dict[str, str]:
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    return {"Authorization": f"Bearer {token}"} if token else {}


def _client_options(token: str | None) -> dict[str, Any]:
    """How the judge server's clients are made: its name in messages, the error raised, the token."""
    return {"headers": _headers(token), "name": "judge server", "error": RemoteJudgeError}


def post_json(
    url: str, payload: Mapping[str, Any], *, token: str | None = None, timeout: float = 120.0,
    retries: int = 3, backoff: float = 0.5, client: httpx.Client | None = None,
) -> dict[str, Any]:
    """POST ``payload`` to ``url`` and return the JSON answer (:mod:`pluie_reward.common.http`'s retries).

    Args:
        url: the endpoint (``http://host:port/score``).
        payload: the JSON body.
        token: bearer token (default: ``$PLUIE_REWARD_TOKEN`` if set).
        timeout, retries, backoff: see :class:`~pluie_reward.common.http.HTTPConfig`.
        client: an ``httpx.Client`` to send with (kept open); default: a new one for this call.

    Returns:
        The server's JSON answer.

    Raises:
        RemoteJudgeError: the server refused the request, or did not answer after the retries.

    Example:
        >>> from pluie_reward.serving import background, create_app
        >>> with background(create_app(judge, "para-fs")) as server:  # a judge server (pluie-reward serve) on a free port
        ...     post_json(server.url + "/score", {"source": ["a"], "hypothesis": ["b"]})  # e.g. http://127.0.0.1:8000/score
        {'logratio': [...], 'p_yes': [...], 'verdict': [...]}
    """
    config = HTTPConfig(timeout=timeout, retries=retries, backoff=backoff)
    with HTTPClient(url, config, client=client, **_client_options(token)) as http:
        return http.request("POST", json=payload)


async def apost_json(
    url: str, payload: Mapping[str, Any], *, token: str | None = None, timeout: float = 120.0,
    retries: int = 3, backoff: float = 0.5, client: httpx.AsyncClient | None = None,
) -> dict[str, Any]:
    """Async :func:`post_json` (``client``: an ``httpx.AsyncClient``)."""
    config = HTTPConfig(timeout=timeout, retries=retries, backoff=backoff)
    async with AsyncHTTPClient(url, config, client=client, **_client_options(token)) as http:
        return await http.request("POST", json=payload)


def split_size(error: RemoteError, health: Any, body: Mapping[str, Any], n: int) -> int | None:
    """How many items each piece of a request of ``n`` items that got ``error`` should carry, read from the
    server's ``/health``: its ``max_items_per_request`` when the request had more, else half of them (a body
    over the byte limit); None when splitting cannot help (one item, another error, or an item over the
    server's ``max_item_chars``).

    Example:
        >>> too_large = RemoteJudgeError("HTTP 413", 413)
        >>> split_size(too_large, {"max_items_per_request": 64, "max_item_chars": 100}, {"hypothesis": ["a"] * 256}, 256)
        64
        >>> split_size(too_large, {"max_items_per_request": 1024}, {"hypothesis": ["a"] * 256}, 256)  # the body's bytes
        128
        >>> split_size(too_large, {"max_item_chars": 3}, {"hypothesis": ["a", "abcd"]}, 2) is None  # an item too long
        True
    """
    if error.status != 413 or n < 2:
        return None
    health = health if isinstance(health, Mapping) else {}
    limit, chars = health.get("max_items_per_request"), health.get("max_item_chars")
    if isinstance(limit, int) and 1 <= limit < n:
        return limit
    if isinstance(chars, int):
        columns = [v if isinstance(v, list) else [v] * n for v in body.values() if isinstance(v, (list, str))]
        if any(sum(len(c[i]) for c in columns if isinstance(c[i], str)) > chars for i in range(n)):
            return None
    return (n + 1) // 2


def _pieces(body: Mapping[str, Any], n: int, size: int) -> list[tuple[dict[str, Any], int]]:
    """``body`` cut into requests of at most ``size`` items (a string field is shared: sent with each)."""
    return [({k: v[s : s + size] if isinstance(v, list) else v for k, v in body.items()}, min(size, n - s)) for s in range(0, n, size)]


def _joined(answers: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The answers of a request's pieces as one: each column concatenated in order."""
    return {k: [x for a in answers for x in a[k]] if isinstance(answers[0][k], list) else answers[0][k] for k in answers[0]}


def post_splitting(http: HTTPClient, path: str, body: Mapping[str, Any], n: int) -> dict[str, Any]:
    """``POST path`` of ``body`` (``n`` items) with ``http``; a 413 answer is met by sending the items again in
    requests the server takes (:func:`split_size`), and the answers joined, so a client batch above the
    server's limits is split rather than refused.

    Args:
        http: a client of the judge server's base URL.
        path: the endpoint (``/score``).
        body: the request: lists of ``n`` values (a string field is shared by all items).
        n: the number of items.

    Returns:
        The answer, as one request of all ``n`` items would have it (each column in the items' order).

    Raises:
        RemoteError: (the client's error) a refusal splitting cannot help (an item over ``max_item_chars``, a 422...).

    Example:
        >>> from pluie_reward.serving import background, create_app
        >>> with background(create_app(judge, "para-fs", max_items_per_request=2)) as server, HTTPClient(server.url) as http:
        ...     len(post_splitting(http, "/score", {"source": "a", "hypothesis": ["b", "c", "d"]}, 3)["logratio"])
        3
    """
    try:
        return http.request("POST", path, json=body)
    except RemoteError as err:
        size = split_size(err, _health(http) if err.status == 413 and n > 1 else None, body, n)
        if size is None:
            raise
    return _joined([post_splitting(http, path, piece, m) for piece, m in _pieces(body, n, size)])


async def apost_splitting(http: AsyncHTTPClient, path: str, body: Mapping[str, Any], n: int) -> dict[str, Any]:
    """Async :func:`post_splitting` (the pieces sent concurrently)."""
    try:
        return await http.request("POST", path, json=body)
    except RemoteError as err:
        size = split_size(err, await _ahealth(http) if err.status == 413 and n > 1 else None, body, n)
        if size is None:
            raise
    return _joined(await asyncio.gather(*(apost_splitting(http, path, piece, m) for piece, m in _pieces(body, n, size))))


def _health(http: HTTPClient) -> Any:
    try:
        return http.request("GET", "/health")
    except RemoteError:  # e.g. an older server without /health: halve
        return None


async def _ahealth(http: AsyncHTTPClient) -> Any:
    try:
        return await http.request("GET", "/health")
    except RemoteError:
        return None


def check_texts(body: Mapping[str, Any], who: str = "") -> None:
    """Refuse, before sending, a body whose text cannot be encoded as JSON (a lone surrogate:
    :func:`~pluie_reward.common.errors.invalid_text`), naming the field and the item (its index in ``body``), as the
    local path does, rather than the bare ``UnicodeEncodeError`` of the whole request.

    Raises:
        ValueError: ``{who}field {name!r}, item {i}: character {k} is a lone surrogate ...``.

    Example:
        >>> check_texts({"source": "The cat.", "hypothesis": ["A cat.", "A\\udc80 cat."]})
        Traceback (most recent call last):
        ...
        ValueError: field 'hypothesis', item 1: character 1 is a lone surrogate (\\udc80), which is not valid Unicode text; ...
    """
    for name, values in body.items():
        for index, value in enumerate(values if isinstance(values, (list, tuple)) else [values]):
            if isinstance(value, str) and invalid_text(value):
                raise ValueError(f"{who}field {name!r}, item {index}: {invalid_text(value)}.")


def _check_output(output: str) -> str:
    """The ``/score`` column a verl ``output`` setting reads, or a task's name (its copy-proof reward)."""
    try:
        return choice(output, OUTPUTS + tuple(TASKS), "output")
    except ValueError:
        raise ValueError(f"output must be one of {list(OUTPUTS)} or a task's copy-proof reward "
                         f"{list(TASKS)} (case does not matter), got {output!r}.") from None


def _task_sources(task: Task, body: Mapping[str, Sequence[Any]], who: str, hint: str) -> Sequence[Any]:
    """The texts a task's completions must not copy: the request's column of the task's source field.

    Raises:
        ValueError: the field is not mapped (``hint``: how to map it).
    """
    if task.source_field not in body:
        raise ValueError(f"{who}the {task.name} reward reads the source the completion must not copy from the template "
                         f"field {task.source_field!r}, which is not mapped: {hint.format(field=task.source_field)}.")
    return body[task.source_field]


def _values(answer: Mapping[str, Any], output: str, n: int, url: str) -> list[float]:
    values = answer.get(output)
    if values is None and "probs" in answer:
        raise RemoteJudgeError(
            f"{url}: the server's template has N answers ({list((answer['probs'] or [{}])[0])}), not Yes/No, so there is "
            f"no {output!r}; RemotePluieReward reads it with output='prob' (or 'logprob') and answer=<label> for a "
            "choice, output='expected' for a rating scale."
        )
    if values is None and output == "p_calibrated":
        raise RemoteJudgeError(f"{url}: the server's judge has no calibration, so there is no p_calibrated for "
                               "output='calibrated': serve a judge loaded with Judge.load(..., calibration=...), or use "
                               "output='prob'.")
    if not isinstance(values, list) or len(values) != n:
        raise RemoteJudgeError(f"{url}: expected {n} values under {output!r}, got {str(answer)[:200]}.")
    return [float(v) for v in values]


class RemotePluieReward(AsyncReward):
    """A TRL reward function (async, so GRPOTrainer runs it concurrently) backed by a judge server.

    As :class:`~pluie_reward.PluieReward` (same completion text, ``fields``, ``output`` vocabulary and N-answer
    reads), scored by the server in concurrent requests. ``task=`` makes it the task's copy-proof reward
    (:meth:`~pluie_reward.integrations.novelty.Task.batch` on the server's ``p_yes``, computed here: a copy
    scores 0). Needs TRL >= 1.14, which awaits async callable classes.

    Args:
        url: the server's base URL (``http://host:port``).
        task: a task of :data:`~pluie_reward.integrations.novelty.TASKS` (or a ``Task``): the copy-proof reward;
            None (default): the ``output`` of the judge.
        fields: template field -> dataset column (default ``{"source": "source"}``; with a task, its source
            field read from the column of the same name, e.g. ``{"original": "original"}`` for revision).
        output, clip, answer, normalize, both_orders: as :class:`~pluie_reward.PluieReward` (``"verdict"``: the
            server's threshold; ``"calibrated"``: the server's judge needs a calibration).
        scale: a scale's ``(lowest, highest)`` for ``normalize=True`` (default: the server's ``/health``).
        config: ``output``, ``clip``, ``answer``, ``normalize``, ``both_orders`` and ``scale`` as one
            :class:`~pluie_reward.RewardConfig` (its ``threshold`` must stay None: the server's verdict is used).
        token: bearer token (default: ``$PLUIE_REWARD_TOKEN`` if set).
        timeout, retries, backoff: per request (:class:`~pluie_reward.common.http.HTTPConfig`).
        chunk_size: the most items one request carries (fewer when the server's ``/health``, read at the first call,
            says it takes fewer: its ``max_items_per_request``).
        name: ``__name__``, used by TRL in ``rewards/<name>/mean``; default the local reward's: ``"pluie"``,
            or the task's name (``"paraphrase"``).

    It logs what ``PluieReward`` logs (with a task, what :class:`~pluie_reward.CopyProofReward` logs).

    Example:
        >>> reward = RemotePluieReward("http://127.0.0.1:8000", fields={"source": "source"})
        >>> trainer = GRPOTrainer(model=..., reward_funcs=[reward], args=GRPOConfig(...),  # a policy, a dataset  # doctest: +SKIP
        ...                       train_dataset=ds)

        TRL awaits the reward; here against a judge server on a free port:

        >>> from pluie_reward.serving import background, create_app
        >>> with background(create_app(judge, "para-fs")) as server:  # a judge server (pluie-reward serve) on a free port
        ...     reward = RemotePluieReward(server.url, fields={"source": "source"})
        ...     asyncio.run(reward(prompts=["Paraphrase: The cat sleeps."], completions=["A cat is asleep."],
        ...                        source=["The cat sleeps."]))
        ...     paraphrase = RemotePluieReward(server.url, task="paraphrase")   # logs rewards/paraphrase/mean
        ...     asyncio.run(paraphrase(completions=["A cat is asleep.", "THE CAT SLEEPS!"], source=["The cat sleeps."] * 2))
        [...]
        [..., 0.0]
    """

    def __init__(
        self,
        url: str,
        *,
        task: "str | Task | None" = None,
        fields: Mapping[str, str] | None = None,
        output: str = "logratio",
        token: str | None = None,
        timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 0.5,
        chunk_size: int = 256,
        name: str | None = None,
        answer: str | None = None,
        normalize: bool = False,
        both_orders: bool = False,
        scale: tuple[float, float] | None = None,
        clip: float = 10.0,
        config: RewardConfig | None = None,
    ) -> None:
        self.url = _score_url(url)
        self.task = None if task is None else resolve_task(task)
        name = (self.task.name if self.task is not None else "pluie") if name is None else name
        source = "source" if self.task is None else self.task.source_field
        self.fields = dict({source: source} if fields is None else fields)
        if "hypothesis" in self.fields:
            raise ValueError(f"{name}: fields cannot map 'hypothesis': the completion fills it.")
        self.field_map = FieldMap.explicit(self.fields, who=f"{name}: ")
        self.config = reward_config(config, name, output=output, clip=clip, answer=answer, normalize=normalize,
                                    both_orders=both_orders, scale=scale)
        if self.config.threshold is not None:
            raise ValueError(f"{name}: threshold= is the judge server's (pluie-reward serve --threshold): the verdict "
                             "comes from the server; leave it out of the RewardConfig.")
        self.output, self.clip = self.config.output, self.config.clip
        self.reading: AnswerOutput | None = self.config.answer_output() if self.config.reads_answers else None
        if self.reading is not None and self.reading.both_orders and SECOND_CANDIDATE not in self.fields:
            raise ValueError(f"{name}: both_orders=True puts the completion in the second slot too: map the field "
                             f"{SECOND_CANDIDATE!r} to the column of the other candidate, e.g. "
                             f"fields={{..., '{SECOND_CANDIDATE}': 'reference'}}.")
        if self.task is not None:
            if self.reading is not None or self.output != "logratio":
                raise ValueError(f"{name}: task={self.task.name!r} is the copy-proof reward (the server's p_yes gated by "
                                 f"novelty), so output={self.output!r} does not apply: leave output= out.")
            _task_sources(self.task, self.fields, f"{name}: ", "pass fields={{{field!r}: '<column>'}}")
        self.token = token
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        HTTPConfig(timeout=timeout, retries=retries, backoff=backoff)  # checked now rather than at the first call
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1.")
        self.chunk_size = chunk_size
        self.request_items: int | None = None  # items per request, once the server's /health is read
        self.__name__ = name

    def payload(self, completions: Sequence[Any], columns: Mapping[str, Any], prompts: Sequence[Any] | None = None) -> dict[str, list[Any]]:
        """The ``/score`` fields for TRL's completions and dataset columns (``KeyError`` for a missing column)."""
        return self._body(self.gather(prompts, completions, columns))

    def _body(self, batch: Batch) -> dict[str, list[Any]]:
        if self.reading is not None:
            return self.reading.fields(batch.texts, batch.fields)
        return {"hypothesis": batch.texts, **batch.fields}

    async def ascore_batch(self, batch: Batch) -> Scores:
        """One reward per completion, from the server's ``/score`` answers."""
        body = self._body(batch)
        check_texts(body)  # one bad item: its index in the batch, not the UnicodeEncodeError of its chunk
        if self.task is not None:  # refused before sending, as the local reward refuses it; the judge reads the readings
            check_sources(body[self.task.source_field], f"{self.__name__}: ", f"(field {self.task.source_field!r})")
            body = self.task.judged(body)
        n = len(body["hypothesis"])
        if n == 0:
            return Scores([])
        base = self.url[: -len("/score")]
        config = HTTPConfig(timeout=self.timeout, retries=self.retries, backoff=self.backoff)
        async with AsyncHTTPClient(base, config, **_client_options(self.token)) as client:
            if self.request_items is None:
                await self._read_health(client)
            size = self.request_items or self.chunk_size
            starts = range(0, n, size)
            answers = await asyncio.gather(*(  # a chunk above the server's other limits (bytes) is split further (413)
                apost_splitting(client, "/score", {k: v[s : s + size] for k, v in body.items()}, min(size, n - s)) for s in starts
            ))
        if self.reading is not None:
            return self._read_answers(answers, starts, n, len(batch.texts))
        column = "p_yes" if self.task is not None else COLUMNS[self.output]
        values: list[float] = []
        verdicts: list[float] = []
        logratios: list[float] = []
        for s, answer in zip(starts, answers):
            size = min(starts.step, n - s)
            values += _values(answer, column, size, self.url)
            verdicts += _values(answer, "verdict", size, self.url)
            logratios += _values(answer, "logratio", size, self.url)
        extra: dict[str, list[float]] = {"logratio": logratios}
        if self.task is not None:  # the copy-proof reward, as the local one computes it
            scores = self.task.answer_scores({"p_yes": values, "verdict": verdicts}, {**body, "hypothesis": batch.texts})
            values, metrics, extra["novelty"] = scores.rewards, scores.metrics, scores.novelty
        else:
            metrics = {"accept_rate": sum(verdicts) / n}
        if self.output == "clip":
            values = [max(-self.clip, min(self.clip, x)) for x in values]
        return Scores(values, {f"{self.__name__}/{metric}": value for metric, value in metrics.items()},
                      {f"{self.__name__}/{key}": [round(x, 4) for x in column] for key, column in extra.items()})

    async def _read_health(self, client: AsyncHTTPClient) -> None:
        """What the reward reads once, at its first call, from the server's ``GET /health``: its item limit
        (``max_items_per_request``: no request carries more, where a larger one would be refused with 413 and split
        again at every call) and, for ``normalize=True`` without ``scale=``, the scale's range (its ``values``; a
        server that does not say leaves it unset, and the reading then asks for ``scale=``). A server without
        ``/health`` (404) says neither; one that cannot be reached fails here, as ``/score`` would."""
        try:
            health = await client.request("GET", "/health")
        except RemoteJudgeError as err:
            if err.status is None or err.status in RETRY_STATUS:
                raise
            health = None  # e.g. 404: an older server without /health
        health = health if isinstance(health, dict) else {}
        limit, values = health.get("max_items_per_request"), health.get("values")
        if values and self.reading is not None and self.reading.normalize and self.reading.scale is None:
            self.reading = dataclasses.replace(self.reading, scale=(min(values), max(values)))
        self.request_items = min(self.chunk_size, limit) if isinstance(limit, int) and limit >= 1 else self.chunk_size

    def _read_answers(self, answers: Sequence[Mapping[str, Any]], starts: range, items: int, n: int) -> Scores:
        """Rewards of an N-answer template from ``/score``'s columns (``items`` = n, or 2 n with both orders)."""
        records: list[dict[str, Any]] = []
        for s, answer in zip(starts, answers):
            size = min(starts.step, items - s)
            if "logratio" in answer and "probs" not in answer:
                raise RemoteJudgeError(
                    f"{self.url}: the server's template is Yes/No (PLUIE), so output={self.output!r}"
                    f"{' with answer=' if self.reading.answer is not None else ''} does not apply; use output='logratio' "
                    "(default), 'prob' (p_yes, without answer=), 'clip', 'calibrated' or 'verdict', or serve a template "
                    "with N answers (e.g. pluie-reward serve -t net-likert)."
                )
            keys = [k for k in ("probs", "logprobs", "choice", "expected") if k in answer]
            if any(not isinstance(answer[k], list) or len(answer[k]) != size for k in keys) or "probs" not in keys:
                raise RemoteJudgeError(f"{self.url}: expected {size} records (probs, logprobs, choice), got {str(answer)[:200]}.")
            records += [{k: answer[k][i] for k in keys} for i in range(size)]
        reading = self.reading.check_record(records[0], who=f"{self.__name__}: ")
        rewards = reading.rewards(records, n)
        return Scores(rewards, {f"{self.__name__}/accept_rate": reading.accept_rate(records, n)},
                      {f"{self.__name__}/{self.output}": [round(x, 4) for x in rewards]})

    def __repr__(self) -> str:
        read = "" if self.reading is None else f", reading={self.reading!r}"
        what = f"task={self.task.name!r}" if self.task is not None else f"output={self.output!r}"
        return f"RemotePluieReward({self.url!r}, fields={self.fields}, {what}{read})"


# verl -----------------------------------------------------------------------------------------
# verl (>= 0.7.1) calls the custom reward function once per sample with data_source, solution_str,
# ground_truth, extra_info (plus reward_router_address and reward_model_tokenizer with a reward model, and
# the config's reward_kwargs); it awaits an ``async def``. The result is a float or a dict with "score",
# whose keys, read from the first sample, are all logged: every sample returns the same keys.
VERL_EXTRA_KWARGS = frozenset({"reward_router_address", "reward_model_tokenizer"})
SETTINGS = ("url", "token", "fields", "output", "timeout", "retries", "backoff", "return_dict", "max_wait_ms", "max_batch_items",
            "template", "threshold")  # the last two: scoring on verl's reward model only (serving/genrm.py)
VERL_HINT = "fields={{'{field}': 'ground_truth' | 'data_source' | 'extra_info.<key>'}} (reward_kwargs)"
_warned: set[str] = set()
logger = logging.getLogger(__name__)

_clients: dict[int, httpx.Client] = {}
_clients_lock = threading.Lock()


def _shared_client() -> httpx.Client:
    """One keep-alive client per process (verl calls ``compute_score`` once per item)."""
    with _clients_lock:
        pid = os.getpid()
        if pid not in _clients:
            _clients[pid] = httpx.Client()
        return _clients[pid]


def _settings(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The client's settings among ``kwargs``; verl's other keyword arguments are ignored (unknown
    ones with a warning, once, in case a setting is misspelt)."""
    unknown = sorted(k for k in kwargs if k not in SETTINGS and k not in VERL_EXTRA_KWARGS and k not in _warned)
    if unknown:
        _warned.update(unknown)
        logger.warning("pluie_reward compute_score: ignoring keyword argument(s) %s (settings are %s).", unknown, list(SETTINGS))
    return {k: kwargs[k] for k in SETTINGS if k in kwargs}


def _verl_columns(data_sources: Sequence[Any], ground_truths: Sequence[Any], extra_infos: Sequence[Any]) -> dict[str, list[Any]]:
    """verl's arguments as columns: ``ground_truth``, ``data_source`` and ``extra_info.<key>`` (keys every item has)."""
    columns: dict[str, list[Any]] = {"ground_truth": list(ground_truths), "data_source": list(data_sources)}
    keys: list[str] | None = None
    for info in extra_infos:
        names = list(info) if isinstance(info, Mapping) else []
        keys = names if keys is None else [k for k in keys if k in names]
    for key in keys or []:
        columns[f"extra_info.{key}"] = [info[key] for info in extra_infos]
    return columns


def _verl_fields(
    data_sources: Sequence[Any], solution_strs: Sequence[Any], ground_truths: Sequence[Any], extra_infos: Sequence[Any] | None,
    fields: Mapping[str, str] | None, output: str = "logratio",
) -> dict[str, list[Any]]:
    """Template fields for verl's arguments: ``solution_strs`` fill ``hypothesis``, ``fields`` maps the others
    (default: ``ground_truth`` is the source, the ``source`` field or, for a task's ``output``, the task's source field)."""
    source = TASKS[output].source_field if output in TASKS else "source"
    mapping = dict({source: "ground_truth"} if fields is None else fields)
    if output in TASKS:
        _task_sources(TASKS[output], mapping, "", "pass " + VERL_HINT)
    texts = completion_texts(solution_strs, "verl's solution_strs")  # a string is refused, not read letter by letter
    n = len(texts)
    extra_infos = list(extra_infos) if extra_infos is not None else [None] * n
    field_map = FieldMap.explicit(mapping, what="source", hint=VERL_HINT)
    body: dict[str, list[Any]] = {"hypothesis": texts}
    body.update(field_map.gather(_verl_columns(data_sources, ground_truths, extra_infos), n, where="verl's arguments", per="items"))
    if output in TASKS:  # the copy-proof rewards' one rule, before sending
        check_blank_sources(body[TASKS[output].source_field], f"output={output!r}: ",
                            f"(field {TASKS[output].source_field!r}, from {mapping[TASKS[output].source_field]!r})")
    return body


def _verl_results(answer: Mapping[str, Any], output: str, body: Mapping[str, Sequence[Any]], url: str
                  ) -> list[dict[str, Any]]:
    """verl's result per item of a ``/score`` answer: ``score`` (the ``output`` column, or the task's copy-proof
    reward of the item's ``p_yes`` and texts), ``acc`` (the verdict), ``logratio``, ``p_yes`` (and ``novelty`` for a task)."""
    n = len(body["hypothesis"])
    columns = {column: _values(answer, column, n, url) for column in OUTPUTS}
    if output in TASKS:
        scores = TASKS[output].answer_scores(columns, body)
        values, extra = scores.rewards, {"novelty": scores.novelty}
    else:
        values, extra = columns[output], {}
    return [{"score": values[i], "acc": columns["verdict"][i], "logratio": columns["logratio"][i],
             "p_yes": columns["p_yes"][i], **{key: column[i] for key, column in extra.items()}} for i in range(n)]


_routes: set[str] = set()


def _log_route(where: str, what: str, level: int = logging.INFO) -> str:
    """Say (once per process and place) where :func:`compute_score` scores; returns ``where``."""
    if where not in _routes:
        _routes.add(where)
        logger.log(level, "pluie_reward compute_score: scoring on %s at %s.", what, where)
    return where


def _route(kwargs: Mapping[str, Any], url: str | None, settings: Mapping[str, Any]) -> tuple[str | None, str]:
    """Where a verl call scores, said in the log once per place (INFO; WARNING when the URL wins over verl's address):
    ``(reward_router_address, its base URL)`` on verl's reward model, when verl gives that address (a reward model is
    enabled) and no judge server URL is set (``url`` or ``$PLUIE_REWARD_URL``, which wins); else ``(None, the judge
    server's /score URL)``.

    Raises:
        ValueError: ``template``/``threshold`` with a judge server (its own apply), or no URL at all.
    """
    router = kwargs.get("reward_router_address")
    if router and not (url or os.environ.get(URL_ENV)):
        return router, _log_route(base_url(router), "verl's reward model (reward_router_address)")
    if "template" in settings or "threshold" in settings:
        raise ValueError("compute_score: template= and threshold= are settings of scoring on verl's reward model; a judge "
                         "server (url=... or $PLUIE_REWARD_URL) uses its own (pluie-reward serve --template/--threshold).")
    what = "the judge server" + (" (a configured URL wins over verl's reward_router_address)" if router else "")
    return None, _log_route(_score_url(url), what, logging.WARNING if router else logging.INFO)


def compute_score_batch(
    data_sources: Sequence[Any],
    solution_strs: Sequence[str],
    ground_truths: Sequence[Any],
    extra_infos: Sequence[Any] | None = None,
    *,
    url: str | None = None,
    token: str | None = None,
    fields: Mapping[str, str] | None = None,
    output: str = "logratio",
    timeout: float = 120.0,
    retries: int = 3,
    backoff: float = 0.5,
    return_dict: bool = False,
    **kwargs: Any,
) -> list[float] | list[dict[str, Any]]:
    """Score a batch in one request (synchronous; for your own loops, or verl's legacy batch manager).

    ``solution_strs`` fill ``hypothesis``; ``fields`` maps the other template fields to
    ``ground_truth`` (default for ``source``), ``data_source`` or ``extra_info.<key>``.
    ``output`` as for :func:`compute_score` (a task's name: its copy-proof reward). With ``return_dict`` each
    result is ``{"score", "acc" (the verdict, 1.0/0.0), "logratio", "p_yes"}`` (and ``"novelty"`` for a task).
    With verl's ``reward_router_address`` and ``reward_model_tokenizer`` and no judge server URL, the batch is scored
    on verl's reward model, as :func:`compute_score` scores there (settings ``template``, ``threshold``,
    ``max_batch_items``: :func:`~pluie_reward.serving.genrm.score`). verl's other keyword arguments are ignored.

    Example:
        >>> from pluie_reward.serving import background, create_app
        >>> with background(create_app(judge, "para-fs")) as server:  # a judge server (pluie-reward serve) on a free port
        ...     compute_score_batch(["mrpc"], ["A cat is asleep."], ["The cat sleeps."], url=server.url)
        [...]
    """
    settings = _settings(kwargs)
    output = _check_output(output)
    body = _verl_fields(data_sources, solution_strs, ground_truths, extra_infos, fields, output)
    if not body["hypothesis"]:
        return []
    check_texts(body, "compute_score_batch: ")
    router, where = _route(kwargs, url, settings)
    sent = TASKS[output].judged(body) if output in TASKS else body  # what the judge reads: a task's readings
    if router:  # verl's own reward model (GenRM)
        from pluie_reward.serving import genrm  # lazy: httpx-only client

        settings.update(timeout=timeout, retries=retries, backoff=backoff)
        answer = genrm.score(router, kwargs.get("reward_model_tokenizer"), sent, output, settings)
    else:
        config = HTTPConfig(timeout=timeout, retries=retries, backoff=backoff)
        with HTTPClient(where[: -len("/score")], config, client=_shared_client(), **_client_options(token)) as http:
            answer = post_splitting(http, "/score", sent, len(body["hypothesis"]))  # a batch above the server's limits: split
    results = _verl_results(answer, output, body, where)
    return results if return_dict else [result["score"] for result in results]


def compute_score_sync(
    data_source: Any = None, solution_str: str = "", ground_truth: Any = None, extra_info: Any = None, **kwargs: Any
) -> float | dict[str, Any]:
    """Synchronous verl reward function: one item, one request, for verl's ``remote`` reward manager
    (which rejects async functions); otherwise prefer the async :func:`compute_score`, which batches.

    Settings as for :func:`compute_score` (verl's reward model too: :func:`compute_score_batch`); ``return_dict``
    defaults to True.

    Example:
        >>> from pluie_reward.serving import background, create_app
        >>> with background(create_app(judge, "para-fs")) as server:  # a judge server (pluie-reward serve) on a free port
        ...     compute_score_sync("mrpc", "A cat is asleep.", "The cat sleeps.", url=server.url)
        {'score': ..., 'acc': ..., 'logratio': ..., 'p_yes': ...}
    """
    settings = dict(_settings(kwargs), **{k: kwargs[k] for k in VERL_EXTRA_KWARGS if k in kwargs})
    settings.setdefault("return_dict", True)
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], **settings)[0]


class _Coalescer:
    """Concurrent :func:`compute_score` calls on one event loop under one key (the judge server's: ``(score URL, token,
    timeout, retries, backoff)``), sent as one ``POST /score`` per wait window (a small micro-batcher: the judge server
    batches again across workers); a group that fails may go again in pieces (413) or item by item (one bad item)."""

    def __init__(self) -> None:
        self.pending: dict[tuple, list[tuple[dict[str, Any], asyncio.Future]]] = {}
        self.timers: dict[tuple, asyncio.TimerHandle] = {}
        self.tasks: set[asyncio.Task] = set()
        self.requests = 0  # requests sent, for tests and curiosity

    @classmethod
    def running(cls) -> "_Coalescer":
        """This class's coalescer of the running event loop (made at its first call, dropped with the loop)."""
        per_class = _coalescers.setdefault(asyncio.get_running_loop(), {})
        if cls not in per_class:
            per_class[cls] = cls()
        return per_class[cls]

    def submit(self, key: tuple, item: dict[str, Any], max_wait: float, max_items: int) -> asyncio.Future:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        queue = self.pending.setdefault(key, [])
        queue.append((item, future))
        if len(queue) >= max_items:
            self.flush(key)
        elif key not in self.timers:
            self.timers[key] = loop.call_later(max_wait, self.flush, key)
        return future

    def flush(self, key: tuple) -> None:
        timer = self.timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        waiting = [(item, f) for item, f in self.pending.pop(key, []) if not f.done()]
        if not waiting:
            return
        # items without an optional field (None) cannot share a request with items that have it
        groups: dict[tuple[str, ...], list[tuple[dict[str, Any], asyncio.Future]]] = {}
        for item, future in waiting:
            groups.setdefault(tuple(sorted(item)), []).append((item, future))
        for names, group in groups.items():
            task = asyncio.ensure_future(self.send(key, names, group))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def post(self, key: tuple, body: dict[str, list[Any]]) -> Mapping[str, Any]:
        """One request for a group's items: the judge server's ``/score`` answer, its columns checked."""
        url, token, timeout, retries, backoff = key
        answer = await apost_json(url, body, token=token, timeout=timeout, retries=retries, backoff=backoff)
        for output in OUTPUTS:
            _values(answer, output, len(body["hypothesis"]), url)
        return answer

    async def piece_size(self, key: tuple, err: BaseException, body: Mapping[str, Any], n: int) -> int | None:
        """For a group of ``n`` items the judge server refused with 413: the items per request it takes
        (:func:`split_size`, from its ``/health``), or None when the group must go item by item (an item too long)."""
        if not isinstance(err, RemoteJudgeError) or err.status != 413 or n < 2:
            return None
        url, token, timeout, retries, backoff = key
        async with AsyncHTTPClient(url[: -len("/score")], HTTPConfig(timeout=timeout, retries=retries, backoff=backoff),
                                   **_client_options(token)) as http:
            return split_size(err, await _ahealth(http), body, n)

    def splits(self, err: BaseException) -> bool:
        """Whether ``err`` may be one item's fault, so that each item of the group is sent again alone: 422, 413 for an
        item over the server's ``max_item_chars``, a ``ValueError`` (an item a judge refuses)."""
        return isinstance(err, ValueError) or (isinstance(err, RemoteJudgeError) and err.status in (413, 422))

    async def send(self, key: tuple, names: tuple[str, ...], group: list[tuple[dict[str, Any], asyncio.Future]]) -> None:
        body = {name: [item[name] for item, _ in group] for name in names}
        self.requests += 1
        try:
            answer = await self.post(key, body)
        except BaseException as err:  # noqa: BLE001 - every waiting caller gets the error
            try:
                size = await self.piece_size(key, err, body, len(group))
            except Exception:  # noqa: BLE001 - no /health answer: the error below stands
                size = None
            if size is not None:  # a group above the server's limits: sent again in pieces it takes, each failing alone
                await asyncio.gather(*(self.send(key, names, group[s : s + size]) for s in range(0, len(group), size)))
                return
            if self.splits(err) and len(group) > 1:  # one bad item: not the others
                await asyncio.gather(*(self.send(key, names, [one]) for one in group))
                return
            for _, future in group:
                if not future.done():
                    future.set_exception(err)
            if not isinstance(err, Exception):
                raise
            return
        for i, (_, future) in enumerate(group):
            if not future.done():
                future.set_result({output: answer[output][i] for output in OUTPUTS})


class _GenRMCoalescer(_Coalescer):
    """The calls scored on verl's reward model (keys: ``(base URL, template, threshold)``): one
    :func:`~pluie_reward.serving.genrm.ascore_batch` per wait window, i.e. one ``/v1/completions`` request."""

    async def post(self, key: tuple, body: dict[str, list[Any]]) -> Mapping[str, Any]:
        from pluie_reward.serving import genrm  # lazy: httpx-only client

        return await genrm.ascore_batch(key, body)


_coalescers: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[type, _Coalescer]]" = weakref.WeakKeyDictionary()


async def compute_score(
    data_source: Any = None, solution_str: str = "", ground_truth: Any = None, extra_info: Any = None, **kwargs: Any
) -> float | dict[str, Any]:
    """verl custom reward function (``reward.custom_reward_function.name=compute_score``), async.

    verl's reward loop awaits it once per sample, many at a time; calls made on the same event loop
    within ``max_wait_ms`` of each other (and with the same URL and token) go to the server as one
    ``POST /score`` of up to ``max_batch_items`` items.

    With a reward model enabled, verl adds ``reward_router_address`` and ``reward_model_tokenizer``; without a
    judge server URL (``url`` or ``$PLUIE_REWARD_URL``, which wins), the calls are scored on verl's own vLLM
    servers of that model (:mod:`pluie_reward.serving.genrm`: gathered the same way, one ``/v1/completions``
    request per batch), with the settings ``template`` (default: the task's for a task's ``output``, else
    ``para-fs``) and ``threshold`` (of the verdict, default 0). The log says which, once (INFO; WARNING when
    the URL wins over verl's address).

    Settings come from ``reward.custom_reward_function.reward_kwargs``: ``url``, ``token``, ``fields``
    (template field -> ``ground_truth`` (default for ``source``), ``data_source`` or ``extra_info.<key>``),
    ``output`` (``logratio``, ``p_yes``, ``verdict``, or a task's copy-proof reward: ``paraphrase``,
    ``translation``, ``revision``), ``timeout``, ``retries``, ``backoff``, ``return_dict`` (default True),
    ``max_wait_ms`` (default 10), ``max_batch_items`` (default 256); or ``$PLUIE_REWARD_URL`` /
    ``$PLUIE_REWARD_TOKEN``. verl's other keyword arguments are ignored.

    Raises:
        ValueError: ``template``/``threshold`` with a judge server (its own apply).
        GenRMError: verl's reward model server cannot give what PLUIE needs (:mod:`~pluie_reward.serving.genrm`).

    Returns:
        ``{"score": <output>, "acc": verdict (1.0/0.0), "logratio", "p_yes"}`` (verl logs every key;
        ``val-core/<data source>/acc`` is then the accept rate; a task's output adds ``"novelty"``), or the
        float with ``return_dict=False``.

    Example:
        >>> from pluie_reward.serving import background, create_app
        >>> with background(create_app(judge, "para-fs")) as server:  # a judge server (pluie-reward serve) on a free port
        ...     asyncio.run(compute_score("mrpc", "A cat is asleep.", "The cat sleeps.", url=server.url))  # verl awaits it
        {'score': ..., 'acc': ..., 'logratio': ..., 'p_yes': ...}
    """
    settings = _settings(kwargs)
    output = _check_output(settings.get("output", "logratio"))
    max_wait = float(settings.get("max_wait_ms", 10.0)) / 1000.0
    max_items = int(settings.get("max_batch_items", 256))
    if max_wait < 0 or max_items < 1:
        raise ValueError("max_wait_ms must be >= 0 and max_batch_items >= 1.")
    body = _verl_fields([data_source], [solution_str], [ground_truth], [extra_info], settings.get("fields"), output)
    sent = TASKS[output].judged(body) if output in TASKS else body  # what the judge reads: a task's readings
    item = {name: values[0] for name, values in sent.items() if values[0] is not None}  # None: an absent optional field
    for name, value in item.items():  # checked here, so that a bad item fails alone, not its whole batch
        if not isinstance(value, str):
            raise TypeError(f"compute_score: field {name!r} must be a string, got {type(value).__name__} ({value!r:.60}).")
        if invalid_text(value):
            raise ValueError(f"compute_score: field {name!r}: {invalid_text(value)}.")
    router, where = _route(kwargs, settings.get("url"), settings)
    if router:  # verl's own reward model (GenRM)
        from pluie_reward.serving import genrm  # lazy: httpx-only client

        key = await genrm.ready(router, kwargs.get("reward_model_tokenizer"), output, settings, max_items)
        answer = await _GenRMCoalescer.running().submit(key, item, max_wait, max_items)
    else:
        key = (where, settings.get("token"), float(settings.get("timeout", 120.0)), int(settings.get("retries", 3)),
               float(settings.get("backoff", 0.5)))
        answer = await _Coalescer.running().submit(key, item, max_wait, max_items)
    result = _verl_results({k: [v] for k, v in answer.items()}, output, body, where)[0]
    return result if settings.get("return_dict", True) else result["score"]
