"""The transformers engine: batched, prefix-cached forward passes of a causal LM in this process.

Requests are split into a shared prefix, whose key/values are computed once and kept, and suffix rows
run in right-padded batches formed by a token budget (real tokens never see a pad; ``logits_to_keep``
runs the LM head on a few positions per row). Group prefixes (one source, many hypotheses) extend the
cached template prefix. Two paths, both exact:

* **fast**: suffix rows attend the cached prefix through :mod:`.attention` (tests/test_families.py
  proves it exact on every architecture family it accepts).
* **plain**: whole prompts, the model's own attention, no prefix reuse; taken, with one warning, when
  the model's attention cannot take the fast path (:meth:`TransformersEngine.plain_reason`), and for
  rows longer than a sliding window.

Scoring calls go through :meth:`TransformersEngine.session`: one call at a time per model, the model in
scoring state, sharded weights gathered, and the weights checked so that caches never outlive a change
(:func:`~pluie_reward.common.weights.weights_digest`).
"""

from __future__ import annotations

import inspect
import logging
import os
import threading
import warnings
import weakref
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Hashable, Iterator, Sequence

import torch

from ...common.weights import weights_digest
from ..base import Engine, Request
from ..registry import LoadedEngine
from .attention import KV, PREFIX, AttentionUnsupported, SharedPrefix, WindowExceeded, register, selected
from .compat import base_model, forward_parameters
from .config import TransformersEngineConfig
from .loading import EMBEDDED_BASE, display_name, is_embedded, load_adapter, load_model_and_tokenizer, resolve_device
from .model_state import scoring_state, this_thread_only
from .placement import active_adapter, adapter_names, belongs_to_adapter, gathered_parameters

# Token budget of one batch when none is given. CPU: measured on the embedded judge (2 cores, float32:
# 512 is ~5-8% faster than 1024 -- less padding, same GEMM speed -- and 4096 ~25% slower; see
# BENCHMARKS.md); accelerators want bigger batches.
DEFAULT_BATCH_TOKENS = {"cpu": 512}
FALLBACK_BATCH_TOKENS = 4096

logger = logging.getLogger("pluie_reward")
_MODEL_LOCKS: "weakref.WeakKeyDictionary[Any, threading.RLock]" = weakref.WeakKeyDictionary()
_LOCKS_LOCK = threading.Lock()


def model_lock(model: Any) -> threading.RLock:
    """The lock serialising scoring calls on one model (shared by every engine using it).

    Example:
        >>> m = torch.nn.Linear(1, 1)
        >>> model_lock(m) is model_lock(m)
        True
    """
    base = base_model(model)
    with _LOCKS_LOCK:
        if base not in _MODEL_LOCKS:
            _MODEL_LOCKS[base] = threading.RLock()
        return _MODEL_LOCKS[base]


def longest_common_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix of integer sequences.

    Example:
        >>> longest_common_prefix([[1, 2, 3], [1, 2, 4], [1, 2]])
        2
    """
    return len(os.path.commonprefix([tuple(s) for s in sequences]))


def token_batches(lengths: Sequence[int], batch_tokens: int, max_batch_size: int = 256) -> Iterator[list[int]]:
    """Indices grouped into batches whose padded size (rows x longest row) fits ``batch_tokens``.

    Indices are visited longest first, so rows of a batch have similar lengths.

    Example:
        >>> list(token_batches([5, 1, 4, 2], batch_tokens=8))
        [[0], [2, 3], [1]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batch: list[int] = []
    for i in order:
        longest = lengths[batch[0]] if batch else lengths[i]
        if batch and ((len(batch) + 1) * longest > batch_tokens or len(batch) >= max_batch_size):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def read_positions(ends: Sequence[int], reads: int, width: int) -> tuple[int, torch.Tensor]:
    """Which last positions to keep, and where each row's reads are among them.

    Row ``r`` reads the ``reads`` positions before its end ``ends[r]``. Returns ``keep`` (the
    ``logits_to_keep`` that covers every row) and the (rows, reads) indices into the kept positions.

    Example:
        >>> keep, index = read_positions([5, 3], reads=1, width=5)
        >>> keep, index.tolist()
        (3, [[2], [0]])
    """
    positions = (torch.tensor(list(ends))[:, None] - reads + torch.arange(reads)[None, :]).clamp(min=0)
    first = int(positions.min())
    return width - first, positions - first


@dataclass
class _Row:
    """One sequence to run: ``suffix`` after a prefix, and what to read at its end."""

    key: tuple[int, int]  # (request index, answer index or -1 for a single-token read)
    suffix: list[int]
    targets: tuple[int, ...] | None = None  # multi-token answer: sum log p of these tokens


class _Restart(Exception):
    """The fast path turned out unusable mid-call: run the whole call on the plain path."""


def fast_path_refusal(model: Any, implementation: str | None, registered: bool) -> str:
    """Why the shared-prefix path cannot compute ``model``'s attention exactly, from what the model is
    ('' when it can). Decided once, when an engine is made; the scoring calls never check it again.

    Args:
        model: the causal LM (or a PEFT model around one).
        implementation: its attention implementation (``config._attn_implementation``).
        registered: whether :func:`.attention.register` could wrap that implementation.

    Returns:
        The reason, for :meth:`TransformersEngine.plain_reason` and the one warning, or ''.

    Example:
        >>> fast_path_refusal(model, "sdpa", True)
        ''
        >>> fast_path_refusal(model, "eager", False)
        "its attention implementation is 'eager'"
    """
    if not registered:
        return f"its attention implementation is {implementation!r}"
    base = base_model(model)
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in forward_parameters(base).values()):
        return f"{type(base).__name__}.forward does not pass keyword arguments to its attention"
    if any(isinstance(getattr(m, "sinks", None), torch.Tensor) for m in base.modules()):
        return "its attention adds sinks to the softmax (as gpt-oss does), which the shared-prefix attention does not"
    return ""


class TransformersEngine(Engine):
    """A causal LM from transformers (or a PEFT model around one), run in this process.

    Args:
        model: the causal LM; a ``peft.PeftModel`` for a judge sharing a policy's weights.
        tokenizer: its tokenizer.
        batch_tokens: token budget (rows x longest row) of one batch; ``None``: 512 on CPU, 4096 elsewhere.
        disable_adapters: score the base model of a PEFT model (adapters off while scoring).
        adapter_name: score with this (frozen) PEFT adapter active instead.
        device: where to score when ``offload_device`` is set (default: the best available).
        offload_device: keep the weights there (e.g. ``"cpu"``) and move them to ``device`` only while scoring.
        check_weights: check the weights' values at each call so that caches never outlive a weight
            change (one read of the weights; ``False`` only if nothing ever writes to them).
        min_shared_tokens: a group of requests gets its own cached prefix when it shares at least
            this many tokens beyond the template prefix.
        max_cached_prefixes: how many prefixes' key/values are kept.
        keep_group_prefixes: keep a call's group prefixes for later calls (default: dropped when the call
            ends; the template prefixes stay).
        config: all of the above options as one :class:`~pluie_reward.engines.transformers.config.TransformersEngineConfig`
            (then leave those keywords at their defaults).

    Raises:
        ValueError, TypeError: an option :class:`~pluie_reward.engines.transformers.config.TransformersEngineConfig`
            refuses, or ``config=`` with keyword options too.

    Example:
        >>> engine = TransformersEngine(model, tokenizer)
        >>> with engine.session():  # per request, log p(answer) up to a constant shared by the answers
        ...     engine.answer_logprobs([Request((1, 5, 9))], answers=[(3,), (4,)])
        [[..., ...]]
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        batch_tokens: int | None = None,
        disable_adapters: bool = False,
        adapter_name: str | None = None,
        device: Any = None,
        offload_device: Any = None,
        check_weights: bool = True,
        min_shared_tokens: int = 8,
        max_cached_prefixes: int = 16,
        keep_group_prefixes: bool = False,
        config: TransformersEngineConfig | None = None,
    ) -> None:
        if getattr(model.config, "is_encoder_decoder", False):
            raise TypeError("PLUIE needs a decoder-only (causal) chat LM as judge, not an encoder-decoder model.")
        given = dict(batch_tokens=batch_tokens, disable_adapters=disable_adapters, adapter_name=adapter_name, device=device,
                     offload_device=offload_device, check_weights=check_weights, min_shared_tokens=min_shared_tokens,
                     max_cached_prefixes=max_cached_prefixes, keep_group_prefixes=keep_group_prefixes)
        if config is None:
            config = TransformersEngineConfig(**given)
        elif given != vars(TransformersEngineConfig()):
            raise TypeError("TransformersEngine: pass the options either in config= or as keywords, not both.")
        self.config = config
        self.model = model
        self.tokenizer = tokenizer
        self.batch_tokens = config.batch_tokens
        self.disable_adapters = config.disable_adapters
        self.adapter_name = config.adapter_name
        self.check_weights = config.check_weights
        self.min_shared_tokens = config.min_shared_tokens
        self.max_cached_prefixes = config.max_cached_prefixes
        self.wrapped_model: Any = None
        self._ignored_adapters = self._setup_adapters()
        offload_device, device = config.offload_device, config.device
        self.offload_device = torch.device(offload_device) if offload_device is not None else None
        self.target_device = resolve_device(device) if offload_device is not None else None
        if self.offload_device is not None:
            model.to(self.offload_device)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_id = int(pad or 0)
        self.stats = {"forward_calls": 0, "rows": 0, "prefix_passes": 0, "plain_rows": 0}
        # the shared-prefix attention, registered under its own name and selected per scoring call; what it
        # cannot compute is decided here, once (True: the fast path; False: whole prompts, for _why_plain)
        self._prefix_attention = register(self._attention_implementation())
        self._warned: set[str] = set()
        self._why_plain = ""
        self.fast = True
        self._prefixes: dict[tuple[int, ...], KV] = {}
        reason = fast_path_refusal(model, self._attention_implementation(), self._prefix_attention is not None)
        if reason:
            self._go_plain(reason)
        self._digest: torch.Tensor | None = None
        self._epoch = 0
        self._keeps_logits = self._takes_logits_to_keep()

    @classmethod
    def load(cls, model: "str | Path | None" = None, *, name: str | None = None, adapter: "str | Path | None" = None,
             default_adapter: "Path | None", device: Any = None, dtype: Any = None, device_map: Any = None,
             offload_device: Any = None, model_kwargs: dict | None = None, **options: Any) -> LoadedEngine:
        """The ``"transformers"`` loader of :meth:`Judge.load <pluie_reward.Judge.load>` (which documents the
        arguments): ``None``/``"embedded"`` is the embedded model with ``default_adapter`` merged, an
        ``adapter`` goes on the model (the untuned embedded one by default); ``options`` are the fields of
        :class:`~pluie_reward.engines.transformers.config.TransformersEngineConfig`."""
        if adapter is not None and model is None:
            model = EMBEDDED_BASE  # adapters of the embedded model are tuned on its untuned weights
        name = display_name(model, default_adapter=default_adapter) if name is None else name
        first = offload_device if offload_device is not None else device
        lm, tokenizer = load_model_and_tokenizer(model, device=first, dtype=dtype, device_map=device_map,
                                                 default_adapter=default_adapter, **(model_kwargs or {}))
        if adapter is not None:
            adapter_name = options.setdefault("adapter_name", "judge")
            lm = load_adapter(lm, adapter, adapter_name=adapter_name)
            name = f"{name}+{Path(adapter).name}"
        if offload_device is not None:
            options.update(device=device, offload_device=offload_device)
        logger.info("pluie-reward: loaded the judge %s", name)
        return LoadedEngine(cls(lm, tokenizer, config=TransformersEngineConfig(**options)), name, is_embedded(model))

    # configuration -----------------------------------------------------------------------------
    def _setup_adapters(self) -> tuple[str, ...]:
        if not (self.disable_adapters or self.adapter_name):
            return ()
        model = self.model
        if not hasattr(model, "disable_adapter") or not hasattr(model, "peft_config"):
            raise TypeError(
                "a judge sharing a policy's weights needs a PEFT model (peft.PeftModel, e.g. from get_peft_model); "
                f"got {type(model).__name__}. For a plain model use Judge.from_model (a separate judge)."
            )
        adapters = adapter_names(model)
        if self.adapter_name is not None:
            if self.adapter_name not in adapters:
                raise ValueError(
                    f"adapter {self.adapter_name!r} is not loaded on the policy (adapters: {adapters}); load it with "
                    f"policy.load_adapter(path, adapter_name={self.adapter_name!r}, is_trainable=False)."
                )
            for n, p in model.named_parameters():
                if belongs_to_adapter(n, (self.adapter_name,)):
                    p.requires_grad_(False)
        ignored = tuple(a for a in adapters if a != self.adapter_name)
        if any(p.requires_grad for n, p in model.named_parameters() if not belongs_to_adapter(n, ignored)):
            warnings.warn(
                "the judge shares weights with a model whose base weights are trainable, so the judge changes as "
                "the policy trains. Train only adapters (e.g. LoRA) to keep the judge frozen.",
                stacklevel=4,
            )
        return ignored

    def _attention_implementation(self) -> str | None:
        config = self.model.config
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        return getattr(text, "_attn_implementation", None) or getattr(config, "_attn_implementation", None)

    def _takes_logits_to_keep(self) -> bool:
        return "logits_to_keep" in forward_parameters(self.model)

    @property
    def name(self) -> str:
        """The model's name or path."""
        return getattr(self.model.config, "_name_or_path", "") or type(self.model).__name__

    @property
    def max_length(self) -> int | None:
        """The model's context length in tokens (the smaller of the model's and the tokenizer's limits)."""
        config = self.model.config.get_text_config() if hasattr(self.model.config, "get_text_config") else self.model.config
        limits = [getattr(config, "max_position_embeddings", None), getattr(config, "n_positions", None)]
        tok_max = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(tok_max, int) and tok_max < 10**8:
            limits.append(tok_max)
        limits = [x for x in limits if isinstance(x, int) and x > 0]
        return min(limits) if limits else None

    @property
    def device(self) -> torch.device:
        """Where the model scores (the target device of an offloaded model)."""
        if self.target_device is not None:
            return self.target_device
        return self.model.get_input_embeddings().weight.device

    @property
    def batch_tokens(self) -> int:
        """Token budget (rows x longest row) of one forward batch."""
        if self._batch_tokens is not None:
            return self._batch_tokens
        return DEFAULT_BATCH_TOKENS.get(self.device.type, FALLBACK_BATCH_TOKENS)

    @batch_tokens.setter
    def batch_tokens(self, value: int | None) -> None:
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"batch_tokens must be a positive integer or None (device default), got {value!r}.")
        self._batch_tokens = value

    def attach(self, trainer: Any) -> "TransformersEngine":
        """Remember ``trainer.model_wrapped`` so FSDP v1 full parameters can be summoned for scoring."""
        self.wrapped_model = trainer.model_wrapped
        return self

    def to(self, device: Any) -> "TransformersEngine":
        """Move the model to ``device`` (cached prefixes are dropped; results stay valid)."""
        with model_lock(self.model):
            self.model.to(resolve_device(device))
            self._prefixes.clear()
        return self

    def clear(self) -> None:
        """Drop the cached prefixes."""
        self._prefixes.clear()

    def plain_reason(self) -> str:
        """Why the fast path is off ('' when it is on)."""
        return self._why_plain

    # session -------------------------------------------------------------------------------------
    @contextmanager
    def session(self) -> Iterator[Hashable]:
        """One scoring call: locked, in scoring state, weights checked. Yields the weights' epoch.

        Example:
            >>> engine = TransformersEngine(model, tokenizer)
            >>> with engine.session() as state:
            ...     values = engine.answer_logprobs([Request((1, 5, 9))], answers=[(3,), (4,)])
            >>> state
            0
            >>> with torch.no_grad():  # e.g. a training step on the judge's weights
            ...     _ = model.lm_head.weight.mul_(2)
            >>> with engine.session() as state:
            ...     state  # a new epoch: results cached under the old one are stale
            1
        """
        with model_lock(self.model):
            moved = False
            try:
                if self.offload_device is not None:
                    self.model.to(self.target_device)
                    moved = True
                with ExitStack() as stack:
                    stack.enter_context(gathered_parameters(self.model, self.wrapped_model))
                    if self.disable_adapters or self.adapter_name is not None:  # weights shared with a policy
                        stack.enter_context(this_thread_only(self.model, f"the judge {self.name!r}"))
                    if self.adapter_name is not None:
                        stack.enter_context(active_adapter(self.model, self.adapter_name))
                    stack.enter_context(scoring_state(self.model, self.disable_adapters))
                    if self.fast is not False and self._prefix_attention is not None:
                        if not stack.enter_context(selected(self.model, self._prefix_attention)):
                            self._prefix_attention = None  # the model cannot switch: never ask again
                            self._go_plain(f"the model cannot switch to the {PREFIX}* attention implementation")
                    yield self._state()
            finally:
                if moved:
                    self._prefixes.clear()  # they live on the scoring device
                    self.model.to(self.offload_device)
                    if self.target_device is not None and self.target_device.type == "cuda":
                        torch.cuda.empty_cache()

    def watched_parameters(self) -> list[tuple[str, torch.Tensor]]:
        """The judge's own weights: every parameter but other PEFT adapters' (read afresh each call)."""
        return [(n, p) for n, p in self.model.named_parameters() if not belongs_to_adapter(n, self._ignored_adapters)]

    def _state(self) -> int:
        if not self.check_weights:
            return self._epoch
        digest = weights_digest(self.watched_parameters())
        if self._digest is None or not torch.equal(digest, self._digest):
            if self._digest is not None:
                self._epoch += 1
                self._prefixes.clear()
            self._digest = digest
        return self._epoch

    # scoring ---------------------------------------------------------------------------------------
    def answer_logprobs(
        self, requests: Sequence[Request], answers: Sequence[Sequence[int]], *, prefix: Sequence[int] = ()
    ) -> list[list[float]]:
        """``log p(answer_k | ids)`` per request (raw logits when every answer is one token); see :mod:`..base`."""
        answers = [tuple(a) for a in answers]
        if len(answers) < 2 or any(not a for a in answers):
            raise ValueError("answer_logprobs needs at least two non-empty answers.")
        multi = any(len(a) != 1 for a in answers)
        rows: list[_Row] = []
        for i, request in enumerate(requests):
            ids = list(request.ids)
            if not ids:
                raise ValueError(f"request {i} has no tokens.")
            if multi:
                rows.extend(_Row((i, k), ids + list(a[:-1]), a) for k, a in enumerate(answers))
            else:
                rows.append(_Row((i, -1), ids))
        groups = []
        for request in requests:
            groups.extend([request.group] * (len(answers) if multi else 1))
        first_tokens = [a[0] for a in answers]
        try:
            values = self._run_rows(rows, groups, tuple(prefix), first_tokens)
        except _Restart:
            values = self._run_rows(rows, groups, tuple(prefix), first_tokens)
        out: list[list[float]] = [[0.0] * len(answers) for _ in requests]
        for row, value in zip(rows, values):
            i, k = row.key
            if k < 0:
                out[i] = value
            else:
                out[i][k] = value[0]
        return out

    def _run_rows(self, rows: list[_Row], groups: list[Any], static: tuple[int, ...], first_tokens: list[int]) -> list[list[float]]:
        values: list[list[float]] = [[] for _ in rows]
        if self.fast is False:
            self._warn_once("plain", f"scoring runs whole prompts without prefix caching (slower, still exact): {self._why_plain}.")
            for indices in self._batches([len(r.suffix) for r in rows]):
                self._plain_batch([rows[i] for i in indices], indices, first_tokens, values)
            return values
        units = list(self._plan([r.suffix for r in rows], static, groups))
        chunk = max(1, self.max_cached_prefixes - 1)  # group prefixes computed together, then used
        try:
            for start, (prefix, members) in enumerate(units):
                if start % chunk == 0:
                    self._group_prefixes([u[0] for u in units[start : start + chunk]], static)
                self._run_unit(prefix, members, rows, first_tokens, values, static)
        except WindowExceeded:
            raise
        except AttentionUnsupported as err:
            self._go_plain(str(err))
            raise _Restart from err
        finally:
            if static and not self.config.keep_group_prefixes:
                self._drop_extensions(static)
        return values

    def _drop_extensions(self, static: tuple[int, ...]) -> None:
        """Drop the cached prefixes that extend ``static`` (this call's group prefixes): a later call
        reuses the template prefix, but a GRPO group's source is never scored again."""
        n = len(static)
        for prefix in [p for p in self._prefixes if len(p) > n and p[:n] == static]:
            del self._prefixes[prefix]

    def _batches(self, lengths: Sequence[int]) -> Iterator[list[int]]:
        return token_batches(lengths, self.batch_tokens)

    # planning ------------------------------------------------------------------------------------
    def _plan(
        self, sequences: Sequence[Sequence[int]], static: tuple[int, ...], groups: Sequence[Any]
    ) -> Iterator[tuple[tuple[int, ...], list[int]]]:
        """Split rows into (shared prefix, [row index]) work units."""
        p = len(static)
        with_static, without = [], []
        for i, s in enumerate(sequences):
            (with_static if p and len(s) > p and tuple(s[:p]) == static else without).append(i)
        by_group: dict[Any, list[int]] = {}
        for i in with_static:
            key = groups[i] if groups[i] is not None else ("row", i)
            by_group.setdefault(key, []).append(i)
        loose = []
        for members in by_group.values():
            shared = longest_common_prefix([sequences[i] for i in members]) if len(members) > 1 else 0
            shared = min(shared, min(len(sequences[i]) for i in members) - 1)
            if len(members) > 1 and shared - p >= self.min_shared_tokens:
                yield tuple(sequences[members[0]][:shared]), members
            else:
                loose.extend(members)
        if loose:
            yield static, loose
        if without:
            yield (), without

    # the fast path ---------------------------------------------------------------------------------
    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(f"pluie-reward ({self.name}): {message}", RuntimeWarning, stacklevel=5)

    def _go_plain(self, reason: str) -> None:
        self.fast = False
        self._why_plain = reason
        self._prefixes.clear()
        self._warn_once("plain", f"scoring runs whole prompts without prefix caching (slower, still exact): {reason}.")

    def _forward_shared(self, input_ids: torch.Tensor, state: SharedPrefix, keep: int | None) -> Any:
        """Forward of right-padded rows whose attention goes through the shared-prefix function."""
        batch, width = input_ids.shape
        start = state.prefix_length
        positions = torch.arange(start, start + width, device=input_ids.device).expand(batch, -1)
        kwargs: dict[str, Any] = {"logits_to_keep": keep} if keep is not None and self._keeps_logits else {}
        self.stats["forward_calls"] += 1
        try:
            output = self.model(input_ids=input_ids, position_ids=positions, use_cache=False, pluie_prefix=state, **kwargs)
        except TypeError as err:  # the forward does not pass keyword arguments down to its attention
            if "pluie_prefix" in str(err):
                raise AttentionUnsupported(f"the model's forward does not take extra attention arguments ({err})") from err
            raise
        expected = len(state.kv) if state.kv is not None else state.calls
        if state.calls == 0 or state.calls != expected:
            raise AttentionUnsupported(f"{state.calls} attention layers ran through the shared-prefix function")
        return output

    def _collect(self, ids_rows: list[list[int]], base: KV | None, base_length: int) -> list[KV]:
        """Key/values of each row's tokens, appended to ``base``: one batched forward."""
        width = max(len(r) for r in ids_rows)
        ids = torch.full((len(ids_rows), width), self.pad_id, dtype=torch.long)
        for row, r in enumerate(ids_rows):
            ids[row, : len(r)] = torch.tensor(r, dtype=torch.long)
        state = SharedPrefix(base, prefix_length=base_length, collect=True)
        self._forward_shared(ids.to(self.device), state, keep=1)
        self.stats["prefix_passes"] += 1
        out = []
        for row, r in enumerate(ids_rows):
            n = len(r)
            if base is None:
                out.append([(k[row : row + 1, :, :n], v[row : row + 1, :, :n]) for k, v in state.collected])
            else:
                out.append([
                    (torch.cat([k0, k[row : row + 1, :, :n]], dim=-2), torch.cat([v0, v[row : row + 1, :, :n]], dim=-2))
                    for (k0, v0), (k, v) in zip(base, state.collected)
                ])
        return out

    def _remember(self, prefix: tuple[int, ...], kv: KV, keep: set[tuple[int, ...]] = frozenset()) -> None:
        while len(self._prefixes) >= self.max_cached_prefixes:
            # keep the shortest (template) prefixes, which every batch reuses; drop the longest other one
            candidates = [p for p in self._prefixes if p not in keep] or list(self._prefixes)
            del self._prefixes[max(candidates, key=len)]
        self._prefixes[prefix] = kv

    def _prefix_kv(self, prefix: tuple[int, ...], static: tuple[int, ...] = ()) -> KV | None:
        """Key/values of ``prefix``, extending the longest cached prefix of it."""
        if not prefix:
            return None
        if prefix in self._prefixes:
            return self._prefixes[prefix]
        if static and len(static) < len(prefix) and prefix[: len(static)] == static and static not in self._prefixes:
            self._prefix_kv(static)
        base: tuple[int, ...] = ()
        for known in self._prefixes:
            if len(known) < len(prefix) and prefix[: len(known)] == known and len(known) > len(base):
                base = known
        kv = self._collect([list(prefix[len(base) :])], self._prefixes.get(base), len(base))[0]
        self._remember(prefix, kv, keep={static})
        return kv

    def _group_prefixes(self, prefixes: Sequence[tuple[int, ...]], static: tuple[int, ...]) -> None:
        """Compute the group prefixes that extend ``static`` in batched forwards (one per token batch)."""
        todo = [p for p in dict.fromkeys(prefixes) if p not in self._prefixes and len(p) > len(static) > 0
                and p[: len(static)] == static]
        if not todo or self.fast is False:
            return
        try:
            base = self._prefix_kv(static)
            wanted = {static, *prefixes}
            for victim in [p for p in self._prefixes if p not in wanted]:  # room for this chunk's groups
                del self._prefixes[victim]
            lengths = [len(p) - len(static) for p in todo]
            for batch_index in self._batches(lengths):
                rows = [todo[i] for i in batch_index]
                for p, kv in zip(rows, self._collect([list(p[len(static) :]) for p in rows], base, len(static))):
                    self._remember(p, kv, keep=wanted)
        except WindowExceeded:
            return  # those groups' units find out again and run their prompts whole

    def _run_unit(
        self, prefix: tuple[int, ...], members: list[int], rows: list[_Row], first_tokens: list[int],
        values: list[list[float]], static: tuple[int, ...],
    ) -> None:
        try:
            kv = self._prefix_kv(prefix, static)
        except WindowExceeded as err:
            self._warn_once("window", f"{err}; those prompts run whole, without prefix caching")
            full = [rows[i] for i in members]  # whole prompts: a row's ids start with its prefix
            for batch in self._batches([len(r.suffix) for r in full]):
                self._plain_batch([full[j] for j in batch], [members[j] for j in batch], first_tokens, values)
            return
        suffixes = [rows[i].suffix[len(prefix) :] for i in members]
        for batch in self._batches([len(s) for s in suffixes]):
            indices = [members[j] for j in batch]
            batch_rows = [_Row(rows[i].key, suffixes[j], rows[i].targets) for i, j in zip(indices, batch)]
            try:
                logits, index = self._fast_batch(batch_rows, kv, len(prefix))
            except WindowExceeded as err:
                self._warn_once("window", f"{err}; those prompts run whole, without prefix caching")
                full = [_Row(rows[i].key, list(prefix) + r.suffix, r.targets) for i, r in zip(indices, batch_rows)]
                self._plain_batch(full, indices, first_tokens, values)
                continue
            self._read(batch_rows, indices, logits, index, first_tokens, values)

    def _reads(self, rows: Sequence[_Row]) -> int:
        return max(len(r.targets) if r.targets else 1 for r in rows)

    def _padded(self, rows: Sequence[_Row]) -> torch.Tensor:
        width = max(len(r.suffix) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        for row, r in enumerate(rows):
            ids[row, : len(r.suffix)] = torch.tensor(r.suffix, dtype=torch.long)
        return ids.to(self.device)

    def _fast_batch(self, rows: Sequence[_Row], kv: KV | None, prefix_length: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = self._padded(rows)
        keep, index = read_positions([len(r.suffix) for r in rows], self._reads(rows), ids.shape[1])
        self.stats["rows"] += len(rows)
        output = self._forward_shared(ids, SharedPrefix(kv, prefix_length=prefix_length), keep)
        logits = output.logits
        if not self._keeps_logits:
            logits = logits[:, ids.shape[1] - keep :]
        return logits.to(torch.promote_types(logits.dtype, torch.float32)), index.to(logits.device)

    def _plain_logits(self, rows: Sequence[_Row]) -> tuple[torch.Tensor, torch.Tensor]:
        ids = self._padded(rows)
        keep, index = read_positions([len(r.suffix) for r in rows], self._reads(rows), ids.shape[1])
        kwargs: dict[str, Any] = {"logits_to_keep": keep} if self._keeps_logits else {}
        self.stats["forward_calls"] += 1
        logits = self.model(input_ids=ids, use_cache=False, **kwargs).logits
        if not self._keeps_logits:
            logits = logits[:, ids.shape[1] - keep :]
        return logits.to(torch.promote_types(logits.dtype, torch.float32)), index.to(logits.device)

    def _plain_batch(self, rows: Sequence[_Row], indices: Sequence[int], first_tokens: list[int], values: list[list[float]]) -> None:
        self.stats["rows"] += len(rows)
        self.stats["plain_rows"] += len(rows)
        logits, index = self._plain_logits(rows)
        self._read(rows, indices, logits, index, first_tokens, values)

    def _read(
        self, rows: Sequence[_Row], indices: Sequence[int], logits: torch.Tensor, index: torch.Tensor,
        first_tokens: list[int], values: list[list[float]],
    ) -> None:
        for row, (r, i) in enumerate(zip(rows, indices)):
            if r.targets is None:
                last = logits[row, index[row, -1]]
                values[i] = [float(last[t]) for t in first_tokens]
            else:
                n = len(r.targets)
                logp = torch.log_softmax(logits[row, index[row, -n:]], dim=-1)
                values[i] = [float(logp[torch.arange(n), torch.tensor(r.targets)].sum())]

    # generation ------------------------------------------------------------------------------------
    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, stop_ids: Sequence[int] = ()) -> list[list[int]]:
        """Greedy continuations (call inside :meth:`session`). Prompts of equal length are batched
        together without padding, so a continuation does not depend on the other prompts.

        Example:
            >>> engine = TransformersEngine(model, tokenizer)
            >>> with engine.session():  # the new token ids of each prompt, up to a stop id or max_new_tokens
            ...     engine.generate([[1, 5, 9]], max_new_tokens=8, stop_ids=[tokenizer.eos_token_id])
            [[...]]
        """
        stops = set(int(s) for s in stop_ids)
        out: list[list[int]] = [[] for _ in prompts]
        by_length: dict[int, list[int]] = {}
        for i, p in enumerate(prompts):
            by_length.setdefault(len(p), []).append(i)
        for length, members in by_length.items():
            per_batch = max(1, self.batch_tokens // max(1, length + max_new_tokens))
            for start in range(0, len(members), per_batch):
                chunk = members[start : start + per_batch]
                ids = torch.tensor([list(prompts[i]) for i in chunk], device=self.device)
                self.stats["forward_calls"] += 1
                generated = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                                do_sample=False, eos_token_id=sorted(stops) or None, pad_token_id=self.pad_id)[:, length:]
                for i, row in zip(chunk, generated.tolist()):
                    tokens = []
                    for t in row:
                        tokens.append(t)
                        if t in stops:
                            break
                    out[i] = tokens
        return out

    def __repr__(self) -> str:
        path = "fast" if self.fast else "plain"
        return f"TransformersEngine({self.name!r}, device={self.device}, dtype={next(self.model.parameters()).dtype}, path={path})"
