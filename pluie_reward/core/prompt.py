"""A template bound to a tokenizer: the exact token ids a judge reads, and where the answer starts.

The papers compute PLUIE on the chat rendering of the whole conversation **with the answer as the
assistant's message and everything after the answer (end-of-turn) cut**. :class:`BoundTemplate`
reproduces exactly that:

* Each item is rendered with its answer as the final assistant turn, so the answer token is whatever
  the rendering tokenizes to (``▁Yes`` for Mistral, not ``Yes``); the prompt ids are the rendering's
  tokens before the first answer token.
* Answer words are validated once per template and tokenizer on that rendering: every answer
  must start at the same token boundary, must not merge with the end-of-turn text, and must be one
  token (several only with ``allow_multi_token``, the seeds' eq. 4).
* Field values are text, never markup: chat markers (:func:`marker_strings`) inside them are tokenized
  as ordinary text, while the template's own structure keeps its control tokens. The judge's own
  generated turn (INDIRECT) is rendered as the judge wrote it.
* Chat-template keywords (``chat_template_kwargs``: the judge's defaults, then the template's own)
  reach every rendering. Scores never depend on the clock: a template that writes today's date
  (gpt-oss: ``Current date:`` from ``strftime_now``) gets a fixed date, :data:`DEFAULT_CHAT_DATE`,
  unless the keywords set one (``{"strftime_now": "2025-06-28"}``; ``"now"``: the real clock).
* Qwen3 renders the final assistant turn after an empty ``<think>`` block, so PLUIE is read in
  non-thinking mode; ``enable_thinking`` only changes the generation prompt of an INDIRECT turn.

Example:
    >>> from pluie_reward.testing import make_tiny_tokenizer
    >>> bound = BoundTemplate(load_template("para-direct"), make_tiny_tokenizer())
    >>> bound.answer_words
    ('Yes', 'No')
    >>> end = bound.tokenizer.convert_tokens_to_ids("<|im_end|>")
    >>> clean, spelled = (bound.encode_items({"source": ["a"], "hypothesis": [h]}, 1)[0].ids for h in ("b", "b<|im_end|>"))
    >>> clean.count(end) == spelled.count(end) == 3    # one per closed turn: the field's string is text
    True
"""

from __future__ import annotations

import datetime
import json
import re
import secrets
import warnings
import weakref
from typing import Any, Callable, Mapping, Sequence

from ..common.errors import PluieError
from ..engines.base import Request
from .template import GENERATED, Template, check_chat_template_kwargs, load_template  # noqa: F401  (load_template: doctests)

_FIELD_MARK = "\ue000{}\ue001"  # private-use characters: no chat template touches them


DEFAULT_CHAT_DATE = "2025-01-01"  # what a chat template's strftime_now sees unless the keywords set a date


def chat_clock(value: Any) -> datetime.datetime | None:
    """The moment a chat template's ``strftime_now`` formats: an ISO date or date-time (text, or a
    ``datetime.date``/``datetime.datetime``), or ``None`` for ``"now"`` (the real clock).

    Args:
        value: the ``strftime_now`` keyword.

    Returns:
        The fixed moment, or ``None`` for the real clock.

    Example:
        >>> chat_clock("2025-06-28").strftime("%Y-%m-%d"), chat_clock("now")
        ('2025-06-28', None)
    """
    if isinstance(value, str) and value.strip().lower() == "now":
        return None
    if isinstance(value, datetime.datetime):
        return value
    if isinstance(value, datetime.date):
        return datetime.datetime(value.year, value.month, value.day)
    try:
        return datetime.datetime.fromisoformat(str(value).strip())
    except ValueError:
        raise ValueError(f"chat_template_kwargs: strftime_now must be an ISO date such as {DEFAULT_CHAT_DATE!r} "
                         f"(or 'now' for the real clock), not {value!r}.") from None


_CLOCK_CALL = re.compile(r"""strftime_now\(\s*(["'])((?:(?!\1).)*)\1\s*\)""")


def fixed_clock_template(source: str, moment: datetime.datetime) -> str:
    """A chat template's source with every ``strftime_now("<format>")`` call replaced by the string
    that call would return at ``moment``, so the rendering does not depend on the clock.

    Example:
        >>> fixed_clock_template('{{ "Today: " + strftime_now("%Y-%m-%d") }}', datetime.datetime(2025, 1, 1))
        '{{ "Today: " + "2025-01-01" }}'
    """
    return _CLOCK_CALL.sub(lambda m: json.dumps(moment.strftime(m.group(2))), source)


class AnswerTokenError(PluieError, ValueError):
    """An answer word does not read as the template requires where the model would produce it."""


def special_token_strings(tokenizer: Any) -> list[str]:
    """Strings the tokenizer turns into special (control) tokens wherever they appear in text.

    Example:
        >>> from pluie_reward.testing import make_tiny_tokenizer
        >>> special_token_strings(make_tiny_tokenizer())
        ['<|im_start|>', '<|im_end|>', '<pad>']
    """
    found = set(getattr(tokenizer, "all_special_tokens", []) or [])
    found |= {str(t) for t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values() if getattr(t, "special", False)}
    return sorted((s for s in found if s), key=lambda s: (-len(s), s))


def marker_strings(tokenizer: Any) -> list[str]:
    """Strings that field text must never turn into their added-token ids (longest first).

    The rule: every special token, plus every added token -- special or not -- whose text appears in
    the chat template's source (``tokenizer.chat_template``), so any marker the template can write.
    Added tokens the template never writes, and whitespace-only ones (the template's indentation
    matches them; Gemma-style ``"\\n\\n"`` tokens are ordinary text), keep their usual reading, so
    ordinary text tokenizes exactly as the judge reads it elsewhere.

    Args:
        tokenizer: a transformers tokenizer.

    Returns:
        The marker strings, longest first (a regex alternation tries them in that order).

    Example:
        >>> from pluie_reward.testing import make_tiny_tokenizer
        >>> marker_strings(make_tiny_tokenizer())
        ['<|im_start|>', '<|im_end|>', '<pad>']
    """
    found = set(special_token_strings(tokenizer))
    source = getattr(tokenizer, "chat_template", None)
    if isinstance(source, dict):  # several named templates
        source = "\n".join(map(str, source.values()))
    if isinstance(source, str):
        found |= {text for text in map(str, (getattr(tokenizer, "added_tokens_decoder", None) or {}).values())
                  if text.strip() and text in source}
    return sorted((s for s in found if s), key=lambda s: (-len(s), s))


_PLAIN_ENCODERS: "weakref.WeakKeyDictionary[Any, dict[tuple[str, ...], Callable[[str], list[int]]]]" = weakref.WeakKeyDictionary()


def text_encoder(tokenizer: Any, markers: Sequence[str]) -> Callable[[str], list[int]]:
    """A function tokenizing text with ``markers`` read as ordinary text, never as their added-token ids.

    ``split_special_tokens=True`` does that for special tokens only: a fast tokenizer still matches
    non-special added tokens (Qwen3's ``<think>``). For those, a copy of the backend tokenizer marks
    them special and encodes with ``encode_special_tokens``; everything else (normalizer,
    pre-tokenizer, model, the other added tokens) is the tokenizer's own, so text without markers
    gets the same ids. Python tokenizers skip every added token with ``split_special_tokens=True``.

    Args:
        tokenizer: a transformers tokenizer.
        markers: the strings to read as text (see :func:`marker_strings`).

    Returns:
        ``encode(text) -> ids`` (no BOS/EOS added).

    Example:
        >>> from pluie_reward.testing import make_tiny_tokenizer
        >>> tok = make_tiny_tokenizer()
        >>> text_encoder(tok, ["<|im_end|>"])("<|im_end|>") == tok("<|im_end|>", split_special_tokens=True)["input_ids"]
        True
    """
    def split(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    added = {str(t): t for t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values()}
    flip = tuple(sorted(m for m in markers if m in added and not getattr(added[m], "special", False)))
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if not flip or backend is None:
        return split
    try:
        cache = _PLAIN_ENCODERS.setdefault(tokenizer, {})
    except TypeError:  # not weak-referenceable
        cache = {}

    def encode(text: str) -> list[int]:
        if not any(m in text for m in flip):  # the common case: no copy needed
            return split(text)
        if flip not in cache:  # built on first use (about a second for a 150k vocabulary), then shared
            from tokenizers import Tokenizer

            data = json.loads(backend.to_str())
            for entry in data.get("added_tokens") or []:
                if entry.get("content") in flip:
                    entry["special"] = True
            data["truncation"] = data["padding"] = None
            plain = Tokenizer.from_str(json.dumps(data))
            plain.encode_special_tokens = True
            cache[flip] = lambda piece: plain.encode(piece, add_special_tokens=False).ids
        return cache[flip](text)

    return encode


class BoundTemplate:
    """A :class:`Template` rendered and tokenized with one tokenizer.

    Args:
        template: the template.
        tokenizer: the judge's tokenizer; its chat template renders the conversation (a plain
            ``User: ... / Assistant: ...`` rendering when it has none).
        max_length: the judge's context length (over-long items are truncated or refused).
        allow_multi_token: accept answers of several tokens (summed log-probabilities, eq. 4).
        chat_template_kwargs: default keywords for the chat template (the judge's); the template's
            own ``chat_template_kwargs`` override them.

    Attributes:
        answer_ids: the token ids of each answer, in the template's answer order.
        prefix_ids: a token prefix every item shares (instructions and few-shot turns).
        chat_template_kwargs: the keywords every rendering uses, as JSON values; it holds the
            ``strftime_now`` date when the chat template reads the clock (passing this dict back
            reproduces the rendering).
    """

    def __init__(self, template: Template, tokenizer: Any, max_length: int | None = None, allow_multi_token: bool = False,
                 chat_template_kwargs: Mapping[str, Any] | None = None) -> None:
        self.template = template
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.use_chat = getattr(tokenizer, "chat_template", None) is not None
        self._set_chat_kwargs({**(chat_template_kwargs or {}), **template.chat_template_kwargs})
        nonce = secrets.token_hex(6)
        self._answer_mark = f"\ue002{nonce}\ue003"
        self._protect_mark = "\ue004" + nonce + "{}\ue005"
        self._protect_split = re.compile("\ue004" + nonce + r"(\d+)\ue005")
        self.markers = tuple(marker_strings(tokenizer))
        self._specials = re.compile("|".join(map(re.escape, self.markers))) if self.markers else None
        # the judge's own generated turn is rendered as it wrote it (Qwen3 drops its <think> block from
        # the history); only special-token strings, which decoding never leaves in it, are text there
        specials = special_token_strings(tokenizer)
        self._generated_specials = re.compile("|".join(map(re.escape, specials))) if specials else None
        self._text_ids = text_encoder(tokenizer, self.markers)
        self._lead_ids = self._leading_special_ids()
        self.tail = self._tail()
        self.answer_ids = self._validate_answers(allow_multi_token)
        self.prefix_ids = self._static_prefix_ids()

    def _set_chat_kwargs(self, given: dict[str, Any]) -> None:
        check_chat_template_kwargs(given, f"template {self.template.name!r}")
        clock = given.pop("strftime_now", None)
        moment = chat_clock(DEFAULT_CHAT_DATE if clock is None else clock)
        self._render_kwargs = dict(given)
        source = getattr(self.tokenizer, "chat_template", None)
        reads_clock = self.use_chat and "strftime_now" in str(source)
        if reads_clock and moment is not None and isinstance(source, str):
            fixed = fixed_clock_template(source, moment)
            if "strftime_now" in fixed:
                warnings.warn(f"template {self.template.name!r}: the judge's chat template calls strftime_now with a "
                              "format that is not a literal; its rendering may depend on the clock.", stacklevel=3)
            self._render_kwargs["chat_template"] = fixed
        self.chat_template_kwargs: dict[str, Any] = dict(given)
        if reads_clock or clock is not None:
            shown = "now" if moment is None else moment.date().isoformat() if moment.time() == datetime.time() else moment.isoformat()
            self.chat_template_kwargs["strftime_now"] = shown

    @property
    def date(self) -> str | None:
        """The date the chat template writes (``strftime_now``), ``"now"`` for the real clock, or
        ``None`` when it does not read the clock."""
        return self.chat_template_kwargs.get("strftime_now")

    @property
    def answer_words(self) -> tuple[str, ...]:
        """The template's answer words (e.g. ``("Yes", "No")``)."""
        return tuple(self.template.answers)

    @property
    def single_token(self) -> bool:
        """Whether every answer is one token (one forward pass per item)."""
        return all(len(a) == 1 for a in self.answer_ids)

    # rendering -----------------------------------------------------------------------------
    def render(self, values: Mapping[str, str | None], answer: str | None = None) -> str:
        """The rendered conversation with ``answer`` as the assistant's final turn (text, markup included).

        With ``answer=None`` the text stops where the answer starts (including whatever the chat
        template puts between the generation prompt and the answer).
        """
        text = self._full_text(values, self._answer_mark)
        head, mark, tail = text.partition(self._answer_mark)
        if not mark:
            raise AnswerTokenError(f"template {self.template.name!r}: the chat template does not render the assistant's answer.")
        return head if answer is None else head + answer + tail

    def _full_text(self, values: Mapping[str, str | None], answer: str) -> str:
        if self.use_chat:
            messages = self.template.chat(values) + [{"role": "assistant", "content": answer}]
            return self.tokenizer.apply_chat_template(messages, tokenize=False, **self._render_kwargs)
        prompt, between = self.template.plain(values)
        return prompt + between + answer

    def generation_text(self, values: Mapping[str, str | None]) -> str:
        """The conversation before the judge-generated turn, ending where the judge starts writing."""
        if self.use_chat:
            messages = self.template.chat(values, until_generated=True)
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **self._render_kwargs)
        return self.template.plain(values, until_generated=True)[0]

    def _tail(self) -> str:
        pieces = self._full_text(self._sample_values(), self._answer_mark).split(self._answer_mark)
        if len(pieces) != 2:
            raise AnswerTokenError(f"template {self.template.name!r}: the chat template does not render the assistant's answer once.")
        return pieces[1]

    def _sample_values(self, mark: bool = False) -> dict[str, str | None]:
        names = self.template.all_fields + ((GENERATED,) if self.template.generates else ())
        return {f: _FIELD_MARK.format(f) if mark else "x" for f in names}

    # tokenization ----------------------------------------------------------------------------
    def _leading_special_ids(self) -> list[int]:
        """BOS-like ids the tokenizer adds in front of plain text (a chat rendering writes its own)."""
        if self.use_chat:
            return []
        bare = self.tokenizer("x", add_special_tokens=False)["input_ids"]
        full = self.tokenizer("x", add_special_tokens=True)["input_ids"]
        for start in range(len(full) - len(bare) + 1):
            if full[start : start + len(bare)] == bare:
                return list(full[:start])
        return []

    def _protect(self, values: Mapping[str, str | None]) -> tuple[dict[str, str | None], list[str]]:
        """Field values with every marker string replaced by a placeholder (and the strings); in the
        judge's generated turn, only special-token strings."""
        found: list[str] = []

        def mark(match: re.Match) -> str:
            found.append(match.group(0))
            return self._protect_mark.format(len(found) - 1)

        def protect(key: str, value: Any) -> Any:
            pattern = self._generated_specials if key == GENERATED else self._specials
            return pattern.sub(mark, value) if isinstance(value, str) and pattern is not None else value

        protected = {k: protect(k, v) for k, v in values.items()}
        return protected, found

    def _tokenize_with_answer(self, head: str, answer: str) -> tuple[list[int], list[int]]:
        """Tokenize ``head + answer`` as the model reads it; return (prompt ids, answer ids) split at
        the first token that overlaps the answer's characters."""
        encoding = self.tokenizer(head + answer, add_special_tokens=False, return_offsets_mapping=True)
        ids, offsets = encoding["input_ids"], encoding["offset_mapping"]
        start = len(head)
        cut = next((i for i, (a, b) in enumerate(offsets) if b > start and b > a), len(ids))
        return list(ids[:cut]), list(ids[cut:])

    def _encode_head(self, head: str, strings: Sequence[str], answer: str) -> tuple[list[int], list[int]]:
        """Token ids of a rendered head (fields protected) followed by ``answer``, split at the answer."""
        pieces = self._protect_split.split(head)
        ids: list[int] = list(self._lead_ids)
        for index in range(0, len(pieces) - 1, 2):
            if pieces[index]:
                ids += self.tokenizer(pieces[index], add_special_tokens=False)["input_ids"]
            ids += self._text_ids(strings[int(pieces[index + 1])])
        prompt, answer_ids = self._tokenize_with_answer(pieces[-1], answer)
        return ids + prompt, answer_ids

    def encode_generation_prompt(self, values: Mapping[str, str | None]) -> list[int]:
        """The ids the judge continues to write its own turn (templates with a generated message)."""
        protected, strings = self._protect(values)
        return self._encode_head(self.generation_text(protected), strings, "")[0]  # no answer: every id is the prompt's

    @property
    def stop_ids(self) -> tuple[int, ...]:
        """Token ids that end a judge-generated turn: end-of-sequence and the end-of-turn marker."""
        eos = self.tokenizer.eos_token_id
        stops = set() if eos is None else {int(eos)}
        tail_ids = self.tokenizer(self.tail, add_special_tokens=False)["input_ids"] if self.tail else []
        if tail_ids and tail_ids[0] in set(self.tokenizer.all_special_ids):
            stops.add(int(tail_ids[0]))
        return tuple(sorted(stops))

    def encode_values(self, values: Mapping[str, str | None]) -> list[int]:
        """The prompt ids of one item (fields given as text), checked against the bound answer tokens."""
        protected, strings = self._protect(values)
        head = self.render(protected)
        prompt, answer = self._encode_head(head, strings, self.template.answers[0])
        if answer != list(self.answer_ids[0]):
            raise AnswerTokenError(
                f"template {self.template.name!r}: in this item the answer {self.template.answers[0]!r} tokenizes as "
                f"{self.show(answer)} instead of {self.show(self.answer_ids[0])}; the item's text changes the tokens "
                "around the answer."
            )
        return prompt

    # answers -------------------------------------------------------------------------------
    def _validate_answers(self, allow_multi_token: bool) -> tuple[tuple[int, ...], ...]:
        sample = self._sample_values()
        name = self.template.name
        head = self.render(sample)
        prompts, found = [], []
        for word in self.template.answers:
            full = self._full_text(sample, word)
            if full != head + word + self.tail:
                raise AnswerTokenError(
                    f"template {name!r}: the chat template renders the answer {word!r} differently from other text "
                    "(it changes the assistant's content); PLUIE cannot read it as one answer token."
                )
            prompt, answer = self._tokenize_with_answer(head, word)
            whole = self.tokenizer(full, add_special_tokens=False)["input_ids"]
            if whole[: len(prompt) + len(answer)] != prompt + answer:
                raise AnswerTokenError(
                    f"template {name!r}: answer {word!r} merges with the end-of-turn text after it "
                    f"({self.show(whole[len(prompt):len(prompt) + len(answer) + 2])}); the score would not be "
                    "p(answer | prompt)."
                )
            if not answer:
                raise AnswerTokenError(f"template {name!r}: answer {word!r} produces no token.")
            if len(answer) != 1 and not allow_multi_token:
                raise AnswerTokenError(
                    f"template {name!r}: answer {word!r} is {len(answer)} tokens for this tokenizer where the model "
                    f"would produce it ({self.show(answer)}); PLUIE reads one token per answer. Choose a judge "
                    "whose tokenizer has it as one token, change the template's answers, or pass "
                    "allow_multi_token=True for the seeds' eq. 4 (sums the answer's token log-probabilities; "
                    "biased towards the shorter answer)."
                )
            prompts.append(prompt)
            found.append(tuple(answer))
        for word, prompt in zip(self.template.answers[1:], prompts[1:]):
            if prompt != prompts[0]:
                raise AnswerTokenError(
                    f"template {name!r}: answer {word!r} merges with the end of the prompt differently from "
                    f"{self.template.answers[0]!r} ({self.show(prompt[-2:])} vs {self.show(prompts[0][-2:])}); "
                    "the answers would not be read at the same position."
                )
        if len(set(found)) != len(found) or (all(len(a) == 1 for a in found) and len({a[0] for a in found}) != len(found)):
            raise AnswerTokenError(f"template {name!r}: two answers tokenize alike ({[self.show(a) for a in found]}).")
        return tuple(found)

    def show(self, ids: Sequence[int]) -> str:
        """Token ids with their tokens, for messages (``5592='▁Yes'``)."""
        pieces = self.tokenizer.convert_ids_to_tokens(list(ids))
        return ", ".join(f"{i}={p!r}" for i, p in zip(ids, pieces))

    # prefix --------------------------------------------------------------------------------
    def _static_prefix_ids(self) -> tuple[int, ...]:
        text = self.render(self._sample_values(mark=True))
        cut = min(text.find(_FIELD_MARK.format(f)) for f in self.template.all_fields if _FIELD_MARK.format(f) in text)
        ids = list(self._lead_ids) + self.tokenizer(text[:cut], add_special_tokens=False)["input_ids"]
        return tuple(ids[:-1])  # the last token may merge with the field's first characters

    # items ---------------------------------------------------------------------------------
    def group_key(self, values: Mapping[str, str | None]) -> tuple:
        """Items with the same key differ only by their hypothesis (they share a longer prefix)."""
        if "hypothesis" not in self.template.all_fields:
            return ()
        return tuple((f, values.get(f)) for f in self.template.all_fields if f != "hypothesis")

    def encode_items(
        self, columns: Mapping[str, list[str | None]], n: int, truncate: bool = True
    ) -> list[Request]:
        """Render, tokenize and (if needed) truncate ``n`` items given as field columns: each item's prompt ids
        (ending where the answer starts) and its :meth:`group_key`, as the engine's request."""
        items = []
        for index in range(n):
            row = {name: column[index] for name, column in columns.items()}
            row, ids = self.fit(row, index, truncate, self.encode_values)
            items.append(Request(tuple(ids), self.group_key(row)))
        return items

    def fit(self, row: dict[str, str | None], index: int, truncate: bool, encode: Any, reserve: int = 0) -> tuple[dict, list[int]]:
        """``encode(row)``, with the longest fields cut from the middle while the ids (plus
        ``reserve`` tokens and the answer) do not fit the judge's context."""
        ids, cut_fields, beside = encode(row), [], reserve + max(len(a) for a in self.answer_ids)
        while self.max_length is not None and (excess := len(ids) + beside - self.max_length) > 0:
            if not truncate:
                raise ValueError(
                    f"item {index}: the prompt is {len(ids)} tokens, longer than the judge's context "
                    f"({self.max_length}); shorten the fields or pass truncate=True to cut them from the middle."
                )
            if len(cut_fields) == 8:
                raise ValueError(f"item {index}: the template alone does not fit the judge's context ({self.max_length} tokens).")
            lengths = {f: len(self._text_ids(v)) for f, v in row.items() if isinstance(v, str) and f in self.template.all_fields}
            longest = max(lengths, key=lengths.get)
            field_ids = self._text_ids(row[longest])
            keep = max(len(field_ids) - excess - 8, 0)
            head, tail = field_ids[: keep - keep // 2], field_ids[len(field_ids) - keep // 2 :] if keep // 2 else []
            row = {**row, longest: self.tokenizer.decode(head) + " … " + self.tokenizer.decode(tail)}
            cut_fields.append(longest)
            ids = encode(row)
        if cut_fields:
            warnings.warn(
                f"item {index}: prompt longer than the judge's context ({self.max_length} tokens); field(s) "
                f"{sorted(set(cut_fields))} truncated from the middle.",
                stacklevel=3,
            )
        return row, ids
