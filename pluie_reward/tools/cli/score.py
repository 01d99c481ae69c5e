"""``pluie-reward score`` and ``pluie-reward templates``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Iterator

from ...core.prompt import AnswerTokenError, BoundTemplate
from ...core.template import builtin_template_names, load_template
from .common import (
    UsageError,
    add_chat_template_kwargs_argument,
    add_judge_arguments,
    auto_chunk_size,
    check_chunk_size,
    chat_template_kwargs,
    check_output_file,
    command,
    field_columns,
    judge_from_args,
)
from .records import Records, check_texts, read_table, relocate


# score -----------------------------------------------------------------------------------------
def _configure_score(p: argparse.ArgumentParser) -> None:
    p.add_argument("values", nargs="*", help="one item: a value per template field, in order (e.g. SOURCE HYPOTHESIS)")
    p.add_argument("--input", "-i", type=Path,
                   help="items to score: .jsonl/.json, .csv/.tsv, .parquet, .arrow or a datasets folder (save_to_disk)")
    p.add_argument("--split", default=None, help="split of a datasets folder holding several")
    p.add_argument("--column", action="append", default=[], metavar="FIELD=COLUMN",
                   help="read FIELD from COLUMN of the input (nested: a.b; default: the column named like the field; "
                        "FIELD= leaves an optional field out)")
    p.add_argument("--output", "-o", type=Path, help="JSONL output file (default: standard output)")
    p.add_argument("--template", "-t", default="para-fs", help="template name or YAML path (default para-fs)")
    p.add_argument("--threshold", type=float, default=0.0, help="verdict = logratio > threshold (default 0)")
    p.add_argument("--no-truncate", action="store_true", help="fail on prompts longer than the context instead of truncating")
    p.add_argument("--chunk-size", type=int, default=None,
                   help="items per Judge.score call, written out after each (default: one forward batch, 8 on CPU)")
    add_judge_arguments(p)


def _chunks(n: int, size: int) -> Iterator[range]:
    for start in range(0, n, size):
        yield range(start, min(start + size, n))


@command("score", _configure_score)
def score_command(args: argparse.Namespace) -> int:
    """Score items given as arguments or in a file; write JSONL with logratio, p_yes, verdict."""
    from tqdm.auto import tqdm

    check_chunk_size(args.chunk_size)
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
        records = Records(Path("arguments"), [dict(zip(fields, args.values))], ["(command line)"])
        mapping: dict[str, str | None] = {f: f for f in fields}
    else:
        records = read_table(args.input, args.split)
        mapping = field_columns(args, list(template.all_fields), template.optional_fields)
        records.require({f"field {f}": c for f, c in mapping.items() if f in fields and c is not None},
                        "Use --column FIELD=COLUMN.")
    # optional fields are read when their column is in the file (or named with --column)
    used = {f: c for f, c in mapping.items() if c is not None and (f in fields or records.has(c) or f"{f}={c}" in args.column)}
    values = check_texts(records, used, optional=template.optional_fields)
    check_output_file(args.output)
    judge = judge_from_args(args)
    print(f"pluie-reward score: judge {judge.name}, template {template.name}", file=sys.stderr)
    size = args.chunk_size or auto_chunk_size(judge)
    out = args.output.open("w", encoding="utf-8") if args.output else sys.stdout
    written = 0
    try:
        with tqdm(total=len(records), desc="scoring", unit="item", disable=args.input is None, file=sys.stderr) as bar:
            for chunk in _chunks(len(records), size):
                part = {f: v[chunk.start : chunk.stop] for f, v in values.items()}
                try:
                    results = judge.score(template, details=True, threshold=args.threshold, truncate=not args.no_truncate, **part)
                except (TypeError, ValueError) as err:
                    rows = [records.where(i) for i in chunk]
                    raise UsageError(relocate(str(err), rows) + _partial(args.output, written)) from None
                for i, result in zip(chunk, results):
                    out.write(json.dumps({**records.rows[i], **result}, ensure_ascii=False) + "\n")
                out.flush()
                written += len(chunk)
                bar.update(len(chunk))
    except (KeyboardInterrupt, Exception) as err:
        if not isinstance(err, UsageError) and args.output is not None:
            print(f"pluie-reward score: interrupted{_partial(args.output, written)}", file=sys.stderr)
        raise
    finally:
        if args.output:
            out.close()
    return 0


def _partial(output: Path | None, written: int) -> str:
    if output is None or not written:
        return ""
    return (f" ({written} item(s) before it were scored and kept in {output}, one line per input row in order; "
            f"fix the row and score the rest, e.g. from row {written + 1})")


# templates -------------------------------------------------------------------------------------
def _configure_templates(p: argparse.ArgumentParser) -> None:
    p.add_argument("--verbose", "-v", action="store_true", help="print the chat turns too")
    p.add_argument("--render", metavar="TEMPLATE", help="print the exact prompt a judge reads for this template (name or YAML path)")
    p.add_argument("--model", default=None, help="with --render: the judge whose tokenizer and chat template render it "
                   "(HF id, folder or .gguf; default: the embedded SmolLM2-135M-Instruct)")
    p.add_argument("--system", default=None, help="with --render: a system turn replacing the chat template's default one")
    add_chat_template_kwargs_argument(p)
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
    from ...engines.transformers.loading import load_tokenizer  # lazy: CLI start-up (torch)

    template = load_template(args.render)
    if args.system is not None:
        template = template.with_system(args.system)
    keywords = chat_template_kwargs(args)
    values: dict[str, str | None] = {f: "{" + f + "}" for f in template.all_fields}
    for spec in args.field:
        name, sep, value = spec.partition("=")
        if not sep or name not in values:
            raise UsageError(f"--field expects FIELD=VALUE with FIELD in {list(values)}, got {spec!r}.")
        values[name] = value
    tokenizer = load_tokenizer(args.model)
    try:
        bound = BoundTemplate(template, tokenizer, allow_multi_token=True, chat_template_kwargs=keywords)
    except AnswerTokenError as err:
        raise UsageError(str(err)) from None
    ids = bound.encode_values(values)
    print(bound.render(values), end="")
    print(f"\n--- {len(ids)} prompt tokens (last: {bound.show(ids[-3:])}); the judge reads the answer tokens:")
    for word, answer in zip(template.answers, bound.answer_ids):
        note = "" if len(answer) == 1 else "  (several tokens: needs allow_multi_token=True, eq. 4)"
        print(f"    {word!r}: {bound.show(answer)}{note}")
    print(f"--- cut after the answer: {bound.tail!r}")
    if bound.chat_template_kwargs:
        print(f"--- chat template keywords: {json.dumps(bound.chat_template_kwargs, ensure_ascii=False)}")
    if bound.date is not None:
        how = "the real clock" if bound.date == "now" else (
            "set by strftime_now" if "strftime_now" in {**keywords, **template.chat_template_kwargs}
            else "fixed; set another with --chat-template-kwargs '{\"strftime_now\": \"YYYY-MM-DD\"}'")
        print(f"--- date the chat template writes: {bound.date} ({how})")
    return 0
