"""Moved to :mod:`pluie_reward.integrations.reward_mapping` (the OpenRLHF in-process reward uses it
too); this name keeps older imports working."""

from ...integrations.reward_mapping import DEFAULT_STRIP, REWARDS, SOURCES, RewardMapping  # noqa: F401
