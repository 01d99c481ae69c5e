"""Tiny random chat models built locally, for tests and smoke runs (no download, seconds on CPU)."""

from __future__ import annotations

import math
import time
from typing import Any, Iterable

import torch

from .core.judge import Judge
from .engines.base import Engine, Request

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


def make_tiny_causal_lm(tokenizer: Any, seed: int = 0, layers: int = 2, hidden: int = 64, init_range: float = 0.3,
                        tie: bool = False) -> Any:
    """A random Llama-architecture causal LM sized to ``tokenizer``; ``init_range`` is large enough
    that Yes/No log-ratios vary by several nats between prompts (tests can tell them apart); ``tie``: its output
    embeddings are its input embeddings (as SmolLM2's).

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
        tie_word_embeddings=tie,
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
    tokenizer = make_tiny_tokenizer(chat=chat)
    return Judge.from_model(make_tiny_causal_lm(tokenizer, seed=seed), tokenizer, name="tiny-random", **judge_kwargs)


def make_slow_tiny_judge(seconds: float, min_requests: int, **kwargs: Any) -> Any:
    """:func:`make_tiny_judge` whose engine sleeps ``seconds`` before each call of at least
    ``min_requests`` requests: a long request that takes a known time whatever the machine's load
    (tests of servers under load). Its scores are those of :func:`make_tiny_judge`. Items
    found in the judge's result cache do not reach the engine, so they count for nothing.

    Args:
        seconds: the sleep before a long call (in the calling thread; a server's event loop goes on).
        min_requests: calls with fewer requests are not delayed.
        kwargs: :func:`make_tiny_judge`'s arguments.

    Example:
        >>> import time
        >>> judge = make_slow_tiny_judge(1.0, min_requests=2)
        >>> start = time.perf_counter(); short = judge.score("para-fs", source=["a"], hypothesis=["b"]); time.perf_counter() - start < 1.0
        True
        >>> short == make_tiny_judge().score("para-fs", source=["a"], hypothesis=["b"])
        True
        >>> start = time.perf_counter(); _ = judge.score("para-fs", source=["c", "e"], hypothesis=["d", "f"])
        >>> time.perf_counter() - start >= 1.0
        True
    """
    judge = make_tiny_judge(**kwargs)
    answer_logprobs = judge.engine.answer_logprobs

    def slow(requests: Any, answers: Any, **options: Any) -> Any:
        if len(requests) >= min_requests:
            time.sleep(seconds)
        return answer_logprobs(requests, answers, **options)

    judge.engine.answer_logprobs = slow
    return judge


def reference_logprobs(model: Any, ids: "list[int]", answers: "list[tuple[int, ...]]") -> list[float]:
    """``log p(answer | ids)`` by one plain forward pass of a transformers causal LM per answer (no
    cache, no batching): the independent reference :func:`check_engine` compares engines with."""
    values = []
    with torch.no_grad():
        for answer in answers:
            full = torch.tensor([list(ids) + list(answer)], device=model.device)
            logprobs = torch.log_softmax(model(full).logits[0].float(), dim=-1)
            values.append(sum(float(logprobs[len(ids) - 1 + t, token]) for t, token in enumerate(answer)))
    return values


def check_engine(engine: Any, reference: Any, *, atol: float = 1e-3, multi_token: bool = True) -> None:
    """The engine conformance suite: every :class:`~pluie_reward.engines.base.Engine` passes it.

    Checks the contract of :mod:`pluie_reward.engines.base` against ``reference``, a transformers
    causal LM with the same weights read independently (:func:`reference_logprobs`, greedy
    ``generate``): log-probabilities (up to a per-request constant for one-token answers, exact for
    multi-token ones), independence from batching, order, groups and the prefix hint, the async twins,
    greedy generation with stop ids, a hashable session state, ``clear`` and the declared attributes.

    Args:
        engine: the engine under test (not closed here).
        reference: the transformers model holding the engine's weights.
        atol: the tolerance on log-probabilities.
        multi_token: also check a two-token answer (engines whose values are logits refuse them).

    Raises:
        AssertionError: the first broken part of the contract.
    """
    import asyncio

    assert isinstance(engine, Engine), f"{type(engine).__name__} does not subclass Engine"
    assert isinstance(engine.name, str) and engine.name
    assert engine.max_length is None or (isinstance(engine.max_length, int) and engine.max_length > 0)
    assert isinstance(engine.concurrent, bool) and isinstance(engine.batch_tokens, int)
    tokenizer = engine.tokenizer
    texts = ["The cat sleeps on the mat. Is it a cat?", "Prices rose in May.", "Prices rose in May, and then fell again."]
    prompts = [tuple(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]
    yes, no = (tuple(tokenizer(w, add_special_tokens=False)["input_ids"][-1:]) for w in (" yes", " no"))
    answers = [yes, no]

    def close(got: list[list[float]], want: list[list[float]], one_token: bool, what: str) -> None:
        for g, w in zip(got, want, strict=True):
            if one_token:  # only differences between answers are defined
                g, w = [x - g[0] for x in g], [x - w[0] for x in w]
            assert all(abs(a - b) <= atol for a, b in zip(g, w, strict=True)), f"{what}: {g} != {w}"

    requests = [Request(p, group=("g" if i else None)) for i, p in enumerate(prompts)]
    with engine.session() as state:
        hash(state)
        got = engine.answer_logprobs(requests, answers, prefix=prompts[1][:2])
    want = [reference_logprobs(reference, list(p), answers) for p in prompts]
    assert all(math.isfinite(x) for row in got for x in row)
    close(got, want, True, "one-token answers")
    with engine.session():
        one_by_one = [engine.answer_logprobs([r], answers)[0] for r in requests]
        reversed_ = engine.answer_logprobs(list(reversed(requests)), answers)[::-1]
    close(one_by_one, got, True, "one request per call")
    close(reversed_, got, True, "requests in reverse order")

    async def both() -> tuple[list[list[float]], list[list[int]]]:
        with engine.session():
            values = await engine.aanswer_logprobs(requests, answers)
            tokens = await engine.agenerate([prompts[0]], max_new_tokens=3)
        return values, tokens

    async_values, async_tokens = asyncio.run(both())
    close(async_values, got, True, "aanswer_logprobs")
    if multi_token:
        pair = [tuple(tokenizer(" yes indeed", add_special_tokens=False)["input_ids"][-2:]), no]
        with engine.session():
            got_multi = engine.answer_logprobs(requests[:2], pair)
        close(got_multi, [reference_logprobs(reference, list(p), pair) for p in prompts[:2]], False, "multi-token answers")
    with torch.no_grad():
        greedy = reference.generate(torch.tensor([list(prompts[0])], device=reference.device), max_new_tokens=3, do_sample=False,
                                    pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0)
    expected = greedy[0, len(prompts[0]):].tolist()
    with engine.session():
        generated = engine.generate([prompts[0]], max_new_tokens=3)
        stopped = engine.generate([prompts[0]], max_new_tokens=3, stop_ids=[expected[0]])
    assert generated == [expected] and async_tokens == [expected], (generated, async_tokens, expected)
    assert stopped == [expected[:1]], stopped
    engine.clear()
    with engine.session():
        again = engine.answer_logprobs(requests, answers)
    close(again, got, True, "after clear()")
