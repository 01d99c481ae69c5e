"""The :class:`Judge`: a frozen chat LLM scoring text with PLUIE, log p(Yes) - log p(No)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import threading
import time
from pathlib import Path
from typing import Any, Generator, Sequence

from ..engines.base import Engine, Request
from ..engines.registry import EngineSpec, engine_spec, loader_spec
from ..judges import default_adapter_dir
from .cache import ResultCache
from .calibration import Calibration, sigmoid
from .judge_config import JudgeConfig, option_names, split_options
from .plan import CacheStep, EngineCall, ScoreOptions, ScoringPlan
from .prompt import BoundTemplate
from .template import GENERATED, Template, load_template

logger = logging.getLogger("pluie_reward")
TemplateLike = "str | Path | Template | None"


def check_engine_options(spec: EngineSpec, options: dict[str, Any]) -> None:
    """Refuse (``TypeError``, naming both sets of options) keyword arguments left after the judge's own
    that the engine ``spec`` does not declare (when it declares its options).

    Example:
        >>> check_engine_options(engine_spec("transformers"), {"tensor_parallel_size": 2})  # doctest: +ELLIPSIS, +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        TypeError: Judge got unexpected argument(s) ['tensor_parallel_size']; the judge's options are [...],
        the transformers engine's [...].
    """
    names = spec.option_names()
    unknown = [] if names is None else sorted(set(options) - set(names))
    if unknown:
        raise TypeError(f"Judge got unexpected argument(s) {unknown}; the judge's options are "
                        f"{list(option_names(JudgeConfig))}, the {spec.name} engine's {list(names)}.")


def answer_record(template: Template, values: Sequence[float], threshold: float = 0.0) -> dict[str, Any]:
    """What a judge reports for one item, from the engine's answer log-probabilities.

    Args:
        template: the template (its kind, labels and values).
        values: ``log p(answer_k)`` per answer, up to a constant shared by the answers.
        threshold: the verdict's cut-off for Yes/No templates.

    Returns:
        ``{"logratio", "p_yes", "verdict"}`` for Yes/No templates; ``{"score", "logprobs", "probs",
        "choice"}`` (+ ``"expected"`` for a scale) otherwise, renormalised over the answers.

    Example:
        >>> answer_record(load_template("para-fs"), [-0.5, -2.5])
        {'logratio': 2.0, 'p_yes': 0.8807970779778823, 'verdict': True}
    """
    if template.kind == "binary":
        logratio = float(values[0] - values[1])
        return {"logratio": logratio, "p_yes": sigmoid(logratio), "verdict": logratio > threshold}
    top = max(values)
    norm = top + math.log(sum(math.exp(v - top) for v in values))
    logprobs = [float(v - norm) for v in values]
    probs = [math.exp(lp) for lp in logprobs]
    labels = template.labels
    record: dict[str, Any] = {
        "score": logprobs[0] - logprobs[1],
        "logprobs": dict(zip(labels, logprobs)),
        "probs": dict(zip(labels, probs)),
        "choice": labels[max(range(len(probs)), key=probs.__getitem__)],
    }
    if template.kind == "scale":
        record["expected"] = record["score"] = float(sum(p * v for p, v in zip(probs, template.values)))
    return record


class Judge:
    """A causal chat LM used as a PLUIE judge. :meth:`score` is the library's one scoring path.

    Args:
        model: a transformers causal LM (or a PEFT model around one), or an :class:`~pluie_reward.engines.base.Engine`.
        tokenizer: the model's tokenizer (not needed with an engine).
        cache_size: how many recent results to keep (0: none).
        threshold: the verdict is ``score > threshold``.
        allow_multi_token: accept answers of several tokens (the seeds' eq. 4).
        name: a label for reprs, logs and reports.
        chat_template_kwargs: keywords for the judge's chat template in every rendering (Qwen3's
            ``enable_thinking``, gpt-oss's ``reasoning_effort``; ``strftime_now``: the ISO date a
            template writes as today, fixed by default); a template's own keywords override them.
        clean_text: read every field value as :func:`~pluie_reward.core.template.clean_text` gives it
            (surrounding whitespace removed, inner runs made one), so layout cannot move a score;
            False: exactly as given.
        calibration: a :class:`~pluie_reward.core.calibration.Calibration` (or the path of a
            ``calibration.json``, or its folder): ``details=True`` records of Yes/No templates then
            add ``p_calibrated = sigmoid(a * logratio + b)``; floats and verdicts stay raw.
        engine_options: options of the transformers engine, the fields of
            :class:`~pluie_reward.engines.transformers.config.TransformersEngineConfig` (``batch_tokens``...).

    The judge's own options are checked as a :class:`~pluie_reward.core.judge_config.JudgeConfig` (kept as :attr:`config`).

    Raises:
        ValueError, TypeError: an option either config refuses, an unknown keyword argument, or
            engine options next to an engine object (they belong to the engine's own constructor).

    Scoring calls on one judge (and on judges sharing one model) are serialised: threads and
    ``asyncio`` rewards may call :meth:`score` concurrently.

    Example:
        >>> judge = Judge.load()  # embedded SmolLM2-135M-Instruct, offline
        >>> judge.score("para-fs", source=["The cat sleeps."], hypothesis=["The cat is asleep."])
        [1.4...]
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        cache_size: int = 4096,
        threshold: float = 0.0,
        allow_multi_token: bool = False,
        name: str | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        clean_text: bool = True,
        calibration: "Calibration | str | Path | None" = None,
        **engine_options: Any,
    ) -> None:
        config = JudgeConfig(cache_size=cache_size, threshold=threshold, allow_multi_token=allow_multi_token, name=name,
                             chat_template_kwargs=chat_template_kwargs, clean_text=clean_text, calibration=calibration)
        transformers = engine_spec("transformers")
        check_engine_options(transformers, engine_options)
        if isinstance(model, Engine):
            if engine_options or tokenizer is not None:
                raise TypeError(
                    "pass the engine's own options to the engine; Judge(engine) takes only the judge's options, "
                    f"{list(option_names(JudgeConfig))}."
                )
            self.engine = model
        else:
            if tokenizer is None:
                raise TypeError("Judge(model, tokenizer): a transformers model needs its tokenizer.")
            self.engine = transformers.make(model, tokenizer, config=transformers.config()(**engine_options))
        self.config = config  # the options as made; threshold, calibration... below may be changed afterwards
        self.threshold = config.threshold
        self.calibration = config.calibration
        self.allow_multi_token = config.allow_multi_token
        self.chat_template_kwargs: dict[str, Any] = dict(config.chat_template_kwargs or {})
        self.clean_text = config.clean_text
        self.name = config.name or self.engine.name
        self.results = ResultCache(config.cache_size)
        self._bound: dict[Any, BoundTemplate] = {}
        self._lock = threading.RLock()  # serialises scoring calls
        self._cache_lock = threading.RLock()  # guards the result cache and bound templates (held briefly)

    # construction ----------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        model: "str | Path | None" = None,
        *,
        engine: str = "transformers",
        device: Any = None,
        dtype: Any = None,
        device_map: Any = None,
        offload_device: Any = None,
        model_kwargs: dict | None = None,
        adapter: "str | Path | None" = None,
        warm_up: "TemplateLike | bool" = None,
        **judge_kwargs: Any,
    ) -> "Judge":
        """Load a judge: ``None`` (or ``"embedded"``) for the default judge (the embedded SmolLM2-135M-Instruct with
        the shipped PLUIE adapter; ``"embedded-base"``: untuned), a HF id, a folder or a ``.gguf`` file.

        Args:
            engine: ``"transformers"`` (default) or ``"vllm"`` (:mod:`pluie_reward.engines.registry`).
            device: where to score (default: the best available); with ``offload_device``, the
                weights stay there between calls and visit ``device`` only while scoring. (transformers)
            dtype: ``float32`` (default for the embedded judge), ``bfloat16``, ``float16`` or ``auto``.
            device_map: passed to ``from_pretrained`` (accelerate placement across devices). (transformers)
            model_kwargs: more ``from_pretrained`` arguments (transformers).
            judge_kwargs: :class:`Judge` arguments, the fields of :class:`~pluie_reward.core.judge_config.JudgeConfig`
                (``cache_size``, ``threshold``, ``allow_multi_token``, ``name``, ``chat_template_kwargs``, ``clean_text``,
                ``calibration``); the others go to the engine: with ``engine="transformers"``, the fields of
                :class:`~pluie_reward.engines.transformers.config.TransformersEngineConfig` (``batch_tokens``,
                ``check_weights``...), with ``engine="vllm"`` :class:`~pluie_reward.engines.vllm.VLLMEngine`'s
                (``tensor_parallel_size``, ``gpu_memory_utilization``, ``max_model_len``, any ``vllm.AsyncEngineArgs``).
            adapter: a PEFT adapter folder (e.g. from ``pluie-reward tune``) put on the base model,
                frozen and active while scoring, under the name ``adapter_name`` (default ``"judge"``). (transformers)
            warm_up: pay a first call's one-off costs before returning (:meth:`warm_up`): a template (or
                ``True``: ``"para-fs"``) to warm up with, ``False`` not to; default: the embedded judges
                warm up with ``"para-fs"``, other models do not.

        Returns:
            The judge.

        Raises:
            ValueError, TypeError: an option :class:`~pluie_reward.core.judge_config.JudgeConfig` or the
                engine refuses (the judge's options are checked before the model is loaded into vLLM).

        Example:
            >>> judge = Judge.load("Qwen/Qwen2.5-7B-Instruct", device="cuda:0", dtype="bfloat16")  # a GPU, a Hub model  # doctest: +SKIP
            >>> judge = Judge.load("Qwen/Qwen2.5-7B-Instruct", device="cuda", offload_device="cpu")  # a GPU, a Hub model  # doctest: +SKIP
            >>> judge = Judge.load("meta-llama/Meta-Llama-3-70B-Instruct",  # 2 GPUs  # doctest: +SKIP
            ...                    engine="vllm", tensor_parallel_size=2)
            >>> from pluie_reward.judges import DEFAULT_ADAPTER_DIR  # e.g. "out/judge-adapter" from pluie-reward tune
            >>> judge = Judge.load(adapter=DEFAULT_ADAPTER_DIR)  # the embedded base + a tuned adapter
        """
        spec = loader_spec(engine)
        own, engine_options = split_options(JudgeConfig, judge_kwargs)
        config = JudgeConfig(**own)  # checked before the model is loaded
        check_engine_options(spec, engine_options)
        loaded = spec.load(model, name=config.name, adapter=adapter, default_adapter=default_adapter_dir(), device=device,
                           dtype=dtype, device_map=device_map, offload_device=offload_device, model_kwargs=model_kwargs,
                           **engine_options)
        judge = cls(loaded.engine, **{**config.to_kwargs(), "name": loaded.name})
        warm = loaded.warm_up if warm_up is None else warm_up
        if warm is not False:
            judge.warm_up(None if warm is True else warm)
        return judge

    def warm_up(self, template: TemplateLike = None) -> float:
        """Pay the one-off costs of a first scoring call now: one tiny item, not cached, binds ``template``
        and computes (and keeps) its prefix's key/values on the engines that cache prefixes.

        Args:
            template: the template the judge will score with (default ``"para-fs"``).

        Returns:
            The seconds it took.

        Example:
            >>> seconds = judge.warm_up("para-fs")
            >>> passes = judge.engine.stats["prefix_passes"]
            >>> _ = judge.score("para-fs", source=["The cat sleeps."], hypothesis=["A cat is asleep."])
            >>> judge.engine.stats["prefix_passes"] == passes  # the template prefix was ready
            True
        """
        start = time.perf_counter()
        bound = self.bind(template)
        self.score(template, use_cache=False, **{field: "Warm-up." for field in bound.template.fields})
        seconds = time.perf_counter() - start
        logger.info("pluie-reward: warmed up the judge %s on %s in %.1f s", self.name, bound.template.name, seconds)
        return seconds

    @classmethod
    def connect(cls, urls: "str | Sequence[str]", *, model: str | None = None, tokenizer: Any = None, **options: Any) -> "Judge":
        """A judge served by vLLM's OpenAI-compatible server (``vllm serve``), one or several replicas.

        Args:
            urls: ``http://host:8000`` or a list (requests go to the least busy replica).
            model: the served model name (default: the server's first).
            tokenizer: the served model's tokenizer (HF id or folder; default: the path the server reports).
            options: :class:`Judge` arguments (the fields of :class:`~pluie_reward.core.judge_config.JudgeConfig`),
                the others :class:`~pluie_reward.engines.remote.RemoteEngine`'s (``api_key``, ``timeout``,
                ``retries``, ``chunk_size``, ``logprobs_mode``).

        Returns:
            The judge (the judge's options are checked before connecting).

        Example:
            >>> judge = Judge.connect("http://judge-host:8000",  # a vLLM server  # doctest: +SKIP
            ...                       tokenizer="meta-llama/Meta-Llama-3-70B-Instruct")
        """
        own, engine_options = split_options(JudgeConfig, options)
        config = JudgeConfig(**own)  # checked before connecting
        remote = engine_spec("remote").make(urls, model=model, tokenizer=tokenizer, **engine_options)
        return cls(remote, **config.to_kwargs())

    @classmethod
    def from_vllm(cls, llm: Any, *, tokenizer: Any = None, lora: Any = None, weights: str = "base", **options: Any) -> "Judge":
        """A judge inside a ``vllm.LLM`` somebody else owns, e.g. the trainer's rollout engine: its base
        weights, or a judge LoRA adapter (:mod:`pluie_reward.engines.vllm_shared`).

        Args:
            llm: the ``vllm.LLM``.
            tokenizer: the tokenizer to render with (default: the engine's).
            lora: a PEFT adapter folder to judge with (the LLM needs ``enable_lora=True``).
            weights: ``"base"`` (the weights as bound, checked before each call) or ``"current"``.
            options: :class:`Judge` arguments, the fields of :class:`~pluie_reward.core.judge_config.JudgeConfig`
                (``threshold``, ``name``, ``cache_size``, ...).

        Returns:
            The judge.

        Example:
            >>> judge = Judge.from_vllm(trainer.vllm_generation.llm, lora="out/judge-adapter")  # a trainer running vLLM  # doctest: +SKIP
        """
        own, other = split_options(JudgeConfig, options)
        if other:
            raise TypeError(f"Judge.from_vllm got unexpected argument(s) {sorted(other)}; the judge's options are "
                            f"{list(option_names(JudgeConfig))} (the LLM's own are set where it is made).")
        config = JudgeConfig(**own)  # checked before the engine is bound
        shared = engine_spec("vllm-shared").make(llm, tokenizer=tokenizer, lora=lora, weights=weights)
        return cls(shared, **config.to_kwargs())

    def close(self) -> None:
        """Release the engine (vLLM worker processes, HTTP connections); a no-op for transformers.
        A vLLM engine is also closed at interpreter exit, so a script that forgets it still ends cleanly.

        Example:
            >>> with Judge.load(engine="vllm") as judge:  # closed when the block ends; needs vLLM  # doctest: +SKIP
            ...     judge.score("para-fs", source=["S"], hypothesis=["H"])
        """
        self.engine.close()

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, **judge_kwargs: Any) -> "Judge":
        """Wrap an already loaded causal LM and its tokenizer.

        Example:
            >>> judge = Judge.from_model(model, tokenizer, batch_tokens=2048)
            >>> judge.score("para-fs", source=["The cat sleeps."], hypothesis=["A cat is asleep."])
            [...]
        """
        return cls(model, tokenizer, **judge_kwargs)

    @classmethod
    def from_peft(cls, policy_model: Any, tokenizer: Any, adapter_name: str | None = None, **judge_kwargs: Any) -> "Judge":
        """A judge sharing a PEFT policy's weights: its base model with adapters disabled while scoring,
        or the frozen adapter ``adapter_name`` (a tuned judge on the same base). No weight copy.

        Each call restores every module's training flag, the active adapter and ``requires_grad``;
        sharded (ZeRO-3, FSDP with :meth:`attach`) weights are gathered while scoring; caches survive
        adapter-only training steps and are dropped when the judge's own weights change.
        ``Judge(policy, tokenizer, disable_adapters=True)`` is the same judge.

        Example:
            >>> judge = Judge.from_peft(policy, tokenizer)  # the policy's base weights, adapters off while scoring
            >>> judge.name, Judge.from_peft(policy, tokenizer, adapter_name="judge").name
            ('shared:base', 'shared:judge')
        """
        judge_kwargs.setdefault("name", f"shared:{adapter_name or 'base'}")
        return cls(policy_model, tokenizer, disable_adapters=adapter_name is None, adapter_name=adapter_name, **judge_kwargs)

    def attach(self, trainer: Any) -> "Judge":
        """Let a judge sharing the policy gather FSDP v1 parameters through ``trainer.model_wrapped``.

        Example:
            >>> from transformers import Trainer, TrainingArguments
            >>> judge = Judge.from_peft(policy, tokenizer)
            >>> trainer = Trainer(policy, TrainingArguments("out"))
            >>> judge.attach(trainer) is judge
            True
        """
        self.engine.attach(trainer)
        return self

    @property
    def model(self) -> Any:
        """The engine's model object (a transformers model for the transformers engine)."""
        return self.engine.model

    @property
    def tokenizer(self) -> Any:
        """The judge's tokenizer."""
        return self.engine.tokenizer

    @property
    def max_length(self) -> int | None:
        """The judge's context length in tokens."""
        return self.engine.max_length

    def to(self, device: Any) -> "Judge":
        """Move a (separate) judge to another device, e.g. a second GPU."""
        self.engine.to(device)
        return self

    # templates -------------------------------------------------------------------------------
    def bind(self, template: TemplateLike = None) -> BoundTemplate:
        """Resolve a template and bind it to this judge's tokenizer (validated once, then reused per
        template and :attr:`chat_template_kwargs`).

        Example:
            >>> judge.bind("para-fs").answer_ids  # "Yes" and "No": ((10539,), (5230,)) for SmolLM2
            ((...,), (...,))
        """
        which = template if isinstance(template, (str, Path, type(None))) else id(template)
        key = (which, json.dumps(self.chat_template_kwargs, sort_keys=True, default=repr))
        with self._cache_lock:
            if key not in self._bound:
                self._bound[key] = BoundTemplate(
                    load_template(template), self.tokenizer, self.max_length, self.allow_multi_token,
                    chat_template_kwargs=self.chat_template_kwargs,
                )
            return self._bound[key]

    # scoring ---------------------------------------------------------------------------------
    def plan(
        self,
        /,  # a field may be named 'self'; it goes to **fields
        template: TemplateLike = None,
        *,
        details: bool = False,
        threshold: float | None = None,
        truncate: bool = True,
        use_cache: bool = True,
        max_new_tokens: int | None = None,
        **fields: Any,
    ) -> ScoringPlan:
        """A scoring call, bound and checked, not yet run: :meth:`run` or :meth:`arun` executes it.

        Binds the template (once per template), normalises the fields and checks the options: bad
        input raises here (``TypeError``, ``ValueError``, ``KeyError`` saying what to do), before any
        work is queued. Arguments as for :meth:`score`.

        Returns:
            A :class:`~pluie_reward.core.plan.ScoringPlan`.

        Example:
            >>> plan = judge.plan("para-fs", source="The cat sleeps.", hypothesis=["A cat is asleep.", "It rains."])
            >>> plan.n, plan.columns["source"]
            (2, ['The cat sleeps.', 'The cat sleeps.'])
            >>> judge.run(plan) == judge.score("para-fs", source="The cat sleeps.", hypothesis=["A cat is asleep.", "It rains."])
            True
        """
        options = ScoreOptions(details, threshold, truncate, use_cache, max_new_tokens)
        return ScoringPlan.build(self.bind(template), fields, options, clean=self.clean_text)

    def score(
        self,
        /,  # a field may be named 'self'; it goes to **fields
        template: TemplateLike = None,
        *,
        details: bool = False,
        threshold: float | None = None,
        truncate: bool = True,
        use_cache: bool = True,
        max_new_tokens: int | None = None,
        **fields: Any,
    ) -> list[float] | list[dict[str, Any]]:
        """Scores, one per item, in input order: PLUIE, log p(yes) - log p(no), for Yes/No templates.

        Args:
            template: built-in name (default ``"para-fs"``), YAML path or :class:`Template`.
            details: return one record per item instead of a float. Yes/No templates:
                ``{"logratio", "p_yes", "verdict"}`` (``p_yes = sigmoid(logratio)`` is p(yes)
                renormalised over the two answers). Templates with N answers: ``{"score",
                "logprobs", "probs", "choice"}`` (log-probabilities and probabilities renormalised
                over the N answers, by label; the most likely label) and ``"expected"`` for a rating
                scale. Templates where the judge writes a turn first add ``"generated"``; a judge
                with a ``calibration`` adds ``"p_calibrated"`` to Yes/No records.
            threshold: verdict is ``logratio > threshold`` (default: the judge's, 0).
            truncate: cut over-long fields from the middle (with a warning) instead of raising.
            use_cache: reuse results of identical prompts seen recently (same weights).
            max_new_tokens: length limit of a judge-generated turn (default: the template's).
            fields: the template's fields (``source``/``hypothesis`` for paraphrase templates); each
                a list with one string per item, or one string shared by all items.

        Returns:
            One float (or record) per item. The float is PLUIE for Yes/No templates, ``log p(first
            answer) - log p(second answer)`` for a choice, the expected value for a rating scale.

        Example:
            >>> judge.score("rev", original=["P"], instruction=["Fix typos"], hypothesis=["P."], details=True)
            [{'logratio': ..., 'p_yes': ..., 'verdict': ...}]
        """
        return self.run(self.plan(template, details=details, threshold=threshold, truncate=truncate,
                                  use_cache=use_cache, max_new_tokens=max_new_tokens, **fields))

    async def ascore(self, /, template: TemplateLike = None, **options: Any) -> list[float] | list[dict[str, Any]]:
        """:meth:`score` for ``asyncio`` code (the same arguments): the same plan, awaiting engines that serve
        concurrent requests (vLLM, remote) so that concurrent calls are batched by the engine itself. Other
        engines score in a worker thread, one call at a time.

        Example:
            >>> asyncio.run(judge.ascore("para-fs", source=["S"], hypothesis=["H"]))  # await judge.ascore(...) in async code
            [...]
        """
        return await self.arun(self.plan(template, **options))

    def run(self, plan: ScoringPlan) -> list[float] | list[dict[str, Any]]:
        """Execute a plan from :meth:`plan` (blocking): what :meth:`score` does.

        Args:
            plan: a plan of this judge (its template bound to this judge's tokenizer).

        Returns:
            As :meth:`score`.
        """
        self._own(plan)
        with self._lock, self.engine.session() as state:
            steps, reply = self._steps(plan, state), None
            while True:
                try:
                    call = steps.send(reply)
                except StopIteration as done:
                    return done.value
                reply = call.run(self.engine)

    async def arun(self, plan: ScoringPlan) -> list[float] | list[dict[str, Any]]:
        """Execute a plan from :meth:`plan` in ``asyncio`` code: what :meth:`ascore` does.

        Args:
            plan: a plan of this judge.

        Returns:
            As :meth:`score`.
        """
        if not self.engine.concurrent:
            return await asyncio.to_thread(self.run, plan)
        self._own(plan)
        with self.engine.session() as state:
            steps, reply = self._steps(plan, state), None
            while True:
                try:
                    call = steps.send(reply)
                except StopIteration as done:
                    return done.value
                reply = await call.arun(self.engine)

    # the steps of a plan, shared by run and arun -----------------------------------------------
    def _own(self, plan: ScoringPlan) -> None:
        with self._cache_lock:
            mine = any(bound is plan.bound for bound in self._bound.values())
        if not mine:
            raise ValueError("this plan was made by another judge (its template is bound to that judge's tokenizer); "
                             "make it with this judge's plan().")

    def _steps(self, plan: ScoringPlan, state: Any) -> Generator[EngineCall, Any, list]:
        """The scoring call as a generator: yields each :class:`~pluie_reward.core.plan.EngineCall`, receives its
        result, returns the finished results. ``state`` is the engine session's (the cache key's first part)."""
        bound, use_cache = plan.bound, plan.options.use_cache
        generated = None
        if bound.template.generates:
            step = self._generation_step(plan, state)
            prompts = [k[-1] for k in step.todo]
            call = EngineCall("generate", (prompts,), {"max_new_tokens": plan.max_new_tokens, "stop_ids": bound.stop_ids})
            outputs = (yield call) if prompts else []
            texts = {k: self.tokenizer.decode(list(ids), skip_special_tokens=True).strip() for k, ids in zip(step.todo, outputs)}
            generated = self._store(step, texts, use_cache)
        columns = plan.columns if generated is None else {**plan.columns, GENERATED: generated}
        items = bound.encode_items(columns, plan.n, truncate=plan.options.truncate)
        step = self._lookup([(state, bound.answer_ids, item.ids) for item in items], use_cache)
        first: dict[tuple, Request] = {}
        for key, item in zip(step.keys, items):
            first.setdefault(key, item)
        requests = [first[key] for key in step.todo]
        fresh = (yield EngineCall("answer_logprobs", (requests, bound.answer_ids), {"prefix": bound.prefix_ids})) if requests else []
        answers = self._store(step, {key: self._checked(values) for key, values in zip(step.todo, fresh)}, use_cache)
        return self._finish(plan, answers, generated)

    def _lookup(self, keys: list[tuple], use_cache: bool) -> CacheStep:
        """Each item's key, the cached values resolved now, and the distinct keys left to compute."""
        hits: dict[tuple, Any] = {}
        if use_cache:
            with self._cache_lock:
                hits = {key: self.results.get(key) for key in dict.fromkeys(keys) if key in self.results}
        return CacheStep(keys, hits, list(dict.fromkeys(k for k in keys if k not in hits)))

    def _store(self, step: CacheStep, computed: dict[tuple, Any], use_cache: bool) -> list[Any]:
        if use_cache:
            with self._cache_lock:
                self.results.update(computed.items())
        return step.resolve(computed)

    def _generation_step(self, plan: ScoringPlan, state: Any) -> CacheStep:
        """The judge's own turn (INDIRECT): each item's cache key (state, prompt ids); the prompt ids
        of those to generate are ``key[-1]`` of ``step.todo``."""
        bound, limit = plan.bound, plan.max_new_tokens
        keys = []
        for index, row in enumerate(plan.rows()):
            _, ids = bound.fit(row, index, plan.options.truncate, bound.encode_generation_prompt, reserve=limit + 64)
            keys.append((state, "generated", limit, tuple(ids)))
        return self._lookup(keys, plan.options.use_cache)

    def _finish(self, plan: ScoringPlan, answers: list[tuple], generated: list[str] | None) -> list:
        options = plan.options
        cut = self.threshold if options.threshold is None else options.threshold
        records = [answer_record(plan.template, values, cut) for values in answers]
        if generated is not None:
            for record, text in zip(records, generated):
                record["generated"] = text
        if options.details and self.calibration is not None:
            self.calibration.annotate(records, plan.template.name)
        if options.details:
            return records
        return [r["logratio"] if "logratio" in r else r["score"] for r in records]

    @staticmethod
    def _checked(values: Sequence[float]) -> tuple[float, ...]:
        values = tuple(float(v) for v in values)
        if not all(math.isfinite(v) for v in values):
            raise FloatingPointError(
                f"the judge produced non-finite answer scores ({list(values)}); the model's logits overflowed. "
                "Load the judge in float32 or bfloat16 rather than float16."
            )
        return values

    def clear_cache(self) -> None:
        """Forget cached results and the engine's cached prefixes."""
        with self._lock, self._cache_lock:
            self.results.clear()
            self.engine.clear()

    def __repr__(self) -> str:
        return f"Judge({self.name!r}, engine={self.engine!r})"


def add_default_judge_adapter(policy: Any, adapter_name: str = "judge") -> Any:
    """Load the default judge's adapter, frozen, beside a PEFT policy built on the embedded model, so
    that ``Judge.from_peft(policy, tokenizer, adapter_name=adapter_name)`` is the default judge sharing
    the policy's weights.

    Example:
        >>> from peft import LoraConfig, get_peft_model
        >>> from pluie_reward import load_trainable_embedded
        >>> base, tokenizer = load_trainable_embedded()
        >>> policy = get_peft_model(base, LoraConfig(r=8, target_modules=["q_proj", "v_proj"]))
        >>> judge = Judge.from_peft(add_default_judge_adapter(policy), tokenizer, adapter_name="judge")
        >>> sorted(policy.peft_config), policy.active_adapter  # the policy still trains its own adapter
        (['default', 'judge'], 'default')
    """
    adapter = default_adapter_dir()
    if adapter is None:
        raise FileNotFoundError("this package ships no default judge adapter; rebuild it from a clone of the "
                                "repository with python scripts/build_judge.py.")
    active = policy.active_adapter
    policy.load_adapter(str(adapter), adapter_name=adapter_name, is_trainable=False)
    policy.set_adapter(active)
    return policy
