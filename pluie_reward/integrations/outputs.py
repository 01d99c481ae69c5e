"""What a reward reads from a judge's answers when its template has N answers instead of Yes/No:
the expected rating of a scale, or the probability of one answer of a choice (e.g. the completion
preferred over a reference), in one candidate order or averaged over both.

:class:`~pluie_reward.PluieReward` and :class:`~pluie_reward.serving.client.RemotePluieReward` both score
the fields :meth:`AnswerOutput.fields` builds and turn the records into rewards with :meth:`AnswerOutput.rewards`.
A choice template's first candidate is ``hypothesis`` (the completion; the first answer, e.g. ``"A"``,
prefers it), its second ``alternative``; further answers (``"tie"``) prefer neither. Standard library only.

Example:
    >>> out = AnswerOutput("prob", answer="A", both_orders=True)
    >>> out.fields(["completion"], {"alternative": ["reference"], "source": ["s"]})
    {'source': ['s', 's'], 'hypothesis': ['completion', 'reference'], 'alternative': ['reference', 'completion']}
    >>> records = [{"probs": {"A": 0.7, "B": 0.2, "tie": 0.1}},   # completion in slot A
    ...            {"probs": {"A": 0.4, "B": 0.5, "tie": 0.1}}]   # completion in slot B
    >>> out.rewards(records, 1)   # (p(A) in the first order + p(B) in the second) / 2
    [0.6]
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

READS = ("expected", "prob", "logprob")
FIRST_CANDIDATE, SECOND_CANDIDATE = "hypothesis", "alternative"


@dataclass(frozen=True)
class AnswerOutput:
    """How a reward reads a template with N answers (choices, rating scales).

    Example:
        >>> AnswerOutput("expected", normalize=True, scale=(1, 5)).rewards([{"expected": 4.0}], 1)
        [0.75]
        >>> AnswerOutput("prob")  # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        ValueError: output='prob' reads the probability of one answer: name it, e.g. answer='A' (the first candidate, the completion, is
        preferred).
    """

    read: str = field(metadata={"help": "'expected': the expected rating of a scale template (a dense reward); "
                                        "'prob' / 'logprob': the probability / log-probability of the answer `answer` "
                                        "of a choice template (renormalised over the template's answers)."})
    answer: str | None = field(default=None, metadata={"help": "the answer's label for 'prob'/'logprob' (e.g. 'A': "
                                                               "the completion, in the first slot, is preferred)."})
    normalize: bool = field(default=False, metadata={"help": "'expected' only: map the rating to [0, 1], "
                                                             "(rating - lowest) / (highest - lowest)."})
    both_orders: bool = field(default=False, metadata={
        "help": "choice templates only: score each item twice, completion first (hypothesis) then second "
                "(alternative), and average the answer's value in the first order with its mirror's in the second "
                "(A <-> B; a tie stays a tie). Removes position bias at the cost of two judge passes per completion."})
    scale: tuple[float, float] | None = field(default=None, metadata={
        "help": "lowest and highest rating, for normalize (read from the template when it is known)."})

    def __post_init__(self) -> None:
        if self.read not in READS:
            raise ValueError(f"output must be one of {list(READS)} for a template with N answers, got {self.read!r}.")
        if self.read == "expected":
            if self.answer is not None:
                raise ValueError("answer= names the answer read by output='prob' or 'logprob'; output='expected' reads "
                                 "every answer of the scale: leave answer out.")
            if self.both_orders:
                raise ValueError("both_orders=True swaps the two candidates of a choice template; a rating scale has "
                                 "one candidate: leave it out, or use a choice template with output='prob'.")
        else:
            if self.answer is None:
                raise ValueError(f"output={self.read!r} reads the probability of one answer: name it, e.g. answer='A' "
                                 "(the first candidate, the completion, is preferred).")
            if self.normalize:
                raise ValueError("normalize=True maps an expected rating to [0, 1]; it is for output='expected' "
                                 "(output='prob' is already in [0, 1]).")
        if self.scale is not None:
            low, high = (float(v) for v in self.scale)
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise ValueError(f"scale must be (lowest, highest) with lowest < highest, got {self.scale!r}.")
            object.__setattr__(self, "scale", (low, high))

    # checks ------------------------------------------------------------------------------------
    def check(self, kind: str, labels: Sequence[str], values: Sequence[float] = (), fields: Sequence[str] | None = None,
              template: str = "the judge's template", who: str = "") -> "AnswerOutput":
        """This output checked against a template, with the scale's range filled in.

        Args:
            kind: the template's kind (``"binary"``, ``"choice"``, ``"scale"``).
            labels: its answers' labels, in order; ``values``: a scale's ratings.
            fields: its fields (``None``: unknown, e.g. behind a server).
            template: its name, for errors; ``who``: prefix of errors.

        Returns:
            The output to use (a copy with ``scale`` set from ``values`` for a scale).

        Example:
            >>> AnswerOutput("prob", answer="D").check("choice", ["A", "B", "tie"], template="rev-choice")
            Traceback (most recent call last):
            ...
            ValueError: answer 'D' is not an answer of template 'rev-choice'; its answers are ['A', 'B', 'tie'].
        """
        named = f"template {template!r}" if template != "the judge's template" else template
        if kind == "binary":
            raise ValueError(f"{who}{named} is a Yes/No template: its reward is PLUIE, log p(yes) - log p(no); use "
                             "output='logratio' (the default), 'prob' (p_yes, without answer=), 'clip', 'calibrated' or "
                             f"'verdict' instead of output={self.read!r}" + (" with answer=" if self.answer is not None else "")
                             + ".")
        if self.read == "expected" and kind != "scale":
            raise ValueError(f"{who}output='expected' is the expected rating of a scale template (answers with values, "
                             f"e.g. net-likert); {named} is a choice between {list(labels)}: use output='prob' (or "
                             f"'logprob') with answer= one of them.")
        if self.read != "expected" and self.answer not in labels:
            raise ValueError(f"{who}answer {self.answer!r} is not an answer of {named}; its answers are {list(labels)}.")
        if self.both_orders:
            if kind != "choice":
                raise ValueError(f"{who}both_orders=True swaps the candidates of a choice template; {named} is a "
                                 "rating scale with one candidate: leave both_orders out.")
            if fields is not None and not {FIRST_CANDIDATE, SECOND_CANDIDATE} <= set(fields):
                raise ValueError(f"{who}both_orders=True swaps the fields {FIRST_CANDIDATE!r} and {SECOND_CANDIDATE!r}; "
                                 f"{named} has the fields {list(fields)}: use a choice template with both (rev-choice, "
                                 "net-choice).")
        if self.read == "expected" and values and self.scale is None:
            return dataclasses.replace(self, scale=(min(values), max(values)))
        return self

    def check_record(self, record: Mapping[str, Any], who: str = "") -> "AnswerOutput":
        """:meth:`check` against one record of the judge (e.g. a server's answer, whose template
        is not known here): its keys tell its kind and labels."""
        if "probs" not in record:
            return self.check("binary", ["yes", "no"], who=who)
        kind = "scale" if "expected" in record else "choice"
        checked = self.check(kind, list(record["probs"]), who=who)
        if checked.read == "expected" and checked.normalize and checked.scale is None:
            raise ValueError(f"{who}normalize=True needs the scale's range, which the server did not give (its /health "
                             "has no 'values': an older server?): pass scale=(lowest, highest), e.g. scale=(1, 5) for net-likert.")
        return checked

    # fields and rewards --------------------------------------------------------------------------
    def fields(self, hypotheses: Sequence[str], values: Mapping[str, Sequence[Any]]) -> dict[str, list[Any]]:
        """The template fields to score: the completions in ``hypothesis`` and the other fields;
        with ``both_orders`` the items twice, the second time with ``hypothesis`` and
        ``alternative`` swapped (``2 n`` items: the first order, then the second)."""
        if not self.both_orders:
            return {**{k: list(v) for k, v in values.items()}, FIRST_CANDIDATE: list(hypotheses)}
        if SECOND_CANDIDATE not in values:
            raise ValueError(f"both_orders=True needs the second candidate: map the field {SECOND_CANDIDATE!r} to a "
                             f"column, e.g. fields={{'{SECOND_CANDIDATE}': 'reference'}}.")
        others = list(values[SECOND_CANDIDATE])
        out = {k: list(v) + list(v) for k, v in values.items() if k != SECOND_CANDIDATE}
        out[FIRST_CANDIDATE] = list(hypotheses) + others
        out[SECOND_CANDIDATE] = others + list(hypotheses)
        return out

    def _mirror(self, labels: Sequence[str]) -> str:
        """The answer meaning the same for the completion once the candidates are swapped."""
        k = list(labels).index(self.answer)
        return labels[1 - k] if k < 2 else labels[k]

    def _value(self, record: Mapping[str, Any], label: str | None) -> float:
        if self.read == "expected":
            return float(record["expected"])
        return float(record["probs" if self.read == "prob" else "logprobs"][label])

    def rewards(self, records: Sequence[Mapping[str, Any]], n: int) -> list[float]:
        """One reward per completion from the records of :meth:`fields`' items (``n`` completions).

        ``both_orders``: the mean of the answer's value in the first order and of its mirror's in
        the second (for ``logprob``, the mean log-probability). ``normalize``: ``(rating - lowest) /
        (highest - lowest)``.
        """
        if len(records) != (2 * n if self.both_orders else n):
            raise ValueError(f"expected {2 * n if self.both_orders else n} records for {n} completions, got {len(records)}.")
        first = [self._value(r, self.answer) for r in records[:n]]
        if self.both_orders:
            mirror = self._mirror(list(records[0]["probs"])) if n else self.answer
            second = [self._value(r, mirror) for r in records[n:]]
            return [(a + b) / 2 for a, b in zip(first, second)]
        if self.read == "expected" and self.normalize:
            if self.scale is None:
                raise ValueError("normalize=True needs the scale's range: pass scale=(lowest, highest).")
            low, high = self.scale
            return [(x - low) / (high - low) for x in first]
        return first

    def accept_rate(self, records: Sequence[Mapping[str, Any]], n: int, threshold: float | None = None) -> float:
        """The share of completions the judge accepts: for a choice, the share of its picks (the
        most likely answer) that are ``answer`` (its mirror in the swapped order); for a scale, the
        share whose expected rating is above ``threshold`` (default: the middle of the scale)."""
        if not n:
            return 0.0
        if self.read == "expected":
            cut = threshold if threshold is not None else (sum(self.scale) / 2 if self.scale else 0.0)
            return sum(float(r["expected"]) > cut for r in records[:n]) / n
        hits = sum(r["choice"] == self.answer for r in records[:n])
        if self.both_orders:
            mirror = self._mirror(list(records[0]["probs"]))
            hits += sum(r["choice"] == mirror for r in records[n:])
            return hits / (2 * n)
        return hits / n
