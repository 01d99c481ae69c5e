"""What the tools' library code shares with the command line, below it: :class:`UsageError`, the
default chunk size of a scoring loop, the re-location of a ``Judge.score`` error to its input row,
and the ``type=`` checks of numeric command-line options (:func:`finite_float`, :func:`positive_float`,
:func:`nonneg_float`, :func:`positive_int`, :func:`nonneg_int`, :func:`port`), which refuse ``nan``, ``inf`` and
out-of-range numbers while the command line is parsed, so before anything loads or binds (exit
code 2, the message names the option).

The command line (:mod:`pluie_reward.tools.cli`) re-exports these names; a tool's library code
(evaluation tasks, benchmarks) imports them from here, never from the command-line package.
"""

from __future__ import annotations

import argparse
import math
import re

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]
from typing import Any, AnyStr, Iterator, Sequence

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


def lock_file(fd: int) -> bool:
    """Take an exclusive lock (``flock``) on an open file or folder for as long as it stays open, or
    say ``False`` at once when another process holds it. The lock goes with the process, so a killed
    run leaves none behind. (Where ``fcntl`` is missing, always ``True``.)

    Example:
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> one, two = os.open(folder, os.O_RDONLY), os.open(folder, os.O_RDONLY)
        >>> lock_file(one), lock_file(two)
        (True, False)
        >>> os.close(one); lock_file(two)
        True
        >>> os.close(two)
    """
    if fcntl is None:  # pragma: no cover
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def json_lines(data: AnyStr) -> Iterator[tuple[AnyStr, int]]:
    r"""The lines of JSON Lines text (or bytes), each with the offset just past its end: split on
    ``"\n"`` only, a ``"\r"`` before it dropped (CRLF files). Not ``str.splitlines()``, which also
    breaks at U+2028, U+2029, ``\x85``, ``\x0b``, ``\x0c`` and ``\x1c``-``\x1e``: JSON strings may
    hold the first three raw (``json.dumps(..., ensure_ascii=False)`` writes them so).

    Example:
        >>> [line for line, _ in json_lines('{"a": "x\u2028y"}\r\n{"b": 2}\n')]
        ['{"a": "x\u2028y"}', '{"b": 2}']
        >>> list(json_lines(b'{"a": 1}\n{"b"'))
        [(b'{"a": 1}', 9), (b'{"b"', 13)]
    """
    newline = "\n" if isinstance(data, str) else b"\n"
    start = 0
    while start < len(data):
        cut = data.find(newline, start)  # type: ignore[arg-type]
        end = len(data) if cut < 0 else cut + 1
        line = data[start:cut if cut >= 0 else end]
        if line.endswith("\r" if isinstance(data, str) else b"\r"):  # type: ignore[arg-type]
            line = line[:-1]
        yield line, end
        start = end


# numeric command-line options --------------------------------------------------------------------
def _number(text: str, kind: type) -> float | int:
    try:
        value = kind(text)
    except (TypeError, ValueError):
        what = "a whole number" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}.") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}.")
    return value


def finite_float(text: str) -> float:
    """``type=`` of a numeric option that may be any finite number (a threshold, a log-ratio).

    Example:
        >>> finite_float("-1.5")
        -1.5
        >>> finite_float("nan")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be a finite number, got 'nan'.
    """
    return float(_number(text, float))


def positive_float(text: str) -> float:
    """``type=`` of a numeric option that must be a finite number > 0 (a rate, a size, a duration).

    Example:
        >>> positive_float("0.5")
        0.5
        >>> positive_float("0")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be a finite number > 0, got '0'.
    """
    value = float(_number(text, float))
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}.")
    return value


def nonneg_float(text: str) -> float:
    """``type=`` of a numeric option that must be a finite number >= 0 (a margin, a penalty, a share).

    Example:
        >>> nonneg_float("0")
        0.0
        >>> nonneg_float("inf")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be a finite number, got 'inf'.
    """
    value = float(_number(text, float))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}.")
    return value


def positive_int(text: str) -> int:
    """``type=`` of a count that must be a whole number >= 1 (items, steps, tokens).

    Example:
        >>> positive_int("8")
        8
        >>> positive_int("-1")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be a whole number >= 1, got '-1'.
    """
    value = int(_number(text, int))
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}.")
    return value


def nonneg_int(text: str) -> int:
    """``type=`` of a whole number >= 0 (a seed; a count where 0 means "skip").

    Example:
        >>> nonneg_int("0")
        0
    """
    value = int(_number(text, int))
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0, got {text!r}.")
    return value


def port(text: str) -> int:
    """``type=`` of a TCP port to listen on: a whole number in 1..65535.

    Example:
        >>> port("8000")
        8000
        >>> port("99999")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be a port between 1 and 65535, got '99999'.
    """
    value = int(_number(text, int))
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port between 1 and 65535, got {text!r}.")
    return value
