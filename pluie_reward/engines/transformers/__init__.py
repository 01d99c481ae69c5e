"""The transformers engine: batched, prefix-cached forward passes of a causal LM in this process."""
