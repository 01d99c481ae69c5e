"""``pluie-reward plot-run DIR``: the reward curves of a training run as one PNG."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..cli.registry import command
from ..shared import positive_int
from . import plot_run, read_run, summary


def _configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("directory", type=Path, help="a Trainer output_dir (trainer_state.json, pluie/step-*.jsonl)")
    p.add_argument("-o", "--output", type=Path, default=None, help="PNG to write (default DIR/run_curves.png)")
    p.add_argument("--title", default=None, help="figure title (default: the directory's name)")
    p.add_argument("--window", type=positive_int, default=None,
                   help="steps of the trailing mean drawn over noisy curves (default: a tenth of the steps)")


@command("plot-run", _configure)
def plot_run_command(args: argparse.Namespace) -> int:
    """Plot a training run's rewards, accept rates and PLUIE evaluations (trainer_state.json + pluie/ tables)."""
    run = read_run(args.directory)  # FileNotFoundError, and plot_run's missing matplotlib: exit 2 with the message (main)
    path = plot_run(run, args.output, title=args.title, window=args.window)
    print(*summary(run), f"wrote {path}", sep="\n")
    return 0
