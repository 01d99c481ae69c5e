"""The sub-command registry: a command module registers its argument setup and its function with
:func:`command`; :func:`~pluie_reward.tools.cli.main.main` builds one parser from :data:`COMMANDS`.

It imports nothing of the package, so that importing the command line loads no judge.

Example:
    >>> import argparse
    >>> @command("hello", lambda p: p.add_argument("--name", default="world"))
    ... def hello(args: argparse.Namespace) -> int:
    ...     print(f"hello {args.name}")
    ...     return 0
    >>> configure, run = COMMANDS.pop("hello")
    >>> run is hello
    True
"""

from __future__ import annotations

import argparse
from typing import Callable

COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace], int]]] = {}


def command(name: str, configure: Callable[[argparse.ArgumentParser], None]) -> Callable:
    """Register a sub-command (its argument setup and its function returning an exit code)."""

    def wrap(run: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
        COMMANDS[name] = (configure, run)
        return run

    return wrap
