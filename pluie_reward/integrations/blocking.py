"""Dynamic Blocking: a teacher that cannot simply copy its source, for sampling distillation data.

Dynamic Blocking (Niu et al., "Unsupervised Paraphrasing with Pretrained Language Models", EMNLP 2021): while a
model decodes, whenever it has just emitted a token that occurs in the source, the token that follows it in the
source is blocked for the next step, so the output must leave the source's surface form. Each source bigram
``(s_i, s_i+1)`` is an entry of the block dictionary; every generated row draws its active entries once, each with
``probability`` (from a seeded :class:`torch.Generator`, so runs repeat and rows sampled from the same source
differ). :class:`DynamicBlocking` is a :class:`transformers.LogitsProcessor`, for any ``generate`` call; it is meant
for sampling a teacher's candidates (the student then decodes without it, as in the paper).

Example:
    >>> from transformers import LogitsProcessorList
    >>> source = "The cat sleeps on the mat."
    >>> blocking = DynamicBlocking.from_texts(tokenizer, [source], probability=0.5, seed=0)  # one source per prompt
    >>> ids = tokenizer(f"Paraphrase: {source}", return_tensors="pt").input_ids
    >>> out = model.generate(ids, logits_processor=LogitsProcessorList([blocking]), do_sample=True, max_new_tokens=8)
    >>> out.shape[0]
    1
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from transformers import LogitsProcessor

__all__ = ["DynamicBlocking", "surface_forms"]


def surface_forms(tokenizer: Any, token_id: int) -> set[int]:
    """The token and its single-token surface variants (with and without a leading space, first letter upper or
    lower case), as the paper blocks them: a source's "cat" also blocks " cat", "Cat" and " Cat" where the
    vocabulary has them.

    Args:
        tokenizer: a Hugging Face tokenizer.
        token_id: a token of a source.

    Returns:
        The ids (``token_id`` among them).

    Example:
        >>> from pluie_reward.testing import make_tiny_tokenizer
        >>> tok = make_tiny_tokenizer()
        >>> sorted(tok.decode([i]) for i in surface_forms(tok, tok.encode(" the", add_special_tokens=False)[0]))  # no "the" token
        [' The', ' the', 'The']
    """
    word = tokenizer.decode([token_id]).strip()
    forms = {token_id}
    if not word:
        return forms
    for cased in {word, word[0].upper() + word[1:], word[0].lower() + word[1:]}:
        for text in (cased, " " + cased):
            ids = tokenizer.encode(text, add_special_tokens=False)
            if len(ids) == 1:
                forms.add(ids[0])
    return forms


class DynamicBlocking(LogitsProcessor):
    """Blocks, at each step, the source tokens that follow the token a row has just emitted (Dynamic Blocking).

    Row ``r`` of a ``generate`` batch reads source ``r // (rows / len(sources))`` (``num_return_sequences``
    and beams repeat each prompt's row, as ``generate`` does); a row whose source is None or empty is left
    unchanged. Only generated tokens trigger blocking, never the prompt's. A processor follows one ``generate``
    call: a call whose ids are not one token longer than the last (or another batch size) starts a new
    generation, with freshly drawn active entries.

    Args:
        sources: one source per prompt: its token ids (as the model's tokenizer writes the source alone), or None.
        probability: the chance that each source bigram is active for a row (the paper samples the block
            dictionary; 1: every bigram is blocked, 0: nothing is).
        seed: an int or a :class:`torch.Generator` drawing the active entries (default 0: runs repeat).
        forms: token id -> the ids blocked with it and matched with it (:func:`surface_forms`; default: itself).

    Example:
        >>> blocking = DynamicBlocking([[5, 6, 7], None], probability=1.0)
        >>> scores = blocking(torch.tensor([[1, 2], [1, 2]]), torch.zeros(2, 10))  # the prompt: nothing emitted yet
        >>> scores = blocking(torch.tensor([[1, 2, 6], [1, 2, 6]]), torch.zeros(2, 10))  # both rows emitted 6
        >>> [int(i) for i in torch.isinf(scores[0]).nonzero()], bool(torch.isinf(scores[1]).any())
        ([7], False)
    """

    def __init__(self, sources: Sequence[Sequence[int] | None], probability: float = 0.5,
                 seed: "int | torch.Generator" = 0, forms: "dict[int, set[int]] | None" = None) -> None:
        if isinstance(probability, bool) or not isinstance(probability, (int, float)) or not 0 <= probability <= 1:
            raise ValueError(f"probability must be a number in [0, 1], got {probability!r}.")
        if isinstance(sources, (str, bytes)) or not len(sources):
            raise ValueError("sources must be a non-empty list: one source's token ids (or None) per prompt.")
        forms = forms or {}
        self.probability = float(probability)
        self.generator = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(int(seed))
        # per source, its distinct bigrams as (the ids that trigger, the ids then blocked)
        self.bigrams: list[list[tuple[frozenset[int], frozenset[int]]]] = []
        for i, ids in enumerate(sources):
            ids = [] if ids is None else [int(t) for t in ids]
            if any(t < 0 for t in ids):
                raise ValueError(f"source {i}: token ids must be >= 0, got {ids}.")
            pairs = dict.fromkeys(zip(ids, ids[1:]))  # distinct, in order
            self.bigrams.append([(frozenset(forms.get(a, {a})), frozenset(forms.get(b, {b}))) for a, b in pairs])
        self._length = -1
        self._rows = -1
        self._start = 0
        self._active: list[dict[int, set[int]]] = []

    @classmethod
    def from_texts(cls, tokenizer: Any, sources: Sequence[str | None], probability: float = 0.5,
                   seed: "int | torch.Generator" = 0, surface: bool = True) -> "DynamicBlocking":
        """A processor for source texts, tokenised alone (no special tokens); with ``surface``, each token also
        blocks and matches its :func:`surface_forms`.

        Args:
            tokenizer: the generating model's tokenizer.
            sources: one source text (or None) per prompt.
            probability: see :class:`DynamicBlocking`.
            seed: see :class:`DynamicBlocking`.
            surface: block surface variants too (the paper's choice).

        Returns:
            The processor.

        Example:
            >>> from pluie_reward.testing import make_tiny_tokenizer
            >>> blocking = DynamicBlocking.from_texts(make_tiny_tokenizer(), ["The cat sleeps.", None], probability=1.0)
            >>> len(blocking.bigrams[0]) > 0, blocking.bigrams[1]
            (True, [])
        """
        if isinstance(sources, str):
            raise ValueError("sources must be a list of texts (one per prompt), not one string.")
        ids = [None if s is None else tokenizer.encode(s, add_special_tokens=False) for s in sources]
        forms: dict[int, set[int]] = {}
        if surface:
            for t in {t for row in ids if row for t in row}:
                forms[t] = surface_forms(tokenizer, t)
        return cls(ids, probability, seed, forms)

    def _draw(self, rows: int) -> None:
        """Each row's active entries: trigger id -> the ids it blocks."""
        if rows % len(self.bigrams):
            raise ValueError(f"generate gave {rows} rows for {len(self.bigrams)} sources; pass one source per prompt "
                             "(num_return_sequences and beams repeat each prompt's row).")
        repeat = rows // len(self.bigrams)
        self._active = []
        for row in range(rows):
            bigrams = self.bigrams[row // repeat]
            keep = (torch.rand(len(bigrams), generator=self.generator) < self.probability).tolist() if bigrams else []
            active: dict[int, set[int]] = {}
            for (triggers, blocked), on in zip(bigrams, keep):
                for t in triggers if on else ():
                    active.setdefault(t, set()).update(blocked)
            self._active.append(active)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.Tensor) -> torch.Tensor:
        """The scores with each row's blocked ids at ``-inf``.

        Args:
            input_ids: ``(rows, length)``: the prompt and the tokens generated so far.
            scores: ``(rows, vocabulary)``: the next token's scores.

        Returns:
            The scores (a new tensor where something is blocked; ``scores`` itself otherwise).
        """
        rows, length = input_ids.shape
        if rows != self._rows or length != self._length + 1:  # a new generate call: the prompt ends here
            self._rows, self._start = rows, length
            self._draw(rows)
        self._length = length
        if length == self._start:  # nothing emitted yet
            return scores
        last = input_ids[:, -1].tolist()
        size = scores.shape[-1]
        hits = [(row, t) for row, token in enumerate(last) for t in self._active[row].get(token, ()) if t < size]
        if not hits:
            return scores
        mask = torch.zeros_like(scores, dtype=torch.bool)
        index = torch.tensor(hits, device=scores.device)
        mask[index[:, 0], index[:, 1]] = True
        return scores.masked_fill(mask, -math.inf)
