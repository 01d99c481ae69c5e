"""Training a judge adapter with transformers' ``Trainer``, whose ``compute_loss`` (the documented hook for custom
losses) reads the PLUIE score of the prompt (:func:`~pluie_reward.tools.tune.loss.pluie_scores`), not next-token labels.
"""

from __future__ import annotations

import tempfile
from typing import Any

import torch
import torch.nn.functional as F
from transformers import Trainer, TrainingArguments

from ...engines.transformers.compat import training_arguments as checkpointing_arguments
from ...engines.transformers.engine import longest_common_prefix
from .config import TuneConfig
from .data import CONTRAST, LABEL, TARGET, PairCollator
from .loss import contrast_loss, pluie_scores, tune_loss


class JudgeTuneTrainer(Trainer):
    """A ``Trainer`` whose loss is :func:`~pluie_reward.tools.tune.loss.tune_loss` on the judge's score.

    Args:
        answer_ids: the template's ``(yes, no)`` token ids.
        tune_config: the loss settings (``loss``, ``temperature``, ``label_weight``).
        args, kwargs: as for ``transformers.Trainer``.

    Example:
        >>> from pluie_reward.tools.tune.data import PairData, encode
        >>> bound = judge.bind("para-direct")
        >>> ds = encode(bound, PairData.build(bound.template, {"source": ["The cat sleeps."], "hypothesis": ["A cat is asleep."]},
        ...                                   labels=[True]))
        >>> args = training_arguments(TuneConfig(), "out", has_eval=False, label_key="pluie_label")
        >>> trainer = JudgeTuneTrainer(model=peft_model, args=args, train_dataset=ds, data_collator=PairCollator(0),
        ...                            answer_ids=tuple(a[0] for a in bound.answer_ids), tune_config=TuneConfig())
    """

    loss_is_scaled_for_ga = False  # compute_loss returns a per-batch mean: Trainer divides it by the accumulation steps

    def __init__(
        self, *args: Any, answer_ids: tuple[int, int], tune_config: TuneConfig, shared_prefix: int = 0, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.answer_ids = answer_ids
        self.tune_config = tune_config
        self.shared_prefix = shared_prefix

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None) -> Any:
        shared = 0 if isinstance(model, torch.nn.DataParallel) else self.shared_prefix
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        contrasted = "contrast_rows" in inputs and bool(self.tune_config.contrast_weight)
        if contrasted:  # one forward for the items and their contrasts: the shared prefix runs once
            ids, mask = stack_right_padded((ids, mask), (inputs["contrast_input_ids"], inputs["contrast_attention_mask"]))
        every = pluie_scores(model, ids, mask, self.answer_ids, shared_prefix=shared)
        items = inputs["input_ids"].shape[0]
        scores = every[:items]
        config = self.tune_config
        loss = tune_loss(scores, inputs.get(LABEL), inputs.get(TARGET), loss=config.resolved_loss(),
                         temperature=config.temperature, label_weight=config.label_weight)
        if contrasted:
            loss = loss + config.contrast_weight * contrast_loss(scores[inputs["contrast_rows"]], every[items:], config.contrast_margin)
        return (loss, {"scores": scores.detach()}) if return_outputs else loss


def stack_right_padded(*batches: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)`` batches of right-padded rows stacked into one, padded to the widest with id 0 and mask 0.

    Example:
        >>> ids, mask = stack_right_padded((torch.tensor([[5, 6]]), torch.tensor([[1, 1]])),
        ...                                (torch.tensor([[7, 8, 9]]), torch.tensor([[1, 1, 1]])))
        >>> ids.tolist(), mask.tolist()
        ([[5, 6, 0], [7, 8, 9]], [[1, 1, 0], [1, 1, 1]])
    """
    width = max(ids.shape[1] for ids, _ in batches)
    return tuple(torch.cat([F.pad(t, (0, width - t.shape[1])) for t in column]) for column in zip(*batches))  # ids, mask


def resolve_bf16(config: TuneConfig) -> bool:
    """bf16 mixed precision: on a GPU that supports it when ``config.bf16`` is None; never on CPU.

    Example:
        >>> resolve_bf16(TuneConfig(bf16=False))
        False
    """
    available = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if config.bf16 is None:
        return available
    if config.bf16 and not available:
        raise ValueError("bf16=True needs a CUDA GPU with bfloat16 support; on CPU leave bf16 unset (float32).")
    return config.bf16


def training_arguments(config: TuneConfig, output_dir: str, has_eval: bool, label_key: str) -> TrainingArguments:
    """The ``TrainingArguments`` a :class:`TuneConfig` stands for (nothing saved by the Trainer itself)."""
    return TrainingArguments(
        output_dir=output_dir,
        num_train_epochs=config.epochs,
        max_steps=config.max_steps,
        learning_rate=config.learning_rate,
        per_device_train_batch_size=config.batch_size,
        per_device_eval_batch_size=config.batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        weight_decay=config.weight_decay,
        warmup_steps=float(config.warmup_ratio),  # a float in [0, 1) is a ratio of the steps (transformers 5)
        lr_scheduler_type="linear",
        logging_strategy="steps",
        logging_steps=config.logging_steps,
        eval_strategy="epoch" if has_eval else "no",
        save_strategy="no",
        report_to="none",
        seed=config.seed,
        bf16=resolve_bf16(config),
        **checkpointing_arguments(config.gradient_checkpointing),
        remove_unused_columns=False,  # the collator needs the supervision columns
        label_names=[label_key],
        disable_tqdm=not config.progress,
        dataloader_num_workers=0,
        dataloader_pin_memory=torch.cuda.is_available(),
    )


def train_adapter(
    model: Any, train_dataset: Any, eval_dataset: Any, answer_ids: tuple[int, int], config: TuneConfig, pad_id: int
) -> list[dict[str, Any]]:
    """Train the active (trainable) PEFT adapter of ``model``; returns the Trainer's log history.

    Example:
        >>> from pluie_reward.tools.tune.data import PairData, encode
        >>> bound = judge.bind("para-direct")
        >>> data = PairData.build(bound.template, {"source": ["The cat sleeps.", "Prices rose."],
        ...                                        "hypothesis": ["A cat is asleep.", "Prices fell."]}, labels=[True, False])
        >>> train_ds = heldout_ds = encode(bound, data)
        >>> yes_no = tuple(a[0] for a in bound.answer_ids)
        >>> history = train_adapter(peft_model, train_ds, heldout_ds, yes_no, TuneConfig(epochs=1, progress=False), pad_id=0)
        {'eval_loss': ..., 'epoch': '1'}
        {'train_runtime': ..., 'epoch': '1'}
        >>> history[-1]["step"], "train_loss" in history[-1]  # one update on 2 pairs
        (1, True)
    """
    label_key = LABEL if LABEL in train_dataset.column_names else TARGET
    shared = 0
    if config.share_prefix and not config.gradient_checkpointing:
        rows = [list(r) for ds in (train_dataset, eval_dataset) if ds is not None
                for column in ("input_ids", CONTRAST) if column in ds.column_names for r in ds[column] if len(r)]
        shared = min(longest_common_prefix(rows), min(len(r) for r in rows) - 1)
    with tempfile.TemporaryDirectory(prefix="pluie-tune-") as scratch:
        trainer = JudgeTuneTrainer(
            model=model,
            args=training_arguments(config, scratch, eval_dataset is not None, label_key),
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            data_collator=PairCollator(pad_id),
            answer_ids=answer_ids,
            tune_config=config,
            shared_prefix=shared,
        )
        trainer.train()
        return list(trainer.state.log_history)
