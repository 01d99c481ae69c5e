"""The :class:`Judge`: a frozen chat LLM scoring text with PLUIE, log p(Yes) - log p(No)."""

from __future__ import annotations

import math
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Sequence

from ..engines.transformers.loading import EMBEDDED_NAME, load_model_and_tokenizer
from ..engines.transformers.model_state import scoring_state, weights_fingerprint
from .prompt import BoundTemplate
from ..engines.transformers.engine import PrefixScorer
from .template import Template, load_template, normalize_fields

TemplateLike = "str | Path | Template | None"


def sigmoid(x: float) -> float:
    """Numerically safe logistic function.

    Example:
        >>> sigmoid(0.0)
        0.5
    """
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


class Judge:
    """A causal chat LM used as a PLUIE judge. ``score`` is the library's one scoring path.

    Example:
        >>> judge = Judge.load()  # embedded SmolLM2-135M-Instruct, offline   # doctest: +SKIP
        >>> judge.score("para-fs", source=["The cat sleeps."], hypothesis=["The cat is asleep."])  # doctest: +SKIP
        [1.83]
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        batch_tokens: int | None = None,  # None: 512 on CPU, 4096 elsewhere (scorer.DEFAULT_BATCH_TOKENS)
        cache_size: int = 4096,
        threshold: float = 0.0,
        allow_multi_token: bool = False,
        disable_adapters: bool = False,
        weight_filter: Callable[[str], bool] | None = None,
        name: str | None = None,
    ) -> None:
        if getattr(model.config, "is_encoder_decoder", False):
            raise TypeError("PLUIE needs a decoder-only (causal) chat LM as judge, not an encoder-decoder model.")
        self.model = model
        self.tokenizer = tokenizer
        self.threshold = threshold
        self.allow_multi_token = allow_multi_token
        self.disable_adapters = disable_adapters
        self.name = name or getattr(model.config, "_name_or_path", "") or type(model).__name__
        self.cache_size = cache_size
        self._results: OrderedDict[tuple, float] = OrderedDict()
        self._bound: dict[Any, BoundTemplate] = {}
        self._watched = [p for n, p in model.named_parameters() if weight_filter is None or weight_filter(n)]
        self._fingerprint = weights_fingerprint(self._watched)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.scorer = PrefixScorer(model, pad_id=pad or 0, batch_tokens=batch_tokens)

    # construction ----------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        model: "str | Path | None" = None,
        *,
        device: Any = None,
        dtype: Any = None,
        device_map: Any = None,
        model_kwargs: dict | None = None,
        **judge_kwargs: Any,
    ) -> "Judge":
        """Load a judge: ``None`` for the embedded SmolLM2-135M-Instruct, a HF id, a folder or a ``.gguf`` file.

        Example:
            >>> judge = Judge.load("Qwen/Qwen2.5-7B-Instruct", device="cuda:0", dtype="bfloat16")  # doctest: +SKIP
        """
        lm, tokenizer = load_model_and_tokenizer(model, device=device, dtype=dtype, device_map=device_map, **(model_kwargs or {}))
        name = EMBEDDED_NAME if model is None else str(model)
        return cls(lm, tokenizer, name=judge_kwargs.pop("name", name), **judge_kwargs)

    @classmethod
    def from_model(cls, model: Any, tokenizer: Any, **judge_kwargs: Any) -> "Judge":
        """Wrap an already loaded causal LM and its tokenizer.

        Example:
            >>> judge = Judge.from_model(model, tokenizer, batch_tokens=2048)  # doctest: +SKIP
        """
        return cls(model, tokenizer, **judge_kwargs)

    @classmethod
    def from_peft(cls, policy_model: Any, tokenizer: Any, adapter_name: str | None = None, **judge_kwargs: Any) -> "Judge":
        """A judge sharing a PEFT policy's weights: its base model with adapters disabled while scoring,
        or the frozen adapter ``adapter_name`` (a fine-tuned judge on the same base). No weight copy.

        Example:
            >>> judge = Judge.from_peft(policy, tokenizer)  # doctest: +SKIP
        """
        from ..integrations.placement import SharedJudge

        return SharedJudge(policy_model, tokenizer, adapter_name=adapter_name, **judge_kwargs)

    # templates -------------------------------------------------------------------------------
    @property
    def max_length(self) -> int | None:
        """The judge's context length in tokens."""
        config = self.model.config.get_text_config() if hasattr(self.model.config, "get_text_config") else self.model.config
        limits = [getattr(config, "max_position_embeddings", None)]
        tok_max = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(tok_max, int) and tok_max < 10**8:
            limits.append(tok_max)
        limits = [x for x in limits if isinstance(x, int) and x > 0]
        return min(limits) if limits else None

    def bind(self, template: TemplateLike = None) -> BoundTemplate:
        """Resolve a template and bind it to this judge's tokenizer (validated once, then reused).

        Example:
            >>> judge.bind("para-fs").answer_ids  # doctest: +SKIP
            ([10539], [5230])
        """
        key = template if isinstance(template, (str, Path, type(None))) else id(template)
        if key not in self._bound:
            self._bound[key] = BoundTemplate(
                load_template(template), self.tokenizer, self.max_length, self.allow_multi_token
            )
        return self._bound[key]

    # scoring ---------------------------------------------------------------------------------
    def score(
        self,
        template: TemplateLike = None,
        *,
        details: bool = False,
        threshold: float | None = None,
        truncate: bool = True,
        use_cache: bool = True,
        **fields: Any,
    ) -> list[float] | list[dict[str, Any]]:
        """PLUIE scores, log p(yes) - log p(no), one per item, in input order.

        Fields are the template's (``source``/``hypothesis`` for paraphrase templates); each is a
        list with one string per item, or one string shared by all items.

        Args:
            template: built-in name (default ``"para-fs"``), YAML path or :class:`Template`.
            details: return records ``{"logratio", "p_yes", "verdict"}`` instead of floats;
                ``p_yes = sigmoid(logratio)`` is p(yes) renormalised over the two answers.
            threshold: verdict is ``logratio > threshold`` (default: the judge's, 0).
            truncate: cut over-long fields from the middle (with a warning) instead of raising.
            use_cache: reuse results of identical prompts seen recently.

        Example:
            >>> judge.score("rev", original=["P"], instruction=["Fix typos"], hypothesis=["P."], details=True)  # doctest: +SKIP
            [{'logratio': 2.1, 'p_yes': 0.89, 'verdict': True}]
        """
        bound = self.bind(template)
        columns, n = normalize_fields(bound.template, fields)
        with scoring_state(self.model, self.disable_adapters):
            self._invalidate_if_weights_changed()
            items = bound.encode_items(columns, n, truncate=truncate)
            keys = [(bound.template.answers, item.text) for item in items]
            todo: dict[tuple, int] = {}
            for key, item in zip(keys, items):
                if not (use_cache and key in self._results) and key not in todo:
                    todo[key] = len(todo)
            unique = [None] * len(todo)
            for key, item in zip(keys, items):
                if key in todo:
                    unique[todo[key]] = item
            fresh = self.scorer.logratios(
                [u.ids for u in unique],
                *bound.answer_ids,
                static_prefix=bound.prefix_ids,
                groups=[u.group for u in unique],
            ) if unique else []
        computed = dict(zip(todo, fresh))
        scores = [computed[k] if k in computed else self._results[k] for k in keys]
        if use_cache and self.cache_size > 0:
            self._remember(computed, keys)
        if not details:
            return scores
        cut = self.threshold if threshold is None else threshold
        return [{"logratio": s, "p_yes": sigmoid(s), "verdict": s > cut} for s in scores]

    def _remember(self, computed: dict[tuple, float], used: Sequence[tuple]) -> None:
        for key in used:
            if key in self._results:
                self._results.move_to_end(key)
        self._results.update(computed)
        while len(self._results) > self.cache_size:
            self._results.popitem(last=False)

    def _invalidate_if_weights_changed(self) -> None:
        fingerprint = weights_fingerprint(self._watched)
        if fingerprint != self._fingerprint:
            self._fingerprint = fingerprint
            self._results.clear()
            self.scorer.clear()

    def clear_cache(self) -> None:
        """Forget cached results and prefix key/values."""
        self._results.clear()
        self.scorer.clear()

    def __repr__(self) -> str:
        return f"Judge({self.name!r}, device={self.scorer.device}, dtype={self.model.dtype})"
