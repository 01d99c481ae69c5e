"""The ``pluie-reward`` console script: one parser with every sub-command."""

from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys
from typing import Any, Sequence

from ...common.threads import fit_threads
from ..shared import UsageError
from .output import StandardOutput
from .registry import COMMANDS


# Modules whose import registers their sub-commands (cheap: heavy imports happen inside the commands).
COMMAND_MODULES = (
    "pluie_reward.tools.cli.score",
    "pluie_reward.tools.evaluation.cli",
    "pluie_reward.tools.evaluation.calibrate_cli",
    "pluie_reward.tools.server.cli",
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
    "bench": "pluie-reward bench methods --pairs 32",
    "probe": "pluie-reward probe --input sources.jsonl --json probe.json",
    "plot-run": "pluie-reward plot-run out/grpo -o curves.png",
    "tune": "pluie-reward tune --input labelled.jsonl --label-column label --output out/judge-adapter",
}


class CommandParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose commands refuse an unknown option themselves, with their own usage and the closest
    option they have (argparse leaves it to the top-level parser); sub-commands' parsers are of this class too.

    Example:
        >>> import contextlib, io
        >>> parser = CommandParser(prog="tool")
        >>> score = parser.add_subparsers(dest="command").add_parser("score")
        >>> _ = score.add_argument("--output")
        >>> err = io.StringIO()
        >>> with contextlib.redirect_stderr(err):
        ...     try:
        ...         parser.parse_args(["score", "--ouptut", "x"])
        ...     except SystemExit as done:
        ...         print(done.code)
        2
        >>> print(err.getvalue().splitlines()[-1])
        tool score: error: unrecognized arguments: --ouptut x (did you mean --output?)
        >>> with contextlib.redirect_stderr(err):
        ...     try:
        ...         parser.parse_args(["scor"])
        ...     except SystemExit as done:
        ...         print(done.code)
        2
        >>> print(err.getvalue().splitlines()[-1])  # doctest: +ELLIPSIS
        tool: error: argument command: invalid choice: 'scor' (choose from ...score...) (did you mean score?)
    """

    def error(self, message: str) -> Any:
        """argparse's refusal, with the closest command when a command's name is mistyped."""
        wrong = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if wrong:
            close = difflib.get_close_matches(wrong.group(1), [c.strip(" '") for c in wrong.group(2).split(",")], n=1)
            message += f" (did you mean {close[0]}?)" if close else ""
        super().error(message)

    def add_subparsers(self, **kwargs: Any) -> Any:
        self.has_commands = True
        return super().add_subparsers(**kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extra = super().parse_known_args(args, namespace)
        if extra and not getattr(self, "has_commands", False):  # a command's own parser: its options are all here
            known = list(self._option_string_actions)  # argparse has no public listing of a parser's options
            close = [m for a in extra if a.startswith("-") for m in difflib.get_close_matches(a.split("=")[0], known, n=1)]
            hint = f" (did you mean {' or '.join(dict.fromkeys(close))}?)" if close else ""
            self.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
        return parsed, extra


def build_parser() -> argparse.ArgumentParser:
    """The ``pluie-reward`` parser with every registered sub-command (each with ``run`` as default)."""
    for module in COMMAND_MODULES:
        importlib.import_module(module)
    parser = CommandParser(prog="pluie-reward", description="PLUIE: an LLM judge read from its Yes/No logits.")
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
    fit_threads()  # before torch loads (in the command): on a busy CPU, sleeping threads, one per free core
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help (0) or an option argparse refused (2, its message already printed)
        return done.code if isinstance(done.code, int) else 2
    stdout, sys.stdout = sys.stdout, StandardOutput(sys.stdout)  # a print to a full device is an OutputError too
    try:
        code = args.run(args)
        sys.stdout.flush()  # what is still buffered: a full or closed standard output fails here, not at exit
        return code
    except BrokenPipeError:  # e.g. piped into `head`: stop quietly, with the status of a Unix tool SIGPIPE stopped
        _drop_stdout()
        return 128 + 13
    except KeyboardInterrupt:  # a command that keeps work says so itself; the others stop in one line
        print(f"pluie-reward {args.command}: interrupted.", file=sys.stderr)
        return 130
    except (UsageError, FileNotFoundError, ModuleNotFoundError, ValueError, TypeError) as err:
        if getattr(err, "stdout", False):
            _drop_stdout()
        print(f"pluie-reward {args.command}: error: {err}", file=sys.stderr)
        return 2
    finally:
        sys.stdout = stdout


def _drop_stdout() -> None:
    """Point standard output at the null device: what is still buffered is dropped at exit instead of failing again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
