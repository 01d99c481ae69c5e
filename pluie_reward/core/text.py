"""Text utilities shared by rewards, guards and baselines: Levenshtein distance over any sequences
(characters or words), and the normalisation that makes invisible-character, case, spacing,
punctuation and homoglyph variants of a text count as copies."""

from __future__ import annotations

import re
import unicodedata
from typing import Any, Sequence


def edit_distance(a: Sequence[Any], b: Sequence[Any]) -> int:
    """Levenshtein distance between two sequences (insertions, deletions, substitutions cost 1).

    Example:
        >>> edit_distance(["a", "b", "c"], ["a", "c", "d"])
        2
    """
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


# --- normalisation for copy detection ---------------------------------------------------------------
# Characters that render as nothing (or as blank space) but are not whitespace: format characters
# (category Cf: zero-width space/joiners, word joiner, soft hyphen, BOM, bidi controls, tag characters)
# are removed by category; these are the invisible ones of other categories.
_INVISIBLE_EXTRA = {
    0x034F,  # combining grapheme joiner (Mn)
    0x115F, 0x1160, 0x3164, 0xFFA0,  # Hangul fillers (Lo)
    0x17B4, 0x17B5,  # Khmer inherent vowels (Mn)
    0x2800,  # braille pattern blank (So)
}
_VARIATION_SELECTORS = (range(0xFE00, 0xFE10), range(0xE0100, 0xE01F0))
# Latin look-alikes from other scripts, after case folding (a small subset of Unicode's confusables.txt:
# Cyrillic and Greek letters that render like a Latin letter, in either case, in common fonts). The
# table is applied to case-folded text so a source and its copy fold the same way whatever their case.
# NFKC already folds full-width and mathematical letters; it leaves these alone.
CONFUSABLES = {
    # Cyrillic
    "а": "a", "в": "b", "с": "c", "ԁ": "d", "е": "e", "һ": "h", "н": "h", "і": "i", "ј": "j", "к": "k",
    "ӏ": "l", "м": "m", "о": "o", "р": "p", "ԛ": "q", "ѕ": "s", "т": "t", "у": "y", "ү": "y", "х": "x",
    "ԝ": "w",
    # Greek
    "α": "a", "β": "b", "ϲ": "c", "ε": "e", "ζ": "z", "η": "h", "ι": "i", "κ": "k", "μ": "m", "ν": "v",
    "ο": "o", "ρ": "p", "τ": "t", "υ": "y", "χ": "x",
    # Latin letters that look like other Latin letters
    "ı": "i", "ɡ": "g", "ɑ": "a", "ǀ": "l",
}
_CONFUSABLE_TABLE = str.maketrans(CONFUSABLES)
_WHITESPACE = re.compile(r"\s+")
_WORD_CHARS = re.compile(r"\w+")


def is_invisible(char: str) -> bool:
    """Whether a character renders as nothing although it is not whitespace (zero-width space, joiners,
    soft hyphen, BOM, bidi and tag characters, variation selectors, Hangul fillers...).

    Example:
        >>> is_invisible("\\u200b"), is_invisible("\\u00ad"), is_invisible(" "), is_invisible("a")
        (True, True, False, False)
    """
    code = ord(char)
    return (
        unicodedata.category(char) == "Cf"
        or code in _INVISIBLE_EXTRA
        or any(code in block for block in _VARIATION_SELECTORS)
    )


def normalize_text(text: str) -> str:
    """The text a reader sees, folded for copy detection: invisible characters removed, compatibility
    forms (NFKC: full-width, ligatures, mathematical letters), accents on Latin/Greek/Cyrillic letters
    and case folded, Cyrillic/Greek look-alikes of Latin letters mapped to them (:data:`CONFUSABLES`),
    whitespace collapsed.

    Two texts with the same ``normalize_text`` differ only by case, spacing, invisible characters,
    accents or homoglyphs; :func:`same_words` also ignores punctuation.

    Args:
        text: any string.

    Returns:
        The folded string.

    Example:
        >>> normalize_text("T\\u200bh\\u200be  Cаt\\u00ad sleeps.")   # zero-width space, Cyrillic а, soft hyphen
        'the cat sleeps.'
        >>> normalize_text("Ｔｈｅ café") == normalize_text("the cafe")
        True
    """
    out = []
    for char in unicodedata.normalize("NFKD", text):
        if is_invisible(char):
            continue
        if unicodedata.category(char) == "Mn" and out and ord(out[-1]) < 0x0530:
            continue  # an accent on a Latin, Greek or Cyrillic letter
        out.append(char)
    folded = unicodedata.normalize("NFKC", "".join(out)).casefold().translate(_CONFUSABLE_TABLE)
    return _WHITESPACE.sub(" ", folded).strip()


def content_words(text: str) -> list[str]:
    """The word tokens of :func:`normalize_text` (letters, digits, underscores), punctuation left out.

    Example:
        >>> content_words("The CAT -- sleeps!!")
        ['the', 'cat', 'sleeps']
    """
    return _WORD_CHARS.findall(normalize_text(text))


def same_words(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` up to case, spacing, punctuation, invisible characters, accents and
    homoglyphs: a copy, for a reward that must not pay for copying.

    Example:
        >>> same_words("The cat sleeps.", "the   cat, SLEEPS")
        True
        >>> same_words("The cat sleeps.", "The cat slept.")
        False
    """
    return content_words(a) == content_words(b)


def contains_words(a: str, b: str) -> bool:
    """Whether ``b`` holds all of ``a``'s words (:func:`content_words`), in order and side by side,
    with more around them: ``a`` repeated, or followed or preceded by other text. False when ``a``
    has no word or ``b`` is ``a`` itself (:func:`same_words` says that).

    Example:
        >>> contains_words("The cat sleeps.", "The cat sleeps. THE CAT SLEEPS!")
        True
        >>> contains_words("The cat sleeps.", "The cat sleeps."), contains_words("The cat sleeps.", "The cat still sleeps.")
        (False, False)
    """
    whole, part = content_words(b), content_words(a)
    if not part or len(whole) <= len(part):
        return False
    return any(whole[i : i + len(part)] == part for i in range(len(whole) - len(part) + 1))


def repetition(text: str, n: int = 3) -> float:
    """The share of a text's word ``n``-grams (:func:`content_words`) that repeat an earlier one: 0
    for text that never repeats itself, about ``1 - 1/k`` for a phrase written ``k`` times, 0 for
    fewer than ``n`` words.

    Args:
        text: any string.
        n: the n-gram length (>= 1).

    Returns:
        A share in [0, 1).

    Example:
        >>> repetition("The cat sleeps on the mat.")
        0.0
        >>> repetition("the cat sleeps the cat sleeps")   # 4 trigrams, the last one repeats the first
        0.25
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}.")
    tokens = content_words(text)
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    if not grams:
        return 0.0
    seen: set[tuple[str, ...]] = set()
    repeated = 0
    for gram in grams:
        repeated += gram in seen
        seen.add(gram)
    return repeated / len(grams)
