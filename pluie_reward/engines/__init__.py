"""Engines: what turns prompt token ids into answer log-probabilities (transformers, vLLM, remote),
each registered by name in :mod:`pluie_reward.engines.registry`."""
