"""``pluie-reward eval``: classification, preference, the *-PLUIE paper's presets (ParaReval, NEAT,
French paraphrases), PARAPHRASUS, and ``report`` (tables and plots again from a saved run).

Everything about the input is checked before the judge loads; with ``-o DIR`` scores are saved
as they are computed and a rerun into the same folder resumes. Heavy modules are imported inside
the functions so that ``pluie-reward --help`` stays fast.

Example (shell)::

    pluie-reward eval classification --input pairs.jsonl --label-column label --output-dir out/
    pluie-reward eval preference --input prefs.jsonl --a-column a --b-column b --human-column human
    pluie-reward eval parareval parareval_test.jsonl -o out/parareval
    pluie-reward eval report out/parareval --plots
    pluie-reward eval paraphrasus --limit 20 --output-dir out/paraphrasus
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Callable

from ...core.template import load_template
from ...integrations.fields import parse_assignments
from ...integrations.outputs import SECOND_CANDIDATE
from ..cli.common import add_judge_arguments, field_columns, judge_from_args
from ..cli.output import check_output_dir
from ..cli.records import check_texts, read_table, text_problem
from ..cli.registry import command
from ..shared import UsageError, comma_list, finite_float, nonneg_float, nonneg_int, positive_int
from .baselines import missing_baselines, parse_baselines
from .metrics import _each, binary_label, preference_label, require_metric_libraries
from .presets import FRENCH_PAIRS, PRESETS, paper_table
from .scoring import JUDGE_ROW, Condition, reference_field
from .store import StoreMismatch

CHOICE_ROW = "LLM-choice"  # the result row of a choice template in eval preference (the seeds' name for it)
INPUT_HELP = "the items: .jsonl/.json, .csv/.tsv, .parquet, .arrow or a datasets folder (save_to_disk)"


def _run_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output-dir", "-o", type=Path,
                   help="save scores as they come (scores.jsonl; a rerun resumes), results.json/.md and plots here")
    p.add_argument("--overwrite", action="store_true", help="discard scores already in --output-dir instead of resuming")
    p.add_argument("--chunk-size", type=positive_int, default=None,
                   help="items per Judge.score call, saved after each (default: about one forward batch: 8 prompts on CPU, "
                        "64 on GPU; A and B count as two)")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")
    add_judge_arguments(p)


def _baseline_options(p: argparse.ArgumentParser, default: str = "levenshtein,bleu") -> None:
    p.add_argument("--baselines", default=default,
                   help=f"comma-separated among levenshtein, bleu, embedding; or 'all' (those installed) / 'none' (default {default})")


def _data_options(p: Any, column: str, column_help: str, *names: str, input_help: str = INPUT_HELP) -> None:
    """The input (``names``: positional or flags), --split, --limit and --column (metavar ``column``)."""
    p.add_argument(*names, type=Path, help=input_help, **({"required": True} if names[0].startswith("-") else {}))
    p.add_argument("--split", default=None, help="split of a datasets folder holding several")
    p.add_argument("--limit", type=positive_int, default=None, help="only the first N items")
    p.add_argument("--column", action="append", default=[], metavar=column, help=column_help)


def _file_task(p: argparse.ArgumentParser) -> None:
    _data_options(p, "FIELD=COLUMN", "read template FIELD from COLUMN (nested: a.b; default: the column named like the field; "
                                     "FIELD= leaves an optional field such as gold out)", "--input", "-i")
    p.add_argument("--template", "-t", default="para-fs", help="template name or YAML path (default para-fs)")
    _baseline_options(p)
    p.add_argument("--reference", default=None,
                   help="template field the baselines compare candidates with (default: gold if given, else the first field)")


def _preset(p: argparse.ArgumentParser, name: str) -> None:
    preset = PRESETS[name]
    roles = "; ".join(f"{role} ({preset.role_help.get(role, '')}, default column {column!r})" for role, column in preset.roles.items())
    _data_options(p, "ROLE=COLUMN", f"read ROLE from COLUMN; roles: {roles}", "input")
    _baseline_options(p)
    if preset.task == "classification":
        p.add_argument("--threshold", type=finite_float, default=0.0, help="the judge's natural threshold (default 0)")
        p.add_argument("--plots", action="store_true", help="write threshold-curve, histogram and edit-distance PNGs")
    else:
        p.add_argument("--epsilon", type=nonneg_float, default=None, help="fixed tie margin instead of tie calibration")
    _run_options(p)
    p.set_defaults(eval_run=_run_preset, preset=name)


def _configure(p: argparse.ArgumentParser) -> None:
    tasks = "{classification,preference,parareval,net,fr-paraphrase,paraphrasus,report}"
    sub = p.add_subparsers(dest="eval_task", required=True, metavar=tasks)
    c = sub.add_parser("classification", help="accuracy/precision/recall/F1 at threshold 0 and a posteriori, with baselines")
    _file_task(c)
    c.add_argument("--label-column", default="label", help="column with the binary label (default label)")
    c.add_argument("--threshold", type=finite_float, default=0.0, help="the judge's natural threshold (default 0)")
    c.add_argument("--plots", action="store_true", help="write threshold-curve, histogram and edit-distance PNGs into --output-dir")
    _run_options(c)
    c.set_defaults(eval_run=_classification)

    r = sub.add_parser(
        "preference", help="pairwise accuracy with tie calibration, Cramér's V, Cohen's kappa",
        description="Score candidates A and B of each instance and compare with the human choice. A Yes/No (or scale) "
                    "template scores A and B separately and predicts a tie when |score A - score B| <= ε (tie-calibrated). "
                    "A choice template (rev-choice, net-choice) reads A and B in one prompt per instance: its most likely "
                    "answer is the prediction (no ε), and log p(A) - log p(B) of the same call is reported too, with ε.")
    _file_task(r)
    r.add_argument("--a-column", default="a", help="column of candidate A (default a)")
    r.add_argument("--b-column", default="b", help="column of candidate B (default b)")
    r.add_argument("--human-column", default="human",
                   help="column of the human choice: A, B or tie (also =, equal, same, both, none, neither) (default human)")
    r.add_argument("--epsilon", type=nonneg_float, default=None, help="fixed tie margin instead of tie calibration")
    _run_options(r)
    r.set_defaults(eval_run=_preference)

    for name, text in (("parareval", "the *-PLUIE paper's Table 2 on ParaReval: Rev-PLUIE with and without gold, Para-PLUIE"),
                       ("net", "the *-PLUIE paper's Table 1 on NEAT Nile translations: Net-PLUIE, Para-PLUIE"),
                       ("fr-paraphrase", "the *-PLUIE paper's Table 1 on French paraphrases: Fr-PLUIE, Para-PLUIE")):
        _preset(sub.add_parser(name, help=text), name)

    b = sub.add_parser("paraphrasus", help="PARAPHRASUS error rates next to the published Llama-3 figures")
    b.add_argument("--data-dir", type=Path, default=None,
                   help="folder with the benchmark's JSON files, or the release holding them in datasets_no_results "
                        "(default: $PARAPHRASUS_DIR or ../shared/data/paraphrasus)")
    b.add_argument("--limit", type=positive_int, default=None, help="random subset of at most N pairs per dataset (full run: ~21k pairs)")
    b.add_argument("--seed", type=nonneg_int, default=0, help="seed of the --limit subset (default 0)")
    b.add_argument("--datasets", type=comma_list(), default=None, help="comma-separated subset of MRPC,STS-H,SNLI,ANLI,STS,SICK,TRUE,SIMP "
                   "and PAWSX,XNLI (default: those whose files are in the folder)")
    b.add_argument("--threshold", type=finite_float, default=0.0, help="paraphrase when logratio > threshold (default 0)")
    b.add_argument("--peers", default="all", choices=["all", "llama3", "paper", "none"],
                   help="published figures to print beside (default all)")
    b.add_argument("--plots", action="store_true",
                   help="write histograms, Classify! threshold curves, edit distance, STS bins and error-rate PNGs")
    b.add_argument("--save-pairs", action="store_true", help="keep every pair's score in results.json")
    b.add_argument("--template", "-t", default="para-fs", help="template name or YAML path (default para-fs)")
    _run_options(b)
    b.set_defaults(eval_run=_paraphrasus)

    rep = sub.add_parser("report", help="recompute the tables (and plots) of a saved run from its --output-dir, without the judge")
    rep.add_argument("folder", type=Path, help="the --output-dir of an earlier (possibly interrupted) eval run")
    rep.add_argument("--plots", action="store_true", help="write the plots into FOLDER/plots")
    rep.set_defaults(eval_run=_report)


@command("eval", _configure)
def eval_command(args: argparse.Namespace) -> int:
    """Evaluate a judge: classification, preference, the paper's presets, PARAPHRASUS, or report a saved run."""
    if args.eval_task not in ("paraphrasus", "report"):  # they score nothing with these libraries, or nothing at all
        require_metric_libraries()
    if args.eval_task != "report":
        check_output_dir(args.output_dir)
        if getattr(args, "plots", False) and args.output_dir is None:
            raise UsageError("--plots needs --output-dir.")
    try:
        return args.eval_run(args)
    except Interrupted:
        return 130


# helpers --------------------------------------------------------------------------------------
def _baselines(spec: str) -> list[str]:
    """Parse --baselines; with 'all', say which baselines are left out because their package is missing."""
    names = parse_baselines(spec)
    if spec == "all":
        for name, hint in missing_baselines().items():
            print(f"pluie-reward eval: baseline {name!r} skipped, its package is not installed ({hint}).", file=sys.stderr)
    return names


def _convert(records: Any, column: str, convert: Any, what: str) -> list[Any]:
    """Every row's ``column`` through ``convert``; a bad value is a usage error naming the row."""
    return _each(records.values(column), convert, f"column {column!r}", lambda i: f"{records.where(i)}: column {column!r} ({what})",
                 UsageError)


def _finish(args: argparse.Namespace, results: dict[str, Any], folder: Path | None = None, scores: bool = True) -> int:
    """Print the report, and what was written into ``folder`` (default --output-dir; ``scores``: scores.jsonl too)."""
    from .tables import task_markdown  # lazy: CLI start-up

    print(task_markdown(results))
    folder = folder or args.output_dir
    if folder is not None:
        print(f"\nwrote {folder / 'results.json'} and results.md" + (f"; scores in {folder / 'scores.jsonl'}" if scores else "")
              + (f"; {len(results['plots'])} plots in {folder / 'plots'}" if results.get("plots") else ""))
    return 0


class Interrupted(Exception):
    """Ctrl-C during scoring: the scores so far are saved; exit code 130."""


def _run(args: argparse.Namespace, run: Callable[..., Any], *positional: Any, **keywords: Any) -> Any:
    """``run(judge, *positional, **keywords)`` with the judge and the run options (--output-dir, --overwrite,
    --chunk-size, --no-progress) of ``args``: a folder of another run is a usage error; an interruption or a
    crash says what was kept and how to resume."""
    output_dir = args.output_dir
    kept = (f"the scores computed so far are saved in {output_dir / 'scores.jsonl'}: run the same command again "
            f"to resume, or 'pluie-reward eval report {output_dir}' for the tables so far") if output_dir else \
        "nothing was saved (no --output-dir)"
    judge = judge_from_args(args)
    try:
        return run(judge, *positional, output_dir=output_dir, overwrite=args.overwrite, chunk_size=args.chunk_size,
                   progress=not args.no_progress, **keywords)
    except StoreMismatch as err:
        raise UsageError(str(err)) from None
    except KeyboardInterrupt:
        print(f"pluie-reward eval: interrupted; {kept}.", file=sys.stderr)
        raise Interrupted from None
    except (UsageError, ValueError, TypeError, FileNotFoundError, ModuleNotFoundError):
        if output_dir:
            print(f"pluie-reward eval: stopped; {kept}.", file=sys.stderr)
        raise
    except Exception:
        print(f"pluie-reward eval: failed; {kept}.", file=sys.stderr)
        raise


def _load_generic(args: argparse.Namespace, extra: dict[str, str], skip: tuple[str, ...] = ()) -> tuple[Any, Any, dict, dict, list[str]]:
    """Template, records, the field values (checked), the columns used, and notes about optional fields."""
    template = load_template(args.template)
    records = read_table(args.input, args.split).limit(args.limit)
    mapping = field_columns(args, list(template.all_fields), template.optional_fields)
    records.require({**extra, **{f"field {f}": c for f, c in mapping.items() if f in template.fields and f not in skip and c}},
                    "Use --column FIELD=COLUMN.")
    notes = []
    used: dict[str, str] = {}
    for name, column in mapping.items():
        if name in skip or column is None:
            continue
        if name in template.optional_fields:
            if not records.has(column):
                continue
            notes.append(f"optional field {name!r} read from column {column!r} (present in the file), so the template's "
                         f"{name} turn is included; pass --column {name}= to leave it out.")
        used[name] = column
    values = check_texts(records, used, optional=template.optional_fields)
    return template, records, values, used, notes


# file tasks -----------------------------------------------------------------------------------
def _classification(args: argparse.Namespace) -> int:
    from .tasks import run_classification  # lazy: CLI start-up

    if load_template(args.template).kind == "choice":
        raise UsageError(f"--template {args.template}: a choice template picks between two candidates; evaluate it with "
                         "'pluie-reward eval preference' (--a-column, --b-column, --human-column).")
    names = _baselines(args.baselines)
    template, records, values, used, notes = _load_generic(args, {"labels": args.label_column})
    labels = _convert(records, args.label_column, binary_label, "binary label")
    reference = reference_field(template, values, args.reference) if names else None
    texts = (values[reference], values["hypothesis"]) if reference and "hypothesis" in values else None
    return _finish(args, _run(
        args, run_classification, [Condition(JUDGE_ROW, template, values, used)], labels, baseline_texts=texts, baselines=names,
        threshold=args.threshold, rows=[records.where(i) for i in range(len(records))], plots=args.plots,
        meta={"input": str(args.input), "labels_from": f"labels ← column {args.label_column!r}", "notes": notes,
              **({"reference_from": f"baselines and edit distance compare hypothesis with {reference!r}"} if texts else {})}))


def _preference(args: argparse.Namespace) -> int:
    from .tasks import run_preference  # lazy: CLI start-up

    names = _baselines(args.baselines)
    choice = load_template(args.template).kind == "choice"
    slots = ("hypothesis", SECOND_CANDIDATE) if choice else ("hypothesis",)
    if choice and not {"hypothesis", SECOND_CANDIDATE} <= set(load_template(args.template).fields):
        raise UsageError(f"--template {args.template}: a choice template for eval preference needs the fields 'hypothesis' "
                         f"(candidate A) and {SECOND_CANDIDATE!r} (candidate B), like rev-choice and net-choice.")
    for spec in args.column:
        if spec.split("=", 1)[0].strip() in slots:
            raise UsageError(f"--column {spec}: the candidates fill {' and '.join(slots)}; choose their columns with "
                             "--a-column and --b-column.")
    template, records, values, used, notes = _load_generic(
        args, {"candidate A": args.a_column, "candidate B": args.b_column, "human choice": args.human_column}, slots)
    candidates = check_texts(records, {"A": args.a_column, "B": args.b_column})
    human = _convert(records, args.human_column, preference_label, "human choice")
    reference = reference_field(template, {**values, "hypothesis": None}, args.reference) if names else None
    if choice:
        used = {**used, "hypothesis": args.a_column, SECOND_CANDIDATE: args.b_column}
        notes = notes + [f"{CHOICE_ROW}: one judge call per instance with A and B in the template's two slots; the "
                         "predicted preference is the most likely answer (argmax)."]
    else:
        used = {**used, "hypothesis": f"{args.a_column} / {args.b_column}"}
    return _finish(args, _run(
        args, run_preference, [Condition(CHOICE_ROW if choice else JUDGE_ROW, template, values, used)], candidates["A"],
        candidates["B"], human, baseline_reference=values[reference] if reference else None, baselines=names,
        epsilon=args.epsilon, rows=[records.where(i) for i in range(len(records))],
        meta={"input": str(args.input), "human_from": f"human choice ← column {args.human_column!r}", "notes": notes,
              **({"reference_from": f"baselines compare each candidate with {reference!r}"} if reference else {})}))


# presets ----------------------------------------------------------------------------------------
def _roles(args: argparse.Namespace, preset: Any) -> dict[str, str]:
    roles = dict(preset.roles)
    for role, column in parse_assignments(args.column, "--column", "ROLE").items():
        if role not in roles:
            raise UsageError(f"--column: {role!r} is not a role of the {preset.name} preset; roles: {list(roles)}.")
        if not column:
            raise UsageError(f"--column {role}=: give a column name.")
        roles[role] = column
    return roles


def _french_pairs(records: Any, roles: dict[str, str]) -> tuple[dict[str, list[str]], list[bool], list[str], list[str]]:
    """Expand one row per sentence (s, P(s), S(s), S(P(s))) into the paper's six labelled pairs;
    a pair whose sentence is missing (empty) is skipped and counted in the notes."""
    records.require({role: column for role, column in roles.items()}, "Use --column ROLE=COLUMN.")
    columns = {role: records.values(column, optional=True) for role, column in roles.items()}
    first, second, labels, rows = [], [], [], []
    skipped = 0
    for i in range(len(records)):
        for one, two, paraphrase in FRENCH_PAIRS:
            a, b = columns[one][i], columns[two][i]
            if a in (None, "") or b in (None, ""):
                skipped += 1
                continue
            for role, value in ((one, a), (two, b)):
                problem = text_problem(value)
                if problem:
                    raise UsageError(f"{records.where(i)}: column {roles[role]!r} ({role}): {problem}.")
            first.append(a)
            second.append(b)
            labels.append(paraphrase)
            rows.append(f"{records.where(i)} ({one}, {two})")
    notes = [f"{skipped} pair(s) skipped: a sentence was empty or missing."] if skipped else []
    return {"sentence1": first, "sentence2": second}, labels, rows, notes


def _run_preset(args: argparse.Namespace) -> int:
    from .tables import PAPER_BASELINES  # lazy: CLI start-up
    from .tasks import run_classification, run_preference  # lazy: CLI start-up

    preset = PRESETS[args.preset]
    names = _baselines(args.baselines)
    roles = _roles(args, preset)
    records = read_table(args.input, args.split)
    notes: list[str] = []
    if preset.name == "fr-paraphrase":
        values, labels, rows, notes = _french_pairs(records, roles)
        values = {k: v[: args.limit] for k, v in values.items()}
        labels, rows = labels[: args.limit], rows[: args.limit]
        if not labels:
            raise UsageError(f"{args.input}: no complete sentence pair to score.")
        columns = {"sentence1": "sentence 1 of each pair", "sentence2": "sentence 2"}
        labels_from = f"labels: {preset.label_rule}"
    else:
        records = records.limit(args.limit)
        records.require({f"{role} ({preset.role_help.get(role, '')})": column for role, column in roles.items()},
                        "Use --column ROLE=COLUMN.")
        text_roles = [r for r in roles if r not in ("human", "rating")]
        values = check_texts(records, {role: roles[role] for role in text_roles})
        rows = [records.where(i) for i in range(len(records))]
        columns = roles
    conditions = [
        Condition(c.name, c.template, {field: values[role] for field, role in c.fields.items()},
                  {field: columns[role] for field, role in c.fields.items()}, c.row, c.variant)
        for c in preset.conditions
    ]
    paper = paper_table(preset.paper_table, preset.paper_metrics, tuple(PAPER_BASELINES[n] for n in names if n in PAPER_BASELINES))
    meta = {"preset": preset.name, "input": str(args.input), "paper": paper, "notes": notes}
    if preset.task == "preference":
        human = _convert(records, roles["human"], preference_label, "human choice")
        meta["human_from"] = f"human choice ← column {roles['human']!r} (Both and None count as ties)"
        meta["reference_from"] = f"baselines compare each revision with the gold revision ← {roles[preset.reference_role]!r}"
        for c in conditions:
            c.columns["hypothesis"] = f"{roles['a']} / {roles['b']}"  # type: ignore[index]
        results = _run(args, run_preference, conditions, values["a"], values["b"], human, rows=rows, meta=meta,
                       baseline_reference=values[preset.reference_role], baselines=names, epsilon=args.epsilon)
    else:
        if preset.label is not None:
            labels = _convert(records, roles["rating"], preset.label, "human rating")
            meta["labels_from"] = f"labels ← column {roles['rating']!r}: {preset.label_rule}"
        else:
            meta["labels_from"] = labels_from
        first = next(iter(preset.conditions)).fields
        texts = (values[first["source"]], values[first["hypothesis"]])
        meta["reference_from"] = f"baselines and edit distance compare sentence B with sentence A ({columns[first['source']]})"
        results = _run(args, run_classification, conditions, labels, baseline_texts=texts, baselines=names,
                       threshold=args.threshold, rows=rows, plots=args.plots, meta=meta)
    return _finish(args, results)


# PARAPHRASUS ----------------------------------------------------------------------------------
def _paraphrasus(args: argparse.Namespace) -> int:
    from .paraphrasus import find_data_dir, run_paraphrasus  # lazy: CLI start-up

    load_template(args.template)
    folder = find_data_dir(args.data_dir)
    return _finish(args, _run(args, run_paraphrasus, folder, template=args.template, threshold=args.threshold,
                              datasets=args.datasets, limit=args.limit, seed=args.seed, peers=args.peers,
                              keep_pairs=args.save_pairs, plots=args.plots))


def _report(args: argparse.Namespace) -> int:
    from .tasks import report_folder  # lazy: CLI start-up

    return _finish(args, report_folder(args.folder, plots=args.plots), args.folder, scores=False)
