"""A template bound to a tokenizer: prompt rendering, answer-token validation and truncation."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .template import Template

_SENTINEL = "\ue000{}\ue001"  # private-use characters: no chat template touches them


class AnswerTokenError(ValueError):
    """An answer word is not exactly one token where the model would produce it."""


@dataclass
class EncodedItem:
    """The token ids of one rendered prompt and the key that identifies it in caches."""

    ids: list[int]
    text: str
    group: tuple


class BoundTemplate:
    """A :class:`Template` rendered with one tokenizer.

    It renders items with the tokenizer's chat template and the generation prompt (so the answer
    token comes next), or with the template's plain-text form when the tokenizer has no chat
    template; it validates the answer words as single tokens, finds the static prefix (everything
    before the first field) and truncates over-long fields from the middle.

    Example:
        >>> bound = BoundTemplate(load_template("para-fs"), tokenizer, max_length=8192)  # doctest: +SKIP
        >>> bound.answer_ids                                                              # doctest: +SKIP
        ([10539], [5230])
    """

    def __init__(
        self,
        template: Template,
        tokenizer: Any,
        max_length: int | None = None,
        allow_multi_token: bool = False,
    ) -> None:
        self.template = template
        self.tokenizer = tokenizer
        self.use_chat = getattr(tokenizer, "chat_template", None) is not None
        self.answer_prefix = "" if self.use_chat else template.plain({f: "x" for f in template.all_fields})[1]
        self.max_length = max_length
        self.answer_ids = self._validate_answers(allow_multi_token)
        self.prefix_ids = self._static_prefix_ids()

    # rendering -----------------------------------------------------------------------------
    def render(self, values: Mapping[str, str | None]) -> str:
        """The prompt text for one item, ending where the answer token would come."""
        if self.use_chat:
            return self.tokenizer.apply_chat_template(
                self.template.chat(values), tokenize=False, add_generation_prompt=True
            )
        return self.template.plain(values)[0]

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids of rendered prompts (a chat rendering already holds its special tokens)."""
        if not texts:
            return []
        return list(self.tokenizer(list(texts), add_special_tokens=not self.use_chat)["input_ids"])

    def _sentinel_values(self, optional: bool = True) -> dict[str, str | None]:
        values: dict[str, str | None] = {f: _SENTINEL.format(f) for f in self.template.fields}
        for f in self.template.optional_fields:
            values[f] = _SENTINEL.format(f) if optional else None
        return values

    # answers -------------------------------------------------------------------------------
    def _validate_answers(self, allow_multi_token: bool) -> tuple[list[int], list[int]]:
        prompt = self.render({f: "x" for f in self.template.fields})
        prompt_ids = self.encode([prompt])[0]
        found = []
        for word in self.template.answers:
            full = self.encode([prompt + self.answer_prefix + word])[0]
            if full[: len(prompt_ids)] != prompt_ids:
                raise AnswerTokenError(
                    f"template {self.template.name!r}: answer {word!r} merges with the end of the prompt when "
                    f"tokenized ({self._show(full[len(prompt_ids) - 2 :])}); the score would not be "
                    "p(answer | prompt). Use a template whose prompt ends on a token boundary."
                )
            answer = full[len(prompt_ids) :]
            if len(answer) != 1 and not allow_multi_token:
                raise AnswerTokenError(
                    f"template {self.template.name!r}: answer {word!r} is {len(answer)} tokens for this tokenizer "
                    f"where the model would produce it ({self._show(answer)}); PLUIE reads one token per "
                    "answer. Choose a judge whose tokenizer has it as one token, change the template's answers, "
                    "or pass allow_multi_token=True for the seeds' eq. 4 (sums the answer's token "
                    "log-probabilities; biased towards the shorter answer)."
                )
            found.append(answer)
        if found[0] == found[1]:
            raise AnswerTokenError(
                f"template {self.template.name!r}: both answers tokenize to {self._show(found[0])}."
            )
        return found[0], found[1]

    def _show(self, ids: Sequence[int]) -> str:
        pieces = self.tokenizer.convert_ids_to_tokens(list(ids))
        return ", ".join(f"{i}={p!r}" for i, p in zip(ids, pieces))

    @property
    def single_token(self) -> bool:
        """Whether both answers are one token each (one forward pass per item)."""
        return len(self.answer_ids[0]) == 1 and len(self.answer_ids[1]) == 1

    # prefix --------------------------------------------------------------------------------
    def _static_prefix_ids(self) -> list[int]:
        text = self.render(self._sentinel_values())
        cut = min(text.find(_SENTINEL.format(f)) for f in self.template.all_fields if _SENTINEL.format(f) in text)
        ids = self.encode([text[:cut]])[0]
        return ids[:-1]  # the last token may merge with the field's first characters

    # items ---------------------------------------------------------------------------------
    def group_key(self, values: Mapping[str, str | None]) -> tuple:
        """Items with the same key differ only by their hypothesis (they share a longer prefix)."""
        if "hypothesis" not in self.template.all_fields:
            return ()
        return tuple((f, values.get(f)) for f in self.template.all_fields if f != "hypothesis")

    def encode_items(
        self, columns: Mapping[str, list[str | None]], n: int, truncate: bool = True
    ) -> list[EncodedItem]:
        """Render, tokenize and (if needed) truncate ``n`` items given as field columns."""
        rows = [{name: column[i] for name, column in columns.items()} for i in range(n)]
        texts = [self.render(row) for row in rows]
        ids = self.encode(texts)
        items = []
        for index, (row, text, item_ids) in enumerate(zip(rows, texts, ids)):
            if self.max_length is not None and self._too_long(item_ids):
                row, text, item_ids = self._truncate(row, index, truncate)
            items.append(EncodedItem(item_ids, text, self.group_key(row)))
        return items

    def _too_long(self, ids: Sequence[int]) -> bool:
        need = len(ids) + max(len(self.answer_ids[0]), len(self.answer_ids[1]))
        return self.max_length is not None and need > self.max_length

    def _truncate(self, row: dict[str, str | None], index: int, truncate: bool) -> tuple[dict, str, list[int]]:
        text = self.render(row)
        ids = self.encode([text])[0]
        if not truncate:
            raise ValueError(
                f"item {index}: the prompt is {len(ids)} tokens, longer than the judge's context "
                f"({self.max_length}); shorten the fields or pass truncate=True to cut them from the middle."
            )
        cut_fields = []
        for _ in range(8):
            excess = len(ids) + max(map(len, self.answer_ids)) - self.max_length
            if excess <= 0:
                break
            lengths = {
                f: len(self.tokenizer(v, add_special_tokens=False)["input_ids"])
                for f, v in row.items()
                if isinstance(v, str)
            }
            longest = max(lengths, key=lengths.get)
            field_ids = self.tokenizer(row[longest], add_special_tokens=False)["input_ids"]
            keep = max(len(field_ids) - excess - 8, 0)
            head, tail = field_ids[: keep - keep // 2], field_ids[len(field_ids) - keep // 2 :] if keep // 2 else []
            row = {**row, longest: self.tokenizer.decode(head) + " … " + self.tokenizer.decode(tail)}
            cut_fields.append(longest)
            text = self.render(row)
            ids = self.encode([text])[0]
        if self._too_long(ids):
            raise ValueError(
                f"item {index}: the template alone does not fit the judge's context ({self.max_length} tokens)."
            )
        warnings.warn(
            f"item {index}: prompt longer than the judge's context ({self.max_length} tokens); field(s) "
            f"{sorted(set(cut_fields))} truncated from the middle.",
            stacklevel=4,
        )
        return row, text, ids
