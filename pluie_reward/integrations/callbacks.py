"""PluieCallback: PLUIE scores of the generator's own outputs, computed during training.

At each evaluation (or every N steps) the callback generates answers for a fixed evaluation set with
the model being trained, scores them and logs ``eval_pluie_mean``, ``eval_pluie_accept_rate`` and
quantiles through the trainer (``metric_for_best_model="eval_pluie_mean"`` works).

Example:
    >>> from pluie_reward import Judge
    >>> from pluie_reward.integrations.callbacks import PluieCallback
    >>> callback = PluieCallback(Judge.load, "para-fs", [{"prompt": "Paraphrase: The cat sleeps.", "source": "The cat sleeps."}])
    >>> trainer = SFTTrainer(model, args=args, train_dataset=train, eval_dataset=dev)  # doctest: +SKIP
    >>> callback.attach(trainer)  # doctest: +SKIP
    >>> trainer.train()  # needs minutes of training  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import math
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np
import torch
from tqdm import tqdm
from transformers import StoppingCriteria, StoppingCriteriaList
from transformers.trainer_callback import TrainerCallback

from ..common.weights import weights_digest
from ..core.judge import Judge
from ..core.template import Template, load_template, normalize_fields
from .fields import map_fields

JudgeLike = "Judge | Callable[[], Judge]"
logger = logging.getLogger(__name__)


# generation ---------------------------------------------------------------------------------
def _text_tokenizer(processing_class: Any) -> Any:
    """The text tokenizer inside a processor (or the tokenizer itself)."""
    return getattr(processing_class, "tokenizer", None) or processing_class


def render_prompt(tokenizer: Any, prompt: "str | Sequence[Mapping[str, str]]") -> str:
    """A prompt as text: chat messages go through the tokenizer's chat template (with the generation
    prompt), plain strings are used as they are.

    Example:
        >>> from pluie_reward.testing import make_tiny_tokenizer
        >>> render_prompt(make_tiny_tokenizer(), [{"role": "user", "content": "hi"}])
        '<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
    """
    if isinstance(prompt, str):
        return prompt
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            "the evaluation prompts are chat messages but the generator's tokenizer has no chat template; "
            "set tokenizer.chat_template or give the prompts as plain strings."
        )
    return tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)


@contextmanager
def generation_state(model: Any) -> Iterator[None]:
    """Eval mode, no autograd and ``use_cache`` on for generating; every module's training flag and
    ``config.use_cache`` are restored afterwards (gradient checkpointing stays configured: it only
    acts in training mode).

    Example:
        >>> batch = tokenizer(["The cat"], return_tensors="pt")
        >>> _ = model.train()  # e.g. called from inside a training loop
        >>> with generation_state(model):
        ...     out = model.generate(**batch, max_new_tokens=4, do_sample=False)
        >>> model.training
        True
    """
    modes = [(module, module.training) for module in model.modules()]
    config = getattr(model, "config", None)
    use_cache = getattr(config, "use_cache", None)
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for module, mode in modes:
            module.training = mode
        if config is not None and use_cache is not None:
            config.use_cache = use_cache


def generate_texts(
    model: Any,
    tokenizer: Any,
    prompts: Sequence["str | Sequence[Mapping[str, str]]"],
    *,
    batch_size: int = 8,
    max_prompt_length: int | None = None,
    progress: str | None = None,
    **generation_kwargs: Any,
) -> list[str]:
    """Generate one answer per prompt with ``model`` (decoder-only or encoder-decoder, PEFT or not).

    Decoder-only models get left-padded batches and only the new tokens are decoded; encoder-decoder
    models decode the decoder output. The model's training flags and ``use_cache`` are restored.
    ``progress``: a progress bar on stderr with this description (prompts done, and the tokens of the batch
    under way); ``None``: silent.

    Example:
        >>> generate_texts(model, tokenizer, [[{"role": "user", "content": "Paraphrase: hi"}]], max_new_tokens=20)
        ['...']
    """
    tokenizer = _text_tokenizer(tokenizer)
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    encoder_decoder = bool(getattr(model.config, "is_encoder_decoder", False))
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    if pad_id is None:
        pad_id = getattr(config, "pad_token_id", None) or 0
    texts = [render_prompt(tokenizer, p) for p in prompts]
    chat = [not isinstance(p, str) for p in prompts]
    settings = {"max_new_tokens": 64, "do_sample": False, "use_cache": True, "pad_token_id": pad_id}
    settings.update(generation_kwargs)
    device = next(model.parameters()).device
    outputs: list[str] = []
    bar = tqdm(total=len(texts), desc=progress, unit="prompt", disable=progress is None, file=sys.stderr,
               mininterval=1 if sys.stderr.isatty() else 10)  # a log gets a line every 10 s, not every token
    criteria = list(settings.pop("stopping_criteria", None) or [])
    with generation_state(model), bar:
        for start in range(0, len(texts), batch_size):
            # with a progress bar, a criterion that never stops shows the tokens drawn in the batch under way
            counter = [_TokenCount(bar, settings["max_new_tokens"])] if progress is not None else []
            if criteria or counter:
                settings["stopping_criteria"] = StoppingCriteriaList(criteria + counter)
            rows = []
            for text, is_chat in zip(texts[start : start + batch_size], chat[start : start + batch_size]):
                # the chat template already holds the special tokens (BOS etc.)
                ids = tokenizer(text, add_special_tokens=not is_chat)["input_ids"]
                if max_prompt_length is not None and len(ids) > max_prompt_length:
                    ids = ids[-max_prompt_length:]
                rows.append(ids)
            width = max(len(r) for r in rows)
            if encoder_decoder:  # right padding for the encoder
                input_ids = [r + [pad_id] * (width - len(r)) for r in rows]
                mask = [[1] * len(r) + [0] * (width - len(r)) for r in rows]
            else:  # left padding so that every row continues from its last prompt token
                input_ids = [[pad_id] * (width - len(r)) + r for r in rows]
                mask = [[0] * (width - len(r)) + [1] * len(r) for r in rows]
            batch = {"input_ids": torch.tensor(input_ids, device=device), "attention_mask": torch.tensor(mask, device=device)}
            sequences = model.generate(**batch, **settings)
            if not isinstance(sequences, torch.Tensor):  # return_dict_in_generate=True
                sequences = sequences.sequences
            new_tokens = sequences if encoder_decoder else sequences[:, width:]
            outputs.extend(t.strip() for t in tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
            bar.update(len(rows))
    return outputs


class _TokenCount(StoppingCriteria):
    """Never stops a ``generate``: shows on ``bar`` how many tokens of the batch under way are drawn."""

    def __init__(self, bar: Any, limit: int) -> None:
        self.bar, self.limit, self.seen = bar, limit, 0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        self.seen += 1
        self.bar.set_postfix_str(f"token {self.seen}/{self.limit}", refresh=False)
        self.bar.update(0)  # drawn when the bar's interval has passed
        return torch.zeros(input_ids.size(0), dtype=torch.bool, device=input_ids.device)


# statistics ---------------------------------------------------------------------------------
def summarize(scores: Sequence[float], verdicts: Sequence[bool], quantiles: Sequence[float], prefix: str) -> dict[str, float]:
    """The logged metrics: mean, accept rate and quantiles (``{prefix}_pluie_p10`` ...: ``numpy.quantile``, linear).

    Example:
        >>> summarize([0.0, 1.0, 2.0], [False, True, True], [0.5], "eval")
        {'eval_pluie_mean': 1.0, 'eval_pluie_accept_rate': 0.6666666666666666, 'eval_pluie_p50': 1.0}
    """
    metrics = {
        f"{prefix}_pluie_mean": sum(scores) / len(scores),
        f"{prefix}_pluie_accept_rate": sum(bool(v) for v in verdicts) / len(verdicts),
    }
    for q in quantiles:
        metrics[f"{prefix}_pluie_p{round(q * 100):d}"] = float(np.quantile(scores, q))
    return metrics


# the callback -------------------------------------------------------------------------------
class PluieCallback(TrainerCallback):
    """Generate with the model under training, score with a PLUIE judge, log the results.

    Args:
        judge: a :class:`Judge`, or a zero-argument factory (e.g. ``Judge.load``) called on first use;
            it may share the trained model (its state is restored after generating and scoring).
        template: the judge template (name, YAML path or :class:`Template`).
        eval_set: a ``datasets.Dataset`` or list of dicts with a prompt column (a string, or chat
            messages rendered with the generator tokenizer's chat template) and the template's
            other fields (e.g. ``source``); the generation is the template's ``hypothesis``.
        fields: template field -> eval_set column, for columns not named like the fields (as in
            :class:`~pluie_reward.PluieReward`; optional fields are read when their column exists).
        max_items: score only the first ``max_items`` items.
        every_n_steps: ``None`` runs at every evaluation (the metrics join the evaluation metrics,
            for ``metric_for_best_model`` and ``EarlyStoppingCallback``); an int runs every N
            optimizer steps instead, independently of evaluation.
        threshold: verdict cut-off for the accept rate (default: the judge's).
        prompt_field / hypothesis_field: column of the prompts; template field filled by the generation.
        batch_size: prompts per ``generate`` call. ``max_prompt_length``: keep the last N prompt tokens.
        quantiles: quantiles to log (0.1 -> ``eval_pluie_p10``). ``metric_prefix``: ``"eval"``.
        tokenizer: the generator's tokenizer (default: the trainer's ``processing_class``).
        write_table: write ``{output_dir}/pluie/step-XXXXXX.jsonl`` and a wandb table when a run is active.
        progress: a progress bar on stderr while the evaluation set is generated (prompts done, tokens of the batch).
        alarm, alarm_views: a :class:`~pluie_reward.integrations.alarm.HackAlarm` fed at each run with the
            generations' PLUIE and each view (name -> a TRL-style reward on the generations and the items'
            columns); its metrics are logged as ``<prefix>_alarm_*``.
        **generation_kwargs: passed to ``model.generate`` (``max_new_tokens=64``, greedy by default).

        trainer: the transformers ``Trainer`` to log through; the callback adds itself to it (:meth:`attach`).
            The callback needs its trainer to log: one only passed in ``callbacks=[...]`` says so at the start.

    Example:
        >>> from transformers import Trainer, TrainingArguments
        >>> eval_set = [{"prompt": [{"role": "user", "content": "Paraphrase: The cat sleeps."}], "source": "The cat sleeps."},
        ...             {"prompt": [{"role": "user", "content": "Paraphrase: Prices rose."}], "source": "Prices rose."}]
        >>> callback = PluieCallback(judge, "para-fs", eval_set, max_items=64, max_new_tokens=48)
        >>> args = TrainingArguments("out", eval_strategy="steps", eval_steps=50, load_best_model_at_end=True,
        ...                          metric_for_best_model="eval_pluie_mean", greater_is_better=True)
        >>> ids = tokenizer("The cat sleeps.")["input_ids"]
        >>> train = dev = [{"input_ids": ids, "labels": ids}]
        >>> trainer = Trainer(model, args, train_dataset=train, eval_dataset=dev)
        >>> callback.attach(trainer)  # or PluieCallback(..., trainer=trainer)
        <transformers.trainer.Trainer object at 0x...>
    """

    def __init__(
        self,
        judge: JudgeLike,
        template: "str | Path | Template | None",
        eval_set: Any,
        *,
        max_items: int | None = None,
        every_n_steps: int | None = None,
        threshold: float | None = None,
        prompt_field: str = "prompt",
        hypothesis_field: str = "hypothesis",
        batch_size: int = 8,
        max_prompt_length: int | None = None,
        quantiles: Sequence[float] = (0.1, 0.5, 0.9),
        metric_prefix: str = "eval",
        tokenizer: Any = None,
        write_table: bool = True,
        progress: bool = True,
        fields: Mapping[str, str] | None = None,
        alarm: Any = None,
        alarm_views: Mapping[str, Any] | None = None,
        trainer: Any = None,
        **generation_kwargs: Any,
    ) -> None:
        if (alarm is None) != (not alarm_views):
            raise ValueError("alarm= and alarm_views= go together: a HackAlarm and at least one view, e.g. "
                             "alarm=HackAlarm(), alarm_views={'novelty': NoveltyReward('source')}.")
        self.alarm, self.alarm_views = alarm, dict(alarm_views or {})
        if isinstance(judge, Judge):
            self._judge: Judge | None = judge
            self._judge_factory = None
        elif callable(judge):
            self._judge, self._judge_factory = None, judge
        else:
            raise TypeError(f"judge must be a Judge or a zero-argument function returning one, not {type(judge).__name__}.")
        self.template = load_template(template)
        if hypothesis_field not in self.template.fields:
            raise ValueError(
                f"template {self.template.name!r} has no field {hypothesis_field!r} for the generation; "
                f"its fields are {list(self.template.fields)} (set hypothesis_field=...)."
            )
        # the one field -> column mapping (pluie_reward.integrations.fields); the generation fills hypothesis_field
        self.field_map = map_fields(
            self.template.fields, fields, optional=self.template.optional_fields, fixed={hypothesis_field},
            template=self.template.name, setting="fields", who="PluieCallback: ",
        )
        if every_n_steps is not None and (not isinstance(every_n_steps, int) or every_n_steps < 1):
            raise ValueError(f"every_n_steps must be a positive integer or None (every evaluation), not {every_n_steps!r}.")
        if max_items is not None and (not isinstance(max_items, int) or max_items < 1):
            raise ValueError(f"max_items must be a positive integer or None (all items), not {max_items!r}.")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size!r}.")
        if not all(0.0 <= q <= 1.0 for q in quantiles):
            raise ValueError(f"quantiles must lie in [0, 1], got {list(quantiles)}.")
        self.prompt_field = prompt_field
        self.hypothesis_field = hypothesis_field
        self.items = self._validated_items(eval_set, max_items)
        self.every_n_steps = every_n_steps
        self.threshold = threshold
        self.batch_size = batch_size
        self.max_prompt_length = max_prompt_length
        self.quantiles = tuple(quantiles)
        self.metric_prefix = metric_prefix
        self.tokenizer = tokenizer
        self.write_table, self.progress = write_table, progress
        self.generation_kwargs = generation_kwargs
        self.trainer: Any = None  # the transformers Trainer, see attach()
        self.history: list[dict[str, Any]] = []  # one entry per run: step, metrics, table path
        self._last: tuple[int, torch.Tensor, dict[str, float]] | None = None
        if trainer is not None:
            self.attach(trainer)

    # configuration ---------------------------------------------------------------------------
    def _validated_items(self, eval_set: Any, max_items: int | None) -> list[dict[str, Any]]:
        if eval_set is None:
            raise ValueError("eval_set is empty: give a datasets.Dataset or a list of dicts with prompts.")
        columns = getattr(eval_set, "column_names", None)
        if max_items is not None:
            eval_set = eval_set.select(range(min(max_items, len(eval_set)))) if columns is not None else list(eval_set)[:max_items]
        items = [dict(row) for row in eval_set]
        if not items:
            raise ValueError("eval_set is empty: give at least one item with a prompt and the template's fields.")
        for index, row in enumerate(items):
            present = [k for k, v in row.items() if v is not None]
            missing = [self.prompt_field] if self.prompt_field not in present else []
            missing += [self.field_map.columns[f] for f in self.field_map.missing(present)]
            if missing:
                wanted = [self.field_map.columns[f] for f in self.field_map.columns if f in self.field_map.required]
                raise ValueError(
                    f"eval_set item {index} lacks {missing}: each item needs the prompt column {self.prompt_field!r} "
                    f"and the columns of template {self.template.name!r}'s fields other than the generated "
                    f"{self.hypothesis_field!r}: {wanted} (map them with fields={{'<field>': '<column>'}})."
                )
            prompt = row[self.prompt_field]
            if not isinstance(prompt, str) and not (
                isinstance(prompt, Sequence) and prompt and all(isinstance(m, Mapping) and "content" in m for m in prompt)
            ):
                raise TypeError(
                    f"eval_set item {index}: the prompt must be a string or a list of chat messages "
                    f"({{'role', 'content'}} dicts), not {type(prompt).__name__}."
                )
        # field types (strings, optional None) are checked the way Judge.score will check them
        normalize_fields(self.template, {**self._fields(items), self.hypothesis_field: ""})
        return items

    def _fields(self, items: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
        """The template's fields (other than the generation) as columns; optional ones when present."""
        present = {k for row in items for k in row}
        return {f: [row.get(c) for row in items] for f, c in self.field_map.select(present, where="the eval_set").items()}

    @property
    def judge(self) -> Judge:
        """The judge, built by the factory on first use."""
        if self._judge is None:
            judge = self._judge_factory()
            if not isinstance(judge, Judge):
                raise TypeError(f"the judge factory returned {type(judge).__name__}, not a Judge.")
            self._judge = judge
        return self._judge

    def attach(self, trainer: Any) -> Any:
        """Give the callback its trainer (to log through it) and add it with ``trainer.add_callback``
        if it is missing. Callbacks registered before it that read evaluation metrics (their class
        overrides ``on_evaluate``: ``EarlyStoppingCallback``, a user's own) are re-added after it
        (``remove_callback``/``add_callback``), so that they read the PLUIE metrics it adds.

        Args:
            trainer: the transformers ``Trainer`` (or a TRL trainer).

        Returns:
            The trainer.

        Example:
            >>> from transformers import Trainer, TrainingArguments
            >>> callback = PluieCallback(judge, "para-fs", [{"prompt": "Paraphrase: The cat sleeps.", "source": "The cat sleeps."}])
            >>> ids = tokenizer("The cat sleeps.")["input_ids"]
            >>> train = dev = [{"input_ids": ids, "labels": ids}]
            >>> args = TrainingArguments("out", eval_strategy="steps", eval_steps=50)
            >>> trainer = callback.attach(Trainer(model, args, train_dataset=train, eval_dataset=dev))
            >>> callback in trainer.callback_handler.callbacks
            True
        """
        from transformers import TrainerCallback

        self.trainer = trainer
        if self not in trainer.callback_handler.callbacks:
            trainer.add_callback(self)
        mine = trainer.callback_handler.callbacks.index(self)
        for callback in list(trainer.callback_handler.callbacks[:mine]):
            if type(callback).on_evaluate is not TrainerCallback.on_evaluate:
                trainer.remove_callback(callback)
                trainer.add_callback(callback)
        self._check_arguments(trainer.args)
        return trainer

    def _check_arguments(self, args: Any) -> None:
        metric = getattr(args, "metric_for_best_model", None) or ""
        if self.every_n_steps is not None and "pluie" in metric:
            raise ValueError(
                f"metric_for_best_model={metric!r} needs the PLUIE metrics at every evaluation: "
                "use every_n_steps=None (the default) in PluieCallback."
            )

    def _find_trainer(self) -> Any:
        """The trainer given to :meth:`attach` (or ``trainer=``)."""
        if self.trainer is not None:
            return self.trainer
        raise RuntimeError(
            "PluieCallback has no trainer: build it with PluieCallback(..., trainer=trainer) or call callback.attach(trainer)."
        )

    # trainer events --------------------------------------------------------------------------
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._find_trainer()

    def on_evaluate(self, args: Any, state: Any, control: Any, metrics: dict[str, float] | None = None, **kwargs: Any) -> None:
        if self.every_n_steps is not None:
            return
        trainer = self._find_trainer()
        model = trainer.accelerator.unwrap_model(trainer.model)
        step, digest = state.global_step, weights_digest(list(model.named_parameters()))
        if self._last is not None and self._last[0] == step and torch.equal(self._last[1], digest):
            ours = dict(self._last[2])  # e.g. several eval datasets at one step, same weights
        else:
            ours = self.evaluate(model, kwargs.get("processing_class"), args=args, state=state)
            trainer.log(dict(ours))
            self._last = (step, digest, ours)
        if metrics is not None:
            metrics.update(ours)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """Warn when the evaluation before training beat every checkpoint the trainer could choose.

        transformers picks the best model among the evaluations made *during* training only, so the first
        in-training evaluation becomes "best" even when it is worse than the starting point.
        """
        metric = getattr(args, "metric_for_best_model", None) or ""
        if "pluie" not in metric or getattr(state, "best_metric", None) is None:
            return
        key = metric if metric.startswith("eval_") else f"eval_{metric}"
        greater = getattr(args, "greater_is_better", True) is not False
        start = next((e for e in self.history if e["step"] == 0 and key in e["metrics"]), None)
        if start is None:
            return
        before, best = start["metrics"][key], state.best_metric
        if (before > best) if greater else (before < best):
            logger.warning(
                "PluieCallback: no checkpoint beat the starting point: %s was %.4f before training (step 0) and "
                "%.4f at the best checkpoint (step %s). transformers never compares the step-0 evaluation when "
                "choosing the best model, so load_best_model_at_end loaded step %s; compare with the untrained "
                "model before using it.",
                key, before, best, getattr(state, "best_global_step", "?"), getattr(state, "best_global_step", "?"),
            )

    def best_evaluation(self, metric: str = "eval_pluie_mean", greater_is_better: bool = True) -> dict[str, Any] | None:
        """The history entry (``step``, ``metrics``, ``table``) with the best ``metric``, the evaluation
        before training (step 0) included; ties go to the earliest step. ``None`` without history.

        Example:
            >>> callback = PluieCallback(judge, "para-fs", [{"prompt": "Paraphrase: The cat sleeps.", "source": "The cat sleeps."}],
            ...                          max_new_tokens=8)
            >>> callback.best_evaluation() is None  # no evaluation yet
            True
            >>> metrics = callback.evaluate(model, tokenizer)  # in training: at each evaluation
            >>> callback.best_evaluation()
            {'step': 0, 'metrics': {'eval_pluie_mean': ..., ...}, 'table': None}
        """
        entries = [e for e in self.history if metric in e["metrics"]]
        if not entries:
            return None
        sign = 1.0 if greater_is_better else -1.0
        return max(entries, key=lambda e: (sign * e["metrics"][metric], -e["step"]))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.every_n_steps is None or state.global_step % self.every_n_steps != 0:
            return
        trainer = self._find_trainer()
        model = trainer.accelerator.unwrap_model(trainer.model)
        trainer.log(self.evaluate(model, kwargs.get("processing_class"), args=args, state=state))

    # the work --------------------------------------------------------------------------------
    def generate_and_score(
        self, model: Any, tokenizer: Any = None, *, process_index: int = 0, num_processes: int = 1
    ) -> list[dict[str, Any]]:
        """Generate for this process's slice of the evaluation set and score it with the judge.

        Returns one record per item of the slice: ``index, prompt, generation, score, p_yes, verdict``
        (and ``p_calibrated`` when the judge has a calibration) and the template fields. The model's state is restored afterwards.

        Example:
            >>> eval_set = [{"prompt": [{"role": "user", "content": "Paraphrase: The cat sleeps."}], "source": "The cat sleeps."},
            ...             {"prompt": [{"role": "user", "content": "Paraphrase: Prices rose."}], "source": "Prices rose."}]
            >>> callback = PluieCallback(judge, "para-fs", eval_set, max_new_tokens=8)
            >>> records = callback.generate_and_score(model, tokenizer)
            >>> records[0]["generation"], records[0]["score"]
            ('...', ...)
        """
        tokenizer = self.tokenizer if self.tokenizer is not None else tokenizer
        if tokenizer is None:
            raise ValueError("PluieCallback needs the generator's tokenizer: pass tokenizer=... or a trainer processing_class.")
        per_process = math.ceil(len(self.items) / num_processes)
        start = process_index * per_process
        indices = list(range(start, min(start + per_process, len(self.items))))
        if not indices:
            return []
        items = [self.items[i] for i in indices]
        generations = generate_texts(model, tokenizer, [row[self.prompt_field] for row in items], batch_size=self.batch_size,
                                     max_prompt_length=self.max_prompt_length, **self.generation_kwargs,
                                     progress=f"PLUIE {self.metric_prefix}: generating" if self.progress else None)
        fields = self._fields(items)
        results = self.judge.score(self.template, details=True, threshold=self.threshold, **fields, **{self.hypothesis_field: generations})
        records = []
        for position, (index, generation, result) in enumerate(zip(indices, generations, results)):
            record = {"index": index, "prompt": items[position][self.prompt_field], "generation": generation}
            record.update({name: values[position] for name, values in fields.items()})
            record.update({"score": result["logratio"], "p_yes": result["p_yes"], "verdict": bool(result["verdict"])})
            if "p_calibrated" in result:  # a judge with a calibration
                record["p_calibrated"] = result["p_calibrated"]
            records.append(record)
        return records

    def evaluate(self, model: Any, tokenizer: Any = None, *, args: Any = None, state: Any = None) -> dict[str, float]:
        """Run one PLUIE evaluation: every process generates and scores its slice, the records are
        gathered, the main process writes the table; returns the metrics (same on every process).

        Example:
            >>> eval_set = [{"prompt": [{"role": "user", "content": "Paraphrase: The cat sleeps."}], "source": "The cat sleeps."},
            ...             {"prompt": [{"role": "user", "content": "Paraphrase: Prices rose."}], "source": "Prices rose."}]
            >>> callback = PluieCallback(judge, "para-fs", eval_set, max_new_tokens=8)
            >>> callback.evaluate(model, tokenizer)
            {'eval_pluie_mean': ..., 'eval_pluie_accept_rate': ..., 'eval_pluie_p10': ..., ...}
        """
        process_index = getattr(args, "process_index", 0) if args is not None else 0
        num_processes = getattr(args, "world_size", 1) if args is not None else 1
        records = self.generate_and_score(model, tokenizer, process_index=process_index, num_processes=num_processes)
        if num_processes > 1:
            from accelerate.utils import gather_object

            records = sorted(gather_object(records), key=lambda r: r["index"])
        scores = [r["score"] for r in records]
        if any(not math.isfinite(s) for s in scores):
            raise FloatingPointError("the judge returned a non-finite PLUIE score; check the judge's dtype and inputs.")
        metrics = summarize(scores, [r["verdict"] for r in records], self.quantiles, self.metric_prefix)
        if self.alarm is not None and records:
            metrics.update(self._watch(records, scores))
        step = getattr(state, "global_step", 0) if state is not None else 0
        entry: dict[str, Any] = {"step": step, "metrics": metrics, "table": None}
        if self.write_table and (state is None or state.is_world_process_zero):
            output_dir = getattr(args, "output_dir", None) if args is not None else None
            if output_dir:
                entry["table"] = str(self._write_jsonl(Path(output_dir), step, records))
            self._log_table(step, records)
        self.history.append(entry)
        return metrics

    def _watch(self, records: Sequence[Mapping[str, Any]], scores: Sequence[float]) -> dict[str, float]:
        """Feed the hack alarm this run's PLUIE and views; its metrics under ``<prefix>_alarm_*``."""
        columns = {k: [self.items[r["index"]].get(k) for r in records] for k in self.items[0] if k != self.prompt_field}
        generations = [r["generation"] for r in records]
        views = {name: view(completions=generations, **columns) for name, view in self.alarm_views.items()}
        found = self.alarm.update(scores, views)
        return {f"{self.metric_prefix}_{key.replace('/', '_')}": float(value) for key, value in found.items()}

    def _write_jsonl(self, output_dir: Path, step: int, records: Sequence[Mapping[str, Any]]) -> Path:
        path = output_dir / "pluie" / f"step-{step:06d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps({"step": step, **record}, ensure_ascii=False) + "\n")
        return path

    def _log_table(self, step: int, records: Sequence[Mapping[str, Any]]) -> None:
        """A wandb table when a wandb run is active (wandb is never imported here, only looked up)."""
        wandb = sys.modules.get("wandb")
        if wandb is None or getattr(wandb, "run", None) is None:
            return
        columns = ["step", "prompt", "generation", "score", "p_yes", "verdict"]
        rows = [
            [step, r["prompt"] if isinstance(r["prompt"], str) else json.dumps(r["prompt"], ensure_ascii=False),
             r["generation"], r["score"], r["p_yes"], r["verdict"]]
            for r in records
        ]
        wandb.run.log({f"{self.metric_prefix}_pluie_table": wandb.Table(columns=columns, data=rows)})
