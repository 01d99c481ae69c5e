"""verl's reward loop as far as it runs without verl: its router in front of the reward model servers, and its
reward manager calling the custom reward function (tests/test_genrm.py, tests/test_engines.py).

verl (0.9.1 on PyPI) does not import without ray and tensordict (``verl/__init__.py`` imports ``DataProto``), and
it pins transformers below 5.11, so both are written here from its code:

* :class:`NaiveRouter`: ``verl/experimental/reward_loop/router/naive_router.py``, a catch-all proxy
  (``/{endpoint:path}``, GET and POST): the body and headers go to the least busy worker, the query string is
  dropped, a JSON answer comes back with status 200 and any worker status >= 400 is re-raised, i.e. answered
  500 ``Internal Server Error`` (FastAPI's answer to an unhandled exception).
* :func:`verl_reward_calls`: ``RewardLoopWorker.compute_score_batch`` (``reward_loop.py``: one task per sample,
  gathered) running ``NaiveRewardManager.run_single`` (``reward_manager/naive.py``: the keyword arguments, the
  ``extra_info`` keys it adds, the dict result) on the function ``get_custom_reward_fn``
  (``verl/trainer/ppo/reward.py``) wraps with ``reward_kwargs``.
"""

from __future__ import annotations

import asyncio
import collections
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Mapping, Sequence

import httpx


class _Forward(BaseHTTPRequestHandler):
    server: "NaiveRouter"

    def _forward(self) -> None:
        path = self.path.split("?", 1)[0]  # verl's route reads the path only
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        worker = min(self.server.in_flight, key=self.server.in_flight.get)
        self.server.counts[path] += 1
        self.server.in_flight[worker] += 1
        try:
            answer = httpx.request(self.command, worker + path, content=body, timeout=600,
                                   headers={"Content-Type": self.headers.get("Content-Type", "application/json")})
        finally:
            self.server.in_flight[worker] -= 1
        status, data = (200, answer.content) if answer.status_code < 400 else (500, b"Internal Server Error")
        self.send_response(status)
        self.send_header("Content-Type", "application/json" if status == 200 else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _forward

    def log_message(self, *args: Any) -> None:
        pass


class NaiveRouter(ThreadingHTTPServer):
    """verl's router on 127.0.0.1 in a thread; ``address`` is what verl hands the reward function
    (``host:port``), ``counts`` the requests forwarded per path."""

    daemon_threads = True

    def __init__(self, worker_urls: Sequence[str]) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.in_flight = {url.rstrip("/"): 0 for url in worker_urls}
        self.counts: collections.Counter = collections.Counter()
        self.address = f"127.0.0.1:{self.server_address[1]}"
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    def __enter__(self) -> "NaiveRouter":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.server_close()


def verl_reward_calls(compute_score: Callable, samples: Sequence[Mapping[str, Any]], *, reward_router_address: str | None,
                      reward_model_tokenizer: Any, reward_kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What verl's reward loop does with a batch of samples (``data_source``, ``solution_str``, ``ground_truth``,
    ``extra_info``): one ``run_single`` task per sample, gathered on one event loop.

    Returns:
        ``run_single``'s results: ``{"reward_score", "reward_extra_info"}`` per sample.
    """
    async def custom_reward_fn(*args: Any, **kwargs: Any) -> Any:  # reward.py: _call_with_kwargs_async
        return await compute_score(*args, **{**kwargs, **reward_kwargs})

    async def run_single(sample: Mapping[str, Any]) -> dict[str, Any]:  # reward_manager/naive.py
        extra_info = dict(sample.get("extra_info") or {})
        extra_info["num_turns"] = None
        extra_info["rollout_reward_scores"] = {}
        extra_reward_kwargs = ({"reward_router_address": reward_router_address, "reward_model_tokenizer": reward_model_tokenizer}
                               if reward_router_address is not None else {})
        result = await custom_reward_fn(data_source=sample["data_source"], solution_str=sample["solution_str"],
                                        ground_truth=sample["ground_truth"], extra_info=extra_info, **extra_reward_kwargs)
        if isinstance(result, dict):
            return {"reward_score": result["score"], "reward_extra_info": dict(result)}
        return {"reward_score": result, "reward_extra_info": {"acc": result}}

    async def compute_score_batch() -> list[dict[str, Any]]:  # reward_loop.py: RewardLoopWorker.compute_score_batch
        return list(await asyncio.gather(*[asyncio.create_task(run_single(s)) for s in samples]))

    return asyncio.run(compute_score_batch())
