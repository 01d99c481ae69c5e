"""``pluie-reward eval``: classification, preference and PARAPHRASUS evaluations of a judge.

Heavy modules are imported inside the functions so that ``pluie-reward --help`` stays fast.

Example (shell)::

    pluie-reward eval classification --input pairs.jsonl --label-column label --output-dir out/
    pluie-reward eval preference --input prefs.jsonl --a-column a --b-column b --human-column human
    pluie-reward eval paraphrasus --limit 20 --output-dir out/paraphrasus
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..cli.common import UsageError, add_judge_arguments, command, judge_from_args


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--template", "-t", default="para-fs", help="template name or YAML path (default para-fs)")
    p.add_argument("--output-dir", "-o", type=Path, help="write results.json and results.md (and plots) here")
    p.add_argument("--chunk-size", type=int, default=64, help="items per Judge.score call (progress granularity)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_judge_arguments(p)


def _file_task(p: argparse.ArgumentParser) -> None:
    p.add_argument("--input", "-i", type=Path, required=True, help="a .jsonl or .csv file, one item per line/row")
    p.add_argument("--column", action="append", default=[], metavar="FIELD=COLUMN",
                   help="read template FIELD from COLUMN (default: the column named like the field)")
    p.add_argument("--baselines", default="levenshtein,bleu",
                   help="comma-separated among levenshtein, bleu, embedding; or 'all' / 'none' (default levenshtein,bleu)")
    p.add_argument("--reference", default=None,
                   help="template field the baselines compare candidates with (default: gold if given, else the first field)")


def _configure(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="eval_task", required=True, metavar="{classification,preference,paraphrasus}")
    c = sub.add_parser("classification", help="accuracy/precision/recall/F1 at threshold 0 and a posteriori, with baselines")
    _file_task(c)
    c.add_argument("--label-column", default="label", help="column with the binary label (default label)")
    c.add_argument("--threshold", type=float, default=0.0, help="the judge's natural threshold (default 0)")
    c.add_argument("--plots", action="store_true", help="write threshold-curve and histogram PNGs into --output-dir")
    _common(c)
    c.set_defaults(eval_run=_classification)

    r = sub.add_parser("preference", help="pairwise accuracy with tie calibration, Cramér's V, Cohen's kappa")
    _file_task(r)
    r.add_argument("--a-column", default="a", help="column of candidate A (default a)")
    r.add_argument("--b-column", default="b", help="column of candidate B (default b)")
    r.add_argument("--human-column", default="human", help="column of the human choice A, B or tie (default human)")
    r.add_argument("--epsilon", type=float, default=None, help="fixed tie margin instead of tie calibration")
    _common(r)
    r.set_defaults(eval_run=_preference)

    b = sub.add_parser("paraphrasus", help="PARAPHRASUS error rates next to the published Llama-3 figures")
    b.add_argument("--data-dir", type=Path, default=None,
                   help="folder with the benchmark's JSON files (default: $PARAPHRASUS_DIR or ../shared/data/paraphrasus)")
    b.add_argument("--limit", type=int, default=None, help="random subset of at most N pairs per dataset (full run: ~21k pairs)")
    b.add_argument("--seed", type=int, default=0, help="seed of the --limit subset (default 0)")
    b.add_argument("--datasets", default=None, help="comma-separated subset of MRPC,STS-H,SNLI,ANLI,STS,SICK,TRUE,SIMP")
    b.add_argument("--threshold", type=float, default=0.0, help="paraphrase when logratio > threshold (default 0)")
    b.add_argument("--peers", default="all", choices=["all", "llama3", "paper", "none"],
                   help="published figures to print beside (default all)")
    b.add_argument("--plots", action="store_true", help="write per-dataset score histograms and Classify! threshold curves")
    b.add_argument("--save-pairs", action="store_true", help="keep every pair's score in results.json")
    _common(b)
    b.set_defaults(eval_run=_paraphrasus)


@command("eval", _configure)
def eval_command(args: argparse.Namespace) -> int:
    """Evaluate a judge: classification, preference or the PARAPHRASUS benchmark."""
    if args.chunk_size < 1:
        raise UsageError("--chunk-size must be >= 1.")
    return args.eval_run(args)


# file-based tasks -----------------------------------------------------------------------------
def _load_rows(
    args: argparse.Namespace, extra_columns: list[str], skip_fields: tuple[str, ...] = ()
) -> tuple[Any, dict[str, list], list[dict]]:
    """The template, its field columns (field -> values) and the raw rows of ``--input``."""
    from ..cli.common import field_columns, read_records
    from ...core.template import load_template

    template = load_template(args.template)
    records = read_records(args.input)
    if not records:
        raise UsageError(f"{args.input} holds no items.")
    mapping = field_columns(args, list(template.all_fields))
    columns = set(records[0])
    needed = [c for c in extra_columns if c not in columns]
    needed += [mapping[f] for f in template.fields if f not in skip_fields and mapping[f] not in columns]
    if needed:
        raise UsageError(f"{args.input}: no column(s) {needed}; columns: {sorted(columns)}. Use --column FIELD=COLUMN.")
    fields = {f: [r.get(c) for r in records] for f, c in mapping.items() if c in columns and f not in skip_fields}
    return template, fields, records


def _finish(args: argparse.Namespace, results: dict[str, Any], markdown: str) -> int:
    print(markdown)
    if args.output_dir is not None:
        from .report import write_outputs

        json_path, md_path = write_outputs(args.output_dir, results, markdown)
        print(f"\nwrote {json_path} and {md_path}")
    return 0


def _classification(args: argparse.Namespace) -> int:
    from .tasks import classification_markdown, evaluate_classification

    if args.plots and args.output_dir is None:
        raise UsageError("--plots needs --output-dir.")
    template, fields, records = _load_rows(args, [args.label_column])
    labels = [r.get(args.label_column) for r in records]
    judge = judge_from_args(args)
    results = evaluate_classification(
        judge, fields, labels, template=template, threshold=args.threshold, baselines=args.baselines,
        reference=args.reference, plots_dir=(args.output_dir / "plots") if args.plots else None,
        chunk_size=args.chunk_size, progress=not args.no_progress,
    )
    return _finish(args, results, classification_markdown(results))


def _preference(args: argparse.Namespace) -> int:
    from .tasks import evaluate_preference, preference_markdown

    template, fields, records = _load_rows(args, [args.a_column, args.b_column, args.human_column], ("hypothesis",))
    judge = judge_from_args(args)
    results = evaluate_preference(
        judge, fields, [r[args.a_column] for r in records], [r[args.b_column] for r in records],
        [r[args.human_column] for r in records], template=template, epsilon=args.epsilon,
        baselines=args.baselines, reference=args.reference, chunk_size=args.chunk_size, progress=not args.no_progress,
    )
    return _finish(args, results, preference_markdown(results))


# PARAPHRASUS ----------------------------------------------------------------------------------
def _paraphrasus(args: argparse.Namespace) -> int:
    from .paraphrasus import DATASETS, find_data_dir, markdown_report, run_paraphrasus

    if args.plots and args.output_dir is None:
        raise UsageError("--plots needs --output-dir.")
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be >= 1.")
    datasets = [d.strip() for d in args.datasets.split(",")] if args.datasets else None
    folder = find_data_dir(args.data_dir)
    judge = judge_from_args(args)
    results = run_paraphrasus(
        judge, folder, template=args.template, threshold=args.threshold, datasets=datasets, limit=args.limit,
        seed=args.seed, chunk_size=args.chunk_size, peers=args.peers, progress=not args.no_progress,
        keep_pairs=args.save_pairs or args.plots,
    )
    if args.plots:
        from .plots import plot_score_histograms, plot_threshold_curves

        plots = []
        for name, pairs in results["pairs"].items():
            scores = [p["logratio"] for p in pairs]
            expected = [p["expected"] for p in pairs]
            out = args.output_dir / "plots"
            plots.append(str(plot_score_histograms(scores, expected, out / f"{name}_histogram.png", title=f"PARAPHRASUS {name}",
                                                   label_names=("not paraphrase", "paraphrase"), natural_threshold=args.threshold)))
            challenge = next(d.challenge for d in DATASETS if d.name == name)
            if challenge == "Classify!" and len(set(expected)) == 2:
                plots.append(str(plot_threshold_curves(scores, expected, out / f"{name}_thresholds.png", title=f"PARAPHRASUS {name}",
                                                       natural_threshold=args.threshold)))
        results["plots"] = plots
        if not args.save_pairs:
            results.pop("pairs")
    return _finish(args, results, markdown_report(results))
