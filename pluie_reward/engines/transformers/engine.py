"""The forward-pass engine: batched, prefix-KV-cached log p(yes) - log p(no) of token sequences.

Every item is a list of token ids ending where the answer token would come. Items are split into a
shared prefix, whose key/value cache is computed once, and a suffix run in right-padded batches on
top of that cache. With right padding, real tokens never see a pad (causal attention), positions
are the true ones, and ``logits_to_keep`` picks the last real position of each row, so the LM head
runs on one position per item. Results do not depend on batching, padding or caching beyond
floating-point noise.

The suffix rows do not copy the prefix cache: attention over the prefix runs once for all rows
(the batch folded into the query length, one key/value set), attention within each row runs
causally, and the two are merged with their log-sum-exps (:func:`shared_prefix_attention`). This
is the same softmax, computed in two parts; models that cannot take it fall back to a per-batch
cache whose prefix is materialised once. Group prefixes (one source, many hypotheses) extend the
cached template prefix and are computed together in one batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Sequence

import torch

try:  # transformers >= 4.56
    from transformers.cache_utils import DynamicCache, DynamicLayer
except ImportError:  # pragma: no cover - older transformers
    from transformers.cache_utils import DynamicCache

    DynamicLayer = None

KV = list[tuple[torch.Tensor, torch.Tensor]]
# Token budget of one suffix batch when none is given. CPU: measured on the embedded judge (2 cores,
# float32: 512 is ~5-8% faster than 1024 -- less padding, same GEMM speed -- and 4096 ~25% slower;
# see BENCHMARKS.md); accelerators want bigger batches.
DEFAULT_BATCH_TOKENS = {"cpu": 512}
FALLBACK_BATCH_TOKENS = 4096
ATTENTION_NAME = "pluie_shared_prefix"
_UNSUPPORTED_ATTENTION_KWARGS = ("softcap", "s_aux", "sliding_window", "position_bias", "sinks")


class SharedPrefixUnsupported(RuntimeError):
    """The model's attention cannot run on a shared prefix (the scorer then uses a per-batch cache)."""


@dataclass
class SharedPrefix:
    """Per-forward state of :func:`shared_prefix_attention`: the prefix keys/values of every layer."""

    kv: KV
    calls: int = 0
    collect: bool = False  # keep the rows' own key/values per layer (to build longer prefixes)
    collected: KV = field(default_factory=list)


def partial_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float, causal: bool, fused: bool | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of ``query`` over ``key``/``value`` and the log-sum-exp of its scores.

    Shapes (batch, heads, length, dim); returns the output and the float32 log-sum-exp
    (batch, heads, q_length). ``causal`` aligns the mask top-left (query i sees keys <= i).
    ``fused`` (default: on CPU) uses PyTorch's fused CPU flash kernel; otherwise the scores are
    materialised in float32.

    Example:
        >>> q = k = v = torch.randn(1, 2, 3, 4)
        >>> out, lse = partial_attention(q, k, v, 0.5, causal=True)
        >>> out.shape, lse.shape
        (torch.Size([1, 2, 3, 4]), torch.Size([1, 2, 3]))
    """
    if fused is None:
        fused = query.device.type == "cpu" and hasattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu")
    if fused:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, 0.0, causal, scale=scale)
        return out, lse.float()
    scores = torch.matmul(query.float(), key.float().transpose(-1, -2)) * scale
    if causal:
        length_q, length_k = scores.shape[-2:]
        future = torch.ones(length_q, length_k, dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    out = torch.matmul(torch.exp(scores - lse[..., None]), value.float())
    return out.to(query.dtype), lse


def shared_prefix_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    pluie_prefix: SharedPrefix | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention of right-padded suffix rows over one shared prefix cache plus their own causal past.

    A transformers attention function (registered as ``"pluie_shared_prefix"``). ``query``/``key``/
    ``value`` are the suffix rows (batch, heads, width, dim); the prefix keys/values of this layer,
    (1, kv_heads, prefix, dim), come from ``pluie_prefix``. The prefix part folds the batch (and
    the query heads sharing a key/value head) into the query length, so the prefix is never copied
    per row; the two parts are merged exactly through their log-sum-exps.

    Example:
        >>> model(input_ids=ids, position_ids=pos, pluie_prefix=SharedPrefix(kv))  # doctest: +SKIP
    """
    if pluie_prefix is None or any(kwargs.get(name) is not None for name in _UNSUPPORTED_ATTENTION_KWARGS):
        raise SharedPrefixUnsupported("this model's attention needs arguments the shared-prefix path does not handle")
    if dropout:
        raise SharedPrefixUnsupported("attention dropout is active")
    prefix_key, prefix_value = pluie_prefix.kv[module.layer_idx]
    pluie_prefix.calls += 1
    if pluie_prefix.collect:
        if len(pluie_prefix.collected) != module.layer_idx:
            raise SharedPrefixUnsupported("attention layers ran out of order")
        pluie_prefix.collected.append((key, value))
    batch, heads, width, dim = query.shape
    kv_heads = key.shape[1]
    if heads % kv_heads or prefix_key.shape[1] != kv_heads or prefix_key.shape[0] != 1:
        raise SharedPrefixUnsupported("unexpected key/value head layout")
    group = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    # prefix part: query head h uses key/value head h // group (as transformers' repeat_kv)
    folded = query.reshape(batch, kv_heads, group, width, dim).transpose(0, 1).reshape(1, kv_heads, -1, dim)
    out_prefix, lse_prefix = partial_attention(folded, prefix_key, prefix_value, scale, causal=False)
    out_prefix = out_prefix.reshape(kv_heads, batch, group, width, dim).transpose(0, 1).reshape(batch, heads, width, dim)
    lse_prefix = lse_prefix.reshape(kv_heads, batch, group, width).transpose(0, 1).reshape(batch, heads, width)
    # suffix part: causal within each row (right padding: real tokens never see a pad)
    if group > 1:
        key = key[:, :, None].expand(batch, kv_heads, group, width, dim).reshape(batch, heads, width, dim)
        value = value[:, :, None].expand(batch, kv_heads, group, width, dim).reshape(batch, heads, width, dim)
    out_suffix, lse_suffix = partial_attention(query, key, value, scale, causal=True)
    lse = torch.logaddexp(lse_prefix, lse_suffix)
    out = out_prefix * torch.exp(lse_prefix - lse)[..., None].to(out_prefix.dtype)
    out = out + out_suffix * torch.exp(lse_suffix - lse)[..., None].to(out_suffix.dtype)
    return out.transpose(1, 2).contiguous(), None


def _register_attention() -> bool:
    try:
        from transformers import AttentionInterface
    except ImportError:  # pragma: no cover - older transformers
        return False
    AttentionInterface.register(ATTENTION_NAME, shared_prefix_attention)
    return True


@dataclass
class Request:
    """One row to run: suffix ids after a prefix, and the answers to read at its end."""

    index: int
    suffix: list[int]
    targets: list[int] | None = None  # multi-token answer: sum log p of these tokens; None: yes/no logit diff


def longest_common_prefix(sequences: Sequence[Sequence[int]]) -> int:
    """Length of the longest common prefix of integer sequences.

    Example:
        >>> longest_common_prefix([[1, 2, 3], [1, 2, 4], [1, 2]])
        2
    """
    if not sequences:
        return 0
    n = min(len(s) for s in sequences)
    first = sequences[0]
    for i in range(n):
        t = first[i]
        if any(s[i] != t for s in sequences[1:]):
            return i
    return n


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


class PrefixScorer:
    """Runs a causal LM on token rows sharing prefixes, caching the prefixes' key/value states.

    Example:
        >>> scorer = PrefixScorer(model, pad_id=0)                      # doctest: +SKIP
        >>> scorer.logratios([[1, 5, 9], [1, 5, 7]], yes=[3], no=[4])    # doctest: +SKIP
        [0.12, -1.3]
    """

    def __init__(
        self,
        model: Any,
        pad_id: int = 0,
        batch_tokens: int | None = None,
        min_shared_tokens: int = 8,
        max_cached_prefixes: int = 16,
    ) -> None:
        self.model = model
        self.pad_id = pad_id
        self.batch_tokens = batch_tokens  # None: DEFAULT_BATCH_TOKENS of the device the model is on when scoring
        self.min_shared_tokens = min_shared_tokens
        self.max_cached_prefixes = max_cached_prefixes
        self._prefixes: dict[tuple[int, ...], KV] = {}
        self._positions_2d: bool | None = None
        self.stats = {"forward_calls": 0, "rows": 0, "prefix_passes": 0}
        self.prefix_caching = self._supports_prefix_cache()
        # None: not tried yet; True/False once the model has taken (or refused) shared-prefix attention
        self.shared_attention: bool | None = None if self.prefix_caching and _register_attention() else False

    # model facts -------------------------------------------------------------------------------
    @property
    def batch_tokens(self) -> int:
        """Token budget (rows x longest suffix) of one forward batch."""
        if self._batch_tokens is not None:
            return self._batch_tokens
        return DEFAULT_BATCH_TOKENS.get(self.device.type, FALLBACK_BATCH_TOKENS)

    @batch_tokens.setter
    def batch_tokens(self, value: int | None) -> None:
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"batch_tokens must be a positive integer or None (device default), got {value!r}.")
        self._batch_tokens = value

    @property
    def device(self) -> torch.device:
        return self.model.get_input_embeddings().weight.device

    def _supports_prefix_cache(self) -> bool:
        config = self.model.config
        if getattr(config, "is_encoder_decoder", False) or DynamicLayer is None:
            return False
        try:
            layers = DynamicCache(config=config).layers
        except Exception:  # unknown cache layout: run full sequences, still exact
            return False
        return all(type(layer) is DynamicLayer for layer in layers)

    def clear(self) -> None:
        """Drop cached prefixes (call when the weights change)."""
        self._prefixes.clear()

    # public ------------------------------------------------------------------------------------
    def logratios(
        self,
        sequences: Sequence[Sequence[int]],
        yes: Sequence[int],
        no: Sequence[int],
        static_prefix: Sequence[int] = (),
        groups: Sequence[Any] | None = None,
    ) -> list[float]:
        """log p(yes | seq) - log p(no | seq) for each token sequence.

        ``static_prefix`` is a token prefix most sequences share (the template's instructions and
        few-shot turns); ``groups`` gives each sequence a key, sequences with the same key share a
        longer prefix (the same source) that is computed once for the group.
        """
        multi = len(yes) != 1 or len(no) != 1
        out = [0.0] * len(sequences)
        static = tuple(static_prefix)
        units = list(self._plan(sequences, static, groups))
        chunk = max(1, self.max_cached_prefixes - 1)  # group prefixes computed together, then used
        for start, (prefix, rows) in enumerate(units):
            if start % chunk == 0:
                self._group_prefixes([u[0] for u in units[start : start + chunk]], static)
            requests = []
            for index, suffix in rows:
                if multi:
                    requests.append(Request(index, suffix + list(yes[:-1]), list(yes)))
                    requests.append(Request(-index - 1, suffix + list(no[:-1]), list(no)))
                else:
                    requests.append(Request(index, suffix))
            for request, value in self._run(prefix, requests, yes[0], no[0], static=static):
                if request.index >= 0:
                    out[request.index] += value
                else:
                    out[-request.index - 1] -= value
        for i, value in enumerate(out):
            if value != value or value in (float("inf"), float("-inf")):
                raise FloatingPointError(
                    f"item {i}: the judge produced a non-finite score ({value}); the model's logits overflowed. "
                    "Load the judge in float32 or bfloat16 rather than float16."
                )
        return out

    # planning ----------------------------------------------------------------------------------
    def _plan(
        self, sequences: Sequence[Sequence[int]], static: tuple[int, ...], groups: Sequence[Any] | None
    ) -> Iterator[tuple[tuple[int, ...], list[tuple[int, list[int]]]]]:
        """Split sequences into (shared prefix, [(index, suffix)]) work units."""
        if not self.prefix_caching:
            yield (), [(i, list(s)) for i, s in enumerate(sequences)]
            return
        p = len(static)
        with_static, without = [], []
        for i, s in enumerate(sequences):
            (with_static if p and len(s) > p and tuple(s[:p]) == static else without).append(i)
        by_group: dict[Any, list[int]] = {}
        for i in with_static:
            by_group.setdefault(groups[i] if groups is not None else i, []).append(i)
        loose = []
        for members in by_group.values():
            shared = longest_common_prefix([sequences[i] for i in members]) if len(members) > 1 else 0
            shared = min(shared, min(len(sequences[i]) for i in members) - 1)
            if len(members) > 1 and shared - p >= self.min_shared_tokens:
                yield tuple(sequences[members[0]][:shared]), [(i, list(sequences[i][shared:])) for i in members]
            else:
                loose.extend(members)
        if loose:
            yield static, [(i, list(sequences[i][p:])) for i in loose]
        if without:
            yield (), [(i, list(sequences[i])) for i in without]

    # running -----------------------------------------------------------------------------------
    def _prefix_kv(self, prefix: tuple[int, ...], static: tuple[int, ...] = ()) -> KV | None:
        """Key/values of ``prefix``, extending the longest cached prefix of it; a group prefix that
        starts with the (uncached) ``static`` prefix computes ``static`` first, so groups share it."""
        if not prefix:
            return None
        if prefix in self._prefixes:
            return self._prefixes[prefix]
        if static and len(static) < len(prefix) and prefix[: len(static)] == static and static not in self._prefixes:
            self._prefix_kv(static)
        base, base_kv = (), None
        for known in self._prefixes:  # extend the longest cached prefix of this prefix (the static one)
            if len(known) < len(prefix) and prefix[: len(known)] == known and len(known) > len(base):
                base, base_kv = known, self._prefixes[known]
        ids = torch.tensor([prefix[len(base) :]], device=self.device)
        output = self._forward_cached(ids, base_kv, batch=1, keep=1)
        kv = [(layer.keys, layer.values) for layer in output.past_key_values.layers]
        self.stats["prefix_passes"] += 1
        if len(self._prefixes) >= self.max_cached_prefixes:
            # keep the shortest (static) prefixes, which every batch reuses; drop the newest group prefix
            victim = max(self._prefixes, key=len)
            del self._prefixes[victim]
        self._prefixes[prefix] = kv
        return kv

    def _group_prefixes(self, prefixes: Sequence[tuple[int, ...]], static: tuple[int, ...]) -> None:
        """Compute the group prefixes that extend ``static`` in batched shared-prefix forwards.

        One right-padded batch instead of one small forward per group; each group's key/values are
        the static prefix's followed by its own rows' (causal, so the padding never leaks in).
        """
        todo = [p for p in dict.fromkeys(prefixes) if p not in self._prefixes and len(p) > len(static) > 0
                and p[: len(static)] == static]
        if not todo or self.shared_attention is False:
            return
        base = self._prefix_kv(static)
        wanted = {static, *prefixes}
        for victim in [p for p in self._prefixes if p not in wanted]:  # room for this chunk's groups
            del self._prefixes[victim]
        lengths = [len(p) - len(static) for p in todo]
        for batch_index in token_batches(lengths, self.batch_tokens):
            rows = [todo[i] for i in batch_index]
            width = max(lengths[i] for i in batch_index)
            ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
            for row, p in enumerate(rows):
                ids[row, : len(p) - len(static)] = torch.tensor(p[len(static) :], dtype=torch.long)
            state = SharedPrefix(base, collect=True)
            try:
                self._forward_shared(ids.to(self.device), base, keep=1, state=state)
            except SharedPrefixUnsupported:
                if self.shared_attention:
                    raise
                self.shared_attention = False
                return
            self.shared_attention = True
            self.stats["prefix_passes"] += 1
            for row, p in enumerate(rows):
                n = len(p) - len(static)
                self._prefixes[p] = [
                    (torch.cat([k0, k[row : row + 1, :, :n]], dim=-2), torch.cat([v0, v[row : row + 1, :, :n]], dim=-2))
                    for (k0, v0), (k, v) in zip(base, state.collected)
                ]

    def _forward(self, input_ids: torch.Tensor, kv: KV | None, batch: int, keep: Any) -> Any:
        """Rows after the prefix ``kv``: shared-prefix attention when the model takes it, else a cache."""
        if kv is not None and self.shared_attention is not False:
            try:
                output = self._forward_shared(input_ids, kv, keep)
            except SharedPrefixUnsupported:
                if self.shared_attention:  # worked before: a real failure, not a capability probe
                    raise
                self.shared_attention = False
            else:
                self.shared_attention = True
                return output
        if kv is None:
            self.stats["forward_calls"] += 1
            return self.model(input_ids=input_ids, use_cache=False, logits_to_keep=keep)
        return self._forward_cached(input_ids, kv, batch, keep)

    def _forward_cached(self, input_ids: torch.Tensor, kv: KV | None, batch: int, keep: Any) -> Any:
        """Forward on top of a DynamicCache holding ``kv`` broadcast to the batch (returns the cache)."""
        cache = DynamicCache(config=self.model.config)
        if kv is not None:
            for layer, (key, value) in zip(cache.layers, kv):
                # broadcast views: the layer's first update concatenates them once (no extra copy)
                layer.lazy_initialization(key, value)
                layer.keys, layer.values = key.expand(batch, -1, -1, -1), value.expand(batch, -1, -1, -1)
        self.stats["forward_calls"] += 1
        return self.model(input_ids=input_ids, past_key_values=cache, use_cache=True, logits_to_keep=keep)

    def _forward_shared(self, input_ids: torch.Tensor, kv: KV, keep: Any, state: SharedPrefix | None = None) -> Any:
        """Forward of suffix rows with :func:`shared_prefix_attention` over the batch-1 prefix ``kv``.

        The model's ``config._attn_implementation`` names the shared-prefix function during this
        forward only (restored after, even on error); like the eval/adapter switches of
        ``scoring_state``, it assumes no other forward of the same model runs concurrently.
        """
        batch, width = input_ids.shape
        start = kv[0][0].shape[-2]
        positions = torch.arange(start, start + width, device=input_ids.device).expand(batch, -1)
        state = state or SharedPrefix(kv)
        config = self.model.config
        previous = config._attn_implementation
        config._attn_implementation = ATTENTION_NAME
        self.stats["forward_calls"] += 1
        try:
            output = self.model(
                input_ids=input_ids, position_ids=positions, use_cache=False, logits_to_keep=keep, pluie_prefix=state
            )
        except TypeError as err:  # the forward does not pass extra arguments down to its attention
            if self.shared_attention is None:
                raise SharedPrefixUnsupported(str(err)) from err
            raise
        finally:
            config._attn_implementation = previous
        if state.calls != len(kv):
            raise SharedPrefixUnsupported(
                f"{state.calls} of {len(kv)} attention layers ran through the shared-prefix function"
            )
        return output

    def _run(
        self, prefix: tuple[int, ...], requests: list[Request], yes: int, no: int, static: tuple[int, ...] = ()
    ) -> Iterator[tuple[Request, float]]:
        kv = self._prefix_kv(prefix, static)
        lengths = [len(r.suffix) for r in requests]
        for batch_index in token_batches(lengths, self.batch_tokens):
            batch = [requests[i] for i in batch_index]
            self.stats["rows"] += len(batch)
            width = max(len(r.suffix) for r in batch)
            reads = max(len(r.targets) if r.targets else 1 for r in batch)
            ids = torch.full((len(batch), width), self.pad_id, dtype=torch.long)
            for row, r in enumerate(batch):
                ids[row, : len(r.suffix)] = torch.tensor(r.suffix, dtype=torch.long)
            ends = torch.tensor([len(r.suffix) for r in batch])
            positions = (ends[:, None] - reads + torch.arange(reads)[None, :]).clamp(min=0)
            logits = self._logits_at(ids.to(self.device), kv, positions)
            for row, r in enumerate(batch):
                if r.targets is None:
                    yield r, float(logits[row, -1, yes] - logits[row, -1, no])
                else:
                    n = len(r.targets)
                    logp = torch.log_softmax(logits[row, reads - n :], dim=-1)
                    yield r, float(logp[torch.arange(n), torch.tensor(r.targets)].sum())

    def _logits_at(self, ids: torch.Tensor, kv: KV | None, positions: torch.Tensor) -> torch.Tensor:
        """Float32 logits of each row at the given positions, shape (rows, reads, vocab)."""
        batch, reads = positions.shape
        if self._positions_2d is not False:
            try:
                logits = self._forward(ids, kv, batch, positions.to(self.device)).logits
            except (TypeError, IndexError, RuntimeError):
                if self._positions_2d:
                    raise
                logits = None
            if self._positions_2d is None:
                self._positions_2d = logits is not None and tuple(logits.shape) == (batch, reads, logits.shape[-1])
            if self._positions_2d:
                return logits.float()
        # models whose forward takes only an int logits_to_keep: keep the last positions, then gather
        first = int(positions.min())
        logits = self._forward(ids, kv, batch, ids.shape[1] - first).logits.float()
        index = (positions - first).to(logits.device)
        return torch.gather(logits, 1, index[:, :, None].expand(-1, -1, logits.shape[-1]))
