"""``pluie-reward probe``: score adversarial families on a judge, print a Markdown table, gate CI.

Example (shell)::

    pluie-reward probe --limit 4                                    # embedded judge, para-fs, built-in sources
    pluie-reward probe -t rev --model Qwen/Qwen2.5-7B-Instruct --device cuda --json probe.json --plot probe.png
    pluie-reward probe -i mine.jsonl --fail-above 0.2               # exit 1 if an attack family passes 20 %
    pluie-reward probe --search --fail-if-flagged                   # exit 1 if an edit raises the copy-proof reward
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ...core.template import load_template
from ..cli.common import add_judge_arguments, field_columns, judge_from_args, read_records
from ..cli.output import check_output_file, write_text_file
from ..cli.registry import command
from ..shared import UsageError, comma_list, nonneg_float, positive_int
from .families import family_names, family_specs
from .report import markdown_report, plot_probe, search_report
from .run import COPY_MARGIN, PAIRS, RAISE_MARGIN, failing_families, probe_items, search, search_rows, summarize


def configure(p: argparse.ArgumentParser) -> None:
    """Arguments of ``pluie-reward probe``."""
    p.add_argument("--template", "-t", default="para-fs", help="template name or YAML path (default para-fs)")
    p.add_argument("--input", "-i", type=Path, default=None,
                   help="a .jsonl or .csv file of sources: the template's fields other than the hypothesis and, "
                        "optionally, an honest answer (default: the built-in sample of the template)")
    p.add_argument("--column", action="append", default=[], metavar="FIELD=COLUMN",
                   help="read template FIELD from COLUMN of the input file (default: the column named like the field)")
    p.add_argument("--honest-column", default=None,
                   help="column of the honest answers (default: 'honest', else 'hypothesis' if the file has one)")
    p.add_argument("--limit", type=positive_int, default=None, help="probe the first N sources only")
    p.add_argument("--families", type=comma_list(), default=None, help="comma-separated families to run (default all; see --list)")
    p.add_argument("--list", action="store_true", help="list the families with their kind and description, and exit")
    p.add_argument("--escape-delimiters", action="store_true",
                   help="escape the template's quote delimiters inside every field before scoring (the opt-in hardening)")
    p.add_argument("--json", type=Path, default=None, help="write the rows (one per family) to this JSON file")
    p.add_argument("--items", type=Path, default=None, help="write every hypothesis with its score to this JSONL file")
    p.add_argument("--plot", type=Path, default=None, help="write a PNG figure of the rows (needs matplotlib)")
    p.add_argument("--fail-above", type=nonneg_float, default=None, metavar="X",
                   help="exit with code 1 when a gated family's above_threshold or above_honest share exceeds X (in [0, 1])")
    p.add_argument("--fail-on", type=comma_list(), default=None, metavar="FAMILIES",
                   help="comma-separated families gated by --fail-above (default: every attack family; copies are not gated)")
    p.add_argument("--search", action="store_true", help="instead of the table, search the copy and presentation families (or "
                   f"--families), alone and in pairs: flag a copy's copy-proof reward above {COPY_MARGIN}, a raise above {RAISE_MARGIN}")
    p.add_argument("--pairs", type=positive_int, default=PAIRS, help=f"--search: pair the N that moved it most (default {PAIRS}; 1: none)")
    p.add_argument("--fail-if-flagged", action="store_true", help="--search: exit with code 1 when anything is flagged")
    add_judge_arguments(p)


def _read_sources(args: argparse.Namespace, template: Any) -> tuple[list[dict[str, Any]] | None, list[Any] | None]:
    if args.input is None:
        if args.column or args.honest_column:
            raise UsageError("--column and --honest-column need --input FILE.")
        return None, None
    records = read_records(args.input)
    fields = [f for f in template.all_fields if f != "hypothesis"]
    mapping = field_columns(args, fields)
    missing = [c for f, c in mapping.items() if f in template.fields and c not in records[0]]
    if missing:
        raise UsageError(f"{args.input}: no column(s) {missing}; columns: {sorted(records[0])}.")
    honest_column = args.honest_column or next((c for c in ("honest", "hypothesis") if c in records[0]), None)
    if args.honest_column and args.honest_column not in records[0]:
        raise UsageError(f"{args.input}: no column {args.honest_column!r}; columns: {sorted(records[0])}.")
    sources = [{f: r.get(c) for f, c in mapping.items() if r.get(c) is not None} for r in records]
    honest = [r.get(honest_column) or None for r in records] if honest_column else None
    return sources, honest


@command("probe", configure)
def probe_command(args: argparse.Namespace) -> int:
    """Score adversarial hypotheses (copies, injections, master keys, control tokens) next to honest ones."""
    if args.list:
        for spec in family_specs():
            print(f"{spec['name']:23s} {spec['kind']:12s} {spec.get('description', '')}")
        return 0
    if (args.fail_if_flagged and not args.search) or (args.search and (args.plot or args.fail_above is not None or args.fail_on)):
        raise UsageError("--fail-if-flagged needs --search; --plot, --fail-above and --fail-on are for the families' table.")
    if args.fail_above is not None and args.fail_above > 1:
        raise UsageError(f"--fail-above is a share in [0, 1], got {args.fail_above}.")
    for option, path in (("--json", args.json), ("--items", args.items), ("--plot", args.plot)):
        check_output_file(path, option, inputs=[args.input])  # before the judge loads
    template = load_template(args.template)
    families, gated = args.families, args.fail_on
    names = family_names()
    for option, chosen in (("--families", families), ("--fail-on", gated)):
        unknown = sorted(set(chosen or []) - set(names))
        if unknown:
            raise UsageError(f"{option}: unknown famil(ies) {unknown}; families: {names}.")
    sources, honest = _read_sources(args, template)
    judge = judge_from_args(args)
    try:
        run, options = (search, {"pairs": args.pairs}) if args.search else (probe_items, {})
        records = run(judge, template, sources, honest, args.limit, families, escape_delimiters=args.escape_delimiters,
                      progress=True, **options)
    except (TypeError, ValueError) as err:
        raise UsageError(str(err)) from None
    rows = search_rows(records) if args.search else summarize(records, judge.threshold)
    title = f"{judge.name}, template {template.name}" + (", delimiters escaped" if args.escape_delimiters else "")
    sources_used = len({r["source_index"] for r in records})
    note = (f"Δ: copy-proof reward minus the unedited copy's or honest answer's; flagged: a copy above {COPY_MARGIN}, a raise "
            f"above {RAISE_MARGIN}" if args.search else f"threshold {judge.threshold:g}; > honest: share scoring above the "
            "honest answer of the same source")
    print(f"# pluie-reward probe{' --search' * args.search}: {title}\n\n{sources_used} sources; {note}.\n")
    print((search_report if args.search else markdown_report)(rows))
    if args.json:
        write_text_file(args.json, json.dumps(rows, indent=1, ensure_ascii=False) + "\n", "--json")
    if args.items:
        write_text_file(args.items, "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records), "--items")
    if args.plot:
        plot_probe(rows, args.plot, threshold=judge.threshold, title=title)
    failures = [] if args.fail_above is None else failing_families(rows, args.fail_above, gated)
    for family, metric, value in failures:
        print(f"pluie-reward probe: {family}: {metric} = {value:.1%} > {args.fail_above:.1%}", file=sys.stderr)
    flagged = [f"{r['family']} " + (f"(a copy gets {r['worst_reward']:.3f})" if r["kind"] == "copy" else
                                    f"({r['worst']:+.3f} over the honest answer)") for r in rows if r.get("flagged")]
    if flagged:
        print(f"pluie-reward probe: flagged {len(flagged)}: {'; '.join(flagged)}", file=sys.stderr)
    return 1 if failures or (flagged and args.fail_if_flagged) else 0
