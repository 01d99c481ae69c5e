"""pluie-reward: a frozen chat LLM as a cheap, interpretable judge (PLUIE) for text generators.

Example:
    >>> from pluie_reward import Judge
    >>> judge = Judge.load()  # doctest: +SKIP
    >>> judge.score("para-fs", source=["The cat sleeps."], hypothesis=["The cat is asleep."])  # doctest: +SKIP
"""

from .judge import Judge, sigmoid
from .prompt import AnswerTokenError, BoundTemplate
from .template import Template, builtin_template_names, load_template
from .loading import load_trainable_embedded
from .placement import OffloadedJudge, SharedJudge
from .reward import NoveltyReward, PluieReward, novelty

__all__ = [
    "AnswerTokenError",
    "BoundTemplate",
    "Judge",
    "Template",
    "builtin_template_names",
    "load_template",
    "sigmoid",
    "PluieReward",
    "NoveltyReward",
    "novelty",
    "SharedJudge",
    "OffloadedJudge",
    "load_trainable_embedded",
]
__version__ = "0.1.0"
