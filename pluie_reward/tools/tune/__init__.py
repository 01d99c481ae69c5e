"""Tune a small judge: a LoRA adapter trained so that the judge's own PLUIE score follows binary
labels or a bigger judge's log-ratios, read afterwards with the same template, the same single
forward pass and the same threshold 0 (``Judge.load(base, adapter=folder)``,
``Judge.from_peft(policy, tokenizer, adapter_name="judge")``).

Heavy dependencies (transformers' Trainer, peft) are imported when used.

Example:
    >>> from pluie_reward.tools.tune import TuneConfig
    >>> TuneConfig(epochs=1).adapter_name
    'judge'
"""

from .config import TuneConfig
from .data import PairData, teacher_targets


def __getattr__(name: str):
    if name in {"tune", "TuneResult", "save_adapter", "template_to_dict"}:
        from . import run  # lazy: package exports (run loads torch and transformers' Trainer)

        return getattr(run, name)
    raise AttributeError(f"module 'pluie_reward.tools.tune' has no attribute {name!r}")


__all__ = ["PairData", "TuneConfig", "TuneResult", "teacher_targets", "tune", "save_adapter", "template_to_dict"]
