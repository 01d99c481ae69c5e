"""``pluie-reward bench methods``: pairs/s and memory of :meth:`Judge.score` beside two baselines, in one run.

Methods (docs/benchmark.md): 1. ``reference``, the seeds' two passes per pair (:func:`reference_scores`);
2. ``generate``, an output-based LLM-Yes/No judge (:func:`generate_answers`); 3. ``score``, :meth:`Judge.score`
in a training loop's steady state (caches cleared, then an untimed one-item call leaves the template's static
prefix), ``score-cold`` right after clearing; 4. ``indirect`` (when asked for), :meth:`Judge.score` on an INDIRECT
template. Workloads: ``mrpc`` (the first N MRPC pairs) and ``grpo`` (S sources x K hypotheses,
:func:`grpo_workload`). Methods run interleaved in rounds; pairs/s is the median over rounds.

Example:
    $ pluie-reward bench methods                              # embedded SmolLM2-135M, float32, a few minutes
    $ pluie-reward bench methods --model Qwen/Qwen2.5-0.5B-Instruct --device cuda --json bench.json
"""

from __future__ import annotations

import json
import os
import platform
import random
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ...core.judge import Judge
from ...judges import default_adapter_dir
from ..report import cell, markdown_table
from ..shared import UsageError
from .measure import PeakMemory, load_average, timed


METHODS = ("reference", "generate", "score", "score-cold", "indirect")
DEFAULT_METHODS = ("reference", "generate", "score", "score-cold")  # "indirect" generates: only when asked for
LABELS = {
    "reference": "(1) seed reference",
    "generate": "(2) LLM-Yes/No generate",
    "score": "(3) Judge.score",
    "score-cold": "(3) Judge.score, cold caches",
    "indirect": "(4) Judge.score INDIRECT",
}
SAMPLED = ("reference", "generate", "indirect")  # slow methods: run on every k-th pair, spread over the rounds
MAX_DIFF = 1e-3
_DATA_NAME = "ms-mrpc.json"


# workloads -------------------------------------------------------------------------------------
@dataclass
class Workload:
    """Items to score: parallel lists of sources and hypotheses."""

    name: str
    sources: list[str]
    hypotheses: list[str]
    description: str = ""

    def __len__(self) -> int:
        return len(self.sources)


def default_data_path() -> Path | None:
    """``ms-mrpc.json`` in :func:`~pluie_reward.tools.evaluation.paraphrasus.find_data_dir`'s folder, or ``None``."""
    from ..evaluation.paraphrasus import find_data_dir  # lazy: CLI start-up (it brings the evaluation's scoring and plots)

    try:
        return find_data_dir() / _DATA_NAME
    except FileNotFoundError:
        return None


def read_pairs(path: Path) -> list[tuple[str, str]]:
    """(sentence1, sentence2) pairs of a PARAPHRASUS JSON file.

    Example:
        >>> data = Path(os.environ.get("PARAPHRASUS_DIR", "../shared/data/paraphrasus"))
        >>> read_pairs(data / "ms-mrpc.json")[0][0][:4]
        'PCCW'
    """
    if not path.is_file():
        raise UsageError(f"{path}: no such file; pass --data PATH to PARAPHRASUS' {_DATA_NAME}.")
    rows = json.loads(path.read_text(encoding="utf-8"))
    try:
        return [(r["sentence1"], r["sentence2"]) for r in rows.values()]
    except (AttributeError, KeyError, TypeError):
        raise UsageError(f"{path}: expected a JSON object {{id: {{'sentence1': ..., 'sentence2': ...}}}}.") from None


def builtin_pairs() -> list[tuple[str, str]]:
    """The benchmark's pairs when no MRPC file is given or found: the package's 120 held-out pairs of the default
    judge (``judges/smollm2-pluie/scores.jsonl``: STS, SNLI and simplification pairs, each source's licence in its
    ``data.json``), 12 words a sentence on average.

    Example:
        >>> len(builtin_pairs()), builtin_pairs()[0]
        (120, ('A person is slicing an onion.', 'A person cuts ginger.'))
    """
    lines = (default_adapter_dir() / "scores.jsonl").read_text(encoding="utf-8").splitlines()
    return [(row["source"], row["hypothesis"]) for row in map(json.loads, filter(str.strip, lines))]


def mrpc_workload(pairs: Sequence[tuple[str, str]], n: int = 64, label: str = "MRPC") -> Workload:
    """The first ``n`` pairs as they are (workload (a); ``label``: where the pairs come from)."""
    if len(pairs) < n:
        raise UsageError(f"the data has {len(pairs)} pairs; the mrpc workload needs {n}.")
    return Workload("mrpc", [s for s, _ in pairs[:n]], [h for _, h in pairs[:n]], f"{n} {label} pairs")


def edit_variants(source: str, partner: str, others: Sequence[str], k: int, seed: int = 0) -> list[str]:
    """``k`` distinct hypotheses for one source: the partner sentence, the source itself, then edits (a word
    dropped, two neighbours swapped, the ending cut, a word from another sentence, another pair's sentence).

    Example:
        >>> len(set(edit_variants("the cat sat on the mat", "a cat sat on a mat", ["dogs bark"], 6)))
        6
    """
    rng = random.Random(seed)
    words = source.split()
    pool = [w for other in others for w in other.split()] or ["also"]
    out = dict.fromkeys(text for text in (partner, source) if text)  # an ordered set: no hypothesis twice
    for attempt in range(50 * k):
        if len(out) >= k:
            break
        kind = attempt % 5
        w = list(words)
        if kind == 0 and len(w) > 2:
            del w[rng.randrange(len(w))]
        elif kind == 1 and len(w) > 2:
            i = rng.randrange(len(w) - 1)
            w[i], w[i + 1] = w[i + 1], w[i]
        elif kind == 2 and len(w) > 3:
            w = w[: rng.randrange(len(w) // 2, len(w))]
        elif kind == 3:
            w[rng.randrange(len(w))] = rng.choice(pool)
        elif others:
            w = rng.choice(list(others)).split()
        text = " ".join(w)
        if text:
            out[text] = None
    while len(out) < k:  # very short sources: number the remaining variants
        out[f"{source} ({len(out)})"] = None
    return list(out)[:k]


def grpo_workload(pairs: Sequence[tuple[str, str]], sources: int = 8, per_source: int = 8) -> Workload:
    """GRPO-shaped items: ``sources`` sources x ``per_source`` hypotheses each (workload (b))."""
    if len(pairs) < sources + 1:
        raise UsageError(f"the data file has {len(pairs)} pairs; the grpo workload needs {sources + 1}.")
    others = [h for _, h in pairs[: sources + 8]]  # words and sentences of the edits: the first sources' partners, 8 more
    data = [(source, edit_variants(source, partner, [o for o in others if o != partner], per_source, seed=i))
            for i, (source, partner) in enumerate(pairs[:sources])]
    return Workload("grpo", [s for s, c in data for _ in c], [h for _, c in data for h in c],
                    f"{sources} sources x {per_source} hypotheses")


# method (1): the seeds' two-pass reference -----------------------------------------------------
def two_fields(judge: Any, template: Any, needs: str = "the benchmark needs a two-field (source, hypothesis) template") -> Any:
    """``template`` bound to ``judge`` (:meth:`Judge.bind`), refused unless it has two fields (source, hypothesis).

    Example:
        >>> two_fields(judge, "para-fs").template.fields
        ('source', 'hypothesis')
    """
    bound = judge.bind(template)
    if len(bound.template.fields) != 2:
        raise UsageError(f"{needs}; {bound.template.name!r} has {bound.template.fields}.")
    return bound


def reference_scores(judge: Any, template: Any, sources: Sequence[str], hypotheses: Sequence[str]) -> list[float]:
    """The seeds' PLUIE, one pair at a time: n_no * loss(prompt+No) - n_yes * loss(prompt+Yes), each loss the
    model's mean cross-entropy over the sequence, the answer the assistant turn without its end-of-turn marker.

    Example:
        >>> reference = reference_scores(judge, "para-fs", ["The cat sleeps."], ["A cat is asleep."])
        >>> score = judge.score("para-fs", source=["The cat sleeps."], hypothesis=["A cat is asleep."])
        >>> len(reference), abs(reference[0] - score[0]) < MAX_DIFF  # the same PLUIE as Judge.score
        (1, True)
    """
    bound = two_fields(judge, template)
    t = bound.template
    tokenizer, model = judge.tokenizer, judge.model
    device = judge.engine.device
    keywords = dict(judge.chat_template_kwargs)
    if bound.date and bound.date != "now":  # a template that writes today's date (gpt-oss) renders the judge's fixed date, not the clock's
        keywords.pop("strftime_now", None)
        keywords["chat_template"] = tokenizer.chat_template.replace('strftime_now("%Y-%m-%d")', json.dumps(bound.date[:10]))
    out = []
    with judge.engine.session():
        for source, hypothesis in zip(sources, hypotheses):
            values = dict(zip(t.fields, (source, hypothesis)))
            terms = []
            for answer in t.answers:
                if bound.use_chat:
                    turns = t.chat(values) + [{"role": "assistant", "content": answer}]
                    text = tokenizer.apply_chat_template(turns, tokenize=False, **keywords)
                    text = text[: text.rindex(answer) + len(answer)]
                else:
                    prompt, joiner = t.plain(values)
                    text = prompt + joiner + answer
                ids = tokenizer(text, add_special_tokens=not bound.use_chat, return_tensors="pt").input_ids.to(device)
                loss = model(input_ids=ids, labels=ids).loss
                terms.append((ids.shape[1] - 1) * float(loss))
            out.append(terms[1] - terms[0])
    return out


# method (2): output-based LLM-Yes/No ------------------------------------------------------------
def yes_no_prompt() -> dict[str, Any]:
    """The LLM-Yes/No paraphrase prompt (star-pluie appendix D, segment 1) from the package data.

    Example:
        >>> "[BEGIN DATA]" in yes_no_prompt()["user"]
        True
    """
    from importlib import resources

    import yaml

    text = resources.files("pluie_reward.tools.bench").joinpath("data/llm-yes-no-para.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def yes_no_messages(prompt: dict[str, Any], source: str, hypothesis: str) -> list[dict[str, str]]:
    """Chat turns of the LLM-Yes/No prompt for one pair (fields replaced literally)."""
    user = prompt["user"].replace("{source}", source).replace("{paraphrase}", hypothesis)
    return [{"role": "system", "content": prompt["system"]}, {"role": "user", "content": user}]


_JSON_OBJECT = re.compile(r"\{[^{}]*\}")
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)


def parse_answer(text: str) -> bool | None:
    """A generated answer as True (yes), False (no) or None (unparseable).

    JSON ``{"answer": ...}`` first, else the first bare yes/no word.

    Example:
        >>> parse_answer('{"answer": "Yes"}'), parse_answer("No."), parse_answer("Maybe")
        (True, False, None)
    """
    for match in _JSON_OBJECT.finditer(text):
        try:
            value = json.loads(match.group(0))
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and isinstance(value.get("answer"), str):
            word = _YES_NO.search(value["answer"])
            if word:
                return word.group(1).lower() == "yes"
    word = _YES_NO.search(text)
    return None if word is None else word.group(1).lower() == "yes"


def generate_answers(judge: Any, sources: Sequence[str], hypotheses: Sequence[str], batch_size: int = 8,
                     max_new_tokens: int | None = None) -> tuple[list[bool | None], list[str]]:
    """LLM-Yes/No verdicts by batched greedy generation (left padding), and the raw texts.

    Example:
        >>> generate_answers(judge, ["The cat sleeps."], ["A cat is asleep."])  # the default judge: ([True], ['{"answer": "Yes"}'])
        ([...], ['...'])
    """
    import copy

    prompt = yes_no_prompt()
    tokenizer, model = judge.tokenizer, judge.model
    if getattr(tokenizer, "chat_template", None) is None:
        raise UsageError("the LLM-Yes/No baseline needs a chat model (its tokenizer has no chat template).")
    texts = [tokenizer.apply_chat_template(yes_no_messages(prompt, s, h), tokenize=False, add_generation_prompt=True)
             for s, h in zip(sources, hypotheses)]
    config = copy.deepcopy(model.generation_config)
    config.do_sample, config.temperature, config.top_p, config.top_k = False, None, None, None
    config.max_new_tokens = max_new_tokens or int(prompt.get("max_new_tokens", 10))
    config.pad_token_id = judge.engine.pad_id
    outputs: list[str] = []
    with judge.engine.session():
        for start in range(0, len(texts), batch_size):
            batch = tokenizer(texts[start : start + batch_size], return_tensors="pt", padding=True, padding_side="left",
                              add_special_tokens=False).to(judge.engine.device)
            generated = model.generate(**batch, generation_config=config)
            outputs += tokenizer.batch_decode(generated[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    return [parse_answer(t) for t in outputs], outputs


@dataclass
class MethodResult:
    """Totals of one method on one workload."""

    method: str
    pairs: int = 0
    seconds: float = 0.0
    peak_rss_mb: float = 0.0
    rss_increase_mb: float = 0.0
    peak_cuda_mb: float | None = None
    scores: dict[int, float] = field(default_factory=dict)
    verdicts: dict[int, bool | None] = field(default_factory=dict)
    texts: dict[int, str] = field(default_factory=dict)
    rates: list[float] = field(default_factory=list)

    @property
    def pairs_per_second(self) -> float:
        """Median over rounds of pairs/s: one round hit by a load spike does not move it."""
        return statistics.median(self.rates) if self.rates else float("nan")

    def record(self, seconds: float, pairs: int, peak: PeakMemory) -> None:
        self.seconds += seconds
        self.pairs += pairs
        self.rates.append(pairs / seconds if seconds > 0 else float("nan"))
        self.peak_rss_mb = max(self.peak_rss_mb, peak.rss_mb)
        self.rss_increase_mb = max(self.rss_increase_mb, peak.rss_mb - peak.start_rss_mb)
        if peak.cuda_mb is not None:
            self.peak_cuda_mb = max(self.peak_cuda_mb or 0.0, peak.cuda_mb)


@dataclass
class WorkloadResult:
    """All methods on one workload, with their comparisons."""

    workload: str
    description: str
    n: int
    results: dict[str, MethodResult]

    def score_key(self) -> str | None:
        """The Judge.score variant present (steady state first)."""
        return next((m for m in ("score", "score-cold") if m in self.results), None)

    def speedup(self, method: str, baseline: str) -> float | None:
        if method not in self.results or baseline not in self.results:
            return None
        return self.results[method].pairs_per_second / self.results[baseline].pairs_per_second

    def max_diff(self) -> float | None:
        """max |Judge.score - reference| over the pairs the reference ran on."""
        key = self.score_key()
        if key is None or "reference" not in self.results:
            return None
        ref, got = self.results["reference"].scores, self.results[key].scores
        return max((abs(got[i] - r) for i, r in ref.items()), default=None)

    def agreement(self) -> float | None:
        """Share of parsed LLM-Yes/No answers agreeing with the Judge.score verdict (logratio > 0)."""
        key = self.score_key()
        if key is None or "generate" not in self.results:
            return None
        got = self.results[key].scores
        pairs = [(v, got[i] > 0) for i, v in self.results["generate"].verdicts.items() if v is not None]
        return sum(a == b for a, b in pairs) / len(pairs) if pairs else None


def _chunks(indices: list[int], parts: int) -> list[list[int]]:
    size = -(-len(indices) // parts) if indices else 0
    return [indices[i * size : (i + 1) * size] for i in range(parts)]


def run_workload(judge: Any, workload: Workload, template: str = "para-fs", methods: Sequence[str] = DEFAULT_METHODS,
                 rounds: int = 3, sample_every: int = 2, generate_batch_size: int = 8,
                 log: Callable[[str], None] = lambda _: None, indirect_template: str = "para-indirect",
                 indirect_max_new_tokens: int | None = None) -> WorkloadResult:
    """Time the methods on one workload, interleaved in ``rounds`` (see the module docstring).

    Example:
        >>> pairs = [("The cat sleeps.", "A cat is asleep."), ("Prices rose.", "Prices fell."), ("He left.", "He went.")]
        >>> result = run_workload(judge, mrpc_workload(pairs, 3), methods=("reference", "score"), rounds=1)  # e.g. 64 MRPC pairs
        >>> sorted(result.results)  # pairs/s of each: result.speedup("score", "reference")
        ['reference', 'score']
        >>> result.max_diff() < MAX_DIFF  # Judge.score agrees with the seeds' reference
        True
    """
    unknown = set(methods) - set(METHODS)
    if unknown:
        raise UsageError(f"unknown method(s) {sorted(unknown)}; choose from {list(METHODS)}.")
    if rounds < 1 or sample_every < 1:
        raise UsageError("--rounds and --sample-every must be at least 1.")
    device = judge.engine.device
    sampled = list(range(0, len(workload), sample_every))
    plan = {m: _chunks(sampled, rounds) for m in SAMPLED}
    results = {m: MethodResult(m) for m in methods}
    src, hyp = workload.sources, workload.hypotheses
    names = two_fields(judge, template).template.fields
    fields = dict(zip(names, (src, hyp)))
    if "indirect" in methods:
        indirect_names = two_fields(judge, indirect_template, "the INDIRECT method needs a two-field template").template.fields
    for r in range(rounds):
        order = list(methods[r % len(methods) :]) + list(methods[: r % len(methods)])  # rotate who goes first
        for method in order:
            result = results[method]
            if method in ("score", "score-cold"):
                judge.clear_cache()  # no result or source prefix survives from an earlier round
                if method == "score":  # the template's static prefix, as any earlier call leaves it
                    judge.score(template, **dict(zip(names, (src[:1], ["-"]))))
                chunk, work = range(len(workload)), lambda: judge.score(template, **fields)
            else:
                chunk = plan[method][r]
                if not chunk:
                    continue
                s, h = [src[i] for i in chunk], [hyp[i] for i in chunk]
                work = {"reference": lambda: reference_scores(judge, template, s, h),
                        "indirect": lambda: judge.score(indirect_template, **dict(zip(indirect_names, (s, h))), use_cache=False,
                                                        max_new_tokens=indirect_max_new_tokens),
                        "generate": lambda: generate_answers(judge, s, h, batch_size=generate_batch_size)}[method]
            seconds, value, peak = timed(device, work, rss=True)
            if method == "generate":
                result.verdicts.update(zip(chunk, value[0]))
                result.texts.update(zip(chunk, value[1]))
            else:
                result.scores.update(zip(chunk, value))
            result.record(seconds, len(chunk), peak)
            log(f"  {workload.name} round {r + 1}/{rounds} {method}: {seconds:.1f} s")
    return WorkloadResult(workload.name, workload.description, len(workload), results)


# reporting -------------------------------------------------------------------------------------
def format_table(result: WorkloadResult) -> str:
    """One workload's results as a Markdown table."""
    title = f"workload {result.workload} ({result.description}; methods (1), (2), (4) on a sample, (3) on all {result.n})"
    table = markdown_table(
        ["method", "pairs timed", "seconds", "pairs/s (median of rounds)", "x vs (1)", "x vs (2)",
         "max abs diff vs (1)", "peak RSS MB (+during)", "CUDA max MB"],
        [[LABELS[method], m.pairs, f"{m.seconds:.1f}", f"{m.pairs_per_second:.2f}",
          cell(result.speedup(method, "reference"), ".1f"), cell(result.speedup(method, "generate"), ".1f"),
          cell(result.max_diff() if method == result.score_key() else None, ".1e"),
          f"{m.peak_rss_mb:.0f} (+{m.rss_increase_mb:.0f})", cell(m.peak_cuda_mb, ".0f")]
         for method, m in ((k, result.results[k]) for k in METHODS if k in result.results)],
        "lrrrrrrrr", title)
    notes = []
    if "generate" in result.results:
        verdicts = result.results["generate"].verdicts.values()
        notes.append(f"LLM-Yes/No: {sum(v is None for v in verdicts)} of {len(verdicts)} answers unparseable")
        agree = result.agreement()
        if agree is not None:
            notes.append(f"agreement of parsed answers with Judge.score verdicts {agree:.0%}")
    indirect = result.results.get("indirect")
    if indirect is not None and indirect.rates:
        ratios = [f"{LABELS[m][:3]} / (4) = {result.speedup(m, 'indirect'):.1f}x" for m in ("generate", "score") if m in result.results]
        if ratios:
            notes.append("INDIRECT cost: " + ", ".join(ratios))
        key = result.score_key()
        if key is not None:
            got = result.results[key].scores
            same = [(v > 0) == (got[i] > 0) for i, v in indirect.scores.items()]
            notes.append(f"INDIRECT verdicts equal to (3)'s on {sum(same) / len(same):.0%}")
    return table + (f"\n\n{'; '.join(notes)}." if notes else "")


def agreement_lines(results: Sequence[WorkloadResult]) -> list[str]:
    """Each workload's largest |(3) - (1)| against the agreement tolerance.

    Example:
        >>> agreement_lines([])
        []
    """
    lines = []
    for r in results:
        diff = r.max_diff()
        if diff is not None:
            within = "within the tolerance" if diff <= MAX_DIFF else "OUTSIDE the tolerance: the scores disagree"
            lines.append(f"- {r.workload}: max |(3) - (1)| = {diff:.1e} (tolerance {MAX_DIFF:g}): {within}")
    return lines


def machine_line(judge: Any) -> str:
    """Model, dtype, device, threads and load average: the context timings need."""
    import torch

    attention = "shared-prefix" if judge.engine.fast else judge.model.config._attn_implementation
    return (f"judge {judge.name} ({judge.model.dtype}, {judge.engine.device}, batch_tokens={judge.engine.batch_tokens}, "
            f"attention {attention}); torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, "
            f"{platform.processor() or platform.machine()}; load average {load_average()}")
