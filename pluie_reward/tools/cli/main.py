"""The ``pluie-reward`` console script: one parser with every sub-command."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from ..shared import UsageError
from .registry import COMMANDS


# Modules whose import registers their sub-commands (cheap: heavy imports happen inside the commands).
COMMAND_MODULES = (
    "pluie_reward.tools.cli.score",
    "pluie_reward.tools.evaluation.cli",
    "pluie_reward.tools.evaluation.calibrate_cli",
    "pluie_reward.tools.server.cli",
    "pluie_reward.tools.pool.cli",
    "pluie_reward.tools.bench.cli",
    "pluie_reward.tools.probe.cli",
    "pluie_reward.tools.runs.cli",
    "pluie_reward.tools.tune.cli",
)

# The last line of each command's --help: one invocation that runs as written (tests/test_cli_options.py parses each).
EXAMPLES = {
    "score": "pluie-reward score --input pairs.jsonl --output scored.jsonl",
    "templates": 'pluie-reward templates --render para-fs --field source="The cat sleeps."',
    "eval": "pluie-reward eval classification --input pairs.jsonl --label-column label",
    "calibrate": "pluie-reward calibrate --input labelled.jsonl --label-column label --output calibration.json",
    "serve": "pluie-reward serve --template para-fs --port 8000",
    "pool": "pluie-reward pool --replicas 2 --port 8000",
    "bench": "pluie-reward bench --pairs 32",
    "probe": "pluie-reward probe --input sources.jsonl --json probe.json",
    "plot-run": "pluie-reward plot-run out/grpo -o curves.png",
    "tune": "pluie-reward tune --input labelled.jsonl --label-column label --output out/judge-adapter",
}


def _load_commands() -> None:
    import importlib

    for module in COMMAND_MODULES:
        importlib.import_module(module)


def build_parser() -> argparse.ArgumentParser:
    """The ``pluie-reward`` parser with every registered sub-command (each with ``run`` as default)."""
    _load_commands()
    parser = argparse.ArgumentParser(prog="pluie-reward", description="PLUIE: an LLM judge read from its Yes/No logits.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (configure, run) in COMMANDS.items():
        sp = sub.add_parser(name, help=(run.__doc__ or "").strip().splitlines()[0], epilog=f"Example: {EXAMPLES[name]}",
                            formatter_class=argparse.RawDescriptionHelpFormatter)  # the example on one line, as written
        configure(sp)
        sp.set_defaults(run=run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pluie-reward`` console script: the command's exit code (2 for bad usage,
    argparse's refusals of an option included; 130 after Ctrl-C; 141 when the reader of standard output
    left, e.g. ``| head``: quietly, as a Unix tool that SIGPIPE stops, never 0, which would say that
    everything was written)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help (0) or an option argparse refused (2, its message already printed)
        return done.code if isinstance(done.code, int) else 2
    try:
        return args.run(args)
    except BrokenPipeError:  # e.g. piped into `head`: stop quietly, with the status of a Unix tool SIGPIPE stopped
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush at exit
        return 128 + 13
    except KeyboardInterrupt:  # a command that keeps work says so itself; the others stop in one line
        print(f"pluie-reward {args.command}: interrupted.", file=sys.stderr)
        return 130
    except (UsageError, FileNotFoundError, ModuleNotFoundError, ValueError, TypeError) as err:
        print(f"pluie-reward {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
