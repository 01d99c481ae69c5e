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
        sp = sub.add_parser(name, help=(run.__doc__ or "").strip().splitlines()[0])
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
    except UsageError as err:
        print(f"pluie-reward {args.command}: error: {err}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ModuleNotFoundError, ValueError, TypeError) as err:
        print(f"pluie-reward {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
