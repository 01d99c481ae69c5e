"""The remote engine: a judge served by vLLM's OpenAI-compatible server (``vllm serve``), reached
over HTTP, one or several replicas.

The judge renders and tokenizes prompts here (same tokenizer as the server's model) and sends token
ids to ``POST /v1/completions``:

* one-token answers: ``max_tokens=1`` with ``logprob_token_ids`` = the answers' ids. The server
  returns exactly those tokens' values whatever their rank and whatever its ``--logprobs-mode``
  (log-probabilities or raw logits differ by a constant per position, and PLUIE only uses
  differences and softmaxes over the answers), so no server flag is needed;
* multi-token answers (eq. 4): teacher forcing, one prompt per answer token. Sums need normalised
  log-probabilities, i.e. the server's default ``--logprobs-mode raw_logprobs`` (or
  ``processed_logprobs``): the engine checks it through ``/server_info`` (servers started with
  ``VLLM_SERVER_DEV_MODE=1``) or takes ``logprobs_mode=`` from the caller, and refuses otherwise;
* the judge's own turn (INDIRECT): greedy completion with ``return_token_ids``.

HTTP goes through :mod:`pluie_reward.common.http` (replica choice, retries); failures raise
:class:`RemoteEngineError`.

Example:
    >>> judge = Judge.connect(["http://10.0.0.5:8000", "http://10.0.0.6:8000"],  # vLLM servers  # doctest: +SKIP
    ...                       tokenizer="Qwen/Qwen2.5-7B-Instruct")
"""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

from ..common.errors import RemoteError
from .base import Request
from .loop import LoopEngine

NORMALISED_MODES = frozenset({"raw_logprobs", "processed_logprobs"})


class RemoteEngineError(RemoteError):
    """The judge server refused a request, no replica answered after the retries, or an answer was
    not what the engine needs (``status``, ``url``, ``detail``: see :class:`~pluie_reward.common.errors.RemoteError`)."""


def parse_urls(urls: "str | Sequence[str]") -> list[str]:
    """Base URLs of the replicas (a list, or one comma-separated string); ``/v1`` suffixes dropped.

    Example:
        >>> parse_urls("http://a:8000/v1/, http://b:8000")
        ['http://a:8000', 'http://b:8000']
    """
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out = []
    for url in items:
        url = str(url).strip().rstrip("/")
        if url.endswith("/v1"):
            url = url[: -len("/v1")]
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"judge server URL {url!r} must start with http:// or https://.")
        out.append(url)
    if not out:
        raise ValueError("Judge.connect needs at least one server URL.")
    return out


def _find_key(data: Any, key: str) -> Any:
    """The first value of ``key`` in nested JSON (dicts and lists), or None.

    Example:
        >>> _find_key({"vllm_config": {"model_config": {"logprobs_mode": "raw_logprobs"}}}, "logprobs_mode")
        'raw_logprobs'
    """
    if isinstance(data, dict):
        if key in data:
            return data[key]
        data = list(data.values())
    if isinstance(data, list):
        for item in data:
            found = _find_key(item, key)
            if found is not None:
                return found
    return None


def _value(logprobs: dict[str, Any], token: int) -> float:
    key = f"token_id:{token}"
    if key not in logprobs:
        raise RemoteEngineError(f"the server did not return the log-probability of token {token} ({sorted(logprobs)[:4]}...).")
    return float(logprobs[key])


class RemoteEngine(LoopEngine):
    """A judge on one or several vLLM OpenAI-compatible servers.

    Args:
        urls: the servers' base URLs (``http://host:8000``), a list or one comma-separated string.
        model: the served model name (default: the first one ``/v1/models`` lists).
        tokenizer: a tokenizer object or the HF id/folder of the served model's tokenizer (default:
            the model path the server reports, when it exists here, else ``model``).
        api_key: sent as ``Authorization: Bearer <api_key>`` (vLLM's ``--api-key``).
        timeout: seconds per HTTP request (connecting: at most 10 s).
        retries: extra attempts per request (on another replica when there is one).
        backoff: seconds before the first retry, doubled at each further one (see
            :class:`~pluie_reward.common.http.HTTPConfig`).
        chunk_size: prompts per HTTP request.
        logprobs_mode: the servers' ``--logprobs-mode`` when you know it (needed for multi-token
            answers when ``/server_info`` is not exposed).

    Example:
        >>> engine = RemoteEngine("http://127.0.0.1:8000", tokenizer="Qwen/Qwen2.5-7B-Instruct")  # a vLLM server  # doctest: +SKIP
    """

    batch_tokens = 8192  # a hint for callers sizing their calls: the engine batches continuously itself

    def __init__(
        self,
        urls: "str | Sequence[str]",
        *,
        model: str | None = None,
        tokenizer: Any = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        retries: int = 3,
        backoff: float = 0.5,
        chunk_size: int = 32,
        logprobs_mode: str | None = None,
    ) -> None:
        from ..common.http import HTTPConfig  # optional: httpx

        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
        config = HTTPConfig(timeout=timeout, retries=retries, backoff=backoff)
        urls = parse_urls(urls)
        self.retries, self.backoff, self.chunk_size = retries, backoff, chunk_size
        self.declared_mode = logprobs_mode
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._start_loop("remote")
        self._http = self._run(self._make_client(urls, config, headers))
        self.replicas = self._http.replicas  # the replica choice's state, shared with the client
        self.stats = self._http.stats  # requests answered, attempts retried
        self._normalised: bool | None = None
        try:
            served = self._run(self._http.request("GET", "/v1/models"))["data"]
            if not served:
                raise RemoteEngineError(f"{self.replicas[0].url} serves no model.", url=self.replicas[0].url)
            entry = next((m for m in served if m.get("id") == model), None) if model else served[0]
            if entry is None:
                raise RemoteEngineError(f"the server does not serve {model!r}; it serves {[m.get('id') for m in served]}.")
            self.model = entry["id"]
            self.max_length = entry.get("max_model_len")
            self.tokenizer = self._tokenizer(tokenizer, entry)
        except BaseException:
            self.close()  # a failed connect leaves no thread and no connections behind
            raise

    @staticmethod
    async def _make_client(urls: list[str], config: Any, headers: dict[str, str]) -> Any:
        """The HTTP client, made on the engine's event loop (which it will run on)."""
        from ..common.http import AsyncHTTPClient  # optional: httpx

        return AsyncHTTPClient(urls, config, headers=headers, name="judge server", error=RemoteEngineError, max_connections=256)

    def _tokenizer(self, tokenizer: Any, entry: dict) -> Any:
        if tokenizer is not None and not isinstance(tokenizer, str):
            return tokenizer
        from pathlib import Path

        from transformers import AutoTokenizer

        if tokenizer is None:
            root = entry.get("root") or self.model
            tokenizer = root if Path(root).exists() else self.model
        return AutoTokenizer.from_pretrained(tokenizer)

    @property
    def name(self) -> str:
        """The served model and where it is served."""
        return f"{self.model}@{','.join(r.url for r in self.replicas)}"

    def close(self) -> None:
        """Close the HTTP connections."""
        if self._loop.is_running():
            self._run(self._http.aclose())
        self._stop_loop()

    async def _completions(self, prompts: Sequence[Sequence[int]], **body: Any) -> list[dict]:
        """``/v1/completions`` for many token-id prompts, in chunks sent concurrently; choices in order."""
        chunks = [list(prompts[i : i + self.chunk_size]) for i in range(0, len(prompts), self.chunk_size)]
        answers = await asyncio.gather(*(self._http.request(
            "POST", "/v1/completions", json={"model": self.model, "prompt": [list(p) for p in chunk], "temperature": 0, **body}
        ) for chunk in chunks))
        out: list[dict] = []
        for chunk, answer in zip(chunks, answers):
            choices = sorted(answer["choices"], key=lambda c: c["index"])
            if len(choices) != len(chunk):
                raise RemoteEngineError(f"the server answered {len(choices)} choices for {len(chunk)} prompts.")
            out.extend(choices)
        return out

    async def _check_normalised(self) -> None:
        """Multi-token answers sum log-probabilities: make sure the server returns normalised ones."""
        if self._normalised:
            return
        mode = self.declared_mode
        if mode is None:
            try:
                mode = _find_key(await self._http.request("GET", "/server_info?config_format=json"), "logprobs_mode")
            except RemoteEngineError:  # 404 unless the server runs with VLLM_SERVER_DEV_MODE=1
                mode = None
        if mode not in NORMALISED_MODES:
            raise RemoteEngineError(
                "multi-token answers need normalised log-probabilities: start the servers with "
                "--logprobs-mode raw_logprobs (vLLM's default) and either VLLM_SERVER_DEV_MODE=1 (so /server_info "
                "tells) or pass logprobs_mode='raw_logprobs' to Judge.connect"
                + (f"; the server reports {mode!r}." if mode else "; the server's mode could not be read.")
            )
        # sanity check: a log-probability is never positive
        eos = int(self.tokenizer.eos_token_id or 0)
        probe = (await self._completions([[eos]], max_tokens=1, logprobs=1, return_tokens_as_token_ids=True))[0]
        top = max(float(v) for v in probe["logprobs"]["top_logprobs"][0].values())
        if top > 1e-4:
            raise RemoteEngineError(f"the server returned a positive log-probability ({top:.3g}): it serves raw logits.")
        self._normalised = True

    # the protocol ----------------------------------------------------------------------------------
    async def _answers(self, requests: Sequence[Request], answers: Sequence[Sequence[int]]) -> list[list[float]]:
        answers = [tuple(a) for a in answers]
        if all(len(a) == 1 for a in answers):
            ids = [a[0] for a in answers]
            choices = await self._completions(
                [r.ids for r in requests], max_tokens=1, logprobs=len(ids), logprob_token_ids=ids, return_tokens_as_token_ids=True
            )
            return [[_value(c["logprobs"]["top_logprobs"][0], t) for t in ids] for c in choices]
        await self._check_normalised()
        jobs = [(i, k, list(r.ids) + list(a[:t]), a[t])
                for i, r in enumerate(requests) for k, a in enumerate(answers) for t in range(len(a))]
        values = [[0.0] * len(answers) for _ in requests]
        for token in {job[3] for job in jobs}:  # one request shape per target token
            group = [job for job in jobs if job[3] == token]
            choices = await self._completions(
                [job[2] for job in group], max_tokens=1, logprobs=1, logprob_token_ids=[token], return_tokens_as_token_ids=True
            )
            for (i, k, _, _), choice in zip(group, choices):
                values[i][k] += _value(choice["logprobs"]["top_logprobs"][0], token)
        return values

    async def _generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop_ids: Sequence[int]) -> list[list[int]]:
        choices = await self._completions(prompts, max_tokens=max_new_tokens, stop_token_ids=list(stop_ids), return_token_ids=True)
        return [list(c.get("token_ids") or []) for c in choices]

    def __repr__(self) -> str:
        return f"RemoteEngine({self.name!r})"
