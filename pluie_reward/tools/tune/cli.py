"""``pluie-reward tune``: labelled pairs or teacher log-ratios in, a judge adapter folder out.

Example (shell):
    pluie-reward tune --template para-direct --input pairs.jsonl --label-column label --output out/adapter
    pluie-reward tune --template para-direct --input pairs.jsonl --teacher-template para-fs --output out/distilled
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any, Sequence

from ...core.judge import Judge
from ...core.template import load_template
from ..cli.common import add_config_arguments, add_judge_arguments, config_from_args, field_columns, judge_from_args, read_records
from ..cli.output import check_output_dir
from ..cli.registry import command
from ..evaluation.metrics import _each
from ..shared import UsageError, log_ratio, positive_int
from .config import TuneConfig
from .data import PairData


def _configure(p: argparse.ArgumentParser) -> None:
    io = p.add_argument_group("data")
    io.add_argument("--template", "-t", default="para-direct",
                    help="the student's Yes/No template, name or YAML path (default para-direct)")
    io.add_argument("--input", "-i", type=Path, required=True, help="training pairs, .jsonl or .csv (one pair per line/row)")
    io.add_argument("--column", action="append", default=[], metavar="FIELD=COLUMN",
                    help="read FIELD from COLUMN (default: the column named like the field); also used for --eval-input")
    io.add_argument("--label-column", metavar="C", help="column of binary labels (true/false, 1/0, yes/no)")
    io.add_argument("--target-column", metavar="C", help="column of teacher log-ratios log p(yes) - log p(no)")
    io.add_argument("--teacher", metavar="MODEL", help="compute the targets with this judge (HF id, folder, .gguf, or "
                    "'embedded'); with only --teacher-template: the student's own base model")
    io.add_argument("--teacher-template", metavar="T", help="the teacher's template (default: --template)")
    io.add_argument("--eval-input", action="append", default=[], type=Path, metavar="FILE",
                    help="another evaluation set (same columns; labels/targets if present, else teacher targets), repeatable")
    io.add_argument("--eval-label-column", metavar="C", help="label column of the --eval-input files (default: --label-column)")
    io.add_argument("--limit", type=positive_int, default=None, metavar="N", help="use only the first N training pairs")
    io.add_argument("--output", "-o", type=Path, required=True, help="adapter folder to write (must be new or empty)")
    io.add_argument("--overwrite", action="store_true", help="write into a non-empty --output folder")
    # one option per TuneConfig field (the contrast terms need tune(contrast=...), which the command does not take)
    add_config_arguments(p.add_argument_group("training (TuneConfig)"), TuneConfig, exclude=("contrast_weight", "contrast_margin"))
    add_judge_arguments(p, adapter=False, base_model=True)  # --model: the student's base (default: embedded-base, as tune(None))


def _pairs(path: Path, records: Sequence[dict], mapping: dict[str, str], template: Any,
           label_column: str | None, target_column: str | None, required: bool) -> Any:
    """Pairs of one input file as :class:`PairData` (bad rows: a :class:`UsageError` naming file, row and column)."""
    columns = {}
    for field in template.fields:
        column = mapping[field]
        missing = [i for i, r in enumerate(records, 1) if r.get(column) in (None, "")]
        if missing:
            raise UsageError(f"{path}: column {column!r} (field {field!r}) is missing or empty in row {missing[0]}; "
                             f"columns: {sorted(records[0])}. Use --column {field}=COLUMN.")
        columns[field] = [str(r[column]) for r in records]
    for field in template.optional_fields:
        if any(mapping[field] in r for r in records):
            columns[field] = [None if r.get(mapping[field]) in (None, "") else str(r[mapping[field]]) for r in records]

    def read(column: str | None, what: str) -> list | None:
        if column is None:
            return None
        present = [column in r and r[column] not in (None, "") for r in records]
        if not any(present) and not required:
            return None
        if not all(present):
            raise UsageError(f"{path}: {what} column {column!r} is missing or empty in row {present.index(False) + 1}.")
        return [r[column] for r in records]

    labels = read(label_column, "label")
    raw_targets = read(target_column, "target")
    targets = None if raw_targets is None else _each(raw_targets, log_ratio, "targets", lambda i: f"{path}, row {i + 1}", UsageError)
    try:
        return PairData.build(template, columns, labels, targets)
    except ValueError as err:
        raise UsageError(f"{path}: {err}") from None


@command("tune", _configure)
def tune_command(args: argparse.Namespace) -> int:
    """Tune a judge adapter (LoRA) from labelled pairs or a teacher judge's log-ratios."""
    config = config_from_args(TuneConfig, args)  # the options' values checked before anything heavy loads
    from .report import metrics_table  # lazy: CLI start-up (it imports the evaluation plots)
    from .run import tune  # lazy: CLI start-up (torch, transformers)

    template = load_template(args.template)
    if args.target_column and args.teacher:
        raise UsageError("give the teacher targets either as --target-column or through --teacher, not both.")
    if args.target_column and args.teacher_template:
        raise UsageError("--teacher-template computes targets with a teacher; it does not go with --target-column.")
    if not (args.label_column or args.target_column or args.teacher or args.teacher_template):
        raise UsageError("nothing to learn from: give --label-column C, --target-column C or a teacher "
                         "(--teacher MODEL and/or --teacher-template T).")
    check_output_dir(args.output, "--output", empty=not args.overwrite)  # before training, not after it
    if args.teacher_template:
        load_template(args.teacher_template)  # fail now on an unknown template, before loading models
    mapping = field_columns(args, list(template.all_fields))
    records = read_records(args.input)[: args.limit]
    data = _pairs(args.input, records, mapping, template, args.label_column, args.target_column, required=True)
    eval_sets = {}
    for path in args.eval_input:
        name = path.stem
        if name in eval_sets or name == "held-out":
            raise UsageError(f"two evaluation sets are named {name!r}; give the files distinct names.")
        eval_sets[name] = _pairs(path, read_records(path), mapping, template, args.eval_label_column or args.label_column,
                                 args.target_column, required=False)

    student = judge_from_args(args)  # --model defaults to embedded-base: Judge.load(adapter=DIR) puts DIR on it
    # the judge's chat-template keywords go with the template (saved in template.yaml); its own keep precedence
    template = template.with_chat_template_kwargs({**student.chat_template_kwargs, **template.chat_template_kwargs})
    teacher = None
    if args.teacher:
        source = None if args.teacher == "embedded" else args.teacher
        teacher = Judge.load(source, device=args.device, dtype=args.dtype, batch_tokens=args.batch_tokens,
                             chat_template_kwargs=student.chat_template_kwargs)
    elif args.teacher_template:
        teacher = student  # the student's base with a better template; targets are computed before the adapter exists
    with contextlib.redirect_stdout(sys.stderr):  # the Trainer's log lines; stdout gets the report only
        result = tune(
            student.model, student.tokenizer,
            template=template,
            fields=data.columns, labels=data.labels, targets=data.targets,
            teacher=teacher, teacher_template=args.teacher_template,
            eval_sets=eval_sets, config=config, output_dir=args.output, overwrite=args.overwrite,
            model_name=student.name,
        )

    print(metrics_table(result.card["evaluation"]))
    print(f"\nadapter written to {result.output_dir} (card: README.md, pluie_tune.json; template: template.yaml)")
    return 0
