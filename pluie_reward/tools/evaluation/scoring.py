"""Scoring :class:`Condition` s on items: the tools' one scoring loop (the tasks of :mod:`.tasks`, PARAPHRASUS in
:mod:`.paraphrasus`, ``pluie-reward calibrate``, the tuner's teacher targets, the probe and ``pluie-reward score``),
in chunks of about one forward batch, with the tools' progress line, resuming from a store (a
:class:`~.store.ScoreStore`, or ``score``'s output file) when given one.

Example:
    >>> S, H = ["The cat sleeps.", "Prices rose."], ["A cat is asleep.", "Prices fell."]
    >>> lines = score_items(judge, [Condition(JUDGE_ROW, "para-fs", {"source": S, "hypothesis": H})],
    ...                     [{"i": i, "h": ""} for i in range(len(S))], progress=False)
    >>> sorted(lines[0]["scores"])
    ['PLUIE']
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ...core.template import load_template
from ...integrations.outputs import SECOND_CANDIDATE
from ..shared import Progress, auto_chunk_size, relocate
from .baselines import levenshtein_similarity
from .store import ScoreStore

JUDGE_ROW = "PLUIE"  # the judge's row in results and tables when a run scores one condition


@dataclass(frozen=True)
class Condition:
    """One way of asking the judge, scored on every item: a row of the result table.

    Args:
        name: the row's name in results ("PLUIE", "Rev-PLUIE w.g.").
        template: template name, YAML path or :class:`~pluie_reward.Template`.
        fields: template field -> one value per item (or one string for all); for preferences,
            every field but the hypothesis (the candidates A and B are the hypothesis).
        columns: template field -> where its values come from (shown in the report).
        row, variant: the paper's row ("Rev-PLUIE") and column group ("" or "w.g.").
        options: further keywords of ``Judge.score`` (``pluie-reward score``: ``details``, ``threshold``,
            ``truncate``; a score is then the item's record).

    Example:
        >>> Condition("Para-PLUIE", "para-fs", {"source": ["The cat sleeps."]}).row
        'Para-PLUIE'
    """

    name: str
    template: Any = "para-fs"
    fields: Mapping[str, Any] = field(default_factory=dict)
    columns: Mapping[str, str] = field(default_factory=dict)
    row: str = ""
    variant: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.row:
            object.__setattr__(self, "row", self.name)

    @property
    def template_name(self) -> str:
        return load_template(self.template).name

    def describe(self) -> dict[str, Any]:
        """What the report shows about this condition (and, for a choice template, its answers' labels)."""
        template = load_template(self.template)
        out = {"name": self.name, "row": self.row, "variant": self.variant, "template": template.name,
               "kind": template.kind, "columns": dict(self.columns)}
        if template.kind == "choice":
            out["labels"] = list(template.labels)
        return out

    def value(self, name: str, i: int) -> Any:
        v = self.fields[name]
        return v if isinstance(v, str) or v is None else v[i]


def reference_field(template: Any, fields: Mapping[str, Any], reference: str | None = None) -> str:
    """The field baselines compare the hypothesis with: ``reference``, else "gold" when given, else
    the template's first non-hypothesis field.

    Example:
        >>> reference_field("para-fs", {"source": [], "hypothesis": []})
        'source'
    """
    if reference is not None:
        if reference not in fields:
            raise ValueError(f"reference field {reference!r} is not among the inputs {sorted(fields)}.")
        return reference
    if fields.get("gold") is not None:
        return "gold"
    for name in load_template(template).fields:
        if name not in ("hypothesis", SECOND_CANDIDATE):
            return name
    raise ValueError("the template has no field besides 'hypothesis' for the baselines to compare with; pass reference=.")


def _length(fields: Mapping[str, Any]) -> int:
    lengths = {k: len(v) for k, v in fields.items() if v is not None and not isinstance(v, str)}
    if not lengths:
        raise ValueError("at least one field must be a list of strings.")
    if len(set(lengths.values())) != 1:
        raise ValueError(f"fields differ in length: {lengths}.")
    return next(iter(lengths.values()))


def _broadcast(value: Any, n: int) -> list[str]:
    return [value] * n if isinstance(value, str) else list(value)


def score_in_chunks(
    judge: Any, template: Any, fields: Mapping[str, Any], n: int, *, chunk_size: int | None = None,
    desc: str = "scoring", progress: bool = True, units: str = "items", bar: Progress | None = None,
) -> list[float]:
    """``judge.score`` over ``n`` items in chunks (default: about one forward batch), with a progress
    line (:class:`~pluie_reward.tools.shared.Progress`, or ``bar`` when the caller's line counts more work);
    list fields are sliced, string fields broadcast.

    Example:
        >>> S, H = ["The cat sleeps.", "Prices rose."], ["A cat is asleep.", "Prices fell."]
        >>> score_in_chunks(judge, "para-fs", {"source": S, "hypothesis": H}, len(S), chunk_size=1, progress=False)
        [..., ...]
    """
    condition = Condition(JUDGE_ROW, template, fields)
    lines = score_items(judge, [condition], [{"i": i, "h": ""} for i in range(n)], chunk_size=chunk_size,
                        progress=progress, desc=desc, units=units, bar=bar)
    return [line["scores"][JUDGE_ROW] for line in lines]


def edit_distances(references: Sequence[str], hypotheses: Sequence[str]) -> list[float]:
    """Normalised character edit distance (1 - Levenshtein similarity) of each pair, for the
    score-against-edit-distance plots (ParaPLUIE Fig. 2).

    Example:
        >>> edit_distances(["kitten"], ["sitting"])
        [0.4285714285714286]
    """
    return [1.0 - levenshtein_similarity(str(r), str(h)) for r, h in zip(references, hypotheses)]


# scoring ----------------------------------------------------------------------------------------
def choice_preference(labels: Sequence[str], label: str) -> str:
    """The preference a choice template's answer stands for: its first answer prefers the candidate
    in ``hypothesis`` (A), its second the one in ``alternative`` (B), any other (e.g. "tie") neither.

    Example:
        >>> [choice_preference(["A", "B", "tie"], x) for x in ("A", "B", "tie")]
        ['A', 'B', 'tie']
    """
    k = list(labels).index(label)
    return "A" if k == 0 else "B" if k == 1 else "tie"


def check_choice_condition(condition: Condition, pairs: bool) -> None:
    """A choice template fits a preference task whose candidates fill its two slots, and nothing else."""
    template = load_template(condition.template)
    if template.kind != "choice":
        return
    if not pairs:
        raise ValueError(f"{condition.name}: template {template.name!r} chooses between two candidates; evaluate it "
                         "with a preference task (pluie-reward eval preference), not a classification.")
    if "hypothesis" not in template.fields or SECOND_CANDIDATE not in template.fields:
        raise ValueError(f"{condition.name}: choice template {template.name!r} needs the fields 'hypothesis' (candidate A) "
                         f"and {SECOND_CANDIDATE!r} (candidate B); its fields are {list(template.fields)}.")
    given = [f for f in ("hypothesis", SECOND_CANDIDATE) if f in condition.fields]
    if given:
        raise ValueError(f"{condition.name}: the candidates A and B fill {given} of template {template.name!r}; "
                         "do not give them as fields too.")


def _score_condition(judge: Any, condition: Condition, index: list[int], pairs: tuple[Sequence[str], Sequence[str]] | None,
                     rows: Sequence[str]) -> list[Any]:
    """One ``Judge.score`` call for the items ``index``; with ``pairs`` the call holds A and B of each
    item next to each other (A0 B0 A1 B1 ...), so their shared prefix is computed once, or, for a choice
    template, A and B of an item in one prompt: per item the answers' log-probabilities and the predicted
    A/B/tie (the most likely answer)."""
    template = load_template(condition.template)
    choice = template.kind == "choice" and pairs is not None
    copies = 2 if pairs is not None and not choice else 1
    values = {name: v if v is None or isinstance(v, str) else [v[i] for i in index for _ in range(copies)]
              for name, v in condition.fields.items()}
    if choice:
        values["hypothesis"], values[SECOND_CANDIDATE] = [pairs[0][i] for i in index], [pairs[1][i] for i in index]
    elif pairs is not None:
        values["hypothesis"] = [c for i in index for c in (pairs[0][i], pairs[1][i])]
    try:
        scores = judge.score(condition.template, **{**condition.options, **({"details": True} if choice else {})}, **values)
    except (TypeError, ValueError) as err:
        where = f"{condition.name}: " if condition.name else ""  # a nameless condition (pluie-reward score) adds none
        raise type(err)(where + relocate(str(err), [rows[i] for i in index], copies)) from None
    if choice:
        return [{"logprobs": r["logprobs"], "choice": choice_preference(template.labels, r["choice"])} for r in scores]
    return list(scores) if pairs is None else [[a, b] for a, b in zip(scores[0::2], scores[1::2])]


def score_items(
    judge: Any,
    conditions: Sequence[Condition],
    items: Sequence[dict[str, Any]],
    *,
    pairs: tuple[Sequence[str], Sequence[str]] | None = None,
    baselines: Mapping[str, Callable[[list[int]], list[Any]]] | None = None,
    extras: Mapping[str, Callable[[list[int]], list[Any]]] | None = None,
    store: ScoreStore | None = None,
    chunk_size: int | None = None,
    progress: bool = True,
    desc: str = "scoring",
    units: str = "items",
    bar: Progress | None = None,
    keep: bool = True,
) -> list[dict[str, Any]]:
    """Score every condition (and baseline) on every item; returns one line per item,
    ``{**items[i], "scores": {name: score or [score_A, score_B]}}`` (``keep=False``: none, for a caller whose
    ``store`` takes every line and that holds no line in memory, e.g. ``pluie-reward score`` on a large file).

    ``items[i]`` holds at least ``"i"`` and ``"h"`` (the item's input fingerprint) and may name its input
    ``"row"`` (for errors); items the store already holds (``store.done(i, h)``) are not scored again; new
    lines are saved after every chunk (``store.add(lines)``). ``extras`` compute
    further per-item values kept beside the scores (e.g. the edit distance for the plots). The
    progress line (``desc``, ``units``; off without ``progress``) moves per chunk; ``bar``: the
    caller's line instead, left open.
    """
    baselines, extras = baselines or {}, extras or {}
    rows = [item.get("row", f"item {item['i'] + 1}") for item in items]
    saved = [store.done(item["i"], item["h"]) if store is not None else None for item in items]
    lines = {k: line for k, line in enumerate(saved) if line is not None}
    todo = [k for k, line in enumerate(saved) if line is None]
    if chunk_size is not None and chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}.")
    size = chunk_size or auto_chunk_size(judge, 1 if pairs is None else 2)
    if pairs is not None:
        for condition in conditions:
            check_choice_condition(condition, True)
    if todo and hasattr(judge, "bind"):
        for condition in conditions:  # a template this judge cannot answer fails now, not after a first chunk
            judge.bind(condition.template)
    line = Progress(len(items), desc, units=units, initial=len(items) - len(todo), enabled=progress) if bar is None else bar
    with line if bar is None else contextlib.nullcontext(line):
        for start in range(0, len(todo), size):
            index = todo[start : start + size]
            scored = {c.name: _score_condition(judge, c, index, pairs, rows) for c in conditions}
            scored.update({name: function(index) for name, function in baselines.items()})
            more = {name: function(index) for name, function in extras.items()}
            new = [{**items[k], **{name: values[j] for name, values in more.items()},
                    "scores": {name: values[j] for name, values in scored.items()}} for j, k in enumerate(index)]
            if store is not None:
                store.add(new)
            if keep:
                lines.update(zip(index, new))
            line.update(len(index))
    return [lines[k] for k in range(len(items))] if keep else []
