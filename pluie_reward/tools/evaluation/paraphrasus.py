"""The PARAPHRASUS benchmark (Michail et al., COLING 2025) run with a PLUIE judge, following the protocol of
the data folder's README: error rate per dataset, mean per challenge, mean of the three challenge means.

The data is not shipped: ``data_dir`` is the folder of the authors' JSON files (the release's
``datasets_no_results``, or the release). PAWS-X and XNLI are scored when their files are there; the means
are over the datasets present, the peers' recomputed over the same ones (their published averages kept too).
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ...core.template import load_template
from .plots import PLUIE_AXIS, plot_edit_distance, plot_error_rates, plot_score_histograms, plot_sts_bins, plot_threshold_curves
from ..report import markdown_table, percent, write_outputs
from .scoring import JUDGE_ROW, Condition, edit_distances, score_items
from .store import ScoreStore, chat_settings, fingerprint

CHALLENGES = ("Classify!", "Minimize!", "Maximize!")
OPTIONAL = ("PAWSX", "XNLI")  # in the benchmark; scored when their files are in the data folder
# each peer's published figures: the release's results file, or its copy results_<peer>.json in the data folder
PEER_FILES = {"llama3": ("benches/llama3_3_70b/results.json", "results_llama3.json"),
              "paper": ("benches/paper/results.json", "results_paper.json")}
STS_FILE = "stsbenchmark-test-sts.json"


@dataclass(frozen=True)
class DatasetSpec:
    """One PARAPHRASUS test: files, which entries are used, what a correct prediction is."""

    challenge: str
    name: str
    files: tuple[str, ...]
    use: Callable[[dict], bool] | None  # which entries are used (None: all)
    expected: bool | None  # the correct prediction (None: the entry's label)
    rule: str  # human-readable selection rule


_BOTH_NO = "both directions; expected = not a paraphrase"
DATASETS: tuple[DatasetSpec, ...] = (
    DatasetSpec("Classify!", "MRPC", ("ms-mrpc.json",), None, None, "all; expected = label"),
    DatasetSpec("Classify!", "STS-H", (STS_FILE,), lambda e: "label" in e, None, "entries with a label key; expected = label"),
    DatasetSpec("Minimize!", "SNLI", ("stannlp-snli-pre-hyp.json", "stannlp-snli-hyp-pre.json"), None, False, _BOTH_NO),
    DatasetSpec("Minimize!", "ANLI", ("fb-anli-pre-hyp.json", "fb-anli-hyp-pre.json"), None, False, _BOTH_NO),
    DatasetSpec("Minimize!", "STS", (STS_FILE,), lambda e: 0 <= e["score"] < 3, False, "0 <= score < 3; expected = not a paraphrase"),
    DatasetSpec("Minimize!", "SICK", ("sickr-sts.json",), lambda e: 1 <= e["score"] < 3, False,
                "1 <= score < 3; expected = not a paraphrase"),
    DatasetSpec("Maximize!", "TRUE", ("amr_true_paraphrases.json",), None, True, "all; expected = paraphrase"),
    DatasetSpec("Maximize!", "SIMP", ("onestop_parallel_all_pairs.json",), None, True, "all; expected = paraphrase"),
    # last, so that a folder with or without them samples the same pairs of the others (--limit)
    DatasetSpec("Classify!", "PAWSX", ("paws-x-test.json",), None, None, "all; expected = label"),
    DatasetSpec("Minimize!", "XNLI", ("fb-xnli-pre-hyp.json", "fb-xnli-hyp-pre.json"), None, False, _BOTH_NO),
)
DATASET_NAMES = tuple(d.name for d in DATASETS)


@dataclass(frozen=True)
class Pair:
    """One test item: ``sentence1`` is the judge's source, ``sentence2`` its hypothesis."""

    dataset: str
    file: str
    pair_id: str
    sentence1: str
    sentence2: str
    expected: bool
    sts: float | None = None  # the STS similarity (0-5) of STS-benchmark pairs, for PARAPHRASUS Fig. 1


def find_data_dir(data_dir: str | Path | None = None) -> Path:
    """The PARAPHRASUS folder: ``data_dir``, else ``$PARAPHRASUS_DIR``, else ``../shared/data/paraphrasus`` or
    ``shared/data/paraphrasus``.

    Example:
        >>> find_data_dir()  # $PARAPHRASUS_DIR is set here
        PosixPath('.../paraphrasus')
    """
    if data_dir is not None:
        candidates = [Path(data_dir)]
    elif os.environ.get("PARAPHRASUS_DIR"):
        candidates = [Path(os.environ["PARAPHRASUS_DIR"])]
    else:
        candidates = [Path("../shared/data/paraphrasus"), Path("shared/data/paraphrasus")]
    for path in candidates:
        for folder in (path, path / "datasets_no_results"):  # the data folder, or the upstream release holding it
            if (folder / "ms-mrpc.json").is_file():
                return folder
    raise FileNotFoundError(
        f"no PARAPHRASUS data (ms-mrpc.json, ...) in {[str(c) for c in candidates]}; "
        "pass --data-dir / data_dir= or set PARAPHRASUS_DIR to the folder with the benchmark's JSON files."
    )


def _read(path: Path) -> dict[str, dict]:
    if not path.is_file():
        raise FileNotFoundError(f"PARAPHRASUS file {path} is missing; the folder must hold the benchmark's JSON files.")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object {{pair_id: {{sentence1, sentence2, ...}}}}.")
    return data


def missing_datasets(data_dir: str | Path | None = None) -> list[str]:
    """The benchmark's datasets whose files are not in the data folder (PAWS-X, XNLI: optional).

    Example:
        >>> missing_datasets(find_data_dir())  # the folder of this checkout holds neither
        ['PAWSX', 'XNLI']
    """
    folder = find_data_dir(data_dir)
    return [d.name for d in DATASETS if d.name in OPTIONAL and not all((folder / f).is_file() for f in d.files)]


def peer_file(folder: Path, peer: str) -> Path | None:
    """The file of a peer's published figures (:data:`PEER_FILES`) beside or in ``folder``; None if absent.

    Example:
        >>> peer_file(find_data_dir(), "paper").name
        'results_paper.json'
    """
    release, copy = PEER_FILES[peer]
    for path in (folder.parent / release, folder / release, folder / copy):
        if path.is_file():
            return path
    return None


def load_pairs(
    data_dir: str | Path | None = None,
    *,
    datasets: Sequence[str] | None = None,
    limit: int | None = None,
    seed: int = 0,
) -> dict[str, list[Pair]]:
    """The test pairs per dataset. ``limit`` keeps a random sample of at most that many pairs per
    dataset (shared evenly between the two directions of SNLI/ANLI), in file order.

    Example:
        >>> pairs = load_pairs(limit=10)
        >>> len(pairs["SNLI"]), sorted({p.file for p in pairs["SNLI"]})
        (10, ['stannlp-snli-hyp-pre.json', 'stannlp-snli-pre-hyp.json'])
    """
    folder = find_data_dir(data_dir)
    missing = missing_datasets(folder)
    wanted = [d for d in DATASET_NAMES if d not in missing] if datasets is None else list(datasets)
    unknown = [d for d in wanted if d not in DATASET_NAMES]
    if unknown:
        raise ValueError(f"unknown PARAPHRASUS dataset(s) {unknown}; available: {list(DATASET_NAMES)}.")
    absent = [d for d in DATASETS if d.name in wanted and d.name in missing]
    if absent:
        raise ValueError(f"{', '.join(d.name for d in absent)}: {folder} lacks "
                         f"{', '.join(f for d in absent for f in d.files if not (folder / f).is_file())} "
                         "(from the benchmark's release); add them, or leave those datasets out.")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}.")
    rng = random.Random(seed)
    out: dict[str, list[Pair]] = {}
    cache: dict[str, dict[str, dict]] = {}
    for spec in DATASETS:
        if spec.name not in wanted:
            continue
        parts = len(spec.files)  # the limit shared evenly over the files, earlier ones taking the remainder
        quotas = [limit // parts + (i < limit % parts) for i in range(parts)] if limit is not None else [None] * parts
        pairs: list[Pair] = []
        for file, quota in zip(spec.files, quotas):
            entries = cache.setdefault(file, _read(folder / file))
            chosen = [(k, e) for k, e in entries.items() if spec.use is None or spec.use(e)]
            if quota is not None and quota < len(chosen):
                keep = sorted(rng.sample(range(len(chosen)), quota))
                chosen = [chosen[i] for i in keep]
            for key, entry in chosen:
                try:
                    sts = entry.get("score") if file == STS_FILE else None
                    expected = bool(entry["label"]) if spec.expected is None else spec.expected
                    pairs.append(Pair(spec.name, file, key, entry["sentence1"], entry["sentence2"], expected, sts))
                except KeyError as err:
                    raise ValueError(f"{file}: entry {key!r} lacks {err}.") from None
        out[spec.name] = pairs
    return out


def peer_results(data_dir: str | Path | None = None, peers: str = "all") -> dict[str, dict[str, Any]]:
    """Published error rates (fractions) per peer method: ``{peer: {dataset: rate, "averages": {...}}}``;
    ``peers``: "all", "none" or a key of :data:`PEER_FILES` (:func:`peer_file`).

    Example:
        >>> peer_results(peers="llama3")["llama_3_8b_ins_q4_k_m"]["MRPC"]
        0.241...
    """
    if peers == "none":
        return {}
    if peers not in ("all", *PEER_FILES):
        raise ValueError(f"peers must be one of all, none, {', '.join(PEER_FILES)}; got {peers!r}.")
    folder = find_data_dir(data_dir)
    out: dict[str, dict[str, Any]] = {}
    for key in PEER_FILES:
        file = peer_file(folder, key)
        if peers not in ("all", key) or file is None:
            continue
        data = json.loads(file.read_text(encoding="utf-8"))
        for challenge in CHALLENGES:
            for dataset, methods in data.get(challenge, {}).items():
                for method, value in methods.items():
                    out.setdefault(method, {"averages": {}})[dataset] = _percent(value)
        for method, averages in data.get("Averages", {}).items():
            out.setdefault(method, {"averages": {}})["averages"] = {k: _percent(v) for k, v in averages.items()}
    return out


def _percent(value: Any) -> float:
    text = str(value).strip()
    return float(text[:-1]) / 100.0 if text.endswith("%") else float(text)


def _challenge_means(rates: Mapping[str, float]) -> tuple[dict[str, float], float | None]:
    """The mean error rate of each challenge over its datasets present in ``rates``, and the mean of those means."""
    members = {c: [rates[name] for name in _members(c, rates)] for c in CHALLENGES}
    means = {c: sum(m) / len(m) for c, m in members.items() if m}
    return means, sum(means.values()) / len(means) if means else None


def _members(challenge: str, present: Iterable[str]) -> list[str]:
    """The datasets of ``challenge`` in ``present``, in :data:`DATASETS` order."""
    return [d.name for d in DATASETS if d.challenge == challenge and d.name in present]


def summarise(errors: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """Error rate per dataset, mean per challenge and overall mean of the challenge means from
    ``{dataset: (wrong, total)}``.

    Example:
        >>> s = summarise({"MRPC": (1, 4), "STS-H": (1, 2), "SNLI": (0, 5), "TRUE": (2, 2)})
        >>> s["challenges"]["Classify!"], s["overall"]
        (0.375, 0.4583333333333333)
    """
    empty = [name for name, (_, total) in errors.items() if total < 1]
    if empty:
        raise ValueError(f"dataset {empty[0]} has no pairs; cannot compute its error rate.")
    rates = {name: wrong / total for name, (wrong, total) in errors.items()}
    challenges, overall = _challenge_means(rates)
    return {"error_rates": rates, "challenges": challenges, "overall": overall}


def run_paraphrasus(
    judge: Any,
    data_dir: str | Path | None = None,
    *,
    template: Any = "para-fs",
    threshold: float = 0.0,
    datasets: Sequence[str] | None = None,
    limit: int | None = None,
    seed: int = 0,
    chunk_size: int | None = None,
    peers: str = "all",
    progress: bool = True,
    keep_pairs: bool = False,
    output_dir: str | Path | None = None,
    overwrite: bool = False,
    plots: bool = False,
) -> dict[str, Any]:
    """Score every selected pair (``source=sentence1, hypothesis=sentence2``), predict "paraphrase" when
    ``logratio > threshold``, and summarise the error rates; ``output_dir`` saves scores as they come (resumable),
    the results and, with ``plots``, :func:`paraphrasus_plots` in ``output_dir/plots``.

    Example:
        >>> results = run_paraphrasus(judge, limit=2, progress=False)
        >>> results["n"], sorted(results["challenges"])  # 2 pairs per dataset
        (16, ['Classify!', 'Maximize!', 'Minimize!'])
        >>> 0.0 <= results["overall"] <= 1.0  # the mean of the challenges' mean error rates
        True
    """
    folder = find_data_dir(data_dir)
    pairs = [p for items in load_pairs(folder, datasets=datasets, limit=limit, seed=seed).values() for p in items]
    condition = Condition(JUDGE_ROW, template, {"source": [p.sentence1 for p in pairs], "hypothesis": [p.sentence2 for p in pairs]})
    items = [
        {"i": i, "row": f"{p.file} {p.pair_id}", "dataset": p.dataset, "file": p.file, "pair_id": p.pair_id,
         "expected": p.expected, "sts": p.sts, "h": fingerprint(p.file, p.pair_id, p.sentence1, p.sentence2, p.expected)}
        for i, p in enumerate(pairs)
    ]
    meta = {
        "benchmark": "PARAPHRASUS",
        "task": "paraphrasus",
        "judge": getattr(judge, "name", str(judge)),
        "template": condition.template_name,
        "threshold": threshold,
        "limit_per_dataset": limit,
        "seed": seed,
        "n": len(items),
        "datasets_selected": sorted({p.dataset for p in pairs}, key=DATASET_NAMES.index),
        "not_in_data_folder": missing_datasets(folder),
        "peer_figures": peer_results(folder, peers),
    }
    config = {"task": "paraphrasus", "judge": meta["judge"],
              "template": [condition.template_name, fingerprint(repr(load_template(template)))],
              "selection": [meta["datasets_selected"], limit, seed]}
    keywords = chat_settings(judge, {JUDGE_ROW: template}).get(JUDGE_ROW)
    if keywords:  # Qwen3's enable_thinking, the date gpt-oss writes as today...
        config["chat_template_kwargs"] = meta["chat_template_kwargs"] = keywords
    distances = {"edit_distance": lambda index: edit_distances([pairs[i].sentence1 for i in index], [pairs[i].sentence2 for i in index])}
    with ScoreStore(output_dir, config, meta, overwrite=overwrite) as store:
        lines = score_items(judge, [condition], items, extras=distances, store=store if output_dir else None,
                            chunk_size=chunk_size, progress=progress, desc="PARAPHRASUS")
    results = paraphrasus_results(meta, lines)
    if plots and output_dir is not None:
        results["plots"] = paraphrasus_plots(results, Path(output_dir) / "plots")
    if not keep_pairs:
        del results["pairs"]
    if output_dir is not None:
        write_outputs(output_dir, results, markdown_report(results))
    return results


def paraphrasus_results(meta: Mapping[str, Any], lines: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Error rates per dataset, challenge and overall from scored lines (no judge needed).

    Example:
        >>> from pluie_reward.tools.evaluation.store import load_run
        >>> results = run_paraphrasus(judge, limit=2, progress=False, output_dir="out/paraphrasus")
        >>> run, lines = load_run("out/paraphrasus")
        >>> paraphrasus_results(run["meta"], lines)["overall"] == results["overall"]
        True
    """
    threshold = meta.get("threshold", 0.0)
    by_dataset: dict[str, list[Mapping[str, Any]]] = {}
    for line in lines:
        by_dataset.setdefault(line["dataset"], []).append(line)
    if not by_dataset:
        raise ValueError("no scored pairs yet.")
    per_dataset: dict[str, Any] = {}
    errors: dict[str, tuple[int, int]] = {}
    for spec in DATASETS:
        members = by_dataset.get(spec.name)
        if not members:
            continue
        wrong = sum((line["scores"]["PLUIE"] > threshold) != line["expected"] for line in members)
        errors[spec.name] = (wrong, len(members))
        per_dataset[spec.name] = {
            "challenge": spec.challenge,
            "n": len(members),
            "errors": wrong,
            "files": list(spec.files),
            "rule": spec.rule,
            "expected_positive": sum(bool(line["expected"]) for line in members),
        }
    summary = summarise(errors)
    for name, rate in summary["error_rates"].items():
        per_dataset[name]["error_rate"] = rate
    planned = meta.get("n", len(lines))
    return {
        **{k: v for k, v in meta.items() if k not in ("peer_figures", "n")},
        "n": len(lines),
        "planned": planned,
        "datasets": per_dataset,
        "challenges": summary["challenges"],
        "overall": summary["overall"],
        "not_included": list(meta.get("not_in_data_folder", OPTIONAL)),  # runs saved before it was recorded: both
        "peers": {m: _peer_summary(v, per_dataset) for m, v in meta.get("peer_figures", {}).items()},
        "pairs": {
            name: [{"pair_id": line["pair_id"], "file": line["file"], "logratio": line["scores"]["PLUIE"],
                    "expected": line["expected"], "predicted": line["scores"]["PLUIE"] > threshold,
                    "sts": line.get("sts"), "edit_distance": line.get("edit_distance")} for line in members]
            for name, members in by_dataset.items()
        },
    }


def paraphrasus_plots(results: Mapping[str, Any], folder: str | Path) -> list[str]:
    """Per dataset a score histogram (and threshold curves for Classify!), score against edit distance, the
    share predicted paraphrase per STS bin, and error rates beside the peers. Needs ``results["pairs"]``.

    Example:
        >>> results = run_paraphrasus(judge, limit=2, progress=False, keep_pairs=True)
        >>> paraphrasus_plots(results, "out/paraphrasus/plots")[:2]
        ['out/paraphrasus/plots/MRPC_histogram.png', 'out/paraphrasus/plots/MRPC_thresholds.png']
    """
    folder = Path(folder)
    threshold = results["threshold"]
    who = f"judge {results['judge']}, template {results['template']}"
    written = []
    everything = []
    for name, pairs in results["pairs"].items():
        scores = [p["logratio"] for p in pairs]
        expected = [p["expected"] for p in pairs]
        everything += pairs
        spec = next(d for d in DATASETS if d.name == name)
        title = f"PARAPHRASUS {name} ({spec.challenge}, {len(pairs)} pairs): {who}"
        written.append(str(plot_score_histograms(scores, expected, folder / f"{name}_histogram.png", title=title,
                                                 natural_threshold=threshold, xlabel=PLUIE_AXIS)))
        if spec.challenge == "Classify!" and len(set(expected)) == 2:
            written.append(str(plot_threshold_curves(scores, expected, folder / f"{name}_thresholds.png", title=title,
                                                     natural_threshold=threshold)))
    if everything and all(p.get("edit_distance") is not None for p in everything):
        written.append(str(plot_edit_distance(
            [p["logratio"] for p in everything], [p["expected"] for p in everything], [p["edit_distance"] for p in everything],
            folder / "edit_distance.png", title=f"PARAPHRASUS, {len(everything)} pairs: {who}",
            natural_threshold=threshold, ylabel=PLUIE_AXIS)))
    sts = {(p["file"], p["pair_id"]): p for p in everything if p.get("sts") is not None}
    if sts:
        human_pairs = results["pairs"].get("STS-H", [])
        human = ([p["sts"] for p in human_pairs], [p["expected"] for p in human_pairs]) if human_pairs else None
        written.append(str(plot_sts_bins([p["sts"] for p in sts.values()], [p["predicted"] for p in sts.values()],
                                         folder / "sts_bins.png", human=human,
                                         title="Share predicted paraphrase per STS bin (PARAPHRASUS Fig. 1), "
                                               f"STS benchmark pairs scored: {who}")))
    columns = {f"{results['judge']} ({results['template']})": _summary_rows(results["datasets"], results["challenges"], results["overall"])}
    for peer, figures in results.get("peers", {}).items():
        columns[peer] = _summary_rows({d: {"error_rate": r} for d, r in figures["error_rates"].items()},
                                      figures["challenges_same_datasets"], figures["overall_same_datasets"])
    written.append(str(plot_error_rates(columns, folder / "error_rates.png",
                                        title=f"PARAPHRASUS error rates (lower is better), threshold {threshold:g}")))
    return written


def _summary_rows(datasets: Mapping[str, Any], challenges: Mapping[str, float], overall: float | None) -> dict[str, float | None]:
    rows: dict[str, float | None] = {}
    for challenge in CHALLENGES:
        rows.update({name: datasets[name]["error_rate"] for name in _members(challenge, datasets)})
        if challenge in challenges:
            rows[f"{challenge} mean"] = challenges[challenge]
    rows["overall"] = overall
    return rows


def _peer_summary(figures: dict[str, Any], present: Iterable[str]) -> dict[str, Any]:
    """A peer's per-dataset rates, its challenge means over the datasets of this run, and its published averages."""
    rates = {d: figures[d] for d in present if d in figures}
    challenges, overall = _challenge_means(rates)
    return {"error_rates": rates, "challenges_same_datasets": challenges, "overall_same_datasets": overall,
            "published_averages": figures.get("averages", {})}


def partial_note(results: Mapping[str, Any], unit: str = "items") -> str:
    """" PARTIAL RUN: ..." when fewer items were scored than planned (an interrupted run), else ""."""
    planned = results.get("planned", results["n"])
    return "" if planned == results["n"] else f" PARTIAL RUN: {results['n']} of {planned} {unit} scored so far."


def markdown_report(results: dict[str, Any]) -> str:
    """The results as a Markdown table: rows per dataset, challenge mean and overall; columns this judge and peers.

    Example:
        >>> results = run_paraphrasus(judge, limit=2, progress=False)
        >>> print(markdown_report(results))
        | challenge | dataset | n | tiny-random (para-fs) | llama_3_8b_ins_q4_k_m | ...
        | Classify! | MRPC | 2 | ...
    """
    peers = list(results.get("peers", {}))
    headers = ["challenge", "dataset", "n", f"{results['judge']} ({results['template']})", *peers]
    rows = []
    for challenge in CHALLENGES:
        names = _members(challenge, results["datasets"])
        for name in names:
            info = results["datasets"][name]
            rows.append([challenge, name, str(info["n"]), percent(info["error_rate"]),
                         *[percent(results["peers"][p]["error_rates"].get(name)) for p in peers]])
        if names:
            rows.append([challenge, "**mean**", "", f"**{percent(results['challenges'][challenge])}**",
                         *[percent(results["peers"][p]["challenges_same_datasets"].get(challenge)) for p in peers]])
    rows.append(["**overall**", "mean of challenge means", "", f"**{percent(results['overall'])}**",
                 *[percent(results["peers"][p]["overall_same_datasets"]) for p in peers]])
    limit = results.get("limit_per_dataset")
    note = (
        f"Error rates (lower is better), threshold {results['threshold']:g}"
        + (f", a random subset of at most {limit} pairs per dataset (seed {results['seed']})" if limit else ", all pairs")
        + ". Peer columns: published figures; their means are recomputed over the same datasets"
        + (f" ({', '.join(results['not_included'])} {'is' if len(results['not_included']) == 1 else 'are'} not in the data "
           "folder)" if results.get("not_included") else "") + f".{partial_note(results, 'pairs')}"
    )
    return markdown_table(headers, rows) + "\n\n" + note
