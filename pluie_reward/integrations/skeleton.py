"""The words a reader reads: what copy detection, novelty, repetition and lengths count
(:mod:`~pluie_reward.integrations.novelty`), and what the guards fold a completion to (:mod:`~pluie_reward.integrations.guards`).

:func:`words` folds case, accents, invisible characters, compatibility forms, small capitals and look-alike letters
(Unicode's confusables) and splits at every character that is not a letter, a mark or a digit; :func:`compare` reads a
hypothesis against its source, and finds the words mixing scripts that no rewriting needs (:func:`mixes_scripts`).
The Unicode data comes from maintained packages, nothing is typed here: the look-alike sets of Unicode's
confusables.txt (UTS #39) and each character's script (Scripts.txt) as the ``confusable_homoglyphs`` package ships them
(its ``confusable_homoglyphs update`` command, ``pip install "confusable_homoglyphs[cli]"``, regenerates both from
unicode.org), and the default-ignorable and word characters from the ``regex`` package's Unicode tables. No torch,
transformers or yaml: the HTTP clients read texts as the local rewards do.

Example:
    >>> words("Heᴀvy_rain, forced  thе\u200b organisers.")   # a small capital, Cyrillic е, a zero-width space
    ['heavy', 'rain', 'forced', 'the', 'organisers']
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import NamedTuple

import regex

__all__ = ["is_invisible", "mixes_scripts", "normalize_text", "words", "compare"]


# --- disguised copies: the text a reader sees --------------------------------------------------------
# Unicode's own data, from maintained packages (no table is typed here): the look-alikes of Unicode's
# confusables.txt (UTS #39) and each character's script (Scripts.txt) as the `confusable_homoglyphs` package ships
# them (its `confusable_homoglyphs update` command regenerates both from unicode.org); invisible characters
# (Default_Ignorable_Code_Point) and word characters (letters, marks, digits) from the `regex` package's Unicode tables.
_IGNORABLE = regex.compile(r"[\p{Default_Ignorable_Code_Point}\p{Cf}]")
_WORD = regex.compile(r"[\p{L}\p{M}\p{N}]+")
_WHITESPACE = re.compile(r"\s+")
_SMALL_CAPITAL = "LATIN LETTER SMALL CAPITAL "
# scripts a word may mix (UTS #39's "highly restrictive" level: Latin with Japanese, Korean or Chinese with Bopomofo)
_MIXABLE = ({"LATIN", "HAN", "HIRAGANA", "KATAKANA"}, {"LATIN", "HAN", "HANGUL"}, {"LATIN", "HAN", "BOPOMOFO"})


def is_invisible(char: str) -> bool:
    """Whether a character renders as nothing although it is not whitespace: a default-ignorable code point (zero-width
    space, joiners, soft hyphen, variation selectors, Hangul fillers...) or a format character (BOM, bidi and tag
    characters).

    Example:
        >>> is_invisible("\\u200b"), is_invisible("\\u00ad"), is_invisible("\\u3164"), is_invisible(" "), is_invisible("a")
        (True, True, True, False, False)
    """
    return _IGNORABLE.match(char) is not None


def _letter(char: str) -> str:
    """A small capital as its letter (by its Unicode name: ``ᴀ`` is LATIN LETTER SMALL CAPITAL A), marks and invisible
    characters removed; other text as it is."""
    name = unicodedata.name(char, "") if len(char) == 1 else ""
    if name.startswith(_SMALL_CAPITAL) and name[len(_SMALL_CAPITAL):].isalpha():
        return name[len(_SMALL_CAPITAL):].casefold()
    return "".join(c for c in unicodedata.normalize("NFKD", char) if not unicodedata.combining(c) and not is_invisible(c))


@lru_cache(maxsize=1)
def _look_alikes() -> dict[str, str]:
    """Each character of a set of look-alikes -> the set's reading: the member that reads (:func:`_letter`) as an ASCII
    letter or digit (a lower-case letter, then a letter, first), else as a letter or digit, else the smallest member."""
    from confusable_homoglyphs import utils  # optional: loads 0.9 MB of JSON, only when a text is first folded

    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = x = parent[parent[x]]
        return x

    for char, alikes in utils.load("confusables.json").items():  # a symmetric matrix: its components are the sets
        for alike in alikes:
            parent[root(char)] = root(alike["c"])
    sets: dict[str, list[str]] = {}
    for char in parent:
        sets.setdefault(root(char), []).append(char)

    def rank(reading: str) -> tuple:
        return (not (reading.isascii() and reading.isalnum()), not _WORD.fullmatch(reading), not reading.islower(),
                not reading.isalpha(), len(reading), reading)

    table = {}
    for members in sets.values():
        reading = min((_letter(m) for m in members), key=rank).casefold()
        table.update((m, reading) for m in members if len(m) == 1)
    return table


class _Fold(dict):
    """``str.translate`` table reading a letter or digit as a reader reads it (:func:`_letter`, then the reading of its
    look-alikes, :func:`_look_alikes`); other characters are kept. Filled as characters come."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        self[code] = folded = _look_alikes().get(char, _letter(char)) if _WORD.match(char) else char
        return folded


_FOLD = _Fold()


def _visible(text: str) -> str:
    """``text`` without invisible characters and without the accents of Latin, Greek and Cyrillic letters, in NFKC
    (full-width, ligatures and mathematical letters folded)."""
    out: list[str] = []
    for char in unicodedata.normalize("NFKD", text):
        if is_invisible(char) or (unicodedata.category(char) == "Mn" and out and ord(out[-1]) < 0x0530):
            continue
        out.append(char)
    return unicodedata.normalize("NFKC", "".join(out))


def _scripts(word: str) -> set[str]:
    from confusable_homoglyphs import categories

    return {categories.alias(char) for char in word} - {"COMMON", "INHERITED", "Unknown"}


def mixes_scripts(word: str) -> bool:
    """Whether a word mixes letters of scripts that no writing system mixes (Latin with Japanese, Korean, or Chinese
    with Bopomofo is allowed, as UTS #39's "highly restrictive" level allows): a Latin word with one Greek, Cyrillic
    or Armenian letter is a disguise, whatever that letter looks like.

    Example:
        >>> mixes_scripts("heavy"), mixes_scripts("heաvy"), mixes_scripts("ΝEW"), mixes_scripts("iPhoneを"), mixes_scripts("кот")
        (False, True, True, False, False)
    """
    scripts = _scripts(word)
    return len(scripts) > 1 and not any(scripts <= allowed for allowed in _MIXABLE)


def normalize_text(text: str) -> str:
    """The text a reader sees, folded for copy detection: invisible characters removed, compatibility forms (NFKC:
    full-width, ligatures, mathematical letters), accents on Latin/Greek/Cyrillic letters and case folded, small
    capitals and look-alikes of other letters (Unicode's confusables) read as the letter they look like, whitespace
    collapsed; punctuation is kept.

    Args:
        text: any string.

    Returns:
        The folded string.

    Example:
        >>> normalize_text("T\\u200bh\\u200be  Cаt\\u00ad sleeps.")   # zero-width space, Cyrillic а, soft hyphen
        'the cat sleeps.'
        >>> normalize_text("Ｔｈｅ café") == normalize_text("the cafe") == normalize_text("ᴛʜᴇ cαfe")
        True
    """
    return _WHITESPACE.sub(" ", _visible(text).casefold().translate(_FOLD)).strip()


# --- the words a reader reads -----------------------------------------------------------------------------
class _Words(NamedTuple):
    words: tuple[str, ...]  # each word case-folded, then read (:class:`_Fold`)
    shapes: tuple[str, ...]  # each word read as it is written, then case-folded: "ΗΟΤ" is "hot" (its words: "not")
    mixed: tuple[bool, ...]  # each word mixes scripts (:func:`mixes_scripts`)


@lru_cache(maxsize=4096)
def _read(text: str) -> _Words:
    raw = _WORD.findall(_visible(text))
    return _Words(tuple(w.casefold().translate(_FOLD) for w in raw), tuple(w.translate(_FOLD).casefold() for w in raw),
                  tuple(map(mixes_scripts, raw)))


def words(text: str) -> list[str]:
    """The words a reader reads in ``text``, folded (:func:`normalize_text`): every character that is not a letter, a
    mark or a digit separates words, so ``forced_the``, ``forced-the`` and ``forced/the`` are two words, as a reader
    reads them.

    Example:
        >>> words("The CAT -- sleeps!!"), words("Heavy_rain forced.the")
        (['the', 'cat', 'sleeps'], ['heavy', 'rain', 'forced', 'the'])
    """
    return list(_read(text).words)


def compare(source: str, hypothesis: str) -> tuple[list[str], list[str], bool]:
    """The words of ``source`` and of ``hypothesis`` read against them, and whether the hypothesis is disguised.

    A hypothesis word whose case-folded reading is not a source word but whose written shape is reads as that
    word (Greek capitals spelling a Latin word: "ΗΟΤ" is "hot" where the source says "hot", "not" elsewhere); a run
    of text holding a symbol that looks like a letter reads with that letter when that gives source words ("⊤he"
    is "the", where "forced|the" stays two words). A hypothesis word that mixes scripts (:func:`mixes_scripts`)
    and is not a source word is a disguise.

    Args:
        source: the text the hypothesis rewrites.
        hypothesis: the text read against it.

    Returns:
        ``(source words, hypothesis words, disguised)``.

    Example:
        >>> compare("It is hot.", "ΙΤ is ΗΟΤ!"), compare("The heavy rain.", "The heաvy rain.")[2]
        ((['it', 'is', 'hot'], ['it', 'is', 'hot'], False), True)
        >>> compare("The cat.", "⊤he cat.")[1]
        ['the', 'cat']
    """
    known = list(_read(source).words)
    seen = set(known)
    read, disguised = [], False
    for run in hypothesis.split():
        got = _read(run)
        words_ = [shape if word not in seen and shape in seen else word for word, shape in zip(got.words, got.shapes)]
        if not seen.issuperset(words_) and (letters := _read(run.translate(_LETTER_LIKE)).words) and seen.issuperset(letters):
            words_ = list(letters)
        disguised = disguised or any(m and w not in seen for m, w in zip(got.mixed, words_))
        read += words_
    return known, read, disguised


class _LetterLike(dict):
    """``str.translate`` table reading a symbol that looks like a letter (its look-alikes read as an ASCII letter:
    ``⊤`` as t, ``|`` as l) as that letter; other characters are kept."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        reading = char if _WORD.match(char) else _look_alikes().get(char, char)
        self[code] = folded = reading if reading.isascii() and reading.isalpha() else char
        return folded


_LETTER_LIKE = _LetterLike()
