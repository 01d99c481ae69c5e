"""The one reading of a completion that a copy-proof reward's judge reads, and whose novelty and length it counts:
the answer without the presentation a policy can add at no cost, so that no such edit can raise a reward.

:func:`read_completion` removes, in this order (each rule only where the source does not do the same itself):

1. **layout**: surrounding whitespace, runs of spaces; a trailing line or parenthesis that is a note ("Note: ...");
   line breaks read as spaces when the source is one line (one ``\\n`` each where it has several);
2. **a leading label or preamble**: a first segment of at most eight words ending with a colon ("Paraphrase:",
   "Sure! Here is a paraphrase:"), when the source has no colon;
3. **markdown**: emphasis and code marks around words (``**``, ``__``, ``*``, ``_``, a backquote) when the source
   has none of them, and a leading heading, quote or list mark;
4. **wrapping quotes** around the whole answer, when the source is not wrapped in them;
5. **the answer said again**: a sentence reading as an earlier one (:func:`~pluie_reward.integrations.skeleton.words`)
   is dropped (the reward's repetition factor still reads the completion as written, so saying it twice costs);
6. **the final punctuation**: with ``final="source"`` (paraphrase) the source's final marks replace the answer's;
   with ``"missing"`` (translation: languages end sentences differently) a missing one reads as the source's;
   with ``"keep"`` (revision, which may change punctuation) it is kept as written.

Rules 2-4 repeat until none applies ('**Paraphrase:** "A cat."' reads 'A cat.'). Reading twice changes nothing.
No torch, transformers or yaml: the HTTP clients read completions as the local rewards do.

Example:
    >>> read_completion('Sure! Here is a paraphrase: "**A cat** is asleep on the mat"', "The cat sleeps on the mat.")
    'A cat is asleep on the mat.'
    >>> read_completion("A cat is asleep on the mat. A cat is asleep on the mat.", "The cat sleeps on the mat.")
    'A cat is asleep on the mat.'
"""

from __future__ import annotations

import re

from .skeleton import words

__all__ = ["FINAL_MODES", "read_completion"]

FINAL_MODES = ("source", "missing", "keep")
_FINAL = ".!?…。！？"
_QUOTES = {'"': '"', "'": "'", "“": "”", "‘": "’", "«": "»", "„": "“", "‚": "‘", "「": "」", "『": "』", "`": "`"}
_LABEL = re.compile(r"([^:：\n]{1,120}?)(?::\s+|：\s*)(?=\S)")  # "10:30" and "http://" are no labels
_NOTE = re.compile(r"\s*\(([^():：\n]{1,40})[:：][^()]*\)\s*$")
_MARKDOWN_START = re.compile(r"(?:#{1,6}|>|[-*+•])\s+")
_EMPHASIS = re.compile(r"(?<![\w*_`])(\*\*|__|\*|_|`)(?=[^\s*_`])(.+?)(?<=[^\s*_`])\1(?![\w*_`])")
_SENTENCE_END = re.compile(r"((?<=[.!?…。！？])\s+)")
_SPACES = re.compile(r"[^\S\n]+")
_BREAKS = re.compile(r" ?\n[\s]*")


def _is_label(text: str, longest: int) -> bool:
    return 0 < len(words(text)) <= longest


def _one_pass(text: str, source: str) -> str:
    """Rules 2-4 once."""
    label = _LABEL.match(text)
    if label and ":" not in source and "：" not in source and _is_label(label.group(1), 8):
        text = text[label.end():]
    if not any(mark in source for mark in "*_`"):
        text = _EMPHASIS.sub(r"\2", text)
    mark = _MARKDOWN_START.match(text)
    if mark and not source.startswith(mark.group()):
        text = text[mark.end():]
    if len(text) > 2 and _QUOTES.get(text[0]) == text[-1] and not (source[:1] == text[0] and source[-1:] == text[-1]):
        text = text[1:-1].strip()
    return text


def read_completion(completion: str, source: str, final: str = "source") -> str:
    """The reading of ``completion`` a copy-proof reward's judge reads (see the module docstring for the rules).

    Args:
        completion: the completion's text.
        source: the text it rewrites (its final punctuation, colons, marks and layout decide what is presentation).
        final: ``"source"``, ``"missing"`` or ``"keep"``: what happens to the final punctuation (rule 6).

    Returns:
        The reading; the completion itself when nothing applies.

    Raises:
        ValueError: an unknown ``final``.

    Example:
        >>> read_completion("Paraphrase:\\nHeavy rain forced the organisers,\\nto call off the concert", "Rain cancelled the concert.")
        'Heavy rain forced the organisers, to call off the concert.'
        >>> read_completion("Revised: We propose a method", "We propose a metod.", final="keep")
        'We propose a method'
    """
    if final not in FINAL_MODES:
        raise ValueError(f"final must be one of {FINAL_MODES}, got {final!r}.")
    source = source.strip()
    text = _BREAKS.sub("\n", _SPACES.sub(" ", completion)).strip()
    if ":" not in source and "：" not in source:  # rule 1: trailing notes
        lines = text.split("\n")
        while len(lines) > 1 and (note := _LABEL.match(lines[-1])) and _is_label(note.group(1), 3):
            lines.pop()
        text = "\n".join(lines)
        if (note := _NOTE.search(text)) and _is_label(note.group(1), 3):
            text = text[: note.start()]
    if "\n" not in source:
        text = text.replace("\n", " ")
    previous = None
    while text != previous:
        previous, text = text, _one_pass(text, source)
    parts = _SENTENCE_END.split(text)  # rule 5: sentences and the spaces after them
    kept, seen = [parts[0]], {tuple(words(parts[0]))}
    for space, sentence in zip(parts[1::2], parts[2::2]):
        key = tuple(words(sentence))
        if not key or key not in seen:
            kept += [space, sentence]
        seen.add(key)
    text = "".join(kept)
    if final == "keep" or not text or not text[-1].isalnum() and text[-1] not in _FINAL:
        return text  # kept as written, or ending with a quote or a bracket
    ending = source[len(source.rstrip(_FINAL)):]
    body = text.rstrip(_FINAL + " ")
    if final == "source" or body == text:
        return body + ending if body else text
    return text
