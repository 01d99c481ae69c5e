"""The verifiers judge plugin ``pluie-reward-verifiers``: verifiers imports a plugin by its id as a top-level module
and takes the one ``Judge`` subclass of its ``__all__`` (``pluie_reward.serving.verifiers_judge`` holds it)."""

from pluie_reward.serving.verifiers_judge import PluieJudge, PluieJudgeConfig

__all__ = ["PluieJudge", "PluieJudgeConfig"]
