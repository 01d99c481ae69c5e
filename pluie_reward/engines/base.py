"""The engine protocol: what :class:`~pluie_reward.Judge` asks of the thing that runs the model.

:meth:`Judge.score <pluie_reward.Judge.score>` owns everything about a template -- rendering,
answer-token validation, field checks, truncation, the result cache, details and thresholds. An
engine only turns prompt token ids into the log-probabilities of the template's answers, like
lm-eval's ``LM.loglikelihood`` contract: given ``(context, continuation)`` token ids, return
``log p(continuation | context)``.

Contract of :meth:`Engine.answer_logprobs`:

* ``requests[i].ids`` is a complete prompt, token ids exactly as the model reads them (BOS and
  chat markup included), ending where the answer starts. Engines never re-tokenize.
* ``answers`` is the list of the template's N >= 2 answers, each a non-empty tuple of token ids,
  the same for every request of the call.
* The result is one list of N floats per request, in request order: ``log p(answer_k | ids)``
  (teacher-forced sum over the answer's tokens). When every answer is a single token, an engine
  may return values that differ from the log-probabilities by a constant shared by the N answers
  of one request (e.g. raw logits): the judge only uses differences and the softmax over the N
  answers. When any answer has several tokens the values must be exact log-probabilities.
* Results must not depend on batching, ordering, padding or caching beyond floating-point noise,
  and must be finite (the judge raises on non-finite values).
* ``prefix`` (optional) is a token prefix most requests share (the template's instructions and
  few-shot turns); ``Request.group`` marks requests that share a longer prefix (one source, many
  hypotheses). Both are hints for caching; ignoring them must not change results.

:meth:`Engine.session` is entered around each scoring call (the judge serialises calls): it yields
a hashable *state* that changes whenever results for the same ids may change (the model's weights
changed); the judge keys its result cache on it. :meth:`Engine.generate` is greedy decoding, used
by templates with a judge-generated turn.

Example:
    >>> class Constant:
    ...     name, tokenizer, max_length = "constant", None, None
    ...     def session(self): return contextlib.nullcontext(0)
    ...     def answer_logprobs(self, requests, answers, *, prefix=()):
    ...         return [[-0.5] * len(answers) for _ in requests]
    ...     def generate(self, prompts, *, max_new_tokens, stop_ids=()): return [[] for _ in prompts]
    >>> isinstance(Constant(), Engine)
    True
"""

from __future__ import annotations

import contextlib  # noqa: F401  (used by the doctest)
from dataclasses import dataclass
from typing import Any, ContextManager, Hashable, Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class Request:
    """One prompt to read the answers after.

    Args:
        ids: the prompt's token ids, ending where the answer starts.
        group: requests with equal (non-None) groups differ only after a long shared prefix.
    """

    ids: tuple[int, ...]
    group: Hashable | None = None


@runtime_checkable
class Engine(Protocol):
    """Runs a causal LM for a :class:`~pluie_reward.Judge` (see the module docstring for the contract).

    Attributes:
        name: a short description for reprs and logs.
        tokenizer: the tokenizer whose ids the engine reads (the judge renders with it).
        max_length: the context length in tokens, or ``None`` if unknown.
    """

    name: str
    tokenizer: Any
    max_length: int | None

    def session(self) -> ContextManager[Hashable]:
        """Context entered around one scoring call; yields the state results depend on."""
        ...

    def answer_logprobs(
        self, requests: Sequence[Request], answers: Sequence[Sequence[int]], *, prefix: Sequence[int] = ()
    ) -> list[list[float]]:
        """``log p(answer_k | request.ids)`` for every request and answer (see the contract)."""
        ...

    def generate(self, prompts: Sequence[Sequence[int]], *, max_new_tokens: int, stop_ids: Sequence[int] = ()) -> list[list[int]]:
        """Greedy continuation ids of each prompt, at most ``max_new_tokens``, cut after a stop id."""
        ...
