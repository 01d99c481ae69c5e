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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pluie-reward`` console script."""
    _load_commands()
    parser = argparse.ArgumentParser(prog="pluie-reward", description="PLUIE: an LLM judge read from its Yes/No logits.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (configure, run) in COMMANDS.items():
        sp = sub.add_parser(name, help=(run.__doc__ or "").strip().splitlines()[0])
        configure(sp)
        sp.set_defaults(run=run)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except BrokenPipeError:  # e.g. piped into `head`: stop quietly, as Unix tools do
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except UsageError as err:
        print(f"pluie-reward {args.command}: error: {err}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ModuleNotFoundError, ValueError, TypeError) as err:
        print(f"pluie-reward {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
