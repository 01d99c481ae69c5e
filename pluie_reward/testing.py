"""Tiny random chat models built locally, for tests and smoke runs (no download, seconds on CPU)."""

from __future__ import annotations

from typing import Any, Iterable

import torch

from .engines.transformers.compat import checkpointing_on, enable_checkpointing  # noqa: F401  (re-exported for tests)

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIAL_TOKENS = ["<pad>", "<|im_start|>", "<|im_end|>"]

_BASE_CORPUS = [
    "Yes No yes no Yes. No. oui non Oui Non",
    "oui non oui non oui non. Tu vas recevoir deux phrases, A et B.",
    "Yes", "No", "yes", "no", "oui", "non",
    "You will receive two sentences A and B. Do these two sentences mean the same thing?",
    'Answer with only one word "yes" or "no". Please provide the sentences for me to evaluate.',
    "The cat sleeps on the mat. A cat is sleeping. The dog barks at night. Paraphrase this sentence.",
    "user assistant system the a of and to in is was that for on with as by",
]


def make_tiny_tokenizer(chat: bool = True, corpus: Iterable[str] = (), vocab_size: int = 1500) -> Any:
    """A byte-level BPE tokenizer trained in memory, with a ChatML chat template when ``chat``.

    "Yes", "No", "oui" and "non" are single tokens after the generation prompt.

    Example:
        >>> tok = make_tiny_tokenizer()
        >>> tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
        '<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator([*_BASE_CORPUS * 50, *corpus], trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", eos_token="<|im_end|>", bos_token="<|im_start|>"
    )
    tokenizer.chat_template = CHATML if chat else None
    return tokenizer


def make_tiny_causal_lm(tokenizer: Any, seed: int = 0, layers: int = 2, hidden: int = 64, init_range: float = 0.3) -> Any:
    """A random Llama-architecture causal LM sized to ``tokenizer``; ``init_range`` is large enough
    that Yes/No log-ratios vary by several nats between prompts (tests can tell them apart).

    Example:
        >>> model = make_tiny_causal_lm(make_tiny_tokenizer())
        >>> model.config.num_hidden_layers
        2
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        initializer_range=init_range,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def make_tiny_judge(chat: bool = True, seed: int = 0, **judge_kwargs: Any) -> Any:
    """A :class:`~pluie_reward.Judge` over a tiny random model and tokenizer.

    Example:
        >>> judge = make_tiny_judge()
        >>> len(judge.score("para-fs", source=["a"], hypothesis=["b"]))
        1
    """
    from .core.judge import Judge

    tokenizer = make_tiny_tokenizer(chat=chat)
    return Judge.from_model(make_tiny_causal_lm(tokenizer, seed=seed), tokenizer, name="tiny-random", **judge_kwargs)



