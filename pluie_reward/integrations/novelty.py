"""Copies, disguised copies, novelty and repetition: the one place a text is compared with its
source, and the copy-proof score built on them, the one formula every copy-proof reward uses, local
(:class:`~pluie_reward.ParaphraseReward`...) or remote (the judge server's ``/score`` ``task`` option
and ``--rm-reward paraphrase``, :class:`~pluie_reward.serving.client.RemotePluieReward` with
``task=``, verl's ``compute_score`` with ``output="paraphrase"``, OpenRLHF's ``reward_func``)::

    reward = p_yes × min(1, novelty / target) × (1 − excess repetition) × min(1, length ratio / min_length)

Texts are compared as a reader reads them: :func:`words` folds case, accents, invisible characters, compatibility
forms, small capitals and look-alike letters (Unicode's confusables) and splits at every character that is not a
letter, a mark or a digit; a word mixing scripts that the source does not hold is a disguise (:func:`is_disguised`).
Novelty, copies, repetition and lengths count those words. No torch, transformers or yaml, so the HTTP clients
compute the same values as the local rewards. docs/rewards.md explains the formula and how the targets were chosen.

Example:
    >>> copy_proof_score(0.99, "The cat sleeps.", "THE_CAT_SLEEPS!"), copy_proof_score(0.6, "The cat sleeps.", "A cat is asleep.")
    (0.0, 0.6)
    >>> TASKS["paraphrase"].batch([0.99, 0.6], [True, True], ["The cat sleeps."] * 2,
    ...                           ["The cat sleeps.", "A cat is asleep."]).rewards
    [0.0, 0.6]
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, NamedTuple, Sequence

from .reading import FINAL_MODES, read_completion
from .skeleton import compare, is_invisible, normalize_text, words

__all__ = ["Task", "TASKS", "TEMPLATE_TASKS", "TaskScores", "task_of", "resolve_task", "normalize_text", "is_invisible",
           "is_disguised", "words", "edit_distance", "same_words", "contains_words", "repetition",
           "is_copy", "novelty_score", "copy_proof_novelty", "novelty_credit", "check_sources", "check_blank_sources", "check_target",
           "check_min_length", "length_factor", "copy_proof_score"]


# --- copies and repetition ------------------------------------------------------------------------------
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


def is_disguised(source: str, hypothesis: str) -> bool:
    """Whether ``hypothesis`` holds a word that mixes scripts (:func:`~pluie_reward.integrations.skeleton.mixes_scripts`)
    and is not a word of ``source``: a disguise (a Latin word with an Armenian or Greek letter in it) that no rewriting
    needs. A copy-proof reward gives it 0, as a copy.

    Example:
        >>> is_disguised("The heavy rain.", "The heաvy rain."), is_disguised("Heաvy rain.", "The heաvy rain.")
        (True, False)
    """
    return compare(source, hypothesis)[2]


def same_words(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` up to case, spacing, punctuation and separators, invisible characters, accents and
    look-alikes (:func:`words`): a copy, for a reward that must not pay for copying. Word boundaries count as
    separators: "peer-to-peer" with its hyphens removed ("peertopeer") is the same text.

    Example:
        >>> same_words("The cat sleeps.", "the   cat, SLEEPS")
        True
        >>> same_words("Use peer-to-peer sharing.", "Use peertopeer sharing")
        True
        >>> same_words("The cat sleeps.", "The cat slept.")
        False
    """
    known, read, _ = compare(a, b)
    return "".join(known) == "".join(read)


def contains_words(a: str, b: str) -> bool:
    """Whether ``b`` holds all of ``a``'s words (:func:`words`), in order and side by side,
    with more around them: ``a`` repeated, or followed or preceded by other text. False when ``a``
    has no word or ``b`` is ``a`` itself (:func:`same_words` says that).

    Example:
        >>> contains_words("The cat sleeps.", "The cat sleeps. THE CAT SLEEPS!")
        True
        >>> contains_words("The cat sleeps.", "The cat sleeps."), contains_words("The cat sleeps.", "The cat still sleeps.")
        (False, False)
    """
    part, whole, _ = compare(a, b)
    if not part or len(whole) <= len(part):
        return False
    return any(whole[i : i + len(part)] == part for i in range(len(whole) - len(part) + 1))


def is_copy(source: str, hypothesis: str, *, source_inside_is_copy: bool = True) -> bool:
    """Whether ``hypothesis`` is a copy of ``source``: the same words up to case, spacing, separators,
    invisible characters, accents and look-alikes (:func:`same_words`), a disguise (:func:`is_disguised`)
    or, with ``source_inside_is_copy``, the whole source with more around it.

    Example:
        >>> is_copy("The cat sleeps.", "the_cat  sleeps"), is_copy("The cat sleeps.", "The cat sleeps. The cat sleeps.")
        (True, True)
        >>> is_copy("The cat sleeps.", "The cat sleeps. The cat sleeps.", source_inside_is_copy=False)
        False
    """
    return (same_words(source, hypothesis) or is_disguised(source, hypothesis)
            or (source_inside_is_copy and contains_words(source, hypothesis)))


def repetition(text: str, n: int = 3) -> float:
    """The share of a text's word ``n``-grams (:func:`words`) that repeat an earlier one: 0
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
    tokens = words(text)
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    if not grams:
        return 0.0
    seen: set[tuple[str, ...]] = set()
    repeated = 0
    for gram in grams:
        repeated += gram in seen
        seen.add(gram)
    return repeated / len(grams)


# --- novelty and the copy-proof score -------------------------------------------------------------------
def novelty_score(source: str, hypothesis: str) -> float:
    """1 - normalised edit similarity over :func:`words`: 0 for a copy of the source (disguised or not),
    1 when nothing is kept; 0 for a hypothesis without any word (generating nothing is not novelty).

    Example:
        >>> novelty_score("The cat sleeps.", "The cat sleeps.")
        0.0
        >>> novelty_score("The cat sleeps.", "A cat is asleep.")   # 3 edits over 4 words
        0.75
        >>> novelty_score("The cat sleeps.", "T\u200bh\u200be \u0441at sleeps")  # zero-width spaces, Cyrillic с
        0.0
    """
    known, read, _ = compare(source, hypothesis)
    if not read or "".join(known) == "".join(read):
        return 0.0
    return edit_distance(known, read) / max(len(known), len(read))


def copy_proof_novelty(source: str, hypothesis: str, *, source_inside_is_copy: bool = True) -> float:
    """:func:`novelty_score`, and 0 for every copy :func:`is_copy` finds.

    Example:
        >>> copy_proof_novelty("The cat sleeps.", "The cat sleeps. Dogs bark."), copy_proof_novelty("The cat sleeps.", "A cat is asleep.")
        (0.0, 0.75)
    """
    if is_disguised(source, hypothesis) or (source_inside_is_copy and contains_words(source, hypothesis)):
        return 0.0
    return novelty_score(source, hypothesis)


def novelty_credit(novelty: float, target: float) -> float:
    """``min(1, novelty / target)``: novelty counted up to a target, as a copy-proof reward counts it.

    Example:
        >>> novelty_credit(0.15, 0.3), novelty_credit(0.6, 0.3)
        (0.5, 1.0)
    """
    return min(1.0, novelty / target)


def check_sources(sources: Sequence[Any], who: str = "", where: str = "") -> None:
    """Check that every source (the text a completion must not copy) is a string, and not empty or blank
    (:func:`check_blank_sources`: the one rule of every copy-proof path, local or remote).

    Args:
        sources: one source per completion.
        who: the start of the message (e.g. ``"paraphrase: "``).
        where: where the sources come from (e.g. ``"in column 'src'"``).

    Raises:
        TypeError: ``{who}source {i} {where} must be a string, got {type}.``
        ValueError: an empty or blank source (:func:`check_blank_sources`).

    Example:
        >>> check_sources(["The cat sleeps.", None], "novelty: ", "in column 'src'")
        Traceback (most recent call last):
        ...
        TypeError: novelty: source 1 in column 'src' must be a string, got NoneType.
    """
    for i, source in enumerate(sources):
        if not isinstance(source, str):
            raise TypeError(f"{who}source {i} {where} must be a string, got {type(source).__name__}.")
    check_blank_sources(sources, who, where)


def check_blank_sources(sources: Sequence[Any], who: str = "", where: str = "") -> None:
    """Refuse an empty or blank source string (other values are left to the callers' type checks): novelty, and so a
    copy-proof reward, measures how far a completion moves from its source, and an empty source would make any
    completion novel (a reward for nothing). In-process rewards, ``/score`` with a task, ``/get_reward``, the judge
    server's clients and OpenRLHF's in-process judge all apply it.

    Raises:
        ValueError: ``{who}source {i} {where} is empty or blank: ...``, for the first such item.

    Example:
        >>> check_blank_sources(["The cat sleeps.", " \\n"], "paraphrase: ", "(field 'source')")
        Traceback (most recent call last):
        ...
        ValueError: paraphrase: source 1 (field 'source') is empty or blank: a copy-proof reward measures the completion ...
    """
    for i, source in enumerate(sources):
        if isinstance(source, str) and not source.strip():
            raise ValueError(f"{who}source {i}{' ' + where if where else ''} is empty or blank: a copy-proof reward measures the "
                             "completion against its source, so give the item its source text (or leave the item out).")


def check_target(target: float) -> float:
    """A novelty target (the novelty that earns full credit) as a float, checked to be in (0, 1].

    Example:
        >>> check_target(0.3)
        0.3
    """
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target <= 1:
        raise ValueError(f"target must be a novelty in (0, 1] (the novelty that earns full credit), got {target!r}.")
    return float(target)


@dataclass(frozen=True)
class Task:
    """What a copy-proof reward needs to know about a generation task.

    Attributes:
        name: the task, and the reward's default name (TRL logs ``rewards/<name>/mean``).
        template: the default judge template (a Yes/No template with a ``hypothesis`` field).
        source_field: the template field holding the text the completion must not copy.
        target: the novelty that earns full credit, in (0, 1].
        source_inside_is_copy: a completion holding the whole source with more around it counts as a
            copy (paraphrase, translation: the source repeated, or an untranslated source followed by
            anything); not for revision, where adding a sentence to an unchanged text can be the task.
        min_length: the share of the source's word count at or above which a completion's length costs
            nothing (below: the reward times ratio / min_length); None: no floor (translation, where
            languages differ in length, and revision, where simplifying shortens).
        final: what the reading (:meth:`read`) makes of a completion's final punctuation: ``"source"`` the
            source's, ``"missing"`` the source's where the completion has none, ``"keep"`` as written.
    """

    name: str
    template: str
    source_field: str
    target: float
    source_inside_is_copy: bool = True
    min_length: float | None = None
    final: str = "source"

    def __post_init__(self) -> None:
        if self.final not in FINAL_MODES:
            raise ValueError(f"final must be one of {FINAL_MODES} (what the reading makes of a completion's final "
                             f"punctuation), got {self.final!r}.")

    def read(self, source: str, hypothesis: str) -> str:
        """The reading of a completion that the judge reads and novelty and lengths count
        (:func:`~pluie_reward.integrations.reading.read_completion` with this task's rule for final punctuation).

        Example:
            >>> TASKS["paraphrase"].read("The cat sleeps.", "Paraphrase: A cat is asleep"), TASKS["revision"].read("A b.", "**A c**")
            ('A cat is asleep.', 'A c')
        """
        return read_completion(hypothesis, source, self.final)

    def readings(self, sources: Sequence[Any], hypotheses: Sequence[Any], read: bool = True) -> list[Any]:
        """:meth:`read` of each completion (``read=False``: the completions as given, as a judge with
        ``clean_text=False`` reads them; an item that is not two strings is left for the judge's checks)."""
        pairs = zip(sources, hypotheses)
        return [self.read(s, h) if read and isinstance(s, str) and isinstance(h, str) else h for s, h in pairs]

    def judged(self, fields: Mapping[str, Any], read: bool = True) -> dict[str, Any]:
        """A request's template fields as the judge reads them: ``hypothesis`` replaced by its :meth:`readings` (a
        string is shared by every item; fields of different lengths are left for the judge's checks).

        Example:
            >>> TASKS["paraphrase"].judged({"source": "The cat sleeps.", "hypothesis": ["**A cat is asleep**"]})
            {'source': 'The cat sleeps.', 'hypothesis': ['A cat is asleep.']}
        """
        columns = [fields.get(name) for name in (self.source_field, "hypothesis")]
        lengths = {len(c) for c in columns if isinstance(c, list)}
        if not read or len(lengths) > 1:
            return dict(fields)
        n = lengths.pop() if lengths else 1
        sources, hypotheses = (c if isinstance(c, list) else [c] * n for c in columns)
        read_hypotheses = self.readings(sources, hypotheses)
        return {**fields, "hypothesis": read_hypotheses if isinstance(columns[1], list) else read_hypotheses[0]}

    def novelty(self, source: str, hypothesis: str) -> float:
        """:func:`copy_proof_novelty` with this task's copy rule."""
        return copy_proof_novelty(source, hypothesis, source_inside_is_copy=self.source_inside_is_copy)

    def is_copy(self, source: str, hypothesis: str) -> bool:
        """:func:`is_copy` with this task's copy rule."""
        return is_copy(source, hypothesis, source_inside_is_copy=self.source_inside_is_copy)

    def score(self, p_yes: float, source: str, hypothesis: str, novelty: float | None = None, reading: str | None = None) -> float:
        """:func:`copy_proof_score` with this task's target, copy rule and length floor (``novelty``: the
        completion's :meth:`novelty` of its ``reading``, when already computed).

        Example:
            >>> TASKS["paraphrase"].score(0.9, "The cat sleeps on the mat.", "On the mat, the cat sleeps.")
            0.9
            >>> TASKS["paraphrase"].score(0.9, "The cat sleeps on the mat.", "The cat sleeps.")  # 3 of 6 words: 0.9 × (0.5 / 0.67)
            0.6716417910447761
        """
        return copy_proof_score(p_yes, source, hypothesis, target=self.target, source_inside_is_copy=self.source_inside_is_copy,
                                min_length=self.min_length, novelty=novelty, reading=reading)

    def check_template(self, template: Any, who: str = "") -> None:
        """Check that ``template`` can give this task's reward: a Yes/No template (p_yes) with the fields
        ``hypothesis`` (the completion) and :attr:`source_field`.

        Args:
            template: a :class:`~pluie_reward.core.template.Template` (its ``name``, ``kind`` and ``fields``).
            who: the start of the messages (e.g. ``"paraphrase: "``).

        Raises:
            ValueError: saying what is missing and which template to use.

        Example:
            >>> from pluie_reward.core.template import load_template
            >>> TASKS["revision"].check_template(load_template("para-fs"), who="revision: ")
            Traceback (most recent call last):
            ...
            ValueError: revision: template 'para-fs' has no field 'original' (the revision source the completion ...
        """
        if template.kind != "binary":
            raise ValueError(f"{who}template {template.name!r} does not answer Yes/No; a copy-proof reward reads p_yes of a "
                             f"Yes/No template (e.g. 'para-fs', 'net', 'rev'; the {self.name} task's is {self.template!r}).")
        for field in (self.source_field, "hypothesis"):
            if field not in template.fields:
                what = "the completion" if field == "hypothesis" else f"the {self.name} source the completion must not copy"
                raise ValueError(f"{who}template {template.name!r} has no field {field!r} ({what}); its fields are "
                                 f"{list(template.fields)}: use a template with it (e.g. {self.template!r}), or a Task(...) "
                                 "naming its source field.")

    def batch(self, p_yes: Sequence[float], accepted: Sequence[bool], sources: Sequence[str],
              hypotheses: Sequence[str], read: bool = True) -> "TaskScores":
        """The copy-proof rewards of a batch, their novelty and the metrics a copy-proof reward logs (every
        path, local or remote, computes them here). Copies, novelty and lengths count each completion's reading
        (:meth:`read`, what the judge read), repetition the completion as written.

        Args:
            p_yes: the judge's probability of "Yes" per completion (of its reading).
            accepted: the judge's verdict per completion (PLUIE above the threshold).
            sources: the texts the completions must not copy.
            hypotheses: the completions.
            read: count the readings (False: the completions as given, for a judge with ``clean_text=False``).

        Returns:
            A :class:`TaskScores`; its ``metrics`` (empty for an empty batch) are ``accept_rate``,
            ``copy_rate`` (:func:`is_copy`), ``novelty`` (the mean), ``accepted_novel_rate`` (accepted
            and at or above the target) and, with a length floor, ``short_rate`` (below the floor).

        Raises:
            ValueError: lists of different lengths, or a p_yes outside [0, 1].

        Example:
            >>> scores = TASKS["paraphrase"].batch([0.9, 0.8], [True, True], ["The cat sleeps on the mat."] * 2,
            ...                                    ["On the mat, the cat sleeps.", "THE CAT SLEEPS ON THE MAT!"])
            >>> scores.rewards, scores.novelty
            ([0.9, 0.0], [1.0, 0.0])
            >>> scores.metrics
            {'accept_rate': 1.0, 'copy_rate': 0.5, 'novelty': 0.5, 'accepted_novel_rate': 0.5, 'short_rate': 0.0}
        """
        n = len(hypotheses)
        if not len(p_yes) == len(accepted) == len(sources) == n:
            raise ValueError(f"{self.name}: {len(p_yes)} p_yes, {len(accepted)} verdicts, {len(sources)} sources and "
                             f"{n} completions; give one of each per completion.")
        readings = self.readings(sources, hypotheses, read)
        novelty = [self.novelty(s, r) for s, r in zip(sources, readings)]
        rewards = [self.score(*item) for item in zip(p_yes, sources, hypotheses, novelty, readings)]
        if not n:
            return TaskScores(rewards, novelty, {})
        metrics = {
            "accept_rate": sum(map(bool, accepted)) / n,
            "copy_rate": sum(self.is_copy(s, r) for s, r in zip(sources, readings)) / n,
            "novelty": math.fsum(novelty) / n,
            "accepted_novel_rate": sum(bool(a) and v >= self.target for a, v in zip(accepted, novelty)) / n,
        }
        if self.min_length is not None:
            metrics["short_rate"] = sum(length_factor(s, r, self.min_length) < 1 for s, r in zip(sources, readings)) / n
        return TaskScores(rewards, novelty, metrics)

    def answer_scores(self, answer: Mapping[str, Sequence[Any]], fields: Mapping[str, Any], read: bool = True) -> "TaskScores":
        """:meth:`batch` of a judge's ``/score`` columns and the request's fields: every remote path's copy-proof reward.

        Args:
            answer: the judge's columns ``p_yes`` and ``verdict``.
            fields: this task's :attr:`source_field` and ``hypothesis`` (the completions as written); a string is shared.
            read: as for :meth:`batch`.

        Returns:
            :meth:`batch`'s :class:`TaskScores`.

        Example:
            >>> fields = {"source": "The cat sleeps.", "hypothesis": ["THE CAT SLEEPS!", "A cat is asleep."]}
            >>> TASKS["paraphrase"].answer_scores({"p_yes": [0.9, 0.8], "verdict": [True, True]}, fields)[:2]
            ([0.0, 0.8], [0.0, 0.75])
        """
        n = len(answer["p_yes"])
        sources, hypotheses = ([fields[name]] * n if isinstance(fields[name], str) else fields[name]
                               for name in (self.source_field, "hypothesis"))
        return self.batch(answer["p_yes"], answer["verdict"], sources, hypotheses, read)


class TaskScores(NamedTuple):
    """A batch's copy-proof scores (:meth:`Task.batch`).

    Attributes:
        rewards: the copy-proof reward of each completion (:func:`copy_proof_score`).
        novelty: the novelty of each completion (:func:`copy_proof_novelty`: 0 for a copy).
        metrics: the batch's rates and mean novelty, by name (a reward logs ``<name>/<metric>``).
    """

    rewards: list[float]
    novelty: list[float]
    metrics: dict[str, float]


TASKS: dict[str, Task] = {
    "paraphrase": Task("paraphrase", "para-fs", "source", 0.3, min_length=0.67),
    "translation": Task("translation", "net", "source", 0.3, final="missing"),
    "revision": Task("revision", "rev", "original", 0.05, source_inside_is_copy=False, final="keep"),
}
"""The tasks and their defaults. Targets were chosen from human-written references before any GRPO
run (and re-measured when novelty came to count words only): 0.3 is the 10th percentile of novelty of
PARAPHRASUS' 167 true paraphrases, rounded (TRUE: 0.33; 91 % are at or above 0.3); translation shares it (a real
translation shares only names, numbers and cognates with its source: the NEAT sample's are at 0.85 or more); 0.05
is the 5th percentile of the 600 OneStopEnglish simplifications (SIMP, a revision task: 0.048, 10th 0.062; 95 % at
or above 0.05), one word changed in twenty. The paraphrase length floor, 0.67, is the 5th percentile of the
word-count ratio (shorter over longer) of the 338 STS Benchmark test pairs rated 4 or more (PARAPHRASUS'
``stsbenchmark-test-sts.json``): 95 % of those paraphrases keep at least two thirds of the other's words.
It keeps GRPO from paying for fragments the judge accepts (docs/rewards.md). Paraphrase reads the final
punctuation as the source's, translation only where it is missing (languages end sentences differently),
revision keeps it (a revision may change punctuation): :func:`~pluie_reward.integrations.reading.read_completion`."""


TEMPLATE_TASKS: dict[str, str] = {"para-fs": "paraphrase", "para-direct": "paraphrase", "para-indirect": "paraphrase",
                                   "para-fs-fr": "paraphrase", "net": "translation", "rev": "revision"}
"""The task of each built-in Yes/No template that judges a generation against a source."""


def task_of(template: Any) -> Task | None:
    """The :class:`Task` a built-in template judges (:data:`TEMPLATE_TASKS`), or None.

    Example:
        >>> task_of("rev").source_field, task_of("net-likert")
        ('original', None)
    """
    name = template if isinstance(template, str) else getattr(template, "name", None)
    return TASKS[TEMPLATE_TASKS[name]] if name in TEMPLATE_TASKS else None


def check_min_length(min_length: float | None) -> float | None:
    """A length floor (a share of the source's words) as a float, checked to be in (0, 1], or None.

    Example:
        >>> check_min_length(0.67), check_min_length(None)
        (0.67, None)
    """
    if min_length is None:
        return None
    if isinstance(min_length, bool) or not isinstance(min_length, (int, float)) or not 0 < min_length <= 1:
        raise ValueError(f"min_length must be a share of the source's words in (0, 1], or None, got {min_length!r}.")
    return float(min_length)


def length_factor(source: str, hypothesis: str, min_length: float | None) -> float:
    """``min(1, (words of hypothesis / words of source) / min_length)``: what a completion shorter than
    ``min_length`` of its source keeps of its reward (1 with no floor or a source without a word).

    Example:
        >>> length_factor("The chef cooks every dish with vegetables from his garden.", "With vegetables from his garden.", 0.67)
        0.746...
        >>> length_factor("The cat sleeps.", "Cats sleep.", None), length_factor("The cat sleeps.", "A cat is asleep.", 0.67)
        (1.0, 1.0)
    """
    min_length = check_min_length(min_length)
    if min_length is None:
        return 1.0
    n = len(words(source))
    return 1.0 if n == 0 else min(1.0, len(words(hypothesis)) / n / min_length)


def copy_proof_score(p_yes: float, source: str, hypothesis: str, *, target: float = TASKS["paraphrase"].target,
                     source_inside_is_copy: bool = True, min_length: float | None = None,
                     novelty: float | None = None, reading: str | None = None) -> float:
    """The copy-proof reward of one completion: ``p_yes × min(1, novelty / target) × (1 − excess repetition)``,
    times :func:`length_factor` with a ``min_length`` (the paraphrase task's is 0.67: :data:`TASKS`). Novelty and
    length count the ``reading`` the judge read; repetition the completion as written, so what the reading left
    out can only cost.

    Args:
        p_yes: the judge's probability of "Yes" (``sigmoid(PLUIE)``), in [0, 1].
        source: the text the completion must not copy.
        hypothesis: the completion.
        target: the novelty that earns full credit, in (0, 1].
        source_inside_is_copy: see :class:`Task`.
        min_length: see :class:`Task` (default None: no length floor).
        novelty: the reading's :func:`copy_proof_novelty` with this copy rule, when already computed.
        reading: what the judge read of the completion (:meth:`Task.read`; default: the completion itself).

    Returns:
        The reward, in [0, 1]: 0 for a copy (:func:`is_copy`) and for a completion without a word;
        ``p_yes`` for a completion at or above the target that does not repeat itself more than the
        source (and is at least ``min_length`` of its length).

    Raises:
        ValueError: ``p_yes`` outside [0, 1] or not a number, a bad ``target`` or ``min_length``.

    Example:
        >>> copy_proof_score(0.9, "The cat sleeps on the mat.", "On the mat, the cat sleeps.")  # novelty 0.5 >= 0.3
        0.9
        >>> # novelty 1/6 (one word of six): 0.9 × (1/6) / 0.3
        >>> round(copy_proof_score(0.9, "The cat sleeps on the mat.", "The cat sleeps on a mat."), 3)
        0.5
    """
    if isinstance(p_yes, bool) or not isinstance(p_yes, (int, float)) or not 0.0 <= p_yes <= 1.0:
        raise ValueError(f"p_yes must be a probability in [0, 1], got {p_yes!r}.")
    target = check_target(target)
    check_min_length(min_length)
    reading = hypothesis if reading is None else reading
    if novelty is None:
        novelty = copy_proof_novelty(source, reading, source_inside_is_copy=source_inside_is_copy)
    if novelty == 0.0:
        return 0.0
    excess = max(0.0, repetition(hypothesis) - repetition(source))
    return p_yes * novelty_credit(novelty, target) * (1.0 - excess) * length_factor(source, reading, min_length)


def resolve_task(task: "str | Task") -> "Task":
    """A :class:`Task` from its name in :data:`TASKS`, or the Task itself.

    Raises:
        ValueError: an unknown name. TypeError: neither a name nor a Task.

    Example:
        >>> resolve_task("revision").name
        'revision'
    """
    if isinstance(task, str):
        if task.strip().lower() not in TASKS:  # names compare case-insensitively, as on every path (serving/protocol.choice)
            raise ValueError(f"unknown task {task!r}; use one of {list(TASKS)} (case does not matter) or a Task(...).")
        return TASKS[task.strip().lower()]
    if not isinstance(task, Task):
        raise TypeError(f"task must be a task name ({list(TASKS)}) or a Task, not {type(task).__name__}.")
    return task
