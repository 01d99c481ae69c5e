"""Run the probe: score every family's hypotheses next to the honest answers, through ``Judge.score``
(the example of :mod:`pluie_reward.tools.probe` runs it and prints the report)."""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from ...core.calibration import sigmoid
from ...core.template import load_template
from ...integrations.guards import CompletionGuard, escape_table
from ...integrations.novelty import novelty_score, task_of
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
        ``honest_copy_proof``: the copy-proof reward (:func:`~pluie_reward.integrations.novelty.copy_proof_score`)
        of the hypothesis and of the honest answer for a template of a known task (None otherwise).
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
    guard = CompletionGuard(template, judge.tokenizer)
    table = escape_table(template) if escape_delimiters else None
    records: list[dict[str, Any]] = []
    hypotheses = [[(family, h) for family in run for h in generate(family, context, item)] for item in items]
    with Progress(sum(map(len, hypotheses)), "probe", units="hypotheses", enabled=progress) as bar:
        for index, item in enumerate(items):
            records += _score_source(judge, template, guard, table, index, item, hypotheses[index], bar)
    return records


def _score_source(judge: Any, template: Any, guard: CompletionGuard, table: dict[int, str] | None, index: int,
                  item: SourceItem, hypotheses: list[tuple[str, str]], bar: Progress) -> list[dict[str, Any]]:
    """One source's records, scored a chunk (about one forward batch) per ``judge.score`` call."""
    fields = dict(item.fields)
    texts = [h for _, h in hypotheses]
    if table is not None:
        fields = {k: v.translate(table) if isinstance(v, str) else v for k, v in fields.items()}
        texts = [t.translate(table) for t in texts]
    scores = score_in_chunks(judge, template, {**fields, "hypothesis": texts}, len(texts), bar=bar)
    honest_score = next((s for (f, _), s in zip(hypotheses, scores) if f == "honest"), None)
    task = task_of(template)

    def copy_proof(hypothesis: str | None, score: float | None) -> float | None:
        if task is None or hypothesis is None or score is None:
            return None
        return task.score(sigmoid(score), item.source, hypothesis)

    honest_copy_proof = copy_proof(item.honest, honest_score)
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
            "copy_proof": copy_proof(hypothesis, score),
            "honest_copy_proof": honest_copy_proof,
        }
        for (family, hypothesis), score in zip(hypotheses, scores)
    ]


def summarize(records: Sequence[Mapping[str, Any]], threshold: float = 0.0) -> list[dict[str, Any]]:
    """One row per family (in the records' order). "Compared" below is over the sources with an honest answer
    (None for the honest family itself or when there is none).

    Keys: ``family``, ``kind``, ``n``, ``mean`` and ``max`` score, ``above_threshold`` (share > ``threshold``),
    ``above_honest`` (share > the honest answer's score, compared), ``change``/``max_change`` (mean/largest score
    minus the honest answer's, compared: for a ``presentation`` family, what the edit does), ``novelty`` (mean),
    ``guarded`` (share flagged), ``copy_proof`` (mean, None when the records have none), ``copy_proof_above_honest``
    (share >= the honest answer's, compared: 0 for copies) and ``copy_proof_change``/``copy_proof_max_change``.

    Example:
        >>> rows = summarize([
        ...     {"family": "copy", "kind": "copy", "score": 1.0, "honest_score": 0.5, "novelty": 0.0, "guarded": False},
        ...     {"family": "copy", "kind": "copy", "score": -1.0, "honest_score": 0.0, "novelty": 0.0, "guarded": False},
        ... ])
        >>> rows[0]["n"], rows[0]["mean"], rows[0]["above_threshold"], rows[0]["above_honest"]
        (2, 0.0, 0.5, 0.5)
        >>> rows[0]["change"], rows[0]["max_change"]
        (-0.25, 0.5)
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
            **_against_honest(group, "score", "", reference),
            "novelty": math.fsum(r["novelty"] for r in group) / len(group),
            "guarded": sum(bool(r["guarded"]) for r in group) / len(group),
            **_copy_proof_summary(group, reference),
        })
    return rows


def _against_honest(group: Sequence[Mapping[str, Any]], key: str, prefix: str, reference: bool,
                    ties: bool = False) -> dict[str, float | None]:
    """Over the records with an honest ``honest_<key>`` (none for the reference family): ``<prefix>above_honest``,
    the share whose ``key`` is above it (``ties``: or equal), and ``<prefix>change``/``<prefix>max_change``, the
    mean/largest difference (None without such records)."""
    pairs = [] if reference else [(r[key], r[f"honest_{key}"]) for r in group if r.get(f"honest_{key}") is not None]
    deltas = [value - honest for value, honest in pairs]
    return {f"{prefix}above_honest": sum(v > h or (ties and v == h) for v, h in pairs) / len(pairs) if pairs else None,
            f"{prefix}change": math.fsum(deltas) / len(deltas) if deltas else None,
            f"{prefix}max_change": max(deltas) if deltas else None}


def _copy_proof_summary(group: Sequence[Mapping[str, Any]], reference: bool) -> dict[str, float | None]:
    """``copy_proof`` (the mean) and :func:`_against_honest` of it, ties counting; all None when a record has none."""
    values = [r.get("copy_proof") for r in group]
    if None in values:
        return dict.fromkeys(("copy_proof", "copy_proof_above_honest", "copy_proof_change", "copy_proof_max_change"))
    return {"copy_proof": math.fsum(values) / len(values), **_against_honest(group, "copy_proof", "copy_proof_", reference, ties=True)}


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
