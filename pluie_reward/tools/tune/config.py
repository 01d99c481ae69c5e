"""How a judge adapter is tuned: :class:`TuneConfig`, a dataclass in the style of PEFT's configs.

Example:
    >>> TuneConfig(epochs=2, lora_r=4).loss
    'auto'
    >>> TuneConfig(temperature=0)
    Traceback (most recent call last):
    ...
    ValueError: temperature must be a positive number, got 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from ..shared import check_number, comma_list

LOSSES = ("auto", "bce", "mse")


def modules_option(text: str) -> "str | list[str]":
    """``--target-modules``: ``all-linear``, or comma-separated module names.

    Example:
        >>> modules_option("all-linear"), modules_option("q_proj, v_proj")
        ('all-linear', ['q_proj', 'v_proj'])
    """
    return text.strip() if text.strip() == "all-linear" else comma_list()(text)


# the numeric fields: (what the value must be, whether a whole number, its test); each must be finite, not a bool
_RANGES: dict[str, tuple[str, bool, Callable[[Any], bool]]] = {
    **{name: ("a positive number", False, lambda v: v > 0) for name in ("temperature", "epochs", "learning_rate", "lora_alpha")},
    **{name: ("a positive integer", True, lambda v: v > 0)
       for name in ("batch_size", "gradient_accumulation_steps", "lora_r", "logging_steps")},
    **{name: ("a number >= 0", False, lambda v: v >= 0) for name in ("contrast_weight", "contrast_margin", "weight_decay")},
    **{name: ("a number with 0 <= x < 1", False, lambda v: 0 <= v < 1)
       for name in ("lora_dropout", "warmup_ratio", "heldout_fraction")},
    "label_weight": ("a number with 0 <= x <= 1", False, lambda v: 0 <= v <= 1),
    "max_steps": ("a positive integer or -1", True, lambda v: v >= 1 or v == -1),
    "seed": ("a whole number >= 0", True, lambda v: v >= 0),
}


@dataclass
class TuneConfig:
    """Hyper-parameters of :func:`~pluie_reward.tools.tune.tune` (loss, LoRA, optimisation, split).

    Losses (``loss="auto"``: ``"bce"``) on the judge's own PLUIE ``s = logit[yes] - logit[no]`` (:meth:`pluie_reward.Judge.score`):

    * labels ``y``: binary cross-entropy of ``sigmoid(s)`` against ``y``;
    * teacher log-ratios ``t``, ``"bce"``: ``T² · BCE(sigmoid(s / T), sigmoid(t / T))`` (soft targets
      ``p_yes`` of the teacher at temperature ``T``, Hinton et al.'s ``T²`` keeps gradients comparable);
      its minimum is at ``s = t`` for every ``T``; a large ``T`` approaches ``(s - t)² / 8``;
    * teacher log-ratios, ``"mse"``: ``(s - t)²``;
    * both labels and teacher: ``label_weight · label loss + (1 - label_weight) · teacher loss``;
    * items with a contrast item (``tune(..., contrast=...)``) add
      ``contrast_weight · softplus(contrast_margin - (s_contrast - s))``, a pairwise term on their gap.

    Example:
        >>> config = TuneConfig(loss="mse", epochs=3)
        >>> config.to_dict()["epochs"]
        3
    """

    loss: str = field(default="auto", metadata={
        "help": "auto (= bce), bce (sigmoid cross-entropy) or mse (on teacher log-ratios)", "choices": LOSSES})
    temperature: float = field(default=1.0, metadata={"help": "teacher temperature T of the bce loss on teacher p_yes"})
    label_weight: float = field(
        default=0.5, metadata={"help": "weight of the label loss when both labels and teacher targets are given (0..1)"}
    )
    contrast_weight: float = field(
        default=1.0, metadata={"help": "weight of the pairwise term on items given a contrast item (0: off)"}
    )
    contrast_margin: float = field(
        default=2.0, metadata={"help": "gap in nats the contrast item should outscore its item by"}
    )
    epochs: float = field(default=2.0, metadata={"help": "passes over the training pairs"})
    learning_rate: float = field(default=2e-4, metadata={"help": "AdamW learning rate of the LoRA weights", "aliases": ["--lr"]})
    batch_size: int = field(default=8, metadata={"help": "pairs per device and step"})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "steps accumulated before an update"})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay"})
    warmup_ratio: float = field(default=0.05, metadata={"help": "share of the steps with a linear learning-rate warm-up"})
    max_steps: int = field(default=-1, metadata={"help": "stop after this many updates (-1: epochs decide)"})
    lora_r: int = field(default=8, metadata={"help": "LoRA rank"})
    lora_alpha: float = field(default=16.0, metadata={"help": "LoRA scaling numerator (scale = alpha / r)"})
    lora_dropout: float = field(default=0.05, metadata={"help": "dropout on the LoRA input (training only)"})
    target_modules: "str | list[str]" = field(
        default="all-linear", metadata={"help": "modules that get LoRA weights: 'all-linear' or a list of names "
                                        "(command line: comma-separated, q_proj,v_proj)", "type": modules_option}
    )
    adapter_name: str = field(default="judge", metadata={"help": "the adapter's name on the model (and in placement)"})
    heldout_fraction: float = field(default=0.2, metadata={"help": "share of the pairs kept out of training for the report",
                                                           "aliases": ["--heldout"]})
    seed: int = field(default=0, metadata={"help": "seed of the split, the LoRA init and the data order"})
    bf16: "bool | None" = field(
        default=None, metadata={"help": "bfloat16 mixed precision (GPU only; None: on when the GPU supports it)"}
    )
    gradient_checkpointing: bool = field(default=False, metadata={"help": "recompute activations in backward (less memory)"})
    share_prefix: bool = field(
        default=True,
        metadata={"help": "run the prompt prefix every pair shares (the template's instructions) once per batch; "
                  "same result, fewer tokens (not with gradient checkpointing)"},
    )
    truncate: bool = field(default=True, metadata={"help": "cut over-long fields from the middle, as Judge.score does"})
    logging_steps: int = field(default=10, metadata={"help": "log the training loss every N updates"})
    progress: bool = field(default=True, metadata={"help": "show progress bars"})

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}.")
        for name, (what, integer, ok) in _RANGES.items():
            check_number(name, getattr(self, name), what, ok, int if integer else (int, float))
        if not isinstance(self.adapter_name, str) or not self.adapter_name.isidentifier():
            raise ValueError(f"adapter_name must be a Python identifier such as 'judge', got {self.adapter_name!r}.")
        modules = [self.target_modules] if isinstance(self.target_modules, str) else self.target_modules
        if not (isinstance(modules, (list, tuple)) and modules and all(isinstance(m, str) and m for m in modules)):
            raise ValueError(f"target_modules must be 'all-linear' or a non-empty list of module names, got {self.target_modules!r}.")
        if not isinstance(self.target_modules, str):
            self.target_modules = list(modules)
        if self.bf16 is not None and not isinstance(self.bf16, bool):
            raise ValueError(f"bf16 must be True, False or None (auto), got {self.bf16!r}.")

    def resolved_loss(self) -> str:
        """The loss actually used (``"auto"`` is ``"bce"``)."""
        return "bce" if self.loss == "auto" else self.loss

    def lora_config(self) -> Any:
        """The ``peft.LoraConfig`` of the adapter (a causal-LM LoRA on ``target_modules``)."""
        from peft import LoraConfig

        return LoraConfig(
            r=self.lora_r,
            lora_alpha=self.lora_alpha,
            lora_dropout=self.lora_dropout,
            target_modules=self.target_modules,
            bias="none",
            task_type="CAUSAL_LM",
        )

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (for the adapter's card)."""
        return asdict(self)
