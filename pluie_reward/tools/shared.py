"""What the tools' library code shares with the command line, below it: :class:`UsageError`, the
default chunk size of a scoring loop and the re-location of a ``Judge.score`` error to its input row.

Also the checks of command-line numbers (:func:`finite_positive`, :func:`finite_number`).

The command line (:mod:`pluie_reward.tools.cli`) re-exports these names; a tool's library code
(evaluation tasks, benchmarks) imports them from here, never from the command-line package.
"""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

from ..core.errors import PluieError


class UsageError(PluieError):
    """Bad input from the command line: printed without a traceback, exit code 2."""


def auto_chunk_size(judge: Any, prompts_per_item: int = 1) -> int:
    """Items per ``Judge.score`` call when ``--chunk-size`` is not given: about one forward batch of
    prompts (the judge's ``batch_tokens`` / 64, so 8 prompts on CPU and 64 on GPU; an item with two
    candidates is two prompts), so that progress bars and saved scores move often without starving
    the batcher.

    Example:
        >>> auto_chunk_size(None), auto_chunk_size(None, prompts_per_item=2)
        (8, 4)
    """
    tokens = judge.engine.batch_tokens if judge is not None else 512
    prompts = int(tokens) // 64 if isinstance(tokens, int) else 8
    return max(1, prompts // max(1, prompts_per_item))


_ITEM = re.compile(r"\bitem (\d+)\b")


def relocate(message: str, rows: Sequence[str], per_item: int = 1) -> str:
    """Rewrite "item k" of a ``Judge.score`` error (an index into one call) as the input row it came
    from; ``per_item`` calls entries per row (2 when A and B are scored together).

    Example:
        >>> relocate("field 'hypothesis', item 3: expected a string", ["a.jsonl line 8", "a.jsonl line 9"], per_item=2)
        "field 'hypothesis', a.jsonl line 9: expected a string"
    """
    def swap(match: re.Match) -> str:
        k = int(match.group(1)) // per_item
        return rows[k] if k < len(rows) else match.group(0)

    return _ITEM.sub(swap, message)


def finite_positive(value: float | None, option: str, *, zero_ok: bool = False) -> float | None:
    """A command-line number checked before anything loads: finite and > 0 (>= 0 with ``zero_ok``);
    ``None`` (an option left unset) passes.

    Args:
        value: the parsed option.
        option: its flag, for the message (``--max-body-mb``).
        zero_ok: whether 0 means something (``--max-wait-ms 0``: no waiting).

    Returns:
        ``value``.

    Raises:
        UsageError: naming the option (exit 2).

    Example:
        >>> finite_positive(2.5, "--max-body-mb"), finite_positive(0, "--max-wait-ms", zero_ok=True)
        (2.5, 0)
        >>> finite_positive(float("nan"), "--max-body-mb")
        Traceback (most recent call last):
        ...
        pluie_reward.tools.shared.UsageError: --max-body-mb must be a finite number > 0, got nan.
    """
    if value is None:
        return None
    if not (math.isfinite(value) and (value >= 0 if zero_ok else value > 0)):
        raise UsageError(f"{option} must be a finite number {'>=' if zero_ok else '>'} 0, got {value}.")
    return value


def finite_number(value: float | None, option: str) -> float | None:
    """A command-line number that may take any finite value (``--threshold``); ``None`` passes.

    Example:
        >>> finite_number(-1.5, "--threshold")
        -1.5
        >>> finite_number(float("inf"), "--threshold")
        Traceback (most recent call last):
        ...
        pluie_reward.tools.shared.UsageError: --threshold must be a finite number, got inf.
    """
    if value is not None and not math.isfinite(value):
        raise UsageError(f"{option} must be a finite number, got {value}.")
    return value
