"""Engines: what turns prompt token ids into answer log-probabilities (transformers, vLLM, remote)."""
