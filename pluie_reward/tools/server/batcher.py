"""Moved to :mod:`pluie_reward.integrations.batching` (the OpenRLHF in-process reward uses it too);
this name keeps older imports working."""

from ...integrations.batching import Batcher, Direct, ScoringError, ShuttingDown  # noqa: F401
