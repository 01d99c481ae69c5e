"""Rule-made hard negatives: a sentence with one meaning flip and (nearly) every other word kept.

A small judge learns that "most words shared" means "paraphrase"; these pairs teach it that one word can change
the meaning. Each rule (:data:`RULE_FUNCTIONS`: :func:`negate`, :func:`antonym`, :func:`change_number`,
:func:`change_date`, :func:`change_entity`, :func:`swap_roles`, :func:`add_content`) edits one thing and returns
``None`` when the sentence has nothing it can edit. The word lists are this package's (Apache-2.0), in ``hard_negatives.json`` beside it.

Example:
    >>> flip("The museum will stay closed until Monday.", "antonym")
    'The museum will remain open until Monday.'
    >>> flip("The museum will stay closed until Monday.", "negation")
    'The museum will not stay closed until Monday.'
    >>> flip("The dog chased the cat.", "swap")
    'The cat chased the dog.'
    >>> flip("The dog chased the cat.", "addition")
    'The dog chased the cat. Note: the meaning of the sentence is unchanged.'
"""

from __future__ import annotations

import json
import random
import re
from importlib import resources
from typing import Any, Callable, Iterable, Sequence

MEANING_RULES = ("negation", "antonym", "number", "date", "entity", "swap")
"""The rules that change what the sentence says (the probe's ``meaning_flip`` family)."""
RULES = MEANING_RULES + ("addition",)
"""Every rule: the meaning flips and ``addition`` (the sentence and more)."""

_WORDS = json.loads((resources.files("pluie_reward.tools.tune") / "hard_negatives.json").read_text(encoding="utf-8"))
AUXILIARIES: tuple[str, ...] = tuple(_WORDS["auxiliaries"])
_CONTRACTED: dict[str, str] = _WORDS["contracted"]
ANTONYMS: tuple[tuple[str, str], ...] = tuple(map(tuple, _WORDS["antonyms"]))
"""(word, antonym) pairs, both directions used; the first pair listed wins ("closed" -> "open", not "opened")."""
_ANTONYM: dict[str, str] = {k: v for a, b in reversed(ANTONYMS) for k, v in ((a, b), (b, a))}  # the earliest pair wins
_STAY: dict[str, str] = _WORDS["stay"]
NUMBER_WORDS: tuple[str, ...] = tuple(_WORDS["number_words"])
MONTHS: tuple[str, ...] = tuple(_WORDS["months"])
WEEKDAYS: tuple[str, ...] = tuple(_WORDS["weekdays"])
RELATIVE_DAYS: dict[str, str] = _WORDS["relative_days"]
ENTITIES: dict[str, tuple[str, ...]] = {kind: tuple(names) for kind, names in _WORDS["entities"].items()}
ADDED_CLAUSES: tuple[str, ...] = tuple(_WORDS["added_clauses"])
"""What a small policy appends to a paraphrase to earn novelty (seen in GRPO runs of examples/grpo_paraphrase.py)."""
ADDED_SENTENCES: tuple[str, ...] = tuple(_WORDS["added_sentences"])
_KIND = {name: kind for kind, names in ENTITIES.items() for name in names}
_TOKEN = re.compile(r"[A-Za-z]+(?:'[a-z]+)?|\d[\d,]*(?:\.\d+)?")


def _match_case(word: str, like: str) -> str:
    if like.isupper() and len(like) > 1:
        return word.upper()
    return word[:1].upper() + word[1:] if like[:1].isupper() else word


def _replace_at(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def _tokens(text: str) -> list[re.Match[str]]:
    return list(_TOKEN.finditer(text))


def negate(text: str, rng: random.Random) -> str | None:
    """Remove the first negation, else insert "not" after the first auxiliary (None: neither is there).

    Example:
        >>> negate("Prices did not go up.", random.Random(0))
        'Prices did go up.'
        >>> negate("She can't swim.", random.Random(0))
        'She can swim.'
    """
    for m in _tokens(text):
        low = m.group().lower()
        if low in _CONTRACTED:
            return _replace_at(text, m.start(), m.end(), _match_case(_CONTRACTED[low], m.group()))
        if low in ("not", "never") and m.start() > 0:
            start = m.start() - 1 if text[m.start() - 1] == " " else m.start()
            return text[:start] + text[m.end():]
    tokens = _tokens(text)
    for i, m in enumerate(tokens[1:-1], start=1):  # not the first word: "Can you ...?" is a question
        low, after = m.group().lower(), tokens[i + 1].group().lower()
        if low in ("has", "have", "had") and not (after == "been" or after.endswith(("ed", "en"))):
            continue  # "have" as the main verb: "I have not the same problem" is not English
        if low in AUXILIARIES:
            return _replace_at(text, m.end(), m.end(), " not")
    return None


def antonym(text: str, rng: random.Random) -> str | None:
    """One word (at random among those with an antonym) swapped for it; "stay" and "remain" exchanged as well.

    Example:
        >>> antonym("Profits rose in March.", random.Random(0))
        'Profits fell in March.'
    """
    tokens = _tokens(text)
    candidates = [m for m in tokens if m.group().lower() in _ANTONYM]
    if not candidates:
        return None
    chosen = rng.choice(candidates)
    for m in sorted([chosen] + [t for t in tokens if t.group().lower() in _STAY], key=lambda t: -t.start()):
        table = _ANTONYM if m is chosen else _STAY
        text = _replace_at(text, m.start(), m.end(), _match_case(table[m.group().lower()], m.group()))
    return text


def change_number(text: str, rng: random.Random) -> str | None:
    """One number (digits or a number word) replaced by a different one (years are left to :func:`change_date`).

    Example:
        >>> change_number("The factory will hire 200 workers.", random.Random(0)) != "The factory will hire 200 workers."
        True
        >>> change_number("It has two doors.", random.Random(1))
        'It has eleven doors.'
    """
    candidates = [m for m in _tokens(text) if (m.group()[0].isdigit() and not _is_year(m.group()))
                  or m.group().lower() in NUMBER_WORDS[:15]]
    if not candidates:
        return None
    m = rng.choice(candidates)
    word = m.group()
    if word[0].isdigit():
        digits = word.replace(",", "")
        value = float(digits)
        new_value = value * rng.choice((2, 3, 0.5)) if value > 2 else value + rng.randint(2, 9)
        if "." in digits:
            new = f"{new_value:.{len(digits.split('.')[1])}f}"
        else:
            new = f"{int(new_value):,}" if "," in word else str(int(new_value))
        if new == word:
            new = str(int(value) + 1)
    else:
        new = _match_case(rng.choice([w for w in NUMBER_WORDS[:15] if w != word.lower()]), word)
    return _replace_at(text, m.start(), m.end(), new)


def _is_year(word: str) -> bool:
    return word.isdigit() and len(word) == 4 and 1800 <= int(word) <= 2099


def change_date(text: str, rng: random.Random) -> str | None:
    """A month, weekday, year or relative day ("yesterday") replaced by another.

    Example:
        >>> change_date("It opened on Monday.", random.Random(0)) in {f"It opened on {d}." for d in WEEKDAYS[1:]}
        True
        >>> change_date("He left yesterday.", random.Random(0))
        'He left tomorrow.'
    """
    candidates = [m for m in _tokens(text) if m.group() in MONTHS or m.group() in WEEKDAYS or _is_year(m.group())
                  or m.group().lower() in RELATIVE_DAYS]
    if m := (rng.choice(candidates) if candidates else None):
        word = m.group()
        if word in MONTHS or word in WEEKDAYS:
            new = rng.choice([w for w in (MONTHS if word in MONTHS else WEEKDAYS) if w != word])
        elif _is_year(word):
            new = str(int(word) + rng.choice((-3, -2, -1, 1, 2, 3)))
        else:
            new = _match_case(RELATIVE_DAYS[word.lower()], word)
        return _replace_at(text, m.start(), m.end(), new)
    return None


def change_entity(text: str, rng: random.Random) -> str | None:
    """A known name (person, place, organisation) replaced by another of the same kind.

    Example:
        >>> change_entity("Microsoft bought a company in Texas.", random.Random(0)) != "Microsoft bought a company in Texas."
        True
    """
    candidates = [m for m in _tokens(text) if m.group() in _KIND]
    if not candidates:
        return None
    m = rng.choice(candidates)
    present = {t.group() for t in candidates}
    new = rng.choice([n for n in ENTITIES[_KIND[m.group()]] if n not in present])
    return _replace_at(text, m.start(), m.end(), new)


_DET = r"(?:[Tt]he|[Aa]n?|[Hh]is|[Hh]er|[Tt]heir|[Ii]ts|[Oo]ur|[Mm]y)"
_NP = _DET + r"\s+(?:[a-z]+\s+)?[a-z]+"
_NAME = r"[A-Z][a-z]+"
_END = (r"(?=\s*(?:[.,;:!?]|$)|\s+(?:in|on|at|for|with|after|before|from|to|during|because|and|but|last|yesterday|today|"
        r"tomorrow|this|next|every|each|until|since|by|when|while|as|so)\b)")
_PATTERNS = (  # the two sides (groups a and b) of an asymmetric relation
    re.compile(r"\bfrom\s+(?P<a>" + _NAME + r"|" + _NP + r")\s+to\s+(?P<b>" + _NAME + r"|" + _NP + r")" + _END),
    re.compile(r"(?P<a>" + _NAME + r"|" + _NP + r")\s+(?:is|was|are|were)\s+(?:[a-z]+er|more\s+[a-z]+|less\s+[a-z]+)\s+than\s+"
               r"(?P<b>" + _NAME + r"|" + _NP + r")" + _END),
    re.compile(r"^(?P<a>" + _NP + r"|" + _NAME + r")\s+(?!(?:is|was|has|does)\b)(?:[a-z]+ed|[a-z]+s|met|saw|told|beat|hit|caught|"
               r"taught|paid|sold|bought|won|chose|hit|fought|led|sent|gave)\s+(?P<b>" + _NP + r"|" + _NAME + r")" + _END),
)


def swap_roles(text: str, rng: random.Random) -> str | None:
    """The two sides of an asymmetric relation exchanged: subject and object of a simple transitive clause at
    the start, "from A to B", "A is ...er than B", or else two known people's names.

    Example:
        >>> swap_roles("Alice thanked Bob for the gift.", random.Random(0))
        'Bob thanked Alice for the gift.'
        >>> swap_roles("The train runs from Paris to Lyon.", random.Random(0))
        'The train runs from Lyon to Paris.'
        >>> swap_roles("The dog chased the old cat in the garden.", random.Random(0))
        'The old cat chased the dog in the garden.'
    """
    for pattern in _PATTERNS:
        m = pattern.search(text)
        if m and m.group("a").lower() != m.group("b").lower():
            a, b = m.group("a"), m.group("b")
            return text[:m.start("a")] + _as(b, a) + text[m.end("a"):m.start("b")] + _as(a, b) + text[m.end("b"):]
    people = [m for m in _tokens(text) if _KIND.get(m.group()) == "person"]
    if len(people) >= 2 and people[0].group() != people[1].group():
        a, b = people[0], people[1]
        return text[:a.start()] + b.group() + text[a.end():b.start()] + a.group() + text[b.end():]
    return None


def _as(phrase: str, like: str) -> str:
    """``phrase`` moved to where ``like`` was: a name keeps its case, a noun phrase takes ``like``'s."""
    if phrase[:1].isupper() and not re.fullmatch(_DET, phrase.split()[0]):  # a name
        return phrase
    return _match_case(phrase[:1].lower() + phrase[1:], like)


def append(text: str, addition: str) -> str:
    """``text`` (stripped) with ``addition``: a clause (starting with a comma or a space) before the final
    punctuation, a sentence after it.

    Example:
        >>> append("It rained.", ", which surprised everyone"), append("It rained", "Nobody knows why.")
        ('It rained, which surprised everyone.', 'It rained. Nobody knows why.')
    """
    body = text.strip()
    if addition[:1] in (",", " "):
        end = len(body.rstrip(".!?"))
        return body[:end] + addition + (body[end:] or ".")
    return body + ("" if body[-1:] in (".", "!", "?") else ".") + " " + addition


def add_content(text: str, rng: random.Random) -> str | None:
    """The whole sentence with a clause or a sentence added that it does not say (:data:`ADDED_CLAUSES`,
    :data:`ADDED_SENTENCES`; :func:`append`).

    Example:
        >>> add_content("The bakery sells vegan cakes.", random.Random(1))
        'The bakery sells vegan cakes, according to local officials.'
        >>> add_content("   ", random.Random(0)) is None
        True
    """
    if not _tokens(text):
        return None
    return append(text, rng.choice(ADDED_CLAUSES if rng.random() < 0.5 else ADDED_SENTENCES))


RULE_FUNCTIONS: dict[str, Callable[[str, random.Random], "str | None"]] = {
    "negation": negate, "antonym": antonym, "number": change_number, "date": change_date, "entity": change_entity,
    "swap": swap_roles, "addition": add_content,
}


def flip(text: str, rule: str, rng: random.Random | None = None) -> str | None:
    """``text`` with its meaning flipped by ``rule``, or None if the rule has nothing to edit in it.

    Args:
        text: an English sentence.
        rule: ``negation``, ``antonym``, ``number``, ``date``, ``entity``, ``swap`` or ``addition``.
        rng: the random choices (default: ``random.Random(0)``).

    Returns:
        The edited sentence (different from ``text``), or None.
    """
    if rule not in RULE_FUNCTIONS:
        raise ValueError(f"unknown hard-negative rule {rule!r}: use one of {', '.join(RULES)}.")
    out = RULE_FUNCTIONS[rule](text, rng or random.Random(0))
    return out if out is not None and out != text else None


def hard_negatives(sentences: Iterable[str], n: int, seed: int = 0,
                   rules: Sequence[str] = RULES) -> list[dict[str, Any]]:
    """Up to ``n`` hard negatives made from ``sentences``: for each sentence in a seeded order, the rules are
    tried least used first, so every rule that applies is represented.

    Args:
        sentences: the sentences to flip (e.g. the hypotheses of known paraphrase pairs).
        n: how many negatives at most.
        seed: random seed.
        rules: the rules to use.

    Returns:
        Dicts with ``sentence`` (the original), ``flipped`` and ``rule``.

    Example:
        >>> [r["rule"] for r in hard_negatives(["The shop opened on Monday.", "Alice met Bob."], 2)]
        ['addition', 'entity']
    """
    rng = random.Random(seed)
    pool = list(dict.fromkeys(sentences))
    rng.shuffle(pool)
    used = {rule: 0 for rule in rules}
    out: list[dict[str, Any]] = []
    for sentence in pool:
        if len(out) >= n:
            break
        for rule in sorted(rules, key=lambda r: (used[r], rng.random())):
            flipped = flip(sentence, rule, rng)
            if flipped is not None:
                used[rule] += 1
                out.append({"sentence": sentence, "flipped": flipped, "rule": rule})
                break
    return out
