"""Command line: ``pluie-reward score`` and ``pluie-reward templates`` (other commands register here too)."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from .template import builtin_template_names, load_template

COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


class UsageError(Exception):
    """Bad input from the command line: printed without a traceback, exit code 2."""


def command(name: str, configure: Callable[[argparse.ArgumentParser], None]) -> Callable:
    """Register a sub-command (its argument setup and its function returning an exit code)."""

    def wrap(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = (configure, run)
        return run

    return wrap


def add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every judge-using command shares."""
    parser.add_argument("--model", default=None, help="HF id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps (default: best available)")
    parser.add_argument("--dtype", default=None, help="float32 (default), bfloat16, float16, auto")
    parser.add_argument("--batch-tokens", type=int, default=None, help="token budget of one batch (default: 512 on CPU, 4096 on GPU)")


def judge_from_args(args: argparse.Namespace) -> Any:
    """Load the judge the shared options describe."""
    from .judge import Judge

    return Judge.load(args.model, device=args.device, dtype=args.dtype, batch_tokens=args.batch_tokens)


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


def read_records(path: Path) -> list[dict[str, Any]]:
    """Rows of a .jsonl/.json-lines or .csv file as dicts."""
    if not path.is_file():
        raise UsageError(f"input file {str(path)!r} does not exist.")
    if path.suffix.lower() == ".csv":
        with path.open(newline="", encoding="utf-8") as handle:
            return list(csv.DictReader(handle))
    records = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise UsageError(f"{path}:{number}: not valid JSON ({err.msg}).") from None
    return records


def field_columns(args: argparse.Namespace, fields: Sequence[str]) -> dict[str, str]:
    """Field -> input column, from repeated ``--column FIELD=COLUMN`` (default: same name)."""
    mapping = {f: f for f in fields}
    for spec in args.column:
        if "=" not in spec:
            raise UsageError(f"--column expects FIELD=COLUMN, got {spec!r}.")
        field, column = spec.split("=", 1)
        if field not in mapping:
            raise UsageError(f"--column: {field!r} is not a field of the template; fields: {list(fields)}.")
        mapping[field] = column
    return mapping


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
@command("templates", lambda p: p.add_argument("--verbose", "-v", action="store_true", help="print the chat turns too"))
def templates_command(args: argparse.Namespace) -> int:
    """List the built-in templates with their fields, answers and language."""
    for name in builtin_template_names():
        t = load_template(name)
        optional = f" [optional: {', '.join(t.optional_fields)}]" if t.optional_fields else ""
        print(f"{name:12s} fields: {', '.join(t.fields)}{optional}; answers: {t.answers[0]}/{t.answers[1]}; "
              f"language: {t.language}\n{'':12s} {t.description}")
        if args.verbose:
            for m in t.messages:
                when = f" (when {m.when})" if m.when else ""
                print(f"{'':14s}({m.role}{when}): {m.content}")
    return 0


def _load_plugins() -> None:
    """Import modules that register further sub-commands (eval, serve, bench) if they exist."""
    import importlib

    for module in ("pluie_reward.evaluation.cli", "pluie_reward.server.cli", "pluie_reward.bench"):
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as err:
            if err.name is None or not module.startswith(err.name):
                raise


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pluie-reward`` console script."""
    _load_plugins()
    parser = argparse.ArgumentParser(prog="pluie-reward", description="PLUIE: an LLM judge read from its Yes/No logits.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (configure, run) in COMMANDS.items():
        sp = sub.add_parser(name, help=(run.__doc__ or "").strip().splitlines()[0])
        configure(sp)
        sp.set_defaults(run=run)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except UsageError as err:
        print(f"pluie-reward {args.command}: error: {err}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ModuleNotFoundError, ValueError, TypeError) as err:
        print(f"pluie-reward {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
