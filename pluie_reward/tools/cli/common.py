"""What every ``pluie-reward`` sub-command shares: the command registry, usage errors, the judge options
and reading input files. Sub-commands live in their own modules and register here with :func:`command`."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence


COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


class UsageError(Exception):
    """Bad input from the command line: printed without a traceback, exit code 2."""


def command(name: str, configure: Callable[[argparse.ArgumentParser], None]) -> Callable:
    """Register a sub-command (its argument setup and its function returning an exit code)."""

    def wrap(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = (configure, run)
        return run

    return wrap


def add_judge_arguments(parser: argparse.ArgumentParser, adapter: bool = True) -> None:
    """The options every judge-using command shares (``adapter``: also ``--adapter DIR``)."""
    parser.add_argument("--model", default=None, help="HF id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
    if adapter:
        parser.add_argument("--adapter", default=None, metavar="DIR",
                            help="a judge adapter folder (pluie-reward tune --output DIR) put on --model, active while scoring")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps (default: best available)")
    parser.add_argument("--dtype", default=None, help="float32 (default), bfloat16, float16, auto")
    parser.add_argument("--batch-tokens", type=int, default=None, help="token budget of one batch (default: 512 on CPU, 4096 on GPU)")


def judge_from_args(args: argparse.Namespace) -> Any:
    """Load the judge the shared options describe."""
    from ...core.judge import Judge

    adapter = getattr(args, "adapter", None)
    extra = {"adapter": adapter} if adapter is not None else {}
    return Judge.load(args.model, device=args.device, dtype=args.dtype, batch_tokens=args.batch_tokens, **extra)


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
