"""pluie-reward: a frozen chat LLM as a cheap, interpretable judge (PLUIE) for text generators.

Example:
    >>> from pluie_reward import Judge
    >>> judge = Judge.load()  # doctest: +SKIP
    >>> judge.score("para-fs", source=["The cat sleeps."], hypothesis=["The cat is asleep."])  # doctest: +SKIP
"""

from .core.judge import Judge, sigmoid
from .core.prompt import AnswerTokenError, BoundTemplate
from .core.template import Template, builtin_template_names, load_template
from .engines.transformers.loading import load_trainable_embedded
from .integrations.rewards import AsyncPluieReward, NoveltyReward, PluieReward, novelty

__all__ = [
    "AnswerTokenError",
    "BoundTemplate",
    "Judge",
    "Template",
    "builtin_template_names",
    "load_template",
    "sigmoid",
    "PluieReward",
    "AsyncPluieReward",
    "NoveltyReward",
    "novelty",
    "load_trainable_embedded",
    "PluieCallback",
    "tune",
    "TuneConfig",
]


def __getattr__(name: str):
    """Heavy parts imported on first use: ``PluieCallback`` pulls in transformers' Trainer (seconds)."""
    if name == "PluieCallback":
        from .integrations.callbacks import PluieCallback

        return PluieCallback
    if name in ("tune", "TuneConfig"):  # tuning a judge adapter (pluie_reward.tools.tune)
        from .tools import tune as tuning

        return getattr(tuning, name)
    raise AttributeError(f"module 'pluie_reward' has no attribute {name!r}")


__version__ = "0.1.0"
