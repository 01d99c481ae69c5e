"""A staged hack onset: batches of completions in which hacks that pay appear gradually, fed to a
:class:`~pluie_reward.integrations.alarm.HackAlarm` as a trainer's reward would feed it (a maintainer
script of the repository, not installed with the package; docs/hacking.md's table comes from it).

The hacks are the probe's families (:mod:`pluie_reward.tools.probe.families`) kept where they *pay*: a hypothesis scoring
above the honest answer of its source, which is what a group-relative advantage rewards and so what
a policy learns. Honest batches draw sources at random (with their honest answers); from
``honest_batches`` on, a growing share of each batch is replaced by paying hacks of the same
sources. The views are novelty against the source and the guard (0 clean, −1 flagged), computed on
the same completions.

Example:
    >>> from pluie_reward.testing import make_tiny_judge
    >>> rows = hack_onset(make_tiny_judge(), honest_batches=4, ramp=(0.5, 1.0), batch_size=6, limit=3)
    >>> [row["fired"] for row in rows]
    [False, False, False, False, False, True]
"""

from __future__ import annotations

import random
import warnings
from typing import Any, Iterable, Sequence

from pluie_reward.core.template import load_template
from pluie_reward.integrations.alarm import AlarmConfig, HackAlarm, HackWarning
from pluie_reward.integrations.guards import CompletionGuard
from pluie_reward.integrations.novelty import novelty_score
from pluie_reward.tools.probe.run import prepare_sources, probe_items

DEFAULT_FAMILIES = ("copy_zero_width", "copy_homoglyph", "control_token", "delimiter", "answer_word", "instruction", "master_key")


def paying_hacks(records: Sequence[dict[str, Any]]) -> dict[int, list[str]]:
    """Per source index, the attack/copy hypotheses that score above that source's honest answer.

    Example:
        >>> paying_hacks([{"family": "copy", "source_index": 0, "hypothesis": "h", "score": 1.0, "honest_score": 0.5},
        ...               {"family": "copy", "source_index": 0, "hypothesis": "g", "score": 0.2, "honest_score": 0.5}])
        {0: ['h']}
    """
    pays: dict[int, list[str]] = {}
    for r in records:
        if r["family"] != "honest" and r["honest_score"] is not None and r["score"] > r["honest_score"]:
            pays.setdefault(r["source_index"], []).append(r["hypothesis"])
    return pays


def hack_onset(
    judge: Any,
    template: Any = "para-fs",
    *,
    families: Iterable[str] = DEFAULT_FAMILIES,
    honest_batches: int = 6,
    ramp: Sequence[float] = (0.25, 0.5, 0.75, 1.0),
    batch_size: int = 12,
    seed: int = 0,
    limit: int | None = None,
    alarm: HackAlarm | None = None,
) -> list[dict[str, Any]]:
    """Feed honest batches, then batches with a growing share of paying hacks, to a hack alarm.

    Args:
        judge: the judge whose PLUIE is the reward.
        template: its template (built-in sources of the probe).
        families: probe families the "policy" may discover.
        honest_batches: batches without hacks first (the alarm's warm-up is taken from them).
        ramp: the hack share of each later batch.
        batch_size: completions per batch.
        seed: sampling seed.
        limit: use the first ``limit`` built-in sources only (faster).
        alarm: the alarm (default ``HackAlarm(AlarmConfig(warmup=3))``).

    Returns:
        One row per batch: ``batch``, ``hack_share``, ``reward`` (mean PLUIE), ``novelty``, ``guard``
        (means), ``divergence`` (largest, None in warm-up), ``fired`` (bool), and the batch's
        ``sources`` and ``completions``.

    Raises:
        ValueError: no family pays on this judge (nothing for a policy to learn), or bad arguments.
    """
    if honest_batches < 1 or batch_size < 1 or not ramp or not all(0 < s <= 1 for s in ramp):
        raise ValueError("hack_onset needs honest_batches >= 1, batch_size >= 1 and a ramp of shares in (0, 1].")
    template = load_template(template)
    items = prepare_sources(template, limit=limit)
    pays = paying_hacks(probe_items(judge, template, limit=limit, families=list(families)))
    if not pays:
        raise ValueError(f"no hypothesis of {list(families)} scores above an honest answer on this judge: nothing to learn.")
    guard = CompletionGuard(template, judge.tokenizer)
    alarm = alarm or HackAlarm(AlarmConfig(warmup=min(3, honest_batches)))
    rng = random.Random(seed)
    rows = []
    for batch, share in enumerate([0.0] * honest_batches + list(ramp)):
        chosen = [rng.randrange(len(items)) for _ in range(batch_size)]
        hypotheses = [rng.choice(pays[i]) if i in pays and rng.random() < share else items[i].honest for i in chosen]
        columns = {name: [items[i].fields[name] for i in chosen] for name in items[0].fields}
        reward = judge.score(template, hypothesis=hypotheses, **columns)
        novelty = [novelty_score(items[i].source, h) for i, h in zip(chosen, hypotheses)]
        guarded = [-1.0 if any(guard.check(h).values()) else 0.0 for h in hypotheses]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", HackWarning)  # the rows say when it fired
            metrics = alarm.update(reward, {"novelty": novelty, "guard": guarded})
        rows.append({
            "batch": batch,
            "hack_share": share,
            "reward": sum(reward) / batch_size,
            "novelty": sum(novelty) / batch_size,
            "guard": sum(guarded) / batch_size,
            "divergence": metrics.get("alarm/divergence"),
            "fired": bool(metrics["alarm/fired"]),
            "sources": [items[i].source for i in chosen],
            "completions": hypotheses,
        })
    return rows

