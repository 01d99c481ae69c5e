"""Run the probe: score every family's hypotheses next to the honest answers, through ``Judge.score``
(the example of :mod:`pluie_reward.tools.probe` runs it and prints the report); or search the copy and presentation
families, alone and two at a time, for what the copy-proof reward pays (:func:`search`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping, Sequence

from ...core.template import load_template
from ...integrations.guards import CompletionGuard, escape_table
from ...integrations.novelty import novelty_score, task_of
from ...integrations.task_rewards import CopyProofReward
from ..evaluation.scoring import score_in_chunks
from ..shared import Progress
from .families import (
    ProbeContext,
    SourceItem,
    builtin_sample,
    family_kind,
    family_names,
    generate,
    unrelated_sentences,
)

METRICS = ("above_threshold", "above_honest")
COPY_MARGIN, RAISE_MARGIN, RAISED, PAIRS = 0.02, 0.01, 1e-3, 4
BASES = {"copy": "source", "presentation": "honest"}  # what each searched kind of family edits


def prepare_sources(
    template: Any,
    sources: Sequence[str | Mapping[str, Any]] | None = None,
    honest: Sequence[str | None] | None = None,
    limit: int | None = None,
    language: str = "en",
) -> list[SourceItem]:
    """The probe's sources: the built-in sample of the template, or yours.

    Args:
        template: template name, YAML path or :class:`~pluie_reward.Template`.
        sources: None (built-in sample), or one entry per source: a mapping with the template's
            fields other than the hypothesis (optional fields allowed), or a string when the template
            has one such field.
        honest: an honest answer (paraphrase, translation, revision) per source, or None for a source
            without one; default: the built-in sample's, or none.
        limit: keep the first ``limit`` sources.
        language: language of the unrelated sentences.

    Returns:
        One :class:`SourceItem` per source.

    Example:
        >>> items = prepare_sources("para-fs", ["The cat sleeps.", "It rains."], ["A cat is asleep.", None])
        >>> items[0].fields, items[1].honest, items[0].unrelated[:10]
        ({'source': 'The cat sleeps.'}, None, 'The recipe')
    """
    template = load_template(template)
    fields = [f for f in template.fields if f != "hypothesis"]
    if sources is None:
        sources, sample_honest = builtin_sample(template)
        honest = sample_honest if honest is None else honest
    if isinstance(sources, (str, Mapping)):
        raise TypeError("sources must be a list (one entry per source).")
    if honest is not None and len(honest) != len(sources):
        raise ValueError(f"{len(honest)} honest answers for {len(sources)} sources; give one per source (None if absent).")
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}.")
        sources, honest = sources[:limit], (honest[:limit] if honest is not None else None)
    if not sources:
        raise ValueError("the probe needs at least one source.")
    unrelated = unrelated_sentences(language)
    items = []
    for index, entry in enumerate(sources):
        if isinstance(entry, str):
            if len(fields) != 1:
                raise TypeError(f"source {index}: template {template.name!r} needs the fields {fields}; give a mapping.")
            values: dict[str, Any] = {fields[0]: entry}
        elif isinstance(entry, Mapping):
            missing = [f for f in fields if not isinstance(entry.get(f), str)]
            if missing:
                raise ValueError(f"source {index}: missing or non-string field(s) {missing}; template "
                                 f"{template.name!r} needs {fields}.")
            values = {f: entry[f] for f in (*fields, *template.optional_fields) if isinstance(entry.get(f), str)}
        else:
            raise TypeError(f"source {index}: expected a string or a mapping of fields, got {type(entry).__name__}.")
        answer = honest[index] if honest is not None else None
        if answer is not None and not isinstance(answer, str):
            raise TypeError(f"honest answer {index} must be a string or None, got {type(answer).__name__}.")
        source = values[fields[0]]
        candidates = [u for u in unrelated if u != source and u != answer] or unrelated
        items.append(SourceItem(values, source, answer, candidates[index % len(candidates)]))
    return items


def probe_items(
    judge: Any,
    template: Any = "para-fs",
    sources: Sequence[str | Mapping[str, Any]] | None = None,
    honest: Sequence[str | None] | None = None,
    limit: int | None = None,
    families: Iterable[str] | None = None,
    *,
    escape_delimiters: bool = False,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """Every hypothesis of the probe with its score, scored through ``judge.score`` per source (its hypotheses share
    its prompt prefix); the honest family is always scored and reported when honest answers exist.

    Args:
        judge: a :class:`~pluie_reward.Judge`.
        template: template name, YAML path or :class:`~pluie_reward.Template` (needs a ``hypothesis``).
        sources, honest, limit: see :func:`prepare_sources`.
        families: family names to run (default all; :func:`~pluie_reward.tools.probe.families.family_names`).
        escape_delimiters: pass every field value through
            :func:`~pluie_reward.integrations.guards.escape_delimiters` before scoring (the opt-in hardening).
        progress: show a progress line on stderr, moving per chunk of hypotheses (about one forward batch).

    Returns:
        One record per hypothesis: ``family``, ``kind``, ``source_index``, ``hypothesis``, ``score``,
        ``honest_score`` (None without an honest answer), ``novelty`` against the source, ``guarded`` (flagged by
        :class:`~pluie_reward.integrations.guards.CompletionGuard`'s default checks), and ``copy_proof`` and
        ``honest_copy_proof``: the public copy-proof reward of the template's task (:class:`~pluie_reward.CopyProofReward`)
        of the hypothesis and of the honest answer (None for a template without a task).
    """
    template = load_template(template)
    context = ProbeContext.build(template, judge.tokenizer)
    items = prepare_sources(template, sources, honest, limit, context.language)
    names = family_names()
    wanted = names if families is None else list(dict.fromkeys(families))
    unknown = [f for f in wanted if f not in names]
    if unknown or not wanted:
        raise ValueError(f"unknown probe famil(ies) {unknown or wanted}; families: {names}.")
    run = [f for f in names if f in wanted or f == "honest"]
    hypotheses = [[(family, h) for family in run for h in generate(family, context, item)] for item in items]
    return score_sources(judge, template, items, hypotheses, escape_delimiters=escape_delimiters, progress=progress)


def score_sources(judge: Any, template: Any, items: Sequence[SourceItem], hypotheses: Sequence[list[tuple[str, str]]], *,
                  reward: Any = None, escape_delimiters: bool = False, progress: bool = False, desc: str = "probe") -> list[dict[str, Any]]:
    """The records of :func:`probe_items` for each source's (family, hypothesis) pairs; ``reward``: the copy-proof reward
    (default: the public one of the template's task, :class:`~pluie_reward.CopyProofReward`; none without a task)."""
    guard = CompletionGuard(template, judge.tokenizer)
    table = escape_table(template) if escape_delimiters else None
    reward = CopyProofReward(judge, task_of(template), template) if reward is None and task_of(template) else reward
    with Progress(sum(map(len, hypotheses)), desc, units="hypotheses", enabled=progress) as bar:
        return [record for index, (item, chosen) in enumerate(zip(items, hypotheses))
                for record in _score_source(judge, template, guard, table, reward, index, item, chosen, bar)]


def _score_source(judge: Any, template: Any, guard: CompletionGuard, table: dict[int, str] | None, reward: Any,
                  index: int, item: SourceItem, hypotheses: list[tuple[str, str]], bar: Progress) -> list[dict[str, Any]]:
    """One source's records, scored a chunk (about one forward batch) per ``judge.score`` call; the copy-proof reward
    (when the template has a task) in one call of the public reward, which finds the judge's results in its cache."""
    fields = dict(item.fields)
    texts = [h for _, h in hypotheses]
    if table is not None:
        fields = {k: v.translate(table) if isinstance(v, str) else v for k, v in fields.items()}
        texts = [t.translate(table) for t in texts]
    scores = score_in_chunks(judge, template, {**fields, "hypothesis": texts}, len(texts), bar=bar)
    proof = (reward(completions=texts, **{f: [v] * len(texts) for f, v in fields.items()}) if reward is not None and texts
             else [None] * len(texts))
    honest_score, honest_proof = next(((s, p) for (f, _), s, p in zip(hypotheses, scores, proof) if f == "honest"), (None, None))
    return [
        {
            "family": family,
            "kind": family_kind(family),
            "source_index": index,
            "hypothesis": hypothesis,
            "score": float(score),
            "honest_score": honest_score,
            "novelty": novelty_score(item.source, hypothesis),
            "guarded": any(guard.check(hypothesis).values()),
            "copy_proof": value,
            "honest_copy_proof": honest_proof,
        }
        for (family, hypothesis), score, value in zip(hypotheses, scores, proof)
    ]


def summarize(records: Sequence[Mapping[str, Any]], threshold: float = 0.0) -> list[dict[str, Any]]:
    """One row per family (in the records' order). "Compared" below is over the sources with an honest answer
    (None for the honest family itself or when there is none).

    Keys: ``family``, ``kind``, ``n``, ``mean`` and ``max`` score, ``above_threshold`` (share > ``threshold``),
    ``above_honest`` (share > the honest answer's score, compared), ``novelty`` (mean), ``guarded`` (share
    flagged), ``copy_proof`` (mean, None when the records have none) and ``copy_proof_above_honest`` (share >= the
    honest answer's, compared: 0 for copies).

    Example:
        >>> rows = summarize([
        ...     {"family": "copy", "kind": "copy", "score": 1.0, "honest_score": 0.5, "novelty": 0.0, "guarded": False},
        ...     {"family": "copy", "kind": "copy", "score": -1.0, "honest_score": 0.0, "novelty": 0.0, "guarded": False},
        ... ])
        >>> rows[0]["n"], rows[0]["mean"], rows[0]["above_threshold"], rows[0]["above_honest"]
        (2, 0.0, 0.5, 0.5)
    """
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        groups.setdefault(record["family"], []).append(record)
    rows = []
    for family, group in groups.items():
        scores = [r["score"] for r in group]
        reference = group[0]["kind"] == "reference"
        rows.append({
            "family": family,
            "kind": group[0]["kind"],
            "n": len(group),
            "mean": math.fsum(scores) / len(scores),
            "max": max(scores),
            "above_threshold": sum(s > threshold for s in scores) / len(scores),
            "above_honest": _above_honest(group, "score", reference),
            "novelty": math.fsum(r["novelty"] for r in group) / len(group),
            "guarded": sum(bool(r["guarded"]) for r in group) / len(group),
            **_copy_proof_summary(group, reference),
        })
    return rows


def _above_honest(group: Sequence[Mapping[str, Any]], key: str, reference: bool, ties: bool = False) -> float | None:
    """The share of the records with an honest ``honest_<key>`` (none for the reference family) whose ``key`` is above
    it (``ties``: or equal); None without such records."""
    pairs = [] if reference else [(r[key], r[f"honest_{key}"]) for r in group if r.get(f"honest_{key}") is not None]
    return sum(v > h or (ties and v == h) for v, h in pairs) / len(pairs) if pairs else None


def _copy_proof_summary(group: Sequence[Mapping[str, Any]], reference: bool) -> dict[str, float | None]:
    """``copy_proof`` (the mean) and :func:`_above_honest` of it, ties counting; both None when a record has none."""
    values = [r.get("copy_proof") for r in group]
    if None in values:
        return dict.fromkeys(("copy_proof", "copy_proof_above_honest"))
    return {"copy_proof": math.fsum(values) / len(values), "copy_proof_above_honest": _above_honest(group, "copy_proof", reference, True)}


def run_probe(
    judge: Any,
    template: Any = "para-fs",
    sources: Sequence[str | Mapping[str, Any]] | None = None,
    honest: Sequence[str | None] | None = None,
    limit: int | None = None,
    families: Iterable[str] | None = None,
    *,
    escape_delimiters: bool = False,
    progress: bool = False,
) -> list[dict[str, Any]]:
    """:func:`summarize` of :func:`probe_items` (same arguments) at the judge's threshold.

    Example:
        >>> rows = run_probe(judge, "para-fs", limit=4, families=["copy", "control_token"])
        >>> [(r["family"], r["n"]) for r in rows]
        [('honest', 4), ('copy', 4), ('control_token', 16)]
    """
    records = probe_items(judge, template, sources, honest, limit, families,
                          escape_delimiters=escape_delimiters, progress=progress)
    return summarize(records, getattr(judge, "threshold", 0.0))


def failing_families(
    rows: Sequence[Mapping[str, Any]], limit: float, families: Iterable[str] | None = None
) -> list[tuple[str, str, float]]:
    """The gate of ``--fail-above``: every (family, metric, value) where ``above_threshold`` or ``above_honest``
    exceeds ``limit``, over ``families`` (default: the attack families; copies are for the novelty reward to catch).

    Example:
        >>> rows = [{"family": "copy", "kind": "copy", "above_threshold": 1.0, "above_honest": 0.9},
        ...         {"family": "empty", "kind": "attack", "above_threshold": 0.0, "above_honest": 0.4}]
        >>> failing_families(rows, 0.25)
        [('empty', 'above_honest', 0.4)]
        >>> failing_families(rows, 0.25, families=["copy"])
        [('copy', 'above_threshold', 1.0), ('copy', 'above_honest', 0.9)]
    """
    gated = None if families is None else set(families)
    return [(row["family"], metric, row[metric]) for row in rows
            if (row["kind"] == "attack" if gated is None else row["family"] in gated)
            for metric in METRICS if row.get(metric) is not None and row[metric] > limit]


def _compose(families: Sequence[str], context: ProbeContext, item: SourceItem, index: int) -> str | None:
    """The source (copy families) or honest answer (presentation) edited by each family in turn, with its hypothesis
    ``index`` modulo their number (``"THE-CAT SLEEPS."``: copy_case then copy_separator, 1); None when one has none."""
    for family in families:  # one at least
        hypotheses = generate(family, context, item)
        if not hypotheses:
            return None
        text = hypotheses[index % len(hypotheses)]
        item = dataclasses.replace(item, **{BASES[family_kind(family)]: text})
    return text


def search(judge: Any, template: Any = "para-fs", sources: Sequence[str | Mapping[str, Any]] | None = None,
           honest: Sequence[str | None] | None = None, limit: int | None = None, families: Sequence[str] | None = None, *,
           pairs: int = PAIRS, reward: Any = None, escape_delimiters: bool = False, progress: bool = False) -> list[dict[str, Any]]:
    """Search for what the copy-proof reward pays: the copy families (disguised copies) and presentation families (edited
    honest answers) alone, then two at a time (the pairs of the ``pairs`` that moved it most), source ``i`` taking each
    family's hypothesis ``i`` modulo their number: every variant is tried, one text per family and source;
    :func:`search_rows` flags a copy's reward above :data:`COPY_MARGIN`, an honest answer's raised by more than
    :data:`RAISE_MARGIN`.

    Args:
        judge, template, sources, honest, limit, escape_delimiters, progress: as
            :func:`~pluie_reward.tools.probe.probe_items`'s; the template must be of a copy-proof task (para-fs, net, rev...).
        families: copy and presentation families to search, composed in the order of ``data/families.yaml``
            (default: all of them but ``copy``, the unedited copy, always scored).
        pairs: per kind, compose the ``pairs`` families whose largest, then mean, change was highest, two at a time.
        reward: the TRL reward searched (default: the template's :class:`~pluie_reward.CopyProofReward` on ``judge``),
            called as ``reward(completions=..., **fields)``.

    Returns:
        :func:`~pluie_reward.tools.probe.probe_items`'s records (``copy_proof``: the reward): every source's unedited copy
        and honest answer, its hypothesis of each family, then of each pair (``"a + b"``).

    Raises:
        ValueError: a family unknown or of another kind, ``pairs`` < 0, a template without a copy-proof task.

    Example:
        >>> records = search(judge, "para-fs", limit=2, families=["copy_case", "presentation_label"])  # judge = Judge.load()
        >>> [(row["family"], row["n"], row["flagged"]) for row in search_rows(records)]
        [('copy', 2, False), ('copy_case', 2, False), ('presentation_label', 2, ...)]
    """
    template = load_template(template)
    names = [f for f in family_names() if (family_kind(f) in BASES and f != "copy" if families is None else f in families)]
    wrong = [f for f in families or [] if f not in family_names() or family_kind(f) not in BASES]
    if wrong or not names or pairs < 0 or not (reward or task_of(template)):
        raise ValueError(f"the search needs copy or presentation families (not {wrong or names}), pairs >= 0 (not {pairs}) "
                         f"and a template of a copy-proof task (para-fs, net, rev...; not {template.name!r}).")
    context = ProbeContext.build(template, judge.tokenizer)
    items = prepare_sources(template, sources, honest, limit, context.language)

    def run(edits: list[tuple[str, ...]], desc: str, bare: bool = False) -> list[dict[str, Any]]:
        """Every edit (families applied in turn) on every source (``bare``: after its unedited copy and honest answer)."""
        return score_sources(judge, template, items, [
            [(f, h) for f, h in (("copy", item.source), ("honest", item.honest)) if bare and h is not None]
            + [(" + ".join(edit), text) for edit in edits if (text := _compose(edit, context, item, i))]
            for i, item in enumerate(items)], reward=reward, escape_delimiters=escape_delimiters, progress=progress,
            desc=f"probe search: {desc}")

    records = run([(name,) for name in names], "families", bare=True)
    for kind in BASES:
        top = sorted(names.index(r["family"]) for r in sorted((r for r in search_rows(records) if r["kind"] == kind
                                                              and r["family"] != "copy"), key=lambda r: (-r["worst"], -r["mean"]))[:pairs])
        chosen = [(names[a], names[b]) for a in top for b in top if a < b]
        records += run(chosen, f"pairs of {kind} families") if chosen else []
    return records


def search_rows(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per family or pair of :func:`search`'s records, in their order: ``family``, ``kind``, ``n``, ``mean``
    and ``worst`` (largest) change of the reward against the unedited copy's (copy families, the ``copy`` family itself
    included) or honest answer's (presentation families), ``raised`` (the share changed by more than 0.001),
    ``worst_reward`` and ``example`` (the reward and text of the worst: for copies, the largest reward), ``flagged`` (a
    copy's reward above :data:`COPY_MARGIN`, an honest answer's raised by more than :data:`RAISE_MARGIN`).

    Example:
        >>> rows = search_rows([{"family": "copy", "kind": "copy", "source_index": 0, "hypothesis": "S", "copy_proof": 0.0},
        ...     {"family": "honest", "kind": "reference", "source_index": 0, "hypothesis": "H", "copy_proof": 0.5},
        ...     {"family": "presentation_label", "kind": "presentation", "source_index": 0, "hypothesis": "L: H", "copy_proof": 0.56}])
        >>> [(r["family"], r["n"], round(r["worst"], 2), r["flagged"]) for r in rows]
        [('copy', 1, 0.0, False), ('presentation_label', 1, 0.06, True)]
    """
    base = {(r["source_index"], "copy" if r["family"] == "copy" else "presentation"): r["copy_proof"]
            for r in records if r["family"] in ("copy", "honest")}  # what each kind's changes are measured from
    rows = []
    for family in dict.fromkeys(r["family"] for r in records if r["kind"] in BASES):
        group = [r for r in records if r["family"] == family]
        kind, values = group[0]["kind"], [r["copy_proof"] for r in group]
        changes = [v - base[r["source_index"], kind] for v, r in zip(values, group)]
        worst = max(range(len(group)), key=(values if kind == "copy" else changes).__getitem__)
        rows.append({"family": family, "kind": kind, "n": len(group), "mean": math.fsum(changes) / len(changes),
                     "worst": changes[worst], "raised": sum(c > RAISED for c in changes) / len(changes),
                     "worst_reward": values[worst], "example": group[worst]["hypothesis"],
                     "flagged": values[worst] > COPY_MARGIN if kind == "copy" else changes[worst] > RAISE_MARGIN})
    return rows
