"""Synthetic paraphrase pairs for demonstrations and smoke runs (no substitute for real corpora): templated English
sentences ("Alice bought a used car in Lyon last week.") and edits of them whose label is known by construction.

Paraphrases (``True``) combine meaning-preserving edits (synonymous verb, reworded object, time in front, passive).
Non-paraphrases (``False``) change one fact (agent, roles swapped as in PAWS, antonymous verb, negation, time,
place), often with a meaning-preserving edit on top, so that word overlap alone does not give the label away.

Example:
    >>> pairs = make_pairs(4, seed=0)
    >>> sorted(pairs[0])
    ['edit', 'hypothesis', 'label', 'source']
    >>> [p["label"] for p in pairs]
    [True, False, True, False]
"""

from __future__ import annotations

import random
from typing import Any

PEOPLE = ("Alice", "Bob", "Carla", "David", "Emma", "Farid", "Grace", "Hugo", "Ines", "Jonas", "Kenji", "Lena",
          "the doctor", "the teacher", "the mayor", "my neighbour", "the manager", "the old fisherman")
PLACES = ("in Lyon", "in Boston", "at the station", "near the river", "at the market", "in the village",
          "at the airport", "in the library", "behind the school", "at the harbour")
TIMES = ("yesterday", "last week", "on Monday", "this morning", "in 2019", "two days ago", "on Friday evening",
         "last summer", "at noon", "in March")
# (past, participle, synonym past, synonym participle, antonym past, object phrases with a reworded form)
THING_VERBS = (
    ("bought", "bought", "purchased", "purchased", "sold", (("a used car", "a second-hand car"), ("the old piano", "the aged piano"),
                                                            ("a small house", "a little house"))),
    ("repaired", "repaired", "fixed", "fixed", "broke", (("the kitchen table", "the table in the kitchen"), ("a bicycle", "a bike"),
                                                         ("the broken radio", "the radio that was broken"))),
    ("started", "started", "began", "begun", "finished", (("the project", "the project"), ("a new novel", "a new book"),
                                                          ("the meeting", "the meeting"))),
    ("opened", "opened", "unlocked", "unlocked", "closed", (("the front door", "the door at the front"), ("the shop", "the store"),
                                                            ("the gate", "the gate"))),
    ("won", "won", "captured", "captured", "lost", (("the final match", "the last match"), ("the chess game", "the game of chess"),
                                                    ("the election", "the vote"))),
)
# verbs whose object is a person: swapping the two people changes the meaning
PERSON_VERBS = (("called", "called", "phoned", "phoned"), ("helped", "helped", "assisted", "assisted"),
                ("met", "met", "saw", "seen"), ("thanked", "thanked", "expressed gratitude to", "expressed gratitude to"),
                ("visited", "visited", "went to see", "gone to see"), ("hired", "hired", "employed", "employed"))
BASE = {"bought": "buy", "repaired": "repair", "started": "start", "opened": "open", "won": "win", "called": "call",
        "helped": "help", "met": "meet", "thanked": "thank", "visited": "visit", "hired": "hire",
        "purchased": "purchase", "fixed": "fix", "began": "begin", "unlocked": "unlock", "captured": "capture",
        "phoned": "phone", "assisted": "assist", "saw": "see", "went to see": "go to see", "employed": "employ",
        "expressed gratitude to": "express gratitude to"}


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


class _Fact:
    """One event: who did what to what/whom, where and when."""

    def __init__(self, rng: random.Random) -> None:
        self.agent = rng.choice(PEOPLE)
        self.person_object = rng.random() < 0.45
        if self.person_object:
            self.verb = rng.choice(PERSON_VERBS)
            self.obj = rng.choice([p for p in PEOPLE if p != self.agent])
            self.obj_alt = self.obj
        else:
            self.verb = rng.choice(THING_VERBS)
            self.obj, self.obj_alt = rng.choice(self.verb[5])
        self.place, self.time = rng.choice(PLACES), rng.choice(TIMES)

    def render(self, agent: str | None = None, obj: str | None = None, verb: str | None = None, participle: str | None = None,
               place: str | None = None, time: str | None = None, front_time: bool = False, passive: bool = False,
               negate: bool = False) -> str:
        agent, obj = agent or self.agent, obj or self.obj
        verb, participle = verb or self.verb[0], participle or self.verb[1]
        place, time = place or self.place, time or self.time
        if passive:
            core = f"{obj} was {'not ' if negate else ''}{participle} by {agent} {place}"
        elif negate:
            core = f"{agent} did not {BASE[verb]} {obj} {place}"
        else:
            core = f"{agent} {verb} {obj} {place}"
        return (f"{_cap(time)}, {core}." if front_time else f"{_cap(core)} {time}.")


def _paraphrase(f: _Fact, rng: random.Random, source: str) -> tuple[str, str]:
    edits = rng.sample(["synonym", "object", "front", "passive"], k=rng.choice((1, 2, 2, 3)))
    kwargs: dict[str, Any] = {"front_time": "front" in edits, "passive": "passive" in edits}
    if "synonym" in edits:
        kwargs.update(verb=f.verb[2], participle=f.verb[3])
    if "object" in edits and f.obj_alt != f.obj:
        kwargs["obj"] = f.obj_alt
    text = f.render(**kwargs)
    if text == source:  # the edits changed nothing visible: use the passive voice as well
        kwargs["passive"] = True
        edits = sorted(set(edits) | {"passive"})
        text = f.render(**kwargs)
    return text, "+".join(sorted(edits))


def _non_paraphrase(f: _Fact, rng: random.Random) -> tuple[str, str]:
    options = ["agent", "time", "place", "negation"] + (["swap", "swap"] if f.person_object else ["antonym", "antonym"])
    change = rng.choice(options)
    kwargs: dict[str, Any] = {"front_time": rng.random() < 0.4}
    if rng.random() < 0.4:  # a meaning-preserving edit on top
        kwargs.update(verb=f.verb[2], participle=f.verb[3])
    changed = {  # the fact each change edits (drawn only for the change chosen)
        "agent": lambda: {"agent": rng.choice([p for p in PEOPLE if p not in (f.agent, f.obj)])},
        "swap": lambda: {"agent": f.obj, "obj": f.agent},
        "antonym": lambda: {"verb": f.verb[4], "participle": f.verb[4]},
        "negation": lambda: {"negate": True},
        "time": lambda: {"time": rng.choice([t for t in TIMES if t != f.time])},
        "place": lambda: {"place": rng.choice([p for p in PLACES if p != f.place])},
    }
    kwargs.update(changed[change]())
    if rng.random() < 0.3:
        kwargs["passive"] = True
    return f.render(**kwargs), change


def make_pairs(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` synthetic (source, hypothesis) pairs, alternately paraphrases and non-paraphrases.

    Args:
        n: number of pairs.
        seed: random seed (the same seed gives the same pairs).

    Returns:
        Dicts with ``source``, ``hypothesis``, ``label`` (bool) and ``edit`` (what was changed).

    Example:
        >>> p = make_pairs(2, seed=3)[1]
        >>> p["label"], p["source"] != p["hypothesis"]
        (False, True)
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}.")
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        fact = _Fact(rng)
        source = fact.render(front_time=rng.random() < 0.3)
        label = i % 2 == 0
        hypothesis, edit = _paraphrase(fact, rng, source) if label else _non_paraphrase(fact, rng)
        pairs.append({"source": source, "hypothesis": hypothesis, "label": label, "edit": edit})
    return pairs
