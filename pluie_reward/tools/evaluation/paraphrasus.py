"""The PARAPHRASUS benchmark (Michail et al., COLING 2025) run with a PLUIE judge, following the
protocol of the data folder's README: which pairs of which files, the expected prediction per
dataset, the error rate per dataset, the mean per challenge and the mean of the three challenge means.

The data is not shipped with the package: point ``data_dir`` at the folder holding the authors'
JSON files (``ms-mrpc.json``, ...). PAWS-X and XNLI are not in that folder, so challenge means are
over the datasets present; the peers' means are recomputed over the same datasets for comparison
(their published averages, which include PAWS-X/XNLI, are kept in the results as well).

Example:
    >>> results = run_paraphrasus(judge, "../shared/data/paraphrasus", limit=20)  # doctest: +SKIP
    >>> print(markdown_report(results))  # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

CHALLENGES = ("Classify!", "Minimize!", "Maximize!")
MISSING = ("PAWSX", "XNLI")  # in the benchmark, not in the data folder
PEER_FILES = {"llama3": "results_llama3.json", "paper": "results_paper.json"}


@dataclass(frozen=True)
class DatasetSpec:
    """One PARAPHRASUS test: files, which entries are used, what a correct prediction is."""

    challenge: str
    name: str
    files: tuple[str, ...]
    use: Callable[[dict], bool]
    expected: Callable[[dict], bool]
    rule: str  # human-readable selection rule


def _label(entry: dict) -> bool:
    return bool(entry["label"])


DATASETS: tuple[DatasetSpec, ...] = (
    DatasetSpec("Classify!", "MRPC", ("ms-mrpc.json",), lambda e: True, _label, "all; expected = label"),
    DatasetSpec("Classify!", "STS-H", ("stsbenchmark-test-sts.json",), lambda e: "label" in e, _label,
                "entries with a label key; expected = label"),
    DatasetSpec("Minimize!", "SNLI", ("stannlp-snli-pre-hyp.json", "stannlp-snli-hyp-pre.json"), lambda e: True,
                lambda e: False, "both directions; expected = not a paraphrase"),
    DatasetSpec("Minimize!", "ANLI", ("fb-anli-pre-hyp.json", "fb-anli-hyp-pre.json"), lambda e: True,
                lambda e: False, "both directions; expected = not a paraphrase"),
    DatasetSpec("Minimize!", "STS", ("stsbenchmark-test-sts.json",), lambda e: 0 <= e["score"] < 3,
                lambda e: False, "0 <= score < 3; expected = not a paraphrase"),
    DatasetSpec("Minimize!", "SICK", ("sickr-sts.json",), lambda e: 1 <= e["score"] < 3,
                lambda e: False, "1 <= score < 3; expected = not a paraphrase"),
    DatasetSpec("Maximize!", "TRUE", ("amr_true_paraphrases.json",), lambda e: True, lambda e: True,
                "all; expected = paraphrase"),
    DatasetSpec("Maximize!", "SIMP", ("onestop_parallel_all_pairs.json",), lambda e: True, lambda e: True,
                "all; expected = paraphrase"),
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


def find_data_dir(data_dir: str | Path | None = None) -> Path:
    """The PARAPHRASUS folder: ``data_dir``, else ``$PARAPHRASUS_DIR``, else ``../shared/data/paraphrasus``
    or ``shared/data/paraphrasus`` relative to the working directory.

    Example:
        >>> find_data_dir("/data/paraphrasus")  # doctest: +SKIP
        PosixPath('/data/paraphrasus')
    """
    if data_dir is not None:
        candidates = [Path(data_dir)]
    elif os.environ.get("PARAPHRASUS_DIR"):
        candidates = [Path(os.environ["PARAPHRASUS_DIR"])]
    else:
        candidates = [Path("../shared/data/paraphrasus"), Path("shared/data/paraphrasus")]
    for path in candidates:
        if (path / "ms-mrpc.json").is_file():
            return path
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


def _split(limit: int, parts: int) -> list[int]:
    """Share ``limit`` over ``parts`` files as evenly as possible (earlier files take the remainder)."""
    return [limit // parts + (1 if i < limit % parts else 0) for i in range(parts)]


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
        >>> pairs = load_pairs(limit=10)  # doctest: +SKIP
        >>> len(pairs["SNLI"]), {p.file for p in pairs["SNLI"]}  # doctest: +SKIP
        (10, {'stannlp-snli-pre-hyp.json', 'stannlp-snli-hyp-pre.json'})
    """
    folder = find_data_dir(data_dir)
    wanted = list(DATASET_NAMES) if datasets is None else list(datasets)
    unknown = [d for d in wanted if d not in DATASET_NAMES]
    if unknown:
        raise ValueError(f"unknown PARAPHRASUS dataset(s) {unknown}; available: {list(DATASET_NAMES)} ({', '.join(MISSING)} are not in the data folder).")
    if limit is not None and limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}.")
    rng = random.Random(seed)
    out: dict[str, list[Pair]] = {}
    cache: dict[str, dict[str, dict]] = {}
    for spec in DATASETS:
        if spec.name not in wanted:
            continue
        quotas = _split(limit, len(spec.files)) if limit is not None else [None] * len(spec.files)
        pairs: list[Pair] = []
        for file, quota in zip(spec.files, quotas):
            entries = cache.setdefault(file, _read(folder / file))
            chosen = [(k, e) for k, e in entries.items() if spec.use(e)]
            if quota is not None and quota < len(chosen):
                keep = sorted(rng.sample(range(len(chosen)), quota))
                chosen = [chosen[i] for i in keep]
            for key, entry in chosen:
                try:
                    pairs.append(Pair(spec.name, file, key, entry["sentence1"], entry["sentence2"], spec.expected(entry)))
                except KeyError as err:
                    raise ValueError(f"{file}: entry {key!r} lacks {err}.") from None
        out[spec.name] = pairs
    return out


def peer_results(data_dir: str | Path | None = None, peers: str = "all") -> dict[str, dict[str, Any]]:
    """Published error rates (fractions) per peer method: ``{peer: {dataset: rate, "averages": {...}}}``.

    ``peers`` is "all", "llama3" (results_llama3.json), "paper" (results_paper.json) or "none".

    Example:
        >>> peer_results(peers="llama3")["llama_3_8b_ins_q4_k_m"]["MRPC"]  # doctest: +SKIP
        0.241
    """
    if peers == "none":
        return {}
    if peers not in ("all", *PEER_FILES):
        raise ValueError(f"peers must be one of all, none, {', '.join(PEER_FILES)}; got {peers!r}.")
    folder = find_data_dir(data_dir)
    out: dict[str, dict[str, Any]] = {}
    for key, file in PEER_FILES.items():
        if peers not in ("all", key) or not (folder / file).is_file():
            continue
        data = json.loads((folder / file).read_text(encoding="utf-8"))
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


def summarise(errors: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """Error rate per dataset, mean per challenge (over the datasets present), overall mean of the
    challenge means. ``errors`` maps dataset -> (wrong, total).

    Example:
        >>> s = summarise({"MRPC": (1, 4), "STS-H": (1, 2), "SNLI": (0, 5), "TRUE": (2, 2)})
        >>> s["challenges"]["Classify!"], s["overall"]
        (0.375, 0.4583333333333333)
    """
    rates = {}
    for name, (wrong, total) in errors.items():
        if total < 1:
            raise ValueError(f"dataset {name} has no pairs; cannot compute its error rate.")
        rates[name] = wrong / total
    challenges = {}
    for challenge in CHALLENGES:
        members = [rates[d.name] for d in DATASETS if d.challenge == challenge and d.name in rates]
        if members:
            challenges[challenge] = sum(members) / len(members)
    overall = sum(challenges.values()) / len(challenges) if challenges else None
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
    chunk_size: int = 64,
    peers: str = "all",
    progress: bool = True,
    keep_pairs: bool = False,
) -> dict[str, Any]:
    """Score every selected pair with ``judge.score(template, source=sentence1, hypothesis=sentence2)``,
    predict "paraphrase" when ``logratio > threshold``, and summarise the error rates.

    Example:
        >>> results = run_paraphrasus(judge, limit=20)  # doctest: +SKIP
        >>> results["overall"]  # doctest: +SKIP
        0.41
    """
    from tqdm.auto import tqdm

    folder = find_data_dir(data_dir)
    pairs = load_pairs(folder, datasets=datasets, limit=limit, seed=seed)
    total = sum(len(p) for p in pairs.values())
    bar = tqdm(total=total, desc="PARAPHRASUS", unit="pair", disable=not progress)
    per_dataset: dict[str, Any] = {}
    errors: dict[str, tuple[int, int]] = {}
    records: dict[str, list[dict]] = {}
    for name, items in pairs.items():
        scores: list[float] = []
        for start in range(0, len(items), chunk_size):
            chunk = items[start : start + chunk_size]
            bar.set_postfix_str(name)
            scores.extend(judge.score(template, source=[p.sentence1 for p in chunk], hypothesis=[p.sentence2 for p in chunk]))
            bar.update(len(chunk))
        wrong = sum((s > threshold) != p.expected for s, p in zip(scores, items))
        errors[name] = (wrong, len(items))
        spec = next(d for d in DATASETS if d.name == name)
        per_dataset[name] = {
            "challenge": spec.challenge,
            "n": len(items),
            "errors": wrong,
            "files": list(spec.files),
            "rule": spec.rule,
            "expected_positive": sum(p.expected for p in items),
        }
        records[name] = [
            {"pair_id": p.pair_id, "file": p.file, "logratio": s, "expected": p.expected, "predicted": s > threshold}
            for p, s in zip(items, scores)
        ]
    bar.close()
    summary = summarise(errors)
    for name, rate in summary["error_rates"].items():
        per_dataset[name]["error_rate"] = rate
    peer = peer_results(folder, peers)
    results = {
        "benchmark": "PARAPHRASUS",
        "judge": getattr(judge, "name", str(judge)),
        "template": getattr(template, "name", template),
        "threshold": threshold,
        "limit_per_dataset": limit,
        "seed": seed,
        "datasets": per_dataset,
        "challenges": summary["challenges"],
        "overall": summary["overall"],
        "not_included": list(MISSING),
        "peers": {m: _peer_summary(v, per_dataset) for m, v in peer.items()},
    }
    if keep_pairs:
        results["pairs"] = records
    return results


def _peer_summary(figures: dict[str, Any], present: Iterable[str]) -> dict[str, Any]:
    """A peer's per-dataset rates, its challenge means over the datasets of this run, and its published averages."""
    present = list(present)
    rates = {d: figures[d] for d in present if d in figures}
    challenges = {}
    for challenge in CHALLENGES:
        members = [rates[d.name] for d in DATASETS if d.challenge == challenge and d.name in rates]
        if members:
            challenges[challenge] = sum(members) / len(members)
    return {
        "error_rates": rates,
        "challenges_same_datasets": challenges,
        "overall_same_datasets": sum(challenges.values()) / len(challenges) if challenges else None,
        "published_averages": figures.get("averages", {}),
    }


def markdown_report(results: dict[str, Any]) -> str:
    """The results as a Markdown table: one row per dataset, challenge mean and overall mean; one
    column for this judge and one per peer (error rates in %, lower is better).

    Example:
        >>> print(markdown_report(results))  # doctest: +SKIP
    """
    from .report import markdown_table, percent

    peers = list(results.get("peers", {}))
    headers = ["challenge", "dataset", "n", f"{results['judge']} ({results['template']})", *peers]
    rows = []
    for challenge in CHALLENGES:
        names = [d.name for d in DATASETS if d.challenge == challenge and d.name in results["datasets"]]
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
        + f". Peer columns: published figures; their means are recomputed over the same datasets "
        f"({', '.join(results['not_included'])} are not in the data folder)."
    )
    return markdown_table(headers, rows) + "\n\n" + note
