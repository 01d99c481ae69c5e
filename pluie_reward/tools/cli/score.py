"""``pluie-reward score`` and ``pluie-reward templates``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from ...core.prompt import BoundTemplate
from ...core.template import Template, builtin_template_names, load_template
from ...judges import default_adapter_dir
from ..evaluation.scoring import Condition, score_items
from ..shared import Progress, UsageError, auto_chunk_size, finite_float, positive_int
from .common import (
    add_chat_template_kwargs_argument,
    add_judge_arguments,
    chat_template_kwargs,
    field_columns,
    judge_from_args,
    model_not_found,
)
from .output import OutputError, OutputFile, check_output_file
from .records import Records, check_texts, read_table
from .registry import command


# score -----------------------------------------------------------------------------------------
def _configure_score(p: argparse.ArgumentParser) -> None:
    p.add_argument("values", nargs="*", help="one item: a value per template field, in order (e.g. SOURCE HYPOTHESIS)")
    p.add_argument("--input", "-i", type=Path,
                   help="items to score: .jsonl/.json, .csv/.tsv, .parquet, .arrow or a datasets folder (save_to_disk)")
    p.add_argument("--split", default=None, help="split of a datasets folder holding several")
    p.add_argument("--column", action="append", default=[], metavar="FIELD=COLUMN",
                   help="read FIELD from COLUMN of the input (nested: a.b; default: the column named like the field; "
                        "FIELD= leaves an optional field out)")
    p.add_argument("--output", "-o", type=Path,
                   help="JSONL output file (default: standard output); written as FILE.partial, renamed to FILE when complete")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file (or start an interrupted one again)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted --output (FILE.partial, or an incomplete FILE) where it stopped; the result "
                        "is the file a clean run writes")
    p.add_argument("--template", "-t", default="para-fs", help="template name or YAML path (default para-fs)")
    p.add_argument("--threshold", type=finite_float, default=0.0, help="verdict = logratio > threshold (default 0)")
    p.add_argument("--no-truncate", action="store_true", help="fail on prompts longer than the context instead of truncating")
    p.add_argument("--chunk-size", type=positive_int, default=None,
                   help="items per Judge.score call, written out after each (default: one forward batch, 8 on CPU)")
    p.add_argument("--no-progress", action="store_true", help="print no progress line on stderr (with --input it moves per chunk)")
    add_judge_arguments(p)


def output_fields(template: Template) -> tuple[str, ...]:
    """The keys ``score`` adds to each input row for ``template`` (``Judge.score(details=True)``'s records).

    Example:
        >>> output_fields(load_template("para-fs"))
        ('logratio', 'p_yes', 'verdict', 'p_calibrated')
    """
    if template.kind == "binary":
        keys = ["logratio", "p_yes", "verdict", "p_calibrated"]
    else:
        keys = ["score", "logprobs", "probs", "choice"] + (["expected"] if template.kind == "scale" else [])
    return tuple(keys + (["generated"] if template.generates else []))


def _check_columns(records: Records, template: Template) -> None:
    """Output fields never replace input columns: refuse an input with columns of their names."""
    clash = sorted({key for row in records.rows for key in row} & set(output_fields(template)))
    if clash:
        raise UsageError(
            f"{records.path}: column(s) {clash} have the names of fields score writes ({', '.join(output_fields(template))}), "
            "and the output would replace them; rename those columns in the input."
        )


def _check_json(records: Records) -> None:
    """Refuse, before the model loads, an input value JSON cannot hold (bytes...), naming its row and column."""
    for i, row in enumerate(records.rows):
        try:
            json.dumps(row, ensure_ascii=False)  # one call per row; the cells only to name the one that fails
        except (TypeError, ValueError):
            for column, value in row.items():
                try:
                    json.dumps(value, ensure_ascii=False)
                except (TypeError, ValueError):
                    raise UsageError(f"{records.where(i)}: column {column!r} holds {type(value).__name__}, which the "
                                     "JSON output (every input column is kept) cannot hold; drop that column from the "
                                     "input or convert it to text.") from None
            raise


def _close(saved: Any, new: Any) -> bool:
    """A saved output value equals a new one (numbers within 1e-4, relative)."""
    if isinstance(new, float) and isinstance(saved, (int, float)) and not isinstance(saved, bool):
        return abs(saved - new) <= 1e-4 * max(1.0, abs(new))
    if isinstance(new, dict) and isinstance(saved, dict):
        return saved.keys() == new.keys() and all(_close(saved[k], v) for k, v in new.items())
    return saved == new


class _Refused(UsageError):
    """A resumed output that this run cannot continue (said before anything is written)."""


def _check_done(done: list[dict[str, Any]], records: Records, partial: Path) -> None:
    """The rows an interrupted run wrote must be the input's first rows (else the input changed)."""
    if len(done) > len(records):
        raise _Refused(f"{partial} holds {len(done)} rows but the input {len(records)}: it is the output of another input; "
                       "pass --overwrite to start again.")
    for i, line in enumerate(done):
        row = records.rows[i]
        if not set(row) <= set(line) or json.dumps({k: line[k] for k in row}, sort_keys=True, default=str) != \
                json.dumps(row, sort_keys=True, default=str):
            raise _Refused(f"{partial} line {i + 1} does not hold {records.where(i)}: the input changed since it was written; "
                           "pass --overwrite to start again.")


@command("score", _configure_score)
def score_command(args: argparse.Namespace) -> int:
    """Score items given as arguments or in a file; write JSONL with logratio, p_yes, verdict."""
    template = load_template(args.template)
    fields = list(template.fields)
    if args.input is not None and args.values:
        raise UsageError("give either positional values or --input, not both.")
    unused = [option for option, value in (("--column", args.column), ("--split", args.split)) if value]
    if args.input is None and unused:
        raise UsageError(f"{' and '.join(unused)} {'reads' if len(unused) == 1 else 'read'} an --input file; positional "
                         "values fill the template's fields in order: drop it, or give the items with --input FILE.")
    if args.output is None and (args.resume or args.overwrite):
        raise UsageError("--resume and --overwrite are about an --output file; give one.")
    if args.resume and args.overwrite:
        raise UsageError("--resume continues the output, --overwrite starts it again: choose one.")
    check_output_file(args.output, "--output", inputs=[args.input], overwrite=args.overwrite, resume=args.resume)
    if args.input is None:
        if len(args.values) != len(fields):
            raise UsageError(
                f"template {template.name!r} takes {len(fields)} values in this order: {fields} "
                f"(got {len(args.values)}); or use --input FILE."
            )
        records = Records(Path("arguments"), [dict(zip(fields, args.values))], ["(command line)"])
    else:
        records = read_table(args.input, args.split)
    mapping = field_columns(args, list(template.all_fields), template.optional_fields)  # no --column: each field's name
    records.require({f"field {f}": c for f, c in mapping.items() if f in fields and c is not None}, "Use --column FIELD=COLUMN.")
    _check_columns(records, template)
    _check_json(records)
    # optional fields are read when their column is in the file (or named with --column)
    used = {f: c for f, c in mapping.items() if c is not None and (f in fields or records.has(c) or f"{f}={c}" in args.column)}
    values = check_texts(records, used, optional=template.optional_fields)
    judge = judge_from_args(args)
    items = f"{len(records.rows)} item{'s' * (len(records.rows) != 1)}"
    print(f"pluie-reward score: judge {judge.name}, template {template.name}; scoring {items}...", file=sys.stderr, flush=True)
    size = args.chunk_size or auto_chunk_size(judge)
    run = _Run(args, judge, template, records, values, size)
    try:
        if args.output is None:
            run.write(sys.stdout)  # main's StandardOutput: a full or closed device is an OutputError
        else:
            with OutputFile(args.output, resume=args.resume) as out:
                run.write(out, out.done_lines() if args.resume else [])
                out.commit()
    except KeyboardInterrupt:
        print(f"pluie-reward score: interrupted; {run.kept() or 'nothing was written'}.", file=sys.stderr)
        return 130
    except (_Refused, BrokenPipeError):  # a closed standard output (| head): main stops quietly
        raise
    except OutputError as err:  # disk full, standard output full or closed...
        if not run.kept():
            raise
        raise OutputError(f"{str(err).removesuffix('.')} ({run.kept()}).", stdout=err.stdout) from None
    except UsageError as err:
        raise UsageError(f"{str(err).removesuffix('.')} ({run.kept(fix=True)})." if run.kept() else str(err)) from None
    except Exception:
        if run.kept():
            print(f"pluie-reward score: failed; {run.kept()}.", file=sys.stderr)
        raise
    return 0


class _Run:
    """One ``score`` run writing its records, chunk after chunk, and able to say what it kept."""

    def __init__(self, args: argparse.Namespace, judge: Any, template: Template, records: Records,
                 values: dict[str, list[Any]], size: int) -> None:
        self.args, self.judge, self.template, self.records, self.values, self.size = args, judge, template, records, values, size
        self.written = 0
        self.started = False  # the output is checked and being written
        self.saved: list[dict[str, Any]] = []  # the rows an interrupted run wrote (--resume)
        self.first = 0  # the first row to score: the start of the chunk holding the last saved row
        self.out: Any = None  # where the rows go (write's ``out``): the --output file, or standard output
        self.bar = Progress(0, "scoring", enabled=False)  # its progress line

    def write(self, out: Any, done: Sequence[dict[str, Any]] = ()) -> None:
        """Score and write every row after ``done`` (rows an interrupted run wrote) with :func:`score_items`, this
        run as its store; the chunk holding the last of them is scored again and must give the saved results."""
        self.out = out
        if done:
            _check_done(list(done), self.records, out.partial)
        self.saved, self.written, self.started = list(done), len(done), True
        self.first = (len(done) - 1) // self.size * self.size if done else 0  # chunks fall where a clean run's did
        options = {"details": True, "threshold": self.args.threshold, "truncate": not self.args.no_truncate}
        condition = Condition("", self.template, self.values, options=options)  # nameless: errors name the row only
        items = [{"i": i, "h": "", "row": self.records.where(i)} for i in range(len(self.records))]
        self.bar = Progress(len(self.records), "scoring", initial=self.written,
                            enabled=self.args.input is not None and not self.args.no_progress)
        with self.bar:
            try:
                score_items(self.judge, [condition], items, store=self, chunk_size=self.size, progress=False, keep=False)
            except (TypeError, ValueError) as err:
                raise UsageError(str(err)) from None

    def done(self, index: int, item_hash: str = "") -> dict[str, Any] | None:
        """A row before the chunk to score again counts as scored (for :func:`score_items`)."""
        return self.saved[index] if index < self.first else None

    def add(self, lines: Sequence[dict[str, Any]]) -> None:
        """Write one scored chunk (for :func:`score_items`), checking the rows saved before against it."""
        rows = []
        for line in lines:
            i, result = line["i"], line["scores"][""]
            row = self.records.rows[i]
            if i < len(self.saved):
                if not _close({k: self.saved[i].get(k) for k in result}, result):
                    raise _Refused(
                        f"{self.out.partial} line {i + 1} was scored with other settings (judge, "
                        f"template, threshold...): it holds {({k: self.saved[i].get(k) for k in result})}, this run gives "
                        f"{result}. Resume with the same options, or pass --overwrite to start again.")
                continue
            if set(result) & set(row):  # _check_columns prevents it; never replace an input column
                raise UsageError(f"{self.records.where(i)}: column(s) {sorted(set(result) & set(row))} would be replaced.")
            rows.append({**row, **result})
        self.out.add(rows)
        self.written += len(rows)
        self.bar.update(len(rows))

    def kept(self, fix: bool = False) -> str:
        """What the run kept and how to go on ("" before it started writing); ``fix``: after fixing the input."""
        output, total = self.args.output, len(self.records)
        if not self.started:
            return ""
        if output is None:
            return f"{self.written} of {total} item(s) were written to standard output"
        if self.out.stream:
            return f"{self.written} of {total} item(s) were written to {output}"
        if not self.written:
            return f"nothing was written; {output} is untouched"
        return (f"{self.written} of {total} item(s), in input order, are kept in {self.out.partial} "
                f"({output} is untouched); {'fix it, then ' if fix else ''}run the same command with --resume to score the rest")


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
    try:
        tokenizer = load_tokenizer(args.model, default_adapter=default_adapter_dir())
    except OSError as err:  # transformers: no such folder, not on the Hub, no network
        if args.model is None:
            raise
        if Path(args.model).exists():
            raise UsageError(f"--model {args.model}: cannot read its tokenizer ({str(err).strip().splitlines()[0]}).") from None
        raise model_not_found(args.model, err) from None
    bound = BoundTemplate(template, tokenizer, allow_multi_token=True, chat_template_kwargs=keywords)  # AnswerTokenError: exit 2
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
