"""The results layer of the tools: Markdown tables, number cells, and the JSON + Markdown pair a run writes.

Example:
    >>> print(markdown_table(["a", "b"], [["1", "2"]]))
    | a | b |
    |---|---|
    | 1 | 2 |
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Callable, Sequence


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str | None = None, title: str | None = None) -> str:
    """A GitHub-flavoured Markdown table (``|`` inside cells is escaped), after its ``title`` and a blank line if given.

    Args:
        headers: the column names.
        rows: the cells, one sequence per row.
        align: one letter per column, ``l`` (default) or ``r`` (numbers), e.g. ``"lrr"``.
        title: a line above the table (the bench sections': what was measured, how).

    Returns:
        The table's lines joined by newlines.

    Example:
        >>> print(markdown_table(["engine", "pairs/s"], [["vllm", "5.69"]], align="lr"))
        | engine | pairs/s |
        |---|---:|
        | vllm | 5.69 |
    """

    def cell(value: Any) -> str:
        return str(value).replace("|", "\\|")

    align = align or "l" * len(headers)
    if len(align) != len(headers) or set(align) - {"l", "r"}:
        raise ValueError(f"align needs one of 'l'/'r' per column ({len(headers)}), got {align!r}.")
    rules = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "|".join(rules) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(([title, ""] if title else []) + lines)


def cell(x: Any, spec: str = ".3g", none: str = "-") -> str:
    """A table cell: a number in ``spec``, ``none`` for a value not measured or undefined (None or NaN: never
    "nan"), anything else as text. The one number formatter of the tools' tables (:func:`number` too).

    Example:
        >>> cell(0.7058, ".2f"), cell(float("nan"), ".1f"), cell(None), cell("vllm")
        ('0.71', '-', '-', 'vllm')
    """
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return none
    return format(x, spec) if isinstance(x, (int, float)) else str(x)


def number(value: float | None, digits: int = 2) -> str:
    """A rounded number, or "N/A" for a metric that is undefined (None or NaN: :func:`cell`).

    Example:
        >>> number(0.7058), number(None), number(float("nan"))
        ('0.71', 'N/A', 'N/A')
    """
    return cell(value, f".{digits}f", "N/A")


def percent(value: float | None) -> str:
    """A fraction as a percentage with one decimal, or "–" when absent.

    Example:
        >>> percent(0.1234), percent(None)
        ('12.3%', '–')
    """
    return "–" if value is None else f"{100 * value:.1f}%"


def write_outputs(directory: str | Path, results: Any, markdown: str | None = None, *,
                  names: tuple[str, str] = ("results.json", "results.md"), indent: int = 2,
                  default: Callable[[Any], Any] | None = None) -> tuple[Path, Path | None]:
    """Write a run's results: the JSON file and, when ``markdown`` is given, the Markdown file beside it.

    Args:
        directory: the run folder (created if needed).
        results: what the JSON file holds (JSON-serialisable, or through ``default``).
        markdown: the report's text (a final newline is added when missing); ``None`` writes no Markdown.
        names: the two files' names inside ``directory``.
        indent: the JSON indentation.
        default: ``json.dumps``'s ``default`` for values JSON cannot hold (numpy numbers...).

    Returns:
        The two paths written (the second ``None`` without ``markdown``).

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> json_path, md_path = write_outputs(folder, {"auc": 0.75}, "| auc |")
        >>> json.loads(json_path.read_text()), md_path.read_text()
        ({'auc': 0.75}, '| auc |\\n')
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    json_path = folder / names[0]
    json_path.write_text(json.dumps(results, indent=indent, ensure_ascii=False, default=default) + "\n", encoding="utf-8")
    if markdown is None:
        return json_path, None
    md_path = folder / names[1]
    md_path.write_text(markdown if markdown.endswith("\n") else markdown + "\n", encoding="utf-8")
    return json_path, md_path
