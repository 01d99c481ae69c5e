"""Clients of the judge server: a TRL reward function and verl ``compute_score`` functions.

Both send the template fields to ``POST /score``, with a timeout, retries on connection errors and
on 429/502/503/504 (exponential back-off), and a clear error on other failures. This module uses
absolute imports only, so verl can load it by file path (``custom_reward_function.path``).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from typing import Any, Mapping, Sequence

import httpx

RETRY_STATUS = frozenset({429, 502, 503, 504})
OUTPUTS = ("logratio", "p_yes", "verdict")
URL_ENV, TOKEN_ENV = "PLUIE_REWARD_URL", "PLUIE_REWARD_TOKEN"


class RemoteJudgeError(RuntimeError):
    """The judge server refused the request or could not be reached after the retries."""


def _score_url(url: str | None) -> str:
    url = url or os.environ.get(URL_ENV)
    if not url:
        raise ValueError(f"no judge server URL: pass url=... or set {URL_ENV}=http://host:port.")
    url = url.rstrip("/")
    return url if url.endswith("/score") else url + "/score"


def _headers(token: str | None) -> dict[str, str]:
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    return {"Authorization": f"Bearer {token}"} if token else {}


def _answer(url: str, response: httpx.Response) -> dict[str, Any] | None:
    """The JSON answer, ``None`` when worth retrying, or :class:`RemoteJudgeError`."""
    if response.status_code in RETRY_STATUS:
        return None
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise RemoteJudgeError(f"{url}: HTTP {response.status_code}: {detail}")
    return response.json()


def post_json(
    url: str, payload: Mapping[str, Any], *, token: str | None = None, timeout: float = 120.0,
    retries: int = 3, backoff: float = 0.5, client: httpx.Client | None = None,
) -> dict[str, Any]:
    """POST ``payload`` and return the JSON answer, retrying transient failures.

    Example:
        >>> post_json("http://127.0.0.1:8000/score", {"source": ["a"], "hypothesis": ["b"]})  # doctest: +SKIP
        {'logratio': [0.4], 'p_yes': [0.6], 'verdict': [True]}
    """
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}.")
    own = client is None
    client = client or httpx.Client(timeout=timeout)
    last: object = None
    try:
        for attempt in range(retries + 1):
            try:
                response = client.post(url, json=payload, headers=_headers(token), timeout=timeout)
                answer = _answer(url, response)
                if answer is not None:
                    return answer
                last = f"HTTP {response.status_code}"
            except httpx.TransportError as err:
                last = f"{type(err).__name__}: {err}"
            if attempt < retries:
                time.sleep(backoff * 2**attempt)
    finally:
        if own:
            client.close()
    raise RemoteJudgeError(f"{url}: no answer after {retries + 1} attempts (last: {last}); is the server running?")


async def apost_json(
    url: str, payload: Mapping[str, Any], *, token: str | None = None, timeout: float = 120.0,
    retries: int = 3, backoff: float = 0.5, client: httpx.AsyncClient | None = None,
) -> dict[str, Any]:
    """Async :func:`post_json`."""
    if retries < 0:
        raise ValueError(f"retries must be >= 0, got {retries}.")
    own = client is None
    client = client or httpx.AsyncClient(timeout=timeout)
    last: object = None
    try:
        for attempt in range(retries + 1):
            try:
                response = await client.post(url, json=payload, headers=_headers(token), timeout=timeout)
                answer = _answer(url, response)
                if answer is not None:
                    return answer
                last = f"HTTP {response.status_code}"
            except httpx.TransportError as err:
                last = f"{type(err).__name__}: {err}"
            if attempt < retries:
                await asyncio.sleep(backoff * 2**attempt)
    finally:
        if own:
            await client.aclose()
    raise RemoteJudgeError(f"{url}: no answer after {retries + 1} attempts (last: {last}); is the server running?")


def _completion_text(index: int, completion: Any) -> str:
    """A TRL completion as text: a string, or the content of the last message of a conversation."""
    if isinstance(completion, list) and completion and isinstance(completion[-1], Mapping):
        completion = completion[-1].get("content")
        if isinstance(completion, list):  # content parts
            completion = "".join(p.get("text", "") for p in completion if isinstance(p, Mapping))
    if not isinstance(completion, str):
        raise ValueError(
            f"completion {index} is {type(completion).__name__}, not text (a string or a list of chat messages)."
        )
    return completion


def _check_output(output: str) -> str:
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {list(OUTPUTS)}, got {output!r}.")
    return output


def _values(answer: Mapping[str, Any], output: str, n: int, url: str) -> list[float]:
    values = answer.get(output)
    if not isinstance(values, list) or len(values) != n:
        raise RemoteJudgeError(f"{url}: expected {n} values under {output!r}, got {str(answer)[:200]}.")
    return [float(v) for v in values]


class RemotePluieReward:
    """A TRL reward function (async, so GRPOTrainer runs it concurrently) backed by a judge server.

    The completion fills the template's ``hypothesis``; ``fields`` maps the other template fields
    to dataset columns, which TRL passes as keyword arguments. Large batches are sent as several
    concurrent requests of at most ``chunk_size`` items; the server batches them again.

    Args:
        url: the server's base URL (``http://host:port``).
        fields: template field -> dataset column (default ``{"source": "source"}``).
        output: ``logratio`` (default), ``p_yes`` or ``verdict`` (1.0/0.0).
        token: bearer token (default: ``$PLUIE_REWARD_TOKEN`` if set).
        timeout, retries, backoff: per request; retries on connection errors and 429/502/503/504.
        name: ``__name__``, used by TRL in ``rewards/<name>/mean``.

    Example:
        >>> reward = RemotePluieReward("http://127.0.0.1:8000", fields={"source": "source"})  # doctest: +SKIP
        >>> trainer = GRPOTrainer(model=..., reward_funcs=[reward], args=GRPOConfig(...), train_dataset=ds)  # doctest: +SKIP
    """

    def __init__(
        self,
        url: str,
        *,
        fields: Mapping[str, str] | None = None,
        output: str = "logratio",
        token: str | None = None,
        timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 0.5,
        chunk_size: int = 256,
        name: str = "pluie_remote",
    ) -> None:
        self.url = _score_url(url)
        self.fields = dict({"source": "source"} if fields is None else fields)
        self.output = _check_output(output)
        self.token = token
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        if chunk_size < 1:
            raise ValueError("chunk_size must be at least 1.")
        self.chunk_size = chunk_size
        self.__name__ = name

    def payload(self, completions: Sequence[Any], columns: Mapping[str, Any]) -> dict[str, list[Any]]:
        """The ``/score`` fields for TRL's completions and dataset columns."""
        body: dict[str, list[Any]] = {"hypothesis": [_completion_text(i, c) for i, c in enumerate(completions)]}
        for field, column in self.fields.items():
            if column not in columns:
                available = sorted(k for k in columns if k not in ("trainer_state", "log_extra", "log_metric"))
                raise ValueError(
                    f"{self.__name__}: template field {field!r} reads dataset column {column!r}, which the batch "
                    f"does not have; columns: {available}. Pass fields={{{field!r}: '<column>'}}."
                )
            body[field] = list(columns[column])
        return body

    async def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **kwargs: Any) -> list[float]:
        """One reward per completion."""
        body = self.payload(completions, kwargs)
        n = len(body["hypothesis"])
        if n == 0:
            return []
        starts = range(0, n, self.chunk_size)
        async with httpx.AsyncClient(timeout=self.timeout) as client:
            answers = await asyncio.gather(*(
                apost_json(
                    self.url, {k: v[s : s + self.chunk_size] for k, v in body.items()}, token=self.token,
                    timeout=self.timeout, retries=self.retries, backoff=self.backoff, client=client,
                )
                for s in starts
            ))
        values: list[float] = []
        verdicts: list[float] = []
        for s, answer in zip(starts, answers):
            size = min(self.chunk_size, n - s)
            values += _values(answer, self.output, size, self.url)
            verdicts += _values(answer, "verdict", size, self.url)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric):
            log_metric(f"{self.__name__}/accept_rate", sum(verdicts) / n)
        return values

    def __repr__(self) -> str:
        return f"RemotePluieReward({self.url!r}, fields={self.fields}, output={self.output!r})"


# verl -----------------------------------------------------------------------------------------
_clients: dict[int, httpx.Client] = {}
_clients_lock = threading.Lock()


def _shared_client() -> httpx.Client:
    """One keep-alive client per process (verl calls ``compute_score`` once per item)."""
    with _clients_lock:
        pid = os.getpid()
        if pid not in _clients:
            _clients[pid] = httpx.Client()
        return _clients[pid]


def _field_value(field: str, source: str, data_source: Any, ground_truth: Any, extra_info: Any) -> Any:
    if source == "ground_truth":
        return ground_truth
    if source == "data_source":
        return data_source
    if source.startswith("extra_info."):
        key = source[len("extra_info.") :]
        if not isinstance(extra_info, Mapping) or key not in extra_info:
            keys = sorted(extra_info) if isinstance(extra_info, Mapping) else None
            raise ValueError(f"field {field!r} reads extra_info[{key!r}], which is missing (extra_info keys: {keys}).")
        return extra_info[key]
    raise ValueError(f"field {field!r}: source {source!r} must be 'ground_truth', 'data_source' or 'extra_info.<key>'.")


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
    return_dict: bool = False,
) -> list[float] | list[dict[str, Any]]:
    """verl ``BatchRewardManager``-style scoring: one request for the whole batch.

    ``solution_strs`` fill ``hypothesis``; ``fields`` maps the other template fields to
    ``ground_truth`` (default for ``source``), ``data_source`` or ``extra_info.<key>``.
    With ``return_dict`` each result is ``{"score", "p_yes", "logratio", "verdict"}`` (verl logs the extras).

    Example:
        >>> compute_score_batch(["mrpc"], ["A cat is asleep."], ["The cat sleeps."], url="http://127.0.0.1:8000")  # doctest: +SKIP
        [1.7]
    """
    output = _check_output(output)
    mapping = dict({"source": "ground_truth"} if fields is None else fields)
    n = len(solution_strs)
    extra_infos = list(extra_infos) if extra_infos is not None else [None] * n
    if n == 0:
        return []
    body: dict[str, list[Any]] = {"hypothesis": [_completion_text(i, s) for i, s in enumerate(solution_strs)]}
    for field, source in mapping.items():
        body[field] = [
            _field_value(field, source, d, g, e) for d, g, e in zip(list(data_sources), list(ground_truths), extra_infos)
        ]
    score_url = _score_url(url)
    answer = post_json(score_url, body, token=token, timeout=timeout, retries=retries, client=_shared_client())
    values = _values(answer, output, n, score_url)
    if not return_dict:
        return values
    return [
        {"score": v, "logratio": float(lr), "p_yes": float(p), "verdict": float(vd)}
        for v, lr, p, vd in zip(values, answer["logratio"], answer["p_yes"], answer["verdict"])
    ]


def compute_score(
    data_source: Any,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    **kwargs: Any,
) -> float | dict[str, Any]:
    """verl custom reward function (``custom_reward_function.name=compute_score``): one item.

    Settings come from ``custom_reward_function.reward_kwargs`` (``url``, ``token``, ``fields``,
    ``output``, ``timeout``, ``retries``, ``return_dict``) or ``$PLUIE_REWARD_URL`` / ``$PLUIE_REWARD_TOKEN``.

    Example:
        >>> compute_score("mrpc", "A cat is asleep.", "The cat sleeps.", url="http://127.0.0.1:8000")  # doctest: +SKIP
        1.7
    """
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info], **kwargs)[0]
