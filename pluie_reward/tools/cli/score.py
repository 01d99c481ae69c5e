"""``pluie-reward score`` and ``pluie-reward templates``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Iterator

from ...core.template import builtin_template_names, load_template
from .common import UsageError, add_judge_arguments, command, field_columns, judge_from_args, read_records


# score -----------------------------------------------------------------------------------------
def _configure_score(p: argparse.ArgumentParser) -> None:
    p.add_argument("values", nargs="*", help="one item: a value per template field, in order (e.g. SOURCE HYPOTHESIS)")
    p.add_argument("--input", "-i", type=Path, help="a .jsonl or .csv file with one item per line/row")
    p.add_argument("--column", action="append", default=[], metavar="FIELD=COLUMN",
                   help="read FIELD from COLUMN of the input file (default: the column named like the field)")
    p.add_argument("--output", "-o", type=Path, help="JSONL output file (default: standard output)")
    p.add_argument("--template", "-t", default="para-fs", help="template name or YAML path (default para-fs)")
    p.add_argument("--threshold", type=float, default=0.0, help="verdict = logratio > threshold (default 0)")
    p.add_argument("--no-truncate", action="store_true", help="fail on prompts longer than the context instead of truncating")
    p.add_argument("--chunk-size", type=int, default=256, help="items scored per call (progress granularity)")
    add_judge_arguments(p)


def _chunks(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(start + size, n))


@command("score", _configure_score)
def score_command(args: argparse.Namespace) -> int:
    """Score items given as arguments or in a file; write JSONL with logratio, p_yes, verdict."""
    from tqdm.auto import tqdm

    template = load_template(args.template)
    fields = list(template.fields)
    if args.input is not None and args.values:
        raise UsageError("give either positional values or --input, not both.")
    if args.input is None:
        if len(args.values) != len(fields):
            raise UsageError(
                f"template {template.name!r} takes {len(fields)} values in this order: {fields} "
                f"(got {len(args.values)}); or use --input FILE."
            )
        records = [dict(zip(fields, args.values))]
        mapping = {f: f for f in fields}
    else:
        records = read_records(args.input)
        mapping = field_columns(args, list(template.all_fields))
        missing = [c for f, c in mapping.items() if f in fields and records and c not in records[0]]
        if missing:
            raise UsageError(f"{args.input}: no column(s) {missing}; columns: {sorted(records[0]) if records else []}.")
    judge = judge_from_args(args)
    out = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
    try:
        bar = tqdm(total=len(records), desc="scoring", unit="item", disable=args.input is None, file=sys.stderr)
        for chunk in _chunks(len(records), args.chunk_size):
            values = {
                f: [records[i].get(c) for i in chunk]
                for f, c in mapping.items()
                if f in fields or any(c in records[i] for i in chunk)
            }
            try:
                results = judge.score(template, details=True, threshold=args.threshold, truncate=not args.no_truncate, **values)
            except (TypeError, ValueError) as err:
                raise UsageError(f"items {chunk.start}-{chunk.stop - 1}: {err}") from None
            for i, result in zip(chunk, results):
                out.write(json.dumps({**records[i], **result}, ensure_ascii=False) + "\n")
            bar.update(len(chunk))
        bar.close()
    finally:
        if args.output:
            out.close()
    return 0


# templates -------------------------------------------------------------------------------------
def _configure_templates(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verbose", "-v", action="store_true", help="print the chat turns too")
    p.add_argument("--render", metavar="TEMPLATE", help="print the exact prompt a judge reads for this template (name or YAML path)")
    p.add_argument("--model", default=None, help="with --render: the judge whose tokenizer and chat template render it "
                   "(HF id, folder or .gguf; default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--system", default=None, help="with --render: a system turn replacing the chat template's default one")
    p.add_argument("--field", action="append", default=[], metavar="FIELD=VALUE", help="with --render: a field value (default: {FIELD})")


@command("templates", _configure_templates)
def templates_command(args: argparse.Namespace) -> int:
    """List the built-in templates, or show the exact prompt a judge reads (--render)."""
    if args.render:
        return _render(args)
    for name in builtin_template_names():
        t = load_template(name)
        optional = f" [optional: {', '.join(t.optional_fields)}]" if t.optional_fields else ""
        kind = {"binary": "", "choice": " (choice)", "scale": " (scale: expected value)"}[t.kind]
        generates = "; the judge writes a turn first" if t.generates else ""
        print(f"{name:13s} fields: {', '.join(t.fields)}{optional}; answers: {'/'.join(t.answers)}{kind}{generates}; "
              f"language: {t.language}\n{'':13s} {t.description}\n{'':13s} seed: {t.reference}")
        if args.verbose:
            for m in t.messages:
                when = f" (when {m.when})" if m.when else ""
                print(f"{'':14s}({m.role}{when}): {m.content}")
    return 0


def _render(args: argparse.Namespace) -> int:
    from ...core.prompt import AnswerTokenError, BoundTemplate
    from ...engines.transformers.loading import load_tokenizer

    template = load_template(args.render)
    if args.system is not None:
        template = template.with_system(args.system)
    values: dict[str, str | None] = {f: "{" + f + "}" for f in template.all_fields}
    for spec in args.field:
        name, sep, value = spec.partition("=")
        if not sep or name not in values:
            raise UsageError(f"--field expects FIELD=VALUE with FIELD in {list(values)}, got {spec!r}.")
        values[name] = value
    tokenizer = load_tokenizer(args.model)
    try:
        bound = BoundTemplate(template, tokenizer, allow_multi_token=True)
    except AnswerTokenError as err:
        raise UsageError(str(err)) from None
    ids = bound.encode_values(values)
    print(bound.render(values), end="")
    print(f"\n--- {len(ids)} prompt tokens (last: {bound.show(ids[-3:])}); the judge reads the answer tokens:")
    for word, answer in zip(template.answers, bound.answer_ids):
        note = "" if len(answer) == 1 else "  (several tokens: needs allow_multi_token=True, eq. 4)"
        print(f"    {word!r}: {bound.show(answer)}{note}")
    print(f"--- cut after the answer: {bound.tail!r}")
    return 0
