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


def add_judge_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every judge-using command shares."""
    parser.add_argument("--model", default=None, help="HF id, local folder or .gguf file (default: embedded SmolLM2-135M-Instruct)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, mps (default: best available)")
    parser.add_argument("--dtype", default=None, help="float32 (default), bfloat16, float16, auto")
    parser.add_argument("--batch-tokens", type=int, default=None, help="token budget of one batch (default: 512 on CPU, 4096 on GPU)")


def judge_from_args(args: argparse.Namespace) -> Any:
    """Load the judge the shared options describe."""
    from ...core.judge import Judge

    return Judge.load(args.model, device=args.device, dtype=args.dtype, batch_tokens=args.batch_tokens)


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
    """Field -> input column, from repeated ``--column FIELD=COLUMN`` (default: same name); a thin
    wrapper around :func:`pluie_reward.core.fields.map_fields`, the mapping every integration uses."""
    from ...core.fields import map_fields, parse_assignments

    try:
        return dict(map_fields(fields, parse_assignments(args.column, "--column"), setting="--column").columns)
    except ValueError as err:
        raise UsageError(str(err)) from None
