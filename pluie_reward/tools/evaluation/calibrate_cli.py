"""``pluie-reward calibrate``: labelled items in, ``calibration.json`` out (Platt scaling of PLUIE,
``p = sigmoid(a * PLUIE + b)``, fitted by log loss with a seeded held-out split for the before/after report).

The scores are either read from a column (``--score-column``: e.g. ``pluie-reward score`` output,
or an evaluation's ``scores.jsonl`` with ``--score-column scores.PLUIE``) or computed here by the
judge (``--model``/``--adapter``) on the template's fields. Everything about the input is checked
before the judge loads; bad input exits with code 2 and a message naming the row.

Example (shell)::

    pluie-reward calibrate -i labelled.jsonl --column source=s1 --column hypothesis=s2 -o out/judge-adapter
    pluie-reward calibrate -i out/cls/scores.jsonl --score-column scores.PLUIE -o calibration.json
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ...core.calibration import FILE_NAME
from ...core.template import load_template
from ..cli.common import add_config_arguments, add_judge_arguments, config_from_args, judge_from_args
from ..cli.output import OutputFile, check_output_file
from ..cli.records import read_table
from ..cli.registry import command
from ..shared import UsageError, log_ratio, positive_int
from .calibration import CalibrationConfig, fit_calibration, heldout_split, p_yes
from .cli import INPUT_HELP, _convert, _data_options, _load_generic
from .metrics import binary_label, require_metric_libraries
from ..report import markdown_table, number
from .scoring import score_in_chunks


def _configure(p: argparse.ArgumentParser) -> None:
    data = p.add_argument_group("data")
    _data_options(data, "FIELD=COLUMN", "read template FIELD from COLUMN when scoring here (default: the column named like the field)",
                  "--input", "-i", input_help=f"labelled items: {INPUT_HELP}")
    data.add_argument("--label-column", default="label", help="column with the binary label (default label)")
    data.add_argument("--score-column", default=None, metavar="C",
                      help="read the PLUIE log-ratios from column C (nested: a.b) instead of scoring with a judge")
    data.add_argument("--template", "-t", default="para-fs",
                      help="the Yes/No template scored (and recorded in the file) (default para-fs)")
    data.add_argument("--judge-name", default=None,
                      help="with --score-column: the judge the scores came from, recorded in the file")
    add_config_arguments(p.add_argument_group("fit (CalibrationConfig)"), CalibrationConfig)
    out = p.add_argument_group("output")
    out.add_argument("--output", "-o", type=Path, required=True,
                     help="calibration file to write, or a folder (e.g. an adapter folder) to write calibration.json into")
    out.add_argument("--overwrite", action="store_true", help="replace an existing calibration file")
    out.add_argument("--plot", action="store_true", help="also write a reliability diagram (PNG) beside the file")
    out.add_argument("--chunk-size", type=positive_int, default=None, help="items per Judge.score call when scoring here")
    out.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    add_judge_arguments(p)


@command("calibrate", _configure)
def calibrate_command(args: argparse.Namespace) -> int:
    """Fit p = sigmoid(a * PLUIE + b) on labelled items (held-out before/after report) and write calibration.json."""
    require_metric_libraries()
    config = config_from_args(CalibrationConfig, args)
    output = args.output  # a folder (new when it has no suffix): calibration.json inside
    target = output / FILE_NAME if output.is_dir() or (not output.suffix and not output.exists()) else output
    check_output_file(target, "--output", inputs=[args.input], overwrite=args.overwrite)
    template = load_template(args.template)
    if template.kind != "binary":
        raise UsageError(f"--template {args.template}: a calibration maps PLUIE, the log-ratio of a Yes/No template; "
                         f"{template.name!r} has the answers {list(template.labels)}.")
    if args.score_column is not None:
        if args.column:
            raise UsageError("--column chooses the template's fields for scoring here; with --score-column nothing is scored.")
        records = read_table(args.input, args.split).limit(args.limit)
        records.require({"labels": args.label_column, "scores": args.score_column}, "Use --label-column / --score-column.")
        labels = _convert(records, args.label_column, binary_label, "binary label")
        scores = _convert(records, args.score_column, log_ratio, "PLUIE score")
        judge_name = args.judge_name
    else:
        if args.judge_name:
            raise UsageError("--judge-name records where --score-column's scores came from; here the judge is --model.")

        _, records, values, _, _ = _load_generic(args, {"labels": args.label_column})
        labels = _convert(records, args.label_column, binary_label, "binary label")
        judge = judge_from_args(args)
        scores = score_in_chunks(judge, template, values, len(records), chunk_size=args.chunk_size,
                                 progress=not args.no_progress, desc="scoring")
        judge_name = judge.name
    try:
        calibration = fit_calibration(scores, labels, config=config, template=template.name, judge=judge_name)
    except ValueError as err:
        raise UsageError(f"{args.input}: {err}") from None
    with OutputFile(target) as out:  # written beside, renamed into place when complete
        calibration.save(out.partial)
        out.commit()
    print(summary(calibration))
    if args.plot:
        import numpy as np

        from .plots import plot_reliability  # lazy: CLI start-up

        s, y = np.asarray(scores), np.asarray(labels)
        _, held = heldout_split(len(s), config.heldout_fraction, config.seed)
        part = held if held.size else np.arange(len(s))
        where = "held-out" if held.size else "fit (in-sample)"
        png = plot_reliability(
            p_yes(s[part]), y[part], target.with_suffix(".png"), n_bins=config.n_bins,
            title=f"judge {judge_name or '?'}, template {template.name}: {part.size} {where} items",
            name="p_yes = sigmoid(PLUIE) (before)",
            calibrated=([calibration(v) for v in s[part]], y[part]),
            calibrated_name=f"sigmoid({calibration.a:.2f} · PLUIE + {calibration.b:.2f}) (after)")
        print(f"reliability diagram: {png}")
    print(f"\nwrote {target}; apply it with Judge.load(..., calibration={str(target)!r}) "
          "(details records gain p_calibrated) or PluieReward(..., output='calibrated').")
    return 0


def summary(calibration: Any) -> str:
    """The Markdown the command prints: the fit, then ECE, Brier and log loss before and after.

    Example:
        >>> from pluie_reward.tools.evaluation.calibration import fit_calibration
        >>> print(summary(fit_calibration([-2, -1, 0, 1, 2, 3, -3, 0.5, 1.5, -0.5], [0, 1, 0, 1, 0, 1, 0, 1, 1, 0])).splitlines()[0])
        Platt fit p = sigmoid(a · PLUIE + b): a = 1.880, b = 1.484 on 7 items; template ?, judge ?.
    """
    c = calibration
    lines = [f"Platt fit p = sigmoid(a · PLUIE + b): a = {c.a:.3f}, b = {c.b:.3f} on {c.n_fit} items; "
             f"template {c.template or '?'}, judge {c.judge or '?'}."]
    part = "heldout" if "heldout" in c.metrics else "fit"
    m = c.metrics[part]
    what = (f"{c.n_heldout} held-out items (random split, seed {c.seed})" if part == "heldout"
            else f"the {c.n_fit} fit items (in-sample: --heldout 0)")
    rows = [[label, *(number(m[k][x], 4) for x in ("ece", "mce", "brier", "log_loss"))]
            for k, label in (("before", "p_yes = sigmoid(PLUIE)"), ("after", "calibrated p"))]
    lines += ["", f"On {what}, ECE over {c.n_bins} equal-width bins (lower is better):", "",
              markdown_table(["probability", "ECE", "max bin gap", "Brier", "log loss"], rows, align="lrrrr")]
    return "\n".join(lines)
